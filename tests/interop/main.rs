//! Interoperability: real busbar engines against WS-Security implementations nobody here
//! wrote. Apache WSS4J (through `target/interop/wss4j/wss4j-tool`) and python-xmlsec
//! (`tests/interop/xmlsec_verify.py`) make requests busbar must accept or refuse, and check
//! the responses busbar secures. `tests/interop/setup.sh` builds both peers; without them
//! these tests fail (they do not skip).
//!
//! Work files of each test stay in `target/tmp/interop/<test>/` for inspection.

#[path = "../e2e/support.rs"]
#[allow(dead_code)]
mod support;

mod attacks;
mod peers;
mod requests;
mod responses;
mod service;
mod xmlsec_requests;
