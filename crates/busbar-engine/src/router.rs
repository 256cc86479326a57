//! Method + path pattern → proxy.
//!
//! Patterns (parsed by [`busbar_config::pattern`]) are exact paths (`/service/X`), paths with
//! parameters (`/api/product/{id}`: a parameter matches one non-empty segment) and prefixes
//! (`/api/orders/*`: `/api/orders/` and everything below it, not `/api/orders`).
//!
//! Rules, in the order they apply:
//! - Literal segments match the path as sent (not percent-decoded), byte for byte; a
//!   trailing slash is significant (`/a/` is not `/a`).
//! - Parameter values are percent-decoded; a segment that does not decode to UTF-8 matches
//!   no parameter. When no route matches otherwise, a route that would have matched but for
//!   such a segment and accepts the method makes the request a bad one (400 naming the
//!   parameter), not an unknown path.
//! - A request path with a `.` or `..` segment (also percent-encoded) matches no parameter
//!   and no prefix, so it can never reach a back end through a pattern (exact paths cannot
//!   contain such segments: validation refuses them).
//! - The method is part of the match: the request goes to the most specific pattern whose
//!   proxy accepts its method. Compared segment by segment from the left, the first difference
//!   decides: a literal beats a parameter, a parameter beats the `*` of a prefix (so a longer
//!   prefix beats a shorter one).
//! - No pattern matches the path: 404. Some match it but none accepts the method: 405, with
//!   `Allow` listing the methods that would be accepted.
//!
//! Exact paths are looked up in a hash map first (the benchmark proxies are all exact), then
//! the other patterns are tried in specificity order, so the first match is the answer.

use std::collections::HashMap;
use std::sync::Arc;

use busbar_config::pattern::{PathPattern, Rank, Segment};
use http::Method;

/// One route: a pattern, the methods it accepts (empty: any) and what it leads to.
#[derive(Debug)]
struct Route<T> {
    pattern: PathPattern,
    ranks: Vec<Rank>,
    methods: Vec<Method>,
    target: T,
}

impl<T> Route<T> {
    fn accepts(&self, method: &Method) -> bool {
        self.methods.is_empty() || self.methods.contains(method)
    }
}

/// The routes of one listener.
#[derive(Debug)]
pub struct Router<T> {
    /// Exact paths: indexes into `exact_routes`, by path.
    exact: HashMap<String, Vec<usize>>,
    exact_routes: Vec<Route<T>>,
    /// Patterns with parameters or a prefix, most specific first.
    patterns: Vec<Route<T>>,
}

/// What a request path and method lead to.
#[derive(Debug)]
pub enum Match<'a, T> {
    /// A route accepts the request; `params` are the path parameters, in pattern order.
    Found {
        /// The route's target.
        target: &'a T,
        /// Matched parameters (percent-decoded).
        params: Vec<(Arc<str>, String)>,
    },
    /// The path matches but no route accepts the method.
    MethodNotAllowed {
        /// The most specific route matching the path.
        target: &'a T,
        /// Methods some matching route accepts, sorted, without duplicates.
        allow: Vec<Method>,
    },
    /// A route accepting the method matches the path but for a parameter whose segment does
    /// not percent-decode to UTF-8, and no other route matches.
    BadParameter {
        /// That route's target.
        target: &'a T,
        /// The parameter.
        name: Arc<str>,
    },
    /// No route matches the path.
    NotFound,
}

impl<T> Default for Router<T> {
    fn default() -> Self {
        Self {
            exact: HashMap::new(),
            exact_routes: Vec::new(),
            patterns: Vec::new(),
        }
    }
}

impl<T> Router<T> {
    /// Adds a route for `pattern` (checked by validation; a bad one is an error here too).
    pub fn add(&mut self, pattern: &str, methods: &[Method], target: T) -> Result<(), String> {
        let pattern = PathPattern::parse(pattern)?;
        let route = Route {
            ranks: pattern.ranks(),
            pattern,
            methods: methods.to_vec(),
            target,
        };
        if route.pattern.is_exact() {
            // An exact pattern is its own text.
            self.exact
                .entry(route.pattern.to_string())
                .or_default()
                .push(self.exact_routes.len());
            self.exact_routes.push(route);
        } else {
            // Stable: routes of equal shape (split by method) keep their order.
            let at = self.patterns.partition_point(|r| r.ranks >= route.ranks);
            self.patterns.insert(at, route);
        }
        Ok(())
    }

    /// Finds the route for `method` and `path` (the path without its query). A `HEAD` no
    /// route names goes where a `GET` would (RFC 9110 §9.3.2: the same answer without its
    /// body), and `Allow` lists `HEAD` wherever `GET` is.
    pub fn find(&self, method: &Method, path: &str) -> Match<'_, T> {
        let found = self.find_named(method, path);
        if *method == Method::HEAD {
            if let Match::MethodNotAllowed { .. } = found {
                if let get @ Match::Found { .. } = self.find_named(&Method::GET, path) {
                    return get;
                }
            }
        }
        found
    }

    /// [`Router::find`] with `method` as the routes name it.
    fn find_named(&self, method: &Method, path: &str) -> Match<'_, T> {
        let exact: &[usize] = self.exact.get(path).map_or(&[], Vec::as_slice);
        let exact = exact.iter().map(|&i| &self.exact_routes[i]);
        if let Some(r) = exact.clone().find(|r| r.accepts(method)) {
            return Match::Found {
                target: &r.target,
                params: Vec::new(),
            };
        }
        let patterns: &[Route<T>] = if self.patterns.is_empty() || has_dot_segment(path) {
            &[]
        } else {
            &self.patterns
        };
        let mut first_path_match = exact.clone().next();
        let mut bad_parameter = None;
        for r in patterns {
            let params = match matches(&r.pattern, path) {
                Some(Ok(params)) => params,
                Some(Err(name)) => {
                    if bad_parameter.is_none() && r.accepts(method) {
                        bad_parameter = Some((r, name));
                    }
                    continue;
                }
                None => continue,
            };
            if r.accepts(method) {
                return Match::Found {
                    target: &r.target,
                    params,
                };
            }
            first_path_match.get_or_insert(r);
        }
        let Some(first) = first_path_match else {
            return match bad_parameter {
                Some((r, name)) => Match::BadParameter {
                    target: &r.target,
                    name,
                },
                None => Match::NotFound,
            };
        };
        // The path matched but the method did not: list what would have been accepted.
        let on_path = patterns
            .iter()
            .filter(|r| matches!(matches(&r.pattern, path), Some(Ok(_))));
        let mut allow: Vec<Method> = exact
            .chain(on_path)
            .flat_map(|r| r.methods.iter().cloned())
            .collect();
        if allow.contains(&Method::GET) {
            allow.push(Method::HEAD);
        }
        allow.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        allow.dedup();
        Match::MethodNotAllowed {
            target: &first.target,
            allow,
        }
    }
}

/// The parameters `pattern` gives for `path`, or `None` when it does not match; `Some(Err)`
/// names the first parameter whose segment does not percent-decode to UTF-8 where the path
/// matches otherwise.
#[allow(clippy::type_complexity)]
fn matches(pattern: &PathPattern, path: &str) -> Option<Result<Vec<(Arc<str>, String)>, Arc<str>>> {
    let mut segs = path.strip_prefix('/')?.split('/');
    let mut params = Vec::new();
    let mut bad = None;
    for s in &pattern.segments {
        let seg = segs.next()?;
        match s {
            Segment::Literal(l) => {
                if l != seg {
                    return None;
                }
            }
            Segment::Param(name) => {
                if seg.is_empty() {
                    return None;
                }
                match percent_decode(seg) {
                    Some(value) => params.push((name.clone(), value)),
                    None if bad.is_none() => bad = Some(name.clone()),
                    None => {}
                }
            }
        }
    }
    let more = segs.next().is_some();
    (more == pattern.prefix).then_some(match bad {
        Some(name) => Err(name),
        None => Ok(params),
    })
}

/// True when a segment of `path` is `.` or `..`, written plainly or percent-encoded.
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|s| {
        // The longest spelling is `%2e%2e`; anything longer is not a dot segment.
        s.len() <= 6
            && matches!(
                s.to_ascii_lowercase().replace("%2e", ".").as_str(),
                "." | ".."
            )
    })
}

/// Percent-decoding of a query component (`+` is a space), lossy for invalid UTF-8.
pub(crate) fn query_decode(s: &str) -> String {
    String::from_utf8_lossy(&query_decode_bytes(s)).into_owned()
}

/// The bytes of a query string component: `+` as a space, `%XX` escapes decoded, a malformed
/// escape kept as written.
pub(crate) fn query_decode_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// Decodes `%XX` escapes; `None` when an escape is malformed or the result is not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(routes: &[(&str, &[Method], &'static str)]) -> Router<&'static str> {
        let mut r = Router::default();
        for (p, m, t) in routes {
            r.add(p, m, *t).expect("valid pattern");
        }
        r
    }

    fn found(
        r: &Router<&'static str>,
        method: Method,
        path: &str,
    ) -> Option<(&'static str, Vec<(String, String)>)> {
        match r.find(&method, path) {
            Match::Found { target, params } => Some((
                *target,
                params
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            )),
            _ => None,
        }
    }

    fn target(r: &Router<&'static str>, path: &str) -> Option<&'static str> {
        found(r, Method::GET, path).map(|(t, _)| t)
    }

    #[test]
    fn a_parameter_matches_one_non_empty_segment() {
        let r = router(&[("/api/product/{id}", &[], "product")]);
        assert_eq!(
            found(&r, Method::GET, "/api/product/42"),
            Some(("product", vec![("id".into(), "42".into())]))
        );
        assert_eq!(target(&r, "/api/product/"), None);
        assert_eq!(target(&r, "/api/product"), None);
        assert_eq!(target(&r, "/api/product/42/x"), None);
        assert_eq!(
            target(&r, "/api/product/42/"),
            None,
            "a trailing slash is significant"
        );
    }

    #[test]
    fn parameters_come_in_pattern_order() {
        let r = router(&[("/c/{customer}/o/{order}", &[], "o")]);
        assert_eq!(
            found(&r, Method::GET, "/c/7/o/9"),
            Some((
                "o",
                vec![
                    ("customer".into(), "7".into()),
                    ("order".into(), "9".into())
                ]
            ))
        );
    }

    #[test]
    fn parameters_are_percent_decoded_and_literals_are_not() {
        let r = router(&[("/p/{name}", &[], "p"), ("/lit/a%20b", &[], "lit")]);
        assert_eq!(
            found(&r, Method::GET, "/p/caf%C3%A9%20au%2Flait"),
            Some(("p", vec![("name".into(), "café au/lait".into())]))
        );
        assert_eq!(target(&r, "/p/%FF"), None, "not UTF-8");
        assert_eq!(target(&r, "/p/%2"), None, "malformed escape");
        assert_eq!(target(&r, "/lit/a%20b"), Some("lit"));
        assert_eq!(target(&r, "/lit/a b"), None);
    }

    #[test]
    fn a_parameter_that_is_not_utf_8_makes_a_bad_request_where_no_other_route_matches() {
        let r = router(&[
            ("/p/{name}", &[Method::GET], "p"),
            ("/q/{a}/{b}", &[], "q"),
            ("/r/*", &[], "prefix"),
            ("/r/{x}", &[], "r"),
        ]);
        let bad = |method: Method, path: &str| match r.find(&method, path) {
            Match::BadParameter { target, name } => Some((*target, name.to_string())),
            _ => None,
        };
        assert_eq!(bad(Method::GET, "/p/%FF"), Some(("p", "name".into())));
        assert_eq!(bad(Method::GET, "/q/ok/%C3"), Some(("q", "b".into())));
        assert_eq!(bad(Method::GET, "/q/%FF/%FE"), Some(("q", "a".into())));
        // The method is not accepted: no route would have taken it anyway.
        assert!(matches!(r.find(&Method::POST, "/p/%FF"), Match::NotFound));
        // Another route takes the path: it wins.
        assert_eq!(target(&r, "/r/%FF"), Some("prefix"));
        // A path that would not match for other reasons stays unknown.
        assert!(matches!(r.find(&Method::GET, "/p/%FF/x"), Match::NotFound));
    }

    #[test]
    fn a_prefix_matches_below_its_slash_only() {
        let r = router(&[("/api/orders/*", &[], "orders")]);
        assert_eq!(target(&r, "/api/orders/"), Some("orders"));
        assert_eq!(target(&r, "/api/orders/1"), Some("orders"));
        assert_eq!(target(&r, "/api/orders/1/lines/2"), Some("orders"));
        assert_eq!(target(&r, "/api/orders"), None);
        assert_eq!(target(&r, "/api/ordersx/1"), None);
    }

    #[test]
    fn the_most_specific_pattern_wins() {
        let r = router(&[
            ("/*", &[], "root"),
            ("/api/*", &[], "api"),
            ("/api/orders/*", &[], "orders"),
            ("/api/orders/{id}", &[], "order"),
            ("/api/orders/special", &[], "special"),
            ("/api/{kind}/special", &[], "kind-special"),
            ("/api/orders/{id}/lines", &[], "lines"),
        ]);
        assert_eq!(target(&r, "/api/orders/special"), Some("special"));
        assert_eq!(target(&r, "/api/orders/7"), Some("order"));
        assert_eq!(target(&r, "/api/orders/7/lines"), Some("lines"));
        assert_eq!(target(&r, "/api/orders/7/other"), Some("orders"));
        assert_eq!(target(&r, "/api/items/special"), Some("kind-special"));
        assert_eq!(target(&r, "/api/items"), Some("api"));
        assert_eq!(target(&r, "/other"), Some("root"));
        assert_eq!(target(&r, "/"), Some("root"));
    }

    #[test]
    fn the_order_of_adding_does_not_change_the_winner() {
        let mut routes = [
            ("/a/*", "prefix"),
            ("/a/{x}", "param"),
            ("/{y}/b", "param-first"),
            ("/a/b", "exact"),
        ];
        for _ in 0..routes.len() {
            routes.rotate_left(1);
            let list: Vec<(&str, &[Method], &'static str)> =
                routes.iter().map(|(p, t)| (*p, &[][..], *t)).collect();
            let r = router(&list);
            assert_eq!(target(&r, "/a/b"), Some("exact"));
            assert_eq!(target(&r, "/a/c"), Some("param"));
            assert_eq!(target(&r, "/z/b"), Some("param-first"));
            assert_eq!(target(&r, "/a/c/d"), Some("prefix"));
        }
    }

    #[test]
    fn unknown_paths_are_not_found_and_wrong_methods_list_the_allowed_ones() {
        let r = router(&[
            ("/c/{id}", &[Method::GET], "get"),
            ("/c/{key}", &[Method::PUT], "put"),
            ("/x", &[Method::POST], "x"),
        ]);
        assert_eq!(found(&r, Method::GET, "/c/1").map(|f| f.0), Some("get"));
        assert_eq!(
            found(&r, Method::PUT, "/c/1").map(|f| f.1),
            Some(vec![("key".into(), "1".into())])
        );
        match r.find(&Method::DELETE, "/c/1") {
            Match::MethodNotAllowed { target, allow } => {
                assert_eq!(*target, "get");
                assert_eq!(allow, vec![Method::GET, Method::HEAD, Method::PUT]);
            }
            other => panic!("{other:?}"),
        }
        // HEAD goes where GET does, unless a route names it.
        assert_eq!(found(&r, Method::HEAD, "/c/1").map(|f| f.0), Some("get"));
        let named = router(&[
            ("/h", &[Method::GET], "get"),
            ("/h", &[Method::HEAD], "head"),
        ]);
        assert_eq!(found(&named, Method::HEAD, "/h").map(|f| f.0), Some("head"));
        assert_eq!(found(&named, Method::GET, "/h").map(|f| f.0), Some("get"));
        match r.find(&Method::HEAD, "/x") {
            Match::MethodNotAllowed { allow, .. } => assert_eq!(allow, vec![Method::POST]),
            other => panic!("{other:?}"),
        }
        match r.find(&Method::GET, "/x") {
            Match::MethodNotAllowed { target, allow } => {
                assert_eq!(*target, "x");
                assert_eq!(allow, vec![Method::POST]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(r.find(&Method::GET, "/nope"), Match::NotFound));
        assert!(matches!(r.find(&Method::GET, "/c"), Match::NotFound));
    }

    #[test]
    fn a_less_specific_pattern_takes_a_method_the_specific_one_refuses() {
        let r = router(&[("/c/{id}", &[Method::GET], "get"), ("/c/*", &[], "any")]);
        assert_eq!(found(&r, Method::GET, "/c/1").map(|f| f.0), Some("get"));
        assert_eq!(found(&r, Method::DELETE, "/c/1").map(|f| f.0), Some("any"));
    }

    #[test]
    fn dot_segments_never_match_a_pattern() {
        let r = router(&[("/files/{name}", &[], "file"), ("/all/*", &[], "all")]);
        for path in [
            "/files/..",
            "/files/.",
            "/files/%2e%2E",
            "/all/../etc/passwd",
            "/all/a/%2E/b",
        ] {
            assert!(
                matches!(r.find(&Method::GET, path), Match::NotFound),
                "{path}"
            );
        }
        assert_eq!(target(&r, "/files/..hidden"), Some("file"));
        assert_eq!(target(&r, "/all/a.b/c"), Some("all"));
    }

    #[test]
    fn exact_paths_keep_working_as_before() {
        let r = router(&[
            ("/service/X", &[], "x"),
            ("/", &[], "slash"),
            ("/t/", &[], "t"),
        ]);
        assert_eq!(target(&r, "/service/X"), Some("x"));
        assert_eq!(target(&r, "/service/X/"), None);
        assert_eq!(target(&r, "/service/x"), None);
        assert_eq!(target(&r, "/"), Some("slash"));
        assert_eq!(target(&r, "/t/"), Some("t"));
        assert_eq!(target(&r, "/t"), None);
    }
}
