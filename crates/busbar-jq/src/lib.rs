//! jq programs for busbar: compiled once (when a config is built), run many times on JSON
//! bytes with named variables, on any thread.
//!
//! The engine is jaq (a jq implementation in Rust), pinned exactly and used only here: its API
//! changes between major versions, so the rest of busbar sees [`Program`] alone. Numbers pass
//! through as written unless arithmetic touches them (`1.10` stays `1.10`; integers beyond
//! 64 bits are kept exactly).
//!
//! Most programs also get a compiled form for [`fast`]'s interpreter, which runs them on
//! values read straight from the bytes and gives up (the run then goes to jaq) on anything it
//! is not sure to do exactly as jaq does; a differential test holds the two to the same bytes.

use std::fmt;

mod fast;
mod value;

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{data, unwrap_valr, Compiler, Ctx, Native, Vars};
use jaq_json::{read, Val};

type Data = data::JustLut<Val>;

/// What [`Program::run_strict`] requires of its input beyond strict JSON.
#[derive(Debug, Clone, Copy)]
pub struct Strict {
    /// Deepest nesting of objects and arrays (the top-level container is 1).
    pub max_depth: usize,
    /// A name twice in one object breaks the rules.
    pub reject_duplicates: bool,
}

/// A compiled jq program.
pub struct Program {
    filter: jaq_core::compile::Filter<Native<Data>>,
    vars: Vec<String>,
    /// The program for the fast interpreter, or why it has none.
    fast: Result<fast::Fast, String>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("vars", &self.vars)
            .field("fast", &self.fast.is_ok())
            .finish()
    }
}

/// Why a program does not compile, with the position in its source (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    /// Line of the problem.
    pub line: usize,
    /// Column of the problem (in characters).
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The input is not one JSON value.
    Input(String),
    /// The program failed (`error`, a type error like indexing a number, …).
    Program(String),
    /// The program gave no value, or more than one.
    Outputs(usize),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Input(m) => write!(f, "the input is not JSON: {m}"),
            RunError::Program(m) => write!(f, "{m}"),
            RunError::Outputs(0) => write!(f, "the program gave no value (it must give one)"),
            RunError::Outputs(n) => write!(f, "the program gave {n} values (it must give one)"),
        }
    }
}

impl std::error::Error for RunError {}

/// Line and column (1-based) of byte `at` in `src`.
fn position(src: &str, at: usize) -> (usize, usize) {
    let before = &src[..at.min(src.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Byte offset of `part` in `src` when it is a slice of it.
fn offset_in(src: &str, part: &str) -> usize {
    let (s, p) = (src.as_ptr() as usize, part.as_ptr() as usize);
    if p >= s && p <= s + src.len() {
        p - s
    } else {
        0
    }
}

impl Program {
    /// Compiles `source`; `vars` are the names of the variables every run gives (without
    /// `$`). A syntax error, an undefined variable or an unknown function is an error here,
    /// never at run time.
    pub fn compile(source: &str, vars: &[&str]) -> Result<Program, CompileError> {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let funs = jaq_core::funs::<Data>()
            .chain(jaq_std::funs())
            .chain(jaq_json::funs());
        let loader = Loader::new(defs);
        let arena = Arena::default();
        let modules = loader
            .load(
                &arena,
                File {
                    code: source,
                    path: (),
                },
            )
            .map_err(|errors| {
                let (at, message) = errors
                    .first()
                    .map(|(_, e)| match e {
                        jaq_core::load::Error::Io(v) => (
                            0,
                            format!("cannot load: {}", v.first().map_or("", |x| x.1.as_str())),
                        ),
                        jaq_core::load::Error::Lex(v) => match v.first() {
                            Some((expect, at)) => (
                                offset_in(source, at),
                                format!("expected {}", expect.as_str()),
                            ),
                            None => (0, "syntax error".to_owned()),
                        },
                        jaq_core::load::Error::Parse(v) => match v.first() {
                            Some((expect, at)) => (
                                offset_in(source, at),
                                format!("expected {}", expect.as_str()),
                            ),
                            None => (0, "syntax error".to_owned()),
                        },
                    })
                    .unwrap_or((0, "syntax error".to_owned()));
                let (line, column) = position(source, at);
                CompileError {
                    line,
                    column,
                    message,
                }
            })?;
        let globals: Vec<String> = vars.iter().map(|v| format!("${v}")).collect();
        let filter = Compiler::default()
            .with_funs(funs)
            .with_global_vars(globals.iter().map(String::as_str))
            .compile(modules)
            .map_err(|errors| {
                let first = errors.first().and_then(|(_, e)| e.first());
                let (at, message) = match first {
                    Some((name, undefined)) => (
                        offset_in(source, name),
                        format!("undefined {}: {name}", undefined.as_str()),
                    ),
                    None => (0, "cannot compile".to_owned()),
                };
                let (line, column) = position(source, at);
                CompileError {
                    line,
                    column,
                    message,
                }
            })?;
        Ok(Program {
            filter,
            vars: vars.iter().map(|v| (*v).to_owned()).collect(),
            fast: fast::compile(source, vars).map_err(|what| format!("it uses {what}")),
        })
    }

    /// Whether runs start on the fast interpreter (`Ok`), or why they all go to jaq.
    pub fn fast_path(&self) -> Result<(), &str> {
        self.fast.as_ref().map(|_| ()).map_err(String::as_str)
    }

    /// Runs the program on jaq alone (what [`Program::run`] falls back to).
    pub fn run_jaq(&self, input: &[u8], vars: &[&[u8]]) -> Result<Vec<u8>, RunError> {
        self.run_slow(input, vars)
    }

    /// Runs the program on the fast interpreter alone: `None` where it gives the run up to
    /// jaq.
    pub fn run_fast(&self, input: &[u8], vars: &[&[u8]]) -> Option<Result<Vec<u8>, RunError>> {
        self.fast_with(input, vars, None)
    }

    /// Runs the program on the fast interpreter when `input` is strict JSON (RFC 8259, every
    /// number within f64's range) within `strict`'s limits. `None` when the input breaks a
    /// rule or the run goes to jaq: the caller then checks the input itself (for the error
    /// to give) and calls [`Program::run_jaq`].
    pub fn run_strict(
        &self,
        input: &[u8],
        vars: &[&[u8]],
        strict: Strict,
    ) -> Option<Result<Vec<u8>, RunError>> {
        let rules = value::Rules {
            max_depth: strict.max_depth,
            reject_duplicates: strict.reject_duplicates,
            finite_numbers: true,
        };
        self.fast_with(input, vars, Some(rules))
    }

    fn fast_with(
        &self,
        input: &[u8],
        vars: &[&[u8]],
        rules: Option<value::Rules>,
    ) -> Option<Result<Vec<u8>, RunError>> {
        match self.fast.as_ref().ok()?.run(input, vars, rules) {
            Ok(out) => Some(Ok(out)),
            Err(fast::Bail::Error(m)) => Some(Err(RunError::Program(m))),
            Err(fast::Bail::Jaq) => None,
        }
    }

    /// Runs the program on one JSON value, with the variables' values as JSON texts in the
    /// order given to [`Program::compile`]. Gives the one output value as compact JSON.
    pub fn run(&self, input: &[u8], vars: &[&[u8]]) -> Result<Vec<u8>, RunError> {
        match self.run_fast(input, vars) {
            Some(result) => result,
            None => self.run_slow(input, vars),
        }
    }

    fn run_slow(&self, input: &[u8], vars: &[&[u8]]) -> Result<Vec<u8>, RunError> {
        // jaq walks values recursively (reading `fromjson`'s text, comparing, writing and
        // dropping them): a value a program nests a few thousand levels deep would overflow a
        // worker thread's stack and abort the process. Its runs get a stack of their own, large
        // enough for values far deeper than any output may be (JAQ_STACK).
        stacker::grow(JAQ_STACK, || {
            // jaq panics on some impossible sizes (a string repeated past `isize::MAX`
            // bytes): a failed run, not a lost connection.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.run_jaq_inner(input, vars)
            }))
            .unwrap_or_else(|_| {
                Err(RunError::Program(
                    "the program failed inside jaq (a value too large to build)".to_owned(),
                ))
            })
        })
    }

    fn run_jaq_inner(&self, input: &[u8], vars: &[&[u8]]) -> Result<Vec<u8>, RunError> {
        let input = read::parse_single(input).map_err(|e| RunError::Input(format!("{e:?}")))?;
        let mut values = Vec::with_capacity(self.vars.len());
        for (i, name) in self.vars.iter().enumerate() {
            let text = vars.get(i).copied().unwrap_or(b"null");
            let v =
                read::parse_single(text).map_err(|e| RunError::Input(format!("${name}: {e:?}")))?;
            values.push(v);
        }
        let ctx = Ctx::<Data>::new(&self.filter.lut, Vars::new(values));
        let mut outputs = self.filter.id.run((ctx, input)).map(unwrap_valr);
        let first = match outputs.next() {
            None => return Err(RunError::Outputs(0)),
            Some(Err(e)) => return Err(RunError::Program(e.to_string())),
            Some(Ok(v)) => v,
        };
        // A second output (or an error after the first) makes the run fail.
        let mut extra = 0;
        for more in outputs {
            if let Err(e) = more {
                return Err(RunError::Program(e.to_string()));
            }
            extra += 1;
            if extra > 1000 {
                break;
            }
        }
        if extra > 0 {
            return Err(RunError::Outputs(1 + extra));
        }
        let shape = shape(&first);
        if shape.too_deep {
            dismantle(first);
            return Err(RunError::Program(format!(
                "the program built a value nested deeper than {} levels",
                value::MAX_DEPTH
            )));
        }
        let first = if shape.not_finite {
            finite(first)
        } else {
            first
        };
        Ok(first.to_string().into_bytes())
    }
}

/// `v` with JSON in place of the numbers JSON has no text for, as jq writes them: NaN as
/// `null`, infinities as the largest finite numbers. (`v` nests no deeper than
/// [`value::MAX_DEPTH`].)
fn finite(v: Val) -> Val {
    use jaq_json::{Num, Rc};
    match v {
        Val::Num(Num::Float(x)) if x.is_nan() => Val::Null,
        Val::Num(Num::Float(x)) if x.is_infinite() => {
            Val::Num(Num::Float(if x > 0.0 { f64::MAX } else { f64::MIN }))
        }
        Val::Arr(items) => Val::Arr(Rc::new(
            Rc::unwrap_or_clone(items).into_iter().map(finite).collect(),
        )),
        Val::Obj(fields) => Val::Obj(Rc::new(
            Rc::unwrap_or_clone(fields)
                .into_iter()
                .map(|(k, v)| (k, finite(v)))
                .collect(),
        )),
        v => v,
    }
}

/// The stack jaq runs on: at a few hundred bytes per level of the deepest recursion, room for
/// values about a million levels deep.
const JAQ_STACK: usize = 256 * 1024 * 1024;

/// What writing out a jaq output needs to know first.
struct Shape {
    /// It nests deeper than [`value::MAX_DEPTH`].
    too_deep: bool,
    /// It holds NaN or an infinity.
    not_finite: bool,
}

/// The [`Shape`] of `v`, in one walk without recursion. A value shared in several places is
/// walked once per place, but never deeper than [`value::MAX_DEPTH`] + 1.
fn shape(v: &Val) -> Shape {
    let limit = usize::from(value::MAX_DEPTH);
    let mut not_finite = false;
    let mut stack: Vec<(&Val, usize)> = vec![(v, 0)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Val::Num(jaq_json::Num::Float(x)) => not_finite |= !x.is_finite(),
            Val::Arr(_) | Val::Obj(_) if depth == limit => {
                return Shape {
                    too_deep: true,
                    not_finite,
                }
            }
            Val::Arr(items) => stack.extend(items.iter().map(|c| (c, depth + 1))),
            Val::Obj(fields) => stack.extend(fields.values().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    Shape {
        too_deep: false,
        not_finite,
    }
}

/// Drops `v` without recursion: a deep value's own drop would recurse once per level.
fn dismantle(v: Val) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Val::Arr(items) => {
                if let Ok(items) = jaq_json::Rc::try_unwrap(items) {
                    stack.extend(items);
                }
            }
            Val::Obj(fields) => {
                if let Ok(fields) = jaq_json::Rc::try_unwrap(fields) {
                    stack.extend(fields.into_iter().flat_map(|(k, v)| [k, v]));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str, input: &str) -> Result<String, RunError> {
        let p = Program::compile(src, &["params"]).unwrap_or_else(|e| panic!("{e}"));
        p.run(input.as_bytes(), &[br#"{"id":"7"}"#])
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    #[test]
    fn programs_run_with_variables_and_keep_numbers_as_written() {
        assert_eq!(
            run(
                "{id: $params.id, x: .x, big: .big}",
                r#"{"x":1.10,"big":12345678901234567890}"#
            )
            .as_deref(),
            Ok(r#"{"id":"7","x":1.10,"big":12345678901234567890}"#)
        );
        assert_eq!(run(".a | length", r#"{"a":"é\"\n"}"#).as_deref(), Ok("3"));
        assert_eq!(
            run(".s", r#"{"s":"a\"b\\c\n\u0001é😀"}"#).as_deref(),
            Ok(r#""a\"b\\c\n\u0001é😀""#)
        );
    }

    #[test]
    fn zero_or_several_outputs_and_runtime_errors_fail() {
        assert_eq!(run(".[]", "[1,2]"), Err(RunError::Outputs(2)));
        assert_eq!(run("empty", "1"), Err(RunError::Outputs(0)));
        assert!(matches!(run(".a.b", "[1]"), Err(RunError::Program(_))));
        assert!(matches!(run("error(\"no\")", "1"), Err(RunError::Program(m)) if m.contains("no")));
        assert!(matches!(run(".", "{"), Err(RunError::Input(_))));
    }

    #[test]
    fn values_nested_past_the_limit_fail_the_run_instead_of_the_process() {
        let too_deep = format!(
            "the program built a value nested deeper than {} levels",
            value::MAX_DEPTH
        );
        let fails = |src: &str, input: &str| match run(src, input) {
            Err(RunError::Program(m)) => assert_eq!(m, too_deep, "{src}"),
            other => panic!("{src}: {other:?}"),
        };
        // One level per step, from an 11-byte request: on the fast interpreter, and on jaq
        // (`getpath` is not in the fast subset).
        fails("reduce range(0; .n) as $i (null; [.])", r#"{"n":5000}"#);
        fails(
            "reduce range(0; .n) as $i (null; [.]) | getpath([])",
            r#"{"n":5000}"#,
        );
        let items = format!("{{\"items\":[{}0]}}", "0,".repeat(200_000));
        fails("reduce .items[] as $i (null; {next: ., v: $i})", &items);
        fails(
            "reduce .items[] as $i (null; {next: ., v: $i}) | getpath([])",
            &items,
        );
        // Up to the limit, values are built and written out.
        let at_limit = run(
            "reduce range(0; .n) as $i (null; [.])",
            &format!("{{\"n\":{}}}", value::MAX_DEPTH),
        )
        .expect("at the limit");
        assert_eq!(at_limit.matches('[').count(), usize::from(value::MAX_DEPTH));
        // jaq works on deep values inside a run (on its own stack) as long as its one output
        // is within the limit.
        let deep_text = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let input = serde_json::json!({ "s": deep_text }).to_string();
        assert_eq!(
            run(".s | fromjson | type", &input).as_deref(),
            Ok("\"array\"")
        );
        assert_eq!(
            run(
                "reduce .items[] as $i (null; {next: ., v: $i}) | getpath([]) | type",
                &items
            )
            .as_deref(),
            Ok("\"object\"")
        );
    }

    #[test]
    fn numbers_json_has_no_text_for_are_written_as_jq_writes_them() {
        for src in [
            "[.a * .b, -.a * .b, (-1 | sqrt)]",
            "[.a * .b, -.a * .b, (-1 | sqrt)] | getpath([])",
        ] {
            assert_eq!(
                run(src, r#"{"a":1e308,"b":10}"#).as_deref(),
                Ok("[1.7976931348623157e308,-1.7976931348623157e308,null]"),
                "{src}"
            );
        }
    }

    #[test]
    fn compile_errors_name_their_line_and_column() {
        let e = Program::compile("{a: 1,\n  b: $nope}", &["params"]).expect_err("undefined");
        assert_eq!((e.line, e.column), (2, 6), "{e}");
        assert!(e.message.contains("$nope"), "{e}");
        let e = Program::compile("{a: }", &[]).expect_err("syntax");
        assert_eq!((e.line, e.column), (1, 5), "{e}");
        let e = Program::compile("map(.) | frobnicate(1)", &[]).expect_err("unknown");
        assert!(e.message.contains("frobnicate"), "{e}");
        assert_eq!(e.column, 10);
    }
}
