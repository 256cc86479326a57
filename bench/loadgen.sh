#!/usr/bin/env bash
# `busbar bench load` against wrk: the same target, the same request, one thread each.
# The target is nginx (1 worker, pinned to core 0) answering a fixed 1 KB body to a POST of the
# 1,024-byte buyStocks payload with the classic headers; the generators take turns on core 1.
# Prints, per run: requests/s, and the generator's own CPU time (user + system) per request,
# which tells the generators apart even when the target, not the generator, is the limit.
# Usage: bench/loadgen.sh [seconds per run, default 8]. Environment: ROUNDS (5), CONC ("20 320").
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${ROUNDS:-5}
conc=${CONC:-20 320}
scripts/setup.sh --bench >/dev/null
cargo build --release --bin busbar
bin=./target/release/busbar
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

answer=$(head -c 1024 /dev/zero | tr '\0' 'x')
cat > "$tmp/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $tmp/error.log warn;
pid $tmp/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  client_body_buffer_size 64k;
  client_body_temp_path $tmp;
  server {
    listen 127.0.0.1:8399;
    location / { default_type text/xml; return 200 "$answer"; }
  }
}
EOF
taskset -c 0 nginx -p "$tmp" -c "$tmp/nginx.conf" &
url=http://127.0.0.1:8399/service/DirectProxy
for _ in $(seq 50); do curl -sf -o /dev/null -d x "$url" && break; sleep 0.1; done
$bin bench payload --size 1024 > "$tmp/body.xml"

TIMEFORMAT='%U %S'
run() { # label command...: prints label, req/s, CPU µs per request
  local label=$1; shift
  { time "$@" > "$tmp/out" 2> "$tmp/err"; } 2> "$tmp/time"
  local rps
  if [[ $label == wrk ]]; then
    grep -q 'Non-2xx\|Socket errors' "$tmp/out" && { cat "$tmp/out"; exit 1; }
    rps=$(awk '/Requests\/sec/ {print $2}' "$tmp/out")
  else
    grep -q 'errors: connect 0, timeout 0, read 0, write 0, status 0' "$tmp/out" || { cat "$tmp/out" "$tmp/err"; exit 1; }
    rps=$(grep -oE '[0-9.]+ req/s' "$tmp/out" | head -1 | cut -d' ' -f1)
  fi
  read -r user sys < "$tmp/time"
  awk -v l="$label" -v c="$c" -v r="$rps" -v u="$user" -v s="$sys" -v d="$secs" 'BEGIN {
    printf "%-6s %4s %10.0f  %6.2f us/request\n", l, c, r, (u + s) * 1e6 / (r * d) }' | tee -a "$tmp/results"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %4s %10s  %s\n" tool c req/s "generator CPU"
for c in $conc; do
  for _ in $(seq "$rounds"); do
    BODY="$tmp/body.xml" run wrk taskset -c 1 wrk -t1 -c"$c" -d"${secs}s" -s bench/post.lua "$url"
    run busbar taskset -c 1 $bin bench load "$url" --size 1024 -c "$c" -d "${secs}s" --threads 1
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "medians: req/s, CPU per request, and busbar / wrk (req/s; CPU per request)"
med() { awk -v t="$1" -v c="$2" -v k="$3" '$1==t && $2==c {print $k}' "$tmp/results" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for c in $conc; do
  awk -v c="$c" -v wr="$(med wrk "$c" 3)" -v br="$(med busbar "$c" 3)" -v wc="$(med wrk "$c" 4)" -v bc="$(med busbar "$c" 4)" 'BEGIN {
    printf "c=%-4s wrk %8.0f req/s %5.2f us   busbar %8.0f req/s %5.2f us   ratio %.3f; %.3f\n", c, wr, wc, br, bc, br / wr, bc / wc }'
done
