//! Shared request-path types of busbar.
//!
//! Layout: [`body`] holds the lazy message [`Body`] (a stream until a step asks for content),
//! [`error`] the one error type of the request path and its mapping to a response,
//! [`fault`] the SOAP 1.1 / 1.2 fault and JSON problem renderers, [`exchange`] the per-request
//! [`Exchange`], and [`metrics`] the lock-free counters and histograms exposed by the admin
//! listener. Nothing here depends on the config or on the HTTP server.

pub mod body;
pub mod calendar;
pub mod error;
pub mod exchange;
pub mod fault;
pub mod file;
pub mod metrics;
pub mod test;
pub mod trace;

pub use body::{Body, BodyError};
pub use error::{Blame, ErrorKind, MediationError};
pub use exchange::{BodyGone, Exchange, Flow, Phase, Var};
pub use fault::{FaultCode, MessageFormat, QName, SoapVersion};
pub use test::Test;
pub use trace::TraceContext;

/// The boxed error type carried as the source of body and mediation errors.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
