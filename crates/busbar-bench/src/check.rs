//! Scenarios and response checks (contract §3 and §6): what a correct answer looks like.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use quick_xml::events::Event;
use quick_xml::name::ResolveResult;
use quick_xml::NsReader;

/// The namespace of the `buyStocks` element.
pub const SAMPLES_NS: &str = "http://services.samples/xsd";
/// The fault SecureProxy answers a request whose signature or decryption fails.
pub const FAULT_SECURITY_CHECK: &str =
    "Security validation failed: The signature or decryption was invalid";
/// Fault string of a CBRProxy rejection.
pub const FAULT_NOT_IBM: &str = "First order must be for the symbol IBM";
/// Fault string of a routing-header rejection (SOAP or transport header).
pub const FAULT_ROUTING: &str = "Invalid routing header";

/// A classic scenario, i.e. one proxy of the reference configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// `DirectProxy`: pass-through.
    Direct,
    /// `CBRProxy`: route on the first order's symbol.
    Cbr,
    /// `CBRSOAPHeaderProxy`: route on the SOAP `routing` header.
    CbrSoapHeader,
    /// `CBRTransportHeaderProxy`: route on the HTTP `routing` header.
    CbrTransportHeader,
    /// `XSLTProxy`: reverse element names on the way in, back on the way out.
    Xslt,
    /// `SecureProxy`: WS-Security, legacy profile (needs the client's keys).
    Secure,
    /// `SecureProxyModern`: WS-Security, modern profile (needs the client's keys).
    SecureModern,
}

impl Scenario {
    /// Every supported scenario, in report order.
    pub const ALL: [Scenario; 5] = [
        Scenario::Direct,
        Scenario::Cbr,
        Scenario::CbrSoapHeader,
        Scenario::CbrTransportHeader,
        Scenario::Xslt,
    ];

    /// The WS-Security scenarios, which need keys (`--keys`).
    pub const SECURE: [Scenario; 2] = [Scenario::Secure, Scenario::SecureModern];

    /// The client profile of a WS-Security scenario.
    pub fn secure_profile(self) -> Option<crate::secure::Profile> {
        match self {
            Scenario::Secure => Some(crate::secure::Profile::Legacy),
            Scenario::SecureModern => Some(crate::secure::Profile::Modern),
            _ => None,
        }
    }

    /// The short name used on the command line and in result files.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Direct => "direct",
            Scenario::Cbr => "cbr",
            Scenario::CbrSoapHeader => "cbr-soap-header",
            Scenario::CbrTransportHeader => "cbr-transport-header",
            Scenario::Xslt => "xslt",
            Scenario::Secure => "secure",
            Scenario::SecureModern => "secure-modern",
        }
    }

    /// The proxy's name, appended to the base URL.
    pub fn proxy(self) -> &'static str {
        match self {
            Scenario::Direct => "DirectProxy",
            Scenario::Cbr => "CBRProxy",
            Scenario::CbrSoapHeader => "CBRSOAPHeaderProxy",
            Scenario::CbrTransportHeader => "CBRTransportHeaderProxy",
            Scenario::Xslt => "XSLTProxy",
            Scenario::Secure => "SecureProxy",
            Scenario::SecureModern => "SecureProxyModern",
        }
    }

    /// The proxy URL under a base such as `http://127.0.0.1:8280/service`.
    pub fn url(self, base: &str) -> String {
        format!("{}/{}", base.trim_end_matches('/'), self.proxy())
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lowered = s.trim().to_ascii_lowercase();
        for sc in Scenario::ALL.into_iter().chain(Scenario::SECURE) {
            if lowered == sc.name() || lowered == sc.proxy().to_ascii_lowercase() {
                return Ok(sc);
            }
        }
        Err(format!(
            "unknown scenario '{s}' (expected one of: {}, {})",
            Scenario::ALL.map(Scenario::name).join(", "),
            Scenario::SECURE.map(Scenario::name).join(", ")
        ))
    }
}

/// One order as the XSLT check compares it: (symbol, buyerID, price, volume).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// `symbol` text.
    pub symbol: String,
    /// `buyerID` text.
    pub buyer_id: String,
    /// `price` text.
    pub price: String,
    /// `volume` text.
    pub volume: String,
}

/// What a response must be for the request to count as a success.
#[derive(Clone, Debug)]
pub enum Check {
    /// Any HTTP 200 (the classic success rule, used when nothing is verified).
    Status200,
    /// HTTP 200 and a body equal, byte for byte, to this one (Direct and CBR scenarios).
    Echo(Vec<u8>),
    /// HTTP 200 and a `buyStocks` element holding exactly these orders, in order (XSLT).
    Orders(Vec<Order>),
    /// HTTP 200 and a WS-Security response that decrypts and verifies with the client's keys
    /// and, without its Security header, equals the plain request (SecureProxy).
    Secure {
        /// The client-side checker.
        checker: Arc<busbar_wssec::Verifier>,
        /// The plain message the back end echoed.
        plain: Arc<Vec<u8>>,
    },
    /// This status and a SOAP fault whose `faultstring` is exactly this text.
    Fault {
        /// Expected HTTP status.
        status: u16,
        /// Expected `faultstring`.
        reason: &'static str,
    },
}

/// Why a response failed its check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Unexpected HTTP status.
    Status(u16),
    /// Right status, wrong content.
    Content(String),
}

impl Check {
    /// The check for a positive request of `scenario` whose body is `request`.
    pub fn for_scenario(scenario: Scenario, request: &[u8]) -> Result<Check, String> {
        match scenario {
            Scenario::Xslt => Ok(Check::Orders(parse_orders(request, "buyStocks")?)),
            Scenario::Secure | Scenario::SecureModern => Err(format!(
                "{scenario} builds its own requests and checks: give --keys"
            )),
            _ => Ok(Check::Echo(request.to_vec())),
        }
    }

    /// Checks one response.
    pub fn check(&self, status: u16, body: &[u8]) -> Result<(), Failure> {
        match self {
            Check::Status200 => expect_status(status, 200),
            Check::Echo(expected) => {
                expect_status(status, 200)?;
                if body == expected.as_slice() {
                    return Ok(());
                }
                let at = body.iter().zip(expected.iter()).position(|(a, b)| a != b);
                Err(Failure::Content(match at {
                    Some(i) => format!(
                        "body differs from the request at byte {i} (got {} bytes, sent {})",
                        body.len(),
                        expected.len()
                    ),
                    None => format!(
                        "body is {} bytes, request was {}",
                        body.len(),
                        expected.len()
                    ),
                }))
            }
            Check::Orders(expected) => {
                expect_status(status, 200)?;
                let got = parse_orders(body, "buyStocks").map_err(Failure::Content)?;
                if &got == expected {
                    return Ok(());
                }
                if got.len() != expected.len() {
                    return Err(Failure::Content(format!(
                        "{} orders in the response, {} sent",
                        got.len(),
                        expected.len()
                    )));
                }
                let i = got
                    .iter()
                    .zip(expected)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                Err(Failure::Content(format!(
                    "order {} differs from the one sent",
                    i + 1
                )))
            }
            Check::Secure { checker, plain } => {
                expect_status(status, 200)?;
                let got = checker
                    .verify(body, None, std::time::SystemTime::now())
                    .map_err(|e| Failure::Content(format!("response does not verify: {e}")))?;
                if got.message == plain.as_slice() {
                    Ok(())
                } else {
                    Err(Failure::Content(
                        "decrypted response differs from the request".into(),
                    ))
                }
            }
            Check::Fault {
                status: want,
                reason,
            } => {
                expect_status(status, *want)?;
                match fault_string(body) {
                    Some(s) if s == *reason => Ok(()),
                    Some(s) => Err(Failure::Content(format!(
                        "faultstring '{s}', expected '{reason}'"
                    ))),
                    None => Err(Failure::Content(
                        "no SOAP faultstring in the response".into(),
                    )),
                }
            }
        }
    }
}

fn expect_status(got: u16, want: u16) -> Result<(), Failure> {
    if got == want {
        Ok(())
    } else {
        Err(Failure::Status(got))
    }
}

/// Appends the text of a text or reference event to `out`.
fn push_text(out: &mut String, ev: &Event<'_>) -> Result<(), String> {
    match ev {
        Event::Text(t) => out.push_str(&t.xml_content(Default::default())),
        Event::CData(t) => out.push_str(&t.xml_content(Default::default())),
        Event::GeneralRef(r) => {
            if let Some(c) = r.resolve_char_ref().map_err(|e| e.to_string())? {
                out.push(c);
            } else if let Some(s) = quick_xml::escape::resolve_predefined_entity(r) {
                out.push_str(s);
            } else {
                return Err(format!("unknown entity '&{};'", &**r));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Parses the ordered (symbol, buyerID, price, volume) tuples under the first element named
/// `container` in the samples namespace (`buyStocks`; `skcotSyub` for the reversed form).
pub fn parse_orders(xml: &[u8], container: &str) -> Result<Vec<Order>, String> {
    let text = std::str::from_utf8(xml).map_err(|_| "response is not UTF-8".to_string())?;
    let mut reader = NsReader::from_str(text);
    let (order_name, fields): (&str, [&str; 4]) = if container == "buyStocks" {
        ("order", ["symbol", "buyerID", "price", "volume"])
    } else {
        ("redro", ["lobmys", "DIreyub", "ecirp", "emulov"])
    };
    let mut inside = false;
    let mut found = false;
    let mut depth = 0usize;
    let mut orders = Vec::new();
    let mut current: Option<[String; 4]> = None;
    let mut field: Option<usize> = None;
    loop {
        let (ns, ev) = reader
            .read_resolved_event()
            .map_err(|e| format!("malformed XML: {e}"))?;
        match &ev {
            Event::Start(e) => {
                let local = e.local_name();
                let local = local.as_ref();
                if !inside {
                    if local == container
                        && matches!(ns, ResolveResult::Bound(n) if n.0 == SAMPLES_NS)
                    {
                        inside = true;
                        found = true;
                        depth = 0;
                    }
                    continue;
                }
                depth += 1;
                if depth == 1 && local == order_name {
                    current = Some(Default::default());
                } else if depth == 2 && current.is_some() {
                    field = fields.iter().position(|f| *f == local);
                }
            }
            Event::Empty(e) => {
                if inside && depth == 0 && e.local_name().as_ref() == order_name {
                    orders.push(Order {
                        symbol: String::new(),
                        buyer_id: String::new(),
                        price: String::new(),
                        volume: String::new(),
                    });
                } else if !inside
                    && e.local_name().as_ref() == container
                    && matches!(ns, ResolveResult::Bound(n) if n.0 == SAMPLES_NS)
                {
                    return Ok(Vec::new());
                }
            }
            Event::End(_) if inside => {
                if depth == 0 {
                    break;
                }
                if depth == 1 {
                    if let Some([symbol, buyer_id, price, volume]) = current.take() {
                        orders.push(Order {
                            symbol,
                            buyer_id,
                            price,
                            volume,
                        });
                    }
                }
                if depth == 2 {
                    field = None;
                }
                depth -= 1;
            }
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) if inside && depth == 2 => {
                if let (Some(cur), Some(i)) = (current.as_mut(), field) {
                    push_text(&mut cur[i], &ev)?;
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !found {
        return Err(format!(
            "no {container} element in the {SAMPLES_NS} namespace"
        ));
    }
    Ok(orders)
}

/// The text of the first `faultstring` element, trimmed, or `None` if there is none.
pub fn fault_string(xml: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(xml).ok()?;
    let mut reader = NsReader::from_str(text);
    let mut inside = false;
    let mut out = String::new();
    loop {
        let (_, ev) = reader.read_resolved_event().ok()?;
        match &ev {
            Event::Start(e) if e.local_name().as_ref() == "faultstring" => inside = true,
            Event::Empty(e) if e.local_name().as_ref() == "faultstring" => {
                return Some(String::new())
            }
            Event::End(_) if inside => return Some(out.trim().to_string()),
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) if inside => {
                push_text(&mut out, &ev).ok()?;
            }
            Event::Eof => return None,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{buy_stocks, Variant};

    #[test]
    fn orders_of_the_plain_and_reversed_payloads_are_the_same_tuples() {
        let plain = buy_stocks(5120, Variant::Plain).unwrap_or_default();
        let rev = buy_stocks(5120, Variant::XsltReversed).unwrap_or_default();
        let a = parse_orders(&plain, "buyStocks").unwrap_or_else(|e| panic!("{e}"));
        let b = parse_orders(&rev, "skcotSyub").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.len(), 46);
        assert_eq!(a, b);
        assert_eq!(a[0].symbol, "IBM");
        assert_eq!(a[1].buyer_id, "ruwan");
    }

    #[test]
    fn orders_outside_the_samples_namespace_are_not_accepted() {
        let xml = b"<buyStocks><order><symbol>IBM</symbol></order></buyStocks>";
        assert!(parse_orders(xml, "buyStocks").is_err());
    }

    #[test]
    fn entity_references_are_part_of_the_text() {
        let xml = br#"<m:buyStocks xmlns:m="http://services.samples/xsd"><order><symbol>AT&amp;T</symbol><buyerID>a&#x41;</buyerID><price>1</price><volume>2</volume></order></m:buyStocks>"#;
        let o = parse_orders(xml, "buyStocks").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (o[0].symbol.as_str(), o[0].buyer_id.as_str()),
            ("AT&T", "aA")
        );
    }

    #[test]
    fn fault_check_requires_status_and_exact_reason() {
        let fault = br#"<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><soapenv:Fault><faultcode>soapenv:Server</faultcode><faultstring>Invalid routing header</faultstring></soapenv:Fault></soapenv:Body></soapenv:Envelope>"#;
        let check = Check::Fault {
            status: 500,
            reason: FAULT_ROUTING,
        };
        assert_eq!(check.check(500, fault), Ok(()));
        assert_eq!(check.check(200, fault), Err(Failure::Status(200)));
        let other = Check::Fault {
            status: 500,
            reason: FAULT_NOT_IBM,
        };
        assert!(matches!(other.check(500, fault), Err(Failure::Content(_))));
        assert!(matches!(
            check.check(500, b"<x/>"),
            Err(Failure::Content(_))
        ));
    }

    #[test]
    fn echo_check_reports_where_the_body_differs() {
        let check = Check::Echo(b"abcdef".to_vec());
        assert_eq!(check.check(200, b"abcdef"), Ok(()));
        assert_eq!(
            check.check(200, b"abXdef"),
            Err(Failure::Content(
                "body differs from the request at byte 2 (got 6 bytes, sent 6)".into()
            ))
        );
        assert!(check.check(200, b"abc").is_err());
        assert_eq!(check.check(502, b"abcdef"), Err(Failure::Status(502)));
    }

    #[test]
    fn secure_scenarios_parse_but_need_keys_and_unknown_ones_are_refused() {
        assert_eq!("secure".parse::<Scenario>(), Ok(Scenario::Secure));
        assert_eq!(
            "SecureProxyModern".parse::<Scenario>(),
            Ok(Scenario::SecureModern)
        );
        assert!(Check::for_scenario(Scenario::Secure, b"<x/>")
            .err()
            .unwrap_or_default()
            .contains("--keys"));
        assert!("nope"
            .parse::<Scenario>()
            .err()
            .unwrap_or_default()
            .contains("unknown scenario"));
        assert_eq!("CBRProxy".parse::<Scenario>(), Ok(Scenario::Cbr));
    }
}
