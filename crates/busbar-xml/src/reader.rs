//! A resumable XML 1.0 + Namespaces tokenizer that checks well-formedness as it goes.
//!
//! Why our own tokenizer rather than quick-xml's `NsReader`: quick-xml reads from a complete
//! slice or from a `BufRead` whose end means end of document, so it cannot stop in the middle
//! of a token and resume when the next network chunk arrives. Driving it over a growing buffer
//! means finding token boundaries ourselves anyway and then parsing every byte a second time
//! (the bench's `quick_xml_scan` case measures that second pass alone). Here every suspension
//! point is explicit: [`Reader::process`] consumes only complete units (a tag, a reference, a
//! run of whole characters) and reports how far it got; the caller carries the incomplete
//! rest, which is at most one markup token and is capped. Long constructs (text, CDATA,
//! comments, processing instructions) stream through without being carried.
//!
//! Every state change corresponds to consumed bytes only, so feeding the same document in any
//! split gives the same events, the same errors and the same error offsets.

use std::ops::Range;

use memchr::{memchr, memchr3};

use crate::error::XmlError;
use crate::path::XML_NS;

/// A start tag, an end tag, an XML declaration or the carried part of a `<!` or `<?` opener
/// may not be longer than this.
pub const MAX_TOKEN: usize = 64 * 1024;
/// Element nesting deeper than this is refused.
pub const MAX_DEPTH: usize = 4096;
/// A character or entity reference, `&` to `;`, may not be longer than this.
pub const MAX_REFERENCE: usize = 64;
/// Namespace id of a URI that the path does not mention.
pub(crate) const OTHER_NS: u32 = u32::MAX;

/// Start tags up to this long are delimited byte by byte (see [`start_tag_len`]).
const SHORT_TAG: usize = 256;
/// Text runs up to this long are scanned byte by byte; longer ones with `memchr` and bulk checks.
const SHORT_RUN: usize = 64;

const XMLNS_NS: &[u8] = b"http://www.w3.org/2000/xmlns/";
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Receives what the reader finds. Every method may ask the reader to stop right after the
/// current token by returning `true`.
pub(crate) trait Sink {
    fn start(&mut self, el: &StartTag<'_>) -> Result<bool, XmlError>;
    fn end(&mut self) -> Result<bool, XmlError>;
    /// Character data inside the root element: decoded, end-of-line normalised, never empty,
    /// always whole characters. Sinks that only look at structure keep the default.
    fn text(&mut self, _piece: &[u8], _at: usize) -> Result<bool, XmlError> {
        Ok(false)
    }
    /// A comment or processing instruction inside the root element (it splits text nodes).
    fn boundary(&mut self) -> Result<bool, XmlError> {
        Ok(false)
    }
    /// A CDATA section with nothing in it (`<![CDATA[]]>`): no text, but libxml2 makes a node
    /// of it all the same.
    fn empty_cdata(&mut self) -> Result<bool, XmlError> {
        Ok(false)
    }
    /// Whether [`Sink::text`] needs calling at all; lets the reader skip normalisation work.
    fn wants_text(&self) -> bool {
        false
    }
}

/// One attribute of a start tag; ranges index into [`StartTag::tag`].
#[derive(Debug, Clone)]
pub(crate) struct Attr {
    pub(crate) local: Range<usize>,
    pub(crate) prefix: Option<Range<usize>>,
    pub(crate) value: Range<usize>,
    pub(crate) ns: u32,
    /// `xmlns` or `xmlns:p`: a namespace declaration, not an attribute in XPath's data model.
    pub(crate) is_decl: bool,
    /// Start of this attribute's URI in `Reader::bind_bytes` scratch, for duplicate checks.
    uri: Range<usize>,
}

pub(crate) struct StartTag<'t> {
    pub(crate) ns: u32,
    pub(crate) local: &'t [u8],
    pub(crate) tag: &'t [u8],
    pub(crate) attrs: &'t [Attr],
    /// Absolute offset of the tag's `<`, for errors raised by the sink.
    pub(crate) offset: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    Comment,
    CData,
    Pi,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Doc {
    /// Nothing but possibly a BOM consumed: an XML declaration may still come.
    Start,
    Prolog,
    Root,
    Epilog,
}

#[derive(Debug, Clone)]
struct Open {
    name: Range<usize>,
    bindings: usize,
    bind_bytes: usize,
}

#[derive(Debug, Clone)]
struct Binding {
    prefix: Range<usize>,
    uri: Range<usize>,
    id: u32,
}

/// The tokenizer state that survives between chunks.
#[derive(Debug, Clone)]
pub(crate) struct Reader {
    /// Absolute offset of the first byte not yet consumed.
    pub(crate) base: usize,
    /// Bytes of an incomplete unit carried to the next chunk.
    carry: Vec<u8>,
    mode: Mode,
    doc: Doc,
    /// In a CDATA section that has held no character yet.
    cdata_empty: bool,
    /// The last literal text byte was CR: a LF right after it belongs to the same line end.
    after_cr: bool,
    names: Vec<u8>,
    open: Vec<Open>,
    bind_bytes: Vec<u8>,
    bindings: Vec<Binding>,
    attrs: Vec<Attr>,
    scratch: Vec<u8>,
    /// Set once an error was returned: the reader refuses further input.
    failed: Option<XmlError>,
}

impl Default for Reader {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// A byte that is a whole XML `Char` by itself: printable ASCII (DEL included), TAB, LF, CR.
/// A run of such bytes needs no UTF-8 or character check.
const PLAIN: u8 = 1;
/// Plain and ordinary in text: not `<`, `&` or `]`, which end a run of character data.
const TEXT: u8 = 2;
/// ASCII `NameStartChar` of an NCName (no colon).
const NAME_START: u8 = 4;
/// ASCII `NameChar` of an NCName (no colon).
const NAME_CHAR: u8 = 8;

/// Per-byte classes for the scanning loops, so the common ASCII case costs one table load per
/// byte; anything outside ASCII takes the general path with the full Unicode rules.
static CLASS: [u8; 256] = classes();

const fn classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        let mut k = 0;
        if (c >= 0x20 && c <= 0x7F) || c == b'\t' || c == b'\n' || c == b'\r' {
            k |= PLAIN;
            if c != b'<' && c != b'&' && c != b']' {
                k |= TEXT;
            }
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            k |= NAME_START | NAME_CHAR;
        }
        if c.is_ascii_digit() || c == b'-' || c == b'.' {
            k |= NAME_CHAR;
        }
        t[b] = k;
        b += 1;
    }
    t
}

#[inline]
fn class(b: u8) -> u8 {
    CLASS[b as usize]
}

impl Reader {
    pub(crate) fn new() -> Self {
        Reader {
            base: 0,
            carry: Vec::new(),
            mode: Mode::Content,
            doc: Doc::Start,
            cdata_empty: false,
            after_cr: false,
            // Room for what a SOAP message's first levels need (the envelope, its header and
            // body, their namespaces), so that reading one does not grow these a step at a
            // time; a deeper or wider document still grows them as it goes.
            names: Vec::with_capacity(256),
            open: Vec::with_capacity(16),
            bind_bytes: Vec::with_capacity(512),
            bindings: Vec::with_capacity(16),
            attrs: Vec::with_capacity(8),
            scratch: Vec::new(),
            failed: None,
        }
    }

    /// Feed a chunk. Returns `true` when the sink asked to stop; `base` is then the offset just
    /// after the token that decided, and the carry is empty.
    pub(crate) fn feed<S: Sink>(
        &mut self,
        chunk: &[u8],
        uris: &[String],
        sink: &mut S,
    ) -> Result<bool, XmlError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.feed_inner(chunk, uris, sink);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    fn feed_inner<S: Sink>(
        &mut self,
        mut chunk: &[u8],
        uris: &[String],
        sink: &mut S,
    ) -> Result<bool, XmlError> {
        if !self.carry.is_empty() {
            // Complete the carried unit by appending a little of the chunk at a time (doubling),
            // so only about the unit's own length is ever copied.
            let mut take = chunk.len().min(64);
            loop {
                if chunk.is_empty() {
                    return Ok(false);
                }
                let old = self.carry.len();
                self.carry.extend_from_slice(&chunk[..take]);
                let carry = std::mem::take(&mut self.carry);
                let r = self.process(&carry, uris, sink);
                self.carry = carry;
                let (n, stop) = r?;
                self.base += n;
                if stop {
                    self.carry.clear();
                    return Ok(true);
                }
                if n >= old {
                    chunk = &chunk[n - old..];
                    self.carry.clear();
                    break;
                }
                self.carry.drain(..n);
                chunk = &chunk[take..];
                take = (take * 2).min(chunk.len());
            }
        }
        let (n, stop) = self.process(chunk, uris, sink)?;
        self.base += n;
        if !stop {
            self.carry.extend_from_slice(&chunk[n..]);
        }
        Ok(stop)
    }

    /// End of input: an error unless the document is complete.
    pub(crate) fn finish(&mut self) -> Result<(), XmlError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let end = self.base + self.carry.len();
        let message = if self.mode == Mode::Comment {
            Some("end of document inside a comment")
        } else if self.mode == Mode::CData {
            Some("end of document inside a CDATA section")
        } else if self.mode == Mode::Pi {
            Some("end of document inside a processing instruction")
        } else if !self.carry.is_empty() {
            Some("end of document inside a token")
        } else if matches!(self.doc, Doc::Start | Doc::Prolog) {
            Some("end of document before the root element")
        } else if self.doc == Doc::Root {
            Some("end of document inside an element")
        } else {
            None
        };
        match message {
            Some(m) => {
                let e = XmlError::malformed(end, m);
                self.failed = Some(e.clone());
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Consume as many complete units of `buf` (which starts at absolute offset `self.base`)
    /// as possible. Returns the number of bytes consumed and whether the sink asked to stop.
    fn process<S: Sink>(
        &mut self,
        buf: &[u8],
        uris: &[String],
        sink: &mut S,
    ) -> Result<(usize, bool), XmlError> {
        let base = self.base;
        let mut pos = 0usize;
        if self.doc == Doc::Start {
            match self.prolog_start(buf)? {
                None => return Ok((0, false)),
                Some(n) => {
                    pos = n;
                    self.doc = Doc::Prolog;
                }
            }
        }
        while pos < buf.len() {
            let rest = &buf[pos..];
            let at = base + pos;
            match self.mode {
                Mode::Content => {
                    // Most text runs are short and plain ASCII: find their end with the byte
                    // table. Such a run needs no character check, so it goes straight to
                    // `char_data`; anything else (a long run, a non-ASCII or control byte, the
                    // end of the chunk) is left to the general path below.
                    let lim = rest.len().min(SHORT_RUN);
                    let mut i = 0;
                    while i < lim && class(rest[i]) & TEXT != 0 {
                        i += 1;
                    }
                    let delimited = i < lim && matches!(rest[i], b'<' | b'&' | b']');
                    if i > 0 && delimited {
                        let stop = self.char_data(&rest[..i], at, true, sink)?;
                        pos += i;
                        if stop {
                            return Ok((pos, true));
                        }
                        continue;
                    }
                    let i = if delimited {
                        0
                    } else {
                        memchr3(b'<', b'&', b']', rest).unwrap_or(rest.len())
                    };
                    if i > 0 {
                        if let Some(done) =
                            self.text_run(&rest[..i], at, i == rest.len(), &mut pos, sink)?
                        {
                            return Ok(done);
                        }
                        continue;
                    }
                    match rest[0] {
                        b']' => {
                            if rest.starts_with(b"]]>") {
                                return Err(XmlError::malformed(
                                    at,
                                    "']]>' is not allowed in text",
                                ));
                            }
                            if rest.len() < 3 && b"]]>".starts_with(rest) {
                                return Ok((pos, false));
                            }
                            let stop = self.char_data(b"]", at, true, sink)?;
                            pos += 1;
                            if stop {
                                return Ok((pos, true));
                            }
                        }
                        b'&' => match reference(rest, at)? {
                            None => return Ok((pos, false)),
                            Some((len, bytes, n)) => {
                                if self.doc != Doc::Root {
                                    return Err(XmlError::malformed(
                                        at,
                                        "a reference outside the root element",
                                    ));
                                }
                                self.after_cr = false;
                                pos += len;
                                if sink.wants_text() && sink.text(&bytes[..n], at)? {
                                    return Ok((pos, true));
                                }
                            }
                        },
                        _ => {
                            self.after_cr = false;
                            match self.markup(rest, at, uris, sink)? {
                                None => return Ok((pos, false)),
                                Some((len, stop)) => {
                                    pos += len;
                                    if stop {
                                        return Ok((pos, true));
                                    }
                                }
                            }
                        }
                    }
                }
                Mode::Comment => match memchr(b'-', rest) {
                    None => {
                        pos += check_chars(rest, at, true)?;
                        return Ok((pos, false));
                    }
                    Some(i) => {
                        check_chars(&rest[..i], at, false)?;
                        match (rest.get(i + 1), rest.get(i + 2)) {
                            (None, _) | (Some(b'-'), None) => return Ok((pos + i, false)),
                            (Some(b'-'), Some(b'>')) => {
                                self.mode = Mode::Content;
                                pos += i + 3;
                            }
                            (Some(b'-'), Some(_)) => {
                                return Err(XmlError::malformed(
                                    at + i,
                                    "'--' is not allowed inside a comment",
                                ))
                            }
                            (Some(_), _) => pos += i + 1,
                        }
                    }
                },
                Mode::Pi => match memchr(b'?', rest) {
                    None => {
                        pos += check_chars(rest, at, true)?;
                        return Ok((pos, false));
                    }
                    Some(i) => {
                        check_chars(&rest[..i], at, false)?;
                        match rest.get(i + 1) {
                            None => return Ok((pos + i, false)),
                            Some(b'>') => {
                                self.mode = Mode::Content;
                                pos += i + 2;
                            }
                            Some(_) => pos += i + 1,
                        }
                    }
                },
                Mode::CData => {
                    let i = memchr(b']', rest).unwrap_or(rest.len());
                    if i > 0 {
                        if let Some(done) =
                            self.text_run(&rest[..i], at, i == rest.len(), &mut pos, sink)?
                        {
                            return Ok(done);
                        }
                        continue;
                    }
                    if rest.starts_with(b"]]>") {
                        self.mode = Mode::Content;
                        pos += 3;
                        if std::mem::take(&mut self.cdata_empty) && sink.empty_cdata()? {
                            return Ok((pos, true));
                        }
                        continue;
                    }
                    if rest.len() < 3 && b"]]>".starts_with(rest) {
                        return Ok((pos, false));
                    }
                    let stop = self.char_data(b"]", at, true, sink)?;
                    pos += 1;
                    if stop {
                        return Ok((pos, true));
                    }
                }
            }
        }
        Ok((pos, false))
    }

    /// At the very start: a UTF-8 BOM and an XML declaration. `None` asks for more bytes.
    fn prolog_start(&mut self, buf: &[u8]) -> Result<Option<usize>, XmlError> {
        let mut pos = 0;
        // The first byte of a BOM alone decides nothing: what follows tells a UTF-8 BOM, a
        // UTF-16 one and invalid UTF-8 apart, whatever the chunking.
        if buf.len() < BOM.len() && BOM.starts_with(buf) || matches!(buf, [0xFE] | [0xFF]) {
            return Ok(None);
        }
        if buf.starts_with(BOM) {
            pos = BOM.len();
        } else if buf.starts_with(b"\xFE\xFF") || buf.starts_with(b"\xFF\xFE") {
            return Err(XmlError::UnsupportedEncoding {
                encoding: "UTF-16".to_owned(),
            });
        }
        let rest = &buf[pos..];
        const OPEN: &[u8] = b"<?xml";
        if rest.len() <= OPEN.len() {
            if OPEN.starts_with(rest) {
                return Ok(None);
            }
            return Ok(Some(pos));
        }
        if !(rest.starts_with(OPEN) && is_ws(rest[OPEN.len()])) {
            return Ok(Some(pos));
        }
        let limit = rest.len().min(MAX_TOKEN);
        match memchr::memmem::find(&rest[..limit], b"?>") {
            None if rest.len() >= MAX_TOKEN => Err(XmlError::Limit {
                offset: pos,
                what: "XML declaration",
                limit: MAX_TOKEN,
            }),
            None => Ok(None),
            Some(end) => {
                xml_declaration(&rest[OPEN.len()..end], pos)?;
                Ok(Some(pos + end + 2))
            }
        }
    }

    /// Character data (literal when `literal`): outside the root only whitespace is allowed.
    /// Hands a run of character data (text or CDATA content) to the sink and advances `pos`
    /// past what it took; `Some(outcome)` when the scan must return with it.
    fn text_run<S: Sink>(
        &mut self,
        span: &[u8],
        at: usize,
        at_end: bool,
        pos: &mut usize,
        sink: &mut S,
    ) -> Result<Option<(usize, bool)>, XmlError> {
        // Text before a bad character is handled first, so that an earlier error in it wins
        // whatever the split.
        let (whole, bad) = split_check(span, at, at_end);
        let stop = self.char_data(&span[..whole], at, true, sink)?;
        if let Some(e) = bad {
            return Err(e);
        }
        *pos += whole;
        if stop {
            return Ok(Some((*pos, true)));
        }
        if whole < span.len() {
            return Ok(Some((*pos, false)));
        }
        Ok(None)
    }

    fn char_data<S: Sink>(
        &mut self,
        bytes: &[u8],
        at: usize,
        literal: bool,
        sink: &mut S,
    ) -> Result<bool, XmlError> {
        if bytes.is_empty() {
            return Ok(false);
        }
        if self.mode == Mode::CData {
            self.cdata_empty = false;
        }
        if self.doc != Doc::Root {
            if self.mode == Mode::CData {
                return Err(XmlError::malformed(at, "CDATA outside the root element"));
            }
            if let Some(k) = bytes.iter().position(|&b| !is_ws(b)) {
                let message = if self.doc == Doc::Epilog {
                    "text after the root element"
                } else {
                    "text before the root element"
                };
                return Err(XmlError::malformed(at + k, message));
            }
            return Ok(false);
        }
        if !sink.wants_text() {
            self.after_cr = literal && bytes.last() == Some(&b'\r');
            return Ok(false);
        }
        if !literal || (!self.after_cr && memchr(b'\r', bytes).is_none()) {
            self.after_cr = false;
            return sink.text(bytes, at);
        }
        // End-of-line handling (XML 1.0 §2.11): CR LF and lone CR become LF.
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let mut skip_lf = self.after_cr;
        for &b in bytes {
            if skip_lf && b == b'\n' {
                skip_lf = false;
                continue;
            }
            skip_lf = b == b'\r';
            out.push(if b == b'\r' { b'\n' } else { b });
        }
        self.after_cr = skip_lf;
        let r = if out.is_empty() {
            Ok(false)
        } else {
            sink.text(&out, at)
        };
        self.scratch = out;
        r
    }

    /// `rest` starts with `<`. Returns the token length and the sink's stop request, or
    /// `None` when the token is incomplete.
    fn markup<S: Sink>(
        &mut self,
        rest: &[u8],
        at: usize,
        uris: &[String],
        sink: &mut S,
    ) -> Result<Option<(usize, bool)>, XmlError> {
        let Some(&second) = rest.get(1) else {
            return Ok(None);
        };
        match second {
            b'/' => {
                // The usual end tag is `</` + the open element's name + `>`: compare in place.
                // (A validated name holds no `>`, so this is the tag the general path would
                // cut at its first `>`, and within the token limit it would accept it too.)
                if let Some(open) = self.open.last() {
                    let name = &self.names[open.name.clone()];
                    let n = name.len();
                    if n + 3 <= MAX_TOKEN
                        && rest.get(2 + n) == Some(&b'>')
                        && &rest[2..2 + n] == name
                    {
                        self.pop_element();
                        let stop = sink.end()?;
                        return Ok(Some((n + 3, stop)));
                    }
                }
                let limit = rest.len().min(MAX_TOKEN);
                let Some(gt) = memchr(b'>', &rest[..limit]) else {
                    return too_long(rest, at, "end tag");
                };
                let stop = self.end_tag(&rest[..=gt], at, sink)?;
                Ok(Some((gt + 1, stop)))
            }
            b'?' => {
                let limit = rest.len().min(MAX_TOKEN);
                let end = rest[2..limit].iter().position(|&b| is_ws(b) || b == b'?');
                let Some(end) = end.map(|e| e + 2) else {
                    return too_long(rest, at, "processing instruction target");
                };
                let target = &rest[2..end];
                check_chars(target, at + 2, false)?;
                let name = std::str::from_utf8(target).unwrap_or("");
                if !crate::path::is_ncname(name) {
                    return Err(XmlError::malformed(
                        at + 2,
                        "invalid processing instruction target",
                    ));
                }
                if name.eq_ignore_ascii_case("xml") {
                    return Err(XmlError::malformed(
                        at,
                        "an XML declaration is only allowed at the start of the document",
                    ));
                }
                // After the target comes whitespace or the closing `?>` itself.
                if rest[end] == b'?' {
                    match rest.get(end + 1) {
                        None => return Ok(None),
                        Some(b'>') => {}
                        Some(_) => {
                            return Err(XmlError::malformed(
                                at + end,
                                "expected whitespace after the processing instruction target",
                            ))
                        }
                    }
                }
                self.mode = Mode::Pi;
                let len = if rest[end] == b'?' { end } else { end + 1 };
                let stop = self.doc == Doc::Root && sink.boundary()?;
                Ok(Some((len, stop)))
            }
            b'!' => {
                const COMMENT: &[u8] = b"<!--";
                const CDATA: &[u8] = b"<![CDATA[";
                const DOCTYPE: &[u8] = b"<!DOCTYPE";
                if rest.starts_with(COMMENT) {
                    self.mode = Mode::Comment;
                    let stop = self.doc == Doc::Root && sink.boundary()?;
                    return Ok(Some((COMMENT.len(), stop)));
                }
                if rest.starts_with(CDATA) {
                    if self.doc != Doc::Root {
                        return Err(XmlError::malformed(at, "CDATA outside the root element"));
                    }
                    self.mode = Mode::CData;
                    self.cdata_empty = true;
                    return Ok(Some((CDATA.len(), false)));
                }
                if rest.starts_with(DOCTYPE) {
                    return Err(XmlError::Doctype { offset: at });
                }
                if rest.len() < CDATA.len()
                    && (COMMENT.starts_with(rest)
                        || CDATA.starts_with(rest)
                        || DOCTYPE.starts_with(rest))
                {
                    return Ok(None);
                }
                Err(XmlError::malformed(at, "invalid markup after '<!'"))
            }
            _ => {
                // `<name>` and `<name/>`, the most common tags, are delimited and their name
                // checked in one pass. Exactly what the general path would find: the name holds
                // no quote or `>`, its bytes are plain, and the tag is within the token limit.
                let limit = rest.len().min(MAX_TOKEN);
                if let Some((name_end, colon)) = ascii_qname(rest, 1, limit) {
                    let len = match rest.get(name_end) {
                        Some(b'>') => name_end + 1,
                        Some(b'/') if rest.get(name_end + 1) == Some(&b'>') => name_end + 2,
                        _ => usize::MAX,
                    };
                    if len <= limit {
                        let name = Some((name_end, colon));
                        let stop = self.start_tag(&rest[..len], at, true, name, uris, sink)?;
                        return Ok(Some((len, stop)));
                    }
                }
                let Some((len, plain)) = start_tag_len(rest, at)? else {
                    return Ok(None);
                };
                let stop = self.start_tag(&rest[..len], at, plain, None, uris, sink)?;
                Ok(Some((len, stop)))
            }
        }
    }

    fn end_tag<S: Sink>(&mut self, tag: &[u8], at: usize, sink: &mut S) -> Result<bool, XmlError> {
        let inner = &tag[2..tag.len() - 1];
        let name_len = inner.iter().position(|&b| is_ws(b)).unwrap_or(inner.len());
        if inner[name_len..].iter().any(|&b| !is_ws(b)) {
            return Err(XmlError::malformed(at, "invalid end tag"));
        }
        let name = &inner[..name_len];
        let Some(open) = self.open.last() else {
            return Err(XmlError::malformed(
                at,
                "end tag without a matching start tag",
            ));
        };
        if &self.names[open.name.clone()] != name {
            let expected = String::from_utf8_lossy(&self.names[open.name.clone()]).into_owned();
            return Err(XmlError::malformed(
                at,
                format!("end tag does not match the start tag '{expected}'"),
            ));
        }
        self.pop_element();
        sink.end()
    }

    /// `plain`: every byte of `tag` is plain ASCII, so its characters need no check. `name`:
    /// the element name's end and colon, when the caller has already read and checked it.
    fn start_tag<S: Sink>(
        &mut self,
        tag: &[u8],
        at: usize,
        plain: bool,
        name: Option<(usize, Option<usize>)>,
        uris: &[String],
        sink: &mut S,
    ) -> Result<bool, XmlError> {
        match self.doc {
            Doc::Epilog => {
                return Err(XmlError::malformed(at, "a second root element"));
            }
            _ if self.open.len() >= MAX_DEPTH => {
                return Err(XmlError::Limit {
                    offset: at,
                    what: "element nesting",
                    limit: MAX_DEPTH,
                });
            }
            _ => {}
        }
        if !plain {
            check_chars(tag, at, false)?;
        }
        let empty = tag.ends_with(b"/>");
        let inner_end = if empty { tag.len() - 2 } else { tag.len() - 1 };
        let (name_end, colon) = match name {
            Some(n) => n,
            None => qname(tag, 1, inner_end, at)?,
        };
        let mut attrs = std::mem::take(&mut self.attrs);
        attrs.clear();
        let mut i = name_end;
        loop {
            let ws_start = i;
            while i < inner_end && is_ws(tag[i]) {
                i += 1;
            }
            if i == inner_end {
                break;
            }
            if i == ws_start {
                self.attrs = attrs;
                return Err(XmlError::malformed(
                    at + i,
                    "expected whitespace before an attribute",
                ));
            }
            let (an_end, acolon) = match qname(tag, i, inner_end, at) {
                Ok(x) => x,
                Err(e) => {
                    self.attrs = attrs;
                    return Err(e);
                }
            };
            let mut j = an_end;
            while j < inner_end && is_ws(tag[j]) {
                j += 1;
            }
            if tag.get(j) != Some(&b'=') || j >= inner_end {
                self.attrs = attrs;
                return Err(XmlError::malformed(
                    at + j,
                    "expected '=' after an attribute name",
                ));
            }
            j += 1;
            while j < inner_end && is_ws(tag[j]) {
                j += 1;
            }
            let quote = tag[j.min(inner_end)];
            if j >= inner_end || (quote != b'"' && quote != b'\'') {
                self.attrs = attrs;
                return Err(XmlError::malformed(
                    at + j,
                    "expected a quoted attribute value",
                ));
            }
            let vstart = j + 1;
            let Some(vlen) = memchr(quote, &tag[vstart..inner_end]) else {
                self.attrs = attrs;
                return Err(XmlError::malformed(at + j, "unterminated attribute value"));
            };
            let value = vstart..vstart + vlen;
            if let Err(e) = check_attr_value(&tag[value.clone()], at + vstart) {
                self.attrs = attrs;
                return Err(e);
            }
            let (prefix, local) = match acolon {
                Some(c) => (Some(i..c), c + 1..an_end),
                None => (None, i..an_end),
            };
            attrs.push(Attr {
                local,
                prefix,
                value,
                ns: 0,
                is_decl: false,
                uri: 0..0,
            });
            i = vstart + vlen + 1;
        }
        let r = self.bind_and_emit(tag, at, 1..name_end, colon, &mut attrs, uris, sink);
        self.attrs = attrs;
        let stop = r?;
        if empty {
            // An empty-element tag pops right away; its bindings go with it.
            self.pop_element();
            // A decision taken at the start tag stands; the end is not reported after it.
            return if stop { Ok(true) } else { sink.end() };
        }
        Ok(stop)
    }

    #[allow(clippy::too_many_arguments)]
    fn bind_and_emit<S: Sink>(
        &mut self,
        tag: &[u8],
        at: usize,
        name: Range<usize>,
        colon: Option<usize>,
        attrs: &mut [Attr],
        uris: &[String],
        sink: &mut S,
    ) -> Result<bool, XmlError> {
        let open = Open {
            name: self.names.len()..self.names.len() + name.len(),
            bindings: self.bindings.len(),
            bind_bytes: self.bind_bytes.len(),
        };
        // Namespace declarations first: they apply to the element's own name and attributes.
        for a in attrs.iter_mut() {
            let (is_default, is_prefixed) = match &a.prefix {
                None => (&tag[a.local.clone()] == b"xmlns", false),
                Some(p) => (false, &tag[p.clone()] == b"xmlns"),
            };
            if !is_default && !is_prefixed {
                continue;
            }
            a.is_decl = true;
            let prefix: &[u8] = if is_prefixed {
                &tag[a.local.clone()]
            } else {
                b""
            };
            let ustart = self.bind_bytes.len();
            decode_attr(&tag[a.value.clone()], &mut self.bind_bytes);
            let uri_range = ustart..self.bind_bytes.len();
            let uri = &self.bind_bytes[uri_range.clone()];
            let bad = |m: &str| Err(XmlError::malformed(at, m.to_owned()));
            if prefix == b"xmlns" {
                return bad("the 'xmlns' prefix cannot be declared");
            }
            if prefix == b"xml" {
                if uri != XML_NS.as_bytes() {
                    return bad("the 'xml' prefix cannot be bound to another namespace");
                }
            } else if uri == XML_NS.as_bytes() || uri == XMLNS_NS {
                return bad("a reserved namespace cannot be bound to this prefix");
            }
            if is_prefixed && uri.is_empty() {
                return bad("a prefix cannot be undeclared in XML 1.0");
            }
            let id = ns_id(uri, uris);
            let pstart = self.bind_bytes.len();
            self.bind_bytes.extend_from_slice(prefix);
            self.bindings.push(Binding {
                prefix: pstart..self.bind_bytes.len(),
                uri: uri_range,
                id,
            });
        }
        self.names.extend_from_slice(&tag[name.clone()]);
        self.open.push(open);
        if self.doc != Doc::Root {
            self.doc = Doc::Root;
        }
        let (el_prefix, el_local): (&[u8], Range<usize>) = match colon {
            Some(c) => (&tag[name.start..c], c + 1..name.end),
            None => (b"", name.clone()),
        };
        if el_prefix == b"xmlns" {
            return Err(XmlError::malformed(
                at,
                "an element name cannot use the 'xmlns' prefix",
            ));
        }
        let Some((ns, _)) = self.resolve(el_prefix, uris) else {
            return Err(XmlError::malformed(
                at,
                format!("undeclared prefix '{}'", String::from_utf8_lossy(el_prefix)),
            ));
        };
        for a in attrs.iter_mut() {
            if a.is_decl {
                continue;
            }
            if let Some(p) = a.prefix.clone() {
                let Some((id, uri)) = self.resolve(&tag[p.clone()], uris) else {
                    return Err(XmlError::malformed(
                        at,
                        format!("undeclared prefix '{}'", String::from_utf8_lossy(&tag[p])),
                    ));
                };
                a.ns = id;
                a.uri = uri;
            }
        }
        // Attribute names must be unique, as written and once expanded.
        check_unique(tag, attrs, &self.bind_bytes, at)?;
        let el = StartTag {
            ns,
            local: &tag[el_local],
            tag,
            attrs,
            offset: at,
        };
        sink.start(&el)
    }

    /// Close the innermost element; its name and namespace bindings go with it.
    fn pop_element(&mut self) {
        if let Some(open) = self.open.pop() {
            self.names.truncate(open.name.start);
            self.bindings.truncate(open.bindings);
            self.bind_bytes.truncate(open.bind_bytes);
        }
        if self.open.is_empty() {
            self.doc = Doc::Epilog;
        }
    }

    /// The namespace id and URI range bound to `prefix` (empty = default namespace).
    fn resolve(&self, prefix: &[u8], uris: &[String]) -> Option<(u32, Range<usize>)> {
        for b in self.bindings.iter().rev() {
            // Lengths first: most lookups are for the default namespace against prefixed
            // bindings, which this settles without touching the bytes.
            if b.prefix.len() == prefix.len() && &self.bind_bytes[b.prefix.clone()] == prefix {
                return Some((b.id, b.uri.clone()));
            }
        }
        if prefix.is_empty() {
            return Some((0, 0..0));
        }
        if prefix == b"xml" {
            // Predeclared; its URI is compared by id only, so no bytes are needed for it.
            return Some((ns_id(XML_NS.as_bytes(), uris), 0..0));
        }
        None
    }
}

/// Start tags with at most this many attributes are checked pairwise (no allocation); larger
/// ones with hash sets, so a 64 KiB tag of thousands of attributes costs linear time.
const PAIRWISE_ATTRS: usize = 8;

#[cfg(test)]
thread_local! {
    /// Name comparisons and hash-set insertions made by [`check_unique`] (tests count work).
    static UNIQUE_PROBES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[inline]
fn probe() {
    #[cfg(test)]
    UNIQUE_PROBES.with(|p| p.set(p.get() + 1));
}

/// Refuses two attributes with the same qualified name as written, or two prefixed
/// (non-declaration) attributes with the same local name and namespace URI. Both strategies
/// refuse exactly the same tags, with the same error.
fn check_unique(tag: &[u8], attrs: &[Attr], bind_bytes: &[u8], at: usize) -> Result<(), XmlError> {
    let qname = |a: &Attr| a.prefix.as_ref().map_or(a.local.start, |p| p.start)..a.local.end;
    let expanded = |a: &Attr| !a.is_decl && a.prefix.is_some();
    let duplicate = || Err(XmlError::malformed(at, "duplicate attribute"));
    if attrs.len() <= PAIRWISE_ATTRS {
        for k in 1..attrs.len() {
            for m in 0..k {
                probe();
                let (a, b) = (&attrs[k], &attrs[m]);
                let same_qname = tag[qname(a)] == tag[qname(b)];
                let same_expanded = expanded(a)
                    && expanded(b)
                    && tag[a.local.clone()] == tag[b.local.clone()]
                    && bind_bytes[a.uri.clone()] == bind_bytes[b.uri.clone()];
                if same_qname || same_expanded {
                    return duplicate();
                }
            }
        }
        return Ok(());
    }
    let mut qnames = std::collections::HashSet::with_capacity(attrs.len());
    let mut names = std::collections::HashSet::new();
    for a in attrs {
        probe();
        if !qnames.insert(&tag[qname(a)]) {
            return duplicate();
        }
        if expanded(a) && !names.insert((&tag[a.local.clone()], &bind_bytes[a.uri.clone()])) {
            return duplicate();
        }
    }
    Ok(())
}

fn too_long<T>(rest: &[u8], at: usize, what: &'static str) -> Result<Option<T>, XmlError> {
    if rest.len() >= MAX_TOKEN {
        Err(XmlError::Limit {
            offset: at,
            what,
            limit: MAX_TOKEN,
        })
    } else {
        Ok(None)
    }
}

fn ns_id(uri: &[u8], uris: &[String]) -> u32 {
    if uri.is_empty() {
        return 0;
    }
    match uris.iter().position(|u| u.as_bytes() == uri) {
        Some(k) => k as u32 + 1,
        None => OTHER_NS,
    }
}

/// Length of the start tag at the start of `rest` (through the first `>` outside quotes),
/// `None` if incomplete, and whether all its bytes are plain ASCII (then its characters need
/// no separate check). Tags are usually short: their first bytes are scanned in one pass with
/// the byte table; a longer tag is delimited with `memchr` and reported as not plain.
fn start_tag_len(rest: &[u8], at: usize) -> Result<Option<(usize, bool)>, XmlError> {
    let limit = rest.len().min(MAX_TOKEN);
    let mut plain = true;
    let mut quote = 0u8;
    for (i, &b) in rest[..limit.min(SHORT_TAG)].iter().enumerate().skip(1) {
        plain &= class(b) & PLAIN != 0;
        if quote == 0 {
            if b == b'>' {
                return Ok(Some((i + 1, plain)));
            }
            if b == b'"' || b == b'\'' {
                quote = b;
            }
        } else if b == quote {
            quote = 0;
        }
    }
    let mut i = 1;
    while i < limit {
        match memchr3(b'>', b'"', b'\'', &rest[i..limit]) {
            None => break,
            Some(k) => {
                let c = rest[i + k];
                if c == b'>' {
                    return Ok(Some((i + k + 1, false)));
                }
                match memchr(c, &rest[i + k + 1..limit]) {
                    None => break,
                    Some(m) => i = i + k + 1 + m + 1,
                }
            }
        }
    }
    too_long(rest, at, "start tag")
}

/// An ASCII QName at `tag[start..end]`, the usual case, checked with the byte table: a name
/// start, name characters, at most one colon followed by a name start, then a delimiter (or
/// `end`). Returns its end and the colon's index; `None` when the rule does not apply, and the
/// general path of [`qname`] applies the full rules and reports any error.
#[inline]
fn ascii_qname(tag: &[u8], start: usize, end: usize) -> Option<(usize, Option<usize>)> {
    if start >= end || class(tag[start]) & NAME_START == 0 {
        return None;
    }
    let mut i = start + 1;
    let mut colon = None;
    while i < end {
        let b = tag[i];
        if class(b) & NAME_CHAR != 0 {
            i += 1;
        } else if b == b':' && colon.is_none() && i + 1 < end && class(tag[i + 1]) & NAME_START != 0
        {
            colon = Some(i);
            i += 2;
        } else {
            break;
        }
    }
    if i == end || matches!(tag[i], b' ' | b'\t' | b'\r' | b'\n' | b'=' | b'/' | b'>') {
        Some((i, colon))
    } else {
        None
    }
}

/// Parse a QName at `tag[start..]`; returns its end and the colon's index.
fn qname(
    tag: &[u8],
    start: usize,
    end: usize,
    at: usize,
) -> Result<(usize, Option<usize>), XmlError> {
    if let Some(r) = ascii_qname(tag, start, end) {
        return Ok(r);
    }
    let mut i = start;
    while i < end && !is_ws(tag[i]) && tag[i] != b'=' && tag[i] != b'/' && tag[i] != b'>' {
        i += 1;
    }
    let name = std::str::from_utf8(&tag[start..i])
        .map_err(|_| XmlError::malformed(at + start, "invalid name"))?;
    let colon = name.find(':');
    let ok = match colon {
        None => crate::path::is_ncname(name),
        Some(c) => crate::path::is_ncname(&name[..c]) && crate::path::is_ncname(&name[c + 1..]),
    };
    if !ok {
        return Err(XmlError::malformed(
            at + start,
            format!("invalid name '{name}'"),
        ));
    }
    Ok((i, colon.map(|c| start + c)))
}

/// The XML declaration's pseudo-attributes (between `<?xml` and `?>`).
fn xml_declaration(body: &[u8], at: usize) -> Result<(), XmlError> {
    let bad = |m: &str| XmlError::malformed(at, m.to_owned());
    let text = std::str::from_utf8(body).map_err(|_| bad("invalid XML declaration"))?;
    let mut rest = text;
    let mut seen: Vec<&str> = Vec::new();
    loop {
        let trimmed = rest.trim_start_matches([' ', '\t', '\r', '\n']);
        if trimmed.is_empty() {
            break;
        }
        if trimmed.len() == rest.len() {
            return Err(bad("invalid XML declaration"));
        }
        let eq = trimmed
            .find('=')
            .ok_or_else(|| bad("invalid XML declaration"))?;
        let name = trimmed[..eq].trim_end_matches([' ', '\t', '\r', '\n']);
        let after = trimmed[eq + 1..].trim_start_matches([' ', '\t', '\r', '\n']);
        let q = after
            .chars()
            .next()
            .ok_or_else(|| bad("invalid XML declaration"))?;
        if q != '"' && q != '\'' {
            return Err(bad("invalid XML declaration"));
        }
        let close = after[1..]
            .find(q)
            .ok_or_else(|| bad("invalid XML declaration"))?;
        let value = &after[1..1 + close];
        rest = &after[close + 2..];
        let expected_order = ["version", "encoding", "standalone"];
        let Some(rank) = expected_order.iter().position(|n| *n == name) else {
            return Err(bad("unknown pseudo-attribute in the XML declaration"));
        };
        if seen
            .iter()
            .any(|s| expected_order.iter().position(|n| n == s) >= Some(rank))
        {
            return Err(bad("XML declaration pseudo-attributes out of order"));
        }
        if seen.is_empty() && name != "version" {
            return Err(bad("the XML declaration must start with version"));
        }
        seen.push(expected_order[rank]);
        match name {
            "version" => {
                let ok = value
                    .strip_prefix("1.")
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
                if !ok {
                    return Err(bad("unsupported XML version"));
                }
            }
            "encoding" => {
                let e = value.to_ascii_lowercase();
                if !matches!(e.as_str(), "utf-8" | "utf8" | "us-ascii" | "ascii") {
                    return Err(XmlError::UnsupportedEncoding {
                        encoding: value.to_owned(),
                    });
                }
            }
            _ => {
                if value != "yes" && value != "no" {
                    return Err(bad("standalone must be 'yes' or 'no'"));
                }
            }
        }
    }
    if seen.is_empty() {
        return Err(bad("the XML declaration must give a version"));
    }
    Ok(())
}

/// Check that `s` is well-formed UTF-8 made of XML `Char`s. Returns how many bytes are
/// whole characters; an incomplete character at the end is left over when `more_may_follow`.
/// The earliest problem is reported, whatever the split.
pub(crate) fn check_chars(s: &[u8], at: usize, more_may_follow: bool) -> Result<usize, XmlError> {
    let (valid, utf8_error) = match std::str::from_utf8(s) {
        Ok(_) => (s.len(), None),
        Err(e) => (e.valid_up_to(), Some(e.error_len())),
    };
    let good = &s[..valid];
    if let Some(k) = first_forbidden(good) {
        return Err(XmlError::malformed(
            at + k,
            "a character not allowed in XML",
        ));
    }
    match utf8_error {
        None => Ok(valid),
        Some(None) if more_may_follow => Ok(valid),
        Some(_) => Err(XmlError::malformed(at + valid, "invalid UTF-8")),
    }
}

/// Like [`check_chars`], but returns the length of the good prefix along with the error.
fn split_check(s: &[u8], at: usize, more_may_follow: bool) -> (usize, Option<XmlError>) {
    match check_chars(s, at, more_may_follow) {
        Ok(n) => (n, None),
        Err(e) => {
            let good = match &e {
                XmlError::Malformed { offset, .. } => offset.saturating_sub(at).min(s.len()),
                _ => 0,
            };
            (good, Some(e))
        }
    }
}

/// Control characters other than TAB, LF, CR, and U+FFFE / U+FFFF (valid UTF-8, not XML).
fn first_forbidden(s: &[u8]) -> Option<usize> {
    const BLOCK: usize = 32;
    let mut first = None;
    for (bi, block) in s.chunks(BLOCK).enumerate() {
        // Branch-free test per block so the common clean case stays vectorisable.
        let suspicious = block
            .iter()
            .fold(false, |acc, &b| acc | (b < 0x20) | (b == 0xEF));
        if !suspicious {
            continue;
        }
        if let Some(k) = block
            .iter()
            .position(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
        {
            first = Some(bi * BLOCK + k);
            break;
        }
    }
    let limit = first.unwrap_or(s.len());
    let mut from = 0;
    while let Some(k) = memchr(0xEF, &s[from..limit]) {
        let i = from + k;
        if s.get(i + 1) == Some(&0xBF) && matches!(s.get(i + 2), Some(0xBE | 0xBF)) {
            return Some(i);
        }
        from = i + 1;
    }
    first
}

/// Check an attribute value as written: no `<`, references well-formed and known.
fn check_attr_value(v: &[u8], at: usize) -> Result<(), XmlError> {
    if let Some(k) = memchr(b'<', v) {
        return Err(XmlError::malformed(at + k, "'<' in an attribute value"));
    }
    let mut from = 0;
    while let Some(k) = memchr(b'&', &v[from..]) {
        let i = from + k;
        match reference(&v[i..], at + i)? {
            Some((len, _, _)) => from = i + len,
            None => return Err(XmlError::malformed(at + i, "a reference without ';'")),
        }
    }
    Ok(())
}

/// Decode an attribute value (already checked): references replaced, literal whitespace
/// normalised to spaces (a CR LF pair being one line end), as XML 1.0 §3.3.3 requires for
/// CDATA-typed attributes.
pub(crate) fn decode_attr(v: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < v.len() {
        // The run of bytes that stand for themselves goes in at once (a namespace URI is
        // usually all of it).
        let run = v[i..]
            .iter()
            .position(|&b| matches!(b, b'&' | b'\r' | b'\n' | b'\t'))
            .unwrap_or(v.len() - i);
        out.extend_from_slice(&v[i..i + run]);
        i += run;
        if i == v.len() {
            break;
        }
        match v[i] {
            b'&' => {
                if let Ok(Some((len, bytes, n))) = reference(&v[i..], 0) {
                    out.extend_from_slice(&bytes[..n]);
                    i += len;
                } else {
                    // Unreachable for checked values; keep the byte rather than lose data.
                    out.push(b'&');
                    i += 1;
                }
            }
            b'\r' => {
                out.push(b' ');
                i += if v.get(i + 1) == Some(&b'\n') { 2 } else { 1 };
            }
            b'\n' | b'\t' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
}

/// A reference at the start of `s` (`&...;`). Returns its length and decoded UTF-8 bytes, or
/// `None` if `s` ends before the reference does.
fn reference(s: &[u8], at: usize) -> Result<Option<(usize, [u8; 4], usize)>, XmlError> {
    let limit = s.len().min(MAX_REFERENCE);
    let mut end = None;
    for (k, &b) in s[..limit].iter().enumerate().skip(1) {
        if b == b';' {
            end = Some(k);
            break;
        }
        if !(b.is_ascii_alphanumeric()
            || matches!(b, b'#' | b'_' | b'-' | b'.' | b':')
            || b >= 0x80)
        {
            return Err(XmlError::malformed(at, "a reference without ';'"));
        }
    }
    let Some(end) = end else {
        if s.len() >= MAX_REFERENCE {
            return Err(XmlError::Limit {
                offset: at,
                what: "reference",
                limit: MAX_REFERENCE,
            });
        }
        return Ok(None);
    };
    let name = &s[1..end];
    let mut out = [0u8; 4];
    let single = |b: u8| {
        let mut o = [0u8; 4];
        o[0] = b;
        Ok(Some((end + 1, o, 1)))
    };
    match name {
        b"lt" => return single(b'<'),
        b"gt" => return single(b'>'),
        b"amp" => return single(b'&'),
        b"apos" => return single(b'\''),
        b"quot" => return single(b'"'),
        _ => {}
    }
    let code = if let Some(hex) = name.strip_prefix(b"#x") {
        parse_radix(hex, 16)
    } else if let Some(dec) = name.strip_prefix(b"#") {
        parse_radix(dec, 10)
    } else {
        let shown = String::from_utf8_lossy(name);
        return Err(XmlError::malformed(
            at,
            format!("unknown entity '&{shown};'"),
        ));
    };
    let c = code.and_then(char::from_u32).filter(|&c| {
        matches!(c as u32, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
    });
    let Some(c) = c else {
        return Err(XmlError::malformed(
            at,
            "a character reference to a character not allowed in XML",
        ));
    };
    let n = c.encode_utf8(&mut out).len();
    Ok(Some((end + 1, out, n)))
}

fn parse_radix(digits: &[u8], radix: u32) -> Option<u32> {
    if digits.is_empty() {
        return None;
    }
    let mut v: u32 = 0;
    for &d in digits {
        let x = (d as char).to_digit(radix)?;
        v = v.checked_mul(radix)?.checked_add(x)?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::WellFormed;

    #[test]
    fn attribute_values_are_decoded_whole_around_every_reference_and_line_end() {
        let long = "http://services.samples/xsd/".repeat(20);
        let cases: Vec<(String, String)> = vec![
            (String::new(), String::new()),
            ("urn:p".into(), "urn:p".into()),
            (long.clone(), long.clone()),
            ("a&amp;b".into(), "a&b".into()),
            ("&lt;&gt;&quot;&apos;".into(), "<>\"'".into()),
            (format!("{long}&#65;{long}"), format!("{long}A{long}")),
            ("&#x1F600;x".into(), "\u{1F600}x".into()),
            ("a\r\nb\rc\nd\te".into(), "a b c d e".into()),
            ("\r\n\r\n".into(), "  ".into()),
            ("\t".into(), " ".into()),
            ("é&amp;ü\n".into(), "é&ü ".into()),
        ];
        for (raw, want) in cases {
            // Appended to what the buffer already holds.
            let mut out = b"kept".to_vec();
            decode_attr(raw.as_bytes(), &mut out);
            assert_eq!(
                String::from_utf8(out).expect("UTF-8"),
                format!("kept{want}"),
                "{raw:?}"
            );
        }
    }

    /// `<r xmlns:p='urn:p' a0='' p:a0='' a1='' ...>` with `n` pairs of attributes, then `extra`.
    fn wide_tag(n: usize, extra: &str) -> Vec<u8> {
        let mut doc = b"<r xmlns:p='urn:p' xmlns:q='urn:p'".to_vec();
        for i in 0..n {
            doc.extend_from_slice(format!(" a{i}='' p:a{i}=''").as_bytes());
        }
        doc.extend_from_slice(extra.as_bytes());
        doc.extend_from_slice(b"/>");
        doc
    }

    /// Well-formedness of `doc` and the uniqueness probes it cost.
    fn check(doc: &[u8]) -> (Result<(), XmlError>, u64) {
        UNIQUE_PROBES.with(|p| p.set(0));
        let mut wf = WellFormed::new();
        let r = wf.feed(doc).and_then(|()| wf.finish());
        (r, UNIQUE_PROBES.with(|p| p.get()))
    }

    #[test]
    fn duplicate_attribute_checks_cost_linear_work() {
        // 6,002 attributes in one start tag just under the 64 KiB limit: pairwise checks
        // would make 18 million comparisons.
        let doc = wide_tag(3_000, "");
        assert!(doc.len() < MAX_TOKEN, "{}", doc.len());
        let (r, probes) = check(&doc);
        assert!(r.is_ok(), "{r:?}");
        assert!(probes <= 2 * 6_002, "{probes} probes for 6,002 attributes");
    }

    #[test]
    fn duplicates_are_refused_the_same_way_below_and_above_the_pairwise_size() {
        for n in [1, 3, 4, 100] {
            assert!(check(&wide_tag(n, "")).0.is_ok(), "{n}");
            for extra in [" a0='x'", " p:a0='x'", " q:a0='x'", " xmlns:p='urn:p'"] {
                let (r, _) = check(&wide_tag(n, extra));
                let e = r.err().map(|e| e.to_string()).unwrap_or_default();
                assert!(e.contains("duplicate attribute"), "{n} {extra}: {e}");
            }
            // Same local name, different namespaces: allowed.
            assert!(
                check(&wide_tag(n, " xmlns:z='urn:z' z:a0=''")).0.is_ok(),
                "{n}"
            );
        }
    }
}
