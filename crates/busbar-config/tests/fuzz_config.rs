//! Fuzzing the config loader with mutated YAML (see docs/fuzzing.md): no text panics or hangs
//! `parse` or `load_text`, and every error that names a line names one of the file's lines.
//! (Errors about the whole file, such as an empty one, carry no line by design.)

#![allow(clippy::unwrap_used)]

#[path = "../../../fuzz/harness.rs"]
mod harness;

use std::path::Path;
use std::time::Duration;

use busbar_config::{load_text, parse, ConfigErrors};

/// YAML's syntax, and the model's keys and values.
const DICTIONARY: &[&[u8]] = &[
    b"\n",
    b"\n  ",
    b"\n    - ",
    b": ",
    b"- ",
    b"{ ",
    b" }",
    b"[",
    b"]",
    b", ",
    b"\"",
    b"'",
    b"#",
    b"&a ",
    b"*a",
    b"<<: *a",
    b"!!str ",
    b"!tag ",
    b"|\n",
    b">-\n",
    b"---\n",
    b"...\n",
    b"? ",
    b"\t",
    b"\\u00e9",
    b"${X}",
    b"${XY:-d}",
    b"${",
    b"~",
    b"null",
    b"5s",
    b"10MiB",
    b"-1",
    b"1e999",
    b"99999999999999999999",
    b"listeners:",
    b"proxies:",
    b"endpoints:",
    b"namespaces:",
    b"path: /p",
    b"in:",
    b"out:",
    b"call: echo",
    b"route:",
    b"when:",
    b"otherwise:",
    b"xpath: \"//a\"",
    b"fault: { status: 500 }",
    b"\r\n",
    b"\xef\xbb\xbf",
    b"\xc3\xa9",
];

fn lines_ok(errors: &ConfigErrors, lines: u64, what: &str) -> Result<(), String> {
    for e in &errors.0 {
        if let Some(line) = e.line {
            if line == 0 || line > lines {
                return Err(format!(
                    "{what}: error on line {line} of a {lines}-line file: {e}"
                ));
            }
        }
        if e.message.is_empty() {
            return Err(format!("{what}: error without a message: {e:?}"));
        }
    }
    Ok(())
}

fn check(input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    let lines = text.split('\n').count() as u64;
    // Some variables set, some not: both interpolation paths run.
    let env = |k: &str| k.len().is_multiple_of(2).then(|| "8080".to_owned());
    if let Err(errors) = parse(&text, "fuzz.yaml", env) {
        lines_ok(&errors, lines, "parse")?;
    }
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-config/fuzz.yaml");
    if let Err(errors) = load_text(&text, &file, env) {
        lines_ok(&errors, lines, "load_text")?;
    }
    Ok(())
}

#[test]
fn mutated_configs_never_panic_and_errors_name_lines_of_the_file() {
    harness::run(
        harness::Target {
            name: "config",
            extra_seeds: Vec::new(),
            dictionary: DICTIONARY,
            max_len: 16 * 1024,
            case_timeout: Duration::from_secs(30),
        },
        check,
    );
}
