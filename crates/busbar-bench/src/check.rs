//! Scenarios, suites and response checks (docs/scenarios.md): what a correct answer looks like.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use quick_xml::events::Event;
use quick_xml::name::ResolveResult;
use quick_xml::NsReader;
use serde_json::Value;

use crate::client::Headers;

/// The namespace of the `buyStocks` element.
pub const SAMPLES_NS: &str = "http://services.samples/xsd";
/// The fault SecureProxy answers a request whose signature or decryption fails.
pub const FAULT_SECURITY_CHECK: &str =
    "Security validation failed: The signature or decryption was invalid";
/// Fault string of a CBRProxy rejection.
pub const FAULT_NOT_IBM: &str = "First order must be for the symbol IBM";
/// Fault string of a routing-header rejection (SOAP or transport header).
pub const FAULT_ROUTING: &str = "Invalid routing header";

/// A set of scenarios driven together, chosen with `--suite`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Suite {
    /// The classic SOAP scenarios (docs/scenarios.md): proxies named under a base URL.
    Classic,
    /// The JSON/REST integrator scenarios (docs/scenarios.md, docs/integrator.md): paths under a
    /// base URL such as `http://127.0.0.1:8281/api`.
    Integrator,
    /// The orchestration scenario (docs/scenarios.md, examples/orchestration/): the SimpleInvoke
    /// processes and HelloWorld named under a base URL such as `http://127.0.0.1:8283/service`.
    Bpel,
}

impl Suite {
    /// The name used on the command line and in result files.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Classic => "classic",
            Suite::Integrator => "integrator",
            Suite::Bpel => "bpel",
        }
    }

    /// The scenarios run when none are named.
    pub fn scenarios(self) -> &'static [Scenario] {
        match self {
            Suite::Classic => &Scenario::ALL,
            Suite::Integrator => &Scenario::INTEGRATOR,
            Suite::Bpel => &Scenario::BPEL,
        }
    }

    /// Checks that every scenario belongs to this suite.
    pub fn admit(self, scenarios: &[Scenario]) -> Result<(), String> {
        match scenarios.iter().find(|s| s.suite() != self) {
            Some(s) => Err(format!(
                "scenario {s} belongs to the {} suite, not {} (give --suite {})",
                s.suite(),
                self,
                s.suite()
            )),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Suite {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "classic" => Ok(Suite::Classic),
            "integrator" => Ok(Suite::Integrator),
            "bpel" => Ok(Suite::Bpel),
            _ => Err(format!(
                "unknown suite '{s}' (expected one of: classic, integrator, bpel)"
            )),
        }
    }
}

/// A scenario, i.e. one proxy of the reference configuration.
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
    /// `JsonPassthrough`: JSON forwarded unchanged.
    JsonPassthrough,
    /// `JsonCBR`: routed on `customerTier` to the premium or the standard back end.
    JsonCbr,
    /// `JsonCBRFilter`: the first GOOG order's price when it is 42.8, else every GOOG price.
    JsonCbrFilter,
    /// `JsonMap`: each order of a list mapped to a new shape.
    JsonMap,
    /// `JsonTransform`: the order document flattened to 20 fields.
    JsonTransform,
    /// `ScatterGather`: three product services called per id, their answers combined.
    ScatterGather,
    /// `JsonToSoap`: a JSON order list through a SOAP service and back.
    JsonToSoap,
    /// `DbRead`: a seeded customer read by id (examples/db-crud.yaml).
    DbRead,
    /// `DbWrite`: customers inserted and replaced, half each, read back after the run.
    DbWrite,
    /// `SimpleInvoke0`: the BPEL process that answers the name it receives (x = 0).
    SimpleInvoke0,
    /// `SimpleInvoke1`: the BPEL process calling HelloWorld once (x = 1).
    SimpleInvoke1,
    /// `SimpleInvoke2`: the BPEL process calling HelloWorld twice (x = 2).
    SimpleInvoke2,
    /// `SimpleInvoke3`: the BPEL process calling HelloWorld three times (x = 3).
    SimpleInvoke3,
    /// `HelloWorld` called directly: the BPEL scenario's baseline.
    HelloWorldDirect,
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

    /// The integrator scenarios, in report order.
    pub const INTEGRATOR: [Scenario; 7] = [
        Scenario::JsonPassthrough,
        Scenario::JsonCbr,
        Scenario::JsonCbrFilter,
        Scenario::JsonMap,
        Scenario::JsonTransform,
        Scenario::ScatterGather,
        Scenario::JsonToSoap,
    ];

    /// The database scenarios: in the integrator suite, against `examples/db-crud.yaml` (a
    /// base of their own), so only when named.
    pub const DATABASE: [Scenario; 2] = [Scenario::DbRead, Scenario::DbWrite];

    /// The SimpleInvoke processes by x, the number of HelloWorld calls (`bpel` on the command
    /// line means all four, or those of `--x`).
    pub const PROCESSES: [Scenario; 4] = [
        Scenario::SimpleInvoke0,
        Scenario::SimpleInvoke1,
        Scenario::SimpleInvoke2,
        Scenario::SimpleInvoke3,
    ];

    /// The BPEL suite: the four processes, then the direct HelloWorld baseline.
    pub const BPEL: [Scenario; 5] = [
        Scenario::SimpleInvoke0,
        Scenario::SimpleInvoke1,
        Scenario::SimpleInvoke2,
        Scenario::SimpleInvoke3,
        Scenario::HelloWorldDirect,
    ];

    /// The x of a SimpleInvoke process: how many times it calls HelloWorld.
    pub fn invokes(self) -> Option<u8> {
        match self {
            Scenario::SimpleInvoke0 => Some(0),
            Scenario::SimpleInvoke1 => Some(1),
            Scenario::SimpleInvoke2 => Some(2),
            Scenario::SimpleInvoke3 => Some(3),
            _ => None,
        }
    }

    /// Parses a comma-separated scenario list, where `bpel` stands for the four SimpleInvoke
    /// processes (`--x` then keeps some of them).
    pub fn parse_list(s: &str) -> Result<Vec<Scenario>, String> {
        let mut out = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let picked: Vec<Scenario> = if item.eq_ignore_ascii_case("bpel") {
                Scenario::PROCESSES.to_vec()
            } else {
                vec![item
                    .parse()
                    .map_err(|e| format!("{e}, or bpel (the four SimpleInvoke processes)"))?]
            };
            for sc in picked {
                if !out.contains(&sc) {
                    out.push(sc);
                }
            }
        }
        if out.is_empty() {
            return Err("empty scenario list".into());
        }
        Ok(out)
    }

    /// The suite the scenario belongs to.
    pub fn suite(self) -> Suite {
        match self {
            Scenario::Direct
            | Scenario::Cbr
            | Scenario::CbrSoapHeader
            | Scenario::CbrTransportHeader
            | Scenario::Xslt
            | Scenario::Secure
            | Scenario::SecureModern => Suite::Classic,
            Scenario::JsonPassthrough
            | Scenario::JsonCbr
            | Scenario::JsonCbrFilter
            | Scenario::JsonMap
            | Scenario::JsonTransform
            | Scenario::ScatterGather
            | Scenario::JsonToSoap
            | Scenario::DbRead
            | Scenario::DbWrite => Suite::Integrator,
            Scenario::SimpleInvoke0
            | Scenario::SimpleInvoke1
            | Scenario::SimpleInvoke2
            | Scenario::SimpleInvoke3
            | Scenario::HelloWorldDirect => Suite::Bpel,
        }
    }

    /// Whether the requests carry a body whose size is an axis (not ScatterGather's and the
    /// database scenarios' requests, nor the BPEL suite's small messages of one shape).
    pub fn sized(self) -> bool {
        !matches!(
            self,
            Scenario::ScatterGather | Scenario::DbRead | Scenario::DbWrite
        ) && self.suite() != Suite::Bpel
    }

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
            Scenario::JsonPassthrough => "json-passthrough",
            Scenario::JsonCbr => "json-cbr",
            Scenario::JsonCbrFilter => "json-cbr-filter",
            Scenario::JsonMap => "json-map",
            Scenario::JsonTransform => "json-transform",
            Scenario::ScatterGather => "scatter-gather",
            Scenario::JsonToSoap => "json-to-soap",
            Scenario::DbRead => "db-read",
            Scenario::DbWrite => "db-write",
            Scenario::SimpleInvoke0 => "bpel-x0",
            Scenario::SimpleInvoke1 => "bpel-x1",
            Scenario::SimpleInvoke2 => "bpel-x2",
            Scenario::SimpleInvoke3 => "bpel-x3",
            Scenario::HelloWorldDirect => "bpel-direct",
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
            Scenario::JsonPassthrough => "JsonPassthrough",
            Scenario::JsonCbr => "JsonCBR",
            Scenario::JsonCbrFilter => "JsonCBRFilter",
            Scenario::JsonMap => "JsonMap",
            Scenario::JsonTransform => "JsonTransform",
            Scenario::ScatterGather => "ScatterGather",
            Scenario::JsonToSoap => "JsonToSoap",
            Scenario::DbRead => "DbRead",
            Scenario::DbWrite => "DbWrite",
            Scenario::SimpleInvoke0 => "SimpleInvoke0",
            Scenario::SimpleInvoke1 => "SimpleInvoke1",
            Scenario::SimpleInvoke2 => "SimpleInvoke2",
            Scenario::SimpleInvoke3 => "SimpleInvoke3",
            Scenario::HelloWorldDirect => "HelloWorld",
        }
    }

    /// The scenario's URL under a base: the proxy name under a classic base such as
    /// `http://127.0.0.1:8280/service`, the path under an integrator base such as
    /// `http://127.0.0.1:8281/api` (`/passthrough`, `/route`, …; ScatterGather's `/product`, to
    /// which each request appends `/{id}`).
    pub fn url(self, base: &str) -> String {
        let base = base.trim_end_matches('/');
        let path = match self {
            Scenario::JsonPassthrough => "passthrough",
            Scenario::JsonCbr => "route",
            Scenario::JsonCbrFilter => "route/filter",
            Scenario::JsonMap => "map",
            Scenario::JsonTransform => "transform",
            Scenario::ScatterGather => "product",
            Scenario::JsonToSoap => "soap",
            Scenario::DbRead | Scenario::DbWrite => "customers",
            classic => classic.proxy(),
        };
        format!("{base}/{path}")
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
        let every = Scenario::ALL
            .into_iter()
            .chain(Scenario::SECURE)
            .chain(Scenario::INTEGRATOR)
            .chain(Scenario::DATABASE)
            .chain(Scenario::BPEL);
        for sc in every.clone() {
            if lowered == sc.name() || lowered == sc.proxy().to_ascii_lowercase() {
                return Ok(sc);
            }
        }
        Err(format!(
            "unknown scenario '{s}' (expected one of: {})",
            every.map(Scenario::name).collect::<Vec<_>>().join(", ")
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
    /// HTTP 200, a body equal byte for byte to this one, and the back end that answered named
    /// in the [`BACKEND_HEADER`] response header (JsonCBR).
    EchoFrom {
        /// The back end that must have answered.
        backend: &'static str,
        /// The request body the back end echoes.
        body: Vec<u8>,
    },
    /// HTTP 200 and a JSON body equal to this value: the same members, array items in the same
    /// order, numbers equal by value (`1`, `1.0` and `1e0` are one number; see
    /// [`same_number`]). The integrator scenarios that compute an answer (mappings, routing
    /// filters, aggregates).
    Json(Value),
    /// This status and a JSON body equal to this value once the `ignore`d members (generated by
    /// the server: an id, a timestamp) are set aside; numbers compared by value (the database
    /// scenarios).
    Row {
        /// Expected HTTP status.
        status: u16,
        /// The row.
        expected: Value,
        /// Members of the answer not compared.
        ignore: &'static [&'static str],
    },
    /// HTTP 200 and a `buyStocks` element holding exactly these orders, in order (XSLT).
    Orders(Vec<Order>),
    /// HTTP 200 and a body equal to this one as XML: the same elements (by namespace and local
    /// name), attributes and text, in the same order; the XML declaration, comments,
    /// prefixes and whitespace-only text between elements set aside. For ESBs that re-serialise
    /// every message (Apache Synapse), where [`Check::Echo`] cannot hold.
    SameXml(Vec<u8>),
    /// HTTP 200 and a SOAP 1.1 envelope whose Body holds only the answer element, whose text is
    /// exactly this (the BPEL suite: a SimpleInvoke process's `sayHelloToResponse`,
    /// HelloWorld's `sayHelloResponse/return`).
    SoapAnswer {
        /// Which answer element.
        answer: crate::bpel::Answer,
        /// Its exact text.
        text: String,
    },
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

/// The response header naming the back end that answered (the echo's `x-echo-name`).
pub const BACKEND_HEADER: &str = "x-echo-name";

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
            Scenario::SimpleInvoke0
            | Scenario::SimpleInvoke1
            | Scenario::SimpleInvoke2
            | Scenario::SimpleInvoke3
            | Scenario::HelloWorldDirect => Err(format!(
                "{scenario} sends its own sayHelloTo or sayHello requests (--suite bpel)"
            )),
            Scenario::Direct
            | Scenario::Cbr
            | Scenario::CbrSoapHeader
            | Scenario::CbrTransportHeader => Ok(Check::Echo(request.to_vec())),
            integrator => crate::integrator::check(integrator, request),
        }
    }

    /// Checks one response: its status, the header lines it came with and its body.
    pub fn check(&self, status: u16, headers: Headers<'_>, body: &[u8]) -> Result<(), Failure> {
        match self {
            Check::Status200 => expect_status(status, 200),
            Check::Echo(expected) => {
                expect_status(status, 200)?;
                same_bytes(body, expected)
            }
            Check::SameXml(expected) => {
                expect_status(status, 200)?;
                same_xml(body, expected).map_err(Failure::Content)
            }
            Check::EchoFrom {
                backend,
                body: sent,
            } => {
                expect_status(status, 200)?;
                match headers.single(BACKEND_HEADER) {
                    Ok(Some(name)) if name == backend.as_bytes() => same_bytes(body, sent),
                    Ok(Some(name)) => Err(Failure::Content(format!(
                        "answered by the '{}' back end, expected '{backend}' ({BACKEND_HEADER})",
                        String::from_utf8_lossy(name)
                    ))),
                    Ok(None) => Err(Failure::Content(format!(
                        "no {BACKEND_HEADER} header: which back end answered is unknown"
                    ))),
                    Err(names) => Err(Failure::Content(format!(
                        "{} {BACKEND_HEADER} headers ({}): which back end answered is unknown",
                        names.len(),
                        names
                            .iter()
                            .map(|n| format!("'{}'", String::from_utf8_lossy(n)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))),
                }
            }
            Check::Json(expected) => {
                expect_status(status, 200)?;
                let got: Value = serde_json::from_slice(body).map_err(|e| {
                    Failure::Content(format!("the answer is not JSON ({e}): {}", excerpt(body)))
                })?;
                match json_difference(&got, expected, &mut String::from("$")) {
                    None => Ok(()),
                    Some(why) => Err(Failure::Content(why)),
                }
            }
            Check::Row {
                status: want,
                expected,
                ignore,
            } => {
                expect_status(status, *want)?;
                let mut got: Value = serde_json::from_slice(body).map_err(|e| {
                    Failure::Content(format!("the answer is not JSON ({e}): {}", excerpt(body)))
                })?;
                if let Some(o) = got.as_object_mut() {
                    for name in *ignore {
                        if o.remove(*name).is_none() {
                            return Err(Failure::Content(format!("$.{name} is missing")));
                        }
                    }
                }
                match json_difference(&got, expected, &mut String::from("$")) {
                    None => Ok(()),
                    Some(why) => Err(Failure::Content(why)),
                }
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
            Check::SoapAnswer { answer, text } => {
                expect_status(status, 200)?;
                let got = crate::bpel::answer_text(body, *answer).map_err(Failure::Content)?;
                if got == *text {
                    Ok(())
                } else {
                    Err(Failure::Content(format!(
                        "the answer is '{}', expected '{text}'",
                        excerpt(got.as_bytes())
                    )))
                }
            }
            Check::Secure { checker, plain } => {
                expect_status(status, 200)?;
                // The verifier reads what it needs; the answer must be whole besides.
                well_formed(body).map_err(Failure::Content)?;
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
                match fault_reason(body) {
                    Ok(Some(s)) if s == *reason => Ok(()),
                    Ok(Some(s)) => Err(Failure::Content(format!(
                        "faultstring '{s}', expected '{reason}'"
                    ))),
                    Ok(None) => Err(Failure::Content(
                        "no SOAP faultstring in the response".into(),
                    )),
                    Err(why) => Err(Failure::Content(format!(
                        "the fault is not a whole XML document: {why}"
                    ))),
                }
            }
        }
    }
}

fn same_bytes(body: &[u8], expected: &[u8]) -> Result<(), Failure> {
    if body == expected {
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

/// The body's XML items in document order (see [`Check::SameXml`]): `<{ns}name a=v …>` with
/// attributes sorted and namespace declarations left out, `</>`, and each run of text that is
/// not whitespace alone.
pub fn xml_items(xml: &[u8]) -> Result<Vec<String>, String> {
    let mut reader = XmlDocument::new(xml)?;
    let mut items = Vec::new();
    let mut run = String::new();
    let ns_of = |r: &ResolveResult<'_>| match r {
        ResolveResult::Bound(n) => n.0.to_string(),
        _ => String::new(),
    };
    loop {
        let (ns, ev) = reader.next()?;
        let element_ns = ns_of(&ns);
        let tag = matches!(
            ev,
            Event::Start(_) | Event::Empty(_) | Event::End(_) | Event::Eof
        );
        if tag && !run.trim().is_empty() {
            items.push(std::mem::take(&mut run));
        } else if tag {
            run.clear();
        }
        match &ev {
            Event::Start(e) | Event::Empty(e) => {
                let mut attrs = Vec::new();
                for a in e.attributes() {
                    let a = a.map_err(|e| format!("bad attribute: {e}"))?;
                    let key = a.key.as_ref();
                    if key == "xmlns" || key.starts_with("xmlns:") {
                        continue;
                    }
                    let (ans, local) = reader.resolver().resolve_attribute(a.key);
                    let value = a
                        .normalized_value(Default::default())
                        .map_err(|e| e.to_string())?;
                    attrs.push(format!("{{{}}}{}={value}", ns_of(&ans), local.as_ref()));
                }
                attrs.sort();
                items.push(format!(
                    "<{{{}}}{} {}>",
                    element_ns,
                    e.local_name().as_ref(),
                    attrs.join(" ")
                ));
                if matches!(ev, Event::Empty(_)) {
                    items.push("</>".into());
                }
            }
            Event::End(_) => items.push("</>".into()),
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) => push_text(&mut run, &ev)?,
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(items)
}

fn same_xml(body: &[u8], expected: &[u8]) -> Result<(), String> {
    if body == expected {
        return Ok(());
    }
    let want = xml_items(expected).map_err(|e| format!("the request is not XML: {e}"))?;
    let got = xml_items(body).map_err(|e| format!("the answer is not XML: {e}"))?;
    if got == want {
        return Ok(());
    }
    let clip = |s: &str| s.chars().take(80).collect::<String>();
    Err(match got.iter().zip(&want).position(|(a, b)| a != b) {
        Some(i) => format!(
            "answer differs from the request as XML at item {i}: got {:?}, sent {:?}",
            clip(&got[i]),
            clip(&want[i])
        ),
        None => format!(
            "answer has {} XML items, the request {}",
            got.len(),
            want.len()
        ),
    })
}

/// The start of a body, for messages.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
    if body.len() > 80 {
        text + "…"
    } else {
        text
    }
}

/// A JSON value shortened for messages.
fn shown(v: &Value) -> String {
    excerpt(v.to_string().as_bytes())
}

/// Whether two JSON numbers have the same value: integers exactly, others as doubles to within
/// 4 units in the last place. A decimal such as `121523.09999999999` may be read one unit off
/// by a parser that does not round correctly (this crate's `serde_json` among them), and a
/// mapping computed from inputs read that way may differ by as much again; a wrong answer
/// differs by far more.
pub fn same_number(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x == y;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y || (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs()),
        _ => false,
    }
}

/// Whether two JSON values are equal with numbers compared by value.
pub fn same_json(got: &Value, want: &Value) -> bool {
    json_difference(got, want, &mut String::from("$")).is_none()
}

/// The first place, in document order, where `got` differs from `want` (the location as a
/// JSONPath from `at`), or `None` when they are equal with numbers compared by value.
pub fn json_difference(got: &Value, want: &Value, at: &mut String) -> Option<String> {
    match (got, want) {
        (Value::Number(g), Value::Number(w)) => {
            (!same_number(g, w)).then(|| format!("{at} is {g}, expected {w}"))
        }
        (Value::Object(g), Value::Object(w)) => {
            for (name, wv) in w {
                let len = at.len();
                at.push('.');
                at.push_str(name);
                let diff = match g.get(name) {
                    Some(gv) => json_difference(gv, wv, at),
                    None => Some(format!("{at} is missing")),
                };
                if diff.is_some() {
                    return diff;
                }
                at.truncate(len);
            }
            g.keys()
                .find(|name| !w.contains_key(*name))
                .map(|name| format!("{at}.{name} is not expected"))
        }
        (Value::Array(g), Value::Array(w)) => {
            if g.len() != w.len() {
                return Some(format!("{at} has {} items, expected {}", g.len(), w.len()));
            }
            for (i, (gv, wv)) in g.iter().zip(w).enumerate() {
                let len = at.len();
                at.push_str(&format!("[{i}]"));
                if let Some(diff) = json_difference(gv, wv, at) {
                    return Some(diff);
                }
                at.truncate(len);
            }
            None
        }
        _ => (got != want).then(|| format!("{at} is {}, expected {}", shown(got), shown(want))),
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
pub(crate) fn push_text(out: &mut String, ev: &Event<'_>) -> Result<(), String> {
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

/// Which characters XML 1.0 allows (its `Char` production), as bytes of valid UTF-8: no
/// control character but tab, line feed and carriage return, and neither U+FFFE nor U+FFFF
/// (UTF-8 cannot hold surrogates). Returns the offset of the first one it refuses.
pub(crate) fn forbidden_char(text: &str) -> Option<(usize, char)> {
    let bytes = text.as_bytes();
    let at = bytes.iter().enumerate().position(|(i, &b)| {
        (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
            || (b == 0xEF
                && bytes.get(i + 1) == Some(&0xBF)
                && matches!(bytes.get(i + 2), Some(0xBE | 0xBF)))
    })?;
    text[at..].chars().next().map(|c| (at, c))
}

/// One whole XML document, read event by event and refused at the first sign that it is not
/// one complete, well-formed document: a byte that is not UTF-8 or a character XML forbids,
/// a tag that is cut or does not match its start, a prefix bound to no namespace, a bad
/// attribute or entity reference, anything but white space, comments and processing
/// instructions outside the root element, a second root, a DTD, or an end of input before
/// the root element is closed. The checks read answers to the end this way, so that an answer
/// whose beginning is right but whose rest is cut short or corrupted never passes.
pub(crate) struct XmlDocument<'i> {
    reader: NsReader<&'i [u8]>,
    /// Elements open now.
    open: usize,
    /// Whether the root element has started, and whether it has ended.
    root: (bool, bool),
    /// Whether any event has been read (an XML declaration must come first).
    started: bool,
    /// The document's length in bytes.
    len: u64,
}

impl<'i> XmlDocument<'i> {
    /// A reader over `xml`, after checking that it is UTF-8 holding only XML characters.
    pub(crate) fn new(xml: &'i [u8]) -> Result<XmlDocument<'i>, String> {
        let text = std::str::from_utf8(xml).map_err(|e| {
            format!(
                "not UTF-8 (at byte {}): not a well-formed XML document",
                e.valid_up_to()
            )
        })?;
        if let Some((at, c)) = forbidden_char(text) {
            return Err(format!(
                "character U+{:04X} at byte {at} is not allowed in XML",
                u32::from(c)
            ));
        }
        Ok(XmlDocument {
            reader: NsReader::from_str(text),
            open: 0,
            root: (false, false),
            started: false,
            len: text.len() as u64,
        })
    }

    /// The namespace bindings in scope (for attribute names).
    pub(crate) fn resolver(&self) -> &quick_xml::name::NamespaceResolver {
        self.reader.resolver()
    }

    /// The next event with the namespace of its element (`Unbound` for events that are not
    /// tags), or why the document is not well-formed. [`Event::Eof`] comes only after a
    /// complete root element.
    pub(crate) fn next(&mut self) -> Result<(ResolveResult<'_>, Event<'i>), String> {
        let ev = match self.reader.read_event() {
            Ok(ev) => ev,
            // An error at the very end is a document cut short, not a malformed one.
            Err(e) if self.reader.buffer_position() >= self.len => {
                return Err(format!(
                    "the document ends before it is closed (truncated): {e}"
                ))
            }
            Err(e) => return Err(format!("malformed XML: {e}")),
        };
        self.admit(&ev)?;
        let ns = match &ev {
            Event::Start(e) | Event::Empty(e) => self.reader.resolver().resolve_element(e.name()).0,
            Event::End(e) => self.reader.resolver().resolve_element(e.name()).0,
            _ => ResolveResult::Unbound,
        };
        Ok((ns, ev))
    }

    /// Reads the rest of the document, only to check it.
    pub(crate) fn finish(&mut self) -> Result<(), String> {
        while !matches!(self.next()?.1, Event::Eof) {}
        Ok(())
    }

    fn admit(&mut self, ev: &Event<'i>) -> Result<(), String> {
        let first = !std::mem::replace(&mut self.started, true);
        match ev {
            Event::Start(e) | Event::Empty(e) => {
                let local = e.local_name();
                let name: String = local.as_ref().into();
                if self.root.1 {
                    return Err(format!(
                        "malformed XML: element {name} after the root element"
                    ));
                }
                self.root.0 = true;
                let resolver = self.reader.resolver();
                if let ResolveResult::Unknown(p) = resolver.resolve_element(e.name()).0 {
                    return Err(format!(
                        "malformed XML: prefix '{}' of {name} is bound to no namespace",
                        p
                    ));
                }
                for a in e.attributes() {
                    let a = a.map_err(|err| format!("malformed XML: in {name}: {err}"))?;
                    if let ResolveResult::Unknown(p) = resolver.resolve_attribute(a.key).0 {
                        return Err(format!(
                            "malformed XML: prefix '{}' of an attribute of {name} is bound to \
                             no namespace",
                            p
                        ));
                    }
                    a.normalized_value(Default::default())
                        .map_err(|err| format!("malformed XML: in {name}: {err}"))?;
                }
                if matches!(ev, Event::Start(_)) {
                    self.open += 1;
                } else if self.open == 0 {
                    self.root.1 = true;
                }
            }
            Event::End(_) => {
                // The reader matches end tags to start tags; this catches one with no start.
                self.open = self
                    .open
                    .checked_sub(1)
                    .ok_or("malformed XML: an end tag without its start")?;
                if self.open == 0 {
                    self.root.1 = true;
                }
            }
            Event::Text(t) if self.open == 0 => {
                let text: &str = t.as_ref();
                if !text
                    .bytes()
                    .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
                {
                    return Err(format!(
                        "malformed XML: text {} the root element",
                        if self.root.1 { "after" } else { "before" }
                    ));
                }
            }
            Event::CData(_) | Event::GeneralRef(_) if self.open == 0 => {
                return Err("malformed XML: text outside the root element".into());
            }
            Event::GeneralRef(_) => {
                push_text(&mut String::new(), ev).map_err(|why| format!("malformed XML: {why}"))?
            }
            Event::Decl(_) if !first => {
                return Err("malformed XML: an XML declaration after the start".into());
            }
            Event::DocType(_) => return Err("a DTD, which the scenarios do not allow".into()),
            Event::Eof if !self.root.0 => return Err("no XML element in the answer".into()),
            Event::Eof if !self.root.1 => {
                return Err(format!(
                    "the document ends before it is closed (truncated): {} element(s) still \
                     open",
                    self.open
                ))
            }
            _ => {}
        }
        Ok(())
    }
}

/// Checks that `xml` is one complete, well-formed XML document (see [`XmlDocument`]).
pub fn well_formed(xml: &[u8]) -> Result<(), String> {
    XmlDocument::new(xml)?.finish()
}

/// Parses the ordered (symbol, buyerID, price, volume) tuples under the first element named
/// `container` in the samples namespace (`buyStocks`; `skcotSyub` for the reversed form). The
/// whole document must be well-formed ([`XmlDocument`]), not only the part holding the orders.
pub fn parse_orders(xml: &[u8], container: &str) -> Result<Vec<Order>, String> {
    let mut reader = XmlDocument::new(xml)?;
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
        let (ns, ev) = reader.next()?;
        match &ev {
            Event::Start(e) => {
                let local = e.local_name();
                let local = local.as_ref();
                if !inside {
                    if !found
                        && local == container
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
                    && !found
                    && e.local_name().as_ref() == container
                    && matches!(ns, ResolveResult::Bound(n) if n.0 == SAMPLES_NS)
                {
                    found = true;
                }
            }
            Event::End(_) if inside => {
                if depth == 0 {
                    // The orders are read; the rest of the document must still be whole.
                    inside = false;
                    continue;
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

/// The text of the first `faultstring` element, trimmed, or `None` if there is none or the
/// body is not one complete, well-formed XML document.
pub fn fault_string(xml: &[u8]) -> Option<String> {
    fault_reason(xml).ok().flatten()
}

/// The text of the first `faultstring` element, trimmed (`None` when there is none), once the
/// whole body has been read as one complete, well-formed XML document ([`XmlDocument`]).
pub fn fault_reason(xml: &[u8]) -> Result<Option<String>, String> {
    let mut reader = XmlDocument::new(xml)?;
    let mut inside = false;
    let mut reason: Option<String> = None;
    let mut out = String::new();
    loop {
        let (_, ev) = reader.next()?;
        match &ev {
            Event::Start(e) if reason.is_none() && e.local_name().as_ref() == "faultstring" => {
                inside = true
            }
            Event::Empty(e) if reason.is_none() && e.local_name().as_ref() == "faultstring" => {
                reason = Some(String::new())
            }
            Event::End(_) if inside => {
                inside = false;
                reason = Some(out.trim().to_string());
            }
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) if inside => {
                push_text(&mut out, &ev)?;
            }
            Event::Eof => return Ok(reason),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{buy_stocks, Variant};

    #[test]
    fn same_xml_sets_aside_the_declaration_whitespace_and_prefixes_but_nothing_else() {
        let sent = buy_stocks(16_385, Variant::Plain).unwrap_or_default();
        let text = String::from_utf8(sent.clone()).unwrap_or_default();
        let check = Check::SameXml(sent.clone());
        let ok = |body: &str| check.check(200, Headers::empty(), body.as_bytes());
        assert_eq!(ok(&text), Ok(()));
        // What a re-serialising ESB does: a declaration, no line feeds between elements,
        // another prefix for the envelope's namespace.
        let rewritten = format!(
            "<?xml version='1.0' encoding='UTF-8'?>{}",
            text.replace(">\n<", "><")
                .replace("soapenv:", "s:")
                .replace("xmlns:soapenv=", "xmlns:s=")
        );
        assert_ne!(rewritten.as_bytes(), &sent[..]);
        assert_eq!(ok(&rewritten), Ok(()));
        // A changed value, a lost order, a cut body and another namespace are not the same XML.
        let changed = text.replacen("<symbol>IBM</symbol>", "<symbol>IBN</symbol>", 1);
        assert!(matches!(ok(&changed), Err(Failure::Content(m)) if m.contains("IBN")));
        let cut = &text[..text.len() / 2];
        assert!(ok(cut).is_err());
        let lost = text
            .replacen("<order>", "<skipped>", 1)
            .replacen("</order>", "</skipped>", 1);
        assert!(ok(&lost).is_err());
        let other_ns = text.replace("http://services.samples", "http://elsewhere");
        assert!(ok(&other_ns).is_err());
        assert_eq!(
            check.check(500, Headers::empty(), &sent),
            Err(Failure::Status(500))
        );
    }

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

    /// What the XSLT round trip answers: a Body-only envelope without indentation, holding the
    /// orders sent, its last byte the envelope's `>`.
    fn xslt_answer(size: usize) -> String {
        let reversed = buy_stocks(size, Variant::XsltReversed).unwrap_or_default();
        let mut text = String::from_utf8(reversed).unwrap_or_default();
        for (from, to) in [
            ("skcotSyub", "buyStocks"),
            ("redro>", "order>"),
            ("lobmys>", "symbol>"),
            ("DIreyub>", "buyerID>"),
            ("ecirp>", "price>"),
            ("emulov>", "volume>"),
        ] {
            text = text.replace(from, to);
        }
        text
    }

    #[test]
    fn xslt_check_refuses_answers_that_are_not_one_whole_well_formed_document() {
        for size in [1024, 16_385] {
            let sent = buy_stocks(size, Variant::Plain).unwrap_or_default();
            let check =
                Check::for_scenario(Scenario::Xslt, &sent).unwrap_or_else(|e| panic!("{e}"));
            let answer = xslt_answer(size);
            let verdict = |body: &str| check.check(200, Headers::empty(), body.as_bytes());
            assert_eq!(verdict(&answer), Ok(()));
            // What a serialiser may add and still be the same document.
            assert_eq!(verdict(&format!("{answer}\n")), Ok(()));
            assert_eq!(
                verdict(&format!(
                    "<?xml version=\"1.0\"?>\n{answer}<!-- done -->\r\n"
                )),
                Ok(())
            );
            let last = answer.len() - 1;
            let cut_after_orders = &answer[..answer.find("</m:buyStocks>").unwrap_or(0) + 14];
            let bad = [
                ("the last byte removed", answer[..last].to_string()),
                (
                    "the last byte a control character",
                    format!("{}\u{1}", &answer[..last]),
                ),
                (
                    "a control character after the root",
                    format!("{answer}\u{b}"),
                ),
                (
                    "a control character inside",
                    answer.replacen("IBM", "I\u{1}M", 1),
                ),
                ("cut after the orders", cut_after_orders.to_string()),
                ("text after the root", format!("{answer}x")),
                ("a second root", format!("{answer}<x/>")),
                (
                    "an unmatched end tag",
                    answer.replacen("</soapenv:Body>", "</soapenv:Bod>", 1),
                ),
                (
                    "an unbound prefix",
                    answer.replacen("<order>", "<q:order>", 1),
                ),
                (
                    "an unknown entity",
                    answer.replacen("asankha", "a&nbsp;", 1),
                ),
                (
                    "a broken attribute",
                    answer.replacen("xmlns:m=", "xmlns:m", 1),
                ),
            ];
            for (what, body) in bad {
                assert!(
                    matches!(verdict(&body), Err(Failure::Content(_))),
                    "{what} at {size}: {:?}",
                    verdict(&body)
                );
            }
        }
    }

    #[test]
    fn fault_and_same_xml_checks_read_the_whole_answer() {
        let fault = "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><soapenv:Fault><faultcode>soapenv:Server</faultcode><faultstring>Invalid routing header</faultstring></soapenv:Fault></soapenv:Body></soapenv:Envelope>";
        let check = Check::Fault {
            status: 500,
            reason: FAULT_ROUTING,
        };
        let verdict = |body: &str| check.check(500, Headers::empty(), body.as_bytes());
        assert_eq!(verdict(fault), Ok(()));
        let cut = &fault[..fault.find("</soapenv:Fault>").unwrap_or(0)];
        assert!(matches!(verdict(cut), Err(Failure::Content(m)) if m.contains("truncated")));
        assert!(verdict(&format!("{fault}\u{0}")).is_err());
        let sent = buy_stocks(1024, Variant::Plain).unwrap_or_default();
        let same = Check::SameXml(sent.clone());
        let text = String::from_utf8(sent)
            .unwrap_or_default()
            .replace(">\n<", "><");
        assert_eq!(same.check(200, Headers::empty(), text.as_bytes()), Ok(()));
        let trailing = format!("{text}\u{1}");
        assert!(same
            .check(200, Headers::empty(), trailing.as_bytes())
            .is_err());
        assert!(well_formed(text.trim_end().trim_end_matches('>').as_bytes()).is_err());
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
        assert_eq!(check.check(500, Headers::default(), fault), Ok(()));
        assert_eq!(
            check.check(200, Headers::default(), fault),
            Err(Failure::Status(200))
        );
        let other = Check::Fault {
            status: 500,
            reason: FAULT_NOT_IBM,
        };
        assert!(matches!(
            other.check(500, Headers::default(), fault),
            Err(Failure::Content(_))
        ));
        assert!(matches!(
            check.check(500, Headers::default(), b"<x/>"),
            Err(Failure::Content(_))
        ));
    }

    #[test]
    fn echo_check_reports_where_the_body_differs() {
        let check = Check::Echo(b"abcdef".to_vec());
        assert_eq!(check.check(200, Headers::default(), b"abcdef"), Ok(()));
        assert_eq!(
            check.check(200, Headers::default(), b"abXdef"),
            Err(Failure::Content(
                "body differs from the request at byte 2 (got 6 bytes, sent 6)".into()
            ))
        );
        assert!(check.check(200, Headers::default(), b"abc").is_err());
        assert_eq!(
            check.check(502, Headers::default(), b"abcdef"),
            Err(Failure::Status(502))
        );
    }

    #[test]
    fn json_answers_compare_numbers_by_value_and_say_where_they_differ() {
        let n = |t: &str| serde_json::from_str::<serde_json::Number>(t).expect("number");
        assert!(same_number(&n("1"), &n("1.0")));
        assert!(same_number(&n("1e2"), &n("100")));
        assert!(same_number(&n("121523.1"), &n("121523.09999999999")));
        assert!(!same_number(&n("22.0"), &n("22.01")));
        assert!(!same_number(&n("0"), &n("1e-300")));
        assert!(!same_number(
            &n("18446744073709551615"),
            &n("18446744073709551614")
        ));
        let check = Check::Json(serde_json::json!({"a": [1, {"b": "x"}], "c": 2.5}));
        let none = Headers::default();
        assert_eq!(
            check.check(200, none, br#"{"c":2.50,"a":[1.0,{"b":"x"}]}"#),
            Ok(())
        );
        for (body, why) in [
            (
                &br#"{"a":[1,{"b":"y"}],"c":2.5}"#[..],
                r#"$.a[1].b is "y", expected "x""#,
            ),
            (br#"{"a":[1],"c":2.5}"#, "$.a has 1 items, expected 2"),
            (br#"{"a":[1,{"b":"x"}]}"#, "$.c is missing"),
            (
                br#"{"a":[1,{"b":"x"}],"c":2.5,"d":0}"#,
                "$.d is not expected",
            ),
            (
                br#"{"a":[1,{"b":"x"}],"c":"2.5"}"#,
                r#"$.c is "2.5", expected 2.5"#,
            ),
        ] {
            assert_eq!(
                check.check(200, none, body),
                Err(Failure::Content(why.into()))
            );
        }
        assert!(matches!(
            check.check(200, none, b"<xml/>"),
            Err(Failure::Content(m)) if m.starts_with("the answer is not JSON")
        ));
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
        assert_eq!("JsonCBR".parse::<Scenario>(), Ok(Scenario::JsonCbr));
        assert_eq!(
            "json-cbr-filter".parse::<Scenario>(),
            Ok(Scenario::JsonCbrFilter)
        );
    }

    #[test]
    fn integrator_scenarios_live_under_paths_of_their_own_suite() {
        let base = "http://127.0.0.1:8281/api/";
        assert_eq!(
            Scenario::JsonCbrFilter.url(base),
            "http://127.0.0.1:8281/api/route/filter"
        );
        assert_eq!(
            Scenario::ScatterGather.url(base),
            "http://127.0.0.1:8281/api/product"
        );
        assert_eq!(
            Scenario::Direct.url("http://h/service"),
            "http://h/service/DirectProxy"
        );
        assert!(Scenario::INTEGRATOR
            .iter()
            .all(|s| s.suite() == Suite::Integrator));
        assert!(Suite::Classic.admit(&Scenario::ALL).is_ok());
        assert!(Suite::Classic
            .admit(&[Scenario::Secure, Scenario::JsonMap])
            .err()
            .unwrap_or_default()
            .contains("json-map belongs to the integrator suite"));
        assert_eq!("Integrator".parse::<Suite>(), Ok(Suite::Integrator));
        assert!("soap".parse::<Suite>().is_err());
    }
}
