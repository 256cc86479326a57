#!/usr/bin/env bash
# Same-run cost of tracing: DirectProxy and CBRProxy of examples/esb-benchmark.yaml served by
# four busbar instances that differ only in `tracing:` — off (no propagation), propagation
# only (spans not exported), OTLP/HTTP export at 1 % and at 100 % sampling (to a collector
# that answers 200 and discards: a `busbar echo`). Server side on core 0, wrk on core 1; the
# modes alternate within each round. Prints one line per cell, then medians and ratios.
# Usage: bench/tracing.sh [seconds per cell, default 10]
# Environment: SIZE (1024), CONC ("64"), ROUNDS (3), PROXIES ("DirectProxy CBRProxy").
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
scripts/setup.sh --bench >/dev/null
cargo build --release --bin busbar
bin=./target/release/busbar
make -s keys
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
size=${SIZE:-1024}
conc=${CONC:-64}
rounds=${ROUNDS:-3}
proxies=${PROXIES:-DirectProxy CBRProxy}
$bin bench payload --size "$size" > "$tmp/body.xml"

# The collector: accepts every export and answers 200.
taskset -c 0 $bin echo --listen 127.0.0.1:4318 --workers 1 > "$tmp/collector.log" 2>&1 &

modes="off propagate sample1 sample100"
port=8280
for mode in $modes; do
  case $mode in
    off) block="tracing: { propagate: false }" ;;
    propagate) block="tracing: { sample: 1 }" ;;
    sample1) block=$'tracing:\n  sample: 0.01\n  otlp: { endpoint: "http://127.0.0.1:4318/v1/traces" }' ;;
    sample100) block=$'tracing:\n  sample: 1\n  otlp: { endpoint: "http://127.0.0.1:4318/v1/traces" }' ;;
  esac
  # The example with its tracing section (relative paths kept: the copy sits beside it).
  cfg="examples/.tracing-bench-$mode.yaml"
  { cat examples/esb-benchmark.yaml; printf '\n%s\n' "$block"; } > "$cfg"
  echo "$cfg" >> "$tmp/configs"
  port=$((port + 1))
  BUSBAR_WORKERS=1 BUSBAR_LISTEN=127.0.0.1:$port BUSBAR_ECHO=127.0.0.1:$((9100 + port - 8280)) \
    BUSBAR_ADMIN=127.0.0.1:$((9900 + port - 8280)) BUSBAR_LOG=warn BUSBAR_KEYS="$PWD/target/keys" \
    taskset -c 0 $bin run "$cfg" > "$tmp/$mode.log" 2>&1 &
  echo "$mode $port" >> "$tmp/ports"
done
trap 'xargs rm -f < "$tmp/configs"; cleanup' EXIT
while read -r mode p; do
  for _ in $(seq 100); do
    curl -sf -o /dev/null -H 'Content-Type: text/xml' --data-binary @"$tmp/body.xml" \
      "http://127.0.0.1:$p/service/DirectProxy" && break
    sleep 0.1
  done
done < "$tmp/ports"

printf "%-10s %-12s %5s %10s %9s %9s\n" mode proxy round req/s p50 p99
for r in $(seq "$rounds"); do
  for proxy in $proxies; do
    while read -r mode p; do
      out=$(BODY="$tmp/body.xml" taskset -c 1 wrk -t1 -c"$conc" -d"${secs}s" --latency \
        -s bench/post.lua "http://127.0.0.1:$p/service/$proxy")
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      p50=$(awk '$1=="50%" {print $2}' <<<"$out")
      p99=$(awk '$1=="99%" {print $2}' <<<"$out")
      errs=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr '\n' ' ' || true)
      printf "%-10s %-12s %5s %10s %9s %9s %s\n" "$mode" "$proxy" "$r" "$rps" "$p50" "$p99" "$errs" \
        | tee -a "$tmp/results"
    done < "$tmp/ports"
  done
done

echo
echo "medians of $rounds rounds, and the cost against 'off' (1 - mode/off):"
for proxy in $proxies; do
  off=$(awk -v p="$proxy" '$1=="off" && $2==p {print $4}' "$tmp/results" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  for mode in $modes; do
    med=$(awk -v p="$proxy" -v m="$mode" '$1==m && $2==p {print $4}' "$tmp/results" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    awk -v m="$mode" -v p="$proxy" -v v="$med" -v o="$off" \
      'BEGIN {printf "%-10s %-12s %10.0f  cost %5.1f %%\n", m, p, v, (1 - v / o) * 100}'
  done
done
for mode in $modes; do
  p=$(awk -v m="$mode" '$1==m {print $2}' "$tmp/ports")
  printf "%-10s " "$mode"
  curl -s "http://127.0.0.1:$((9900 + p - 8280))/metrics" | grep '^busbar_trace_spans_total' | tr '\n' ' '
  echo
done
