//! The echo back end: returns the request body byte for byte with the same Content-Type.
//!
//! The body is streamed straight back (the listener reads the request body as it writes the response),
//! so memory stays flat for any size, and Content-Length is kept when the client sent one. With
//! `buffer`, the whole request is read before the answer starts (up to [`MAX_BUFFERED`]): some
//! clients treat an answer that begins while they are still sending as a refusal and stop.

use std::time::Duration;

use crate::serve::RequestBody;
use busbar_core::body::Origin;
use busbar_core::Body;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Request, Response};

use crate::serve::{ConnInfo, ConnSettings, Handler, Job, ResponseBody};

/// Options of the echo back end.
#[derive(Debug, Clone, Default)]
pub struct EchoOptions {
    /// Wait this long before answering.
    pub delay: Option<Duration>,
    /// Answer with this fixed JSON body instead of echoing.
    pub json: Option<Bytes>,
    /// Add `x-echo-name: NAME` to every response (to check which instance answered).
    pub name: Option<HeaderValue>,
    /// Answer `GET /stock/{id}`, `/price/{id}`, `/reviews/{id}` from the catalog.
    pub catalog: bool,
    /// Read the whole request before answering.
    pub buffer: bool,
}

/// The largest body a buffering echo reads (a larger one is answered 413).
pub const MAX_BUFFERED: usize = 64 * 1024 * 1024;

/// The header naming the echo instance.
pub static NAME_HEADER: HeaderName = HeaderName::from_static("x-echo-name");

/// The echo back end as a [`Handler`].
#[derive(Debug, Clone, Default)]
pub struct EchoHandler(pub EchoOptions);

impl Handler for EchoHandler {
    async fn handle(&self, req: Request<RequestBody>, _conn: &ConnInfo) -> Response<ResponseBody> {
        handle(&self.0, req).await
    }
}

/// Answers one request.
pub async fn handle(opts: &EchoOptions, req: Request<RequestBody>) -> Response<ResponseBody> {
    if let Some(delay) = opts.delay {
        crate::delay::sleep(delay).await;
    }
    let content_type = req.headers().get(CONTENT_TYPE).cloned();
    let catalog = if opts.catalog && req.method() == http::Method::GET {
        catalog_answer(req.uri().path())
    } else {
        None
    };
    let mut resp = match (catalog, &opts.json) {
        (Some(json), _) => {
            let mut r = Response::new(ResponseBody::plain(Body::full(json)));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        (None, json) => match json {
            Some(json) => {
                let mut r = Response::new(ResponseBody::plain(Body::full(json.clone())));
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                r
            }
            None if opts.buffer => {
                let mut r = match read_whole(req.into_body()).await {
                    Ok(all) => Response::new(ResponseBody::plain(Body::full(all))),
                    Err((status, why)) => {
                        let mut r =
                            Response::new(ResponseBody::plain(Body::full(Bytes::from(why))));
                        *r.status_mut() = status;
                        return r;
                    }
                };
                if let Some(ct) = content_type {
                    r.headers_mut().insert(CONTENT_TYPE, ct);
                }
                r
            }
            None => {
                let incoming = req.into_body();
                let exact = http_body::Body::size_hint(&incoming).exact();
                let mut r = Response::new(ResponseBody::plain(Body::stream(
                    incoming,
                    exact,
                    Origin::Client,
                )));
                if let Some(ct) = content_type {
                    r.headers_mut().insert(CONTENT_TYPE, ct);
                }
                r
            }
        },
    };
    if let Some(name) = &opts.name {
        resp.headers_mut().insert(NAME_HEADER.clone(), name.clone());
    }
    resp
}

/// The whole request body, up to [`MAX_BUFFERED`] bytes (a declared length over it is refused
/// before anything is read).
async fn read_whole(incoming: RequestBody) -> Result<Bytes, (http::StatusCode, String)> {
    use http_body_util::BodyExt;
    let too_big = || {
        (
            http::StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body over {MAX_BUFFERED} bytes"),
        )
    };
    if http_body::Body::size_hint(&incoming).lower() > MAX_BUFFERED as u64 {
        return Err(too_big());
    }
    match http_body_util::Limited::new(incoming, MAX_BUFFERED)
        .collect()
        .await
    {
        Ok(all) => Ok(all.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(too_big())
        }
        Err(e) => Err((
            http::StatusCode::BAD_REQUEST,
            format!("cannot read the request body: {e}"),
        )),
    }
}

/// FNV-1a (64-bit) of the id: the seed of its catalog values.
fn seed(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The catalog's answer for `/stock/ID`, `/price/ID` or `/reviews/ID` (ID one path segment,
/// percent-decoded), with values derived from the id (docs/config.md, "Echo back ends").
pub fn catalog_answer(path: &str) -> Option<Bytes> {
    let (kind, raw) = path.strip_prefix('/')?.split_once('/')?;
    if raw.is_empty() || raw.contains('/') {
        return None;
    }
    let id = crate::router::percent_decode(raw)?;
    let h = seed(&id);
    let warehouse = ["AMS", "FRA", "LON"][(h % 3) as usize];
    let value = match kind {
        "stock" => serde_json::json!({
            "id": id,
            "inStock": h % 1000,
            "warehouse": warehouse,
        }),
        "price" => serde_json::json!({
            "id": id,
            "price": (h % 100_000) as f64 / 100.0,
            "currency": "EUR",
        }),
        "reviews" => serde_json::json!({
            "id": id,
            "rating": 1 + h % 5,
            "count": h % 10_000,
        }),
        _ => return None,
    };
    serde_json::to_vec(&value).ok().map(Bytes::from)
}

/// A running standalone echo back end.
#[derive(Debug)]
pub struct EchoServer {
    /// The bound address.
    pub addr: std::net::SocketAddr,
    shutdown: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Stops an [`EchoServer`] from another thread.
#[derive(Debug, Clone)]
pub struct Stopper(std::sync::Arc<tokio::sync::watch::Sender<bool>>);

impl Stopper {
    /// Stops accepting and lets in-flight requests finish.
    pub fn stop(&self) {
        let _ = self.0.send(true);
    }
}

/// Starts the echo back end on `addr` with `workers` event loops.
pub fn start(
    addr: std::net::SocketAddr,
    opts: EchoOptions,
    workers: usize,
) -> std::io::Result<EchoServer> {
    let sockets = crate::net::bind_group(addr, workers, false)?;
    let addr = sockets
        .first()
        .map(|s| s.local_addr())
        .transpose()?
        .unwrap_or(addr);
    let (tx, _) = tokio::sync::watch::channel(false);
    let tx = std::sync::Arc::new(tx);
    let handler = std::sync::Arc::new(EchoHandler(opts));
    let mut per_worker: Vec<Vec<Job>> = (0..workers.max(1)).map(|_| Vec::new()).collect();
    crate::serve::spread(sockets, &handler, &ConnSettings::default(), &mut per_worker)?;
    let threads = crate::serve::spawn_workers(
        "busbar-echo",
        per_worker,
        &tx,
        Duration::from_secs(5),
        |_| {},
    )?;
    Ok(EchoServer {
        addr,
        shutdown: tx,
        threads,
    })
}

impl EchoServer {
    /// A handle that stops this server.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.shutdown.clone())
    }

    /// Stops and waits.
    pub fn stop(self) {
        self.stopper().stop();
        self.wait();
    }

    /// Waits until stopped.
    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}
