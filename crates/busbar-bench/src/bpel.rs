//! The BPEL suite (docs/scenarios.md, examples/orchestration/): the SimpleInvoke processes and their
//! HelloWorld partner called directly, under a base such as `http://127.0.0.1:8283/service`.
//!
//! Layout: [`name`] is the name request `n` carries (`user-n`, every tenth one with characters
//! that must be escaped and others beyond ASCII); [`request_body`] wraps it in a SOAP 1.1
//! `sayHelloTo` (a process) or `sayHello` (HelloWorld) request and [`expected`] is the text the
//! answer must hold; [`requests`] makes the rotation of names a run sends in turn, each with its
//! check; [`answer_text`] reads that text out of an answer, refusing a fault, a truncated
//! envelope or anything but the one answer element in the Body. [`parse_x`] and [`keep_x`]
//! serve the `--x` option. The answers are written here from the processes' definition (their
//! README and WSDLs), not taken from the engine.

use quick_xml::events::Event;
use quick_xml::name::ResolveResult;
use quick_xml::NsReader;

use crate::check::{Check, Scenario};
use crate::client::{Method, RequestSpec, Url, Version};

/// The SOAP 1.1 envelope namespace.
pub const SOAP11_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";
/// The namespace of the processes' `sayHelloTo` and `sayHelloToResponse` elements.
pub const PROCESS_NS: &str = "urn:busbar:example:simple-invoke";
/// The namespace of HelloWorld's `sayHello` and `sayHelloResponse` elements.
pub const HELLO_NS: &str = "http://jboss.org/samples/helloworld";
/// The largest x: the processes call HelloWorld 0 to 3 times.
pub const MAX_X: u8 = 3;
/// Names a load run rotates through.
pub const NAMES: usize = 1000;
/// Names `bench verify` sends per case.
pub const VERIFY_NAMES: usize = 40;

/// Which answer a BPEL-suite check reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A SimpleInvoke process: `<tns:sayHelloToResponse>TEXT</tns:sayHelloToResponse>`.
    Process,
    /// HelloWorld: `<hw:sayHelloResponse><return>TEXT</return></hw:sayHelloResponse>`.
    HelloWorld,
}

impl Answer {
    fn element(self) -> (&'static str, &'static str) {
        match self {
            Answer::Process => (PROCESS_NS, "sayHelloToResponse"),
            Answer::HelloWorld => (HELLO_NS, "sayHelloResponse"),
        }
    }
}

/// The name request `n` carries: `user-n`, and for every tenth one `user-n <Zoë & Ørsted>`,
/// which has to be escaped on the way in and out and is not ASCII.
pub fn name(n: usize) -> String {
    if n % 10 == 9 {
        format!("user-{n} <Zoë & Ørsted>")
    } else {
        format!("user-{n}")
    }
}

/// `text` as XML character data.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// The SOAP 1.1 request body of `scenario` for `name`: `sayHelloTo` for a process, `sayHello`
/// for HelloWorld.
pub fn request_body(scenario: Scenario, name: &str) -> Result<Vec<u8>, String> {
    let name = escape(name);
    let body = match scenario {
        Scenario::HelloWorldDirect => format!(
            "<soapenv:Envelope xmlns:soapenv=\"{SOAP11_NS}\" xmlns:hw=\"{HELLO_NS}\">\
             <soapenv:Body><hw:sayHello><toWhom>{name}</toWhom></hw:sayHello></soapenv:Body>\
             </soapenv:Envelope>"
        ),
        s if s.invokes().is_some() => format!(
            "<soapenv:Envelope xmlns:soapenv=\"{SOAP11_NS}\" xmlns:tns=\"{PROCESS_NS}\">\
             <soapenv:Body><tns:sayHelloTo>{name}</tns:sayHelloTo></soapenv:Body>\
             </soapenv:Envelope>"
        ),
        other => return Err(format!("{other} is not a scenario of the bpel suite")),
    };
    Ok(body.into_bytes())
}

/// What `scenario` answers `name` with: the name itself (x = 0), `Hello NAME. Sincerely,
/// JBossWS and BPEL` (x ≥ 1, however many calls), or HelloWorld's `Hello NAME. Sincerely,
/// JBossWS`.
pub fn expected(scenario: Scenario, name: &str) -> Result<(Answer, String), String> {
    match (scenario, scenario.invokes()) {
        (Scenario::HelloWorldDirect, _) => Ok((
            Answer::HelloWorld,
            format!("Hello {name}. Sincerely, JBossWS"),
        )),
        (_, Some(0)) => Ok((Answer::Process, name.to_string())),
        (_, Some(_)) => Ok((
            Answer::Process,
            format!("Hello {name}. Sincerely, JBossWS and BPEL"),
        )),
        (other, None) => Err(format!("{other} is not a scenario of the bpel suite")),
    }
}

/// One request of `scenario` to `url` carrying `name`, and the check of its answer.
pub fn request(scenario: Scenario, url: &Url, name: &str) -> Result<(RequestSpec, Check), String> {
    let body = request_body(scenario, name)?;
    let (answer, text) = expected(scenario, name)?;
    let spec = RequestSpec {
        method: Method::Post,
        url: url.clone(),
        headers: vec![
            ("Content-Type".into(), "text/xml; charset=UTF-8".into()),
            // Both WSDLs bind their operation with soapAction="".
            ("SOAPAction".into(), "\"\"".into()),
        ],
        body,
        version: Version::Http11,
        keep_alive: true,
    };
    Ok((spec, Check::SoapAnswer { answer, text }))
}

/// `count` requests of `scenario` to `url` (the process's or HelloWorld's own URL), names 0 to
/// `count - 1`, in the order a run takes them.
pub fn requests(
    scenario: Scenario,
    url: &Url,
    count: usize,
) -> Result<Vec<(RequestSpec, Check)>, String> {
    (0..count.max(1))
        .map(|n| request(scenario, url, &name(n)))
        .collect()
}

/// The text of the answer element of a SOAP 1.1 answer: the whole body must be one complete
/// envelope (an optional Header, then a Body holding only the answer element), and the element
/// must hold text only (HelloWorld's: one `return` element of text). A fault, a truncated or
/// malformed envelope and any other element fail, saying which.
pub fn answer_text(body: &[u8], answer: Answer) -> Result<String, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the answer is not UTF-8".to_string())?;
    if let Some((at, c)) = crate::check::forbidden_char(text) {
        return Err(format!(
            "character U+{:04X} at byte {at} is not allowed in XML",
            u32::from(c)
        ));
    }
    let mut reader = NsReader::from_str(text);
    read_answer(&mut reader, body, answer).map_err(|why| {
        // An error at the very end is an answer cut short, not a malformed one.
        if why.starts_with("malformed XML") && reader.buffer_position() >= text.len() as u64 {
            format!("the envelope ends before it is closed (truncated): {why}")
        } else {
            why
        }
    })
}

fn read_answer(
    reader: &mut NsReader<&[u8]>,
    body: &[u8],
    answer: Answer,
) -> Result<String, String> {
    let (answer_ns, answer_local) = answer.element();
    // Depth of the open elements: 1 inside Envelope, 2 inside Body, 3 inside the answer
    // element, 4 inside HelloWorld's `return`.
    let mut depth = 0usize;
    let mut done = false;
    let mut found = false;
    let mut out = String::new();
    // Where the text is: the answer element, or its `return` child.
    let text_depth = match answer {
        Answer::Process => 3,
        Answer::HelloWorld => 4,
    };
    let mut returns = 0;
    loop {
        let (ns, ev) = match reader.read_resolved_event() {
            Ok(event) => event,
            Err(e) => return Err(format!("malformed XML: {e}")),
        };
        let in_ns = |want: &str| matches!(ns, ResolveResult::Bound(n) if n.0 == want);
        let unbound = matches!(ns, ResolveResult::Unbound);
        match &ev {
            Event::Start(e) | Event::Empty(e) => {
                let local = e.local_name();
                let local: String = local.as_ref().into();
                if done {
                    return Err(format!("an element after the envelope: {local}"));
                }
                match depth {
                    0 if in_ns(SOAP11_NS) && local == "Envelope" => {}
                    0 => return Err(format!("not a SOAP 1.1 envelope: the root is {local}")),
                    1 if in_ns(SOAP11_NS) && local == "Header" && !found => {
                        if matches!(ev, Event::Start(_)) {
                            let end = e.to_end().into_owned();
                            reader
                                .read_to_end(end.name())
                                .map_err(|e| format!("malformed XML in the Header: {e}"))?;
                        }
                        continue;
                    }
                    1 if in_ns(SOAP11_NS) && local == "Body" => {}
                    1 => return Err(format!("{local} in the envelope, expected the Body")),
                    2 if in_ns(SOAP11_NS) && local == "Fault" => {
                        return Err(match crate::check::fault_string(body) {
                            Some(s) => format!("a SOAP fault instead of the answer: {s}"),
                            None => "a SOAP fault instead of the answer".into(),
                        })
                    }
                    2 if in_ns(answer_ns) && local == answer_local && !found => found = true,
                    2 => return Err(format!("{local} in the Body, expected only {answer_local}")),
                    3 if answer == Answer::HelloWorld && unbound && local == "return" => {
                        returns += 1;
                        if returns > 1 {
                            return Err("more than one return element".into());
                        }
                    }
                    _ => return Err(format!("unexpected element {local} in {answer_local}")),
                }
                if matches!(ev, Event::Start(_)) {
                    depth += 1;
                } else if depth == 0 {
                    return Err("an empty envelope".into());
                }
            }
            Event::End(_) => {
                depth = depth
                    .checked_sub(1)
                    .ok_or("malformed XML: an end tag without its start")?;
                if depth == 0 {
                    done = true;
                }
            }
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) => {
                if depth == text_depth {
                    crate::check::push_text(&mut out, &ev)?;
                } else if !is_blank(&ev) {
                    return Err(format!(
                        "text outside the answer's {}",
                        if text_depth == 3 {
                            answer_local
                        } else {
                            "return"
                        }
                    ));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !done {
        return Err(if depth == 0 {
            "no SOAP envelope in the answer".into()
        } else {
            "the envelope ends before it is closed (truncated)".into()
        });
    }
    if !found {
        return Err(format!("no {answer_local} element in the Body"));
    }
    if answer == Answer::HelloWorld && returns == 0 {
        return Err("no return element in sayHelloResponse".into());
    }
    Ok(out)
}

/// Whether a text event is only XML white space.
fn is_blank(ev: &Event<'_>) -> bool {
    match ev {
        Event::Text(t) => {
            let text: &str = t.as_ref();
            text.bytes()
                .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        }
        _ => false,
    }
}

/// Parses `--x`: numbers from 0 to 3, comma-separated, and inclusive ranges such as `0..3`
/// (all four); returns them sorted, each once.
pub fn parse_x(s: &str) -> Result<Vec<u8>, String> {
    let one = |t: &str| -> Result<u8, String> {
        match t.trim().parse::<u8>() {
            Ok(x) if x <= MAX_X => Ok(x),
            _ => Err(format!(
                "--x '{t}': each x is a number from 0 to {MAX_X} (the HelloWorld calls)"
            )),
        }
    };
    let mut xs = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.split_once("..") {
            Some((a, b)) => {
                let (a, b) = (one(a)?, one(b.trim_start_matches('='))?);
                if a > b {
                    return Err(format!("--x '{item}': the range is empty"));
                }
                xs.extend(a..=b);
            }
            None => xs.push(one(item)?),
        }
    }
    if xs.is_empty() {
        return Err("--x needs at least one value".into());
    }
    xs.sort_unstable();
    xs.dedup();
    Ok(xs)
}

/// Keeps, of the SimpleInvoke processes in `scenarios`, those whose x is in `xs` (other
/// scenarios stay); an error when nothing is left.
pub fn keep_x(scenarios: &mut Vec<Scenario>, xs: &[u8]) -> Result<(), String> {
    scenarios.retain(|s| s.invokes().is_none_or(|x| xs.contains(&x)));
    if scenarios.is_empty() {
        return Err(format!("no scenario left with --x {xs:?}"));
    }
    Ok(())
}

/// The process `--verify bpel` means in `bench load`: the one of the single `--x` value.
pub fn process_for(xs: Option<&[u8]>) -> Result<Scenario, String> {
    match xs {
        Some([x]) => Ok(Scenario::PROCESSES[usize::from(*x)]),
        _ => Err(
            "--verify bpel needs one --x value: how many times the process the URL \
                  names (SimpleInvoke0 to SimpleInvoke3) calls HelloWorld"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Failure;
    use crate::client::Headers;

    fn url(path: &str) -> Url {
        Url::parse(&format!("http://127.0.0.1:8283/service/{path}"))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn process_answer(text: &str) -> Vec<u8> {
        format!(
            "<soapenv:Envelope xmlns:soapenv=\"{SOAP11_NS}\"><soapenv:Body>\
             <tns:sayHelloToResponse xmlns:tns=\"{PROCESS_NS}\">{text}</tns:sayHelloToResponse>\
             </soapenv:Body></soapenv:Envelope>"
        )
        .into_bytes()
    }

    fn hello_answer(text: &str) -> Vec<u8> {
        format!(
            "<S:Envelope xmlns:S=\"{SOAP11_NS}\"><S:Header/><S:Body>\
             <ns2:sayHelloResponse xmlns:ns2=\"{HELLO_NS}\"><return>{text}</return>\
             </ns2:sayHelloResponse></S:Body></S:Envelope>"
        )
        .into_bytes()
    }

    #[test]
    fn a_process_request_is_a_soap_sayhelloto_with_the_name_escaped() {
        let (spec, check) = request(Scenario::SimpleInvoke2, &url("SimpleInvoke2"), &name(19))
            .unwrap_or_else(|e| panic!("{e}"));
        let wire = String::from_utf8(spec.to_bytes()).unwrap_or_default();
        let want = format!(
            "POST /service/SimpleInvoke2 HTTP/1.1\r\nHost: 127.0.0.1:8283\r\n\
             Content-Type: text/xml; charset=UTF-8\r\nSOAPAction: \"\"\r\nContent-Length: 236\r\n\r\n\
             <soapenv:Envelope xmlns:soapenv=\"{SOAP11_NS}\" xmlns:tns=\"{PROCESS_NS}\">\
             <soapenv:Body><tns:sayHelloTo>user-19 &lt;Zoë &amp; Ørsted&gt;</tns:sayHelloTo>\
             </soapenv:Body></soapenv:Envelope>"
        );
        assert_eq!(wire, want);
        let ok = process_answer("Hello user-19 &lt;Zoë &amp; Ørsted>. Sincerely, JBossWS and BPEL");
        assert_eq!(check.check(200, Headers::empty(), &ok), Ok(()));
    }

    #[test]
    fn a_helloworld_request_carries_the_name_in_an_unqualified_towhom() {
        let body = request_body(Scenario::HelloWorldDirect, "user-3").unwrap_or_default();
        assert_eq!(
            String::from_utf8(body).unwrap_or_default(),
            format!(
                "<soapenv:Envelope xmlns:soapenv=\"{SOAP11_NS}\" xmlns:hw=\"{HELLO_NS}\">\
                 <soapenv:Body><hw:sayHello><toWhom>user-3</toWhom></hw:sayHello></soapenv:Body>\
                 </soapenv:Envelope>"
            )
        );
        assert!(request_body(Scenario::Direct, "x").is_err());
    }

    #[test]
    fn x0_answers_the_name_and_every_other_x_the_greeting_with_bpel() {
        let text = |s| expected(s, "Ann").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            text(Scenario::SimpleInvoke0),
            (Answer::Process, "Ann".into())
        );
        for s in [
            Scenario::SimpleInvoke1,
            Scenario::SimpleInvoke2,
            Scenario::SimpleInvoke3,
        ] {
            assert_eq!(
                text(s),
                (
                    Answer::Process,
                    "Hello Ann. Sincerely, JBossWS and BPEL".into()
                )
            );
        }
        assert_eq!(
            text(Scenario::HelloWorldDirect),
            (Answer::HelloWorld, "Hello Ann. Sincerely, JBossWS".into())
        );
    }

    #[test]
    fn a_run_rotates_through_distinct_names() {
        let reqs = requests(Scenario::SimpleInvoke0, &url("SimpleInvoke0"), 20)
            .unwrap_or_else(|e| panic!("{e}"));
        let bodies: std::collections::BTreeSet<&[u8]> =
            reqs.iter().map(|(s, _)| s.body.as_slice()).collect();
        assert_eq!(bodies.len(), 20);
        let (_, check) = &reqs[7];
        let h = Headers::empty();
        assert_eq!(check.check(200, h, &process_answer("user-7")), Ok(()));
        assert!(check.check(200, h, &process_answer("user-8")).is_err());
    }

    #[test]
    fn the_checker_refuses_wrong_text_a_fault_and_a_truncated_answer() {
        let check = Check::SoapAnswer {
            answer: Answer::Process,
            text: "Hello Bo. Sincerely, JBossWS and BPEL".into(),
        };
        let h = Headers::empty();
        let good = process_answer("Hello Bo. Sincerely, JBossWS and BPEL");
        assert_eq!(check.check(200, h, &good), Ok(()));
        let content = |body: &[u8]| match check.check(200, h, body) {
            Err(Failure::Content(why)) => why,
            other => panic!("{other:?}"),
        };
        // Wrong text: the greeting without the process's part, or with spaces around it.
        assert!(content(&process_answer("Hello Bo. Sincerely, JBossWS"))
            .starts_with("the answer is 'Hello Bo. Sincerely, JBossWS', expected"));
        assert!(
            content(&process_answer(" Hello Bo. Sincerely, JBossWS and BPEL")).contains("expected")
        );
        // A fault, with the status an engine usually gives it and with 200.
        let fault = format!(
            "<soapenv:Envelope xmlns:soapenv=\"{SOAP11_NS}\"><soapenv:Body><soapenv:Fault>\
             <faultcode>soapenv:Server</faultcode><faultstring>selectionFailure</faultstring>\
             </soapenv:Fault></soapenv:Body></soapenv:Envelope>"
        );
        assert_eq!(
            check.check(500, h, fault.as_bytes()),
            Err(Failure::Status(500))
        );
        assert_eq!(
            content(fault.as_bytes()),
            "a SOAP fault instead of the answer: selectionFailure"
        );
        // Truncated anywhere: inside the text, before the Body closes, before the envelope does.
        for cut in [120, good.len() - 30, good.len() - 1] {
            let why = content(&good[..cut]);
            assert!(why.contains("(truncated)"), "{cut}: {why}");
        }
        assert!(content(b"").contains("no SOAP envelope"));
    }

    #[test]
    fn the_checker_wants_the_one_answer_element_of_the_right_namespace() {
        let h = Headers::empty();
        let check = Check::SoapAnswer {
            answer: Answer::HelloWorld,
            text: "Hello Bo. Sincerely, JBossWS".into(),
        };
        assert_eq!(
            check.check(200, h, &hello_answer("Hello Bo. Sincerely, JBossWS")),
            Ok(())
        );
        let other_ns = String::from_utf8(hello_answer("Hello Bo. Sincerely, JBossWS"))
            .unwrap_or_default()
            .replace(HELLO_NS, "urn:other");
        for (body, why) in [
            (
                other_ns.into_bytes(),
                "sayHelloResponse in the Body, expected only sayHelloResponse",
            ),
            (
                hello_answer("<b>Hello</b> Bo"),
                "unexpected element b in sayHelloResponse",
            ),
            (
                b"<Envelope><Body/></Envelope>".to_vec(),
                "not a SOAP 1.1 envelope: the root is Envelope",
            ),
            (
                [hello_answer("x"), b"<more/>".to_vec()].concat(),
                "an element after the envelope: more",
            ),
        ] {
            assert_eq!(
                check.check(200, h, &body),
                Err(Failure::Content(why.into())),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        // The text must sit in `return`, not beside it.
        let beside = String::from_utf8(hello_answer("Hello Bo. Sincerely, JBossWS"))
            .unwrap_or_default()
            .replace("<return>", "Hello<return>");
        assert!(check.check(200, h, beside.as_bytes()).is_err());
    }

    #[test]
    fn x_takes_numbers_lists_and_inclusive_ranges() {
        assert_eq!(parse_x("0..3"), Ok(vec![0, 1, 2, 3]));
        assert_eq!(parse_x("2"), Ok(vec![2]));
        assert_eq!(parse_x("3,1,1"), Ok(vec![1, 3]));
        assert_eq!(parse_x("0,2..3"), Ok(vec![0, 2, 3]));
        for bad in ["4", "-1", "3..1", "", "a", "0..9"] {
            assert!(parse_x(bad).is_err(), "{bad}");
        }
        let mut list = Scenario::BPEL.to_vec();
        assert_eq!(keep_x(&mut list, &[1, 3]), Ok(()));
        assert_eq!(
            list,
            [
                Scenario::SimpleInvoke1,
                Scenario::SimpleInvoke3,
                Scenario::HelloWorldDirect
            ]
        );
        let mut only = vec![Scenario::SimpleInvoke0];
        assert!(keep_x(&mut only, &[2]).is_err());
        assert_eq!(process_for(Some(&[2])), Ok(Scenario::SimpleInvoke2));
        assert!(process_for(Some(&[1, 2])).is_err());
        assert!(process_for(None).is_err());
    }

    #[test]
    fn bpel_in_a_scenario_list_means_the_four_processes() {
        assert_eq!(
            Scenario::parse_list("bpel,bpel-direct"),
            Ok(Scenario::BPEL.to_vec())
        );
        assert_eq!(
            Scenario::parse_list("SimpleInvoke2,bpel-x2"),
            Ok(vec![Scenario::SimpleInvoke2])
        );
        assert!(Scenario::parse_list("bpel-x4")
            .err()
            .unwrap_or_default()
            .contains("or bpel"));
    }
}
