//! Records the commit the binary is built from, for `busbar --version`: `BUSBAR_COMMIT` from
//! the environment when set (a build outside a git checkout, such as a container image),
//! else `git rev-parse`, with `-dirty` when the work tree has uncommitted changes; `unknown`
//! when neither is available.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=BUSBAR_COMMIT");
    let commit = match std::env::var("BUSBAR_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => match git(&["rev-parse", "--short=12", "HEAD"]) {
            Some(hash) => {
                // Rebuild when HEAD moves: the HEAD file and the ref it points at.
                for file in ["HEAD", "packed-refs"] {
                    if let Some(p) = git(&["rev-parse", "--git-path", file]) {
                        println!("cargo:rerun-if-changed={p}");
                    }
                }
                if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
                    if let Some(p) = git(&["rev-parse", "--git-path", &r]) {
                        println!("cargo:rerun-if-changed={p}");
                    }
                }
                let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                    .is_some_and(|s| !s.is_empty());
                if dirty {
                    format!("{hash}-dirty")
                } else {
                    hash
                }
            }
            None => "unknown".to_owned(),
        },
    };
    println!("cargo:rustc-env=BUSBAR_COMMIT={commit}");
}
