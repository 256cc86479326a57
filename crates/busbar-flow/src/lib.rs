//! WS-BPEL 2.0 processes: parse, validate and compile them once, then run instances.
//!
//! Layout: [`xml`] is the mutable XML tree every variable and every deployment file lives in;
//! [`xpath`] compiles and evaluates XPath 1.0 over it.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod xml;
pub mod xpath;
