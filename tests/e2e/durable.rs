//! Durable process instances across a `kill -9`: busbar runs as a child process with its
//! processes kept in SQLite or a real PostgreSQL server, instances wait on a `receive` and on
//! a `wait`, the engine is killed and started again, and every instance completes exactly
//! once (counted at a recording back end). Also two nodes on one PostgreSQL, one killed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use busbar_sql::testing::TempPostgres;

use crate::support::*;

const WSDL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions name="durable" targetNamespace="urn:dur"
    xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:tns="urn:dur"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema"
    xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:plnk="http://docs.oasis-open.org/wsbpel/2.0/plnktype"
    xmlns:vprop="http://docs.oasis-open.org/wsbpel/2.0/varprop">
  <types>
    <xsd:schema targetNamespace="urn:dur">
      <xsd:element name="text" type="xsd:string"/>
    </xsd:schema>
  </types>
  <message name="TextMsg"><part name="payload" element="tns:text"/></message>
  <portType name="Waiter">
    <operation name="start"><input message="tns:TextMsg"/><output message="tns:TextMsg"/></operation>
    <operation name="finish"><input message="tns:TextMsg"/><output message="tns:TextMsg"/></operation>
  </portType>
  <portType name="Sleeper">
    <operation name="sleep"><input message="tns:TextMsg"/><output message="tns:TextMsg"/></operation>
  </portType>
  <portType name="Recorder">
    <operation name="record"><input message="tns:TextMsg"/><output message="tns:TextMsg"/></operation>
  </portType>
  <binding name="WaiterBinding" type="tns:Waiter">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="start">
      <soap:operation soapAction="urn:dur:start"/>
      <input><soap:body use="literal"/></input><output><soap:body use="literal"/></output>
    </operation>
    <operation name="finish">
      <soap:operation soapAction="urn:dur:finish"/>
      <input><soap:body use="literal"/></input><output><soap:body use="literal"/></output>
    </operation>
  </binding>
  <binding name="SleeperBinding" type="tns:Sleeper">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="sleep">
      <soap:operation soapAction="urn:dur:sleep"/>
      <input><soap:body use="literal"/></input><output><soap:body use="literal"/></output>
    </operation>
  </binding>
  <binding name="RecorderBinding" type="tns:Recorder">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="record">
      <soap:operation soapAction="urn:dur:record"/>
      <input><soap:body use="literal"/></input><output><soap:body use="literal"/></output>
    </operation>
  </binding>
  <service name="WaiterService">
    <port name="WaiterPort" binding="tns:WaiterBinding">
      <soap:address location="http://localhost:8080/durable/Waiter"/>
    </port>
  </service>
  <service name="SleeperService">
    <port name="SleeperPort" binding="tns:SleeperBinding">
      <soap:address location="http://localhost:8080/durable/Sleeper"/>
    </port>
  </service>
  <service name="RecorderService">
    <port name="RecorderPort" binding="tns:RecorderBinding">
      <soap:address location="http://127.0.0.1:9/unused"/>
    </port>
  </service>
  <plnk:partnerLinkType name="WaiterLT"><plnk:role name="waiter" portType="tns:Waiter"/></plnk:partnerLinkType>
  <plnk:partnerLinkType name="SleeperLT"><plnk:role name="sleeper" portType="tns:Sleeper"/></plnk:partnerLinkType>
  <plnk:partnerLinkType name="RecorderLT"><plnk:role name="recorder" portType="tns:Recorder"/></plnk:partnerLinkType>
  <vprop:property name="id" type="xsd:string"/>
  <vprop:propertyAlias propertyName="tns:id" messageType="tns:TextMsg" part="payload"/>
</definitions>
"#;

/// start(id) is answered at once; the instance then waits for finish(id), records
/// "finished ID" at the recorder and answers with the recorder's answer.
const WAITER: &str = r#"<process name="Waiter" targetNamespace="urn:dur:proc"
    xmlns="http://docs.oasis-open.org/wsbpel/2.0/process/executable" xmlns:t="urn:dur">
  <import location="durable.wsdl" namespace="urn:dur" importType="http://schemas.xmlsoap.org/wsdl/"/>
  <partnerLinks>
    <partnerLink name="client" partnerLinkType="t:WaiterLT" myRole="waiter"/>
    <partnerLink name="recorder" partnerLinkType="t:RecorderLT" partnerRole="recorder"/>
  </partnerLinks>
  <variables>
    <variable name="in" messageType="t:TextMsg"/>
    <variable name="fin" messageType="t:TextMsg"/>
    <variable name="req" messageType="t:TextMsg"/>
    <variable name="resp" messageType="t:TextMsg"/>
  </variables>
  <correlationSets>
    <correlationSet name="conv" properties="t:id"/>
  </correlationSets>
  <sequence>
    <receive partnerLink="client" operation="start" variable="in" createInstance="yes">
      <correlations><correlation set="conv" initiate="yes"/></correlations>
    </receive>
    <reply partnerLink="client" operation="start" variable="in"/>
    <receive partnerLink="client" operation="finish" variable="fin">
      <correlations><correlation set="conv"/></correlations>
    </receive>
    <assign>
      <copy>
        <from>concat('finished ', $fin.payload)</from>
        <to variable="req" part="payload"/>
      </copy>
    </assign>
    <invoke partnerLink="recorder" operation="record" inputVariable="req" outputVariable="resp"/>
    <reply partnerLink="client" operation="finish" variable="resp"/>
  </sequence>
</process>
"#;

/// sleep(id) is answered at once; the instance waits two seconds, then records "slept ID".
const SLEEPER: &str = r#"<process name="Sleeper" targetNamespace="urn:dur:proc"
    xmlns="http://docs.oasis-open.org/wsbpel/2.0/process/executable" xmlns:t="urn:dur">
  <import location="durable.wsdl" namespace="urn:dur" importType="http://schemas.xmlsoap.org/wsdl/"/>
  <partnerLinks>
    <partnerLink name="client" partnerLinkType="t:SleeperLT" myRole="sleeper"/>
    <partnerLink name="recorder" partnerLinkType="t:RecorderLT" partnerRole="recorder"/>
  </partnerLinks>
  <variables>
    <variable name="in" messageType="t:TextMsg"/>
    <variable name="req" messageType="t:TextMsg"/>
    <variable name="resp" messageType="t:TextMsg"/>
  </variables>
  <sequence>
    <receive partnerLink="client" operation="sleep" variable="in" createInstance="yes"/>
    <reply partnerLink="client" operation="sleep" variable="in"/>
    <wait><for>'PT2S'</for></wait>
    <assign>
      <copy>
        <from>concat('slept ', $in.payload)</from>
        <to variable="req" part="payload"/>
      </copy>
    </assign>
    <invoke partnerLink="recorder" operation="record" inputVariable="req" outputVariable="resp"/>
  </sequence>
</process>
"#;

const DEPLOY: &str = r#"<deploy xmlns="http://www.apache.org/ode/schemas/dd/2007/03"
    xmlns:p="urn:dur:proc" xmlns:t="urn:dur">
  <process name="p:Waiter">
    <provide partnerLink="client"><service name="t:WaiterService" port="WaiterPort"/></provide>
    <invoke partnerLink="recorder"><service name="t:RecorderService" port="RecorderPort"/></invoke>
  </process>
  <process name="p:Sleeper">
    <provide partnerLink="client"><service name="t:SleeperService" port="SleeperPort"/></provide>
    <invoke partnerLink="recorder"><service name="t:RecorderService" port="RecorderPort"/></invoke>
  </process>
</deploy>
"#;

/// The process folder, the sleeper waiting `wait` (an xs:duration).
fn folder(wait: &str) -> PathBuf {
    let dir = temp_dir("durable");
    let sleeper = SLEEPER.replace("'PT2S'", &format!("'{wait}'"));
    for (name, text) in [
        ("durable.wsdl", WSDL),
        ("Waiter.bpel", WAITER),
        ("Sleeper.bpel", sleeper.as_str()),
        ("deploy.xml", DEPLOY),
    ] {
        std::fs::write(dir.join(name), text).expect("write process file");
    }
    dir
}

/// Where the instances are kept.
enum Db<'a> {
    Sqlite(&'a Path),
    Postgres(&'a TempPostgres),
}

/// A `busbar run` child process on a config written for it, killed with SIGKILL on drop.
struct Node {
    child: Child,
    http: SocketAddr,
    admin: SocketAddr,
    log: PathBuf,
}

impl Node {
    fn start(dir: &Path, name: &str, db: &Db, recorder: SocketAddr) -> Node {
        Node::start_with(dir, name, db, recorder, "", "")
    }

    /// With more settings (`key: value, …`) in the folder's `persistence`, and more lines of
    /// the folder's own (`    key: value\n` each).
    fn start_with(
        dir: &Path,
        name: &str,
        db: &Db,
        recorder: SocketAddr,
        more: &str,
        folder: &str,
    ) -> Node {
        let more = if more.is_empty() {
            String::new()
        } else {
            format!(", {more}")
        };
        let http = free_addr();
        let admin = free_addr();
        let database = match db {
            Db::Sqlite(file) => format!("{{ path: \"{}\" }}", file.display()),
            Db::Postgres(pg) => format!("{{ url: \"{}\" }}", pg.url()),
        };
        let yaml = format!(
            "workers: 1\nadmin: {{ bind: \"{admin}\" }}\nlisteners:\n  http: {{ bind: \"{http}\" }}\n\
             databases:\n  flows: {database}\n\
             endpoints:\n  recorder: {{ url: \"http://{recorder}/record\", timeout: 10s }}\n\
             processes:\n  Durable:\n    dir: {}\n    partners: {{ recorder: recorder }}\n    \
             persistence: {{ database: flows, node: {name}, lease: 2s, completion: always{more} }}\n\
             {folder}",
            dir.display()
        );
        let node = Node::spawn(dir, name, http, admin, &yaml);
        // Ready once the saved instances are taken up (503 until then).
        let ready = eventually(Duration::from_secs(30), || {
            std::net::TcpStream::connect(node.http).is_ok()
                && std::net::TcpStream::connect(node.admin).is_ok()
                && Client::connect(node.admin)
                    .get("/readyz")
                    .is_ok_and(|r| r.status == 200)
        });
        assert!(ready, "busbar did not start: {}", node.log_text());
        node
    }

    /// `busbar run` on `yaml` (written to NAME.yaml in `dir`, its log to NAME.log), not
    /// waiting for anything.
    fn spawn(dir: &Path, name: &str, http: SocketAddr, admin: SocketAddr, yaml: &str) -> Node {
        let config = dir.join(format!("{name}.yaml"));
        std::fs::write(&config, yaml).expect("write config");
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_busbar"))
            .arg("run")
            .arg(&config)
            .env("BUSBAR_LOG", "info")
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .expect("log"),
            )
            .spawn()
            .expect("busbar run");
        Node {
            child,
            http,
            admin,
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn call(&self, path: &str, action: &str, text: &str) -> Resp {
        let mut c = Client::connect(self.http);
        c.post(
            path,
            &[
                ("Content-Type", "text/xml; charset=UTF-8"),
                ("SOAPAction", action),
            ],
            envelope(text).as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{path} {text}: {e}; log: {}", self.log_text()))
    }

    fn get(&self, path: &str) -> Resp {
        Client::connect(self.admin).get(path).expect("admin GET")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
}

fn envelope(text: &str) -> String {
    format!(
        "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><t:text xmlns:t=\"urn:dur\">{text}</t:text></soapenv:Body></soapenv:Envelope>"
    )
}

/// The texts the recorder got, with how often each came.
fn recorded(seen: &Arc<Mutex<Vec<Vec<u8>>>>) -> BTreeMap<String, usize> {
    let text = regex::Regex::new(r"<(?:[A-Za-z_][\w.-]*:)?text\b[^>]*>([^<]*)<").expect("regex");
    let mut out = BTreeMap::new();
    for body in seen.lock().expect("lock").iter() {
        let body = String::from_utf8_lossy(body);
        if let Some(c) = text.captures(&body) {
            *out.entry(c[1].to_owned()).or_default() += 1;
        }
    }
    out
}

/// Sends `n` calls from 8 threads; returns the statuses and bodies.
fn many(node: &Node, n: usize, f: impl Fn(usize) -> (String, String, String) + Sync) -> Vec<Resp> {
    let out = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..8 {
            let (out, f) = (&out, &f);
            s.spawn(move || {
                for i in (t..n).step_by(8) {
                    let (path, action, text) = f(i);
                    let r = node.call(&path, &action, &text);
                    out.lock().expect("lock").push(r);
                }
            });
        }
    });
    out.into_inner().expect("lock")
}

fn kill_and_resume(db: &Db, dir: &Path) {
    let (recorder, seen) = recording_back_end();
    let n = 100;
    let mut node = Node::start(dir, "n1", db, recorder);
    // Each start is answered once the instance's snapshot at its wait point is written.
    for r in many(&node, n, |i| {
        (
            "/durable/Waiter".into(),
            "urn:dur:start".into(),
            format!("w{i}"),
        )
    }) {
        assert_eq!(r.status, 200, "{}", r.text());
    }
    for r in many(&node, n, |i| {
        (
            "/durable/Sleeper".into(),
            "urn:dur:sleep".into(),
            format!("s{i}"),
        )
    }) {
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let waiting = node.get("/processes/stored?state=waiting&limit=1000");
    assert_eq!(waiting.status, 200, "{}", waiting.text());
    let list: serde_json::Value = serde_json::from_slice(&waiting.body).expect("json");
    assert_eq!(list.as_array().map(Vec::len), Some(2 * n), "{list}");
    node.kill();
    assert!(
        recorded(&seen).is_empty(),
        "nothing ran past a wait point yet"
    );

    let node = Node::start(dir, "n1", db, recorder);
    // The waiters got their correlated message after the restart.
    for r in many(&node, n, |i| {
        (
            "/durable/Waiter".into(),
            "urn:dur:finish".into(),
            format!("w{i}"),
        )
    }) {
        assert_eq!(r.status, 200, "{}: {}", r.text(), node.log_text());
        assert!(r.text().contains("finished w"), "{}", r.text());
    }
    // The sleepers' timers fired after the restart.
    let all = eventually(Duration::from_secs(30), || recorded(&seen).len() == 2 * n);
    let got = recorded(&seen);
    assert!(
        all,
        "{} of {} recorded: {got:?}\n{}",
        got.len(),
        2 * n,
        node.log_text()
    );
    std::thread::sleep(Duration::from_millis(500));
    let got = recorded(&seen);
    for i in 0..n {
        assert_eq!(got.get(&format!("finished w{i}")), Some(&1), "{got:?}");
        assert_eq!(got.get(&format!("slept s{i}")), Some(&1), "{got:?}");
    }
    // Kept with their final variables (completion: always).
    let done = eventually(Duration::from_secs(10), || {
        let r = node.get("/processes/stored?state=completed&limit=1000");
        serde_json::from_slice::<serde_json::Value>(&r.body)
            .ok()
            .and_then(|v| v.as_array().map(Vec::len))
            == Some(2 * n)
    });
    assert!(done, "{}", node.get("/processes/stored?limit=1000").text());
    let list: serde_json::Value =
        serde_json::from_slice(&node.get("/processes/stored?state=completed&limit=1").body)
            .expect("json");
    let id = list[0]["id"].as_u64().expect("an id");
    let one = node.get(&format!("/processes/instances/{id}"));
    assert_eq!(one.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&one.body).expect("json");
    assert_eq!(v["state"], "completed", "{v}");
    let req = v["variables"]["req"].as_str().unwrap_or_default();
    assert!(req.contains("finished w") || req.contains("slept s"), "{v}");
    let metrics = node.get("/metrics").text();
    assert!(
        metrics.contains("busbar_process_stored_instances{process=\"{urn:dur:proc}Waiter\",state=\"completed\"} 100"),
        "{metrics}"
    );
    assert!(
        metrics.contains("busbar_process_store_write_seconds_count"),
        "{metrics}"
    );
}

#[test]
fn durable_instances_on_sqlite_survive_kill_9_and_complete_once() {
    let dir = folder("PT2S");
    let file = dir.join("flows.db");
    kill_and_resume(&Db::Sqlite(&file), &dir);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn durable_instances_on_postgres_survive_kill_9_and_complete_once() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = folder("PT2S");
    kill_and_resume(&Db::Postgres(&pg), &dir);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn two_nodes_on_postgres_finish_a_dead_nodes_timers_exactly_once() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = folder("PT6S");
    let (recorder, seen) = recording_back_end();
    let mut a = Node::start(&dir, "a", &Db::Postgres(&pg), recorder);
    let b = Node::start(&dir, "b", &Db::Postgres(&pg), recorder);
    let n = 500;
    std::thread::scope(|s| {
        let (a, b) = (&a, &b);
        s.spawn(move || {
            for r in many(a, n, |i| {
                (
                    "/durable/Sleeper".into(),
                    "urn:dur:sleep".into(),
                    format!("a{i}"),
                )
            }) {
                assert_eq!(r.status, 200, "{}", r.text());
            }
        });
        s.spawn(move || {
            for r in many(b, n, |i| {
                (
                    "/durable/Sleeper".into(),
                    "urn:dur:sleep".into(),
                    format!("b{i}"),
                )
            }) {
                assert_eq!(r.status, 200, "{}", r.text());
            }
        });
    });
    // Every instance waits its six seconds now; node a dies with its 500.
    a.kill();
    let all = eventually(Duration::from_secs(60), || recorded(&seen).len() == 2 * n);
    let got = recorded(&seen);
    assert!(all, "{} of {} recorded\n{}", got.len(), 2 * n, b.log_text());
    std::thread::sleep(Duration::from_secs(1));
    let got = recorded(&seen);
    for i in 0..n {
        for who in ["a", "b"] {
            assert_eq!(
                got.get(&format!("slept {who}{i}")),
                Some(&1),
                "{who}{i}: {got:?}"
            );
        }
    }
    let r = b.get("/processes/stored?state=waiting&limit=10");
    assert_eq!(r.text().trim(), "[]", "{}", r.text());
    let _ = std::fs::remove_dir_all(dir);
}

fn db_options(kind: busbar_sql::Kind) -> busbar_sql::Options {
    busbar_sql::Options {
        kind,
        pool: 2,
        acquire_timeout: Duration::from_secs(5),
        statement_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(5),
        statement_cache: true,
        init: None,
        tls: None,
    }
}

/// Apache ODE's WS-BPEL unit suite, read in place from `../shared/conformance/ode-bpel-2.0/`,
/// with every process durable in a SQLite file: the tests that pass in memory pass there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ode_suite_passes_the_same_tests_with_every_process_durable_on_sqlite() {
    let dir = temp_dir("durable-ode");
    let db = busbar_sql::Database::open(
        "flows",
        db_options(busbar_sql::Kind::Sqlite {
            path: dir.join("flows.db"),
            busy_timeout: Duration::from_secs(5),
        }),
    )
    .expect("open SQLite");
    ode_suite_durable(db).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The same on a real PostgreSQL server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ode_suite_passes_the_same_tests_with_every_process_durable_on_postgres() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let config: busbar_sql::PgConfig = pg.url().parse().expect("URL");
    let db = busbar_sql::Database::open(
        "flows",
        db_options(busbar_sql::Kind::Postgres(Box::new(config))),
    )
    .expect("open PostgreSQL");
    ode_suite_durable(db).await;
}

async fn ode_suite_durable(db: Arc<busbar_sql::Database>) {
    let suite =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/ode-bpel-2.0");
    if !suite.is_dir() {
        eprintln!("skipped: ../shared/conformance/ode-bpel-2.0 is missing");
        return;
    }
    let store = busbar_engine::process_store::SqlStore::new(db).expect("store");
    let store: Arc<dyn busbar_flow::store::Store> = Arc::new(store);
    // PostgreSQL connects in the background.
    let mut tries = 0;
    while let Err(e) = store.init().await {
        tries += 1;
        assert!(tries < 100, "the tables: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let durable = busbar_flow::runtime::Persistence {
        store: store.clone(),
        node: "ode".into(),
        completion: busbar_flow::runtime::Completion::Always,
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(3600),
    };
    let passed = |results: &[busbar_flow::harness::TestResult]| {
        results
            .iter()
            .filter(|r| matches!(r.verdict, busbar_flow::harness::Verdict::Passed))
            .map(|r| r.name.clone())
            .collect::<std::collections::BTreeSet<_>>()
    };
    let (_, transient) = busbar_flow::harness::run_all(std::slice::from_ref(&suite), |_| {}).await;
    let (_, durable_results) =
        busbar_flow::harness::run_all_with(&[suite], Some(&durable), |l| println!("{l}")).await;
    let (t, d) = (passed(&transient), passed(&durable_results));
    let lost: Vec<_> = t.difference(&d).collect();
    assert!(lost.is_empty(), "pass in memory, fail durable: {lost:?}");
    assert!(t.len() > 10, "only {} tests passed", t.len());
    // The instances that ended are in the database, with their final state.
    let counts = store.counts().await.expect("counts");
    let finished: u64 = counts
        .iter()
        .filter(|(_, s, _)| *s != busbar_flow::store::State::Waiting)
        .map(|(_, _, n)| n)
        .sum();
    assert!(finished > 0, "{counts:?}");
}

/// A conversation through a flow of two receives in a scope, a sequential forEach of waits
/// and a pick, with the engine killed at each wait point and started again: every variable
/// and position survives, and the recorder gets the whole log once.
const WALKER: &str = r#"<process name="Walker" targetNamespace="urn:dur:proc"
    xmlns="http://docs.oasis-open.org/wsbpel/2.0/process/executable" xmlns:t="urn:dur"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema">
  <import location="durable.wsdl" namespace="urn:dur" importType="http://schemas.xmlsoap.org/wsdl/"/>
  <partnerLinks>
    <partnerLink name="client" partnerLinkType="t:WalkerLT" myRole="walker"/>
    <partnerLink name="recorder" partnerLinkType="t:RecorderLT" partnerRole="recorder"/>
  </partnerLinks>
  <variables>
    <variable name="in" messageType="t:TextMsg"/>
    <variable name="log" type="xsd:string"/>
    <variable name="req" messageType="t:TextMsg"/>
    <variable name="resp" messageType="t:TextMsg"/>
  </variables>
  <correlationSets>
    <correlationSet name="conv" properties="t:id"/>
  </correlationSets>
  <sequence>
    <receive partnerLink="client" operation="begin" variable="in" createInstance="yes">
      <correlations><correlation set="conv" initiate="yes"/></correlations>
    </receive>
    <assign><copy><from>concat('[', $in.payload, ']')</from><to variable="log"/></copy></assign>
    <reply partnerLink="client" operation="begin" variable="in"/>
    <scope>
      <variables><variable name="seen" type="xsd:string"/></variables>
      <sequence>
        <assign><copy><from>'-'</from><to variable="seen"/></copy></assign>
        <flow>
          <sequence>
            <receive partnerLink="client" operation="a" variable="in">
              <correlations><correlation set="conv"/></correlations>
            </receive>
            <assign><copy><from>concat($seen, 'a')</from><to variable="seen"/></copy></assign>
          </sequence>
          <sequence>
            <receive partnerLink="client" operation="b" variable="in">
              <correlations><correlation set="conv"/></correlations>
            </receive>
            <assign><copy><from>concat($seen, 'b')</from><to variable="seen"/></copy></assign>
          </sequence>
        </flow>
        <assign><copy><from>concat($log, $seen)</from><to variable="log"/></copy></assign>
      </sequence>
    </scope>
    <forEach counterName="i" parallel="no">
      <startCounterValue>1</startCounterValue>
      <finalCounterValue>3</finalCounterValue>
      <scope>
        <sequence>
          <wait><for>'PT0.4S'</for></wait>
          <assign><copy><from>concat($log, $i)</from><to variable="log"/></copy></assign>
        </sequence>
      </scope>
    </forEach>
    <pick>
      <onMessage partnerLink="client" operation="c" variable="in">
        <correlations><correlation set="conv"/></correlations>
        <assign><copy><from>concat($log, 'c')</from><to variable="log"/></copy></assign>
      </onMessage>
      <onAlarm>
        <for>'PT60S'</for>
        <assign><copy><from>concat($log, 'alarm')</from><to variable="log"/></copy></assign>
      </onAlarm>
    </pick>
    <assign><copy><from>$log</from><to variable="req" part="payload"/></copy></assign>
    <invoke partnerLink="recorder" operation="record" inputVariable="req" outputVariable="resp"/>
  </sequence>
</process>
"#;

/// The Walker's port type and service, added to the WSDL.
const WALKER_WSDL: &str = r#"
  <portType name="Walker">
    <operation name="begin"><input message="tns:TextMsg"/><output message="tns:TextMsg"/></operation>
    <operation name="a"><input message="tns:TextMsg"/></operation>
    <operation name="b"><input message="tns:TextMsg"/></operation>
    <operation name="c"><input message="tns:TextMsg"/></operation>
  </portType>
  <binding name="WalkerBinding" type="tns:Walker">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="begin"><soap:operation soapAction="urn:dur:begin"/>
      <input><soap:body use="literal"/></input><output><soap:body use="literal"/></output></operation>
    <operation name="a"><soap:operation soapAction="urn:dur:a"/><input><soap:body use="literal"/></input></operation>
    <operation name="b"><soap:operation soapAction="urn:dur:b"/><input><soap:body use="literal"/></input></operation>
    <operation name="c"><soap:operation soapAction="urn:dur:c"/><input><soap:body use="literal"/></input></operation>
  </binding>
  <service name="WalkerService">
    <port name="WalkerPort" binding="tns:WalkerBinding">
      <soap:address location="http://localhost:8080/durable/Walker"/>
    </port>
  </service>
  <plnk:partnerLinkType name="WalkerLT"><plnk:role name="walker" portType="tns:Walker"/></plnk:partnerLinkType>
"#;

fn walker_folder() -> PathBuf {
    let dir = folder("PT2S");
    let wsdl = WSDL.replace(
        "  <vprop:property",
        &format!("{WALKER_WSDL}  <vprop:property"),
    );
    std::fs::write(dir.join("durable.wsdl"), wsdl).expect("wsdl");
    std::fs::write(dir.join("Walker.bpel"), WALKER).expect("bpel");
    let deploy = DEPLOY.replace(
        "</deploy>",
        r#"  <process name="p:Walker">
    <provide partnerLink="client"><service name="t:WalkerService" port="WalkerPort"/></provide>
    <invoke partnerLink="recorder"><service name="t:RecorderService" port="RecorderPort"/></invoke>
  </process>
</deploy>"#,
    );
    std::fs::write(dir.join("deploy.xml"), deploy).expect("deploy");
    dir
}

#[test]
fn a_conversation_through_flow_foreach_and_pick_survives_a_kill_at_every_wait_point() {
    let dir = walker_folder();
    let db = dir.join("flows.db");
    let (recorder, seen) = recording_back_end();
    let restart = |node: &mut Option<Node>| {
        if let Some(mut n) = node.take() {
            n.kill();
        }
        *node = Some(Node::start(&dir, "n1", &Db::Sqlite(&db), recorder));
    };
    let mut node = None;
    restart(&mut node);
    let send = |node: &Option<Node>, op: &str, status: u16| {
        let n = node.as_ref().expect("node");
        let r = n.call("/durable/Walker", &format!("urn:dur:{op}"), "k1");
        assert_eq!(r.status, status, "{op}: {}\n{}", r.text(), n.log_text());
    };
    send(&node, "begin", 200);
    restart(&mut node);
    send(&node, "a", 202);
    restart(&mut node);
    // b's 202 comes once the instance waits in the forEach's first wait.
    send(&node, "b", 202);
    restart(&mut node);
    std::thread::sleep(Duration::from_millis(500));
    restart(&mut node);
    // Past the forEach (three waits of 0.4 s, each resumed at its due time), in the pick.
    let in_pick = eventually(Duration::from_secs(20), || {
        let n = node.as_ref().expect("node");
        let r = n.get("/processes/stored?state=waiting&limit=10");
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        let Some(id) = v[0]["id"].as_u64() else {
            return false;
        };
        let d: serde_json::Value =
            serde_json::from_slice(&n.get(&format!("/processes/instances/{id}")).body)
                .unwrap_or_default();
        d["variables"]["log"]
            .as_str()
            .is_some_and(|l| l.contains("-ab123"))
    });
    assert!(
        in_pick,
        "{}",
        node.as_ref().expect("node").get("/processes/stored").text()
    );
    restart(&mut node);
    send(&node, "c", 202);
    let done = eventually(Duration::from_secs(20), || !recorded(&seen).is_empty());
    assert!(done, "{}", node.as_ref().expect("node").log_text());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        recorded(&seen),
        BTreeMap::from([("[k1]-ab123c".to_owned(), 1)])
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_admin_api_shows_retries_and_terminates_stored_instances() {
    let dir = folder("PT2S");
    let db = dir.join("flows.db");
    // The recorder answers 503 until it is switched on.
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (recorder, seen) = switchable_back_end(up.clone());
    let node = Node::start(&dir, "n1", &Db::Sqlite(&db), recorder);
    let admin = |method: &str, path: &str| {
        Client::connect(node.admin)
            .request(method, path, &[], b"")
            .expect("admin")
    };
    let json = |r: Resp| -> serde_json::Value { serde_json::from_slice(&r.body).expect("json") };
    assert_eq!(
        node.call("/durable/Waiter", "urn:dur:start", "w1").status,
        200
    );
    // The recorder is down: the invoke after finish faults the instance.
    let r = node.call("/durable/Waiter", "urn:dur:finish", "w1");
    assert_eq!(r.status, 500, "{}", r.text());
    let faulted = json(admin("GET", "/processes/stored?state=faulted"));
    let id = faulted[0]["id"].as_u64().expect("a faulted instance");
    assert_eq!(faulted[0]["process"], "{urn:dur:proc}Waiter");
    let d = json(admin("GET", &format!("/processes/instances/{id}")));
    assert_eq!(d["state"], "faulted", "{d}");
    assert_eq!(d["fault"]["name"], "invokeFailed", "{d}");
    assert!(
        d["variables"]["req"]
            .as_str()
            .unwrap_or("")
            .contains("finished w1"),
        "{d}"
    );
    // Retried from its last wait point: it waits for finish again.
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    let r = admin("POST", &format!("/processes/instances/{id}/retry"));
    assert_eq!(r.status, 202, "{}", r.text());
    let d = json(admin("GET", &format!("/processes/instances/{id}")));
    assert_eq!(d["state"], "waiting", "{d}");
    assert_eq!(d["running_here"], true, "{d}");
    let r = node.call("/durable/Waiter", "urn:dur:finish", "w1");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("finished w1"), "{}", r.text());
    assert_eq!(recorded(&seen).get("finished w1"), Some(&1));
    let r = admin("POST", &format!("/processes/instances/{id}/retry"));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("not faulted"), "{}", r.text());
    assert_eq!(admin("POST", "/processes/instances/12/retry").status, 404);
    assert_eq!(admin("POST", "/processes/instances/x/retry").status, 404);
    assert_eq!(admin("GET", "/processes/stored?state=lost").status, 400);
    assert_eq!(admin("GET", "/processes/stored?limit=0").status, 400);

    // Terminated while it waits: the row says so and its correlation is gone.
    assert_eq!(
        node.call("/durable/Waiter", "urn:dur:start", "w2").status,
        200
    );
    let waiting = json(admin("GET", "/processes/stored?state=waiting"));
    let id2 = waiting[0]["id"].as_u64().expect("a waiting instance");
    assert_eq!(
        admin("DELETE", &format!("/processes/instances/{id2}")).status,
        204
    );
    let ended = eventually(Duration::from_secs(5), || {
        json(admin("GET", &format!("/processes/instances/{id2}")))["state"] == "terminated"
    });
    assert!(ended);
    let r = node.call("/durable/Waiter", "urn:dur:finish", "w2");
    assert_eq!(r.status, 500, "{}", r.text());
    // SOAP 1.1: a `Client` fault whose detail names it.
    assert!(
        r.text().contains("<faultcode>soapenv:Client</faultcode>")
            && r.text()
                .contains("<detail><bb:noMatchingInstance xmlns:bb=\"urn:busbar:bpel\"/></detail>"),
        "{}",
        r.text()
    );
    assert_eq!(
        admin("DELETE", &format!("/processes/instances/{id2}")).status,
        404
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn finished_instances_go_after_their_retention_and_the_database_stays_small() {
    let dir = folder("PT0S");
    let db = dir.join("flows.db");
    let (recorder, seen) = recording_back_end();
    let config = |node: &Node| node.get("/processes/stored?limit=10000");
    let node = Node::start_with(&dir, "n1", &Db::Sqlite(&db), recorder, "retention: 1s", "");
    let mut sizes = Vec::new();
    for round in 0..3 {
        let n = 1000;
        for r in many(&node, n, |i| {
            (
                "/durable/Sleeper".into(),
                "urn:dur:sleep".into(),
                format!("r{round}-{i}"),
            )
        }) {
            assert_eq!(r.status, 200, "{}", r.text());
        }
        let all = eventually(Duration::from_secs(30), || {
            recorded(&seen).len() == (round + 1) * n
        });
        assert!(all, "{}", node.log_text());
        // Kept (completion: always) until the retention has passed, then deleted.
        let gone = eventually(Duration::from_secs(20), || {
            config(&node).text().trim() == "[]"
        });
        assert!(
            gone,
            "{}",
            config(&node).text().chars().take(300).collect::<String>()
        );
        sizes.push(
            std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0)
                + std::fs::metadata(dir.join("flows.db-wal"))
                    .map(|m| m.len())
                    .unwrap_or(0),
        );
    }
    // Pages freed by the deletions are used again: the third thousand does not grow the file.
    assert!(
        sizes[2] <= sizes[0] * 2,
        "database and log sizes by round: {sizes:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn in_memory_processes_stay_transient_and_a_changed_process_is_not_resumed() {
    let dir = folder("PT30S");
    // The Sleeper is marked in-memory in deploy.xml: never stored.
    let deploy = DEPLOY.replace(
        r#"<process name="p:Sleeper">"#,
        r#"<process name="p:Sleeper">
    <in-memory>true</in-memory>"#,
    );
    std::fs::write(dir.join("deploy.xml"), deploy).expect("deploy");
    let db = dir.join("flows.db");
    let (recorder, _) = recording_back_end();
    let mut node = Node::start(&dir, "n1", &Db::Sqlite(&db), recorder);
    assert_eq!(
        node.call("/durable/Sleeper", "urn:dur:sleep", "s1").status,
        200
    );
    assert_eq!(
        node.call("/durable/Waiter", "urn:dur:start", "w1").status,
        200
    );
    let stored: serde_json::Value =
        serde_json::from_slice(&node.get("/processes/stored").body).expect("json");
    let list = stored.as_array().expect("a list");
    assert_eq!(list.len(), 1, "{stored}");
    assert_eq!(list[0]["process"], "{urn:dur:proc}Waiter", "{stored}");
    assert_eq!(list[0]["state"], "waiting", "{stored}");
    let id = list[0]["id"].as_u64().expect("id");
    node.kill();

    // The process file changes while busbar is down: its saved instance cannot fit it.
    let bpel = WAITER.replace(
        "<reply partnerLink=\"client\" operation=\"start\" variable=\"in\"/>",
        "<empty/><reply partnerLink=\"client\" operation=\"start\" variable=\"in\"/>",
    );
    std::fs::write(dir.join("Waiter.bpel"), bpel).expect("bpel");
    let node = Node::start(&dir, "n1", &Db::Sqlite(&db), recorder);
    let faulted = eventually(Duration::from_secs(10), || {
        let d: serde_json::Value =
            serde_json::from_slice(&node.get(&format!("/processes/instances/{id}")).body)
                .unwrap_or_default();
        d["state"] == "faulted"
    });
    let d: serde_json::Value =
        serde_json::from_slice(&node.get(&format!("/processes/instances/{id}")).body)
            .expect("json");
    assert!(faulted, "{d}");
    assert_eq!(d["fault"]["name"], "resumeFailed", "{d}");
    let text = d["fault"]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("Waiter.bpel") && text.contains("changed"),
        "{d}"
    );
    assert!(
        node.log_text().contains("cannot resume the instance"),
        "{}",
        node.log_text()
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A durable instance's life counts from its first start across a restart: after a `kill -9`
/// it is shown with its whole age, and it ends when `instance_ttl` from its start has passed,
/// with a fault naming `instance_ttl` itself, not the part of it left at the restart.
#[test]
fn an_instance_resumed_after_a_restart_keeps_its_age_and_its_limit() {
    let dir = folder("PT30S");
    let db = dir.join("flows.db");
    let (recorder, _) = recording_back_end();
    let ttl = "    instance_ttl: 4s\n";
    let mut node = Node::start_with(&dir, "n1", &Db::Sqlite(&db), recorder, "", ttl);
    let started = std::time::Instant::now();
    assert_eq!(
        node.call("/durable/Sleeper", "urn:dur:sleep", "s1").status,
        200
    );
    let stored: serde_json::Value =
        serde_json::from_slice(&node.get("/processes/stored").body).expect("json");
    let id = stored[0]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("{stored}"));
    std::thread::sleep(Duration::from_millis(1500));
    node.kill();
    let node = Node::start_with(&dir, "n1", &Db::Sqlite(&db), recorder, "", ttl);
    let running: serde_json::Value =
        serde_json::from_slice(&node.get("/processes/instances").body).expect("json");
    let age = running[0]["age_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("{running}"));
    assert!(age >= 1500, "age counted from the restart: {running}");
    let faulted = eventually(Duration::from_secs(10), || {
        let d: serde_json::Value =
            serde_json::from_slice(&node.get(&format!("/processes/instances/{id}")).body)
                .unwrap_or_default();
        d["state"] == "faulted"
    });
    let lived = started.elapsed();
    let d: serde_json::Value =
        serde_json::from_slice(&node.get(&format!("/processes/instances/{id}")).body)
            .expect("json");
    assert!(faulted, "{d}");
    assert!(
        lived < Duration::from_secs(10),
        "it ran past its limit: {lived:?}"
    );
    assert_eq!(d["fault"]["name"], "instanceExpired", "{d}");
    assert_eq!(d["fault"]["text"], "the instance ran longer than 4s", "{d}");
    let _ = std::fs::remove_dir_all(dir);
}

/// More waiting instances than one claim takes (500): after a `kill -9` every one is taken
/// up once, the node gets ready, and each conversation and timer completes exactly once.
#[test]
fn a_restart_with_more_waiting_instances_than_a_claim_page_resumes_each_once() {
    let dir = folder("PT2S");
    let file = dir.join("flows.db");
    let db = Db::Sqlite(&file);
    let (recorder, seen) = recording_back_end();
    let (waiters, sleepers) = (620, 20);
    let mut node = Node::start(&dir, "n1", &db, recorder);
    for r in many(&node, waiters, |i| {
        (
            "/durable/Waiter".into(),
            "urn:dur:start".into(),
            format!("w{i}"),
        )
    }) {
        assert_eq!(r.status, 200, "{}", r.text());
    }
    for r in many(&node, sleepers, |i| {
        (
            "/durable/Sleeper".into(),
            "urn:dur:sleep".into(),
            format!("s{i}"),
        )
    }) {
        assert_eq!(r.status, 200, "{}", r.text());
    }
    node.kill();
    // Ready (200) within the 30 s `start` allows: the take-up ended.
    let node = Node::start(&dir, "n1", &db, recorder);
    for r in many(&node, waiters, |i| {
        (
            "/durable/Waiter".into(),
            "urn:dur:finish".into(),
            format!("w{i}"),
        )
    }) {
        assert_eq!(r.status, 200, "{}: {}", r.text(), node.log_text());
        assert!(r.text().contains("finished w"), "{}", r.text());
    }
    let all = eventually(Duration::from_secs(30), || {
        recorded(&seen).len() == waiters + sleepers
    });
    assert!(all, "{:?}\n{}", recorded(&seen), node.log_text());
    std::thread::sleep(Duration::from_millis(500));
    let got = recorded(&seen);
    for (text, n) in &got {
        assert_eq!(*n, 1, "{text} recorded {n} times");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The end of an instance cannot be written (PostgreSQL stopped): the reply it held is a
/// `persistenceFailed` fault, not a success the database does not hold; after a restart the
/// instance waits at its last saved point again.
#[test]
fn an_end_that_cannot_be_saved_answers_persistence_failed() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = folder("PT2S");
    let db = Db::Postgres(&pg);
    let (recorder, _seen) = recording_back_end();
    let mut node = Node::start(&dir, "n1", &db, recorder);
    let r = node.call("/durable/Waiter", "urn:dur:start", "p1");
    assert_eq!(r.status, 200, "{}", r.text());
    pg.stop().unwrap_or_else(|e| panic!("{e}"));
    let r = node.call("/durable/Waiter", "urn:dur:finish", "p1");
    assert_eq!(r.status, 500, "{}\n{}", r.text(), node.log_text());
    assert!(r.text().contains("persistenceFailed"), "{}", r.text());
    node.kill();
    pg.restart().unwrap_or_else(|e| panic!("{e}"));
    let node = Node::start(&dir, "n1", &db, recorder);
    let r = node.call("/durable/Waiter", "urn:dur:finish", "p1");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), node.log_text());
    assert!(r.text().contains("finished p1"), "{}", r.text());
    let _ = std::fs::remove_dir_all(dir);
}

/// A SQLite file keeps the instances of one busbar: a second one on the same file refuses
/// to start, naming it, while the first serves on and can still reload.
#[test]
fn a_second_busbar_on_the_same_sqlite_file_refuses_to_start() {
    let dir = folder("PT2S");
    let file = dir.join("flows.db");
    let db = Db::Sqlite(&file);
    let (recorder, _seen) = recording_back_end();
    let first = Node::start(&dir, "n1", &db, recorder);
    let yaml = std::fs::read_to_string(dir.join("n1.yaml")).expect("config");
    let (http, admin) = (free_addr(), free_addr());
    let yaml = yaml
        .replace(&first.http.to_string(), &http.to_string())
        .replace(&first.admin.to_string(), &admin.to_string())
        .replace("node: n1", "node: n2");
    let mut second = Node::spawn(&dir, "n2", http, admin, &yaml);
    let mut status = None;
    let ended = eventually(Duration::from_secs(30), || {
        status = second.child.try_wait().ok().flatten();
        status.is_some()
    });
    assert!(ended, "the second busbar runs: {}", second.log_text());
    assert!(status.is_some_and(|s| !s.success()), "{status:?}");
    let log = second.log_text();
    assert!(
        log.contains(&*file.to_string_lossy()) && log.contains("another running busbar"),
        "{log}"
    );
    // The first one is unharmed, and a reload (a new store beside the old one) is no
    // second holder.
    let mut c = Client::connect(first.admin);
    c.send_raw(b"POST /reload HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    let r = c.read_response().expect("reload");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), first.log_text());
    let r = first.call("/durable/Waiter", "urn:dur:start", "x1");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = first.call("/durable/Waiter", "urn:dur:finish", "x1");
    assert_eq!(r.status, 200, "{}", r.text());
    let _ = std::fs::remove_dir_all(dir);
}

/// A durable folder's PostgreSQL is down at start: its processes wait for the take-up, but
/// a transient folder's process answers at once.
#[test]
fn a_transient_process_does_not_wait_for_an_unreachable_store() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    pg.stop().unwrap_or_else(|e| panic!("{e}"));
    let dir = folder("PT2S");
    let other = temp_dir("transient");
    for name in ["durable.wsdl", "Waiter.bpel", "Sleeper.bpel", "deploy.xml"] {
        let text = std::fs::read_to_string(dir.join(name)).expect("read");
        let text = text
            .replace("urn:dur", "urn:tra")
            .replace("/durable/", "/transient/");
        std::fs::write(other.join(name), text).expect("write");
    }
    let (recorder, _seen) = recording_back_end();
    let (http, admin) = (free_addr(), free_addr());
    let yaml = format!(
        "workers: 1\nadmin: {{ bind: \"{admin}\" }}\nlisteners:\n  http: {{ bind: \"{http}\" }}\n\
         databases:\n  flows: {{ url: \"{}\" }}\n\
         endpoints:\n  recorder: {{ url: \"http://{recorder}/record\", timeout: 10s }}\n\
         processes:\n  Durable:\n    dir: {}\n    partners: {{ recorder: recorder }}\n    \
         persistence: {{ database: flows, node: n1, lease: 2s }}\n  \
         Transient:\n    dir: {}\n    partners: {{ recorder: recorder }}\n",
        pg.url(),
        dir.display(),
        other.display()
    );
    let node = Node::spawn(&dir, "n1", http, admin, &yaml);
    let up = eventually(Duration::from_secs(30), || {
        std::net::TcpStream::connect(node.http).is_ok()
    });
    assert!(up, "{}", node.log_text());
    let envelope = envelope("t1").replace("urn:dur", "urn:tra");
    let t0 = std::time::Instant::now();
    let r = Client::connect(node.http)
        .post(
            "/transient/Sleeper",
            &[
                ("Content-Type", "text/xml; charset=UTF-8"),
                ("SOAPAction", "urn:tra:sleep"),
            ],
            envelope.as_bytes(),
        )
        .expect("call");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), node.log_text());
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    let ready = Client::connect(node.admin).get("/readyz").expect("readyz");
    assert_eq!(ready.status, 503, "{}", ready.text());
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(other);
}

/// Waits for `node`'s process to end; its exit status.
fn ended(node: &mut Node) -> Option<std::process::ExitStatus> {
    let mut status = None;
    eventually(Duration::from_secs(30), || {
        status = node.child.try_wait().ok().flatten();
        status.is_some()
    });
    status
}

/// A second busbar process with the name of a live node on the same PostgreSQL database
/// refuses to start, naming the node and the setting, and runs none of its instances; a
/// node started again after a `kill -9` takes its instances back.
#[test]
fn a_second_process_with_a_live_nodes_name_on_postgres_refuses_to_start() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = folder("PT4S");
    let db = Db::Postgres(&pg);
    let (recorder, seen) = recording_back_end();
    let mut first = Node::start(&dir, "dup", &db, recorder);
    for i in 0..5 {
        let r = first.call("/durable/Sleeper", "urn:dur:sleep", &format!("d{i}"));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let yaml = std::fs::read_to_string(dir.join("dup.yaml")).expect("config");
    let (http, admin) = (free_addr(), free_addr());
    let yaml = yaml
        .replace(&first.http.to_string(), &http.to_string())
        .replace(&first.admin.to_string(), &admin.to_string());
    let mut second = Node::spawn(&dir, "dup2", http, admin, &yaml);
    let status = ended(&mut second);
    assert!(
        status.is_some_and(|s| !s.success()),
        "{status:?}: {}",
        second.log_text()
    );
    let log = second.log_text();
    assert!(
        log.contains("node 'dup' is run by another busbar process")
            && log.contains("persistence.node"),
        "{log}"
    );
    let all = eventually(Duration::from_secs(20), || recorded(&seen).len() == 5);
    assert!(all, "{:?}\n{}", recorded(&seen), first.log_text());
    std::thread::sleep(Duration::from_secs(1));
    let got = recorded(&seen);
    assert!(got.values().all(|n| *n == 1), "{got:?}");
    // A restart after a crash is no second process: the node takes its instances back.
    for i in 0..3 {
        let r = first.call("/durable/Sleeper", "urn:dur:sleep", &format!("r{i}"));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    first.kill();
    let again = Node::start(&dir, "dup", &db, recorder);
    let all = eventually(Duration::from_secs(20), || recorded(&seen).len() == 8);
    assert!(all, "{:?}\n{}", recorded(&seen), again.log_text());
    let _ = std::fs::remove_dir_all(dir);
}

/// An instance that a live node runs is that node's to terminate: a DELETE sent to another
/// node's admin API is refused with 409 naming the node, and the instance goes on; sent to
/// its own node it is terminated.
#[test]
fn a_delete_on_another_node_spares_an_instance_a_live_node_runs() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = folder("PT2S");
    let db = Db::Postgres(&pg);
    let (recorder, _seen) = recording_back_end();
    let a = Node::start(&dir, "a", &db, recorder);
    let b = Node::start(&dir, "b", &db, recorder);
    let admin = |node: &Node, method: &str, path: &str| {
        Client::connect(node.admin)
            .request(method, path, &[], b"")
            .expect("admin")
    };
    assert_eq!(a.call("/durable/Waiter", "urn:dur:start", "s1").status, 200);
    assert_eq!(a.call("/durable/Waiter", "urn:dur:start", "s2").status, 200);
    let waiting: serde_json::Value =
        serde_json::from_slice(&admin(&a, "GET", "/processes/stored?state=waiting").body)
            .expect("json");
    let ids: Vec<u64> = waiting
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|w| w["id"].as_u64())
        .collect();
    assert_eq!(ids.len(), 2, "{waiting}");
    let r = admin(&b, "DELETE", &format!("/processes/instances/{}", ids[0]));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("node 'a'"), "{}", r.text());
    let s1_or_s2 = |id: u64| {
        let d: serde_json::Value =
            serde_json::from_slice(&admin(&a, "GET", &format!("/processes/instances/{id}")).body)
                .expect("json");
        d["state"].as_str().unwrap_or("").to_owned()
    };
    assert_eq!(s1_or_s2(ids[0]), "waiting");
    // Both conversations go on at node a.
    for key in ["s1", "s2"] {
        let r = a.call("/durable/Waiter", "urn:dur:finish", key);
        assert_eq!(r.status, 200, "{}\n{}", r.text(), a.log_text());
    }
    // Its own node terminates a running instance.
    assert_eq!(a.call("/durable/Waiter", "urn:dur:start", "s3").status, 200);
    let waiting: serde_json::Value =
        serde_json::from_slice(&admin(&a, "GET", "/processes/stored?state=waiting").body)
            .expect("json");
    let id = waiting[0]["id"].as_u64().expect("a waiting instance");
    let r = admin(&a, "DELETE", &format!("/processes/instances/{id}"));
    assert_eq!(r.status, 204, "{}", r.text());
    let _ = std::fs::remove_dir_all(dir);
}

/// A node frozen (SIGSTOP) for longer than its lease wakes up to find its instances taken
/// over by the other node: it fences itself, running none of their timers, so each
/// instance's invoke happens once, on the node that took it.
#[test]
fn a_node_frozen_past_its_lease_leaves_the_instances_taken_over_to_the_other_node() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = folder("PT4S");
    let db = Db::Postgres(&pg);
    let (recorder, seen) = recording_back_end();
    let a = Node::start(&dir, "a", &db, recorder);
    let b = Node::start(&dir, "b", &db, recorder);
    let n = 10;
    for i in 0..n {
        let r = a.call("/durable/Sleeper", "urn:dur:sleep", &format!("f{i}"));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &a.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig}");
    };
    // Frozen for 5 s, past the 2 s lease: b takes the instances over and runs their timers
    // (due 4 s after their start) while a sleeps.
    signal("-STOP");
    std::thread::sleep(Duration::from_secs(5));
    signal("-CONT");
    let all = eventually(Duration::from_secs(20), || recorded(&seen).len() == n);
    assert!(all, "{:?}\n{}", recorded(&seen), b.log_text());
    std::thread::sleep(Duration::from_secs(3));
    let got = recorded(&seen);
    assert!(
        got.values().all(|c| *c == 1),
        "{got:?}\n{}\n{}",
        a.log_text(),
        b.log_text()
    );
    // Node a goes on serving new instances.
    let r = a.call("/durable/Sleeper", "urn:dur:sleep", "after");
    assert_eq!(r.status, 200, "{}", r.text());
    let done = eventually(Duration::from_secs(15), || {
        recorded(&seen).get("slept after") == Some(&1)
    });
    assert!(done, "{:?}\n{}", recorded(&seen), a.log_text());
    let _ = std::fs::remove_dir_all(dir);
}

/// PostgreSQL is down at start: a message for a conversation, and one that would start an
/// instance, wait for the take-up and then get a retryable 503 server fault saying the
/// store is not available yet, not a `noMatchingInstance` that tells the client to give up.
#[test]
fn messages_for_an_unreachable_store_get_a_retryable_503() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    pg.stop().unwrap_or_else(|e| panic!("{e}"));
    let dir = folder("PT2S");
    let (recorder, _seen) = recording_back_end();
    let (http, admin) = (free_addr(), free_addr());
    let yaml = format!(
        "workers: 1\nadmin: {{ bind: \"{admin}\" }}\nlisteners:\n  http: {{ bind: \"{http}\" }}\n\
         databases:\n  flows: {{ url: \"{}\" }}\n\
         endpoints:\n  recorder: {{ url: \"http://{recorder}/record\", timeout: 10s }}\n\
         processes:\n  Durable:\n    dir: {}\n    partners: {{ recorder: recorder }}\n    \
         persistence: {{ database: flows, node: n1, lease: 2s }}\n",
        pg.url(),
        dir.display(),
    );
    let node = Node::spawn(&dir, "n1", http, admin, &yaml);
    let up = eventually(Duration::from_secs(30), || {
        std::net::TcpStream::connect(node.http).is_ok()
    });
    assert!(up, "{}", node.log_text());
    std::thread::scope(|s| {
        for (action, key) in [("urn:dur:finish", "q1"), ("urn:dur:start", "q2")] {
            let node = &node;
            s.spawn(move || {
                let r = node.call("/durable/Waiter", action, key);
                assert_eq!(r.status, 503, "{action}: {}", r.text());
                let t = r.text();
                // A server-side fault: SOAP 1.1 gives its own name as the faultcode (SOAP
                // 1.2 a `Receiver` code with it as the subcode), never `Client`.
                assert!(
                    t.contains("bb:storeUnavailable</faultcode>")
                        && !t.contains("Client")
                        && t.contains("not available yet"),
                    "{action}: {t}"
                );
            });
        }
    });
    let _ = std::fs::remove_dir_all(dir);
}
