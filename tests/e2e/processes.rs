//! WS-BPEL processes served as SOAP endpoints: a folder written here (two processes, one of
//! them calling the echo back end as its partner), real sockets, the admin API, config errors.

use std::path::{Path, PathBuf};

use busbar_engine::echo::EchoOptions;

use crate::support::*;

const WSDL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions name="e2e" targetNamespace="urn:e2e"
    xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:tns="urn:e2e"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema"
    xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:plnk="http://docs.oasis-open.org/wsbpel/2.0/plnktype">
  <types>
    <xsd:schema targetNamespace="urn:e2e">
      <xsd:element name="text" type="xsd:string"/>
      <xsd:element name="note" type="xsd:string"/>
    </xsd:schema>
  </types>
  <message name="NameMsg"><part name="name" type="xsd:string"/></message>
  <message name="GreetMsg">
    <part name="greeting" type="xsd:string"/>
    <part name="name" type="xsd:string"/>
  </message>
  <message name="TextMsg"><part name="payload" element="tns:text"/></message>
  <message name="RelayOut">
    <part name="payload" element="tns:text"/>
    <part name="note" element="tns:note"/>
  </message>
  <portType name="Greeter">
    <operation name="greet"><input message="tns:NameMsg"/><output message="tns:GreetMsg"/></operation>
    <operation name="notify"><input message="tns:NameMsg"/></operation>
  </portType>
  <portType name="Relay">
    <operation name="relay"><input message="tns:TextMsg"/><output message="tns:RelayOut"/></operation>
  </portType>
  <portType name="Echo">
    <operation name="echo"><input message="tns:TextMsg"/><output message="tns:TextMsg"/></operation>
  </portType>
  <binding name="GreeterBinding" type="tns:Greeter">
    <soap:binding style="rpc" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="greet">
      <soap:operation soapAction="urn:e2e:greet"/>
      <input><soap:body use="literal" namespace="urn:e2e"/></input>
      <output><soap:body use="literal" namespace="urn:e2e"/></output>
    </operation>
    <operation name="notify">
      <soap:operation soapAction="urn:e2e:notify"/>
      <input><soap:body use="literal" namespace="urn:e2e"/></input>
    </operation>
  </binding>
  <binding name="RelayBinding" type="tns:Relay">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="relay">
      <soap:operation soapAction="urn:e2e:relay"/>
      <input><soap:body use="literal"/></input>
      <output><soap:body use="literal"/></output>
    </operation>
  </binding>
  <binding name="EchoBinding" type="tns:Echo">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="echo">
      <soap:operation soapAction="urn:e2e:echo"/>
      <input><soap:body use="literal"/></input>
      <output><soap:body use="literal"/></output>
    </operation>
  </binding>
  <service name="GreeterService">
    <port name="GreeterPort" binding="tns:GreeterBinding">
      <soap:address location="http://localhost:8080/processes/Greeter"/>
    </port>
  </service>
  <service name="RelayService">
    <port name="RelayPort" binding="tns:RelayBinding">
      <soap:address location="http://localhost:8080/processes/Relay"/>
    </port>
  </service>
  <service name="EchoService">
    <port name="EchoPort" binding="tns:EchoBinding">
      <soap:address location="http://127.0.0.1:9/unused"/>
    </port>
  </service>
  <plnk:partnerLinkType name="GreeterLT"><plnk:role name="greeter" portType="tns:Greeter"/></plnk:partnerLinkType>
  <plnk:partnerLinkType name="RelayLT"><plnk:role name="relay" portType="tns:Relay"/></plnk:partnerLinkType>
  <plnk:partnerLinkType name="EchoLT"><plnk:role name="echoer" portType="tns:Echo"/></plnk:partnerLinkType>
</definitions>
"#;

/// greet: literal and variable copies, then reply. notify (one-way): then waits for a greet
/// that never comes, so an instance stays alive for the admin API.
const GREETER: &str = r#"<process name="Greeter" targetNamespace="urn:e2e:proc"
    xmlns="http://docs.oasis-open.org/wsbpel/2.0/process/executable" xmlns:t="urn:e2e">
  <import location="e2e.wsdl" namespace="urn:e2e" importType="http://schemas.xmlsoap.org/wsdl/"/>
  <partnerLinks>
    <partnerLink name="client" partnerLinkType="t:GreeterLT" myRole="greeter"/>
  </partnerLinks>
  <variables>
    <variable name="in" messageType="t:NameMsg"/>
    <variable name="out" messageType="t:GreetMsg"/>
  </variables>
  <pick createInstance="yes">
    <onMessage partnerLink="client" operation="greet" variable="in">
      <sequence>
        <assign>
          <copy><from><literal>Hello</literal></from><to variable="out" part="greeting"/></copy>
          <copy><from variable="in" part="name"/><to variable="out" part="name"/></copy>
        </assign>
        <reply partnerLink="client" operation="greet" variable="out"/>
      </sequence>
    </onMessage>
    <onMessage partnerLink="client" operation="notify" variable="in">
      <receive partnerLink="client" operation="greet" variable="in"/>
    </onMessage>
  </pick>
</process>
"#;

/// relay: copies its input into the partner request, invokes the echo partner, replies with
/// the partner's answer and a literal note.
const RELAY: &str = r#"<process name="Relay" targetNamespace="urn:e2e:proc"
    xmlns="http://docs.oasis-open.org/wsbpel/2.0/process/executable" xmlns:t="urn:e2e">
  <import location="e2e.wsdl" namespace="urn:e2e" importType="http://schemas.xmlsoap.org/wsdl/"/>
  <partnerLinks>
    <partnerLink name="client" partnerLinkType="t:RelayLT" myRole="relay"/>
    <partnerLink name="echo" partnerLinkType="t:EchoLT" partnerRole="echoer"/>
  </partnerLinks>
  <variables>
    <variable name="in" messageType="t:TextMsg"/>
    <variable name="req" messageType="t:TextMsg"/>
    <variable name="resp" messageType="t:TextMsg"/>
    <variable name="out" messageType="t:RelayOut"/>
  </variables>
  <sequence>
    <receive partnerLink="client" operation="relay" variable="in" createInstance="yes"/>
    <assign>
      <copy><from variable="in" part="payload"/><to variable="req" part="payload"/></copy>
    </assign>
    <invoke partnerLink="echo" operation="echo" inputVariable="req" outputVariable="resp"/>
    <assign>
      <copy><from variable="resp" part="payload"/><to variable="out" part="payload"/></copy>
      <copy>
        <from><literal><t:note>relayed</t:note></literal></from>
        <to variable="out" part="note"/>
      </copy>
    </assign>
    <reply partnerLink="client" operation="relay" variable="out"/>
  </sequence>
</process>
"#;

const DEPLOY: &str = r#"<deploy xmlns="http://www.apache.org/ode/schemas/dd/2007/03"
    xmlns:p="urn:e2e:proc" xmlns:t="urn:e2e">
  <process name="p:Greeter">
    <provide partnerLink="client"><service name="t:GreeterService" port="GreeterPort"/></provide>
  </process>
  <process name="p:Relay">
    <provide partnerLink="client"><service name="t:RelayService" port="RelayPort"/></provide>
    <invoke partnerLink="echo"><service name="t:EchoService" port="EchoPort"/></invoke>
  </process>
</deploy>
"#;

/// Writes the process folder into a new temporary folder.
fn folder(greeter: &str) -> PathBuf {
    let dir = temp_dir("processes");
    for (name, text) in [
        ("e2e.wsdl", WSDL),
        ("Greeter.bpel", greeter),
        ("Relay.bpel", RELAY),
        ("deploy.xml", DEPLOY),
    ] {
        std::fs::write(dir.join(name), text).expect("write process file");
    }
    dir
}

fn soap11(body: &str) -> Vec<u8> {
    format!(r#"<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>{body}</s:Body></s:Envelope>"#).into_bytes()
}

fn yaml(dir: &Path, echo: std::net::SocketAddr) -> String {
    format!(
        "endpoints:\n  echo: {{ url: \"http://{echo}/service/EchoService\", timeout: 5s }}\nprocesses:\n  Demo:\n    dir: {}\n    partners: {{ echo: echo }}\n",
        dir.display()
    )
}

#[test]
fn a_deployed_process_answers_soap_calls_faults_and_shows_in_the_admin_api() {
    let echo = echo(EchoOptions::default());
    let dir = folder(GREETER);
    let h = engine(&yaml(&dir, echo.addr));
    let mut c = Client::connect(h.http());
    let xml = [("Content-Type", "text/xml; charset=utf-8")];

    // RPC/literal: the literal and the copied part come back in greetResponse.
    let r = c
        .post(
            "/processes/Greeter",
            &[
                ("Content-Type", "text/xml"),
                ("SOAPAction", "\"urn:e2e:greet\""),
            ],
            &soap11(r#"<m:greet xmlns:m="urn:e2e"><name>Zoë &amp; Bob</name></m:greet>"#),
        )
        .expect("greet");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/xml; charset=utf-8"));
    assert!(
        r.text().contains(r#"<m:greetResponse xmlns:m="urn:e2e"><greeting>Hello</greeting><name>Zoë &amp; Bob</name></m:greetResponse>"#),
        "{}",
        r.text()
    );

    // SOAP 1.2 in, SOAP 1.2 out.
    let r = c
        .post(
            "/processes/Greeter",
            &[("Content-Type", "application/soap+xml; charset=utf-8")],
            br#"<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"><e:Body><m:greet xmlns:m="urn:e2e"><name>Ann</name></m:greet></e:Body></e:Envelope>"#,
        )
        .expect("greet 1.2");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/soap+xml; charset=utf-8")
    );
    assert!(r.text().contains("<name>Ann</name>"), "{}", r.text());

    // Unknown operation, missing part, not XML: Client faults with 500, and the connection
    // goes on serving.
    // busbar's own faults are told apart by their name in the detail (SOAP 1.1 has no
    // subcode).
    for (body, want, name) in [
        (
            soap11(r#"<m:shout xmlns:m="urn:e2e"><name>x</name></m:shout>"#),
            "no operation of port type {urn:e2e}Greeter takes element {urn:e2e}shout",
            Some("unknownOperation"),
        ),
        (
            soap11(r#"<m:greet xmlns:m="urn:e2e"/>"#),
            "part 'name' missing",
            Some("invalidMessage"),
        ),
        (b"this is not XML".to_vec(), "not a SOAP envelope", None),
    ] {
        let r = c.post("/processes/Greeter", &xml, &body).expect("fault");
        assert_eq!(r.status, 500, "{}", r.text());
        let t = r.text();
        assert!(t.contains("<faultcode>soapenv:Client</faultcode>"), "{t}");
        assert!(t.contains(want), "{want} in {t}");
        match name {
            Some(n) => assert!(
                t.contains(&format!(
                    "<detail><bb:{n} xmlns:bb=\"urn:busbar:bpel\"/></detail>"
                )),
                "{n} in {t}"
            ),
            None => assert!(!t.contains("<detail>"), "{t}"),
        }
    }

    // Only POST.
    let r = c.get("/processes/Greeter").expect("get");
    assert_eq!(r.status, 405);

    // The relay calls the echo back end through endpoint 'echo', and adds its note.
    let r = c
        .post(
            "/processes/Relay",
            &xml,
            &soap11(r#"<t:text xmlns:t="urn:e2e">ping &lt;1&gt;</t:text>"#),
        )
        .expect("relay");
    assert_eq!(r.status, 200, "{}", r.text());
    let t = r.text();
    assert!(t.contains(">ping &lt;1&gt;</t:text>"), "{t}");
    assert!(t.contains(">relayed</t:note>"), "{t}");

    // One-way: 202, and the instance stays (it waits for a greet of its own).
    let r = c
        .post(
            "/processes/Greeter",
            &[
                ("Content-Type", "text/xml"),
                ("SOAPAction", "urn:e2e:notify"),
            ],
            &soap11(r#"<m:notify xmlns:m="urn:e2e"><name>later</name></m:notify>"#),
        )
        .expect("notify");
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(r.body.is_empty());

    let mut admin = Client::connect(h.admin());
    let list = admin.get("/processes").expect("processes").text();
    let v: serde_json::Value = serde_json::from_str(&list).expect("json");
    let greeter = v
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "{urn:e2e:proc}Greeter"))
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(greeter["folder"], "Demo");
    assert_eq!(greeter["instances"], 1, "{list}");
    assert_eq!(greeter["started"], 3, "{list}");
    assert_eq!(greeter["completed"], 2, "{list}");
    let inst = admin.get("/processes/instances").expect("instances").text();
    let v: serde_json::Value = serde_json::from_str(&inst).expect("json");
    let id = v[0]["id"].as_u64().unwrap_or_else(|| panic!("{inst}"));
    assert_eq!(v[0]["process"], "{urn:e2e:proc}Greeter");
    assert!(v[0]["age_ms"].is_u64(), "{inst}");
    let m = admin.get("/metrics").expect("metrics").text();
    assert!(
        m.contains("busbar_process_instances{process=\"{urn:e2e:proc}Greeter\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("busbar_process_completed_total{process=\"{urn:e2e:proc}Relay\",outcome=\"completed\"} 1"),
        "{m}"
    );

    let path = format!("/processes/instances/{id}");
    assert_eq!(
        admin
            .request("DELETE", &path, &[], b"")
            .expect("delete")
            .status,
        204
    );
    let again = admin
        .request("DELETE", &path, &[], b"")
        .expect("delete again");
    assert_eq!(again.status, 404);
    assert!(again
        .text()
        .contains(&format!("no running or waiting instance {id}")));
    let inst = admin.get("/processes/instances").expect("instances").text();
    assert_eq!(inst.trim(), "[]");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn process_config_errors_name_the_folder_the_file_and_the_line() {
    let dir = temp_dir("process-config");
    let good = folder(GREETER);
    let head = "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nendpoints:\n  echo: { url: \"http://127.0.0.1:9/e\" }\n";

    let (code, err) = validate_in(
        &dir,
        &format!(
            "{head}processes:\n  Gone:\n    dir: nowhere\n  Demo:\n    dir: {}\n    partners: {{ echo: nope }}\n",
            good.display()
        ),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("processes.Gone.dir: no such folder: "),
        "{err}"
    );
    assert!(
        err.contains("processes.Demo.partners.echo: no endpoint 'nope'"),
        "{err}"
    );

    let bad = folder(&GREETER.replace(
        "<reply partnerLink=\"client\" operation=\"greet\" variable=\"out\"/>",
        "<reply partnerLink=\"client\" operation=\"greet\" variable=\"out\"/>\n        <compensate/>",
    ));
    let (code, err) = validate_in(
        &dir,
        &format!("{head}processes:\n  Demo:\n    dir: {}\n", bad.display()),
    );
    assert_eq!(code, Some(1), "{err}");
    let file = std::fs::canonicalize(bad.join("Greeter.bpel")).expect("path");
    assert!(
        err.contains(&format!(
            "processes.Demo: {}:19: <compensate> is not supported",
            file.display()
        )),
        "{err}"
    );

    // The folder valid, its partner link mapped: `busbar validate` passes.
    let (code, err) = validate_in(
        &dir,
        &format!(
            "{head}processes:\n  Demo:\n    dir: {}\n    partners: {{ echo: echo }}\n",
            good.display()
        ),
    );
    assert_eq!(code, Some(0), "{err}");
    for d in [dir, good, bad] {
        let _ = std::fs::remove_dir_all(d);
    }
}
