//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod payload;

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn xslt_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/xslt")
}

/// A scratch directory unique to this test process, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("busbar-libxml-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).expect("write scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a Debian tool, failing the test with a clear message when it is not installed.
pub fn run_tool(tool: &str, package: &str, args: &[&str]) -> std::process::Output {
    match Command::new(tool).args(args).output() {
        Ok(out) => out,
        Err(e) => panic!(
            "{tool} is needed by this differential test but could not run ({e}); \
             install it with: apt-get install -y {package}"
        ),
    }
}

/// Shows two outputs side by side when they differ.
pub fn diff_message(ours: &[u8], theirs: &[u8]) -> String {
    let at = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    let from = at.saturating_sub(80);
    let show = |b: &[u8]| {
        String::from_utf8_lossy(&b[from.min(b.len())..(at + 120).min(b.len())]).into_owned()
    };
    format!(
        "first difference at byte {at} (ours {} bytes, reference {} bytes)\n  ours: {:?}\n  reference: {:?}",
        ours.len(),
        theirs.len(),
        show(ours),
        show(theirs)
    )
}
