//! The report of a `bench round`: from the round folder's `round.json` and the run folders it
//! names, the summary tables (average throughput per ESB over the rounds, a scenario × ESB
//! table, errors over all requests, answer sizes compared across rounds, start-up time and
//! memory), the commands, then `bench report`'s per-scenario sections. Also the CSV files in
//! the classic 8-column format and `summary.json`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::error::BenchError;
use crate::load::{ErrorCounts, LoadResult};
use crate::matrix::{read_dir, Cell, RunInfo};
use crate::report::{esc, fmt_num, page_head, render_runs, size_label, Spread};
use crate::round::RoundInfo;

/// One ESB's average throughput over its cells, per round.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Average {
    /// ESB.
    pub target: String,
    /// Suite.
    pub suite: String,
    /// Cells per round (the most measured in one round).
    pub cells: usize,
    /// The mean TPS of its cells, per round.
    pub per_round: Vec<f64>,
    /// Median of `per_round`.
    pub median: f64,
    /// Best of `per_round`.
    pub best: f64,
    /// The same over only the cells every ESB of the suite measured (`None` when there are none,
    /// or this is the only ESB).
    pub common: Option<(usize, f64, f64)>,
}

/// Errors of one ESB over all its measured requests.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ErrorTotals {
    /// ESB.
    pub target: String,
    /// Requests measured.
    pub requests: u64,
    /// Errors by class.
    pub errors: ErrorCounts,
    /// Clients that got no answer during a whole cell (neither successes nor errors).
    pub unanswered: u64,
    /// Errors during warm-ups (not measured).
    pub warmup_errors: u64,
    /// Starts that failed.
    pub failed_starts: usize,
}

/// Answer sizes of one (suite, scenario, size) at one ESB, over every round and concurrency.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SizeCheck {
    /// Suite.
    pub suite: String,
    /// Scenario.
    pub scenario: String,
    /// Request size (0: no size axis).
    pub size: usize,
    /// ESB.
    pub target: String,
    /// Requests of the rotation seen.
    pub requests: usize,
    /// Smallest and largest answer size.
    pub range: Option<(u64, u64)>,
    /// What is wrong: a request answered with more than one size (possible corruption), or an
    /// answer size no other ESB gave.
    pub flags: Vec<String>,
}

/// `summary.json`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Averages per ESB and suite.
    pub averages: Vec<Average>,
    /// Median-of-rounds average TPS by (suite, scenario) then ESB.
    pub scenarios: BTreeMap<String, BTreeMap<String, (f64, f64)>>,
    /// Errors per ESB.
    pub errors: Vec<ErrorTotals>,
    /// Answer sizes.
    pub sizes: Vec<SizeCheck>,
}

type Runs = Vec<(String, RunInfo, Vec<Cell>)>;

fn read_runs(out: &Path, info: &RoundInfo) -> Result<Runs, BenchError> {
    let mut runs = Vec::new();
    for t in &info.targets {
        for (suite, rel) in &t.runs {
            let dir = out.join(rel);
            if dir.join("run.json").exists() {
                let (run, cells) = read_dir(&dir)?;
                runs.push((suite.clone(), run, cells));
            }
        }
    }
    Ok(runs)
}

fn median(v: &[f64]) -> f64 {
    Spread::of(v.iter().copied()).map_or(0.0, |s| s.median)
}

fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

fn mean_per_round<'a>(cells: impl Iterator<Item = &'a Cell>) -> Vec<f64> {
    let mut by_round: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for c in cells {
        by_round.entry(c.iteration).or_default().push(c.result.tps);
    }
    by_round
        .values()
        .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        .collect()
}

fn cell_key(c: &Cell) -> (String, usize, usize) {
    (c.scenario.clone(), c.size, c.concurrency)
}

/// Computes the summary tables.
pub fn summarize(info: &RoundInfo, runs: &Runs) -> Summary {
    let mut averages = Vec::new();
    let suites: BTreeSet<&String> = runs.iter().map(|(s, _, _)| s).collect();
    for suite in &suites {
        let of_suite: Vec<&(String, RunInfo, Vec<Cell>)> =
            runs.iter().filter(|(s, _, _)| s == *suite).collect();
        let keys: Vec<BTreeSet<(String, usize, usize)>> = of_suite
            .iter()
            .map(|(_, _, cells)| cells.iter().map(cell_key).collect())
            .collect();
        let common: BTreeSet<(String, usize, usize)> = match keys.split_first() {
            Some((first, rest)) if !rest.is_empty() => first
                .iter()
                .filter(|k| rest.iter().all(|o| o.contains(*k)))
                .cloned()
                .collect(),
            _ => BTreeSet::new(),
        };
        for (_, run, cells) in &of_suite {
            let per_round = mean_per_round(cells.iter());
            let mut per_round_cells: BTreeMap<usize, usize> = BTreeMap::new();
            for c in cells.iter() {
                *per_round_cells.entry(c.iteration).or_default() += 1;
            }
            let shared = (!common.is_empty()).then(|| {
                let v = mean_per_round(cells.iter().filter(|c| common.contains(&cell_key(c))));
                (common.len(), round2(median(&v)), round2(best(&v)))
            });
            averages.push(Average {
                target: run.target.name.clone(),
                suite: (*suite).clone(),
                cells: per_round_cells.values().copied().max().unwrap_or(0),
                median: round2(median(&per_round)),
                best: round2(best(&per_round)),
                per_round: per_round.iter().map(|v| round2(*v)).collect(),
                common: shared,
            });
        }
    }
    let mut scenarios: BTreeMap<String, BTreeMap<String, (f64, f64)>> = BTreeMap::new();
    for (suite, run, cells) in runs {
        let names: BTreeSet<&String> = cells.iter().map(|c| &c.scenario).collect();
        for sc in names {
            let v = mean_per_round(cells.iter().filter(|c| &c.scenario == sc));
            let key = if suites.len() > 1 {
                format!("{suite}: {sc}")
            } else {
                sc.clone()
            };
            scenarios.entry(key).or_default().insert(
                run.target.name.clone(),
                (round2(median(&v)), round2(best(&v))),
            );
        }
    }
    let mut errors = Vec::new();
    for t in &info.targets {
        let mut e = ErrorCounts::default();
        let mut requests = 0;
        let mut unanswered = 0;
        for (_, run, cells) in runs {
            if run.target.name != t.name {
                continue;
            }
            for c in cells {
                requests += c.result.requests;
                unanswered += c.result.unanswered;
                e.add(&c.result.errors);
            }
        }
        errors.push(ErrorTotals {
            target: t.name.clone(),
            requests,
            errors: e,
            unanswered,
            warmup_errors: t.starts.iter().map(|s| s.warmup_errors).sum(),
            failed_starts: t.starts.iter().filter(|s| s.startup_ms.is_none()).count(),
        });
    }
    Summary {
        averages,
        scenarios,
        errors,
        sizes: size_checks(runs),
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Answer sizes by (suite, scenario, size), then ESB, then request of the rotation: every size
/// seen, with its count.
type SizeMap =
    BTreeMap<(String, String, usize), BTreeMap<String, BTreeMap<usize, BTreeMap<u64, u64>>>>;

fn size_checks(runs: &Runs) -> Vec<SizeCheck> {
    let mut seen: SizeMap = BTreeMap::new();
    for (suite, run, cells) in runs {
        for c in cells {
            let per_request = seen
                .entry((suite.clone(), c.scenario.clone(), c.size))
                .or_default()
                .entry(run.target.name.clone())
                .or_default();
            for rs in &c.result.response_sizes {
                let sizes = per_request.entry(rs.request).or_default();
                for s in &rs.sizes {
                    *sizes.entry(s.bytes).or_default() += s.count;
                }
            }
        }
    }
    let mut out = Vec::new();
    for ((suite, scenario, size), by_target) in &seen {
        for (target, per_request) in by_target {
            let mut flags = Vec::new();
            for (req, sizes) in per_request {
                if sizes.len() > 1 {
                    let list: Vec<String> =
                        sizes.iter().map(|(b, n)| format!("{b} B × {n}")).collect();
                    let which = if per_request.len() > 1 {
                        format!("request {req}")
                    } else {
                        "the request".to_string()
                    };
                    flags.push(format!(
                        "{which} was answered with {} sizes ({}): possible corruption",
                        sizes.len(),
                        list.join(", ")
                    ));
                }
            }
            // A request that at least two other ESBs answer with one and the same size, and
            // this one with another: pointed out, without a verdict (one other ESB alone could
            // be the odd one).
            for (req, sizes) in per_request {
                let theirs: Vec<u64> = by_target
                    .iter()
                    .filter(|(t, _)| *t != target)
                    .filter_map(|(_, pr)| pr.get(req))
                    .filter(|s| s.len() == 1)
                    .flat_map(|s| s.keys().copied())
                    .collect();
                let mine = sizes.keys().next().copied();
                if let (Some(&first), Some(mine), 1) = (theirs.first(), mine, sizes.len()) {
                    if theirs.len() >= 2 && theirs.iter().all(|&t| t == first) && first != mine {
                        flags.push(format!(
                            "answers are {mine} B where the other ESBs' are {first} B"
                        ));
                    }
                }
            }
            let all: Vec<u64> = per_request
                .values()
                .flat_map(|s| s.keys().copied())
                .collect();
            out.push(SizeCheck {
                suite: suite.clone(),
                scenario: scenario.clone(),
                size: *size,
                target: target.clone(),
                requests: per_request.len(),
                range: all.iter().min().copied().zip(all.iter().max().copied()),
                flags,
            });
        }
    }
    out
}

fn fmt_int(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn one_in(errors: u64, requests: u64) -> String {
    if errors == 0 {
        "none".into()
    } else {
        format!("1 in {}", fmt_int(requests / errors.max(1)))
    }
}

/// Renders the round report.
pub fn render(info: &RoundInfo, runs: &Runs, summary: &Summary) -> String {
    let mut html = page_head(&info.title);
    html.push_str(
        "<style>.warn{color:#a60}.flag{color:#b00;font-weight:bold}code{font-size:12px}</style>\n",
    );
    let status = if info.finished_unix == 0 {
        "<span class=\"bad\">in progress</span>".to_string()
    } else if info.interrupted {
        format!(
            "<span class=\"bad\">interrupted</span> in round {} after {} of {} cells",
            info.rounds_begun, info.cells_measured, info.cells_planned
        )
    } else {
        format!(
            "complete: {} of {} cells",
            info.cells_measured, info.cells_planned
        )
    };
    let m = &info.machine;
    let _ = writeln!(
        html,
        "<p>{status}; wall time {}; {} round(s) of {} s per cell (warm-up {} s per cell), keep-alive {}, answers {}, {} load thread(s){}.</p>",
        fmt_duration(info.wall_s),
        info.rounds,
        fmt_num(info.duration_s),
        fmt_num(info.cell_warmup_s),
        if info.keep_alive { "on" } else { "off" },
        if info.verify { "verified" } else { "not verified (HTTP 200 is success)" },
        info.threads,
        match &info.load_cpus {
            Some(c) => format!(" on CPU {}", esc(c)),
            None => String::new(),
        }
    );
    let _ = writeln!(
        html,
        "<p class=\"note\">Machine: {} ({} cores), kernel {}, host {}; busbar-bench {}. Throughput is wall-clock successful{} requests per second. A round measures every ESB in turn: each is started, checked ready, warmed up, measured and stopped.</p>",
        esc(&m.cpu_model),
        m.cores,
        esc(&m.kernel),
        esc(&m.hostname),
        esc(&info.bench_version),
        if info.verify { " (verified)" } else { "" }
    );

    html.push_str("<h2>Average throughput per ESB</h2>\n<p class=\"note\">The mean TPS over an ESB's cells (scenarios × sizes × concurrency) in each round; median and best of the rounds. ESBs that serve fewer scenarios are compared fairly in the last columns, over only the cells every ESB of the suite measured.</p>\n");
    html.push_str("<table><tr><th class=\"l\">ESB</th><th class=\"l\">suite</th><th>cells per round</th><th>median of rounds</th><th>best round</th><th class=\"l\">per round</th><th>common cells</th><th>common: median</th><th>common: best</th></tr>\n");
    for a in &summary.averages {
        let (cn, cm, cb) = match a.common {
            Some((n, m, b)) => (n.to_string(), fmt_num(m), fmt_num(b)),
            None => ("–".into(), "–".into(), "–".into()),
        };
        let _ = writeln!(
            html,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{cn}</td><td>{cm}</td><td>{cb}</td></tr>",
            esc(&a.target),
            esc(&a.suite),
            a.cells,
            fmt_num(a.median),
            fmt_num(a.best),
            a.per_round.iter().map(|v| fmt_num(*v)).collect::<Vec<_>>().join(" · ")
        );
    }
    html.push_str("</table>\n");

    let targets: Vec<&String> = info.targets.iter().map(|t| &t.name).collect();
    html.push_str("<h2>Scenario × ESB</h2>\n<p class=\"note\">Mean TPS over the scenario's sizes and concurrency levels; median of the rounds (best in brackets).</p>\n<table><tr><th class=\"l\">scenario</th>");
    for t in &targets {
        let _ = write!(html, "<th>{}</th>", esc(t));
    }
    html.push_str("</tr>\n");
    for (sc, by) in &summary.scenarios {
        let _ = write!(html, "<tr><td class=\"l\">{}</td>", esc(sc));
        for t in &targets {
            match by.get(*t) {
                Some((m, b)) => {
                    let _ = write!(html, "<td>{} ({})</td>", fmt_num(*m), fmt_num(*b));
                }
                None => html.push_str("<td>–</td>"),
            }
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");

    html.push_str("<h2>Errors over all requests</h2>\n<p class=\"note\">Unanswered at a cell's end: clients whose request got no answer during the whole cell, neither successes nor errors: the ESB was slower than the cell lasted (summed over the cells).</p>\n<table><tr><th class=\"l\">ESB</th><th>requests</th><th>errors</th><th>rate</th><th>connect</th><th>timeout</th><th>read</th><th>write</th><th>status</th><th>verify failures</th><th>unanswered at a cell's end</th><th>warm-up errors</th><th>failed starts</th></tr>\n");
    for e in &summary.errors {
        let total = e.errors.total();
        let bad = |n: u64| if n > 0 { " class=\"bad\"" } else { "" };
        let _ = writeln!(
            html,
            "<tr><td class=\"l\">{}</td><td>{}</td><td{}>{}</td><td{}>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td{}>{}</td><td{}>{}</td><td>{}</td><td{}>{}</td></tr>",
            esc(&e.target),
            fmt_int(e.requests),
            bad(total),
            fmt_int(total),
            bad(total),
            one_in(total, e.requests),
            e.errors.connect,
            e.errors.timeout,
            e.errors.read,
            e.errors.write,
            e.errors.status,
            bad(e.errors.verify),
            e.errors.verify,
            if e.unanswered > 0 { " class=\"warn\"" } else { "" },
            fmt_int(e.unanswered),
            e.warmup_errors,
            bad(e.failed_starts as u64),
            e.failed_starts
        );
    }
    html.push_str("</table>\n");

    html.push_str("<h2>Answer sizes across rounds</h2>\n<p class=\"note\">Every answer's body size, per request, over every round and concurrency level. A correct ESB answers one request with one size; a second size is flagged as possible corruption, whether or not answers were verified. A size that differs from the one at least two other ESBs agree on is pointed out too, without a verdict (an ESB that re-serialises messages differs in formatting).</p>\n");
    html.push_str("<table><tr><th class=\"l\">scenario</th><th>size</th><th class=\"l\">ESB</th><th>requests</th><th>answer sizes</th><th class=\"l\">finding</th></tr>\n");
    for s in &summary.sizes {
        let range = match s.range {
            Some((a, b)) if a == b => format!("{} B", fmt_int(a)),
            Some((a, b)) => format!("{} – {} B", fmt_int(a), fmt_int(b)),
            None => "–".into(),
        };
        let finding = if s.flags.is_empty() {
            if s.range.is_some() {
                "consistent".to_string()
            } else {
                "not recorded (fresh messages)".to_string()
            }
        } else {
            s.flags
                .iter()
                .map(|f| {
                    let class = if f.contains("corruption") {
                        "flag"
                    } else {
                        "warn"
                    };
                    format!("<span class=\"{class}\">{}</span>", esc(f))
                })
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let _ = writeln!(
            html,
            "<tr><td class=\"l\">{}{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{range}</td><td class=\"l\">{finding}</td></tr>",
            esc(&s.suite),
            if s.scenario.is_empty() { String::new() } else { format!(": {}", esc(&s.scenario)) },
            if s.size == 0 { "–".into() } else { size_label(s.size) },
            esc(&s.target),
            s.requests
        );
    }
    html.push_str("</table>\n");

    html.push_str("<h2>Start-up and memory</h2>\n<p class=\"note\">Start-up: from launch to the moment every base URL answered HTTP. Memory: the highest resident size of the ESB's processes together, sampled every 100 ms while it ran. Settling: after each cell the kit waits until the ESB answers one request of that cell alone, so that what the cell left unanswered is worked off before the next one starts; the total and the longest wait.</p>\n<table><tr><th class=\"l\">ESB</th><th>round</th><th>start-up ms</th><th>peak RSS MiB</th><th>cells</th><th>settling s (max)</th><th class=\"l\">ended</th><th class=\"l\">problem</th><th class=\"l\">log</th></tr>\n");
    let mut starts: Vec<(&str, &crate::round::Start)> = Vec::new();
    if let Some((_, s)) = &info.backend {
        starts.push(("back end", s));
    }
    for t in &info.targets {
        for s in &t.starts {
            starts.push((&t.name, s));
        }
    }
    for (name, s) in starts {
        let _ = writeln!(
            html,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{:.1} ({:.1})</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\"><code>{}</code></td></tr>",
            esc(name),
            if s.round == 0 { "–".into() } else { s.round.to_string() },
            s.startup_ms.map_or("<span class=\"bad\">not ready</span>".into(), |ms| format!("{ms:.0}")),
            s.peak_rss_kib as f64 / 1024.0,
            s.cells,
            s.settle_s,
            s.settle_max_s,
            esc(s.exit.as_deref().unwrap_or("running")),
            s.error.as_deref().map_or(String::new(), |e| format!("<span class=\"bad\">{}</span>", esc(e))),
            esc(&s.log)
        );
    }
    html.push_str("</table>\n");

    html.push_str("<h2>Commands</h2>\n<table><tr><th class=\"l\">what</th><th class=\"l\">command</th><th class=\"l\">folder</th><th class=\"l\">environment</th></tr>\n");
    let _ = writeln!(
        html,
        "<tr><td class=\"l\">the kit</td><td class=\"l\"><code>{}</code></td><td class=\"l\"></td><td class=\"l\">round file <code>{}</code></td></tr>",
        esc(&info.command.join(" ")),
        esc(&info.file)
    );
    let env_text = |env: &BTreeMap<String, String>| {
        env.iter()
            .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if let Some((b, _)) = &info.backend {
        let _ = writeln!(
            html,
            "<tr><td class=\"l\">back end</td><td class=\"l\"><code>{}</code></td><td class=\"l\"><code>{}</code></td><td class=\"l\"><code>{}</code></td></tr>",
            esc(&b.argv.join(" ")),
            esc(&b.dir.display().to_string()),
            env_text(&b.env)
        );
    }
    for t in &info.targets {
        let _ = writeln!(
            html,
            "<tr><td class=\"l\">{}{}</td><td class=\"l\"><code>{}</code></td><td class=\"l\"><code>{}</code></td><td class=\"l\"><code>{}</code></td></tr>",
            esc(&t.name),
            t.version.as_deref().map_or(String::new(), |v| format!(" {}", esc(v))),
            esc(&t.argv.join(" ")),
            esc(&t.dir),
            env_text(&t.env)
        );
    }
    html.push_str("</table>\n");

    let detail: Vec<(RunInfo, Vec<Cell>)> = runs
        .iter()
        .map(|(_, r, c)| (r.clone(), c.clone()))
        .collect();
    if !detail.is_empty() {
        html.push_str("<h2>Per scenario</h2>\n<p class=\"note\">Bars: median over the rounds; whiskers: min–max.</p>\n");
        render_runs(&mut html, &detail);
    }
    html.push_str("<p class=\"note\">Generated by busbar-bench. round.json, summary.json, the CSV files (classic 8-column format, one per ESB, suite and round) and every cell's JSON are in this folder.</p>\n</body></html>\n");
    html
}

fn fmt_duration(s: f64) -> String {
    let s = s.round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, (s % 3600) / 60, s % 60)
}

/// The classic CSV of one ESB's suite in one round.
fn classic_csv(cells: &[&Cell]) -> String {
    let mut text = String::from(LoadResult::LEGACY_CSV_HEADER);
    text.push('\n');
    for c in cells {
        text.push_str(&c.result.legacy_csv_line());
        text.push('\n');
    }
    text
}

/// Reads a round folder's `round.json`.
pub fn read_info(dir: &Path) -> Result<RoundInfo, BenchError> {
    let path = dir.join("round.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| BenchError::io(format!("cannot read {}", path.display()), e))?;
    serde_json::from_str(&text)
        .map_err(|e| BenchError::Usage(format!("{} is not a round index: {e}", path.display())))
}

/// The round report of the round folder `dir`, as HTML.
pub fn render_folder(dir: &Path) -> Result<String, BenchError> {
    let info = read_info(dir)?;
    let runs = read_runs(dir, &info)?;
    let summary = summarize(&info, &runs);
    Ok(render(&info, &runs, &summary))
}

/// Writes `report.html`, `summary.json` and `csv/` for the round folder `out`.
pub fn write(out: &Path, info: &RoundInfo) -> Result<(), BenchError> {
    let runs = read_runs(out, info)?;
    let summary = summarize(info, &runs);
    let csv = out.join("csv");
    std::fs::create_dir_all(&csv)
        .map_err(|e| BenchError::io(format!("cannot create {}", csv.display()), e))?;
    for (suite, run, cells) in &runs {
        let rounds: BTreeSet<usize> = cells.iter().map(|c| c.iteration).collect();
        for r in rounds {
            let of_round: Vec<&Cell> = cells.iter().filter(|c| c.iteration == r).collect();
            let path = csv.join(format!("{}-{suite}-round{r}.csv", run.target.name));
            std::fs::write(&path, classic_csv(&of_round))
                .map_err(|e| BenchError::io(format!("cannot write {}", path.display()), e))?;
        }
    }
    crate::write_json(&out.join("summary.json"), &summary)?;
    let html = render(info, &runs, &summary);
    let path = out.join("report.html");
    std::fs::write(&path, html)
        .map_err(|e| BenchError::io(format!("cannot write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::load::{ResponseSizes, SizeCount};
    use crate::matrix::TargetInfo;

    fn cell(target: &str, round: usize, tps: f64, sizes: &[(u64, u64)]) -> Cell {
        let mut result: LoadResult = serde_json::from_value(serde_json::json!({
            "url": "http://127.0.0.1:1/service/DirectProxy", "mode": "closed", "concurrency": 20,
            "threads": 1, "rate": null, "keep_alive": true, "http_version": "1.1",
            "request_bytes": 1024, "warmup_s": 0.0, "elapsed_s": 1.0, "interrupted": false,
            "requests": 100, "successes": 99, "errors": {"connect":0,"timeout":0,"read":0,"write":0,"status":0,"verify":1},
            "tps": tps, "response_bytes_mean": 1024.0,
            "latency_ms": {"mean":1.0,"p50":1.0,"p90":1.0,"p95":1.0,"p99":1.0,"p999":1.0,"max":1.0},
            "legacy": null, "first_error": null
        }))
        .unwrap();
        result.response_sizes = vec![ResponseSizes {
            request: 0,
            sizes: sizes
                .iter()
                .map(|&(bytes, count)| SizeCount { bytes, count })
                .collect(),
            other: 0,
        }];
        Cell {
            schema: crate::matrix::CELL_SCHEMA.into(),
            target: TargetInfo {
                name: target.into(),
                version: None,
                base_url: "http://127.0.0.1:1/service".into(),
            },
            scenario: "direct".into(),
            size: 1024,
            concurrency: 20,
            iteration: round,
            result,
        }
    }

    #[test]
    fn a_second_answer_size_is_flagged_and_a_steady_one_is_not() {
        let run = |name: &str| RunInfo {
            schema: crate::matrix::RUN_SCHEMA.into(),
            target: TargetInfo {
                name: name.into(),
                version: None,
                base_url: String::new(),
            },
            suite: "classic".into(),
            bench_version: String::new(),
            machine: crate::util::Machine::current(),
            started_unix: 0,
            finished_unix: 0,
            iterations: 2,
            duration_s: 1.0,
            warmup_s: 0.0,
            threads: 1,
            scenarios: vec![],
            sizes: vec![],
            concurrency: vec![],
            interrupted: false,
            cells: vec![],
            failed_cells: vec![],
        };
        let runs: Runs = vec![
            (
                "classic".into(),
                run("good"),
                vec![
                    cell("good", 1, 100.0, &[(1024, 99)]),
                    cell("good", 2, 300.0, &[(1024, 99)]),
                ],
            ),
            (
                "classic".into(),
                run("bad"),
                vec![
                    cell("bad", 1, 50.0, &[(1024, 99)]),
                    cell("bad", 2, 70.0, &[(1000, 99)]),
                ],
            ),
        ];
        let checks = size_checks(&runs);
        let good = checks.iter().find(|c| c.target == "good").unwrap();
        assert!(good.flags.is_empty(), "{good:?}");
        let bad = checks.iter().find(|c| c.target == "bad").unwrap();
        assert!(
            bad.flags[0].contains("2 sizes (1000 B × 99, 1024 B × 99)"),
            "{bad:?}"
        );
        // Averages: per-round means, median and best.
        let info: RoundInfo = serde_json::from_value(serde_json::json!({
            "schema": "x", "title": "t", "file": "f", "command": [], "bench_version": "0",
            "machine": crate::util::Machine::current(), "started_unix": 0, "finished_unix": 1,
            "wall_s": 1.0, "rounds": 2, "rounds_begun": 2, "duration_s": 1.0, "cell_warmup_s": 0.0,
            "keep_alive": true, "verify": true, "threads": 1, "load_cpus": null,
            "interrupted": false, "cells_planned": 4, "cells_measured": 4, "backend": null,
            "targets": [
                {"name": "good", "version": null, "argv": [], "dir": ".", "env": {}, "cpus": null, "runs": {}, "starts": []},
                {"name": "bad", "version": null, "argv": [], "dir": ".", "env": {}, "cpus": null, "runs": {}, "starts": []}
            ]
        }))
        .unwrap();
        let s = summarize(&info, &runs);
        let good = s.averages.iter().find(|a| a.target == "good").unwrap();
        assert_eq!((good.median, good.best, good.cells), (200.0, 300.0, 1));
        assert_eq!(good.common, Some((1, 200.0, 300.0)));
        let errors = s.errors.iter().find(|e| e.target == "bad").unwrap();
        assert_eq!((errors.requests, errors.errors.verify), (200, 2));
        assert_eq!(one_in(2, 200), "1 in 100");
        let html = render(&info, &runs, &s);
        assert!(html.contains("possible corruption"));
    }
}
