//! The same cases against SQLite and a real PostgreSQL server (started by the test).

use std::sync::Arc;
use std::time::Duration;

use busbar_sql::testing::TempPostgres;
use busbar_sql::{
    Database, DbError, ErrorClass, Kind, NumericAs, Options, Output, Query, Shape, Statement, Value,
};

const SQLITE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS items (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  price NUMERIC(10,2),
  qty INTEGER,
  ok BOOLEAN NOT NULL DEFAULT 0,
  doc JSON,
  raw BLOB,
  at TIMESTAMP
);";

const PG_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS items (
  id BIGSERIAL PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  price NUMERIC(10,2),
  qty INTEGER,
  ok BOOLEAN NOT NULL DEFAULT false,
  doc JSONB,
  raw BYTEA,
  at TIMESTAMPTZ
);";

fn options(kind: Kind, init: &str) -> Options {
    Options {
        kind,
        pool: 4,
        acquire_timeout: Duration::from_millis(300),
        statement_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        statement_cache: true,
        init: Some(init.to_owned()),
        tls: None,
    }
}

fn sqlite(dir: &std::path::Path, tweak: impl FnOnce(&mut Options)) -> Arc<Database> {
    let mut o = options(
        Kind::Sqlite {
            path: dir.join("t.sqlite"),
            busy_timeout: Duration::from_secs(2),
        },
        SQLITE_SCHEMA,
    );
    tweak(&mut o);
    Database::open("t", o).unwrap_or_else(|e| panic!("{e}"))
}

async fn postgres(pg: &TempPostgres, tweak: impl FnOnce(&mut Options)) -> Arc<Database> {
    let config: tokio_postgres::Config = pg.url().parse().unwrap_or_else(|e| panic!("{e}"));
    let mut o = options(Kind::Postgres(Box::new(config)), PG_SCHEMA);
    tweak(&mut o);
    let db = Database::open("t", o).unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..100 {
        if db.ready().is_ok() {
            return db;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the database never became ready: {:?}", db.ready());
}

fn st(sql: &str) -> Arc<Statement> {
    Arc::new(Statement::parse(sql).unwrap_or_else(|e| panic!("{e}")))
}

async fn run(
    db: &Database,
    sql: &[&str],
    values: Vec<Vec<Value>>,
    shape: Shape,
) -> Result<Output, DbError> {
    let statements: Vec<Arc<Statement>> = sql.iter().map(|s| st(s)).collect();
    db.run(Query {
        statements: &statements,
        values,
        shape,
        numeric: NumericAs::Number,
    })
    .await
}

async fn json(out: Output) -> serde_json::Value {
    let bytes = raw(out).await;
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)))
}

async fn raw(out: Output) -> Vec<u8> {
    match out {
        Output::Json(b) => b.to_vec(),
        Output::Stream(mut rx) => {
            let mut all = Vec::new();
            while let Some(chunk) = rx.recv().await {
                all.extend_from_slice(&chunk.unwrap_or_else(|e| panic!("{e}")));
            }
            all
        }
        other => panic!("not JSON: {other:?}"),
    }
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

const INSERT: &str = "INSERT INTO items (name, price, qty, ok, doc, raw, at) VALUES (:name, :price, :qty, :ok, :doc, :raw, :at) RETURNING id";

/// Every case, on one database; `pg` tells the dialect's differences.
async fn suite(db: &Database, pg: bool) {
    // An insert answers with its id; a row comes back with typed JSON values.
    let at = if pg {
        text("2026-11-25T12:00:00.5+01:00")
    } else {
        text("2026-11-25T11:00:00.5Z")
    };
    let blob = if pg { text("\\x00ff") } else { Value::Null };
    let out = run(
        db,
        &[INSERT],
        vec![vec![
            text("widget"),
            Value::Float(12.5),
            Value::Int(3),
            Value::Bool(true),
            Value::Json(serde_json::json!({"a": [1, "x"]})),
            blob,
            at,
        ]],
        Shape::Affected,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let created = json(out).await;
    assert_eq!(created["affected"], 1, "{created}");
    let id = created["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{created}"));

    let text_row = raw(run(
        db,
        &["SELECT * FROM items WHERE id = :id"],
        vec![vec![Value::Int(id)]],
        Shape::Row,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}")))
    .await;
    let text_row = String::from_utf8_lossy(&text_row).into_owned();
    let row: serde_json::Value =
        serde_json::from_str(&text_row).unwrap_or_else(|e| panic!("{e}: {text_row}"));
    assert_eq!(row["name"], "widget");
    assert_eq!(row["qty"], 3);
    assert_eq!(row["ok"], true);
    assert_eq!(row["doc"], serde_json::json!({"a": [1, "x"]}));
    assert_eq!(row["at"], "2026-11-25T11:00:00.5Z", "{row}");
    if pg {
        // NUMERIC(10,2) keeps its scale: the digits are the database's.
        assert!(text_row.contains(r#""price":12.50,"#), "{text_row}");
        assert_eq!(row["raw"], "AP8=");
    } else {
        assert_eq!(row["price"], 12.5);
    }

    // The id as text (from a path) binds too; no row → NoRow.
    let none = run(
        db,
        &["SELECT * FROM items WHERE id = :id"],
        vec![vec![text("999999")]],
        Shape::Row,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(none, Output::NoRow), "{none:?}");

    // Constraint violations: a duplicate → Conflict; a NULL where NOT NULL → BadValue.
    let dup = run(
        db,
        &[INSERT],
        vec![vec![
            text("widget"),
            Value::Null,
            Value::Null,
            Value::Bool(false),
            Value::Null,
            Value::Null,
            Value::Null,
        ]],
        Shape::Affected,
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("duplicate accepted"));
    assert_eq!(dup.class, ErrorClass::Conflict, "{dup}");
    assert!(!dup.message.contains("INSERT"), "{}", dup.message);
    let null = run(
        db,
        &[INSERT],
        vec![vec![
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Bool(false),
            Value::Null,
            Value::Null,
            Value::Null,
        ]],
        Shape::Affected,
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("null accepted"));
    assert_eq!(null.class, ErrorClass::BadValue, "{null}");

    // Injection: the value is stored as written and the table is still there.
    let evil = "x'); DROP TABLE items; --";
    run(
        db,
        &[INSERT],
        vec![vec![
            text(evil),
            Value::Null,
            Value::Null,
            Value::Bool(false),
            Value::Null,
            Value::Null,
            Value::Null,
        ]],
        Shape::Affected,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let found = json(
        run(
            db,
            &["SELECT name FROM items WHERE name = :n"],
            vec![vec![text(evil)]],
            Shape::Row,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    assert_eq!(found["name"], evil);

    // A transaction whose second statement fails leaves nothing behind.
    let failed = run(
        db,
        &[
            "INSERT INTO items (name, ok) VALUES (:n, :ok)",
            "INSERT INTO items (name, ok) VALUES (:n, :ok)",
        ],
        vec![
            vec![text("twice"), Value::Bool(false)],
            vec![text("twice"), Value::Bool(false)],
        ],
        Shape::Affected,
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("transaction committed"));
    assert_eq!(failed.class, ErrorClass::Conflict);
    let count = json(
        run(
            db,
            &["SELECT count(*) AS n FROM items WHERE name = :n"],
            vec![vec![text("twice")]],
            Shape::Row,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    assert_eq!(count["n"], 0);

    // Many rows: the answer streams past the buffer and every row arrives once, in order.
    let many = if pg {
        "INSERT INTO items (name, qty, ok) SELECT 'bulk-' || g, g, true FROM generate_series(1, 3000) g"
    } else {
        "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 3000) INSERT INTO items (name, qty, ok) SELECT 'bulk-' || x, x, 1 FROM g"
    };
    run(db, &[many], vec![vec![]], Shape::Empty)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let out = run(
        db,
        &["SELECT id, name, qty FROM items WHERE name LIKE 'bulk-%' ORDER BY qty"],
        vec![vec![]],
        Shape::Rows,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(out, Output::Stream(_)), "3,000 rows were buffered");
    let rows = json(out).await;
    let rows = rows.as_array().unwrap_or_else(|| panic!("not an array"));
    assert_eq!(rows.len(), 3000);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["qty"], i as i64 + 1);
    }
    // Around the 16 KB the answer starts streaming at: every row count gives the whole array,
    // whether it went out buffered or streamed.
    let mut kinds = std::collections::BTreeSet::new();
    for limit in (200..=700).step_by(11) {
        let out = run(
            db,
            &["SELECT id, name, qty FROM items WHERE name LIKE 'bulk-%' ORDER BY qty LIMIT :n"],
            vec![vec![Value::Int(limit)]],
            Shape::Rows,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        kinds.insert(matches!(out, Output::Stream(_)));
        let rows = json(out).await;
        let rows = rows.as_array().unwrap_or_else(|| panic!("not an array"));
        assert_eq!(rows.len() as i64, limit);
        assert_eq!(
            rows.last().map(|r| r["qty"].clone()),
            Some(serde_json::json!(limit))
        );
    }
    assert_eq!(
        kinds.len(),
        2,
        "the range does not straddle the streaming threshold"
    );
    // Keyset pagination is a query with bound values.
    let page = json(
        run(
            db,
            &["SELECT qty FROM items WHERE name LIKE 'bulk-%' AND qty > :after ORDER BY qty LIMIT :limit"],
            vec![vec![Value::Int(100), Value::Int(3)]],
            Shape::Rows,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    assert_eq!(
        page,
        serde_json::json!([{"qty": 101}, {"qty": 102}, {"qty": 103}])
    );
}

#[tokio::test(flavor = "current_thread")]
async fn sqlite_suite() {
    let dir = tempdir("suite");
    let db = sqlite(&dir, |_| {});
    suite(&db, false).await;
    assert_eq!(idle(&db).await, (0, 4));
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_suite() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let db = postgres(&pg, |_| {}).await;
    suite(&db, true).await;
    // Floats in the fewest digits that read back as them, a `real` as a single-precision one.
    let floats = raw(run(
        &db,
        &[
            "SELECT CAST(0.1 AS real) AS r, CAST(0.1 AS double precision) AS d, \
               CAST(1e300 AS double precision) AS big, CAST(-2 AS real) AS whole",
        ],
        vec![vec![]],
        Shape::Row,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}")))
    .await;
    assert_eq!(
        String::from_utf8_lossy(&floats),
        r#"{"r":0.1,"d":0.1,"big":1e300,"whole":-2}"#
    );
    // Without server-side prepared statements (PgBouncer), the server infers the types.
    let db = postgres(&pg, |o| o.statement_cache = false).await;
    let row = json(
        run(
            &db,
            &["SELECT name, price FROM items WHERE id = :id"],
            vec![vec![text("1")]],
            Shape::Row,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    assert_eq!(row["name"], "widget");
    let bad = run(
        &db,
        &["SELECT * FROM items WHERE id = :id"],
        vec![vec![text("ten")]],
        Shape::Row,
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("'ten' accepted as an id"));
    assert_eq!(bad.class, ErrorClass::BadValue, "{bad}");
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_names_a_parameter_of_the_wrong_type() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let db = postgres(&pg, |_| {}).await;
    let e = run(
        &db,
        &["SELECT * FROM items WHERE id = :id"],
        vec![vec![text("ten")]],
        Shape::Row,
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("accepted"));
    assert_eq!(e.class, ErrorClass::BadValue);
    assert_eq!(e.message, "Parameter 'id' must be an integer, not text");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_pools_and_slow_statements() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempdir("busy");
    let slow_sqlite =
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";
    for (db, slow) in [
        (
            sqlite(&dir, |o| {
                o.pool = 1;
                o.statement_timeout = Duration::from_millis(800);
            }),
            slow_sqlite,
        ),
        (
            postgres(&pg, |o| {
                o.pool = 1;
                o.statement_timeout = Duration::from_millis(800);
            })
            .await,
            "SELECT pg_sleep(30)",
        ),
    ] {
        let db2 = db.clone();
        let holder =
            tokio::spawn(async move { run(&db2, &[slow], vec![vec![]], Shape::Row).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The one connection is taken: the next request waits 300 ms, then is told.
        let busy = run(&db, &["SELECT 1 AS one"], vec![vec![]], Shape::Row)
            .await
            .err();
        assert_eq!(
            busy.map(|e| e.class),
            Some(ErrorClass::Busy),
            "{}",
            db.kind()
        );
        // The slow statement is cancelled at its timeout.
        let slow = holder.await.unwrap_or_else(|e| panic!("{e}")).err();
        assert_eq!(
            slow.map(|e| e.class),
            Some(ErrorClass::Timeout),
            "{}",
            db.kind()
        );
        // And the connection is back.
        let one = json(
            run(&db, &["SELECT 1 AS one"], vec![vec![]], Shape::Row)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .await;
        assert_eq!(one["one"], 1);
        assert_eq!(idle(&db).await.0, 0, "{}", db.kind());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_fails_fast_and_recovers() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let db = postgres(&pg, |_| {}).await;
    let q = || {
        run(
            &db,
            &["SELECT count(*) AS n FROM items"],
            vec![vec![]],
            Shape::Row,
        )
    };
    q().await.unwrap_or_else(|e| panic!("{e}"));
    pg.stop().unwrap_or_else(|e| panic!("{e}"));
    let started = std::time::Instant::now();
    for _ in 0..3 {
        let e = q()
            .await
            .err()
            .unwrap_or_else(|| panic!("answered while down"));
        assert_eq!(e.class, ErrorClass::Unavailable, "{e}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // A use that found the server down said so at once, before the monitor's next probe.
    assert!(db.ready().is_err(), "still reported ready");
    pg.restart().unwrap_or_else(|e| panic!("{e}"));
    let mut last = None;
    for _ in 0..50 {
        match q().await {
            Ok(_) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last.is_none(), "no recovery after the restart: {last:?}");
    assert_eq!(idle(&db).await.0, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn an_unreachable_postgres_is_not_ready_and_says_why() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(1);
    let config: tokio_postgres::Config = format!("postgres://busbar@127.0.0.1:{port}/x")
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let db = Database::open("t", options(Kind::Postgres(Box::new(config)), PG_SCHEMA))
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let why = db.ready().err().unwrap_or_default();
    assert!(why.contains("refused") || why.contains("starting"), "{why}");
    let e = run(&db, &["SELECT 1"], vec![vec![]], Shape::Row)
        .await
        .err();
    assert_eq!(e.map(|e| e.class), Some(ErrorClass::Unavailable));
}

/// The pool's use once every connection is back (a thread or task hands its connection back
/// just after its last chunk).
async fn idle(db: &Database) -> (usize, usize) {
    for _ in 0..50 {
        if db.pool_status().0 == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    db.pool_status()
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("busbar-sql-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
    d
}

/// With TLS required the connection is encrypted and the server's certificate is checked:
/// the server's own CA passes, the system's roots do not.
#[tokio::test(flavor = "current_thread")]
async fn postgres_over_tls_checks_the_certificate() {
    let pg = TempPostgres::start_tls().unwrap_or_else(|e| panic!("{e}"));
    let tls = |ca: Option<&std::path::Path>| {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).unwrap_or_else(|e| panic!("{e}"));
            for cert in rustls_pemfile_certs(&pem) {
                roots.add(cert).unwrap_or_else(|e| panic!("{e}"));
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap_or_else(|e| panic!("{e}"))
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    };
    let db = postgres(&pg, |o| o.tls = Some(tls(Some(&pg.ca())))).await;
    let row = json(
        run(
            &db,
            &["SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"],
            vec![vec![]],
            Shape::Row,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    assert_eq!(row["ssl"], true);
    // A CA that did not issue the certificate: no connection, and readiness says why.
    let config: tokio_postgres::Config = pg.url().parse().unwrap_or_else(|e| panic!("{e}"));
    let mut o = options(Kind::Postgres(Box::new(config)), PG_SCHEMA);
    o.tls = Some(tls(None));
    let untrusted = Database::open("u", o).unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let why = untrusted.ready().err().unwrap_or_default();
    assert!(
        why.to_lowercase().contains("certificate") || why.contains("issuer"),
        "{why}"
    );
}

fn rustls_pemfile_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}"))
}
