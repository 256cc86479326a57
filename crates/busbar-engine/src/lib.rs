//! The busbar engine: builds a runtime from a config and serves it.
//!
//! Layout: [`runtime`] turns a checked config into an immutable [`runtime::Runtime`] (proxies,
//! compiled steps, endpoints); [`steps`] holds the closed set of steps and the executor;
//! [`client`] is the pooled keep-alive back-end client; [`server`] runs one event loop per
//! worker thread, each with its own `SO_REUSEPORT` listener socket, and the request handler;
//! [`engine`] ties them together with reload and graceful shutdown; [`admin`] serves health,
//! metrics, the effective config and reload; [`echo`] is the benchmark back end; [`xslt`] and
//! [`wsse`] are the content steps that need a whole body.

pub mod admin;
pub mod client;
pub mod echo;
pub mod engine;
pub mod headers;
pub mod net;
pub mod route;
pub mod runtime;
pub mod server;
pub mod steps;
pub mod tls;
pub mod wsse;
pub mod xslt;

pub use engine::{Engine, RunningEngine};
