//! `bench report`: one self-contained HTML page (inline SVG, inline CSS, no scripts, no
//! network) comparing result directories, one per ESB run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::error::BenchError;
use crate::load::LoadResult;
use crate::matrix::{read_dir, Cell, RunInfo};

/// Options of `bench report`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// Result directories written by `bench run` (one per ESB run), or one round folder
    /// written by `bench round` (its round report is rendered again).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Output HTML file.
    #[arg(long)]
    pub out: PathBuf,
    /// Page title.
    #[arg(long, default_value = "busbar ESB benchmark")]
    pub title: String,
}

const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Median and spread of one figure over iterations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
}

impl Spread {
    /// Median, min and max of the values (`None` when empty).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// Cells of one (ESB, scenario, size, concurrency) over iterations.
type Key = (usize, String, usize, usize);

/// Runs `bench report`.
pub fn command(args: &ReportArgs) -> Result<(), BenchError> {
    if let [dir] = &args.dirs[..] {
        if dir.join("round.json").exists() {
            let html = crate::round_report::render_folder(dir)?;
            std::fs::write(&args.out, html)
                .map_err(|e| BenchError::io(format!("cannot write {}", args.out.display()), e))?;
            eprintln!("round report written to {}", args.out.display());
            return Ok(());
        }
    }
    let mut runs = Vec::new();
    for dir in &args.dirs {
        runs.push(read_dir(dir)?);
    }
    let html = render(&args.title, &runs);
    std::fs::write(&args.out, html)
        .map_err(|e| BenchError::io(format!("cannot write {}", args.out.display()), e))?;
    eprintln!("report written to {}", args.out.display());
    Ok(())
}

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A size as people say it (512 B, 1 KiB, 100 KiB, 1 MiB, 16385 B; `no body` for 0).
pub fn size_label(size: usize) -> String {
    if size == 0 {
        "no body".into()
    } else if size >= 1024 * 1024 && size.is_multiple_of(1024 * 1024) {
        format!("{} MiB", size / (1024 * 1024))
    } else if size >= 1024 && size.is_multiple_of(1024) {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

pub fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

/// A grouped bar chart with min–max whiskers: one group per x label, one bar per series.
fn bar_chart(
    title: &str,
    y_label: &str,
    x_labels: &[String],
    series: &[(String, Vec<Option<Spread>>)],
) -> String {
    let (w, h) = (720.0, 300.0);
    let (left, right, top, bottom) = (70.0, 20.0, 40.0, 50.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let peak = series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().map(|s| s.max))
        .fold(0.0, f64::max);
    let y_max = nice_max(peak);
    let y = |v: f64| top + plot_h - v / y_max * plot_h;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{t}">"#,
        t = esc(title)
    );
    let _ = write!(
        svg,
        r#"<text x="{left}" y="18" class="ct">{}</text>"#,
        esc(title)
    );
    for i in 0..=5 {
        let v = y_max * i as f64 / 5.0;
        let yy = y(v);
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{tx}" y="{ty:.1}" text-anchor="end" class="ax">{}</text>"##,
            fmt_num(v),
            x2 = w - right,
            tx = left - 6.0,
            ty = yy + 4.0
        );
    }
    let _ = write!(
        svg,
        r#"<text transform="translate(14,{}) rotate(-90)" text-anchor="middle" class="ax">{}</text>"#,
        top + plot_h / 2.0,
        esc(y_label)
    );
    let groups = x_labels.len().max(1) as f64;
    let group_w = plot_w / groups;
    let n = series.len().max(1) as f64;
    let bar_w = group_w * 0.8 / n;
    for (g, label) in x_labels.iter().enumerate() {
        let gx = left + group_w * g as f64;
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="ax">{}</text>"#,
            gx + group_w / 2.0,
            top + plot_h + 18.0,
            esc(label)
        );
        for (si, (_, values)) in series.iter().enumerate() {
            let Some(Some(s)) = values.get(g) else {
                continue;
            };
            let color = PALETTE[si % PALETTE.len()];
            let x = gx + group_w * 0.1 + bar_w * si as f64;
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{}</title></rect>"#,
                y(s.median),
                (bar_w - 2.0).max(1.0),
                (top + plot_h - y(s.median)).max(0.0),
                format_args!(
                    "{}: median {} (min {} – max {})",
                    esc(&series[si].0),
                    fmt_num(s.median),
                    fmt_num(s.min),
                    fmt_num(s.max)
                )
            );
            let cx = x + (bar_w - 2.0).max(1.0) / 2.0;
            if s.max > s.min {
                let _ = write!(
                    svg,
                    r##"<line x1="{cx:.1}" x2="{cx:.1}" y1="{:.1}" y2="{:.1}" stroke="#222"/><line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#222"/><line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#222"/>"##,
                    y(s.max),
                    y(s.min),
                    cx - 3.0,
                    cx + 3.0,
                    y(s.max),
                    y(s.max),
                    cx - 3.0,
                    cx + 3.0,
                    y(s.min),
                    y(s.min)
                );
            }
        }
    }
    let _ = write!(
        svg,
        r##"<line x1="{left}" x2="{left}" y1="{top}" y2="{b}" stroke="#444"/><line x1="{left}" x2="{r}" y1="{b}" y2="{b}" stroke="#444"/>"##,
        b = top + plot_h,
        r = w - right
    );
    // Legend along the top right.
    let mut lx = w - right;
    for (si, (name, _)) in series.iter().enumerate().rev() {
        let width = 18.0 + 7.0 * name.chars().count() as f64;
        lx -= width + 10.0;
        let color = PALETTE[si % PALETTE.len()];
        let _ = write!(
            svg,
            r#"<rect x="{lx:.1}" y="24" width="10" height="10" fill="{color}"/><text x="{:.1}" y="33" class="ax">{}</text>"#,
            lx + 14.0,
            esc(name)
        );
    }
    svg.push_str("</svg>");
    svg
}

const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}\
h1{font-size:26px}h2{font-size:21px;border-bottom:2px solid #ccc;padding-bottom:4px;margin-top:32px}h3{font-size:16px}\
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f1f1f1}td.l,th.l{text-align:left}.bad{color:#b00;font-weight:bold}.charts{display:flex;flex-wrap:wrap;gap:8px}\
svg{background:#fff;border:1px solid #e4e4e4}.ct{font-size:14px;font-weight:600}.ax{font-size:11px;fill:#333}\
.note{color:#555;font-size:13px}";

/// Renders the report for `runs` (each a run index and its cells).
pub fn render(title: &str, runs: &[(RunInfo, Vec<Cell>)]) -> String {
    let mut html = page_head(title);
    html.push_str("<p class=\"note\">Throughput is wall-clock successful (verified) requests per second; bars show the median over iterations and whiskers the min–max spread. Every response was verified; a corrupted answer counts as an error, never as a success.</p>\n");
    render_runs(&mut html, runs);
    html.push_str("<p class=\"note\">Generated by busbar-bench. Raw per-cell JSON and summary.csv are in each run directory.</p>\n</body></html>\n");
    html
}

/// The page's head and title, up to the first section.
pub fn page_head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>{CSS}</style></head><body>\n<h1>{t}</h1>\n",
        t = esc(title)
    )
}

/// The runs table and a section per scenario (charts by size and by concurrency, latency and
/// errors).
pub fn render_runs(html: &mut String, runs: &[(RunInfo, Vec<Cell>)]) {
    let names: Vec<String> = runs
        .iter()
        .map(|(info, _)| match &info.target.version {
            Some(v) => format!("{} {v}", info.target.name),
            None => info.target.name.clone(),
        })
        .collect();
    let mut groups: BTreeMap<Key, Vec<&LoadResult>> = BTreeMap::new();
    let mut scenarios: Vec<String> = Vec::new();
    let mut sizes = BTreeSet::new();
    let mut concs = BTreeSet::new();
    for (i, (_, cells)) in runs.iter().enumerate() {
        for c in cells {
            if !scenarios.contains(&c.scenario) {
                scenarios.push(c.scenario.clone());
            }
            sizes.insert(c.size);
            concs.insert(c.concurrency);
            groups
                .entry((i, c.scenario.clone(), c.size, c.concurrency))
                .or_default()
                .push(&c.result);
        }
    }
    scenarios.sort_by_key(|s| {
        s.parse::<crate::check::Scenario>()
            .map(|x| x as usize)
            .unwrap_or(usize::MAX)
    });
    let tps = |k: &Key| {
        groups
            .get(k)
            .and_then(|rs| Spread::of(rs.iter().map(|r| r.tps)))
    };
    html.push_str("<h2>Runs</h2>\n<table><tr><th class=\"l\">ESB</th><th class=\"l\">base URL</th><th class=\"l\">machine</th><th>cores</th><th class=\"l\">kernel</th><th>iterations</th><th>duration s</th><th>warm-up s</th><th>load threads</th><th class=\"l\">bench</th><th class=\"l\">completed</th></tr>\n");
    for (i, (info, cells)) in runs.iter().enumerate() {
        let m = &info.machine;
        let _ = writeln!(
            html,
            "<tr><td class=\"l\"><span style=\"color:{}\">■</span> {}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">busbar-bench {}</td><td class=\"l\">{}</td></tr>",
            PALETTE[i % PALETTE.len()],
            esc(&names[i]),
            esc(&info.target.base_url),
            esc(&m.cpu_model),
            m.cores,
            esc(&m.kernel),
            info.iterations,
            fmt_num(info.duration_s),
            fmt_num(info.warmup_s),
            info.threads,
            esc(&info.bench_version),
            if info.interrupted { format!("<span class=\"bad\">interrupted after {} cells</span>", cells.len()) } else { format!("{} cells", cells.len()) }
        );
    }
    html.push_str("</table>\n");
    let sizes: Vec<usize> = sizes.into_iter().collect();
    let concs: Vec<usize> = concs.into_iter().collect();
    for sc in &scenarios {
        // Only the sizes this scenario was measured at (ScatterGather has none but 0; suites
        // compared in one report have different ones).
        let sizes: Vec<usize> = sizes
            .iter()
            .copied()
            .filter(|&s| groups.keys().any(|k| &k.1 == sc && k.2 == s))
            .collect();
        let _ = writeln!(html, "<h2>Scenario: {}</h2>", esc(sc));
        html.push_str("<h3>Throughput by message size</h3>\n<div class=\"charts\">\n");
        for &c in &concs {
            let series: Vec<(String, Vec<Option<Spread>>)> = (0..runs.len())
                .map(|i| {
                    (
                        names[i].clone(),
                        sizes.iter().map(|&s| tps(&(i, sc.clone(), s, c))).collect(),
                    )
                })
                .collect();
            if series.iter().all(|(_, v)| v.iter().all(Option::is_none)) {
                continue;
            }
            let labels: Vec<String> = sizes.iter().map(|&s| size_label(s)).collect();
            html.push_str(&bar_chart(
                &format!("{sc}: TPS by size at concurrency {c}"),
                "TPS",
                &labels,
                &series,
            ));
            html.push('\n');
        }
        html.push_str("</div>\n<h3>Throughput by concurrency</h3>\n<div class=\"charts\">\n");
        for &s in &sizes {
            let series: Vec<(String, Vec<Option<Spread>>)> = (0..runs.len())
                .map(|i| {
                    (
                        names[i].clone(),
                        concs.iter().map(|&c| tps(&(i, sc.clone(), s, c))).collect(),
                    )
                })
                .collect();
            if series.iter().all(|(_, v)| v.iter().all(Option::is_none)) {
                continue;
            }
            let labels: Vec<String> = concs.iter().map(|c| format!("c={c}")).collect();
            html.push_str(&bar_chart(
                &format!("{sc}: TPS by concurrency at {}", size_label(s)),
                "TPS",
                &labels,
                &series,
            ));
            html.push('\n');
        }
        html.push_str("</div>\n<h3>Latency and errors (medians over iterations)</h3>\n");
        html.push_str("<table><tr><th class=\"l\">ESB</th><th>size</th><th>c</th><th>TPS median</th><th>TPS min–max</th><th>p50 ms</th><th>p90 ms</th><th>p95 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>error rate</th><th>verify failures</th><th>response bytes</th><th>iterations</th></tr>\n");
        for (i, name) in names.iter().enumerate() {
            for &s in &sizes {
                for &c in &concs {
                    let Some(rs) = groups.get(&(i, sc.clone(), s, c)) else {
                        continue;
                    };
                    let med = |f: fn(&LoadResult) -> f64| {
                        Spread::of(rs.iter().map(|r| f(r)))
                            .map(|x| x.median)
                            .unwrap_or(0.0)
                    };
                    let t = tps(&(i, sc.clone(), s, c)).unwrap_or(Spread {
                        median: 0.0,
                        min: 0.0,
                        max: 0.0,
                    });
                    let requests: u64 = rs.iter().map(|r| r.requests).sum();
                    let errors: u64 = rs.iter().map(|r| r.errors.total()).sum();
                    let verify: u64 = rs.iter().map(|r| r.errors.verify).sum();
                    let rate = |n: u64| {
                        if requests == 0 {
                            0.0
                        } else {
                            n as f64 * 100.0 / requests as f64
                        }
                    };
                    let cls = |n: u64| if n > 0 { " class=\"bad\"" } else { "" };
                    let _ = writeln!(
                        html,
                        "<tr><td class=\"l\">{}</td><td>{}</td><td>{c}</td><td>{}</td><td>{} – {}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td{}>{:.3} %</td><td{}>{} ({:.3} %)</td><td>{:.0}</td><td>{}</td></tr>",
                        esc(name),
                        size_label(s),
                        fmt_num(t.median),
                        fmt_num(t.min),
                        fmt_num(t.max),
                        med(|r| r.latency_ms.p50),
                        med(|r| r.latency_ms.p90),
                        med(|r| r.latency_ms.p95),
                        med(|r| r.latency_ms.p99),
                        med(|r| r.latency_ms.p999),
                        med(|r| r.latency_ms.max),
                        cls(errors),
                        rate(errors),
                        cls(verify),
                        verify,
                        rate(verify),
                        med(|r| r.response_bytes_mean),
                        rs.len()
                    );
                }
            }
        }
        html.push_str("</table>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_min_max() {
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap_or(Spread {
            median: 0.0,
            min: 0.0,
            max: 0.0,
        });
        assert_eq!(
            s,
            Spread {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
        assert_eq!(Spread::of([1.0, 3.0]).map(|s| s.median), Some(2.0));
        assert_eq!(Spread::of(std::iter::empty()), None);
    }

    #[test]
    fn sizes_are_labelled_in_binary_units() {
        assert_eq!(size_label(512), "512 B");
        assert_eq!(size_label(102_400), "100 KiB");
        assert_eq!(size_label(1_048_576), "1 MiB");
        assert_eq!(size_label(16_385), "16385 B");
        assert_eq!(size_label(0), "no body");
    }

    #[test]
    fn chart_escapes_names_and_draws_whiskers() {
        let svg = bar_chart(
            "t",
            "TPS",
            &["a".into()],
            &[(
                "<x>".into(),
                vec![Some(Spread {
                    median: 5.0,
                    min: 4.0,
                    max: 6.0,
                })],
            )],
        );
        assert!(svg.contains("&lt;x&gt;"));
        assert!(!svg.contains("<x>"));
        assert_eq!(svg.matches("stroke=\"#222\"").count(), 3);
    }
}
