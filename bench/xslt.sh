#!/usr/bin/env bash
# Same-run comparison of busbar and Apache Camel 4.14.0 (bench/peers/camel) on XSLTProxy,
# DirectProxy and CBRProxy. busbar runs examples/esb-benchmark.yaml with one worker and its
# embedded echo; Camel calls that same echo. Both servers (and the echo) are pinned to core 0,
# wrk to core 1. Every target is warmed up for WARMUP seconds per scenario before measuring
# (the JVM needs ≥ 10 s to reach its steady state). Prints one line per cell.
# Usage: bench/xslt.sh [seconds per cell, default 10]
# Environment: SIZES (default "512 1024 10240 102400"), CONC ("20 320"),
# SCENARIOS ("XSLTProxy DirectProxy CBRProxy"), TARGETS ("busbar camel"), WARMUP (10),
# CARGO_TARGET_DIR (where busbar is built, default target).
# A scenario a target answers with 404 (not configured there) is skipped with a note.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
sizes=${SIZES:-512 1024 10240 102400}
conc=${CONC:-20 320}
scenarios=${SCENARIOS:-XSLTProxy DirectProxy CBRProxy}
targets=${TARGETS:-busbar camel}
warmup=${WARMUP:-10}
command -v wrk >/dev/null || { echo "xslt.sh: wrk is missing: run scripts/setup.sh --bench" >&2; exit 1; }

cargo build --release --bin busbar
bin=${CARGO_TARGET_DIR:-target}/release/busbar
BUILD_ONLY=1 bench/peers/camel/run.sh
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
for size in $sizes 1024; do $bin bench payload --size "$size" > "$tmp/$size.xml"; done

BUSBAR_WORKERS=1 BUSBAR_LISTEN=127.0.0.1:8280 BUSBAR_ECHO=127.0.0.1:9000 BUSBAR_LOG=warn \
  taskset -c 0 "$bin" run examples/esb-benchmark.yaml > "$tmp/busbar.log" 2>&1 &
CPU=0 PORT=8290 ECHO=http://127.0.0.1:9000/service/EchoService \
  bench/peers/camel/run.sh > "$tmp/camel.log" 2>&1 &

declare -A base=([busbar]=http://127.0.0.1:8280/service [camel]=http://127.0.0.1:8290/service)

# The HTTP status a target answers for one 1 KB request ("000" when it does not answer).
probe() {
  curl -s -o /dev/null -w '%{http_code}' -m 10 -H 'Content-Type: text/xml; charset=UTF-8' \
    -H 'routing: xadmin;server1;community#1.0##' --data-binary "@$tmp/1024.xml" "$1" || true
}
for t in $targets; do
  for _ in $(seq 120); do [[ $(probe "${base[$t]}/DirectProxy") == 200 ]] && continue 2; sleep 0.5; done
  echo "xslt.sh: $t did not answer on ${base[$t]}/DirectProxy within 60 s" >&2
  cat "$tmp/$t.log" >&2
  exit 1
done

# SOAPAction's buffer-size hint, as the bench computes it (docs/scenarios.md).
soap_action() {
  local kb=$(( ($1 * 11 + 10239) / 10240 ))
  kb=$(( (kb + 1) / 2 * 2 ))
  echo "\"urn:buyStocks.$(( kb < 2 ? 2 : kb ))\""
}

# wrk for $2 seconds at concurrency $3 with payload size $4 against URL $1, bounded in time.
load() {
  BODY="$tmp/$4.xml" SOAPACTION=$(soap_action "$4") timeout $(( $2 + 30 )) \
    taskset -c 1 wrk -t1 -c"$3" -d"$2"s --timeout 10s --latency -s bench/post.lua "$1"
}

printf "%-7s %-10s %7s %4s %10s %9s %9s %8s\n" target scenario size c req/s p50 p99 non-2xx
for s in $scenarios; do
  active=()
  for t in $targets; do
    code=$(probe "${base[$t]}/$s")
    if [[ $code == 404 ]]; then
      echo "# $t: $s answers 404 (not configured for this target): skipped"
    elif [[ $code != 200 ]]; then
      echo "# $t: $s answers $code to a valid 1 KB request: measured anyway, see non-2xx"
      active+=("$t")
    else
      active+=("$t")
    fi
  done
  ((${#active[@]})) || continue
  for t in "${active[@]}"; do load "${base[$t]}/$s" "$warmup" 20 1024 > /dev/null; done
  for size in $sizes; do
    for c in $conc; do
      for t in "${active[@]}"; do
        out=$(load "${base[$t]}/$s" "$secs" "$c" "$size") || true
        rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        p50=$(awk '$1=="50%" {print $2}' <<<"$out")
        p99=$(awk '$1=="99%" {print $2}' <<<"$out")
        non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
        errs=$(grep -E "Socket errors" <<<"$out" || true)
        printf "%-7s %-10s %7s %4s %10s %9s %9s %8s %s\n" "$t" "$s" "$size" "$c" \
          "${rps:-n/a}" "${p50:-n/a}" "${p99:-n/a}" "${non2xx:-0}" "$errs"
      done
    done
  done
done
