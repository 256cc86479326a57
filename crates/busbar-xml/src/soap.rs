//! Recognising a SOAP envelope from the first bytes of a body, so that an error can be
//! answered with a fault of the request's own SOAP version.

use crate::error::XmlError;
use crate::path::{SOAP11_ENV_NS, SOAP12_ENV_NS};
use crate::reader::{Reader, Sink, StartTag};

pub use busbar_core::SoapVersion;

/// What the first start tag of a body says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    /// The first start tag is not complete yet.
    NeedMore,
    /// The root element is a SOAP `Envelope`.
    Soap(SoapVersion),
    /// Anything else, including malformed XML, a DOCTYPE, or a root that is not an Envelope.
    NotSoap,
}

/// Look at `prefix` (the first bytes of a body) and tell whether it opens a SOAP envelope.
/// Only the BOM, XML declaration, comments, processing instructions, whitespace and the first
/// start tag are read.
pub fn sniff_envelope(prefix: &[u8]) -> Sniff {
    struct FirstTag(Option<Sniff>);
    impl Sink for FirstTag {
        fn start(&mut self, el: &StartTag<'_>) -> Result<bool, XmlError> {
            let version = match el.ns {
                1 => Some(SoapVersion::V11),
                2 => Some(SoapVersion::V12),
                _ => None,
            };
            self.0 = Some(match version {
                Some(v) if el.local == b"Envelope" => Sniff::Soap(v),
                _ => Sniff::NotSoap,
            });
            Ok(true)
        }
        fn end(&mut self) -> Result<bool, XmlError> {
            Ok(true)
        }
    }
    let uris = [SOAP11_ENV_NS.to_owned(), SOAP12_ENV_NS.to_owned()];
    let mut sink = FirstTag(None);
    match Reader::new().feed(prefix, &uris, &mut sink) {
        Err(_) => Sniff::NotSoap,
        Ok(_) => sink.0.unwrap_or(Sniff::NeedMore),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soap_11_and_12_envelopes_are_told_apart_by_namespace() {
        let v11 = b"<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">";
        assert_eq!(sniff_envelope(v11), Sniff::Soap(SoapVersion::V11));
        let v12 = b"\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<!-- c --><?pi x?>\n<Envelope xmlns=\"http://www.w3.org/2003/05/soap-envelope\"><Body>";
        assert_eq!(sniff_envelope(v12), Sniff::Soap(SoapVersion::V12));
    }

    #[test]
    fn an_incomplete_first_tag_needs_more_bytes() {
        let full = b"<?xml version='1.0'?><s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'>";
        for n in 0..full.len() {
            assert_eq!(
                sniff_envelope(&full[..n]),
                Sniff::NeedMore,
                "prefix of {n} bytes"
            );
        }
        assert_eq!(sniff_envelope(full), Sniff::Soap(SoapVersion::V11));
    }

    #[test]
    fn other_roots_wrong_namespaces_and_garbage_are_not_soap() {
        for body in [
            &b"<Envelope><Body/></Envelope>"[..],
            b"<s:Envelope xmlns:s='urn:other'>",
            b"<s:Body xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'>",
            b"{\"json\": true}",
            b"<!DOCTYPE x><x/>",
            b"<s:Envelope>",
        ] {
            assert_eq!(
                sniff_envelope(body),
                Sniff::NotSoap,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
