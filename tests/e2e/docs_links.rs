//! References between the docs: in README.md, docs/*.md and the Markdown files under examples/
//! and bench/, every relative link names a file that exists (and, into a Markdown file, a
//! heading it has), every `docs/NAME.md` in the text names a file of docs/, and every `NAME.md`
//! written as code names a file beside the document or at the repository's root. The example
//! configs' `docs/NAME.md` must exist too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files below `dir` (relative to `root`) whose names end with `suffix`, build and hidden
/// directories left out.
fn files_below(root: &Path, dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(root.join(dir))
        .unwrap_or_else(|e| panic!("{}: {e}", root.join(dir).display()));
    for entry in entries {
        let entry = entry.expect("directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = dir.join(&name);
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                files_below(root, &rel, suffix, out);
            }
        } else if name.ends_with(suffix) {
            out.push(rel);
        }
    }
}

/// The documents checked, relative to the repository's root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    for dir in ["docs", "examples", "bench"] {
        files_below(root, Path::new(dir), ".md", &mut out);
    }
    out.sort();
    out
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((n + 1, line));
        }
    }
    out
}

/// A heading's anchor as GitHub makes it: lower case, letters, digits, `-` and `_` kept,
/// spaces turned into `-`, everything else dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter(|(_, l)| l.starts_with('#'))
        .map(|(_, l)| anchor(l.trim_start_matches('#')))
        .collect()
}

/// The targets of the inline links `[text](target)` of a line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            let target = &rest[..end];
            if !target.is_empty() && !target.contains(char::is_whitespace) {
                out.push(target);
            }
            rest = &rest[end..];
        }
    }
    out
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')
}

/// The `NAME.md` of every `docs/NAME.md` in a line that is not part of a longer path.
fn docs_mentions(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (at, _) in line.match_indices("docs/") {
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| name_char(c) || c == '/') {
            continue;
        }
        let tail = &line[at + 5..];
        let name = &tail[..tail.find(|c| !name_char(c)).unwrap_or(tail.len())];
        let name = name.trim_end_matches('.');
        if name.len() > 3 && name.ends_with(".md") {
            out.push(name);
        }
    }
    out
}

/// Code spans of a line that are a bare `NAME.md`.
fn code_file_names(line: &str) -> Vec<&str> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.len() > 3 && s.ends_with(".md") && s.chars().all(name_char))
        .collect()
}

#[test]
fn every_reference_between_the_docs_names_an_existing_file() {
    let root = root();
    let docs = documents(&root);
    assert!(docs.len() > 10, "found only {docs:?}");
    let mut configs = Vec::new();
    files_below(&root, Path::new("examples"), ".yaml", &mut configs);
    assert!(!configs.is_empty(), "no example configs");
    let mut problems = Vec::new();
    for doc in docs.iter().chain(&configs) {
        let text = std::fs::read_to_string(root.join(doc))
            .unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        let dir = doc.parent().unwrap_or(Path::new(""));
        for (n, line) in text.lines().enumerate() {
            let at = format!("{}:{}", doc.display(), n + 1);
            for name in docs_mentions(line) {
                if !root.join("docs").join(name).is_file() {
                    problems.push(format!("{at}: docs/{name} does not exist"));
                }
            }
        }
        if doc.extension().is_none_or(|e| e != "md") {
            continue;
        }
        for (n, line) in prose(&text) {
            let at = format!("{}:{n}", doc.display());
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let file = if path.is_empty() {
                    doc.clone()
                } else {
                    dir.join(path)
                };
                if !root.join(&file).exists() {
                    problems.push(format!("{at}: link to {target}: no such file"));
                    continue;
                }
                if !fragment.is_empty() && file.extension().is_some_and(|e| e == "md") {
                    let linked = std::fs::read_to_string(root.join(&file)).unwrap_or_default();
                    if !anchors(&linked).contains(fragment) {
                        problems.push(format!("{at}: link to {target}: no such heading"));
                    }
                }
            }
            for name in code_file_names(line) {
                if !root.join(dir).join(name).is_file() && !root.join(name).is_file() {
                    problems.push(format!("{at}: `{name}` is not a file of the repository"));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "dangling references:\n{}",
        problems.join("\n")
    );
}

#[test]
fn anchors_and_references_are_read_as_github_and_the_docs_write_them() {
    assert_eq!(anchor(" Echo back ends"), "echo-back-ends");
    assert_eq!(
        anchor("`busbar bench`: the benchmark kit"),
        "busbar-bench-the-benchmark-kit"
    );
    assert_eq!(
        link_targets("see [a](docs/a.md#x-y) and [b](b.md), not [c] (d)"),
        ["docs/a.md#x-y", "b.md"]
    );
    assert_eq!(
        docs_mentions("(docs/bench.md, \"Load\"); docs/*.md; ../docs/x.md; docs/scenarios.md."),
        ["bench.md", "scenarios.md"]
    );
    assert_eq!(
        code_file_names("`benchmark-contract.md` and `a b.md` and `x.mdx`"),
        ["benchmark-contract.md"]
    );
    assert_eq!(
        prose("a\n```\ndocs/x.md\n```\nb"),
        [(1, "a"), (5, "b")],
        "fenced code is not prose"
    );
}
