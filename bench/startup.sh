#!/usr/bin/env bash
# Startup time to the first served DirectProxy request, and resident memory idle and under
# load (wrk, 1 KB, c=320, 8 s). Usage: bench/startup.sh [runs, default 10]
# BIN: the busbar binary to time (default ./target/release/busbar; a previous build to compare).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
bin=${BIN:-./target/release/busbar}
[ -x $bin ] || cargo build --release --bin busbar
body=$(mktemp); $bin bench payload --size 1024 > "$body"
export BUSBAR_WORKERS=1 BUSBAR_LISTEN=127.0.0.1:8281 BUSBAR_ECHO=127.0.0.1:9001 BUSBAR_ADMIN=127.0.0.1:9902 BUSBAR_LOG=warn
for i in $(seq "$runs"); do
  start=$(date +%s%N)
  $bin run examples/esb-benchmark.yaml >/dev/null 2>&1 &
  pid=$!
  until curl -sf -o /dev/null --data-binary @"$body" http://127.0.0.1:8281/service/DirectProxy; do :; done
  end=$(date +%s%N)
  awk -v ns=$((end - start)) 'BEGIN { printf "startup_ms %.1f\n", ns / 1e6 }'
  if [ "$i" = 1 ]; then
    sleep 1
    echo "idle_rss_kb $(awk '/VmRSS/ {print $2}' /proc/$pid/status)"
    BODY="$body" taskset -c 1 wrk -t1 -c320 -d8s -s bench/post.lua http://127.0.0.1:8281/service/DirectProxy >/dev/null &
    sleep 6
    echo "load_rss_kb $(awk '/VmRSS/ {print $2}' /proc/$pid/status)"
    wait %2 2>/dev/null || true
  fi
  kill -TERM $pid; wait $pid || true
done
rm -f "$body"
