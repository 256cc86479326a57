//! End-to-end tests: real busbar engines, real echo back ends, real sockets on OS ports.

mod admin;
mod backend_faults;
mod cli;
mod db_crud;
mod direct;
mod docs_links;
mod endpoints;
mod failures;
mod fuzz_http;
mod hardening;
mod integrator;
mod jq;
mod json_route;
mod metrics_doc;
mod observability;
mod orchestration;
mod packaging;
mod processes;
mod route;
mod router;
mod scatter;
mod support;
mod tls;
mod tracing_export;
mod wsse;
mod xslt;
