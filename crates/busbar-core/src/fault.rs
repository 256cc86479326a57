//! Faults as clients see them: SOAP 1.1 and 1.2 faults, and JSON problem bodies (RFC 9457).

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

const SOAP11_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";
const SOAP12_NS: &str = "http://www.w3.org/2003/05/soap-envelope";

/// SOAP envelope versions: the one enum every busbar crate uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SoapVersion {
    /// SOAP 1.1 (`text/xml`).
    V11,
    /// SOAP 1.2 (`application/soap+xml`).
    V12,
}

impl SoapVersion {
    /// The envelope namespace URI of this version.
    pub fn namespace(self) -> &'static str {
        match self {
            SoapVersion::V11 => SOAP11_NS,
            SoapVersion::V12 => SOAP12_NS,
        }
    }

    /// The media type a message of this version is sent with.
    pub fn content_type(self) -> &'static str {
        match self {
            SoapVersion::V11 => "text/xml; charset=utf-8",
            SoapVersion::V12 => "application/soap+xml; charset=utf-8",
        }
    }

    /// The version whose envelope namespace is `uri`.
    pub fn from_namespace(uri: &[u8]) -> Option<Self> {
        if uri == SOAP11_NS.as_bytes() {
            Some(SoapVersion::V11)
        } else if uri == SOAP12_NS.as_bytes() {
            Some(SoapVersion::V12)
        } else {
            None
        }
    }
}

/// The format an error answer takes, chosen from the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageFormat {
    /// A SOAP fault of that version.
    Soap(SoapVersion),
    /// A JSON problem document.
    Problem,
}

impl MessageFormat {
    /// Chooses the fault format from the request's headers, without reading its body.
    ///
    /// `application/soap+xml` is SOAP 1.2; `text/xml` or a `SOAPAction` header is SOAP 1.1;
    /// anything else gets a JSON problem body. A step that has parsed the envelope refines this
    /// with [`SoapVersion::from_namespace`].
    pub fn from_request_headers(headers: &HeaderMap) -> Self {
        static SOAP_ACTION: HeaderName = HeaderName::from_static("soapaction");
        // The media type is read as bytes: only its ASCII name is compared, and a parameter
        // with other bytes in it does not hide it.
        let ct = headers
            .get(CONTENT_TYPE)
            .map_or(&b""[..], HeaderValue::as_bytes);
        let media = ct
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        if media.eq_ignore_ascii_case(b"application/soap+xml") {
            MessageFormat::Soap(SoapVersion::V12)
        } else if media.eq_ignore_ascii_case(b"text/xml") || headers.contains_key(&SOAP_ACTION) {
            MessageFormat::Soap(SoapVersion::V11)
        } else {
            MessageFormat::Problem
        }
    }
}

/// A qualified name with its namespace, for fault codes defined outside SOAP (WS-Security's
/// `wsse:FailedCheck`, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QName {
    /// The prefix the fault declares for `ns`.
    pub prefix: &'static str,
    /// The namespace URI.
    pub ns: &'static str,
    /// The local name.
    pub local: &'static str,
}

/// The code of a SOAP fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultCode {
    /// SOAP 1.1 `Client`, SOAP 1.2 `Sender`.
    Client,
    /// SOAP 1.1 `Server`, SOAP 1.2 `Receiver`.
    Server,
    /// The envelope is not of a SOAP version this service speaks.
    VersionMismatch,
    /// A header block marked `mustUnderstand` was not understood.
    MustUnderstand,
    /// A sender fault with a code of its own: the SOAP 1.1 `faultcode` itself, or in SOAP 1.2
    /// the `Subcode` under `env:Sender`.
    Sender(QName),
}

/// A rendered fault: the Content-Type and the body bytes.
#[derive(Debug, Clone)]
pub struct RenderedFault {
    /// The Content-Type header value.
    pub content_type: HeaderValue,
    /// The body.
    pub body: Bytes,
}

/// Renders a fault in `format`; `status` is only used by the JSON problem body.
pub fn render(
    format: MessageFormat,
    code: FaultCode,
    reason: &str,
    detail: Option<&str>,
    status: u16,
) -> RenderedFault {
    match format {
        MessageFormat::Soap(SoapVersion::V11) => {
            let mut s = String::with_capacity(256 + reason.len());
            s.push_str("<soapenv:Envelope xmlns:soapenv=\"");
            s.push_str(SOAP11_NS);
            s.push_str("\"><soapenv:Body><soapenv:Fault>");
            match code {
                FaultCode::Sender(q) => {
                    s.push_str("<faultcode xmlns:");
                    s.push_str(q.prefix);
                    s.push_str("=\"");
                    s.push_str(q.ns);
                    s.push_str("\">");
                    s.push_str(q.prefix);
                    s.push(':');
                    s.push_str(q.local);
                }
                other => {
                    s.push_str("<faultcode>");
                    s.push_str(match other {
                        FaultCode::Server => "soapenv:Server",
                        FaultCode::VersionMismatch => "soapenv:VersionMismatch",
                        FaultCode::MustUnderstand => "soapenv:MustUnderstand",
                        _ => "soapenv:Client",
                    });
                }
            }
            s.push_str("</faultcode><faultstring>");
            escape_into(&mut s, reason);
            s.push_str("</faultstring>");
            if let Some(detail) = detail {
                s.push_str("<detail>");
                escape_into(&mut s, detail);
                s.push_str("</detail>");
            }
            s.push_str("</soapenv:Fault></soapenv:Body></soapenv:Envelope>");
            RenderedFault {
                content_type: HeaderValue::from_static("text/xml; charset=UTF-8"),
                body: Bytes::from(s),
            }
        }
        MessageFormat::Soap(SoapVersion::V12) => {
            let value = match code {
                FaultCode::Client | FaultCode::Sender(_) => "env:Sender",
                FaultCode::Server => "env:Receiver",
                FaultCode::VersionMismatch => "env:VersionMismatch",
                FaultCode::MustUnderstand => "env:MustUnderstand",
            };
            let mut s = String::with_capacity(320 + reason.len());
            s.push_str("<env:Envelope xmlns:env=\"");
            s.push_str(SOAP12_NS);
            s.push_str("\"><env:Body><env:Fault><env:Code><env:Value>");
            s.push_str(value);
            s.push_str("</env:Value>");
            if let FaultCode::Sender(q) = code {
                s.push_str("<env:Subcode><env:Value xmlns:");
                s.push_str(q.prefix);
                s.push_str("=\"");
                s.push_str(q.ns);
                s.push_str("\">");
                s.push_str(q.prefix);
                s.push(':');
                s.push_str(q.local);
                s.push_str("</env:Value></env:Subcode>");
            }
            s.push_str("</env:Code><env:Reason><env:Text xml:lang=\"en\">");
            escape_into(&mut s, reason);
            s.push_str("</env:Text></env:Reason>");
            if let Some(detail) = detail {
                s.push_str("<env:Detail>");
                escape_into(&mut s, detail);
                s.push_str("</env:Detail>");
            }
            s.push_str("</env:Fault></env:Body></env:Envelope>");
            RenderedFault {
                content_type: HeaderValue::from_static("application/soap+xml; charset=utf-8"),
                body: Bytes::from(s),
            }
        }
        MessageFormat::Problem => {
            let mut s = String::with_capacity(96 + reason.len());
            s.push_str("{\"type\":\"about:blank\",\"title\":");
            json_string_into(&mut s, reason);
            s.push_str(",\"status\":");
            s.push_str(&status.to_string());
            if let Some(detail) = detail {
                s.push_str(",\"detail\":");
                json_string_into(&mut s, detail);
            }
            s.push('}');
            RenderedFault {
                content_type: HeaderValue::from_static("application/problem+json"),
                body: Bytes::from(s),
            }
        }
    }
}

/// Escapes XML character data (not attribute values: quotes are left as they are).
pub fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            // Characters XML 1.0 cannot carry at all are replaced, not emitted raw.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
}

fn json_string_into(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soap11_fault_carries_the_reason_escaped() {
        let f = render(
            MessageFormat::Soap(SoapVersion::V11),
            FaultCode::Server,
            "a < b & c",
            None,
            500,
        );
        let body = std::str::from_utf8(&f.body).expect("utf8");
        assert!(body.contains("<faultcode>soapenv:Server</faultcode>"));
        assert!(body.contains("<faultstring>a &lt; b &amp; c</faultstring>"));
        assert_eq!(f.content_type, "text/xml; charset=UTF-8");
    }

    #[test]
    fn soap12_fault_uses_sender_for_client_faults() {
        let f = render(
            MessageFormat::Soap(SoapVersion::V12),
            FaultCode::Client,
            "bad",
            Some("why"),
            400,
        );
        let body = std::str::from_utf8(&f.body).expect("utf8");
        assert!(body.contains("<env:Value>env:Sender</env:Value>"));
        assert!(body.contains("<env:Detail>why</env:Detail>"));
    }

    const FAILED_CHECK: QName = QName {
        prefix: "wsse",
        ns: "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd",
        local: "FailedCheck",
    };

    #[test]
    fn soap11_fault_with_a_qualified_code_declares_its_prefix() {
        let f = render(
            MessageFormat::Soap(SoapVersion::V11),
            FaultCode::Sender(FAILED_CHECK),
            "no",
            None,
            500,
        );
        let body = std::str::from_utf8(&f.body).expect("utf8");
        assert!(body.contains(&format!(
            "<faultcode xmlns:wsse=\"{}\">wsse:FailedCheck</faultcode>",
            FAILED_CHECK.ns
        )));
    }

    #[test]
    fn soap12_fault_puts_a_qualified_code_in_a_subcode() {
        let f = render(
            MessageFormat::Soap(SoapVersion::V12),
            FaultCode::Sender(FAILED_CHECK),
            "no",
            None,
            400,
        );
        let body = std::str::from_utf8(&f.body).expect("utf8");
        assert!(body.contains(&format!(
            "<env:Code><env:Value>env:Sender</env:Value><env:Subcode><env:Value xmlns:wsse=\"{}\">wsse:FailedCheck</env:Value></env:Subcode></env:Code>",
            FAILED_CHECK.ns
        )));
    }

    #[test]
    fn version_mismatch_and_must_understand_use_soap_codes() {
        for (v, code, want) in [
            (
                SoapVersion::V11,
                FaultCode::VersionMismatch,
                "<faultcode>soapenv:VersionMismatch</faultcode>",
            ),
            (
                SoapVersion::V11,
                FaultCode::MustUnderstand,
                "<faultcode>soapenv:MustUnderstand</faultcode>",
            ),
            (
                SoapVersion::V12,
                FaultCode::MustUnderstand,
                "<env:Value>env:MustUnderstand</env:Value>",
            ),
        ] {
            let f = render(MessageFormat::Soap(v), code, "x", None, 500);
            assert!(std::str::from_utf8(&f.body).expect("utf8").contains(want));
        }
    }

    #[test]
    fn problem_body_is_valid_json_with_status() {
        let f = render(
            MessageFormat::Problem,
            FaultCode::Server,
            "x \"y\"\n",
            None,
            502,
        );
        assert_eq!(
            std::str::from_utf8(&f.body).expect("utf8"),
            r#"{"type":"about:blank","title":"x \"y\"\n","status":502}"#
        );
    }

    #[test]
    fn format_follows_content_type_and_soapaction() {
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/soap+xml; charset=utf-8"),
        );
        assert_eq!(
            MessageFormat::from_request_headers(&h),
            MessageFormat::Soap(SoapVersion::V12)
        );
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/xml; charset=UTF-8"),
        );
        assert_eq!(
            MessageFormat::from_request_headers(&h),
            MessageFormat::Soap(SoapVersion::V11)
        );
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert_eq!(
            MessageFormat::from_request_headers(&h),
            MessageFormat::Problem
        );
        // Case, blanks around the name and a parameter that is not ASCII do not matter.
        for ct in [
            &b" Application/SOAP+XML ;action=\"urn:x\""[..],
            b"\tapplication/soap+xml",
            b"application/soap+xml; title=\xe9t\xe9",
        ] {
            h.insert(CONTENT_TYPE, HeaderValue::from_bytes(ct).expect("value"));
            assert_eq!(
                MessageFormat::from_request_headers(&h),
                MessageFormat::Soap(SoapVersion::V12),
                "{ct:?}"
            );
        }
        // No SOAP media type: a SOAPAction field, in any case, says SOAP 1.1.
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
        assert_eq!(
            MessageFormat::from_request_headers(&h),
            MessageFormat::Problem
        );
        h.insert("SOAPAction", HeaderValue::from_static("\"urn:buy\""));
        assert_eq!(
            MessageFormat::from_request_headers(&h),
            MessageFormat::Soap(SoapVersion::V11)
        );
        h.remove(CONTENT_TYPE);
        assert_eq!(
            MessageFormat::from_request_headers(&h),
            MessageFormat::Soap(SoapVersion::V11)
        );
    }
}
