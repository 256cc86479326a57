//! The engine on processes written here: what a client sees, faults, limits and deploy-time
//! refusals.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use busbar_flow::xml::{Doc, Name, NodeId};
use busbar_flow::{deploy_dir, Engine, Limits, Outcome, PartnerCall, PartnerReply, Partners};

const NS: &str = "urn:test:flow";

const WSDL: &str = r#"<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:tns="urn:test:flow"
    xmlns:plnk="http://docs.oasis-open.org/wsbpel/2.0/plnktype"
    xmlns:vprop="http://docs.oasis-open.org/wsbpel/2.0/varprop"
    targetNamespace="urn:test:flow">
  <wsdl:message name="msg">
    <wsdl:part name="key" type="xsd:string"/>
    <wsdl:part name="value" type="xsd:string"/>
  </wsdl:message>
  <wsdl:portType name="PT">
    <wsdl:operation name="run"><wsdl:input message="tns:msg"/><wsdl:output message="tns:msg"/></wsdl:operation>
    <wsdl:operation name="next"><wsdl:input message="tns:msg"/><wsdl:output message="tns:msg"/></wsdl:operation>
    <wsdl:operation name="go"><wsdl:input message="tns:msg"/></wsdl:operation>
  </wsdl:portType>
  <wsdl:portType name="PartnerPT">
    <wsdl:operation name="call"><wsdl:input message="tns:msg"/><wsdl:output message="tns:msg"/></wsdl:operation>
  </wsdl:portType>
  <plnk:partnerLinkType name="LT"><plnk:role name="me" portType="tns:PT"/></plnk:partnerLinkType>
  <plnk:partnerLinkType name="PLT"><plnk:role name="it" portType="tns:PartnerPT"/></plnk:partnerLinkType>
  <vprop:property name="key" type="xsd:string"/>
  <vprop:propertyAlias propertyName="tns:key" messageType="tns:msg" part="key"/>
</wsdl:definitions>"#;

/// Writes a process folder whose process body is `body` (after the variables), returns it.
fn folder(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("busbar-flow-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("p.wsdl"), WSDL).unwrap();
    let bpel = format!(
        r#"<process name="P" targetNamespace="urn:test:p"
    xmlns="http://docs.oasis-open.org/wsbpel/2.0/process/executable"
    xmlns:tns="urn:test:flow" xmlns:xsd="http://www.w3.org/2001/XMLSchema">
  <import location="p.wsdl" namespace="urn:test:flow" importType="http://schemas.xmlsoap.org/wsdl/"/>
  <partnerLinks>
    <partnerLink name="client" partnerLinkType="tns:LT" myRole="me"/>
    <partnerLink name="partner" partnerLinkType="tns:PLT" partnerRole="it"/>
  </partnerLinks>
  <variables>
    <variable name="in" messageType="tns:msg"/>
    <variable name="out" messageType="tns:msg"/>
    <variable name="n" type="xsd:int"/>
    <variable name="s" type="xsd:string"/>
  </variables>
  <correlationSets><correlationSet name="cs" properties="tns:key"/></correlationSets>
{body}
</process>"#
    );
    std::fs::write(dir.join("p.bpel"), bpel).unwrap();
    std::fs::write(
        dir.join("deploy.xml"),
        r#"<deploy xmlns="http://www.apache.org/ode/schemas/dd/2007/03" xmlns:p="urn:test:p" xmlns:t="urn:test:flow">
  <process name="p:P"><provide partnerLink="client"><service name="t:S" port="P"/></provide>
  <invoke partnerLink="partner"><service name="t:Partner" port="P"/></invoke></process>
</deploy>"#,
    )
    .unwrap();
    dir
}

/// A partner that upper-cases `value`, or fails when it is `fail`.
struct Upper;

impl Partners for Upper {
    fn invoke<'a>(
        &'a self,
        call: PartnerCall<'a>,
    ) -> busbar_flow::runtime::BoxFuture<'a, Result<PartnerReply, String>> {
        Box::pin(async move {
            let v = part(&call.message, "value");
            if v == "fail" {
                return Err("connection refused".into());
            }
            Ok(PartnerReply::Output(message(
                &part(&call.message, "key"),
                &v.to_uppercase(),
            )))
        })
    }
}

fn engine(dir: &Path, limits: Limits) -> Engine {
    let e = Engine::new(limits, Arc::new(Upper));
    e.add(deploy_dir(dir).unwrap_or_else(|e| panic!("{e:?}")));
    e
}

fn message(key: &str, value: &str) -> Arc<Doc> {
    let (mut d, root) = Doc::with_root(Name::new("", "message"));
    for (n, v) in [("key", key), ("value", value)] {
        let p = d.append_element(root, Name::new("", n));
        d.append_text(p, v);
    }
    Arc::new(d)
}

fn part(d: &Doc, name: &str) -> String {
    d.root_element()
        .and_then(|r| d.child(r, "", name))
        .map(|p| d.string_value(p))
        .unwrap_or_default()
}

async fn call(e: &Engine, op: &str, key: &str, value: &str) -> Outcome {
    tokio::time::timeout(
        Duration::from_secs(10),
        e.deliver(&Name::new(NS, "S"), op, message(key, value)),
    )
    .await
    .expect("an answer within 10 s")
}

fn reply_value(o: &Outcome) -> String {
    match o {
        Outcome::Reply(m) => part(m, "value"),
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn fault_name(o: &Outcome) -> String {
    match o {
        Outcome::Fault(f) => f.name.local.clone(),
        other => panic!("expected a fault, got {other:?}"),
    }
}

const RECEIVE: &str =
    r#"<receive partnerLink="client" operation="run" variable="in" createInstance="yes"/>"#;
const REPLY: &str = r#"<reply partnerLink="client" operation="run" variable="out"/>"#;

#[tokio::test]
async fn assign_loop_invoke_and_reply() {
    let dir = folder(
        "loop",
        &format!(
            r#"<sequence>{RECEIVE}
  <assign><copy><from>0</from><to variable="n"/></copy>
          <copy><from variable="in" part="key"/><to variable="out" part="key"/></copy>
          <copy><from>''</from><to>$out.value</to></copy></assign>
  <while><condition>$n &lt; 3</condition>
    <assign><copy><from>$n + 1</from><to variable="n"/></copy>
            <copy><from>concat($out.value, $in.value, $n)</from><to variable="out" part="value"/></copy></assign>
  </while>
  <forEach counterName="i" parallel="yes"><startCounterValue>1</startCounterValue><finalCounterValue>4</finalCounterValue>
    <scope><variables><variable name="tmp" messageType="tns:msg"/></variables>
      <sequence>
        <assign><copy><from variable="in"/><to variable="tmp"/></copy></assign>
        <invoke partnerLink="partner" operation="call" inputVariable="tmp" outputVariable="tmp"/>
      </sequence></scope></forEach>
  <invoke partnerLink="partner" operation="call" inputVariable="out" outputVariable="out"/>
  {REPLY}</sequence>"#
        ),
    );
    let e = engine(&dir, Limits::default());
    let out = call(&e, "run", "k", "ab&<é").await;
    assert_eq!(reply_value(&out), "AB&<É1AB&<É2AB&<É3");
    // Completed instances are freed at once.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(e.alive(), 0);
    assert_eq!(e.instances().len(), 0);
}

#[tokio::test]
async fn standard_faults_reach_the_client_with_their_names() {
    let dir = folder(
        "faults",
        &format!(
            r#"<sequence>{RECEIVE}
  <if><condition>$in.value = 'uninit'</condition>
      <assign><copy><from variable="s"/><to variable="out" part="value"/></copy></assign>
    <elseif><condition>$in.value = 'select'</condition>
      <assign><copy><from>$in.value/nothing</from><to variable="out" part="value"/></copy></assign></elseif>
    <elseif><condition>$in.value = 'throw'</condition>
      <throw faultName="tns:custom"/></elseif>
    <elseif><condition>$in.value = 'fail'</condition>
      <invoke partnerLink="partner" operation="call" inputVariable="in" outputVariable="out"/></elseif>
    <elseif><condition>$in.value = 'exit'</condition><exit/></elseif>
  </if>
  {REPLY}</sequence>"#
        ),
    );
    let e = engine(&dir, Limits::default());
    assert_eq!(
        fault_name(&call(&e, "run", "k", "uninit").await),
        "uninitializedVariable"
    );
    assert_eq!(
        fault_name(&call(&e, "run", "k", "select").await),
        "selectionFailure"
    );
    let custom = call(&e, "run", "k", "throw").await;
    assert!(matches!(&custom, Outcome::Fault(f) if f.name.ns == NS && f.name.local == "custom"));
    assert_eq!(
        fault_name(&call(&e, "run", "k", "fail").await),
        "invokeFailed"
    );
    // Nothing written to `out`: the reply reads an uninitialised variable.
    assert_eq!(
        fault_name(&call(&e, "run", "k", "other").await),
        "uninitializedVariable"
    );
    // exit before the reply: the open request gets missingReply.
    assert_eq!(
        fault_name(&call(&e, "run", "k", "exit").await),
        "missingReply"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(e.alive(), 0);
}

#[tokio::test]
async fn bad_messages_and_operations_are_refused_with_clear_faults() {
    let dir = folder(
        "bad",
        &format!(
            r#"<sequence>{RECEIVE}<assign><copy><from variable="in"/><to variable="out"/></copy></assign>{REPLY}</sequence>"#
        ),
    );
    let e = engine(&dir, Limits::default());
    let svc = Name::new(NS, "S");
    let (mut d, root) = Doc::with_root(Name::new("", "message"));
    let k = d.append_element(root, Name::new("", "key"));
    d.append_text(k, "x");
    match e.deliver(&svc, "run", Arc::new(d)).await {
        Outcome::Fault(f) => {
            assert_eq!(f.name.local, "invalidMessage");
            assert!(f.text.contains("'value'"), "{}", f.text);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fault_name(&call(&e, "nosuch", "k", "v").await),
        "unknownOperation"
    );
    assert_eq!(
        fault_name(&call(&e, "next", "k", "v").await),
        "noMatchingInstance"
    );
    match e
        .deliver(&Name::new(NS, "Other"), "run", message("k", "v"))
        .await
    {
        Outcome::Fault(f) => assert_eq!(f.name.local, "unknownService"),
        other => panic!("{other:?}"),
    }
    assert_eq!(reply_value(&call(&e, "run", "k", "fine").await), "fine");
}

#[tokio::test]
async fn correlated_conversation_limits_and_terminate() {
    let dir = folder(
        "corr",
        r#"<sequence>
  <receive partnerLink="client" operation="go" variable="in" createInstance="yes">
    <correlations><correlation set="cs" initiate="yes"/></correlations></receive>
  <pick>
    <onMessage partnerLink="client" operation="next" variable="out">
      <correlations><correlation set="cs"/></correlations>
      <reply partnerLink="client" operation="next" variable="in"/></onMessage>
    <onAlarm><for>'PT0.3S'</for><empty/></onAlarm>
  </pick>
</sequence>"#,
    );
    let limits = Limits {
        max_instances: 2,
        ..Limits::default()
    };
    let e = engine(&dir, limits);
    assert!(matches!(
        call(&e, "go", "a", "first-a").await,
        Outcome::Accepted
    ));
    assert!(matches!(
        call(&e, "go", "b", "first-b").await,
        Outcome::Accepted
    ));
    // Two instances wait; a third is refused.
    assert_eq!(
        fault_name(&call(&e, "go", "c", "x").await),
        "tooManyInstances"
    );
    assert_eq!(e.instances().len(), 2);
    // `next` goes to the instance whose key matches and gets its first message back.
    assert_eq!(
        reply_value(&call(&e, "next", "b", "second").await),
        "first-b"
    );
    // Terminate the other; the alarm of a terminated instance never fires.
    let id = e.instances()[0].id;
    assert!(e.terminate(id));
    assert!(!e.terminate(id));
    assert_eq!(e.alive(), 0);
    assert_eq!(
        fault_name(&call(&e, "next", "a", "late").await),
        "noMatchingInstance"
    );
    // An instance nobody answers ends by its alarm.
    assert!(matches!(call(&e, "go", "d", "x").await, Outcome::Accepted));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(e.alive(), 0);
}

#[tokio::test]
async fn instances_past_their_ttl_end_with_a_fault() {
    let dir = folder(
        "ttl",
        &format!(r#"<sequence>{RECEIVE}<wait><for>'PT5S'</for></wait>{REPLY}</sequence>"#),
    );
    let limits = Limits {
        instance_ttl: Duration::from_millis(200),
        ..Limits::default()
    };
    let e = engine(&dir, limits);
    assert_eq!(
        fault_name(&call(&e, "run", "k", "v").await),
        "instanceExpired"
    );
    assert_eq!(e.alive(), 0);
}

fn deploy_errors(name: &str, body: &str) -> String {
    errors_of(&folder(name, body))
}

/// The deployment errors of `dir`, one per line; it must not deploy.
fn errors_of(dir: &Path) -> String {
    match deploy_dir(dir) {
        Ok(_) => panic!("{} deployed", dir.display()),
        Err(e) => e
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[test]
fn unsupported_constructs_are_refused_with_file_and_line() {
    let e = deploy_errors(
        "comp",
        &format!("<sequence>{RECEIVE}\n<compensate/>\n{REPLY}</sequence>"),
    );
    assert!(
        e.contains("p.bpel:") && e.contains("<compensate> is not supported"),
        "{e}"
    );
    let line: u32 = e
        .split("p.bpel:")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert_eq!(line, 17, "{e}");
    let e = deploy_errors(
        "func",
        &format!("<sequence>{RECEIVE}<assign><copy><from>bpel:doXslTransform('a.xsl', $in.value)</from><to variable=\"s\"/></copy></assign>{REPLY}</sequence>"),
    );
    assert!(
        e.contains("unknown function") || e.contains("not bound"),
        "{e}"
    );
    let e = deploy_errors(
        "links",
        &format!("<flow><links><link name=\"l\"/></links>{RECEIVE}</flow>"),
    );
    assert!(e.contains("<links> in a flow is not supported"), "{e}");
    let e = deploy_errors(
        "names",
        &format!("<sequence>{RECEIVE}<assign><copy><from>$nope</from><to variable=\"s\"/></copy></assign>{REPLY}</sequence>"),
    );
    assert!(e.contains("variable 'nope' is not declared"), "{e}");
    let e = deploy_errors(
        "part",
        &format!("<sequence>{RECEIVE}<assign><copy><from>$in.nopart</from><to variable=\"s\"/></copy></assign>{REPLY}</sequence>"),
    );
    assert!(e.contains("has no part 'nopart'"), "{e}");
    let e = deploy_errors("nostart", r#"<empty/>"#);
    assert!(e.contains("can never start"), "{e}");
}

/// The deployment error of a folder whose `.bpel` imports its WSDL from `location`.
fn import_error(name: &str, location: &str) -> String {
    let dir = folder(name, &format!("<sequence>{RECEIVE}{REPLY}</sequence>"));
    let bpel = std::fs::read_to_string(dir.join("p.bpel")).unwrap();
    let bpel = bpel.replace(r#"location="p.wsdl""#, &format!(r#"location="{location}""#));
    std::fs::write(dir.join("p.bpel"), bpel).unwrap();
    errors_of(&dir)
}

#[test]
fn an_import_that_cannot_be_read_is_refused_at_its_line_without_reading_a_device() {
    // A device that never ends: refused before a byte is read (it was read into memory until
    // the process ran out of it).
    let e = import_error("zero", "/dev/zero");
    assert!(
        e.contains("p.bpel:4: the imported WSDL /dev/zero: cannot read: not a regular file"),
        "{e}"
    );
    let e = import_error("missing", "nowhere.wsdl");
    assert!(
        e.contains("p.bpel:4: the imported WSDL ") && e.contains("nowhere.wsdl: cannot read: "),
        "{e}"
    );
    // One byte past the limit of a deployment file.
    let dir = std::env::temp_dir().join(format!("busbar-flow-{}-big", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.wsdl");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(busbar_flow::MAX_SOURCE_BYTES + 1).unwrap();
    let e = import_error("huge", big.to_str().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        e.contains("big.wsdl: cannot read: larger than 16 MiB"),
        "{e}"
    );
}

#[test]
fn the_xml_tree_round_trips_what_processes_copy() {
    let d = Doc::parse(r#"<a xmlns:p="urn:p"><p:b c="1">x &amp; y</p:b></a>"#).unwrap();
    assert_eq!(
        d.to_xml(NodeId::ROOT),
        r#"<a xmlns:p="urn:p"><p:b c="1">x &amp; y</p:b></a>"#
    );
}

#[tokio::test]
async fn a_failing_copy_undoes_the_whole_assign() {
    let dir = folder(
        "atomic",
        &format!(
            r#"<sequence>{RECEIVE}
  <assign><copy><from variable="in"/><to variable="out"/></copy>
          <copy><from>'orig'</from><to variable="s"/></copy></assign>
  <scope>
    <faultHandlers><catchAll><empty/></catchAll></faultHandlers>
    <assign>
      <copy><from>'changed'</from><to variable="out" part="value"/></copy>
      <copy><from>'set'</from><to variable="s"/></copy>
      <copy><from>$in.value/nothing</from><to variable="s"/></copy>
    </assign>
  </scope>
  <if><condition>$s = 'set'</condition><assign><copy><from>'leaked'</from><to variable="out" part="key"/></copy></assign></if>
  {REPLY}</sequence>"#
        ),
    );
    let e = engine(&dir, Limits::default());
    match call(&e, "run", "k", "original").await {
        Outcome::Reply(m) => {
            assert_eq!(part(&m, "value"), "original");
            assert_eq!(part(&m, "key"), "k");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_parallel_for_each_sized_by_the_message_is_bounded() {
    let dir = folder(
        "branches",
        &format!(
            r#"<sequence>{RECEIVE}
  <assign><copy><from variable="in"/><to variable="out"/></copy></assign>
  <forEach counterName="i" parallel="yes"><startCounterValue>1</startCounterValue>
    <finalCounterValue>number($in.value)</finalCounterValue>
    <scope><empty/></scope></forEach>
  {REPLY}</sequence>"#
        ),
    );
    let e = engine(&dir, Limits::default());
    assert_eq!(reply_value(&call(&e, "run", "k", "10000").await), "10000");
    assert_eq!(
        fault_name(&call(&e, "run", "k", "10001").await),
        "tooManyBranches"
    );
    assert_eq!(
        fault_name(&call(&e, "run", "k", "-1").await),
        "invalidExpressionValue"
    );
    assert_eq!(
        fault_name(&call(&e, "run", "k", "1e9").await),
        "invalidExpressionValue"
    );
}

#[tokio::test]
async fn after_a_reload_waiting_instances_still_get_their_messages() {
    let dir = folder(
        "succeed",
        r#"<sequence>
  <receive partnerLink="client" operation="go" variable="in" createInstance="yes">
    <correlations><correlation set="cs" initiate="yes"/></correlations></receive>
  <receive partnerLink="client" operation="next" variable="out">
    <correlations><correlation set="cs"/></correlations></receive>
  <reply partnerLink="client" operation="next" variable="in"/>
</sequence>"#,
    );
    let old = engine(&dir, Limits::default());
    assert!(matches!(
        call(&old, "go", "a", "from-before").await,
        Outcome::Accepted
    ));
    let new = engine(&dir, Limits::default());
    new.succeed(&old);
    // The conversation started before the reload goes on; a new one starts on the new engine.
    assert_eq!(
        reply_value(&call(&new, "next", "a", "x").await),
        "from-before"
    );
    assert!(matches!(
        call(&new, "go", "b", "after").await,
        Outcome::Accepted
    ));
    assert_eq!(new.alive(), 1);
    assert_eq!(old.alive(), 0);
    assert_eq!(
        fault_name(&call(&new, "next", "zz", "x").await),
        "noMatchingInstance"
    );
    assert_eq!(reply_value(&call(&new, "next", "b", "x").await), "after");
}

#[tokio::test]
async fn a_loop_cannot_nest_a_document_deeper_than_the_parser_allows() {
    let dir = folder(
        "deep",
        &format!(
            r#"<scope><variables><variable name="d" element="tns:box"/></variables>
<sequence>{RECEIVE}
  <assign><copy><from>0</from><to variable="n"/></copy>
          <copy><from><literal><tns:box><tns:child/></tns:box></literal></from><to variable="d"/></copy></assign>
  <while><condition>$n &lt; number($in.value)</condition>
    <assign><copy><from>$n + 1</from><to variable="n"/></copy>
            <copy><from variable="d"/><to>$d/tns:child</to></copy></assign>
  </while>
  <assign><copy><from>count($d//tns:child)</from><to variable="out" part="value"/></copy>
          <copy><from variable="in" part="key"/><to variable="out" part="key"/></copy></assign>
  {REPLY}</sequence></scope>"#
        ),
    );
    let e = engine(&dir, Limits::default());
    assert_eq!(reply_value(&call(&e, "run", "k", "10").await), "11");
    assert_eq!(
        fault_name(&call(&e, "run", "k", "1000").await),
        "documentTooDeep"
    );
}

#[tokio::test]
async fn a_loop_that_doubles_a_value_stops_with_a_fault_not_out_of_memory() {
    let dir = folder(
        "double",
        &format!(
            r#"<sequence>{RECEIVE}
  <assign><copy><from>'0123456789abcdef'</from><to variable="s"/></copy></assign>
  <while><condition>true()</condition>
    <assign><copy><from>concat($s, $s)</from><to variable="s"/></copy></assign>
  </while>
  {REPLY}</sequence>"#
        ),
    );
    let e = engine(&dir, Limits::default());
    assert_eq!(
        fault_name(&call(&e, "run", "k", "v").await),
        "valueTooLarge"
    );
}
