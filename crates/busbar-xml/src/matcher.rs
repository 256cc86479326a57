//! Answering a compiled path's test over a stream of chunks.
//!
//! The matcher keeps one [`Level`] per open element (which steps it is a context node for,
//! and the positional counters of its children) and one [`Candidate`] per selected node whose
//! string-value is still being read. `Equals` compares the value against the literal as it
//! arrives, so it keeps no text at all; only `Matches` buffers the value (capped).

use crate::error::XmlError;
use crate::path::{Axis, Kind, StreamPath, Test};
use crate::reader::{decode_attr, Reader, Sink, StartTag};

/// A `Matches` candidate's string-value may not be longer than this.
pub const MAX_VALUE: usize = 1024 * 1024;

#[derive(Debug, Clone)]
struct Level {
    /// Bit k: this node is a context node for step k.
    ctx: u64,
    /// Element children seen so far (for the SOAP Header rule).
    element_children: u32,
    /// Text-node children seen so far (for `text()[n]`).
    text_nodes: u32,
    /// A text node is open (the last thing read inside this element was character data).
    in_text: bool,
}

#[derive(Debug)]
struct Candidate {
    /// Depth of the selected element, or of the parent of a selected text node.
    depth: usize,
    is_text: bool,
    /// Where the node starts, for a limit error.
    offset: usize,
    /// `Equals`: bytes of the literal matched so far; `usize::MAX` once it cannot match.
    matched: usize,
    /// `Matches`: the value read so far.
    value: Vec<u8>,
}

struct State<'a> {
    path: &'a StreamPath,
    test: &'a Test,
    levels: Vec<Level>,
    /// One counter per step per level (children of that level matching the step's test).
    counters: Vec<u32>,
    candidates: Vec<Candidate>,
    decided: Option<bool>,
    last: usize,
    element_mask: u64,
    descendant_mask: u64,
    text_bit: u64,
    attr_bit: u64,
    has_soap_header: bool,
}

/// Decides one [`Test`] on one document, fed in chunks as they arrive. Create one per request.
pub struct Matcher<'a> {
    reader: Reader,
    state: State<'a>,
}

impl<'a> Matcher<'a> {
    /// A matcher for `path` and `test`, before any input.
    pub fn new(path: &'a StreamPath, test: &'a Test) -> Self {
        let n = path.steps.len();
        let mut element_mask = 0;
        let mut descendant_mask = 0;
        let mut text_bit = 0;
        let mut attr_bit = 0;
        for (k, s) in path.steps.iter().enumerate() {
            match s.kind {
                Kind::Element(_) => element_mask |= 1u64 << k,
                Kind::Text => text_bit = 1u64 << k,
                Kind::Attribute(_) => attr_bit = 1u64 << k,
            }
            if s.axis == Axis::Descendant {
                descendant_mask |= 1u64 << k;
            }
        }
        let doc = Level {
            ctx: 1,
            element_children: 0,
            text_nodes: 0,
            in_text: false,
        };
        // Room for a message's first levels, so that they do not grow a step at a time.
        let mut levels = Vec::with_capacity(16);
        levels.push(doc);
        Matcher {
            reader: Reader::new(),
            state: State {
                path,
                test,
                levels,
                counters: vec![0; n],
                candidates: Vec::with_capacity(4),
                decided: None,
                last: n.saturating_sub(1),
                element_mask,
                descendant_mask,
                text_bit,
                attr_bit,
                has_soap_header: path.steps.iter().any(|s| s.soap_header),
            },
        }
    }

    /// Feed the next chunk. `Ok(Some(answer))` once the answer is known: `true` as soon as a
    /// selected node satisfies the test, `false` as soon as no further node could be selected
    /// (at the latest when the root element closes). After that, further chunks are not read
    /// (use [`Matcher::into_well_formed`] to keep checking the rest). `Ok(None)` asks for more.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Option<bool>, XmlError> {
        if self.state.decided.is_none() {
            self.reader
                .feed(chunk, &self.state.path.uris, &mut self.state)?;
        }
        Ok(self.state.decided)
    }

    /// End of input: the answer, or an error if the document is incomplete or malformed.
    pub fn finish(&mut self) -> Result<bool, XmlError> {
        if let Some(d) = self.state.decided {
            return Ok(d);
        }
        self.reader.finish()?;
        Ok(false)
    }

    /// Bytes fully read so far: once decided, the offset just after the token that decided
    /// (everything after it is untouched); before that, everything fed except an incomplete
    /// token carried over to the next chunk. Never more than was fed.
    pub fn bytes_consumed(&self) -> usize {
        self.reader.base
    }

    /// The answer, if known.
    pub fn decision(&self) -> Option<bool> {
        self.state.decided
    }

    /// Keep checking the rest of the document after an early decision. The checker resumes
    /// at [`Matcher::bytes_consumed`]: feed it the fed bytes from that offset on, then the rest
    /// of the stream.
    pub fn into_well_formed(self) -> WellFormed {
        WellFormed {
            reader: self.reader,
        }
    }
}

/// Evaluate `test` on `path` over a whole buffered document.
pub fn evaluate(path: &StreamPath, test: &Test, whole: &[u8]) -> Result<bool, XmlError> {
    let mut m = Matcher::new(path, test);
    match m.feed(whole)? {
        Some(d) => Ok(d),
        None => m.finish(),
    }
}

impl State<'_> {
    fn decide(&mut self, answer: bool) -> bool {
        // The first answer is final.
        self.decided.get_or_insert(answer);
        true
    }

    fn level_alive(&self, li: usize) -> bool {
        let level = &self.levels[li];
        let base = li * self.path.steps.len();
        let mut bits = level.ctx;
        while bits != 0 {
            let k = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let step = &self.path.steps[k];
            if step.axis == Axis::Descendant {
                return true;
            }
            let alive = match step.kind {
                Kind::Attribute(_) => false,
                Kind::Text => match step.position {
                    None => true,
                    Some(n) => level.text_nodes < n,
                },
                Kind::Element(_) => {
                    !(step.soap_header && level.element_children > 0)
                        && match step.position {
                            None => true,
                            Some(n) => self.counters[base + k] < n,
                        }
                }
            };
            if alive {
                return true;
            }
        }
        false
    }

    /// Decide `false` when nothing still open could lead to a selected node.
    fn check_exhausted(&mut self) -> bool {
        if self.candidates.iter().any(|c| self.candidate_may_match(c)) {
            return false;
        }
        if self.levels.len() == 1 {
            // Only the document node is open: before the root nothing is known yet, after it
            // nothing more can come.
            return self.levels[0].element_children > 0 && self.decide(false);
        }
        // The document node is skipped: its only element child has started, and a descendant
        // step it is a context for was inherited by the root.
        for li in 1..self.levels.len() {
            if self.level_alive(li) {
                return false;
            }
        }
        self.decide(false)
    }

    fn candidate_may_match(&self, c: &Candidate) -> bool {
        match self.test {
            Test::Equals(_) => c.matched != usize::MAX,
            _ => true,
        }
    }

    fn finish_candidate(&mut self, c: Candidate) -> bool {
        let ok = match self.test {
            Test::Exists => true,
            Test::Equals(lit) => c.matched == lit.len(),
            // The reader only hands over whole characters, so the value is valid UTF-8.
            Test::Matches(re) => std::str::from_utf8(&c.value).is_ok_and(|s| re.is_match(s)),
        };
        ok && self.decide(true)
    }

    /// A comment, PI, start or end tag ends the text node open in the current element.
    fn end_text_node(&mut self) -> bool {
        let depth = self.levels.len() - 1;
        if let Some(level) = self.levels.last_mut() {
            level.in_text = false;
        }
        if let Some(c) = self.candidates.last() {
            if c.is_text && c.depth == depth {
                if let Some(c) = self.candidates.pop() {
                    return self.finish_candidate(c);
                }
            }
        }
        false
    }

    fn new_candidate(&mut self, depth: usize, is_text: bool, offset: usize) -> bool {
        // A text node is decided when it ends, not at its first piece: piece boundaries follow
        // the chunking, and the decision point must not.
        if matches!(self.test, Test::Exists) && !is_text {
            return self.decide(true);
        }
        let c = Candidate {
            depth,
            is_text,
            offset,
            matched: 0,
            value: Vec::new(),
        };
        self.candidates.push(c);
        false
    }

    fn value_matches(&self, value: &[u8]) -> bool {
        match self.test {
            Test::Exists => true,
            Test::Equals(lit) => lit.as_bytes() == value,
            Test::Matches(re) => std::str::from_utf8(value).is_ok_and(|s| re.is_match(s)),
        }
    }
}

impl Sink for State<'_> {
    fn start(&mut self, el: &StartTag<'_>) -> Result<bool, XmlError> {
        if self.end_text_node() {
            return Ok(true);
        }
        let nsteps = self.path.steps.len();
        let li = self.levels.len() - 1;
        let base = li * nsteps;
        let parent_ctx = self.levels[li].ctx;
        let first_child = self.levels[li].element_children == 0;
        self.levels[li].element_children += 1;
        let mut selected = 0u64;
        let mut bits = parent_ctx & self.element_mask;
        while bits != 0 {
            let k = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let step = &self.path.steps[k];
            let Kind::Element(test) = &step.kind else {
                continue;
            };
            if !test.matches(el.ns, el.local) || (step.soap_header && !first_child) {
                continue;
            }
            if let Some(n) = step.position {
                let c = &mut self.counters[base + k];
                *c = c.saturating_add(1);
                if *c != n {
                    continue;
                }
            }
            selected |= 1u64 << k;
        }
        let all = if nsteps == 64 {
            u64::MAX
        } else {
            (1u64 << nsteps) - 1
        };
        let ctx = ((selected << 1) & all) | (parent_ctx & self.descendant_mask);
        self.levels.push(Level {
            ctx,
            element_children: 0,
            text_nodes: 0,
            in_text: false,
        });
        self.counters.resize(self.counters.len() + nsteps, 0);
        let depth = self.levels.len() - 1;
        if selected & (1u64 << self.last) != 0 && self.new_candidate(depth, false, el.offset) {
            return Ok(true);
        }
        if ctx & self.attr_bit != 0 {
            let step = &self.path.steps[self.last];
            if let Kind::Attribute(test) = &step.kind {
                let mut position = 0u32;
                let mut value = Vec::new();
                for a in el.attrs.iter().filter(|a| !a.is_decl) {
                    if !test.matches(a.ns, &el.tag[a.local.clone()]) {
                        continue;
                    }
                    position += 1;
                    if step.position.is_some_and(|n| n != position) {
                        continue;
                    }
                    value.clear();
                    decode_attr(&el.tag[a.value.clone()], &mut value);
                    if self.value_matches(&value) {
                        return Ok(self.decide(true));
                    }
                }
            }
        }
        Ok(self.has_soap_header && self.check_exhausted())
    }

    fn end(&mut self) -> Result<bool, XmlError> {
        if self.end_text_node() {
            return Ok(true);
        }
        let depth = self.levels.len() - 1;
        if let Some(c) = self.candidates.last() {
            if !c.is_text && c.depth == depth {
                if let Some(c) = self.candidates.pop() {
                    if self.finish_candidate(c) {
                        return Ok(true);
                    }
                }
            }
        }
        self.levels.pop();
        let n = self.path.steps.len();
        self.counters
            .truncate(self.counters.len().saturating_sub(n));
        Ok(self.check_exhausted())
    }

    fn text(&mut self, piece: &[u8], at: usize) -> Result<bool, XmlError> {
        let depth = self.levels.len() - 1;
        let text_bit = self.text_bit;
        let Some(level) = self.levels.last_mut() else {
            return Ok(false);
        };
        if !level.in_text {
            level.in_text = true;
            if level.ctx & text_bit != 0 {
                level.text_nodes += 1;
                let n = level.text_nodes;
                let step = &self.path.steps[self.last];
                if step.position.is_none_or(|p| p == n) && self.new_candidate(depth, true, at) {
                    return Ok(true);
                }
            }
        }
        match self.test {
            Test::Exists => {}
            Test::Equals(lit) => {
                let lit = lit.as_bytes();
                for c in &mut self.candidates {
                    if c.matched != usize::MAX {
                        let end = c.matched + piece.len();
                        c.matched = if end <= lit.len() && &lit[c.matched..end] == piece {
                            end
                        } else {
                            usize::MAX
                        };
                    }
                }
            }
            Test::Matches(_) => {
                for c in &mut self.candidates {
                    if c.value.len() + piece.len() > MAX_VALUE {
                        return Err(XmlError::Limit {
                            offset: c.offset,
                            what: "string-value of a selected node",
                            limit: MAX_VALUE,
                        });
                    }
                    c.value.extend_from_slice(piece);
                }
            }
        }
        Ok(false)
    }

    fn boundary(&mut self) -> Result<bool, XmlError> {
        Ok(self.end_text_node())
    }

    fn wants_text(&self) -> bool {
        !self.candidates.is_empty()
            || self
                .levels
                .last()
                .is_some_and(|l| l.ctx & self.text_bit != 0)
    }
}

/// Checks that a document is well-formed, chunk by chunk, without evaluating anything: for the
/// tail of a request whose route was decided early.
pub struct WellFormed {
    reader: Reader,
}

impl Default for WellFormed {
    fn default() -> Self {
        Self::new()
    }
}

struct NoSink;

impl Sink for NoSink {
    fn start(&mut self, _: &StartTag<'_>) -> Result<bool, XmlError> {
        Ok(false)
    }
    fn end(&mut self) -> Result<bool, XmlError> {
        Ok(false)
    }
}

impl WellFormed {
    /// A checker for a whole document from its first byte.
    pub fn new() -> Self {
        WellFormed {
            reader: Reader::new(),
        }
    }

    /// Check the next chunk.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), XmlError> {
        self.reader.feed(chunk, &[], &mut NoSink).map(|_| ())
    }

    /// End of input: an error if the document is incomplete.
    pub fn finish(&mut self) -> Result<(), XmlError> {
        self.reader.finish()
    }

    /// Bytes fully checked so far (an incomplete token at the end is not counted).
    pub fn bytes_consumed(&self) -> usize {
        self.reader.base
    }
}
