//! Process tests in Apache ODE's properties format, run against an in-process engine.
//!
//! A test is a folder with `deploy.xml`, its processes and `test.properties` (or
//! `test1.properties`, `test2.properties`, … run in that order). Each properties file names a
//! service (`namespace`, `service`), an `operation`, and `requestN` messages with
//! `responseN` regular expressions matched (DOTALL, whole text) against the serialised reply
//! message; `FAILURE` expects a fault. Requests go out in order; unless `sequential=true`, the
//! next one is sent as soon as the previous one is answered or every instance is waiting,
//! so a conversation whose first reply depends on a later message works.
//!
//! The two partners ODE's suite calls are built in: ProbeService appends ` -> probeName` to
//! `probeData`, FaultService answers with the fault its indicators ask for. Their WSDLs are
//! built in too, so a test folder needs neither folder beside it. A process the test folder
//! deploys can also be the partner of another one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::runtime::{BoxFuture, Engine, Limits, Outcome, PartnerCall, PartnerReply, Partners};
use crate::xml::{Doc, Name, NodeId};

/// ProbeService's namespace.
pub const PROBE_NS: &str = "http://ode/bpel/unit-test/ProbeService.wsdl";
/// FaultService's namespace.
pub const FAULT_NS: &str = "http://ode/bpel/unit-test/FaultService.wsdl";

/// Our own description of the ProbeService partner.
pub const PROBE_WSDL: &str = r#"<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema"
    xmlns:tns="http://ode/bpel/unit-test/ProbeService.wsdl"
    targetNamespace="http://ode/bpel/unit-test/ProbeService.wsdl">
  <wsdl:message name="probeMessage">
    <wsdl:part name="probeName" type="xsd:string"/>
    <wsdl:part name="probeData" type="xsd:string"/>
  </wsdl:message>
  <wsdl:portType name="probeMessagePT">
    <wsdl:operation name="probe">
      <wsdl:input message="tns:probeMessage"/>
      <wsdl:output message="tns:probeMessage"/>
    </wsdl:operation>
  </wsdl:portType>
</wsdl:definitions>"#;

/// Our own description of the FaultService partner.
pub const FAULT_WSDL: &str = r#"<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema"
    xmlns:tns="http://ode/bpel/unit-test/FaultService.wsdl"
    targetNamespace="http://ode/bpel/unit-test/FaultService.wsdl">
  <wsdl:message name="faultMessage">
    <wsdl:part name="faultName" type="xsd:string"/>
    <wsdl:part name="faultData" type="xsd:string"/>
    <wsdl:part name="faultIndicator1" type="xsd:string"/>
    <wsdl:part name="faultIndicator2" type="xsd:string"/>
  </wsdl:message>
  <wsdl:message name="errorMessage">
    <wsdl:part name="errorID" type="xsd:string"/>
    <wsdl:part name="errorText" type="xsd:string"/>
  </wsdl:message>
  <wsdl:portType name="faultMessagePT">
    <wsdl:operation name="throwFault">
      <wsdl:input message="tns:faultMessage"/>
      <wsdl:output message="tns:faultMessage"/>
      <wsdl:fault name="FaultMessage1" message="tns:errorMessage"/>
      <wsdl:fault name="FaultMessage2" message="tns:errorMessage"/>
      <wsdl:fault name="UnknownFault" message="tns:errorMessage"/>
    </wsdl:operation>
  </wsdl:portType>
</wsdl:definitions>"#;

/// The built-in WSDL standing in for a missing file, by its name.
pub fn builtin_wsdl(file: &Path) -> Option<&'static str> {
    match file.file_name()?.to_str()? {
        "probeService.wsdl" => Some(PROBE_WSDL),
        "faultService.wsdl" => Some(FAULT_WSDL),
        _ => None,
    }
}

/// Folders of Apache ODE's suite that are out of the supported subset, with the reason.
/// `docs/bpel.md` lists the same.
pub const OUT_OF_SCOPE: &[(&str, &str)] = &[
    ("TestCompensationHandlers", "compensation handlers (tier 2)"),
    ("TestFlowLinks", "flow links (tier 2)"),
    ("TestIsolatedScopes1", "isolated scopes (tier 2)"),
    ("TestOnEventThrow", "event handlers (tier 2)"),
    ("TestCorrelationJoinEvent", "event handlers (tier 2)"),
    (
        "TestCorrelationOpaque",
        "asynchronous exchanges; ODE's own harness skips it",
    ),
    (
        "NegativeCorrelationTest",
        "asynchronous exchanges; ODE's own harness skips it",
    ),
    (
        "NegativeInitializationTest",
        "asynchronous exchanges; ODE's own harness skips it",
    ),
    (
        "TestWait1",
        "its expected response 'fdfadf' matches no reply; ODE does not run it",
    ),
    ("TestFlowActivity1", "flow links (tier 2)"),
    (
        "TestAssignDate",
        "XPath 2.0 date arithmetic (xs:dateTime + xs:dayTimeDuration)",
    ),
    ("TestStaticOnMessage", "event handlers (tier 2)"),
    ("TestCorrelationMultiComplex", "event handlers (tier 2)"),
    (
        "TestAssignActivity1",
        "ODE's own XPath variables ($ode:pid, $ode:processQName)",
    ),
    (
        "TestAssignMissingData",
        "ODE's own XPath variables ($ode:pid)",
    ),
    (
        "NegativeTargetNSTest1",
        "no properties file: ODE checks it from Java code",
    ),
    (
        "TestAlarm",
        "no properties file: ODE checks it from Java code",
    ),
    (
        "TestImplicitFaultHandler",
        "no properties file: ODE checks it from Java code",
    ),
];

/// One test's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Failed(String),
    Skipped(String),
}

/// A test folder and its verdict.
#[derive(Clone, Debug)]
pub struct TestResult {
    pub name: String,
    pub dir: PathBuf,
    pub verdict: Verdict,
    pub elapsed: Duration,
}

/// Every test folder under `roots` (a folder holding `deploy.xml` and a `.properties` file,
/// or listed as out of scope), sorted by path.
pub fn find_tests(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for r in roots {
        walk(r, &mut out, 0);
    }
    out.sort();
    out.dedup();
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    if depth > 8 {
        return;
    }
    if dir.join("deploy.xml").is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut subs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    subs.sort();
    for s in subs {
        walk(&s, out, depth + 1);
    }
}

/// Checks a test file's keys: only those the runner reads, and the requests numbered from 1
/// with no gap, each response after a request of its number. A test that would send nothing,
/// or skip what it names, fails rather than passing unchecked.
fn check_keys(props: &BTreeMap<String, String>) -> Result<(), String> {
    let mut requests = Vec::new();
    let mut responses = Vec::new();
    for key in props.keys() {
        let numbered = |prefix: &str| {
            key.strip_prefix(prefix)
                .filter(|n| !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u32>().ok())
        };
        if let Some(n) = numbered("request") {
            requests.push(n);
        } else if let Some(n) = numbered("response") {
            responses.push(n);
        } else if !matches!(
            key.as_str(),
            "namespace" | "service" | "operation" | "sequential"
        ) {
            return Err(format!(
                "unknown key '{key}' (a test has namespace, service, operation, sequential, \
                 requestN and responseN, N from 1)"
            ));
        }
    }
    if requests.is_empty() {
        return Err("no request1: the test sends nothing".into());
    }
    requests.sort_unstable();
    for (i, n) in requests.iter().enumerate() {
        let want = i as u32 + 1;
        if *n != want {
            return Err(format!("request{n} follows no request{want}"));
        }
    }
    if let Some(n) = responses.iter().find(|n| !requests.contains(n)) {
        return Err(format!("response{n} has no request{n}"));
    }
    Ok(())
}

/// Parses Java `.properties` text (comments, `=`/`:`/space separators, continuation lines,
/// escapes; a later key wins).
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        let mut logical = trimmed.to_string();
        while ends_with_odd_backslashes(&logical) {
            logical.pop();
            match lines.next() {
                Some(n) => logical.push_str(n.trim_start()),
                None => break,
            }
        }
        let chars: Vec<char> = logical.chars().collect();
        let mut i = 0;
        let mut key = String::new();
        while i < chars.len() {
            let c = chars[i];
            if c == '\\' && i + 1 < chars.len() {
                key.push(chars[i + 1]);
                i += 2;
                continue;
            }
            if c == '=' || c == ':' || c.is_whitespace() {
                break;
            }
            key.push(c);
            i += 1;
        }
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i < chars.len() && (chars[i] == '=' || chars[i] == ':') {
            i += 1;
        }
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let raw: String = chars[i..].iter().collect();
        out.insert(key, unescape(&raw));
    }
    out
}

fn ends_with_odd_backslashes(s: &str) -> bool {
    s.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = it.by_ref().take(4).collect();
                if let Some(ch) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    out.push(ch);
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// The mock partners, plus the processes of the test folder itself.
struct MockPartners {
    engine: OnceLock<Engine>,
}

fn text_part(d: &Doc, part: &str) -> String {
    d.root_element()
        .and_then(|r| d.child(r, "", part))
        .map(|p| d.string_value(p))
        .unwrap_or_default()
}

fn message(parts: &[(&str, &str)]) -> Arc<Doc> {
    let (mut d, root) = Doc::with_root(Name::new("", "message"));
    for (n, v) in parts {
        let p = d.append_element(root, Name::new("", *n));
        d.append_text(p, v);
    }
    Arc::new(d)
}

impl Partners for MockPartners {
    fn invoke<'a>(&'a self, call: PartnerCall<'a>) -> BoxFuture<'a, Result<PartnerReply, String>> {
        Box::pin(async move {
            let pt = call.port_type;
            if pt.is(PROBE_NS, "probeMessagePT") {
                let name = text_part(&call.message, "probeName");
                let data = text_part(&call.message, "probeData");
                let out = message(&[
                    ("probeName", &name),
                    ("probeData", &format!("{data} -> {name}")),
                ]);
                return Ok(if call.one_way {
                    PartnerReply::Accepted
                } else {
                    PartnerReply::Output(out)
                });
            }
            if pt.is(FAULT_NS, "faultMessagePT") {
                let data = text_part(&call.message, "faultData");
                let fault = if text_part(&call.message, "faultIndicator1").trim() == "yes" {
                    "FaultMessage1"
                } else if text_part(&call.message, "faultIndicator2").trim() == "yes" {
                    "FaultMessage2"
                } else {
                    "UnknownFault"
                };
                return Ok(PartnerReply::Fault {
                    name: fault.to_string(),
                    message: Some(message(&[("errorID", "FA-1"), ("errorText", &data)])),
                });
            }
            // Another process of the same folder?
            let engine = self.engine.get().ok_or("no engine")?;
            let Some(svc) = call.service else {
                return Err(format!("no partner service for port type {}", pt.clark()));
            };
            match engine
                .deliver(&svc.service, call.operation, call.message)
                .await
            {
                Outcome::Reply(m) => Ok(PartnerReply::Output(m)),
                Outcome::Accepted => Ok(PartnerReply::Accepted),
                Outcome::Fault(f) => Ok(PartnerReply::Fault {
                    name: f.name.local.clone(),
                    message: f.data,
                }),
            }
        })
    }
}

struct Call {
    label: String,
    expect: Option<String>,
    task: tokio::task::JoinHandle<Outcome>,
}

/// Runs one test folder.
pub async fn run_test(dir: &Path) -> TestResult {
    run_test_with(dir, None).await
}

/// Runs one test folder; with `durable`, every process of it is durable there (whatever
/// its `deploy.xml` says).
pub async fn run_test_with(
    dir: &Path,
    durable: Option<&crate::runtime::Persistence>,
) -> TestResult {
    let started = Instant::now();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let verdict = match OUT_OF_SCOPE.iter().find(|(n, _)| *n == name) {
        Some((_, why)) => Verdict::Skipped((*why).to_string()),
        None => run_folder(dir, durable).await,
    };
    TestResult {
        name,
        dir: dir.to_path_buf(),
        verdict,
        elapsed: started.elapsed(),
    }
}

async fn run_folder(dir: &Path, durable: Option<&crate::runtime::Persistence>) -> Verdict {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "properties"))
            .collect(),
        Err(e) => return Verdict::Failed(format!("cannot read the folder: {e}")),
    };
    if files.is_empty() {
        return Verdict::Failed("no .properties file".into());
    }
    files.sort_by_key(|p| {
        let stem = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let n: u32 = stem.trim_start_matches("test").parse().unwrap_or(0);
        (n, stem)
    });
    let partners = Arc::new(MockPartners {
        engine: OnceLock::new(),
    });
    let limits = Limits {
        instance_ttl: Duration::from_secs(60),
        ..Limits::default()
    };
    let engine = Engine::new(limits, partners.clone());
    let _ = partners.engine.set(engine.clone());
    let deployed = crate::deploy_dir(dir);
    let mut calls: Vec<Call> = Vec::new();
    let deploy_error = match deployed {
        Ok(mut d) => {
            if durable.is_some() {
                for p in &mut d {
                    p.descriptor.in_memory = false;
                }
            }
            engine.add_with(d, durable);
            if durable.is_some() {
                if let Err(e) = engine.recover(true).await {
                    return Verdict::Failed(format!("cannot take up saved instances: {e}"));
                }
            }
            None
        }
        Err(errors) => Some(
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    for f in &files {
        let props = match std::fs::read_to_string(f) {
            Ok(t) => parse_properties(&t),
            Err(e) => return Verdict::Failed(format!("{}: {e}", f.display())),
        };
        let file_name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Err(why) = check_keys(&props) {
            return Verdict::Failed(format!("{file_name}: {why}"));
        }
        if let Some(err) = &deploy_error {
            // A test that expects the deployment to fail says so with this response.
            let expects_compile_error = props
                .iter()
                .any(|(k, v)| k.starts_with("response") && v.contains("Compile Exception"));
            return if expects_compile_error {
                Verdict::Passed
            } else {
                Verdict::Failed(format!("deployment failed: {err}"))
            };
        }
        let ns = props.get("namespace").cloned().unwrap_or_default();
        let service = Name::new(ns, props.get("service").cloned().unwrap_or_default());
        let operation = props.get("operation").cloned().unwrap_or_default();
        let sequential = props.get("sequential").is_some_and(|v| v.trim() == "true");
        let mut n = 1;
        while let Some(req) = props.get(&format!("request{n}")) {
            let msg = match Doc::parse(req) {
                Ok(d) => Arc::new(d),
                Err(e) => return Verdict::Failed(format!("{file_name} request{n}: {e}")),
            };
            let expect = props.get(&format!("response{n}")).cloned();
            let eng = engine.clone();
            let svc = service.clone();
            let op = operation.clone();
            let mut task = tokio::spawn(async move { eng.deliver(&svc, &op, msg).await });
            let label = format!("{file_name} request{n}");
            if sequential {
                let out = match tokio::time::timeout(Duration::from_secs(30), &mut task).await {
                    Ok(Ok(o)) => o,
                    _ => return Verdict::Failed(format!("{label}: no answer in 30 s")),
                };
                if let Err(e) = check(&label, expect.as_deref(), &out) {
                    return Verdict::Failed(e);
                }
            } else {
                // Go on once it is answered or every instance waits for something.
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    if task.is_finished() || Instant::now() > deadline {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    if engine.is_idle() {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        if engine.is_idle() {
                            break;
                        }
                    }
                }
                calls.push(Call {
                    label,
                    expect,
                    task,
                });
            }
            n += 1;
        }
    }
    for c in calls {
        let out = match tokio::time::timeout(Duration::from_secs(30), c.task).await {
            Ok(Ok(o)) => o,
            _ => return Verdict::Failed(format!("{}: no answer in 30 s", c.label)),
        };
        if let Err(e) = check(&c.label, c.expect.as_deref(), &out) {
            return Verdict::Failed(e);
        }
    }
    Verdict::Passed
}

/// The reply message as ODE's harness prints it.
pub fn serialise(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Reply(m) => m.to_xml(NodeId::ROOT),
        Outcome::Accepted => String::new(),
        Outcome::Fault(f) => format!("fault {}: {}", f.name.clark(), f.text),
    }
}

fn check(label: &str, expect: Option<&str>, out: &Outcome) -> Result<(), String> {
    let Some(expect) = expect else {
        return Ok(());
    };
    let expect = expect.trim();
    if expect == "FAILURE" {
        return match out {
            Outcome::Fault(_) => Ok(()),
            other => Err(format!(
                "{label}: expected a fault, got {}",
                serialise(other)
            )),
        };
    }
    if let Outcome::Fault(f) = out {
        return Err(format!("{label}: fault {}: {}", f.name.clark(), f.text));
    }
    let re = regex::Regex::new(&format!("(?s)^(?:{expect})$"))
        .map_err(|e| format!("{label}: bad response pattern: {e}"))?;
    let text = serialise(out);
    if re.is_match(&text) {
        Ok(())
    } else {
        let shown: String = text.chars().take(400).collect();
        Err(format!("{label}: reply does not match /{expect}/: {shown}"))
    }
}

/// Runs every test folder under `roots`, printing one line per test and the summary.
/// Returns (passed, failed, skipped) and the results.
pub async fn run_all(
    roots: &[PathBuf],
    print: impl FnMut(&str),
) -> ((usize, usize, usize), Vec<TestResult>) {
    run_all_with(roots, None, print).await
}

/// [`run_all`], every process durable in `durable`'s store when given.
pub async fn run_all_with(
    roots: &[PathBuf],
    durable: Option<&crate::runtime::Persistence>,
    mut print: impl FnMut(&str),
) -> ((usize, usize, usize), Vec<TestResult>) {
    let mut results = Vec::new();
    let (mut p, mut f, mut s) = (0, 0, 0);
    for dir in find_tests(roots) {
        let r = run_test_with(&dir, durable).await;
        let line = match &r.verdict {
            Verdict::Passed => {
                p += 1;
                format!("ok      {} ({} ms)", r.name, r.elapsed.as_millis())
            }
            Verdict::Failed(why) => {
                f += 1;
                format!("FAILED  {}: {why}", r.name)
            }
            Verdict::Skipped(why) => {
                s += 1;
                format!("skipped {}: {why}", r.name)
            }
        };
        print(&line);
        results.push(r);
    }
    print(&format!("{p} passed, {f} failed, {s} skipped"));
    ((p, f, s), results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_that_would_check_nothing_or_skip_a_key_fails() {
        let keys = |text: &str| check_keys(&parse_properties(text));
        let head = "namespace=urn:x\nservice=S\noperation=op\n";
        assert_eq!(
            keys(&format!(
                "{head}request1=<message/>\nresponse1=.*\nrequest2=<message/>\nsequential=true\n"
            )),
            Ok(())
        );
        assert_eq!(keys(""), Err("no request1: the test sends nothing".into()));
        assert_eq!(
            keys(&format!("{head}response1=x\n")),
            Err("no request1: the test sends nothing".into())
        );
        assert_eq!(
            keys(&format!("{head}request1=a\nrequest3=b\nresponse3=c\n")),
            Err("request3 follows no request2".into())
        );
        assert_eq!(
            keys(&format!("{head}request1=a\nresponse2=c\n")),
            Err("response2 has no request2".into())
        );
        for odd in [
            "request=a",
            "response=b",
            "reponse1=b",
            "request01=a",
            "request1x=a",
        ] {
            let e = keys(&format!("{head}request1=a\n{odd}\n")).unwrap_err();
            let key = odd.split('=').next().unwrap();
            assert!(e.starts_with(&format!("unknown key '{key}'")), "{odd}: {e}");
        }
    }

    #[test]
    fn properties_follow_java_rules() {
        let p =
            parse_properties("# c\n! c\na=1\nb : 2\nc 3\nd=x\\\n   y\ne=\\u0041\\\\\\=\na=last\n");
        assert_eq!(p["a"], "last");
        assert_eq!(p["b"], "2");
        assert_eq!(p["c"], "3");
        assert_eq!(p["d"], "xy");
        assert_eq!(p["e"], "A\\=");
    }
}
