#!/usr/bin/env bash
# Same-run comparison of busbar and Apache Camel 4.14.0 with WSS4J (bench/peers/camel) on
# SecureProxy, legacy profile (RSA-1.5, AES-128-CBC, RSA-SHA1 with SHA-1 digests, fresh
# messages, replay cache on). busbar runs bench/secure.sh's SecureProxy with WORKERS workers and
# its embedded echo; Camel calls that same echo. Both servers (and the echo) are pinned to
# core 0, the load generator to core 1. Each target is warmed up for WARMUP seconds, then the
# cells are measured with `busbar bench load --verify secure` (fresh signed and encrypted
# requests; every answer decrypted and verified with the client's key), the targets
# alternating within each round. Prints one line per cell, then per size and concurrency the
# median msg/s of each target over the rounds and the busbar ÷ Camel ratio.
# Usage: bench/secure-camel.sh [seconds per cell, default 10]
# Environment: SIZES (default "1024 102400"), CONC ("20"), ROUNDS (3), WARMUP (10),
# WORKERS (busbar's, 1), POOL (messages built before each cell, 2000; later ones are built as
# they are sent, on the load generator's core), KEYS (target/keys; made by
# tests/interop/keys.sh when missing), BUSBAR (a busbar binary to use instead of building one
# with cargo), CARGO_TARGET_DIR, PORT_BUSBAR (8280), PORT_CAMEL (8290), PORT_ECHO (9000): the
# listen ports on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
sizes=${SIZES:-1024 102400}
conc=${CONC:-20}
rounds=${ROUNDS:-3}
warmup=${WARMUP:-10}
pool=${POOL:-2000}
keys=$(realpath -m "${KEYS:-target/keys}")
targets="busbar camel"
pb=${PORT_BUSBAR:-8280}
pc=${PORT_CAMEL:-8290}
pe=${PORT_ECHO:-9000}

if [[ -n ${BUSBAR:-} ]]; then
  bin=$BUSBAR
else
  cargo build --release --bin busbar
  bin=${CARGO_TARGET_DIR:-target}/release/busbar
fi
tests/interop/keys.sh "$keys"
BUILD_ONLY=1 bench/peers/camel/run.sh
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# busbar's SecureProxy exactly as bench/secure.sh configures it (legacy, fresh).
BUSBAR_WORKERS=${WORKERS:-1} BUSBAR_KEYS=$keys BUSBAR_LISTEN=127.0.0.1:$pb BUSBAR_ECHO=127.0.0.1:$pe \
  taskset -c 0 "$bin" run bench/secure-legacy.yaml > "$tmp/busbar.log" 2>&1 &
CPU=0 PORT=$pc KEYS="$keys" ECHO=http://127.0.0.1:$pe/service/EchoService \
  bench/peers/camel/run.sh > "$tmp/camel.log" 2>&1 &

declare -A url=([busbar]=http://127.0.0.1:$pb/service/SecureProxy
                [camel]=http://127.0.0.1:$pc/service/SecureProxy)

# A started SecureProxy answers a body that is not secured with a SOAP fault (HTTP 500).
for t in $targets; do
  for _ in $(seq 120); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'Content-Type: text/xml; charset=UTF-8' \
      -d '<x/>' "${url[$t]}" || true)
    [[ $code == 500 ]] && continue 2
    [[ $code == 404 ]] && break
    sleep 0.5
  done
  echo "secure-camel.sh: $t does not serve ${url[$t]} (last status $code)" >&2
  cat "$tmp/$t.log" >&2
  exit 1
done

# One `bench load` run: TARGET SIZE C SECONDS POOL JSON.
load() {
  taskset -c 1 timeout $(( $4 + 300 )) "$bin" bench load "${url[$1]}" --size "$2" -c "$3" \
    -d "$4s" --warmup 0s --pool "$5" --verify secure --keys "$keys" --json "$6" \
    > /dev/null 2> "$tmp/load.err" || { cat "$tmp/load.err" >&2; return 1; }
}

for t in $targets; do
  load "$t" 1024 20 "$warmup" 500 "$tmp/warmup-$t.json"
done

printf "%-6s %5s %7s %4s %10s %9s %9s %7s %11s\n" \
  target round size c msg/s p50_ms p99_ms errors verify_fail
for r in $(seq "$rounds"); do
  for size in $sizes; do
    for c in $conc; do
      for t in $targets; do
        out="$tmp/$t-$size-$c-$r.json"
        load "$t" "$size" "$c" "$secs" "$pool" "$out" || continue
        python3 - "$out" "$t" "$r" "$size" "$c" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e = r["errors"]
other = sum(v for k, v in e.items() if k != "verify") + r.get("unanswered", 0)
print(f"{sys.argv[2]:<6} {sys.argv[3]:>5} {sys.argv[4]:>7} {sys.argv[5]:>4} {r['tps']:>10.1f} "
      f"{r['latency_ms']['p50']:>9.2f} {r['latency_ms']['p99']:>9.2f} {other:>7} {e['verify']:>11}"
      + (f"  first error: {r['first_error']}" if r.get("first_error") else ""))
PY
      done
    done
  done
done

echo
python3 - "$tmp" "$sizes" "$conc" <<'PY'
import glob, json, os, statistics, sys
tmp, sizes, conc = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def tps(target, size, c):
    runs = [json.load(open(p)) for p in glob.glob(os.path.join(tmp, f"{target}-{size}-{c}-*.json"))]
    return statistics.median(r["tps"] for r in runs) if runs else None
print(f"{'size':>7} {'c':>4} {'busbar':>10} {'camel':>10} {'busbar/camel':>13}   (median msg/s over the rounds)")
for size in sizes:
    for c in conc:
        b, k = tps("busbar", size, c), tps("camel", size, c)
        ratio = f"{b / k:.2f}" if b and k else "n/a"
        fmt = lambda v: f"{v:.1f}" if v is not None else "n/a"
        print(f"{size:>7} {c:>4} {fmt(b):>10} {fmt(k):>10} {ratio:>13}")
PY
