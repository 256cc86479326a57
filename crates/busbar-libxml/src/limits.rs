//! Limits checked by a linear pre-scan of a document's bytes before libxml2 parses it.
//!
//! Why: libxml2 2.9 checks an element's attributes (and namespace declarations) for
//! duplicates pairwise and resolves prefixes by walking the namespace stack, so one start tag
//! with 50,000 attributes costs seconds of CPU however small the limits on the body are. The
//! scan below costs one pass over the bytes and refuses such a document with
//! [`ErrorKind::Limit`] before libxml2 sees it.
//!
//! How: a lexer for XML's markup (start and end tags with their quoted attribute values,
//! comments, CDATA sections, processing instructions) follows the document exactly as libxml2
//! tokenizes it as long as the document is lexically well-formed. At the first construct it
//! does not recognise it switches to a conservative count for the rest: every stretch from a
//! `<` to the next `<` is then treated as one start tag, each `=` in it as an attribute. libxml2
//! never lets a start tag run past a `<` (an attribute value cannot contain one), so that count
//! can only be too high, and only for a document libxml2 refuses anyway.
//!
//! Encodings: structure is read from bytes where every ASCII byte is that ASCII character,
//! which holds for UTF-8, US-ASCII, ISO-8859-n, windows-125n, EUC-JP/KR/CN and KOI8; UTF-16 documents (detected by
//! their byte order mark or first characters, as libxml2 detects them) are narrowed to one
//! byte per code unit first. Any other declared encoding (UTF-7, EBCDIC, ISO-2022-JP, UCS-4,
//! ...) could hide markup from the scan and is refused.

use memchr::{memchr, memchr_iter, memmem};

use crate::error::{ErrorKind, LibxmlError};

/// Limits on a document libxml2 is asked to parse ([`crate::Document::parse_with_limits`]).
/// Every parse of a message goes through them; [`ParseLimits::default`] is what
/// [`crate::Document::parse`] and [`crate::Stylesheet::transform_bytes`] apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Attributes on one element, namespace declarations included (default 256: SOAP and
    /// business documents carry a handful; libxml2's pairwise checks stay under a
    /// millisecond).
    pub max_attributes: usize,
    /// Bytes of one start tag, `<` to `>` (default 64 KiB, as busbar's streaming parser and
    /// `wsse_verify` accept).
    pub max_start_tag: usize,
    /// Element nesting (default 256, libxml2's own limit without XML_PARSE_HUGE, refused here
    /// before any tree is built).
    pub max_depth: usize,
    /// Namespace declarations in scope at once (default 256: libxml2 resolves each prefix by
    /// walking them).
    pub max_namespaces: usize,
    /// Nodes in the whole document: elements, attributes, text runs, comments, processing
    /// instructions and CDATA sections (default 1,000,000: a 10 MiB body of tiny elements
    /// has 2.6 million; a libxml2 node costs 60 to 120 bytes of memory).
    pub max_nodes: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_attributes: 256,
            max_start_tag: 64 * 1024,
            max_depth: 256,
            max_namespaces: 256,
            max_nodes: 1_000_000,
        }
    }
}

/// Refuses `bytes` with [`ErrorKind::Limit`] when it exceeds a limit, and with
/// [`ErrorKind::Parse`] when it declares an encoding the scan cannot follow.
pub(crate) fn check(bytes: &[u8], limits: &ParseLimits) -> Result<(), LibxmlError> {
    let narrowed;
    // Where the units start in `bytes`, and how many bytes each one takes.
    let (units, skip, width): (&[u8], usize, usize) = match layout(bytes) {
        Layout::Bytes(skip) => {
            check_declared(&bytes[skip..], false)?;
            (&bytes[skip..], skip, 1)
        }
        Layout::Utf16 { big_endian, skip } => {
            narrowed = narrow(&bytes[skip..], big_endian);
            check_declared(&narrowed, true)?;
            (&narrowed, skip, 2)
        }
        Layout::Other(what) => {
            return Err(LibxmlError::new(
                ErrorKind::Parse,
                format!(
                "{what} documents are not accepted (UTF-8, UTF-16, ISO-8859-n, windows-125n, EUC and KOI8 are)"
            ),
            ))
        }
    };
    // XML has no NUL character (XML 1.0 section 2.2), and libxml2 takes one for the end of
    // its input: whatever followed it would pass unread, and go on to the back end unchecked.
    if let Some(at) = memchr(0, units) {
        return Err(LibxmlError::new(
            ErrorKind::Parse,
            format!(
                "a NUL character (byte {}) is not allowed in XML",
                skip + at * width
            ),
        ));
    }
    Scan::new(limits).run(units)
}

enum Layout {
    /// ASCII-compatible bytes after a byte order mark of this length.
    Bytes(usize),
    Utf16 {
        big_endian: bool,
        skip: usize,
    },
    Other(&'static str),
}

/// The encoding family, from the first bytes, as libxml2's xmlDetectCharEncoding finds it.
fn layout(b: &[u8]) -> Layout {
    match b {
        [0, 0, 0, 0x3C, ..] | [0x3C, 0, 0, 0, ..] | [0, 0, 0x3C, 0, ..] | [0, 0x3C, 0, 0, ..] => {
            Layout::Other("UCS-4")
        }
        [0x4C, 0x6F, 0xA7, 0x94, ..] => Layout::Other("EBCDIC"),
        [0xEF, 0xBB, 0xBF, ..] => Layout::Bytes(3),
        [0, 0x3C, 0, 0x3F, ..] => Layout::Utf16 {
            big_endian: true,
            skip: 0,
        },
        [0x3C, 0, 0x3F, 0, ..] => Layout::Utf16 {
            big_endian: false,
            skip: 0,
        },
        [0xFE, 0xFF, ..] => Layout::Utf16 {
            big_endian: true,
            skip: 2,
        },
        [0xFF, 0xFE, ..] => Layout::Utf16 {
            big_endian: false,
            skip: 2,
        },
        _ => Layout::Bytes(0),
    }
}

/// One byte per UTF-16 code unit: ASCII stays itself, anything else becomes 0x80.
fn narrow(b: &[u8], big_endian: bool) -> Vec<u8> {
    b.chunks_exact(2)
        .map(|p| {
            let unit = if big_endian {
                u16::from_be_bytes([p[0], p[1]])
            } else {
                u16::from_le_bytes([p[0], p[1]])
            };
            u8::try_from(unit).ok().filter(u8::is_ascii).unwrap_or(0x80)
        })
        .collect()
}

/// Refuses an XML declaration naming an encoding whose markup the scan cannot read.
fn check_declared(units: &[u8], utf16: bool) -> Result<(), LibxmlError> {
    let Some(name) = declared_encoding(units) else {
        return Ok(());
    };
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    let accepted = if utf16 {
        matches!(lower.as_str(), "utf-16" | "utf16" | "utf-16le" | "utf-16be")
    } else {
        // Encodings whose bytes below 0x80 are always ASCII characters. Shift_JIS, Big5 and
        // GBK are not: their second bytes include `]` and `\`.
        matches!(
            lower.as_str(),
            "utf-8"
                | "utf8"
                | "us-ascii"
                | "ascii"
                | "latin1"
                | "latin-1"
                | "euc-jp"
                | "euc-kr"
                | "euc-cn"
                | "gb2312"
                | "koi8-r"
                | "koi8-u"
        ) || ["iso-8859-", "iso8859-", "iso_8859-", "windows-125", "cp125"]
            .iter()
            .any(|p| {
                lower
                    .strip_prefix(p)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
    };
    if accepted {
        Ok(())
    } else {
        Err(LibxmlError::new(
            ErrorKind::Parse,
            format!(
                "encoding '{}' is not accepted (UTF-8, UTF-16, ISO-8859-n, windows-125n, EUC and KOI8 are)",
                String::from_utf8_lossy(name)
            ),
        ))
    }
}

/// The `encoding` of a leading XML declaration, as libxml2 reads it.
fn declared_encoding(units: &[u8]) -> Option<&[u8]> {
    let rest = units.strip_prefix(b"<?xml")?;
    if !rest.first().is_some_and(|b| is_ws(*b)) {
        return None;
    }
    let end = memmem::find(rest, b"?>").unwrap_or(rest.len());
    let decl = &rest[..end];
    let at = memmem::find(decl, b"encoding")?;
    let mut i = at + b"encoding".len();
    i += decl[i..].iter().take_while(|b| is_ws(**b)).count();
    if decl.get(i) != Some(&b'=') {
        return None;
    }
    i += 1;
    i += decl[i..].iter().take_while(|b| is_ws(**b)).count();
    let quote = *decl.get(i).filter(|q| **q == b'"' || **q == b'\'')?;
    let value = &decl[i + 1..];
    let close = memchr(quote, value)?;
    Some(&value[..close])
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

struct Scan<'l> {
    limits: &'l ParseLimits,
    nodes: usize,
    /// Namespace declarations of each open element.
    open: Vec<usize>,
    namespaces: usize,
    seen_root: bool,
}

/// The lexer met something XML does not allow: count conservatively from here.
struct Malformed;

impl<'l> Scan<'l> {
    fn new(limits: &'l ParseLimits) -> Self {
        Scan {
            limits,
            nodes: 0,
            open: Vec::new(),
            namespaces: 0,
            seen_root: false,
        }
    }

    fn limit(&self, what: &str, limit: usize) -> LibxmlError {
        LibxmlError::new(
            ErrorKind::Limit,
            format!("the document exceeds the limit of {limit} {what}"),
        )
    }

    fn add_nodes(&mut self, n: usize) -> Result<(), LibxmlError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > self.limits.max_nodes {
            return Err(self.limit("nodes", self.limits.max_nodes));
        }
        Ok(())
    }

    fn run(mut self, b: &[u8]) -> Result<(), LibxmlError> {
        let mut i = 0;
        while i < b.len() {
            let Some(lt) = memchr(b'<', &b[i..]).map(|n| i + n) else {
                return self.add_nodes(1);
            };
            if lt > i {
                self.add_nodes(1)?;
            }
            match self.markup(b, lt) {
                Ok(Some(next)) => i = next,
                // A DOCTYPE: libxml2 stops there (it is refused).
                Ok(None) => return Ok(()),
                Err(Ok(Malformed)) => return self.conservative(b, lt),
                Err(Err(e)) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads the markup at `lt`; returns where the content after it starts.
    #[allow(clippy::type_complexity)]
    fn markup(
        &mut self,
        b: &[u8],
        lt: usize,
    ) -> Result<Option<usize>, Result<Malformed, LibxmlError>> {
        let rest = &b[lt..];
        let after = |needle: &[u8], from: usize| {
            memmem::find(&rest[from..], needle)
                .map(|n| lt + from + n + needle.len())
                .ok_or(Ok(Malformed))
        };
        if rest.starts_with(b"<!--") {
            self.add_nodes(1).map_err(Err)?;
            return after(b"-->", 4).map(Some);
        }
        if rest.starts_with(b"<![CDATA[") {
            self.add_nodes(1).map_err(Err)?;
            return after(b"]]>", 9).map(Some);
        }
        if rest.starts_with(b"<?") {
            self.add_nodes(1).map_err(Err)?;
            return after(b"?>", 2).map(Some);
        }
        if rest.starts_with(b"<!DOCTYPE") && !self.seen_root {
            return Ok(None);
        }
        if rest.starts_with(b"<!") {
            return Err(Ok(Malformed));
        }
        if rest.starts_with(b"</") {
            let end = memchr(b'>', rest).ok_or(Ok(Malformed))?;
            if rest[2..end].contains(&b'<') {
                return Err(Ok(Malformed));
            }
            let Some(declared) = self.open.pop() else {
                return Err(Ok(Malformed));
            };
            self.namespaces -= declared;
            return Ok(Some(lt + end + 1));
        }
        self.start_tag(b, lt)
    }

    fn start_tag(
        &mut self,
        b: &[u8],
        lt: usize,
    ) -> Result<Option<usize>, Result<Malformed, LibxmlError>> {
        let max_tag = self.limits.max_start_tag;
        // Everything up to the limit (and one byte more, to tell "longer" from "exactly").
        let window = &b[lt..b.len().min(lt.saturating_add(max_tag).saturating_add(1))];
        let name_end = name_len(window, 1);
        if name_end == 1 {
            return Err(Ok(Malformed));
        }
        let mut i = name_end;
        let mut attributes = 0usize;
        let mut declared = 0usize;
        let empty = loop {
            let ws = window[i..].iter().take_while(|c| is_ws(**c)).count();
            i += ws;
            match window.get(i) {
                Some(b'>') => break false,
                Some(b'/') if window.get(i + 1) == Some(&b'>') => {
                    i += 1;
                    break true;
                }
                None if window.len() > max_tag => {
                    return Err(Err(self.limit("bytes in a start tag", max_tag)))
                }
                None => return Err(Ok(Malformed)),
                Some(_) if ws == 0 => return Err(Ok(Malformed)),
                Some(_) => {}
            }
            let attr_end = name_len(window, i);
            if attr_end == i {
                return Err(Ok(Malformed));
            }
            let name = &window[i..attr_end];
            i = attr_end + window[attr_end..].iter().take_while(|c| is_ws(**c)).count();
            if window.get(i) != Some(&b'=') {
                return Err(Ok(Malformed));
            }
            i += 1;
            i += window[i..].iter().take_while(|c| is_ws(**c)).count();
            let Some(&quote) = window.get(i).filter(|q| **q == b'"' || **q == b'\'') else {
                return Err(Ok(Malformed));
            };
            let Some(len) = memchr(quote, &window[i + 1..]) else {
                if window.len() > max_tag {
                    return Err(Err(self.limit("bytes in a start tag", max_tag)));
                }
                return Err(Ok(Malformed));
            };
            if window[i + 1..i + 1 + len].contains(&b'<') {
                return Err(Ok(Malformed));
            }
            i += len + 2;
            attributes += 1;
            if attributes > self.limits.max_attributes {
                return Err(Err(
                    self.limit("attributes on an element", self.limits.max_attributes)
                ));
            }
            if name == b"xmlns" || name.starts_with(b"xmlns:") {
                declared += 1;
            }
        };
        if i + 1 > max_tag {
            return Err(Err(self.limit("bytes in a start tag", max_tag)));
        }
        self.seen_root = true;
        self.add_nodes(1 + attributes).map_err(Err)?;
        self.namespaces += declared;
        if self.namespaces > self.limits.max_namespaces {
            return Err(Err(self.limit(
                "namespace declarations in scope",
                self.limits.max_namespaces,
            )));
        }
        if self.open.len() >= self.limits.max_depth {
            return Err(Err(
                self.limit("levels of element nesting", self.limits.max_depth)
            ));
        }
        if empty {
            self.namespaces -= declared;
        } else {
            self.open.push(declared);
        }
        Ok(Some(lt + i + 1))
    }

    /// From a construct the lexer does not recognise to the end: every stretch from a `<` to
    /// the next is counted as one start tag whose attributes are its `=` signs.
    fn conservative(mut self, b: &[u8], from: usize) -> Result<(), LibxmlError> {
        let mut starts = memchr_iter(b'<', &b[from..]).map(|n| from + n).peekable();
        while let Some(start) = starts.next() {
            let end = starts.peek().copied().unwrap_or(b.len());
            let segment = &b[start..end];
            let attributes = memchr_iter(b'=', segment).count();
            if attributes > self.limits.max_attributes {
                return Err(self.limit("attributes on an element", self.limits.max_attributes));
            }
            if segment.len() > self.limits.max_start_tag {
                return Err(self.limit("bytes in a start tag", self.limits.max_start_tag));
            }
            self.add_nodes(2 + attributes)?;
        }
        Ok(())
    }
}

/// End of the name starting at `from`: bytes up to whitespace or a delimiter.
fn name_len(b: &[u8], from: usize) -> usize {
    from + b[from..]
        .iter()
        .take_while(|c| !is_ws(**c) && !matches!(c, b'>' | b'/' | b'=' | b'<' | b'"' | b'\''))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> ParseLimits {
        ParseLimits {
            max_attributes: 3,
            max_start_tag: 64,
            max_depth: 3,
            max_namespaces: 2,
            max_nodes: 20,
        }
    }

    fn kind(doc: &[u8]) -> Option<ErrorKind> {
        check(doc, &small()).err().map(|e| e.kind)
    }

    #[test]
    fn documents_within_the_limits_pass() {
        for doc in [
            &b"<a x='1' y=\"2\" z='>'><b/><!-- <c d=1 e=2 f=3 g=4> --><?p <q?>t</a>"[..],
            b"<?xml version='1.0' encoding='ISO-8859-1'?><a><![CDATA[<x a=1 b=2 c=3 d=4>]]></a>",
            b"\xEF\xBB\xBF<a xmlns='u' xmlns:p='v'><b><c/></b></a>",
            b"<!DOCTYPE a [<!ENTITY e 'x'>]><a a1='' a2='' a3='' a4=''/>",
        ] {
            assert_eq!(kind(doc), None, "{}", String::from_utf8_lossy(doc));
        }
    }

    #[test]
    fn each_limit_is_enforced() {
        let limit = Some(ErrorKind::Limit);
        assert_eq!(kind(b"<a w='' x='' y='' z=''/>"), limit);
        assert_eq!(
            kind(format!("<a x='{}'/>", "v".repeat(60)).as_bytes()),
            limit
        );
        assert_eq!(kind(b"<a><b><c><d/></c></b></a>"), limit);
        assert_eq!(
            kind(b"<a xmlns:p='1'><b xmlns:q='2'><c xmlns:r='3'/></b></a>"),
            limit
        );
        assert_eq!(kind("<a>t<b/>".repeat(8).as_bytes()), limit);
        // Siblings do not add up: each closes before the next opens.
        assert_eq!(
            kind(b"<a><b xmlns:p='1'/><b xmlns:p='1'/><b xmlns:p='1'/></a>"),
            None
        );
    }

    #[test]
    fn malformed_markup_is_counted_conservatively() {
        let limit = Some(ErrorKind::Limit);
        // A bad attribute name, then more attributes in the same tag.
        assert_eq!(kind(b"<a x='' \x01='' y='' z='' w=''/>"), limit);
        // An unterminated value: libxml2 stops at the next '<'.
        assert_eq!(kind(b"<a x='1 y='' z='' w=''<b/>"), limit);
        // A stray end tag first, then a tag over the limit.
        assert_eq!(kind(b"</x><a w='' x='' y='' z=''/>"), limit);
    }

    #[test]
    fn a_nul_character_anywhere_is_refused_in_every_encoding() {
        let message = |doc: &[u8]| check(doc, &small()).err().map(|e| (e.kind, e.message));
        let utf16 = |s: &str, big: bool| -> Vec<u8> {
            s.encode_utf16()
                .flat_map(|u| {
                    if big {
                        u.to_be_bytes()
                    } else {
                        u.to_le_bytes()
                    }
                })
                .collect()
        };
        // After the root (libxml2 would stop there and accept the document), inside text,
        // inside a tag, after a byte order mark.
        for (doc, at) in [
            (&b"<a>x</a>\0<unclosed>&bogus;"[..], 8),
            (b"<a>x\0y</a>", 4),
            (b"<a\0 b='1'/>", 2),
            (b"\xEF\xBB\xBF<a/>\0", 7),
        ] {
            assert_eq!(
                message(doc),
                Some((
                    ErrorKind::Parse,
                    format!("a NUL character (byte {at}) is not allowed in XML")
                )),
                "{doc:?}"
            );
        }
        for big in [false, true] {
            let mut doc = utf16("<?xml version='1.0'?><a>x</a>", big);
            assert_eq!(message(&doc), None);
            doc.extend([0, 0]);
            doc.extend(utf16("<b>", big));
            assert_eq!(message(&doc).map(|m| m.0), Some(ErrorKind::Parse));
        }
        // UTF-16 characters with a zero byte (every ASCII one) are not NUL characters.
        assert_eq!(message(&utf16("\u{FEFF}<a>é\u{100}</a>", false)), None);
        assert_eq!(message(&utf16("\u{FEFF}<a>é\u{100}</a>", true)), None);
    }

    #[test]
    fn utf16_is_scanned_and_unreadable_encodings_are_refused() {
        let utf16 = |s: &str| -> Vec<u8> {
            let mut v = vec![0xFF, 0xFE];
            v.extend(s.encode_utf16().flat_map(u16::to_le_bytes));
            v
        };
        assert_eq!(kind(&utf16("<a x='1'>é</a>")), None);
        assert_eq!(
            kind(&utf16("<a w='' x='' y='' z=''/>")),
            Some(ErrorKind::Limit)
        );
        assert_eq!(
            kind(b"<?xml version='1.0' encoding='UTF-7'?><a/>"),
            Some(ErrorKind::Parse)
        );
        assert_eq!(
            kind(b"<?xml version='1.0' encoding='Shift_JIS'?><a/>"),
            Some(ErrorKind::Parse)
        );
        assert_eq!(
            kind(b"<?xml version=\"1.0\" encoding=\"EUC-JP\"?><a/>"),
            None
        );
        assert_eq!(
            kind(b"<?xml version='1.0' encoding='windows-1252'?><a/>"),
            None
        );
        assert_eq!(kind(b"\0\0\0<\0\0\0a"), Some(ErrorKind::Parse));
        assert_eq!(
            kind(&utf16("<?xml version='1.0' encoding='ISO-8859-1'?><a/>")),
            Some(ErrorKind::Parse)
        );
    }
}
