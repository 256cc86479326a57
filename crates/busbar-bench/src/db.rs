//! The database scenarios (docs/databases.md, `examples/db-crud.yaml`), under a base such as
//! `http://127.0.0.1:8282/api`:
//!
//! - `db-read`: `GET /customers/{id}` over seeded ids spread across the 100,000 rows; every
//!   answer must be the row the seed formula gives ([`seed_row`], written here from the
//!   documented table, not taken from the database).
//! - `db-write`: half inserts (`POST /customers`, a new customer whose e-mail names the run and
//!   a number), half replacements (`PUT /customers/{id}` of a seeded row, with content that
//!   depends on the id and the run only, so repeated writes of an id agree); every answer is
//!   checked, and after the run every written row is read back ([`WriteFeed::read_back`]):
//!   each replaced row must hold what was written, each insert must be there exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::check::{same_json, Check};
use crate::client::{Conn, Method, RequestSpec, Url};

/// Seeded customers: ids 1 to this.
pub const SEEDED: u64 = 100_000;
/// Ids a `db-read` run rotates through.
pub const READ_IDS: usize = 1000;

/// Seed customer `n` as docs/databases.md defines it.
pub fn seed_row(n: u64) -> Value {
    // 2026-01-01T00:00:00Z plus n seconds; n < 100,001 stays within January.
    let created = format!(
        "2026-01-{:02}T{:02}:{:02}:{:02}Z",
        1 + n / 86_400,
        n % 86_400 / 3600,
        n % 3600 / 60,
        n % 60
    );
    json!({
        "id": n,
        "first_name": format!("First{n}"),
        "last_name": format!("Last{n}"),
        "email": format!("customer{n}@example.com"),
        "tier": if n.is_multiple_of(2) { "premium" } else { "standard" },
        "city": format!("City{}", n % 100),
        "country": format!("Country{}", n % 20),
        "balance": ((n % 1000) * 4) as f64 + 0.25,
        "active": !n.is_multiple_of(3),
        "created_at": created,
    })
}

/// Seeded ids spread over the table (a fixed pseudo-random walk from `seed`).
pub fn read_ids(count: usize, seed: u64) -> Vec<u64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1 + x % SEEDED
        })
        .collect()
}

fn customer_url(base: &Url, id: Option<u64>) -> Result<Url, String> {
    let root = base.raw.trim_end_matches('/');
    match id {
        Some(id) => Url::parse(&format!("{root}/{id}")),
        None => Url::parse(root),
    }
}

/// `db-read`'s rotation under `url` (`…/api/customers`): a GET per id and the row it must get.
pub fn read_requests(url: &Url, seed: u64) -> Result<Vec<(RequestSpec, Check)>, String> {
    read_ids(READ_IDS, seed)
        .into_iter()
        .map(|id| {
            Ok((
                RequestSpec::get(customer_url(url, Some(id))?),
                Check::Json(seed_row(id)),
            ))
        })
        .collect()
}

/// The fields a replacement of seeded row `id` writes in run `tag`.
fn replacement(id: u64, tag: &str) -> Value {
    json!({
        "first_name": format!("Upd{id}"),
        "last_name": format!("{tag}-{id}"),
        "email": format!("customer{id}@example.com"),
        "tier": if id.is_multiple_of(2) { "standard" } else { "premium" },
        "city": format!("Moved{}", id % 50),
        "country": Value::Null,
        "balance": ((id % 700) * 3) as f64 + 0.5,
        "active": id.is_multiple_of(2),
    })
}

/// The fields insert `n` of run `tag` writes.
fn insertion(n: u64, tag: &str) -> Value {
    json!({
        "first_name": format!("New{n}"),
        "last_name": tag,
        "email": format!("bench-{tag}-{n}@example.com"),
        "tier": "premium",
        "city": format!("City{}", n % 13),
        "country": "Benchland",
        "balance": (n % 900) as f64 + 0.75,
        "active": true,
    })
}

fn with(mut row: Value, fields: &Value) -> Value {
    if let (Some(r), Some(f)) = (row.as_object_mut(), fields.as_object()) {
        for (k, v) in f {
            r.insert(k.clone(), v.clone());
        }
    }
    row
}

/// `db-write`'s requests, made fresh for each send: inserts with new e-mails, replacements of
/// seeded rows; remembers what it wrote for [`WriteFeed::read_back`].
#[derive(Debug)]
pub struct WriteFeed {
    url: Url,
    tag: String,
    next: AtomicU64,
    replaced: Mutex<BTreeSet<u64>>,
}

impl WriteFeed {
    /// A feed writing under `url` (`…/api/customers`), its rows marked with a tag of its own.
    pub fn new(url: Url) -> WriteFeed {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        WriteFeed {
            url,
            tag: format!("r{:x}", (nanos as u64) ^ u64::from(std::process::id())),
            next: AtomicU64::new(0),
            replaced: Mutex::new(BTreeSet::new()),
        }
    }

    /// The next request: even numbers insert, odd ones replace a seeded row.
    pub fn next(&self) -> Result<(Arc<Vec<u8>>, Arc<Check>), String> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let (spec, check) = if n.is_multiple_of(2) {
            let fields = insertion(n, &self.tag);
            let spec = RequestSpec::json(self.url.clone(), fields.to_string().into_bytes());
            (
                spec,
                Check::Row {
                    status: 201,
                    expected: fields,
                    ignore: &["id", "created_at"],
                },
            )
        } else {
            // Ids in a stride that visits every seeded row before repeating one.
            let id = 1 + (n / 2).wrapping_mul(7919) % SEEDED;
            if let Ok(mut r) = self.replaced.lock() {
                r.insert(id);
            }
            let fields = replacement(id, &self.tag);
            let mut spec = RequestSpec::json(
                customer_url(&self.url, Some(id))?,
                fields.to_string().into_bytes(),
            );
            spec.method = Method::Put;
            (
                spec,
                Check::Row {
                    status: 200,
                    expected: with(seed_row(id), &fields),
                    ignore: &[],
                },
            )
        };
        Ok((Arc::new(spec.to_bytes()), Arc::new(check)))
    }

    /// Reads back every row this feed wrote; the summary, or what is wrong.
    pub fn read_back(
        &self,
        addr: std::net::SocketAddr,
        timeout: Duration,
    ) -> Result<String, String> {
        let replaced: Vec<u64> = self
            .replaced
            .lock()
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default();
        let issued = self.next.load(Ordering::Relaxed);
        let inserts = issued.div_ceil(2);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let mut conn = Conn::connect(addr)
                .await
                .map_err(|e| format!("connect {addr}: {e}"))?;
            let mut body = Vec::new();
            let mut problems = Vec::new();
            for id in &replaced {
                let req = RequestSpec::get(customer_url(&self.url, Some(*id))?).to_bytes();
                let head = tokio::time::timeout(timeout, conn.exchange(&req, &mut body))
                    .await
                    .map_err(|_| format!("reading back {id}: timed out"))?
                    .map_err(|e| format!("reading back {id}: {e}"))?;
                let want = with(seed_row(*id), &replacement(*id, &self.tag));
                let got: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if head.status != 200 || !same_json(&got, &want) {
                    problems.push(format!("row {id}: {got}"));
                }
            }
            // Inserted rows: every row after the seeds, a page at a time.
            let mut found: BTreeMap<u64, u32> = BTreeMap::new();
            let mut after = SEEDED;
            loop {
                let url = Url::parse(&format!(
                    "{}?after={after}&limit=1000",
                    self.url.raw.trim_end_matches('/')
                ))?;
                let req = RequestSpec::get(url).to_bytes();
                let head = tokio::time::timeout(timeout, conn.exchange(&req, &mut body))
                    .await
                    .map_err(|_| "listing inserted rows: timed out".to_string())?
                    .map_err(|e| format!("listing inserted rows: {e}"))?;
                if head.status != 200 {
                    return Err(format!("listing inserted rows: status {}", head.status));
                }
                let page: Vec<Value> = serde_json::from_slice(&body)
                    .map_err(|e| format!("listing inserted rows: {e}"))?;
                let Some(last) = page.last().and_then(|r| r["id"].as_u64()) else {
                    break;
                };
                after = last;
                for row in &page {
                    if row["last_name"] != self.tag.as_str() {
                        continue;
                    }
                    let n = row["email"]
                        .as_str()
                        .and_then(|e| e.strip_prefix(&format!("bench-{}-", self.tag)))
                        .and_then(|e| e.strip_suffix("@example.com"))
                        .and_then(|n| n.parse::<u64>().ok());
                    match n {
                        Some(n) if n.is_multiple_of(2) && n < issued => {
                            *found.entry(n).or_default() += 1;
                            let want = insertion(n, &self.tag);
                            let mut got = row.clone();
                            if let Some(o) = got.as_object_mut() {
                                o.remove("id");
                                o.remove("created_at");
                            }
                            if !same_json(&got, &want) {
                                problems.push(format!("insert {n}: {row}"));
                            }
                        }
                        _ => problems.push(format!("a row this run did not write: {row}")),
                    }
                }
            }
            let duplicated: Vec<u64> = found
                .iter()
                .filter(|(_, c)| **c > 1)
                .map(|(n, _)| *n)
                .collect();
            if !duplicated.is_empty() {
                problems.push(format!("inserted more than once: {duplicated:?}"));
            }
            if problems.is_empty() {
                Ok(format!(
                    "read back: {} replaced rows as written; {} of {} inserts present once each",
                    replaced.len(),
                    found.len(),
                    inserts
                ))
            } else {
                problems.truncate(10);
                Err(format!(
                    "read back found wrong rows: {}",
                    problems.join("; ")
                ))
            }
        })
    }

    /// Inserts sent so far.
    pub fn inserts(&self) -> u64 {
        self.next.load(Ordering::Relaxed).div_ceil(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_rows_follow_the_documented_formula() {
        let r = seed_row(86_401);
        assert_eq!(r["created_at"], "2026-01-02T00:00:01Z");
        assert_eq!(r["tier"], "standard");
        assert_eq!(r["balance"], 1604.25);
        assert_eq!(r["active"], true);
        assert_eq!(seed_row(42)["created_at"], "2026-01-01T00:00:42Z");
        assert_eq!(seed_row(42)["country"], "Country2");
    }

    #[test]
    fn reads_cover_the_table_and_check_each_row() {
        let url = Url::parse("http://127.0.0.1:1/api/customers").unwrap_or_else(|e| panic!("{e}"));
        let reqs = read_requests(&url, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reqs.len(), READ_IDS);
        let ids: BTreeSet<&str> = reqs.iter().map(|(s, _)| s.url.path.as_str()).collect();
        assert!(ids.len() > 990, "{}", ids.len());
        let (spec, check) = &reqs[0];
        let id: u64 = spec
            .url
            .path
            .rsplit('/')
            .next()
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        let good = seed_row(id).to_string();
        assert!(check
            .check(200, crate::client::Headers::empty(), good.as_bytes())
            .is_ok());
        let bad = with(seed_row(id), &json!({"city": "Elsewhere"})).to_string();
        assert!(check
            .check(200, crate::client::Headers::empty(), bad.as_bytes())
            .is_err());
    }

    #[test]
    fn writes_alternate_and_their_checks_ignore_only_generated_fields() {
        let feed = WriteFeed::new(
            Url::parse("http://h:1/api/customers").unwrap_or_else(|e| panic!("{e}")),
        );
        let (insert, check) = feed.next().unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8_lossy(&insert);
        assert!(text.starts_with("POST /api/customers HTTP/1.1"), "{text}");
        let mut created = insertion(0, &feed.tag);
        created["id"] = json!(100_001);
        created["created_at"] = json!("2026-11-25T00:00:00Z");
        let h = crate::client::Headers::empty();
        assert!(check.check(201, h, created.to_string().as_bytes()).is_ok());
        assert!(check.check(200, h, created.to_string().as_bytes()).is_err());
        created["city"] = json!("x");
        assert!(check.check(201, h, created.to_string().as_bytes()).is_err());
        let (update, _) = feed.next().unwrap_or_else(|e| panic!("{e}"));
        assert!(String::from_utf8_lossy(&update).starts_with("PUT /api/customers/1 HTTP/1.1"));
        assert_eq!(feed.inserts(), 1);
    }
}
