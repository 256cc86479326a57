//! The busbar engine: builds a runtime from a config and serves it.
//!
//! Layout: [`runtime`] turns a checked config into an immutable [`runtime::Runtime`] (proxies,
//! compiled steps, endpoints, one [`router::Router`] per listener); [`steps`] holds one module
//! per step, the closed set of them and the executor; [`offload`] is the one bounded pool for
//! CPU-heavy step work; [`endpoint`] holds the back-end endpoints (pooled keep-alive clients
//! behind retry, failover, load balancing and circuit breakers); [`databases`] opens the
//! config's databases for the `sql` step; [`processes`] deploys the config's WS-BPEL processes
//! and serves each as a SOAP endpoint; [`process_store`] keeps their instances durable in a
//! SQLite or PostgreSQL database;
//! [`serve`] runs one event loop per worker thread, each with its own `SO_REUSEPORT` socket,
//! over a [`serve::Handler`]; [`proxy`] is the request path of a proxy listener (match →
//! sequences → reply or error answer); [`engine`] builds, binds and serves, with reload and
//! graceful shutdown; [`admin`] (health, metrics, the effective config, reload) and [`echo`]
//! (the benchmark back end) are handlers too.

pub mod access_log;
pub mod admin;
pub mod databases;
pub mod delay;
pub mod echo;
pub mod endpoint;
pub mod engine;
pub mod flush;
pub mod headers;
pub mod net;
pub mod offload;
pub mod otlp;
pub mod process_store;
pub mod processes;
pub mod proxy;
pub mod router;
pub mod runtime;
pub mod serve;
pub mod steps;
pub mod tls;

pub use engine::{Engine, RunningEngine};
