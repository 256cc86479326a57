#!/usr/bin/env bash
# Same-run comparison of busbar proxies against the echo back end direct and nginx.
# Server side (proxy + echo) pinned to core 0, wrk to core 1. Prints one line per cell.
# Usage: bench/direct.sh [seconds per cell, default 10]
# Environment: SIZES (default "1024 10240 102400"), CONC ("20 320"),
# TARGETS ("echo DirectProxy nginx": echo direct, nginx, `ceiling` (bench/ceiling, a bare tokio
# forwarder to the same echo: the floor of a tokio-based proxy), `ceiling-splice` (the same,
# moving the bodies from socket to socket with splice(2)), `ceiling-splice-answers` (splicing
# the answers' bodies only), or any busbar proxy name),
# ROUNDS (1): each cell is measured ROUNDS times, targets alternating, for medians.
# PCT=1: print the latency's spread (p10 to p99.9 and the maximum, in ms) instead of p50 and p99.
# CONFIG (examples/esb-benchmark.yaml): the config this build serves, e.g.
# examples/resilience.yaml for BalancedProxy (two URLs, round robin) against DirectProxy.
# BASE (optional): another busbar binary (a previous commit's build) served beside this one on
# :8290 (echo :9010, admin :9911); name its proxies `base:DirectProxy` in TARGETS. BASE_CONFIG
# (examples/esb-benchmark.yaml): the config it serves, e.g. that build's own copy of the example
# when today's has keys it does not know.
# ECHO_PROCESS=1: the echo back end runs as its own process (`busbar echo --workers 1`, on core 0
# too) instead of inside each busbar build, so every proxy measured, busbar's builds and nginx,
# calls the same back-end process and its worker does only the proxy's work.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
scripts/setup.sh --bench
cargo build --release --bin busbar
bin=./target/release/busbar
make -s keys
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
sizes=${SIZES:-1024 10240 102400}
conc=${CONC:-20 320}
targets=${TARGETS:-echo DirectProxy nginx}
rounds=${ROUNDS:-1}
for size in $sizes; do $bin bench payload --size $size > "$tmp/$size.xml"; done

embedded=true base_echo=127.0.0.1:9010
if [ "${ECHO_PROCESS:-0}" = 1 ]; then
  embedded=false base_echo=127.0.0.1:9000
  taskset -c 0 $bin echo --listen 127.0.0.1:9000 --workers 1 > "$tmp/echo.log" 2>&1 &
  for _ in $(seq 50); do curl -sf -o /dev/null -d x http://127.0.0.1:9000/service/EchoService && break; sleep 0.1; done
fi
BUSBAR_WORKERS=1 BUSBAR_LISTEN=127.0.0.1:8280 BUSBAR_ECHO=127.0.0.1:9000 BUSBAR_LOG=warn \
  BUSBAR_ECHO_EMBEDDED=$embedded \
  taskset -c 0 $bin run "${CONFIG:-examples/esb-benchmark.yaml}" > "$tmp/busbar.log" 2>&1 &
if [ -n "${BASE:-}" ]; then
  BUSBAR_WORKERS=1 BUSBAR_LISTEN=127.0.0.1:8290 BUSBAR_ECHO=$base_echo BUSBAR_ADMIN=127.0.0.1:9911 \
    BUSBAR_ECHO_EMBEDDED=$embedded BUSBAR_LOG=warn \
    taskset -c 0 "$BASE" run "${BASE_CONFIG:-examples/esb-benchmark.yaml}" > "$tmp/base.log" 2>&1 &
  for _ in $(seq 50); do curl -sf -o /dev/null -d x http://127.0.0.1:8290/service/DirectProxy && break; sleep 0.1; done
fi
if [[ " $targets " == *" ceiling"* ]]; then
  (cd bench/ceiling && cargo build --release -q)
  taskset -c 0 bench/ceiling/target/release/busbar-ceiling 127.0.0.1:8480 127.0.0.1:9000 \
    /service/EchoService > "$tmp/ceiling.log" 2>&1 &
  taskset -c 0 bench/ceiling/target/release/busbar-ceiling 127.0.0.1:8481 127.0.0.1:9000 \
    /service/EchoService splice > "$tmp/ceiling-splice.log" 2>&1 &
  taskset -c 0 bench/ceiling/target/release/busbar-ceiling 127.0.0.1:8482 127.0.0.1:9000 \
    /service/EchoService splice-answers > "$tmp/ceiling-splice-answers.log" 2>&1 &
fi
mkdir -p /tmp/busbar-bench-nginx-body /tmp/busbar-bench-nginx-proxy
taskset -c 0 nginx -p "$tmp" -c "$PWD/bench/peers/nginx.conf" &
for _ in $(seq 50); do curl -sf -o /dev/null -d x http://127.0.0.1:8280/service/DirectProxy && \
  curl -sf -o /dev/null -d x http://127.0.0.1:8380/service/DirectProxy && break; sleep 0.1; done

url_of() {
  case $1 in
    echo) echo http://127.0.0.1:9000/service/EchoService ;;
    nginx) echo http://127.0.0.1:8380/service/DirectProxy ;;
    ceiling) echo http://127.0.0.1:8480/service/DirectProxy ;;
    ceiling-splice) echo http://127.0.0.1:8481/service/DirectProxy ;;
    ceiling-splice-answers) echo http://127.0.0.1:8482/service/DirectProxy ;;
    base:*) echo "http://127.0.0.1:8290/service/${1#base:}" ;;
    *) echo "http://127.0.0.1:8280/service/$1" ;;
  esac
}
script=bench/post.lua
if [ "${PCT:-0}" = 1 ]; then
  script=bench/post-pct.lua
  printf "%-24s %7s %4s %10s  %s\n" target size c req/s \
    "latency ms: p10 p25 p50 p75 p90 p95 p99 p99.9 max"
else
  printf "%-24s %7s %4s %10s %9s %9s\n" target size c req/s p50 p99
fi
for size in $sizes; do
  for c in $conc; do
   for _ in $(seq "$rounds"); do
    for t in $targets; do
      out=$(BODY="$tmp/$size.xml" taskset -c 1 wrk -t1 -c$c -d${secs}s --latency -s $script "$(url_of "$t")")
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      errs=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr '\n' ' ' || true)
      if [ "$script" = bench/post-pct.lua ]; then
        printf "%-24s %7s %4s %10s  %s %s\n" "$t" "$size" "$c" "$rps" \
          "$(awk '$1=="pct" {$1=""; print substr($0, 2)}' <<<"$out")" "$errs"
        continue
      fi
      p50=$(awk '$1=="50%" {print $2}' <<<"$out")
      p99=$(awk '$1=="99%" {print $2}' <<<"$out")
      printf "%-24s %7s %4s %10s %9s %9s %s\n" "$t" "$size" "$c" "$rps" "$p50" "$p99" "$errs"
    done
   done
  done
done
