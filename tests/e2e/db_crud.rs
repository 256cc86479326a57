//! `examples/db-crud.yaml` run as a user would, on SQLite and on a real PostgreSQL server
//! started by the test, with the same cases; and the `sql` step's parameter sources.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use busbar_sql::testing::TempPostgres;
use serde_json::{json, Value};

use crate::support::*;

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn on_sqlite() -> (Example, std::path::PathBuf) {
    let dir = temp_dir("dbcrud");
    let file = dir.join("crud.sqlite");
    let ex = Example::start(
        "db-crud.yaml",
        &[
            ("BUSBAR_DB_FILE", file.to_str().expect("path")),
            ("BUSBAR_DB_POOL", "4"),
        ],
    );
    wait_ready(&ex);
    (ex, dir)
}

fn on_postgres(pg: &TempPostgres) -> Example {
    let ex = Example::start(
        "db-crud.yaml",
        &[("BUSBAR_DB_URL", &pg.url()), ("BUSBAR_DB_POOL", "4")],
    );
    wait_ready(&ex);
    ex
}

fn admin(ex: &Example) -> SocketAddr {
    ex.addrs["BUSBAR_ADMIN"]
}

/// `/readyz` answers 200 once the database is initialised (PostgreSQL's seeding runs in the
/// background).
fn wait_ready(ex: &Example) {
    let ok = eventually(Duration::from_secs(60), || {
        Client::connect(admin(ex))
            .get("/readyz")
            .is_ok_and(|r| r.status == 200)
    });
    assert!(ok, "the example never became ready");
}

fn call(ex: &Example, method: &str, path: &str, body: Option<Value>) -> (u16, Value, Resp) {
    let mut c = Client::connect(ex.listen());
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let r = c.request(method, path, &[JSON], &bytes).expect("response");
    let v = if r.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
    };
    (r.status, v, r)
}

/// Seed customer `n`, as docs/databases.md defines it (the bench kit's `db-read` expectation).
fn seed(n: i64) -> Value {
    busbar_bench::db::seed_row(n as u64)
}

/// Equal as JSON, numbers compared by value (PostgreSQL writes a NUMERIC(14,2) 100.5 as
/// 100.50, SQLite as 100.5).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        _ => a == b,
    }
}

fn without(mut v: Value, keys: &[&str]) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in keys {
            o.remove(*k);
        }
    }
    v
}

/// Every path and status of the example, on whichever database it runs.
fn crud_suite(ex: &Example) {
    // Reads of seeded rows, by the documented formula.
    for n in [1, 2, 42, 86_400, 99_999, 100_000] {
        let (status, row, r) = call(ex, "GET", &format!("/api/customers/{n}"), None);
        assert_eq!(status, 200, "{n}: {}", r.text());
        assert!(same(&row, &seed(n)), "{n}: {row} vs {}", seed(n));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    let (status, e, _) = call(ex, "GET", "/api/customers/abc", None);
    assert_eq!(status, 400, "{e}");
    assert!(
        e["title"].as_str().is_some_and(|t| t.contains("'id'")),
        "{e}"
    );
    assert_eq!(call(ex, "GET", "/api/customers/9999999", None).0, 404);
    assert_eq!(call(ex, "GET", "/api/customers/1.5", None).0, 400);

    // Create: 201 with the row and its new id; defaults filled in.
    let ada = json!({"first_name": "Ada", "last_name": "Lovelace", "email": "ada@example.com",
                     "balance": 100.5, "city": "London", "country": "UK", "active": true});
    let (status, created, r) = call(ex, "POST", "/api/customers", Some(ada.clone()));
    assert_eq!(status, 201, "{}", r.text());
    let id = created["id"].as_i64().expect("id");
    assert!(id > 100_000, "{created}");
    assert!(
        same(
            &without(created.clone(), &["id", "created_at"]),
            &json!({"first_name": "Ada", "last_name": "Lovelace", "email": "ada@example.com",
                "tier": "standard", "city": "London", "country": "UK", "balance": 100.5,
                "active": true})
        ),
        "{created}"
    );
    let stamp = created["created_at"].as_str().expect("created_at");
    assert!(
        stamp.len() >= 20 && stamp.as_bytes()[10] == b'T' && stamp.ends_with('Z'),
        "not RFC 3339 with a zone: {stamp}"
    );
    let (_, read, _) = call(ex, "GET", &format!("/api/customers/{id}"), None);
    assert!(same(&read, &created), "{read} vs {created}");

    // Duplicate email → 409; bad or missing fields → 400; nothing is written.
    let (status, e, _) = call(ex, "POST", "/api/customers", Some(ada.clone()));
    assert_eq!(status, 409, "{e}");
    assert!(!e.to_string().to_lowercase().contains("insert"), "{e}");
    for bad in [
        json!({"first_name": "B", "last_name": "C"}),
        json!({"first_name": "B", "last_name": "C", "email": "b@x", "balance": "lots"}),
        json!({"first_name": 7, "last_name": "C", "email": "b@x"}),
        json!({"first_name": "B", "last_name": "C", "email": "b@x", "active": "yes"}),
        json!([1, 2]),
    ] {
        let (status, e, _) = call(ex, "POST", "/api/customers", Some(bad.clone()));
        assert_eq!(status, 400, "{bad}: {e}");
    }
    let mut c = Client::connect(ex.listen());
    let r = c
        .request("POST", "/api/customers", &[JSON], b"{\"first_name\": ")
        .expect("response");
    assert_eq!(r.status, 400, "{}", r.text());
    let (_, list, _) = call(ex, "GET", &format!("/api/customers?after={}", id - 1), None);
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");

    // Replace: the whole row (omitted fields take their defaults); 404 and 409 and 400.
    let put = json!({"first_name": "Ada", "last_name": "King", "email": "ada@example.com"});
    let (status, replaced, _) = call(
        ex,
        "PUT",
        &format!("/api/customers/{id}"),
        Some(put.clone()),
    );
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["last_name"], "King");
    assert_eq!(replaced["city"], Value::Null);
    assert!(same(&replaced["balance"], &json!(0)), "{replaced}");
    assert_eq!(replaced["created_at"], created["created_at"]);
    assert_eq!(
        call(ex, "PUT", "/api/customers/9999999", Some(put.clone())).0,
        404
    );
    let taken = json!({"first_name": "A", "last_name": "B", "email": "customer7@example.com"});
    assert_eq!(
        call(ex, "PUT", &format!("/api/customers/{id}"), Some(taken)).0,
        409
    );
    assert_eq!(call(ex, "PUT", "/api/customers/x", Some(put)).0, 400);

    // Delete: 204, then 404.
    let (status, _, r) = call(ex, "DELETE", &format!("/api/customers/{id}"), None);
    assert_eq!(status, 204, "{}", r.text());
    assert!(r.body.is_empty());
    assert_eq!(
        call(ex, "DELETE", &format!("/api/customers/{id}"), None).0,
        404
    );
    assert_eq!(
        call(ex, "GET", &format!("/api/customers/{id}"), None).0,
        404
    );

    // Keyset pagination.
    let (_, first, _) = call(ex, "GET", "/api/customers", None);
    let ids: Vec<i64> = first
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|r| r["id"].as_i64())
        .collect();
    assert_eq!(ids, (1..=100).collect::<Vec<_>>());
    let (_, page, _) = call(ex, "GET", "/api/customers?after=5&limit=2", None);
    assert!(same(&page, &json!([seed(6), seed(7)])), "{page}");
    let (_, big, r) = call(ex, "GET", "/api/customers?limit=5000", None);
    assert_eq!(big.as_array().map(Vec::len), Some(1000), "capped at 1,000");
    assert!(
        r.header("transfer-encoding").is_some(),
        "1,000 rows are streamed"
    );
    for (i, row) in big.as_array().expect("array").iter().enumerate() {
        assert!(same(row, &seed(i as i64 + 1)), "{row}");
    }
    assert_eq!(call(ex, "GET", "/api/customers?limit=ten", None).0, 400);
    assert_eq!(
        call(ex, "GET", "/api/customers?after=0%20OR%201=1", None).0,
        400
    );

    // Orders: a batch is inserted whole or not at all.
    let batch = json!([
        {"customer_id": 1, "item": "pen", "quantity": 2, "price": 1.5},
        {"customer_id": 2, "item": "ink", "quantity": 1, "price": 9.99, "status": "paid"}
    ]);
    let (status, made, r) = call(ex, "POST", "/orders", Some(batch));
    assert_eq!(status, 201, "{}", r.text());
    let made = made.as_array().expect("array").clone();
    assert_eq!(made.len(), 2);
    assert_eq!(made[0]["item"], "pen");
    assert_eq!(made[0]["status"], "new");
    assert_eq!(made[1]["status"], "paid");
    let before = call(ex, "GET", "/orders?limit=1000", None).1;
    for (bad, want) in [
        (
            json!([{"customer_id": 1, "item": "a", "quantity": 1, "price": 1},
                   {"customer_id": 1, "item": "b", "quantity": "x", "price": 1}]),
            400,
        ),
        (
            json!([{"customer_id": 1, "item": "a", "quantity": 1, "price": 1},
                   {"customer_id": 1, "item": "b", "quantity": 0, "price": 1}]),
            400,
        ),
        (
            json!([{"customer_id": 1, "item": "a", "quantity": 1, "price": 1},
                   {"customer_id": 99999999, "item": "b", "quantity": 1, "price": 1}]),
            409,
        ),
        // Not an array: refused on both databases, not created as nothing.
        (
            json!({"customer_id": 1, "item": "a", "quantity": 1, "price": 1}),
            400,
        ),
        (json!("pen"), 400),
    ] {
        let (status, e, _) = call(ex, "POST", "/orders", Some(bad.clone()));
        assert_eq!(status, want, "{bad}: {e}");
    }
    assert_eq!(
        call(ex, "GET", "/orders?limit=1000", None).1,
        before,
        "a failed batch left rows"
    );
    let oid = made[0]["id"].as_i64().expect("order id");
    let (status, got, _) = call(ex, "GET", &format!("/orders/{oid}"), None);
    assert_eq!(status, 200);
    assert!(same(&got, &made[0]), "{got}");
    let (status, upd, _) = call(
        ex,
        "PUT",
        &format!("/orders/{oid}"),
        Some(
            json!({"customer_id": 1, "item": "pen", "quantity": 5, "price": 2.25, "status": "paid"}),
        ),
    );
    assert_eq!(status, 200, "{upd}");
    assert_eq!(upd["quantity"], 5);
    // A customer with orders cannot go.
    assert_eq!(call(ex, "DELETE", "/api/customers/1", None).0, 409);
    assert_eq!(call(ex, "DELETE", &format!("/orders/{oid}"), None).0, 204);
    assert_eq!(call(ex, "GET", &format!("/orders/{oid}"), None).0, 404);

    // Injection through a JSON field: stored as written, the table is still there.
    let evil = "x'); DROP TABLE customers; --";
    let (status, row, _) = call(
        ex,
        "POST",
        "/api/customers",
        Some(
            json!({"first_name": evil, "last_name": "\"; DELETE FROM customers; --", "email": "evil@x"}),
        ),
    );
    assert_eq!(status, 201, "{row}");
    assert_eq!(row["first_name"], evil);
    assert_eq!(call(ex, "GET", "/api/customers/100000", None).0, 200);
}

/// A value the table refuses: the client gets the safe message, and the log has the
/// database's own, naming the constraint, once and at the default level, without the values
/// the request bound.
#[test]
fn a_refused_value_logs_the_databases_message_once_without_the_values() {
    let dir = temp_dir("dbcrud-log");
    let file = dir.join("crud.sqlite");
    let ex = Example::start(
        "db-crud.yaml",
        &[
            ("BUSBAR_DB_FILE", file.to_str().expect("path")),
            ("BUSBAR_DB_POOL", "1"),
            ("BUSBAR_LOG", "info"),
        ],
    );
    wait_ready(&ex);
    let secret = "item-s3cret-7f3a";
    let order = json!([{"customer_id": 1, "item": secret, "quantity": 0, "price": 1}]);
    let (status, problem, r) = call(&ex, "POST", "/orders", Some(order));
    assert_eq!(status, 400, "{}", r.text());
    let shown = problem.to_string();
    assert!(
        shown.contains("A value is outside what the table accepts"),
        "{shown}"
    );
    assert!(!shown.contains("CHECK"), "SQL reached the client: {shown}");
    let check = "CHECK constraint failed: typeof(quantity) = 'integer' AND quantity > 0";
    assert!(
        eventually(Duration::from_secs(5), || ex.log().contains(check)),
        "the database's message is not in the log:\n{}",
        ex.log()
    );
    let log = ex.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(check)).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("INFO"), "{}", lines[0]);
    assert!(lines[0].contains("OrderCreate"), "{}", lines[0]);
    assert!(
        !log.contains(secret),
        "a bound value reached the log:\n{log}"
    );
}

/// 200 writers at once: every row is there once, with what its writer sent.
fn concurrent_writers(ex: &Example) {
    let addr = ex.listen();
    let handles: Vec<_> = (0..200)
        .map(|i| {
            std::thread::spawn(move || {
                let body = json!({"first_name": format!("W{i}"), "last_name": "Writer",
                                  "email": format!("writer{i}@example.com"), "balance": i});
                let mut c = Client::connect(addr);
                c.request(
                    "POST",
                    "/api/customers",
                    &[JSON],
                    body.to_string().as_bytes(),
                )
                .map(|r| r.status)
                .unwrap_or(0)
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap_or(0)).collect();
    assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
    let (_, rows, _) = call(ex, "GET", "/api/customers?after=100000&limit=1000", None);
    let mut seen: Vec<(String, f64)> = rows
        .as_array()
        .expect("array")
        .iter()
        .filter(|r| r["last_name"] == "Writer")
        .map(|r| {
            (
                r["email"].as_str().unwrap_or_default().to_owned(),
                r["balance"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want: Vec<(String, f64)> = (0..200)
        .map(|i| (format!("writer{i}@example.com"), f64::from(i)))
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(seen, want, "lost, duplicated or changed rows");
}

fn in_use(ex: &Example) -> Option<f64> {
    metric(
        admin(ex),
        "busbar_database_connections_in_use{database=\"main\"}",
    )
}

/// 1,000 clients leave mid-request or mid-answer; the pool is whole again afterwards.
fn clients_abort(ex: &Example) {
    use std::io::Write;
    let addr = ex.listen();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..250 {
                    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
                        continue;
                    };
                    let req = if (t + i) % 2 == 0 {
                        // A long answer, never read.
                        "GET /api/customers?limit=1000 HTTP/1.1\r\nHost: t\r\n\r\n".to_owned()
                    } else {
                        // A body announced and never finished.
                        "POST /api/customers HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"first_name\":".to_owned()
                    };
                    let _ = s.write_all(req.as_bytes());
                    if i % 3 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    drop(s);
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    assert!(
        eventually(Duration::from_secs(20), || in_use(ex) == Some(0.0)),
        "connections still in use: {:?}",
        in_use(ex)
    );
    assert_eq!(
        metric(admin(ex), "busbar_database_pool_size{database=\"main\"}"),
        Some(4.0)
    );
    assert_eq!(call(ex, "GET", "/api/customers/5", None).0, 200);
}

#[test]
fn db_crud_on_sqlite() {
    let (ex, _dir) = on_sqlite();
    crud_suite(&ex);
    concurrent_writers(&ex);
    clients_abort(&ex);
}

#[test]
fn db_crud_on_postgres() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let ex = on_postgres(&pg);
    crud_suite(&ex);
    concurrent_writers(&ex);
    clients_abort(&ex);
}

/// Sends `signal` to process `pid` with kill(1).
fn signal(pid: u32, signal: &str) {
    let ok = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {signal} {pid}");
}

/// A server that accepts connections and answers nothing (its postmaster stopped with
/// SIGSTOP, as a hung host would be) is reported down once a probe has waited
/// `connect_timeout` for it, and up again once it answers; the probe never waits on it for
/// good.
#[test]
fn a_postgres_server_that_answers_nothing_is_reported_down_then_up() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let ex = on_postgres(&pg);
    let pid = pg.server_pid().expect("the server's pid");
    /// Lets the server run again however the test ends.
    struct Resume(u32);
    impl Drop for Resume {
        fn drop(&mut self) {
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &self.0.to_string()])
                .status();
        }
    }
    signal(pid, "-STOP");
    let resume = Resume(pid);
    let readyz = || Client::connect(admin(&ex)).get("/readyz").expect("readyz");
    // The example's connect_timeout is 5 s, and a probe runs every 2 s.
    assert!(
        eventually(Duration::from_secs(20), || readyz().status == 503),
        "still ready: {}",
        readyz().text()
    );
    assert!(
        readyz().text().contains("database main"),
        "{}",
        readyz().text()
    );
    assert_eq!(
        metric(admin(&ex), "busbar_database_up{database=\"main\"}"),
        Some(0.0)
    );
    drop(resume);
    assert!(
        eventually(Duration::from_secs(20), || readyz().status == 200),
        "not ready again: {}",
        readyz().text()
    );
}

/// The server stops under load: requests fail fast with 503 while it is down, and succeed
/// again once it is back; no request hangs and no connection is lost from the pool.
#[test]
fn postgres_restarted_under_load() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let ex = on_postgres(&pg);
    let addr = ex.listen();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let started = Instant::now();
                    let mut c = Client::connect(addr);
                    let status = c
                        .get(&format!("/api/customers/{}", 1 + (t * 1000 + n) % 100_000))
                        .map(|r| (r.status, r.header("retry-after").map(str::to_owned)))
                        .unwrap_or((0, None));
                    seen.push((status, started.elapsed()));
                }
                seen
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    pg.stop().unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_secs(2));
    let down = Client::connect(admin(&ex)).get("/readyz").expect("readyz");
    assert_eq!(down.status, 503, "{}", down.text());
    assert!(down.text().contains("database main"), "{}", down.text());
    pg.restart().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        eventually(Duration::from_secs(20), || {
            call(&ex, "GET", "/api/customers/9", None).0 == 200
        }),
        "no recovery"
    );
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen: Vec<_> = load
        .into_iter()
        .flat_map(|h| h.join().unwrap_or_default())
        .collect();
    let statuses: std::collections::BTreeSet<u16> = seen.iter().map(|s| s.0 .0).collect();
    assert!(
        statuses.contains(&200) && statuses.contains(&503),
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| [200, 503].contains(s)),
        "unexpected answers: {statuses:?}"
    );
    for ((status, retry), took) in &seen {
        assert!(*took < Duration::from_secs(5), "a request hung {took:?}");
        if *status == 503 {
            assert_eq!(retry.as_deref(), Some("1"));
        }
    }
    assert!(eventually(Duration::from_secs(10), || in_use(&ex) == Some(0.0)));
    assert!(eventually(Duration::from_secs(10), || Client::connect(
        admin(&ex)
    )
    .get("/readyz")
    .is_ok_and(|r| r.status == 200)));
}

/// Reloads of a config with a PostgreSQL database, the same file each time, under a steady
/// load: every request is answered from the database, none refused while a new pool connects.
#[test]
fn postgres_reloads_under_load_refuse_no_request() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let ex = on_postgres(&pg);
    let addr = ex.listen();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
                let mut c = Client::connect(addr);
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let status = c
                        .get(&format!("/api/customers/{}", 1 + (t * 1000 + n) % 100_000))
                        .map_or(0, |r| r.status);
                    *statuses.entry(status).or_default() += 1;
                    if status == 0 {
                        c = Client::connect(addr);
                    }
                }
                statuses
            })
        })
        .collect();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(100));
        let r = Client::connect(admin(&ex))
            .request("POST", "/reload", &[], b"")
            .expect("reload");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all = std::collections::BTreeMap::<u16, usize>::new();
    for h in load {
        for (status, n) in h.join().unwrap_or_default() {
            *all.entry(status).or_default() += n;
        }
    }
    assert_eq!(all.keys().copied().collect::<Vec<_>>(), [200], "{all:?}");
    assert!(all[&200] > 100, "{all:?}");
}

/// Values from every source are bound, never spliced: a hostile value through the path, the
/// query, a header and the JSON body is stored as written.
#[test]
fn every_parameter_source_binds_values_as_data() {
    let h = engine(
        r#"
databases:
  db: { path: ":memory:" }
proxies:
  P:
    path: /inj/{p}
    in:
      - sql:
          database: db
          transaction:
            - query: "CREATE TABLE IF NOT EXISTS t (src TEXT NOT NULL, v TEXT)"
            - query: "INSERT INTO t (src, v) VALUES ('path', :p), ('query', :q), ('header', :h), ('json', :j), ('literal', :l)"
            - query: "SELECT src, v, (SELECT count(*) FROM t) AS n FROM t ORDER BY rowid DESC LIMIT 5"
          params:
            p: { path: p }
            q: { query: q }
            h: { header: x-v }
            j: { json: "$.v" }
            l: { value: "x'; --" }
          result: rows
"#,
    );
    let evil = "a'); DROP TABLE t; --";
    let enc = "a%27)%3B%20DROP%20TABLE%20t%3B%20--";
    let mut c = Client::connect(h.http());
    for round in 1..=2 {
        let body = json!({"v": evil}).to_string();
        let r = c
            .request(
                "POST",
                &format!("/inj/{enc}?q={enc}"),
                &[JSON, ("x-v", evil)],
                body.as_bytes(),
            )
            .expect("response");
        assert_eq!(r.status, 200, "{}", r.text());
        let rows: Value = serde_json::from_slice(&r.body).expect("json");
        let rows = rows.as_array().expect("array");
        assert_eq!(rows.len(), 5);
        for row in rows {
            let want = if row["src"] == "literal" {
                "x'; --"
            } else {
                evil
            };
            assert_eq!(row["v"], want, "{row}");
            assert_eq!(row["n"], 5 * round);
        }
    }
    // A missing value is a 400 naming it; nothing reaches the database.
    let r = c
        .request(
            "POST",
            &format!("/inj/{enc}"),
            &[JSON, ("x-v", "1")],
            b"{\"v\":1}",
        )
        .expect("response");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text()
            .contains("Parameter 'q' is missing (query parameter 'q')"),
        "{}",
        r.text()
    );
}

/// Build errors name the step, the parameter and the line.
#[test]
fn sql_config_errors_name_their_place() {
    let dir = temp_dir("sqlcfg");
    let (code, out) = validate_in(
        &dir,
        r#"
listeners:
  http: { bind: "127.0.0.1:0" }
databases:
  db: { path: ":memory:" }
proxies:
  P:
    path: /p
    in:
      - sql:
          database: db
          query: "SELECT * FROM t WHERE a = :a AND b = :b"
          params:
            a: { path: a, query: a }
            c: { value: 1 }
      - sql: { database: nope, query: "SELECT 1" }
      - sql: { database: db, query: "SELECT 'open" }
"#,
    );
    assert_eq!(code, Some(1), "{out}");
    for want in [
        "proxies.P.in[0].sql.params.a: give exactly one of path, query, header, json, var or value (found path, query)",
        "proxies.P.in[1].sql.database: unknown database 'nope'",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // Once the structure is right, building finds the statements' own problems.
    let (code, out) = validate_in(
        &dir,
        r#"
listeners:
  http: { bind: "127.0.0.1:0" }
databases:
  db: { path: ":memory:" }
proxies:
  P:
    path: /p
    in:
      - sql:
          database: db
          query: "SELECT * FROM t WHERE a = :a AND b = :b"
          params:
            a: { path: a }
            c: { value: 1 }
      - sql: { database: db, query: "SELECT 'open" }
      - sql:
          database: db
          query: { postgres: "SELECT 1" }
"#,
    );
    assert_eq!(code, Some(1), "{out}");
    for want in [
        "proxies.P.in[0].sql.query: parameter ':b' has no entry in params",
        "proxies.P.in[0].sql.params.c: no statement has a parameter ':c'",
        "proxies.P.in[1].sql.query: unterminated string literal",
        "proxies.P.in[2].sql.query: no statement for a sqlite database",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

/// Database credentials never show: not in `/config`, not in `/readyz`; an unreachable
/// server does not stop the start, and `/readyz` names it.
#[test]
fn database_secrets_stay_hidden_and_an_unreachable_server_is_not_ready() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let h = engine(&format!(
        r#"
databases:
  a: {{ url: "postgres://dave:db-pw-9@127.0.0.1:{port}/x", connect_timeout: 1s }}
  b: {{ host: 127.0.0.1, port: {port}, user: erin, password: "db-pw-10", dbname: y }}
proxies:
  P:
    path: /p
    in:
      - sql: {{ database: a, query: "SELECT 1 AS one", result: row }}
"#
    ));
    let cfg = Client::connect(h.admin())
        .get("/config")
        .expect("config")
        .text();
    for secret in ["db-pw-9", "db-pw-10", "dave"] {
        assert!(!cfg.contains(secret), "{secret} shows in /config:\n{cfg}");
    }
    assert!(cfg.contains("postgres://<redacted>@127.0.0.1"), "{cfg}");
    assert!(
        eventually(Duration::from_secs(10), || {
            let r = Client::connect(h.admin()).get("/readyz").expect("readyz");
            r.status == 503 && r.text().contains("database a") && r.text().contains("database b")
        }),
        "readyz does not name the databases"
    );
    let ready = Client::connect(h.admin())
        .get("/readyz")
        .expect("readyz")
        .text();
    assert!(!ready.contains("db-pw"), "{ready}");
    let r = Client::connect(h.http()).get("/p").expect("answer");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(
        !r.text().contains("db-pw") && !r.text().contains("SELECT"),
        "{}",
        r.text()
    );
}

/// `tls: require` with `tls_ca`: the engine's connections to PostgreSQL are encrypted.
#[test]
fn postgres_over_tls_from_the_config() {
    let pg = TempPostgres::start_tls().unwrap_or_else(|e| panic!("{e}"));
    let h = engine(&format!(
        r#"
databases:
  db: {{ url: "{}", tls: require, tls_ca: "{}" }}
proxies:
  P:
    path: /ssl
    in:
      - sql: {{ database: db, query: "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", result: row }}
"#,
        pg.url(),
        pg.ca().display()
    ));
    let mut answer = String::new();
    let ok = eventually(Duration::from_secs(20), || {
        let r = Client::connect(h.http()).get("/ssl").expect("answer");
        answer = r.text();
        r.status == 200
    });
    assert!(ok, "{answer}");
    assert_eq!(answer, r#"{"ssl":true}"#);
}

/// The kit's db-read checks every row against the seed formula, and db-write checks every
/// answer and reads every written row back; a row that is not what the seed says is caught.
#[test]
fn the_bench_kit_reads_and_writes_the_example_and_verifies_it() {
    let (ex, _dir) = on_sqlite();
    let url = format!("http://{}/api/customers", ex.listen());
    let args = |scenario: &'static str, n: &'static str| {
        vec![
            "load",
            "URL",
            "--suite",
            "integrator",
            "--verify",
            scenario,
            "-n",
            n,
            "-c",
            "8",
            "--seed",
            "7",
        ]
    };
    let run = |scenario, n| {
        let a: Vec<&str> = args(scenario, n)
            .into_iter()
            .map(|x| if x == "URL" { url.as_str() } else { x })
            .collect();
        let (status, text) = bench(&a);
        (status.success(), text)
    };
    let (ok, text) = run("db-read", "3000");
    assert!(
        ok && text.contains("3000 ok") && text.contains("verify 0"),
        "{text}"
    );
    let (ok, text) = run("db-write", "2000");
    assert!(
        ok && text.contains("2000 ok") && text.contains("verify 0"),
        "{text}"
    );
    assert!(
        text.contains("read back: 1000 replaced rows as written; 1000 of 1000 inserts"),
        "{text}"
    );
    // One row of db-read's rotation changed behind its back: the run reports it.
    let id = busbar_bench::db::read_ids(busbar_bench::db::READ_IDS, 7)[0];
    let changed = json!({"first_name": "Changed", "last_name": "Row", "email": format!("customer{id}@example.com")});
    assert_eq!(
        call(&ex, "PUT", &format!("/api/customers/{id}"), Some(changed)).0,
        200
    );
    let (_, text) = run("db-read", "2000");
    assert!(
        !text.contains("verify 0"),
        "a changed row went unnoticed: {text}"
    );
}

/// A table changes under the statements a connection has cached (`SELECT *` after one
/// column is dropped and another added): the next answer has the new columns under their
/// own names, on the one connection of the pool that ran the statement before.
fn a_schema_change_is_seen_by_cached_statements(database: &str) {
    let h = engine(&format!(
        r#"
databases:
  db: {database}
proxies:
  Setup:
    path: /setup
    methods: [POST]
    in:
      - sql:
          database: db
          transaction:
            - query: "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER)"
            - query: "INSERT INTO items (id, name, qty) VALUES (1, 'a', 5)"
          result: affected
  Alter:
    path: /alter
    methods: [POST]
    in:
      - sql:
          database: db
          transaction:
            - query: "ALTER TABLE items DROP COLUMN qty"
            - query: "ALTER TABLE items ADD COLUMN secret TEXT DEFAULT 'SECRET'"
          result: affected
  Get:
    path: /items/{{id}}
    methods: [GET]
    in:
      - sql:
          database: db
          query: "SELECT * FROM items WHERE id = :id"
          params: {{ id: {{ path: id, type: int }} }}
          result: row
"#
    ));
    let post = |path: &str| {
        Client::connect(h.http())
            .request("POST", path, &[JSON], b"")
            .expect("answer")
    };
    let ready = eventually(Duration::from_secs(30), || post("/setup").status == 200);
    assert!(ready, "{}", post("/setup").text());
    let get = || {
        let r = Client::connect(h.http()).get("/items/1").expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice::<Value>(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
    };
    assert_eq!(get(), json!({"id": 1, "name": "a", "qty": 5}));
    let r = post("/alter");
    assert_eq!(r.status, 200, "{}", r.text());
    for _ in 0..3 {
        assert_eq!(get(), json!({"id": 1, "name": "a", "secret": "SECRET"}));
    }
}

#[test]
fn sqlite_answers_after_a_schema_change_name_the_new_columns() {
    let dir = temp_dir("schema");
    let file = dir.join("s.sqlite");
    a_schema_change_is_seen_by_cached_statements(&format!(
        "{{ path: \"{}\", pool: 1 }}",
        file.display()
    ));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn postgres_answers_after_a_schema_change_instead_of_failing_until_restart() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    a_schema_change_is_seen_by_cached_statements(&format!("{{ url: \"{}\", pool: 1 }}", pg.url()));
}

/// JSON numbers an `i64` or a double does not hold exactly reach the database with their
/// written digits (PostgreSQL) or are refused naming the parameter (SQLite), never rounded.
fn long_numbers(database: &str, query: &str) -> Vec<(u16, String)> {
    let h = engine(&format!(
        r#"
databases:
  db: {database}
proxies:
  Echo:
    path: /echo
    methods: [POST]
    in:
      - sql:
          database: db
          query: "{query}"
          params: {{ v: {{ json: "$.v" }} }}
          result: row
"#
    ));
    let mut out = Vec::new();
    for v in [
        "9223372036854775807",
        "9223372036854775808",
        "12345678901234567890.12345",
        "0.1",
        "-2.5e-3",
        "0.10000000000000000001",
        // More digits than a double holds, where a parser that rounds loosely found the
        // double it reads back as, so the digits were dropped for a wrong double.
        "57537.54751533645048055",
        "1.7976931348623157e308",
    ] {
        let body = format!(r#"{{"note": "1.5 \" 7", "list": [1, 2.5], "v": {v}}}"#);
        let answer = eventually(Duration::from_secs(30), || {
            let r = Client::connect(h.http())
                .request("POST", "/echo", &[JSON], body.as_bytes())
                .expect("answer");
            if r.status == 503 {
                return false;
            }
            out.push((r.status, r.text()));
            true
        });
        assert!(answer, "{v}: the database never answered");
    }
    out
}

#[test]
fn sqlite_refuses_numbers_it_cannot_hold_exactly() {
    let got = long_numbers(r#"{ path: ":memory:" }"#, "SELECT :v AS v");
    let want_ok = [
        (0, r#"{"v":9223372036854775807}"#),
        (3, r#"{"v":0.1}"#),
        (4, r#"{"v":-0.0025}"#),
        // The largest double, written as short as it reads back (not in 309 digits).
        (7, r#"{"v":1.7976931348623157e308}"#),
    ];
    for (i, body) in want_ok {
        assert_eq!(got[i], (200, body.to_owned()), "{got:?}");
    }
    for i in [1, 2, 5, 6] {
        assert_eq!(got[i].0, 400, "{got:?}");
        assert!(
            got[i].1.contains("Parameter 'v'") && got[i].1.contains("send it as a string"),
            "{got:?}"
        );
    }
}

#[test]
fn postgres_binds_long_numbers_with_their_written_digits() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let got = long_numbers(
        &format!("{{ url: \"{}\" }}", pg.url()),
        "SELECT CAST(:v AS numeric) AS v",
    );
    let want = [
        r#"{"v":9223372036854775807}"#,
        r#"{"v":9223372036854775808}"#,
        r#"{"v":12345678901234567890.12345}"#,
        r#"{"v":0.1}"#,
        r#"{"v":-0.0025}"#,
        r#"{"v":0.10000000000000000001}"#,
        r#"{"v":57537.54751533645048055}"#,
    ];
    for (i, body) in want.iter().enumerate() {
        assert_eq!(got[i], (200, (*body).to_owned()), "{got:?}");
    }
    // PostgreSQL writes the numeric in all its digits.
    let max = format!(r#"{{"v":17976931348623157{}}}"#, "0".repeat(292));
    assert_eq!(got[7], (200, max), "{got:?}");
}
