//! Random well-formed documents for the property and differential tests.
#![allow(dead_code)]

/// xorshift64*: deterministic, dependency-free, good enough to shake out edge cases.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const PREFIXES: &[&str] = &["", "a", "b", "soap", "wsu", "ds"];
const URIS: &[&str] = &[
    "urn:one",
    "urn:two",
    "http://example.com/ns",
    "http://schemas.xmlsoap.org/soap/envelope/",
    "urn:x?a=1;b=%C3%A9",
];
const LOCALS: &[&str] = &["e", "Body", "Id", "f", "x", "\u{e9}l"];
// A literal '>' only ever follows 'x' so no "]]>" can form in text or CDATA.
const TEXT: &[&str] = &[
    "a",
    " ",
    "  ",
    "\n",
    "\r\n",
    "\r",
    "\t",
    "&amp;",
    "&lt;",
    "&gt;",
    "&quot;",
    "&apos;",
    "&#13;",
    "&#xD;",
    "&#x9;",
    "&#10;",
    "\u{e9}",
    "\u{4e2d}",
    "&#x1F600;",
    "\u{1F600}",
    "]]",
    "x>",
    "\"",
    "'",
    "t:x",
    "#",
];
const ATTR_TEXT: &[&str] = &[
    "v",
    " ",
    "\t",
    "\n",
    "\r\n",
    "&#9;",
    "&#10;",
    "&#13;",
    "&amp;",
    "&lt;",
    "&gt;",
    ">",
    "&quot;",
    "'",
    "\u{e9}",
    "&#x10FFFF;",
    "wsu:v",
];

struct Gen<'r> {
    rng: &'r mut Rng,
    out: String,
    /// In-scope prefix bindings, innermost last; "" is the default namespace.
    scope: Vec<(String, String)>,
}

/// A random well-formed, namespace-well-formed document.
pub fn document(rng: &mut Rng) -> String {
    let mut g = Gen {
        rng,
        out: String::new(),
        scope: Vec::new(),
    };
    if g.rng.chance(30) {
        g.out
            .push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    }
    if g.rng.chance(20) {
        g.out.push_str("<!-- before -->\n");
    }
    g.element(0);
    if g.rng.chance(20) {
        g.out.push_str("\n<!-- after -->");
    }
    g.out
}

impl Gen<'_> {
    fn bound(&self, prefix: &str) -> Option<&str> {
        self.scope
            .iter()
            .rev()
            .find(|(p, _)| p == prefix)
            .map(|(_, u)| u.as_str())
    }

    fn text(&mut self, pieces: &[&str], max: usize) -> String {
        let n = self.rng.below(max + 1);
        (0..n).map(|_| *self.rng.pick(pieces)).collect()
    }

    fn element(&mut self, depth: usize) {
        let mark = self.scope.len();
        let mut decls: Vec<(String, String)> = Vec::new();
        for _ in 0..self.rng.below(3) {
            let p = self.rng.pick(PREFIXES).to_string();
            if decls.iter().any(|(q, _)| *q == p) {
                continue;
            }
            let uri = if p.is_empty() && self.rng.chance(30) {
                String::new()
            } else {
                self.rng.pick(URIS).to_string()
            };
            decls.push((p, uri));
        }
        let prefix = self.rng.pick(PREFIXES).to_string();
        let declared_here = decls.iter().any(|(p, _)| *p == prefix);
        if !prefix.is_empty() && !declared_here && self.bound(&prefix).is_none() {
            decls.push((prefix.clone(), self.rng.pick(URIS).to_string()));
        }
        self.scope.extend(decls.iter().cloned());
        let qname = if prefix.is_empty() {
            self.rng.pick(LOCALS).to_string()
        } else {
            format!("{prefix}:{}", self.rng.pick(LOCALS))
        };
        self.out.push('<');
        self.out.push_str(&qname);
        let mut attrs: Vec<(String, String)> = Vec::new();
        let mut seen: Vec<(String, String)> = Vec::new();
        for (p, u) in &decls {
            attrs.push((
                if p.is_empty() {
                    "xmlns".into()
                } else {
                    format!("xmlns:{p}")
                },
                u.clone(),
            ));
        }
        for _ in 0..self.rng.below(4) {
            let local = self.rng.pick(LOCALS).to_string();
            let choice = self.rng.below(4);
            let (name, ns) = match choice {
                0 => (
                    format!("xml:{}", self.rng.pick(&["lang", "space"])),
                    "xml".to_string(),
                ),
                1 => {
                    let p = *self.rng.pick(&PREFIXES[1..]);
                    match self.bound(p) {
                        Some(u) => (format!("{p}:{local}"), u.to_string()),
                        None => (local.clone(), String::new()),
                    }
                }
                _ => (local.clone(), String::new()),
            };
            let local_part = name.rsplit(':').next().unwrap_or("").to_string();
            if seen.iter().any(|(n, l)| *n == ns && *l == local_part) {
                continue;
            }
            seen.push((ns, local_part));
            let value = self.text(ATTR_TEXT, 4);
            attrs.push((name, value));
        }
        // Shuffle so declarations and attributes come in any source order.
        for i in (1..attrs.len()).rev() {
            let j = self.rng.below(i + 1);
            attrs.swap(i, j);
        }
        for (name, value) in &attrs {
            let sep = *self.rng.pick(&[" ", "\n  ", "\t"]);
            let quote = if value.contains('"') {
                '\''
            } else {
                *self.rng.pick(&['"', '\''])
            };
            let value = if quote == '\'' {
                value.replace('\'', "&apos;")
            } else {
                value.clone()
            };
            self.out.push_str(sep);
            self.out.push_str(name);
            self.out.push('=');
            self.out.push(quote);
            self.out.push_str(&value);
            self.out.push(quote);
        }
        let children = if depth >= 5 { 0 } else { self.rng.below(5) };
        if children == 0 && self.rng.chance(50) {
            self.out.push_str("/>");
        } else {
            self.out.push('>');
            for _ in 0..children {
                match self.rng.below(10) {
                    0..=3 => self.element(depth + 1),
                    4..=6 => {
                        let t = self.text(TEXT, 5);
                        self.out.push_str(&t);
                    }
                    7 => {
                        let t: String =
                            self.text(&["x", "<", "&", "x>", "]", "]]", "\r\n", "\u{e9}", " "], 5);
                        self.out.push_str("<![CDATA[");
                        self.out.push_str(&t);
                        self.out.push_str("]]>");
                    }
                    8 => {
                        let t = self.text(&["c", " ", "\r\n", "<", "&", "\u{e9}"], 4);
                        self.out.push_str("<!--");
                        self.out.push_str(&t);
                        self.out.push_str("-->");
                    }
                    _ => {
                        let ws = *self.rng.pick(&["\n", "\n  ", " "]);
                        self.out.push_str(ws);
                    }
                }
            }
            self.out.push_str("</");
            self.out.push_str(&qname);
            self.out.push('>');
        }
        self.scope.truncate(mark);
    }
}
