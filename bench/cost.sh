#!/usr/bin/env bash
# CPU cost of one DirectProxy exchange, counted rather than timed: each busbar build runs under
# valgrind's callgrind (one worker) while `busbar bench load` sends first N1, then N2 requests of
# 1 KB; the difference between the two runs, divided by N2 - N1, is what one request costs the
# proxy in user space (start-up and shutdown cancel out). Instruction counts repeat to within
# about 2 % whatever else the machine does, so builds can be compared on a noisy machine.
# The back end is a separate busbar process (bench/rounds/backends.yaml) on core 1 with the load.
# Usage: bench/cost.sh [BUSBAR_BINARY...] (default: this tree's release build). A binary named
# busbar-ceiling (bench/ceiling, the bare tokio forwarder) is run as DirectProxy's stand-in.
# Environment: CONC ("20 320": concurrent clients), N1 (1000), N2 (4000), SIZE (1024),
# CACHE (0; 1 also simulates the caches and reports L1 instruction and data misses per request,
# and data misses of a 1 MiB, 8-way second level, this CPU's L2; about twice as slow),
# TOP (0; with CACHE=1, N > 0 also lists the N functions with the most L2 data misses of the
# last run, per request, start-up included), SCENARIO (direct: DirectProxy with a SIZE body;
# json-map: examples/integrator.yaml's JsonMap, the kit's integrator requests, each answer
# verified), KEEP (unset; a path P keeps each run's callgrind output as P.N1 and P.N2, for
# callgrind_annotate or for subtracting one from the other function by function).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "cost.sh needs valgrind (apt-get install valgrind)" >&2; exit 1; }
conc=${CONC:-20 320}
n1=${N1:-1000}
n2=${N2:-4000}
size=${SIZE:-1024}
cache=${CACHE:-0}
top=${TOP:-0}
if [ $# -eq 0 ]; then
  cargo build --release --bin busbar
  set -- ./target/release/busbar
fi
kit=./target/release/busbar
[ -x "$kit" ] || cargo build --release --bin busbar
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
case ${SCENARIO:-direct} in
  direct)
    url=http://127.0.0.1:8280/service/DirectProxy
    config=$tmp/proxy.yaml
    load=(--body "$tmp/body")
    server_env=()
    ;;
  json-map)
    url=http://127.0.0.1:8281/api/map
    config=examples/integrator.yaml
    load=(--suite integrator --verify json-map)
    server_env=(BUSBAR_ECHO_EMBEDDED=false BUSBAR_WORKERS=1 BUSBAR_LOG=warn
      BUSBAR_LISTEN=127.0.0.1:8281 BUSBAR_ADMIN=127.0.0.1:9902)
    ;;
  *) echo "SCENARIO is direct or json-map" >&2; exit 1 ;;
esac
cat > "$tmp/proxy.yaml" <<'EOF'
workers: 1
log:
  level: warn
admin:
  bind: "127.0.0.1:9901"
listeners:
  http:
    bind: "127.0.0.1:8280"
endpoints:
  echo:
    url: "http://127.0.0.1:9000/service/EchoService"
proxies:
  DirectProxy:
    path: /service/DirectProxy
    in:
      - call: echo
EOF
$kit bench payload --size "$size" > "$tmp/body"
BUSBAR_WORKERS=1 BUSBAR_LOG=warn taskset -c 1 $kit run bench/rounds/backends.yaml > "$tmp/backends.log" 2>&1 &
for _ in $(seq 50); do curl -sf -o /dev/null -d x http://127.0.0.1:9000/service/EchoService && break; sleep 0.1; done

# Events counted in one run of BIN with N requests at C clients: "Ir [I1mr D1mr D1mw]".
events() {
  local bin=$1 n=$2 c=$3 out="$tmp/callgrind.out"
  local sim=()
  # valgrind's last level stands for this CPU's per-core L2 (1 MiB, 8-way): a working set that
  # outgrows it is what makes an exchange slower at hundreds of connections.
  [ "$cache" = 1 ] && sim=(--cache-sim=yes --LL=1048576,8,64 --compress-strings=no --compress-pos=no)
  local args=(run "$config")
  [ "$(basename "$bin")" = busbar-ceiling ] && args=(127.0.0.1:8280 127.0.0.1:9000 /service/EchoService)
  env "${server_env[@]}" valgrind --tool=callgrind "${sim[@]}" --callgrind-out-file="$out" \
    "$bin" "${args[@]}" > "$tmp/valgrind.log" 2>&1 &
  local vg=$!
  # Up when it answers at all (a bare `x` is no JsonMap request).
  for _ in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -d x "$url")" != 000 ] && break
    sleep 0.2
  done
  taskset -c 1 $kit bench load -n "$n" -c "$c" "${load[@]}" "$url" > "$tmp/load.log" 2>&1 \
    || { cat "$tmp/load.log" >&2; exit 1; }
  grep -q " $n ok" "$tmp/load.log" || { echo "not every request succeeded:" >&2; cat "$tmp/load.log" >&2; exit 1; }
  kill -TERM $vg
  wait $vg || true
  if [ -n "${KEEP:-}" ]; then cp "$out" "$KEEP.$n"; fi
  # events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw (with the cache simulation), or Ir alone.
  awk '/^summary:/ { if (NF > 2) print $2, $5, $6, $7, $9 + $10; else print $2 }' "$out"
}

# The TOP functions of the last run by their own L2 data misses (read + write), per request.
# A cost line after `calls=` is the callee's, so it is not the caller's own.
top_functions() {
  awk -v n="$1" '
    /^fn=/ { fn = substr($0, 4); next }
    /^calls=/ { callee = 1; next }
    /^[0-9+*-]/ { if (callee) { callee = 0; next } ir[fn] += $2; miss[fn] += $9 + $10 }
    END { for (f in miss) if (miss[f] > 0) printf "%10.1f %8.0f  %s\n", miss[f] / n, ir[f] / n, f }
  ' "$tmp/callgrind.out" | sort -rn |
    awk -v top="$top" 'NR <= top { printf "    L2 misses %s  instructions %s  ", $1, $2; $1 = ""; $2 = ""; print substr($0, 3) }'
}

if [ "$cache" = 1 ]; then
  printf "%-40s %5s %12s %10s %10s %10s %10s\n" build c instructions I1-misses D1r-misses D1w-misses L2-misses
else
  printf "%-40s %5s %12s\n" build c instructions
fi
for c in $conc; do
  for bin in "$@"; do
    read -r -a a <<<"$(events "$bin" "$n1" "$c")"
    read -r -a b <<<"$(events "$bin" "$n2" "$c")"
    # A failed run has printed why; its counts are missing.
    [ "${#a[@]}" -gt 0 ] && [ "${#b[@]}" -gt 0 ] || exit 1
    per() { echo $(( (b[$1] - a[$1]) / (n2 - n1) )); }
    if [ "$cache" = 1 ]; then
      printf "%-40s %5s %12s %10s %10s %10s %10s\n" "$bin" "$c" "$(per 0)" "$(per 1)" "$(per 2)" \
        "$(per 3)" "$(per 4)"
      [ "$top" -gt 0 ] && top_functions "$n2"
    else
      printf "%-40s %5s %12s\n" "$bin" "$c" "$(per 0)"
    fi
  done
done
