//! Parsing that goes on after an error, so that one run reports every problem in a file.
//!
//! serde stops at the first error. To find the next one, the node the error is about is
//! neutralised in the text and the text is parsed again: an unknown or duplicate key is blanked
//! out, a bad value (an unknown step, a wrong type, a bad duration) is replaced by a placeholder
//! the model accepts, and a missing field is given one. Edits keep every line of the original
//! where it was (the one kind of edit that adds a line remembers it), so each error keeps its
//! exact line. The key paths of neutralised nodes are kept: an error about a placeholder, from
//! the parser or from validation, never reaches the user. Recovery is bounded by
//! [`MAX_ERRORS`] errors and a fixed number of parses, and stops (keeping what it found) when
//! the text is not YAML at all or nothing it tries makes progress.

use std::collections::HashSet;

use granit_parser::{Event, Parser, Span};
use serde_saphyr::Error as YamlError;

use crate::model::Config;

/// Errors reported from one file at most; more are summed up in one line.
pub(crate) const MAX_ERRORS: usize = 100;

/// Parses at most, placeholders tried included.
const MAX_PARSES: usize = 20 * MAX_ERRORS;

/// One parse error, with the original line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    /// 1-based line in the original text.
    pub line: Option<u64>,
    /// Key path of the node the error is about (empty when unknown).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// What parsing found.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// The config once every error was neutralised; `None` when recovery had to stop.
    pub config: Option<Config>,
    /// Every error found, in the order of the file.
    pub errors: Vec<ParseError>,
    /// True when recovery stopped at [`MAX_ERRORS`].
    pub truncated: bool,
    /// Key paths of the nodes blanked out or replaced by placeholders.
    neutralised: Vec<String>,
    /// For each line of the text `config` was parsed from (0-based), its 1-based line in the
    /// original, or 0 for a line recovery added.
    origin: Vec<u64>,
}

impl Recovered {
    /// The original line of `line` of the text `config` was parsed from: the spans in
    /// `config` count lines recovery added, the user's file does not.
    pub fn original_line(&self, line: u64) -> Option<u64> {
        let idx = usize::try_from(line.checked_sub(1)?).ok()?;
        self.origin.get(idx).copied().filter(|l| *l > 0)
    }

    /// True when `path` is a node that was neutralised, or lies inside one: its errors are
    /// about a placeholder, not about the user's text.
    pub fn hides(&self, path: &str) -> bool {
        self.neutralised.iter().any(|n| is_under(path, n))
    }
}

fn is_under(path: &str, root: &str) -> bool {
    path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| root.is_empty() || rest.starts_with(['.', '[']))
}

/// Parses `text`, going on after errors (see the module doc).
pub(crate) fn parse_all(text: &str, message: impl Fn(&YamlError) -> String) -> Recovered {
    let mut doc = Doc::new(text);
    let mut out = Recovered {
        config: None,
        errors: Vec::new(),
        truncated: false,
        neutralised: Vec::new(),
        origin: Vec::new(),
    };
    let mut seen = HashSet::new();
    let mut parses = 0;
    loop {
        parses += 1;
        let err = match serde_saphyr::from_str::<Config>(&doc.text) {
            Ok(config) => {
                out.config = Some(config);
                break;
            }
            Err(e) => e,
        };
        let fault = Fault::of(&err, &doc);
        // Past a parse limit (aliases expanding to too many nodes, nesting too deep), the
        // document is refused as a whole: recovering past it would parse it again for each
        // alias, and say the same thing each time.
        if let Some(why) = over_limit(&err) {
            out.errors.push(ParseError {
                line: fault.line.and_then(|l| doc.original_line(l)),
                path: String::new(),
                message: why,
            });
            break;
        }
        let tree = Tree::build(&doc.text);
        let fix = tree.as_ref().and_then(|t| t.fix_for(&doc, &fault));
        let path = fix.as_ref().map(|f| f.path.clone()).unwrap_or_default();
        let text = match &fault.kind {
            FaultKind::Duplicate(Some(key)) => format!("duplicate key '{key}'"),
            FaultKind::Duplicate(None) => "duplicate key".to_owned(),
            FaultKind::OneKeyTooMany => {
                "one key too many: a step is a mapping of one key, like `- call: echo`".to_owned()
            }
            FaultKind::Eof if tree.as_ref().is_none_or(Tree::is_empty) => {
                "the config is empty: it needs at least 'listeners'".to_owned()
            }
            _ if fix.as_ref().is_some_and(|f| f.path.is_empty())
                && tree.as_ref().is_some_and(|t| !t.is_mapping()) =>
            {
                "a config is a mapping of sections like 'listeners:' and 'proxies:'".to_owned()
            }
            _ => match (scalar_type(&err), fault.offset) {
                (Some(ty), Some(at)) => format!(
                    "invalid value '{}': expected {}",
                    scalar_at(&doc.text, at),
                    expected_scalar(ty)
                ),
                _ => message(&err),
            },
        };
        // The same error at the same place again means an edit did not take: stop rather
        // than report it twice.
        if !seen.insert((fault.offset, fault.kind.clone(), text.clone())) {
            break;
        }
        // An error about a placeholder is not the user's, even when it cannot be got past.
        if !out.hides(&path) {
            if out.errors.len() == MAX_ERRORS {
                out.truncated = true;
                break;
            }
            let empty = fault.kind == FaultKind::Eof && tree.as_ref().is_none_or(Tree::is_empty);
            let line = match fix.as_ref().and_then(|f| f.report_at) {
                Some(at) => at.map(|at| doc.line_at(at)),
                None => fault.line,
            };
            out.errors.push(ParseError {
                line: line.and_then(|l| doc.original_line(l)).filter(|_| !empty),
                path: path.clone(),
                message: text,
            });
        }
        let Some(fix) = fix else { break };
        if fix.path.is_empty() {
            // The whole document is wrong (empty, or not a mapping): nothing to go on with.
            break;
        }
        out.neutralised.push(fix.path.clone());
        let mut next = None;
        for candidate in fix.candidates {
            if parses >= MAX_PARSES {
                break;
            }
            parses += 1;
            if candidate.takes(&fault) {
                next = Some(candidate.doc);
                break;
            }
        }
        match next {
            Some(d) => doc = d,
            None => break,
        }
    }
    out.errors.sort_by_key(|e| e.line.unwrap_or(u64::MAX));
    out.origin = doc.origin;
    out
}

/// The message for a parse that went past one of the parser's limits, if it did.
fn over_limit(err: &YamlError) -> Option<String> {
    use serde_saphyr::budget::BudgetBreach;
    let mut err = err;
    while let YamlError::WithSnippet { error, .. } | YamlError::AliasError { error, .. } = err {
        err = error;
    }
    let YamlError::Budget { breach, .. } = err else {
        return None;
    };
    Some(match breach {
        BudgetBreach::Nodes { nodes } => format!(
            "the config grows past {} nodes once its aliases are expanded: write it out, or \
             share steps through named sequences",
            nodes.saturating_sub(1)
        ),
        BudgetBreach::Depth { depth } => format!(
            "the config is nested more than {} levels deep",
            depth.saturating_sub(1)
        ),
        BudgetBreach::Aliases { aliases } => format!(
            "the config has more than {} aliases",
            aliases.saturating_sub(1)
        ),
        other => format!("the config is past a parser limit ({other:?})"),
    })
}

/// The config text being repaired, with the original line of each of its lines.
#[derive(Debug, Clone)]
struct Doc {
    text: String,
    /// For each line (0-based), its 1-based line in the original, or 0 for an added line.
    origin: Vec<u64>,
}

impl Doc {
    fn new(text: &str) -> Self {
        let lines = text.split('\n').count() as u64;
        Doc {
            text: text.to_owned(),
            origin: (1..=lines).collect(),
        }
    }

    /// 1-based line of byte `at`.
    fn line_at(&self, at: usize) -> u64 {
        let before = self.text.get(..at).unwrap_or(&self.text);
        before.matches('\n').count() as u64 + 1
    }

    fn original_line(&self, line: u64) -> Option<u64> {
        let idx = usize::try_from(line.checked_sub(1)?).ok()?;
        self.origin.get(idx).copied().filter(|l| *l > 0)
    }

    /// Byte offset of 1-based `line` and `column` (in characters).
    fn offset_of(&self, line: u64, column: u64) -> Option<usize> {
        let start = if line <= 1 {
            0
        } else {
            let n = usize::try_from(line - 2).ok()?;
            self.text.match_indices('\n').nth(n)?.0 + 1
        };
        let col = usize::try_from(column.saturating_sub(1)).ok()?;
        let rest = &self.text[start..];
        Some(start + rest.char_indices().nth(col).map_or(rest.len(), |(i, _)| i))
    }

    /// This text with `range` replaced by `with` on its first line, every other character of
    /// the range turned into a space and every line break kept, so nothing after the range
    /// moves to another line or to a smaller column.
    fn replaced(&self, range: std::ops::Range<usize>, with: &str) -> Doc {
        let old = &self.text[range.clone()];
        let first_line = old.find('\n').unwrap_or(old.len());
        let mut text = String::with_capacity(self.text.len() + with.len());
        text.push_str(&self.text[..range.start]);
        text.push_str(with);
        let pad = old[..first_line].chars().count();
        text.extend(std::iter::repeat_n(
            ' ',
            pad.saturating_sub(with.chars().count()),
        ));
        for c in old[first_line..].chars() {
            text.push(if c == '\n' || c == '\r' { c } else { ' ' });
        }
        text.push_str(&self.text[range.end..]);
        Doc {
            text,
            origin: self.origin.clone(),
        }
    }

    /// This text with a new `line` (without a line break) at byte `at`: before the line that
    /// starts there, or after the last line when `at` is the end of a text without a final
    /// line break. Returns the range of the new line's text.
    fn inserted_line(&self, at: usize, line: &str) -> (Doc, std::ops::Range<usize>) {
        let mut idx = self.text[..at].matches('\n').count();
        let at_line_start = at == 0 || self.text[..at].ends_with('\n');
        let mut text = self.text.clone();
        let range = if at_line_start {
            text.insert_str(at, &format!("{line}\n"));
            at..at + line.len()
        } else {
            text.insert_str(at, &format!("\n{line}"));
            idx += 1;
            at + 1..at + 1 + line.len()
        };
        let mut origin = self.origin.clone();
        origin.insert(idx.min(origin.len()), 0);
        (Doc { text, origin }, range)
    }

    /// This text with `s` inserted at byte `at`, on the same line.
    fn inserted(&self, at: usize, s: &str) -> Doc {
        let mut text = self.text.clone();
        text.insert_str(at, s);
        Doc {
            text,
            origin: self.origin.clone(),
        }
    }
}

/// What the parser said, in terms of the text.
#[derive(Debug)]
struct Fault {
    offset: Option<usize>,
    line: Option<u64>,
    kind: FaultKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum FaultKind {
    /// A key that must go: unknown.
    BadKey,
    /// A key given twice in one mapping.
    Duplicate(Option<String>),
    /// The text ends before anything was read.
    Eof,
    /// A second key in the one-key mapping of an enum (a step).
    OneKeyTooMany,
    /// An unknown enum variant (a step kind, an option); the names that would do.
    UnknownVariant(Vec<&'static str>),
    /// A required field is absent from a mapping.
    MissingField(&'static str),
    /// Anything else about a value: wrong type, bad duration, bad number.
    BadValue,
}

impl Fault {
    fn of(err: &YamlError, doc: &Doc) -> Fault {
        let kind = match innermost(err) {
            YamlError::SerdeUnknownField { .. } => FaultKind::BadKey,
            YamlError::DuplicateMappingKey { key, .. } => FaultKind::Duplicate(key.clone()),
            YamlError::Eof { .. } => FaultKind::Eof,
            YamlError::ExpectedMappingEndAfterEnumVariantValue { .. } => FaultKind::OneKeyTooMany,
            YamlError::SerdeUnknownVariant { expected, .. } => {
                FaultKind::UnknownVariant(expected.clone())
            }
            YamlError::SerdeMissingField { field, .. } => FaultKind::MissingField(field),
            _ => FaultKind::BadValue,
        };
        let loc = err.location();
        let line = loc.map(|l| l.line()).filter(|l| *l > 0);
        let offset = loc.and_then(|l| {
            l.span()
                .byte_offset()
                .and_then(|b| usize::try_from(b).ok())
                .filter(|b| *b <= doc.text.len() && doc.text.is_char_boundary(*b))
                .or_else(|| doc.offset_of(l.line(), l.column()))
        });
        Fault { offset, line, kind }
    }
}

/// The error itself, out of the source snippets wrapped around it.
fn innermost(err: &YamlError) -> &YamlError {
    let mut e = err;
    while let YamlError::WithSnippet { error, .. } = e {
        e = error;
    }
    e
}

/// The Rust type a scalar failed to read as, when that is the error.
fn scalar_type(err: &YamlError) -> Option<&'static str> {
    match innermost(err) {
        YamlError::InvalidScalar { ty, .. } => Some(ty),
        _ => None,
    }
}

/// The plain or quoted scalar that starts at byte `at`, as written (to the end of its line,
/// or to the `,`, `}` or `]` that ends it in a flow collection).
fn scalar_at(text: &str, at: usize) -> &str {
    let rest = text.get(at..).unwrap_or_default();
    let end = rest.find([',', '}', ']', '\n', '\r']).unwrap_or(rest.len());
    let token = &rest[..end];
    // A comment ends a plain scalar.
    token.split(" #").next().unwrap_or(token).trim()
}

/// What a value of the Rust type `ty` must look like, in a config's terms.
fn expected_scalar(ty: &str) -> String {
    let max = match ty {
        "u8" => Some(u64::from(u8::MAX)),
        "u16" => Some(u64::from(u16::MAX)),
        "u32" => Some(u64::from(u32::MAX)),
        "u64" | "usize" => Some(u64::MAX),
        _ => None,
    };
    match (ty, max) {
        (_, Some(max)) => format!("a whole number from 0 to {max}"),
        ("i8" | "i16" | "i32" | "i64" | "isize", None) => "a whole number".to_owned(),
        ("f32" | "f64", None) => "a number".to_owned(),
        ("bool", None) => "true or false".to_owned(),
        ("char", None) => "one character".to_owned(),
        _ => format!("a value of type {ty}"),
    }
}

/// A way out of one error: the node it neutralises and the edits to try, best first.
struct Fix {
    path: String,
    /// Where to say the error is, when not where the parser said: a missing field is
    /// reported on the line of its mapping's key (`echo:`), or on no line for the whole file.
    report_at: Option<Option<usize>>,
    candidates: Vec<Candidate>,
}

/// One edited text, and the byte range of the edit in it.
struct Candidate {
    doc: Doc,
    edit: std::ops::Range<usize>,
}

impl Candidate {
    /// True when parsing the edited text gets past the edit: it parses, or its first error
    /// lies elsewhere, or is only a field the placeholder lacks (given one next time).
    fn takes(&self, before: &Fault) -> bool {
        let err = match serde_saphyr::from_str::<Config>(&self.doc.text) {
            Ok(_) => return true,
            Err(e) => e,
        };
        let fault = Fault::of(&err, &self.doc);
        let Some(at) = fault.offset else {
            return false;
        };
        let missing_field = matches!(fault.kind, FaultKind::MissingField(_));
        let inside = self.edit.contains(&at) || at == self.edit.start;
        // serde reads the text in order, so an edit cannot cause an error before itself,
        // except a missing field, which is reported at the start of its mapping.
        let earlier = at < self.edit.start.min(before.offset.unwrap_or(usize::MAX));
        missing_field || !(inside || earlier)
    }
}

/// The 1-based line of `text` where the node at key path `path` (`databases.d`,
/// `proxies.A.in[0].sql`) is written, or its nearest written ancestor's; `None` when the text
/// is not YAML or nothing on the path is in it.
pub(crate) fn key_line(text: &str, path: &str) -> Option<u64> {
    let tree = Tree::build(text)?;
    let mut want = path;
    loop {
        if let Some(node) = tree
            .nodes
            .iter()
            .find(|n| n.path == want && matches!(n.role, Role::Key(_) | Role::Item))
        {
            let before = text.get(..node.start)?;
            return Some(before.matches('\n').count() as u64 + 1);
        }
        // The parent: up to the last `.` or `[` outside the last segment.
        let cut = want.rfind(['.', '['])?;
        want = &want[..cut];
        if want.is_empty() {
            return None;
        }
    }
}

/// The node tree of a YAML text, flattened, with byte ranges and key paths.
struct Tree {
    nodes: Vec<Node>,
}

#[derive(Debug)]
struct Node {
    start: usize,
    end: usize,
    path: String,
    role: Role,
    kind: Kind,
    /// Enclosing collection.
    parent: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Root,
    /// A mapping key; the index of its value once known.
    Key(Option<usize>),
    /// A mapping value; the index of its key.
    Value(usize),
    Item,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Scalar,
    Map { flow: bool },
    Seq { flow: bool },
}

/// A collection being read.
struct Open {
    idx: usize,
    pending_key: Option<usize>,
    items: usize,
    last_end: Option<usize>,
}

impl Tree {
    /// The tree of `text`, or `None` when it is not well-formed YAML.
    fn build(text: &str) -> Option<Tree> {
        let mut parser = Parser::new_from_str(text);
        let mut nodes: Vec<Node> = Vec::new();
        let mut stack: Vec<Open> = Vec::new();
        // Every offset is checked here once, so that slicing the text at node bounds later
        // cannot fail.
        let byte = |m: granit_parser::Marker| {
            m.byte_offset()
                .or_else(|| {
                    text.char_indices()
                        .nth(m.index())
                        .map(|(i, _)| i)
                        .or(Some(text.len()))
                })
                .filter(|b| text.is_char_boundary(*b))
        };
        while let Some(next) = parser.next_event() {
            let (event, span): (Event<'_>, Span) = next.ok()?;
            let (kind, label) = match &event {
                Event::Scalar(value, ..) => (Kind::Scalar, value.to_string()),
                Event::Alias(_) => (Kind::Scalar, "*".to_owned()),
                Event::MappingStart(style, ..) => (
                    Kind::Map {
                        flow: matches!(style, granit_parser::StructureStyle::Flow),
                    },
                    String::new(),
                ),
                Event::SequenceStart(style, ..) => (
                    Kind::Seq {
                        flow: matches!(style, granit_parser::StructureStyle::Flow),
                    },
                    String::new(),
                ),
                Event::MappingEnd | Event::SequenceEnd => {
                    let open = stack.pop()?;
                    let node = nodes.get_mut(open.idx)?;
                    let flow = matches!(
                        node.kind,
                        Kind::Map { flow: true } | Kind::Seq { flow: true }
                    );
                    node.end = if flow {
                        byte(span.end)?
                    } else {
                        open.last_end.unwrap_or(node.start)
                    };
                    let end = node.end;
                    Self::finished(&mut stack, end);
                    continue;
                }
                _ => continue,
            };
            let idx = nodes.len();
            let (role, path, parent) = match stack.last_mut() {
                None => (Role::Root, String::new(), None),
                Some(top) => {
                    let parent_path = &nodes.get(top.idx)?.path;
                    let is_map = matches!(nodes.get(top.idx)?.kind, Kind::Map { .. });
                    if !is_map {
                        let path = format!("{parent_path}[{}]", top.items);
                        top.items += 1;
                        (Role::Item, path, Some(top.idx))
                    } else if let Some(key) = top.pending_key.take() {
                        if let Some(k) = nodes.get_mut(key) {
                            k.role = Role::Key(Some(idx));
                        }
                        let path = nodes.get(key)?.path.clone();
                        (Role::Value(key), path, Some(top.idx))
                    } else {
                        top.pending_key = Some(idx);
                        let label = if kind == Kind::Scalar {
                            label
                        } else {
                            "?".into()
                        };
                        let path = if parent_path.is_empty() {
                            label
                        } else {
                            format!("{parent_path}.{label}")
                        };
                        (Role::Key(None), path, Some(top.idx))
                    }
                }
            };
            let start = byte(span.start)?;
            let end = byte(span.end)?;
            nodes.push(Node {
                start,
                end,
                path,
                role,
                kind,
                parent,
            });
            if kind == Kind::Scalar {
                Self::finished(&mut stack, end);
            } else {
                stack.push(Open {
                    idx,
                    pending_key: None,
                    items: 0,
                    last_end: None,
                });
            }
        }
        (!nodes.is_empty()).then_some(Tree { nodes })
    }

    /// True when the text holds no node, or only an empty one.
    fn is_empty(&self) -> bool {
        self.nodes.len() <= 1 && self.nodes.iter().all(|n| n.start == n.end)
    }

    /// True when the document is a mapping.
    fn is_mapping(&self) -> bool {
        self.nodes
            .first()
            .is_some_and(|n| matches!(n.kind, Kind::Map { .. }))
    }

    /// Records that a node ends at `end`: a block collection ends where its last child does.
    fn finished(stack: &mut [Open], end: usize) {
        if let Some(top) = stack.last_mut() {
            top.last_end = Some(top.last_end.map_or(end, |e| e.max(end)));
        }
    }

    /// The innermost node at byte `at`.
    fn node_at(&self, at: usize) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, n) in self.nodes.iter().enumerate() {
            let hit = n.start == at || (n.start <= at && at < n.end);
            if hit && best.is_none_or(|b| self.depth(i) >= self.depth(b)) {
                best = Some(i);
            }
        }
        best
    }

    fn depth(&self, mut i: usize) -> usize {
        let mut d = 0;
        while let Some(p) = self.nodes.get(i).and_then(|n| n.parent) {
            d += 1;
            i = p;
        }
        d
    }

    fn entries(&self, map: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(move |(_, n)| n.parent == Some(map))
            .filter_map(|(i, n)| match n.role {
                Role::Key(Some(v)) => Some((i, v)),
                _ => None,
            })
    }

    /// How to get past `fault`.
    fn fix_for(&self, doc: &Doc, fault: &Fault) -> Option<Fix> {
        let at = fault.offset?;
        let mut node = self.node_at(at)?;
        match &fault.kind {
            FaultKind::BadKey | FaultKind::Duplicate(_) => {
                let key = match self.nodes.get(node)?.role {
                    Role::Key(_) => node,
                    Role::Value(k) => k,
                    _ => return None,
                };
                self.remove_entry(doc, key)
            }
            FaultKind::MissingField(field) => {
                // The error points at the mapping, or at its first key.
                if let Role::Key(_) = self.nodes.get(node)?.role {
                    node = self.nodes.get(node)?.parent?;
                }
                if !matches!(self.nodes.get(node)?.kind, Kind::Map { .. }) {
                    return None;
                }
                self.add_field(doc, node, field)
            }
            FaultKind::UnknownVariant(expected) => {
                // `- bogus_step: {}`: the error is at the key of a one-key mapping, the
                // step itself; `format: jsn`: at the value.
                if let Role::Key(_) = self.nodes.get(node)?.role {
                    node = self.nodes.get(node)?.parent?;
                }
                // A one-key mapping is a variant with content; a scalar, a unit variant.
                let scalar = self.nodes.get(node)?.kind == Kind::Scalar;
                let mut texts: Vec<String> = Vec::new();
                for v in expected.iter().take(3) {
                    if scalar {
                        texts.push((*v).to_owned());
                    } else {
                        texts.push(format!("{{{v}: \"\"}}"));
                        texts.push(format!("{{{v}: {{}}}}"));
                        texts.push(format!("{{{v}: []}}"));
                    }
                }
                texts.extend(PLACEHOLDERS.iter().map(|s| (*s).to_owned()));
                self.replace(doc, node, &texts)
            }
            FaultKind::BadValue | FaultKind::Eof | FaultKind::OneKeyTooMany => {
                if let Role::Key(_) = self.nodes.get(node)?.role {
                    let map = self.nodes.get(node)?.parent?;
                    if self.entries(map).count() == 1 {
                        node = map;
                    } else {
                        return self.remove_entry(doc, node);
                    }
                }
                let texts: Vec<String> = PLACEHOLDERS.iter().map(|s| (*s).to_owned()).collect();
                self.replace(doc, node, &texts)
            }
        }
    }

    /// Blanks out the entry of `key` (with its comma in a flow mapping); the last entry of a
    /// block mapping becomes `{}`, so the mapping stays a mapping.
    fn remove_entry(&self, doc: &Doc, key: usize) -> Option<Fix> {
        let k = self.nodes.get(key)?;
        let Role::Key(Some(value)) = k.role else {
            return None;
        };
        let v = self.nodes.get(value)?;
        let map = k.parent?;
        let flow = matches!(self.nodes.get(map)?.kind, Kind::Map { flow: true });
        let alone = self.entries(map).count() == 1;
        let mut end = v.end.max(k.end);
        if flow {
            // Take the comma after the entry along; a comma before the last one may stay
            // (YAML allows a trailing comma).
            let rest = &doc.text[end..];
            let skip = rest.len() - rest.trim_start_matches([' ', '\t', '\r', '\n']).len();
            if rest[skip..].starts_with(',') {
                end += skip + 1;
            }
        }
        let with = if !flow && alone { "{}" } else { "" };
        let doc = doc.replaced(k.start..end, with);
        Some(Fix {
            path: k.path.clone(),
            report_at: None,
            candidates: vec![Candidate {
                edit: k.start..k.start + with.len().max(1),
                doc,
            }],
        })
    }

    /// Replaces `node` by each of `texts` in turn.
    fn replace(&self, doc: &Doc, node: usize, texts: &[String]) -> Option<Fix> {
        let n = self.nodes.get(node)?;
        let candidates = texts
            .iter()
            .map(|t| Candidate {
                doc: doc.replaced(n.start..n.end.max(n.start), t),
                edit: n.start..n.start + t.len().max(1),
            })
            .collect();
        Some(Fix {
            path: n.path.clone(),
            report_at: None,
            candidates,
        })
    }

    /// Gives mapping `map` the missing `field`, with each placeholder in turn: inside the
    /// braces of a flow mapping, on a line of its own after a block mapping.
    fn add_field(&self, doc: &Doc, map: usize, field: &str) -> Option<Fix> {
        let m = self.nodes.get(map)?;
        let path = if m.path.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", m.path)
        };
        let first_key = self.entries(map).next().map(|(k, _)| k);
        let report_at = match m.role {
            Role::Root => None,
            Role::Value(key) => Some(self.nodes.get(key)?.start),
            Role::Key(_) | Role::Item => Some(m.start),
        };
        let candidates = match m.kind {
            Kind::Map { flow: true } => {
                let at = m.start + doc.text[m.start..].find('{')? + 1;
                let sep = if first_key.is_some() { ", " } else { "" };
                PLACEHOLDERS
                    .iter()
                    .map(|p| {
                        let s = format!("{field}: {p}{sep}");
                        Candidate {
                            edit: at..at + s.len(),
                            doc: doc.inserted(at, &s),
                        }
                    })
                    .collect()
            }
            Kind::Map { flow: false } => {
                let key = self.nodes.get(first_key?)?;
                let line_start = doc.text[..key.start].rfind('\n').map_or(0, |i| i + 1);
                let indent = doc.text[line_start..key.start].chars().count();
                // After the line the mapping ends on, so the new line is the mapping's own.
                let at = if doc.text[..m.end].ends_with('\n') {
                    m.end
                } else {
                    doc.text[m.end..]
                        .find('\n')
                        .map_or(doc.text.len(), |i| m.end + i + 1)
                };
                PLACEHOLDERS
                    .iter()
                    .map(|p| {
                        let s = format!("{}{field}: {p}", " ".repeat(indent));
                        let (doc, edit) = doc.inserted_line(at, &s);
                        Candidate { doc, edit }
                    })
                    .collect()
            }
            _ => return None,
        };
        Some(Fix {
            path,
            report_at: Some(report_at),
            candidates,
        })
    }
}

/// Values tried in place of a bad one, in order: one of them fits each type in the model.
const PLACEHOLDERS: &[&str] = &["\"\"", "0", "1s", "{}", "[]", "false", "auto"];
