#!/usr/bin/env bash
# The SimpleInvoke orchestration benchmark (examples/orchestration/, docs/bench.md "The BPEL
# scenario"): busbar serves the four processes and their HelloWorld partner on one listener;
# the kit calls SimpleInvoke0..3 (x = 0..3 HelloWorld calls each) and, as the baseline,
# HelloWorld directly, at c = 20 and c = 320, every answer verified. busbar on core 0, the
# kit on core 1. First the kit's `verify` checks every scenario once and the script stops on a
# failure; then `bench run` measures each cell for SECS seconds after a warm-up, ROUNDS times.
# Prints msgs/s (verified answers per second), p50/p95/p99 and errors per cell (medians over
# the rounds); the raw results stay in OUT.
# Usage: bench/bpel.sh [seconds per cell, default 10]. Environment: ROUNDS (1), WARMUP (2),
# CONC ("20,320"), X ("0..3"), SCENARIOS ("bpel,bpel-direct"), OUT (bench/out/bpel),
# CONFIG (examples/orchestration/simple-invoke.yaml), CARGO_TARGET_DIR (default target).
# Bounded: at most (WARMUP + SECS) × ROUNDS × cells, plus the verification, and a `timeout`
# around each step.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${ROUNDS:-1}
warmup=${WARMUP:-2}
conc=${CONC:-20,320}
x=${X:-0..3}
scenarios=${SCENARIOS:-bpel,bpel-direct}
out=${OUT:-bench/out/bpel}
config=${CONFIG:-examples/orchestration/simple-invoke.yaml}
listen=127.0.0.1:8283
admin=127.0.0.1:9904
cargo build --release --bin busbar
bin=${CARGO_TARGET_DIR:-target}/release/busbar
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# HelloWorld is on the same listener as the processes that call it.
BUSBAR_WORKERS=1 BUSBAR_LOG=warn BUSBAR_LISTEN=$listen BUSBAR_HELLOWORLD=$listen \
  BUSBAR_ADMIN=$admin taskset -c 0 $bin run "$config" > "$tmp/busbar.log" 2>&1 &
for _ in $(seq 100); do curl -sf -o /dev/null "http://$admin/readyz" && break; sleep 0.1; done
curl -sf -o /dev/null "http://$admin/readyz" || { echo "busbar did not become ready"; cat "$tmp/busbar.log"; exit 1; }

echo "== correctness: busbar bench verify --suite bpel --scenarios $scenarios --x $x"
if ! timeout 300 taskset -c 1 $bin bench verify "http://$listen/service" --suite bpel \
  --scenarios "$scenarios" --x "$x" --concurrency 1,"${conc##*,}" > "$tmp/verify" 2>&1; then
  cat "$tmp/verify"; exit 1
fi
tail -1 "$tmp/verify"

cells=$(( $(tr ',' '\n' <<<"$conc" | wc -l) * 5 * rounds ))
limit=$(( cells * (warmup + secs + 5) + 60 ))
echo "== measure: c=$conc, $rounds round(s) of ${secs}s after ${warmup}s warm-up (at most ${limit}s)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$out"
timeout "$limit" taskset -c 1 $bin bench run --suite bpel --base "http://$listen/service" \
  --name busbar --scenarios "$scenarios" --x "$x" --concurrency "$conc" \
  --iterations "$rounds" --duration "${secs}s" --warmup "${warmup}s" --out "$out"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# summary.csv: scenario,size,concurrency,iteration,requests,successes,errors,verify_failures,
# tps,p50_ms,p90_ms,p95_ms,p99_ms,…; the median round of each scenario and concurrency.
echo
printf "%-12s %4s %10s %9s %9s %9s %7s\n" scenario c msgs/s p50_ms p95_ms p99_ms errors
tail -n +2 "$out/summary.csv" | sort -t, -k1,1 -k3,3n -k9,9n | awk -F, '
  { key = $1 "," $3; n[key]++; row[key, n[key]] = $0; if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
  END {
    for (i = 1; i <= k; i++) {
      key = order[i]; split(row[key, int((n[key] + 1) / 2)], f, ",")
      printf "%-12s %4s %10.0f %9.3f %9.3f %9.3f %7s\n", f[1], f[3], f[9], f[10], f[12], f[13], f[7]
    }
  }'
