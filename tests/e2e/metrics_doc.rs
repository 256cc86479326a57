//! `/metrics` against `docs/metrics.md`: after traffic, the documented metrics and the
//! exported ones are the same set, with the documented types, and none that traffic moved is
//! stuck at zero.

use std::collections::BTreeMap;
use std::net::TcpListener;

use busbar_core::ErrorKind;
use busbar_engine::echo::EchoOptions;

use crate::support::*;

fn documented() -> (BTreeMap<String, String>, String) {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/metrics.md"
    ))
    .expect("docs/metrics.md");
    let mut table = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() > 3 && cells[1].starts_with("`busbar_") {
            table.insert(cells[1].trim_matches('`').to_owned(), cells[2].to_owned());
        }
    }
    (table, doc)
}

fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn every_documented_metric_is_exported_and_every_exported_one_documented() {
    let echo = echo(EchoOptions::default());
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let h = engine(&format!(
        "endpoints:\n  echo: {{ url: \"http://{}/e\", timeout: 5s }}\n  dead: {{ url: \"http://{dead}/d\", connect_timeout: 1s }}\nproxies:\n  P:\n    path: /p\n    methods: [POST]\n    in:\n      - set_header: {{ name: x-a, value: b }}\n      - call: echo\n  D:\n    path: /d\n    in:\n      - call: dead\n",
        echo.addr
    ));
    let mut c = Client::connect(h.http());
    for _ in 0..5 {
        assert_eq!(
            c.post("/p", &[], &payload(10_000, 1))
                .expect("answer")
                .status,
            200
        );
    }
    let refused = c.get("/p").expect("answer");
    assert_eq!(refused.status, 405);
    assert_eq!(
        Client::connect(h.http())
            .post("/d", &[], b"x")
            .expect("answer")
            .status,
        502
    );
    for _ in 0..3 {
        assert_eq!(c.get("/nowhere").expect("answer").status, 404);
    }
    let text = Client::connect(h.admin())
        .get("/metrics")
        .expect("metrics")
        .text();
    assert_eq!(
        sample(&text, "busbar_listener_not_found_total{listener=\"http\"}"),
        3.0
    );

    let mut exported = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            exported.insert(name.to_owned(), kind.to_owned());
        }
    }
    let (table, doc) = documented();
    assert_eq!(
        table.keys().collect::<Vec<_>>(),
        exported.keys().collect::<Vec<_>>(),
        "docs/metrics.md and /metrics list different metrics"
    );
    for (name, kind) in &table {
        assert_eq!(kind, &exported[name], "{name}: documented as {kind}");
    }
    for kind in ErrorKind::ALL {
        assert!(
            doc.contains(&format!("`{}`", kind.as_str())),
            "error kind {} is not documented",
            kind.as_str()
        );
    }

    // Traffic moved these; none may be stuck at zero.
    for prefix in [
        "busbar_proxy_requests_total{proxy=\"P\"}",
        "busbar_proxy_received_bytes_total{proxy=\"P\"}",
        "busbar_proxy_sent_bytes_total{proxy=\"P\"}",
        "busbar_proxy_errors_total{proxy=\"P\",kind=\"method_not_allowed\"}",
        "busbar_proxy_latency_seconds_count{proxy=\"P\"}",
        "busbar_endpoint_requests_total{endpoint=\"echo\"}",
        "busbar_endpoint_sent_bytes_total{endpoint=\"echo\"}",
        "busbar_endpoint_received_bytes_total{endpoint=\"echo\"}",
        "busbar_endpoint_connections_total{endpoint=\"echo\"}",
        "busbar_endpoint_attempts_total{endpoint=\"echo\"}",
        "busbar_endpoint_latency_seconds_count{endpoint=\"echo\"}",
        "busbar_endpoint_errors_total{endpoint=\"dead\",kind=\"connect_refused\"}",
        "busbar_upstream_attempts_total{endpoint=\"echo\"",
        "busbar_upstream_failures_total{endpoint=\"dead\"",
        "busbar_upstream_idle_connections{endpoint=\"echo\"",
        "busbar_listener_connections_total{listener=\"http\"}",
        "busbar_step_requests_total{step=\"proxies.P.in[0].set_header\"}",
        "busbar_step_latency_seconds_count{step=\"proxies.P.in[1].call\"}",
        "busbar_step_errors_total{step=\"proxies.D.in[0].call\",kind=\"connect_refused\"}",
    ] {
        assert!(
            sample(&text, prefix) > 0.0,
            "{prefix} is zero or missing:\n{text}"
        );
    }
    // Five echoed bodies and the 405 problem.
    assert_eq!(
        sample(&text, "busbar_proxy_sent_bytes_total{proxy=\"P\"}"),
        50_000.0 + refused.body.len() as f64
    );
    assert_eq!(
        sample(&text, "busbar_endpoint_sent_bytes_total{endpoint=\"echo\"}"),
        50_000.0
    );
    // Nothing is left in progress once every answer was read.
    for prefix in [
        "busbar_proxy_in_flight",
        "busbar_endpoint_in_flight",
        "busbar_step_in_flight",
        "busbar_upstream_pending",
    ] {
        assert_eq!(sample(&text, prefix), 0.0, "{prefix}");
    }
}

/// The Grafana dashboard in `examples/` queries only metrics that exist.
#[test]
fn the_dashboard_uses_documented_metrics_only() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/grafana-dashboard.json"
    ))
    .expect("dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let (table, _) = documented();
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8);
    let mut used = 0;
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for (at, _) in expr.match_indices("busbar_") {
                let name: String = expr[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let base = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(&name);
                assert!(
                    table.contains_key(base),
                    "{name} in panel {}",
                    panel["title"]
                );
                used += 1;
            }
        }
    }
    assert!(used >= 15);
}
