//! `examples/orchestration/simple-invoke.yaml` run as a user would (`busbar run`): its
//! HelloWorld service over real sockets, and the bench kit's BPEL suite against it.
//!
//! HelloWorld and the kit's baseline are checked on a copy of the file without its
//! `processes:` section; the SimpleInvoke processes on the whole example.

use std::path::{Path, PathBuf};

use crate::support::*;

const SOAP: (&str, &str) = ("Content-Type", "text/xml; charset=UTF-8");
const ENVELOPE_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";
const HELLO_NS: &str = "http://jboss.org/samples/helloworld";

fn orchestration_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/orchestration")
}

/// The example without its `processes:` section (the last of the file), with its stylesheet,
/// in a directory of its own; started like the example.
fn hello_world_example() -> Example {
    let dir = orchestration_dir();
    let text = std::fs::read_to_string(dir.join("simple-invoke.yaml")).expect("example");
    let at = text.find("\nprocesses:\n").expect("a processes: section");
    let copy = temp_dir("orchestration");
    std::fs::write(copy.join("simple-invoke.yaml"), &text[..at + 1]).expect("config");
    std::fs::copy(dir.join("helloworld.xsl"), copy.join("helloworld.xsl")).expect("stylesheet");
    let config = copy.join("simple-invoke.yaml");
    Example::start(config.to_str().expect("UTF-8 path"), &[])
}

fn say_hello(inner: &str) -> Vec<u8> {
    format!(
        "<soapenv:Envelope xmlns:soapenv=\"{ENVELOPE_NS}\" xmlns:hw=\"{HELLO_NS}\"><soapenv:Body>\
         {inner}</soapenv:Body></soapenv:Envelope>"
    )
    .into_bytes()
}

fn greeting(escaped: &str) -> String {
    format!(
        "<soapenv:Envelope xmlns:soapenv=\"{ENVELOPE_NS}\"><soapenv:Body>\
         <hw:sayHelloResponse xmlns:hw=\"{HELLO_NS}\"><return>Hello {escaped}. Sincerely, \
         JBossWS</return></hw:sayHelloResponse></soapenv:Body></soapenv:Envelope>"
    )
}

#[test]
fn helloworld_greets_the_name_escaped_and_beyond_ascii() {
    let ex = hello_world_example();
    let mut c = Client::connect(ex.listen());
    for (to_whom, escaped) in [
        ("<toWhom>JBoss</toWhom>", "JBoss"),
        (
            "<toWhom>Zoë &amp; &lt;Ørsted&gt;</toWhom>",
            "Zoë &amp; &lt;Ørsted&gt;",
        ),
        (
            "<toWhom>&#x5F20;&#228;<![CDATA[ <&> ]]>'\"</toWhom>",
            "张ä &lt;&amp;&gt; '\"",
        ),
        // White space is part of the name; an empty name is a name.
        ("<toWhom>  two  spaces </toWhom>", "  two  spaces "),
        ("<toWhom/>", ""),
    ] {
        let body = say_hello(&format!("<hw:sayHello>{to_whom}</hw:sayHello>"));
        let r = c
            .post(
                "/service/HelloWorld",
                &[SOAP, ("SOAPAction", "\"\"")],
                &body,
            )
            .expect("response");
        assert_eq!(r.status, 200, "{to_whom}: {}", r.text());
        assert_eq!(r.text(), greeting(escaped), "{to_whom}");
        assert_eq!(r.header("content-type"), Some("text/xml; charset=UTF-8"));
    }
    // A Latin-1 request gets a UTF-8 answer labelled as such.
    let utf8 = String::from_utf8(say_hello("<hw:sayHello><toWhom>Zo#</toWhom></hw:sayHello>"))
        .expect("UTF-8");
    let (head, tail) = utf8.split_once('#').expect("marker");
    let decl = b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>";
    let latin1 = [&decl[..], head.as_bytes(), &[0xeb], tail.as_bytes()].concat();
    let r = c
        .post(
            "/service/HelloWorld",
            &[("Content-Type", "text/xml; charset=ISO-8859-1")],
            &latin1,
        )
        .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), greeting("Zoë"));
    assert_eq!(r.header("content-type"), Some("text/xml; charset=UTF-8"));
}

#[test]
fn helloworld_answers_a_malformed_request_with_a_client_fault() {
    let ex = hello_world_example();
    let shape = "sayHello needs one toWhom element holding the name as text";
    for (body, reason) in [
        (
            b"Hello there".to_vec(),
            "Malformed XML: Start tag expected, '<' not found",
        ),
        (
            say_hello("<hw:sayHello><toWhom>cut")[..120].to_vec(),
            "Malformed XML:",
        ),
        (Vec::new(), "Malformed XML: empty document"),
        (say_hello("<hw:sayHello/>"), shape),
        (
            say_hello("<hw:sayHello><toWhom>a</toWhom><toWhom>b</toWhom></hw:sayHello>"),
            shape,
        ),
        (
            say_hello("<hw:sayHello><toWhom>a<b>c</b></toWhom></hw:sayHello>"),
            shape,
        ),
        // toWhom is unqualified, and sayHello is in HelloWorld's namespace.
        (
            say_hello("<hw:sayHello><hw:toWhom>a</hw:toWhom></hw:sayHello>"),
            shape,
        ),
        (say_hello("<sayHello><toWhom>a</toWhom></sayHello>"), shape),
        (b"<a>not SOAP</a>".to_vec(), shape),
    ] {
        let mut c = Client::connect(ex.listen());
        let r = c
            .post("/service/HelloWorld", &[SOAP], &body)
            .expect("response");
        let text = r.text();
        assert_eq!(r.status, 500, "{text}");
        assert!(
            text.contains("<faultcode>soapenv:Client</faultcode>")
                && text.contains(&format!("<faultstring>{}", reason.replace('<', "&lt;"))),
            "{}: {text}",
            String::from_utf8_lossy(&body)
        );
    }
    let r = Client::connect(ex.listen())
        .get("/service/HelloWorld")
        .expect("response");
    assert_eq!((r.status, r.header("allow")), (405, Some("POST")));
}

/// The kit's baseline of the BPEL suite, HelloWorld called directly, verifies every answer:
/// `verify` over its rotation of names, and a bounded `load`.
#[test]
fn bench_bpel_direct_baseline_verifies_against_the_example() {
    let ex = hello_world_example();
    let base = format!("http://{}/service", ex.listen());
    let (status, text) = bench(&[
        "verify",
        &base,
        "--suite",
        "bpel",
        "--scenarios",
        "bpel-direct",
        "--concurrency",
        "1,8",
    ]);
    assert!(status.success(), "{text}");
    assert!(text.contains("2 cases, 2 passed, 0 failed"), "{text}");
    let url = format!("{base}/HelloWorld");
    let (status, text) = bench(&[
        "load",
        &url,
        "--suite",
        "bpel",
        "--verify",
        "bpel-direct",
        "-n",
        "2000",
        "-c",
        "8",
        "--timeout",
        "10s",
    ]);
    assert!(status.success(), "{text}");
    assert!(text.contains("2000 ok"), "{text}");
    assert!(
        text.contains("errors: connect 0, timeout 0, read 0, write 0, status 0, verify 0"),
        "{text}"
    );
}

/// The whole example, processes included: the kit's BPEL suite verifies every x and the
/// baseline, a bounded load on SimpleInvoke1 has no error of any kind, and every instance is
/// gone when it ends.
#[test]
fn simple_invoke_processes_answer_exactly_under_load_and_free_their_instances() {
    let ex = Example::start(
        "orchestration/simple-invoke.yaml",
        &[("BUSBAR_HELLOWORLD", "@BUSBAR_LISTEN")],
    );
    let base = format!("http://{}/service", ex.listen());
    let (status, text) = bench(&["verify", &base, "--suite", "bpel", "--concurrency", "1,8"]);
    assert!(status.success(), "{text}");
    assert!(text.contains("10 cases, 10 passed, 0 failed"), "{text}");
    let url = format!("{base}/SimpleInvoke1");
    let (status, text) = bench(&[
        "load",
        &url,
        "--suite",
        "bpel",
        "--verify",
        "bpel",
        "--x",
        "1",
        "-n",
        "3000",
        "-c",
        "32",
        "--timeout",
        "10s",
    ]);
    assert!(status.success(), "{text}");
    assert!(text.contains("3000 ok"), "{text}");
    assert!(
        text.contains("errors: connect 0, timeout 0, read 0, write 0, status 0, verify 0"),
        "{text}"
    );
    let admin = ex.addrs["BUSBAR_ADMIN"];
    let resp = Client::connect(admin).get("/processes").expect("admin");
    assert_eq!(resp.status, 200);
    let list: serde_json::Value = serde_json::from_slice(&resp.body).expect("JSON");
    let one = list
        .as_array()
        .and_then(|a| a.iter().find(|p| p["folder"] == "SimpleInvoke1"))
        .expect("SimpleInvoke1 listed");
    assert_eq!(one["instances"], 0, "{one}");
    assert_eq!(one["faulted"], 0, "{one}");
    assert!(one["completed"].as_u64().unwrap_or(0) >= 3000, "{one}");
}

/// Each SimpleInvoke folder holds what an ODE deployment holds, named for its x, and the
/// example deploys each one.
#[test]
fn every_simple_invoke_folder_is_a_deployment_of_its_own_x() {
    let dir = orchestration_dir();
    let config = std::fs::read_to_string(dir.join("simple-invoke.yaml")).expect("example");
    for x in 0..=3 {
        let folder = dir.join(format!("SimpleInvoke{x}"));
        let read = |file: &str| {
            std::fs::read_to_string(folder.join(file))
                .unwrap_or_else(|e| panic!("SimpleInvoke{x}/{file}: {e}"))
        };
        let (bpel, wsdl, deploy) = (
            read("SimpleInvoke.bpel"),
            read("SimpleInvoke.wsdl"),
            read("deploy.xml"),
        );
        assert!(read("HelloWorld.wsdl")
            .contains("location=\"http://localhost:8283/service/HelloWorld\""));
        assert!(bpel.contains(&format!("<bpel:process name=\"SimpleInvoke{x}\"")));
        assert!(wsdl.contains(&format!(
            "<wsdl:service name=\"SimpleInvoke{x}Service\">\n    \
             <wsdl:port name=\"SimpleInvoke{x}Port\" binding=\"tns:SimpleInvokeBinding\">\n      \
             <soap:address location=\"http://localhost:8283/service/SimpleInvoke{x}\"/>"
        )));
        assert!(deploy.contains(&format!("<process name=\"pns:SimpleInvoke{x}\">")));
        assert!(deploy.contains(&format!(
            "<service name=\"wns:SimpleInvoke{x}Service\" port=\"SimpleInvoke{x}Port\"/>"
        )));
        let calls = bpel.matches("<bpel:invoke ").count();
        let bound = deploy.contains("<invoke partnerLink=\"helloWorld\">");
        if x == 0 {
            assert_eq!((calls, bound), (0, false));
            assert!(config
                .contains("  SimpleInvoke0:\n    dir: SimpleInvoke0\n    persistence: &durable\n"));
        } else {
            assert_eq!((calls, bound), (1, true));
            assert!(bpel.contains(&format!(
                "<bpel:finalCounterValue>{x}</bpel:finalCounterValue>"
            )));
            assert!(config.contains(&format!(
                "SimpleInvoke{x}: {{ dir: SimpleInvoke{x}, partners: {{ helloWorld: helloworld }}, persistence: *durable }}"
            )));
        }
    }
}

#[test]
fn a_service_provided_by_two_folders_is_one_error_naming_both() {
    let dir = temp_dir("two-providers");
    for folder in ["A", "B"] {
        let to = dir.join(folder);
        std::fs::create_dir_all(&to).expect("folder");
        for f in [
            "HelloWorld.wsdl",
            "SimpleInvoke.bpel",
            "SimpleInvoke.wsdl",
            "deploy.xml",
        ] {
            std::fs::copy(
                orchestration_dir().join("SimpleInvoke1").join(f),
                to.join(f),
            )
            .expect("copy");
        }
    }
    // The copy serves its service at another path: the clash is the service, not a path.
    let wsdl = dir.join("B/SimpleInvoke.wsdl");
    let text = std::fs::read_to_string(&wsdl).expect("wsdl");
    std::fs::write(
        &wsdl,
        text.replace("/service/SimpleInvoke1", "/service/Other"),
    )
    .expect("wsdl");
    let (code, err) = validate_in(
        &dir,
        "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nendpoints:\n  dead: { url: \"http://127.0.0.1:9/nothing\" }\nprocesses:\n  A: { dir: A, partners: { helloWorld: dead } }\n  B: { dir: B, partners: { helloWorld: dead } }\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains(":7: processes.B: service {urn:busbar:example:simple-invoke}SimpleInvoke1Service is already provided by processes.A"),
        "{err}"
    );
    assert!(err.contains("1 problem(s)"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
