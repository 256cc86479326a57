#!/usr/bin/env bash
# Where the CPU of a pass-through exchange goes, proxy by proxy: busbar's DirectProxy and nginx
# (bench/peers/nginx.conf) both call one echo back end in a process of its own
# (bench/rounds/backends.yaml), so the proxy's user and kernel time per request can be read
# apart from the echo's. The two proxies and the echo share core 0; `wrk -t1` runs on core 1;
# the proxies are measured in turn. Prints one line per cell: req/s, then the proxy's and the
# echo's user and kernel CPU per request (µs, from /proc/PID/stat).
# Usage: bench/cpu-split.sh [seconds per cell, default 5]
# Environment: SIZE (1024), CONC ("20 320"), ROUNDS (3), BUSBAR (a busbar binary instead of
# this tree's release build), BASE (another busbar binary, e.g. a previous commit's build, served
# beside it on :8290 and measured in turn as `base`), BASE_ENV (environment assignments for the
# BASE process only, e.g. `MALLOC_CONF=dirty_decay_ms:0` with BASE set to the same binary),
# CEILING=1: also bench/ceiling's bare forwarder, as `ceiling` and, moving the bodies with
# splice(2), as `ceiling-splice`.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
size=${SIZE:-1024}
conc=${CONC:-20 320}
rounds=${ROUNDS:-3}
scripts/setup.sh --bench
if [ -n "${BUSBAR:-}" ]; then
  bin=$BUSBAR
else
  cargo build --release --bin busbar
  bin=./target/release/busbar
fi
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
hz=$(getconf CLK_TCK)

BUSBAR_WORKERS=1 BUSBAR_LOG=warn taskset -c 0 "$bin" run bench/rounds/backends.yaml \
  > "$tmp/echo.log" 2>&1 &
echo_pid=$!
BUSBAR_ECHO_EMBEDDED=false BUSBAR_WORKERS=1 BUSBAR_LOG=warn taskset -c 0 "$bin" run \
  examples/esb-benchmark.yaml > "$tmp/busbar.log" 2>&1 &
busbar_pid=$!
proxies="busbar nginx"
if [ -n "${BASE:-}" ]; then
  # BASE_ENV unquoted: a list of assignments.
  env ${BASE_ENV:-} BUSBAR_ECHO_EMBEDDED=false BUSBAR_WORKERS=1 BUSBAR_LOG=warn \
    BUSBAR_LISTEN=127.0.0.1:8290 BUSBAR_ADMIN=127.0.0.1:9911 taskset -c 0 "$BASE" run \
    examples/esb-benchmark.yaml > "$tmp/base.log" 2>&1 &
  base_pid=$!
  proxies="busbar base nginx"
  for _ in $(seq 50); do curl -sf -o /dev/null -d x http://127.0.0.1:8290/service/DirectProxy && break; sleep 0.1; done
fi
if [ -n "${CEILING:-}" ]; then
  (cd bench/ceiling && cargo build --release -q)
  taskset -c 0 bench/ceiling/target/release/busbar-ceiling 127.0.0.1:8480 127.0.0.1:9000 \
    /service/EchoService > "$tmp/ceiling.log" 2>&1 &
  ceiling_pid=$!
  taskset -c 0 bench/ceiling/target/release/busbar-ceiling 127.0.0.1:8481 127.0.0.1:9000 \
    /service/EchoService splice > "$tmp/ceiling-splice.log" 2>&1 &
  splice_pid=$!
  proxies="$proxies ceiling ceiling-splice"
fi
mkdir -p /tmp/busbar-bench-nginx-body /tmp/busbar-bench-nginx-proxy
taskset -c 0 nginx -p "$tmp" -c "$PWD/bench/peers/nginx.conf" &
for _ in $(seq 50); do curl -sf -o /dev/null -d x http://127.0.0.1:8280/service/DirectProxy && \
  curl -sf -o /dev/null -d x http://127.0.0.1:8380/service/DirectProxy && break; sleep 0.1; done
nginx_pid=$(pgrep -f "nginx: worker process" -n)
"$bin" bench payload --size "$size" > "$tmp/body"

# "user kernel" clock ticks of a process so far.
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
# Microseconds per request of TICKS clock ticks over N requests.
per() { awk -v t="$1" -v n="$2" -v hz="$hz" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }'; }

printf "%-8s %5s %10s %11s %11s %10s %10s\n" proxy c req/s proxy-user proxy-kernel echo-user \
  echo-kernel
for _ in $(seq "$rounds"); do
  for c in $conc; do
    for proxy in $proxies; do
      case $proxy in
        busbar) pid=$busbar_pid port=8280 ;;
        base) pid=$base_pid port=8290 ;;
        ceiling) pid=$ceiling_pid port=8480 ;;
        ceiling-splice) pid=$splice_pid port=8481 ;;
        *) pid=$nginx_pid port=8380 ;;
      esac
      read -r pu0 pk0 < <(ticks "$pid")
      read -r eu0 ek0 < <(ticks "$echo_pid")
      out=$(BODY="$tmp/body" taskset -c 1 wrk -t1 -c"$c" -d"${secs}s" -s bench/post.lua \
        "http://127.0.0.1:$port/service/DirectProxy")
      read -r pu1 pk1 < <(ticks "$pid")
      read -r eu1 ek1 < <(ticks "$echo_pid")
      n=$(awk '/requests in/ {print $1}' <<<"$out")
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      errs=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr '\n' ' ' || true)
      printf "%-8s %5s %10s %11s %11s %10s %10s %s\n" "$proxy" "$c" "$rps" \
        "$(per $((pu1 - pu0)) "$n")" "$(per $((pk1 - pk0)) "$n")" \
        "$(per $((eu1 - eu0)) "$n")" "$(per $((ek1 - ek0)) "$n")" "$errs"
    done
  done
done
