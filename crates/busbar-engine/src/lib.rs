//! The busbar engine: builds a runtime from a config and serves it.
//!
//! Layout: [`runtime`] turns a checked config into an immutable [`runtime::Runtime`] (proxies,
//! compiled steps, endpoints); [`steps`] holds one module per step, the closed set of them and
//! the executor; [`offload`] is the one bounded pool for CPU-heavy step work;
//! [`client`] is the pooled keep-alive back-end client; [`server`] runs one event loop per
//! worker thread, each with its own `SO_REUSEPORT` listener socket, and the request handler;
//! [`engine`] ties them together with reload and graceful shutdown; [`admin`] serves health,
//! metrics, the effective config and reload; [`echo`] is the benchmark back end.

pub mod admin;
pub mod client;
pub mod echo;
pub mod engine;
pub mod headers;
pub mod net;
pub mod offload;
pub mod runtime;
pub mod server;
pub mod steps;
pub mod tls;

pub use engine::{Engine, RunningEngine};
