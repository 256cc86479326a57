//! TEMPORARY API STUB (replaced by the real engine before commit).
#![allow(dead_code, unused_variables)]
use crate::xml::{Doc, Name, NodeId};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct NodeRef { pub doc: Arc<Doc>, pub id: NodeId }
#[derive(Clone, Debug)]
pub enum Value { NodeSet(Vec<NodeRef>), Boolean(bool), Number(f64), String(String) }
impl Value {
    pub fn to_bool(&self) -> bool { false }
    pub fn to_number(&self) -> f64 { 0.0 }
    pub fn to_string_value(&self) -> String { String::new() }
}
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum XPathError {
    #[error("XPath syntax error at character {at} of '{expr}': {message}")] Syntax { expr: String, at: usize, message: String },
    #[error("unknown function {0}")] UnknownFunction(String),
    #[error("namespace prefix '{0}' is not bound")] UnboundPrefix(String),
    #[error("{0}")] Type(String),
    #[error("{0}: {1}")] Raised(Name, String),
}
pub trait Context {
    fn variable(&self, name: &str) -> Result<Value, XPathError>;
    fn function(&self, name: &Name, args: Vec<Value>) -> Result<Value, XPathError>;
}
pub struct Env<'a> {
    pub ns: &'a dyn Fn(&str) -> Option<String>,
    pub extension: &'a dyn Fn(&Name, usize) -> bool,
}
#[derive(Clone, Debug)]
pub struct XPath { text: String }
impl XPath {
    pub fn compile(text: &str, env: &Env<'_>) -> Result<XPath, XPathError> { Ok(XPath { text: text.into() }) }
    pub fn text(&self) -> &str { &self.text }
    pub fn variables(&self) -> Vec<String> { vec![] }
    pub fn eval(&self, cx: &dyn Context, node: Option<&NodeRef>) -> Result<Value, XPathError> { Err(XPathError::Type("stub".into())) }
    pub fn is_path(&self) -> bool { true }
}
