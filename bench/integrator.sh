#!/usr/bin/env bash
# Same-run measurement of the integrator scenarios of examples/integrator.yaml (docs/integrator.md)
# against the echo back end direct and the peers: nginx (JsonPassthrough's baseline) and Apache
# Camel 4.14.0 (bench/peers/camel, every scenario on the same paths). busbar (with its embedded
# echo back ends) and the peers on core 0, wrk on core 1; the peers call busbar's echoes.
#   Throughput: back ends answer a fixed JSON document with no delay (JsonToSoap needs a SOAP
#   answer: it runs on a second busbar in echo mode); ROUNDS rounds, targets alternating.
#   Latency: back ends answer after 5 ms (the seed's methodology); p50/p99 at c = 50 and 500.
#   First, the kit's integrator suite verifies every scenario on the echoing instance (the same
#   binary and config; the fixed-JSON one cannot be verified) and the script stops on a failure.
# Usage: bench/integrator.sh [seconds per cell, default 10]. Environment: ROUNDS (3), CONC (50),
# PEERS ("nginx": the peers measured beside busbar, any of nginx and camel, e.g. "nginx camel"),
# WARMUP (10: seconds of load on each Camel scenario before measuring; the JIT needs them),
# PARTS ("throughput latency": either or both).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${ROUNDS:-3}
conc=${CONC:-50}
peers=" ${PEERS:-nginx} "
peers=${peers//,/ }
warmup=${WARMUP:-10}
has() { [[ "$peers" == *" $1 "* ]]; }
parts=" ${PARTS:-throughput latency} "
part() { [[ "$parts" == *" $1 "* ]]; }
scripts/setup.sh --bench >/dev/null
cargo build --release --bin busbar
bin=./target/release/busbar
if has camel; then BUILD_ONLY=1 bench/peers/camel/run.sh; fi
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# Payloads (docs/integrator.md shapes).
python3 - "$tmp" <<'PY'
import json, random, sys
d = sys.argv[1]
random.seed(7)
def exact(doc_fn, size):
    pad = 0
    while True:
        s = json.dumps(doc_fn("x" * pad), separators=(",", ":"))
        if len(s) >= size:
            return s
        pad += size - len(s)
# WSO2's passthrough shape at exactly 1 KB.
s = exact(lambda p: {"payload": {"symbol": ["json"] * 20, "pad": p}}, 1024)
open(f"{d}/passthrough.json", "w").write(s)
for tier in ["premium", "standard"]:
    open(f"{d}/{tier}.json", "w").write(exact(lambda p: {"customerTier": tier, "customer": {"id": 7}, "pad": p}, 1024))
orders = [{"symbol": random.choice(["GOOG", "IBM", "MSFT"]), "buyerID": f"u{i}", "price": round(random.uniform(1, 100), 2), "volume": random.randint(1, 1000)} for i in range(10)]
orders[0] = {"symbol": "GOOG", "buyerID": "u0", "price": 42.8, "volume": 5}
open(f"{d}/orders.json", "w").write(json.dumps({"size": len(orders), "payload": {"order": orders}}))
items = [{"sku": f"SKU-{i:04}", "qty": random.randint(1, 9), "unitPrice": round(random.uniform(1, 200), 2)} for i in range(20)]
doc = lambda p: {"orderId": "O-1", "orderDate": "2026-11-24T10:15:00Z", "currency": "EUR", "customer": {"id": "C-7", "firstName": "Ada", "lastName": "Lovelace", "email": "Ada.L@Example.COM", "tier": "gold", "address": {"line1": "12 St James's Square", "city": "London", "zip": "SW1Y 4LB", "country": "GB"}}, "items": items, "filler": p}
open(f"{d}/order.json", "w").write(exact(doc, 5120))
open(f"{d}/fixed.json", "w").write(json.dumps({"status": "ok", "id": 42, "items": [{"sku": "A", "qty": 1}] * 4}))
PY

start_busbar() { # name listen admin echo-port-base json delay
  BUSBAR_WORKERS=1 BUSBAR_LOG=warn BUSBAR_LISTEN=$2 BUSBAR_ADMIN=$3 \
  BUSBAR_ECHO_STANDARD=127.0.0.1:$(($4)) BUSBAR_ECHO_PREMIUM=127.0.0.1:$(($4 + 1)) \
  BUSBAR_ECHO_STOCK=127.0.0.1:$(($4 + 2)) BUSBAR_ECHO_PRICE=127.0.0.1:$(($4 + 3)) \
  BUSBAR_ECHO_REVIEWS=127.0.0.1:$(($4 + 4)) BUSBAR_ECHO_JSON=$5 BUSBAR_ECHO_DELAY=$6 \
    taskset -c 0 $bin run examples/integrator.yaml > "$tmp/$1.log" 2>&1 &
  pid[$1]=$!
  for _ in $(seq 100); do curl -sf -o /dev/null "http://$2/api/product/1" && return; sleep 0.1; done
  echo "busbar $1 did not start"; cat "$tmp/$1.log"; exit 1
}
declare -A pid
# Camel on :8290 calls instance a's echoes, and instance b's (echo mode) for JsonToSoap.
start_camel() {
  CPU=0 PORT=8290 JSON_STANDARD=http://127.0.0.1:9010/echo JSON_PREMIUM=http://127.0.0.1:9011/echo \
  JSON_STOCK=http://127.0.0.1:9012 JSON_PRICE=http://127.0.0.1:9013 JSON_REVIEWS=http://127.0.0.1:9014 \
  JSON_SOAP=http://127.0.0.1:9020/echo bench/peers/camel/run.sh > "$tmp/camel.log" 2>&1 &
  pid[camel]=$!
  for _ in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:8290/api/product/1 && return; sleep 0.5; done
  echo "camel did not start"; cat "$tmp/camel.log"; exit 1
}
mkdir -p /tmp/busbar-bench-nginx-body /tmp/busbar-bench-nginx-proxy

cell() { # label url conc [env...]
  local label=$1 url=$2 c=$3; shift 3
  local out
  out=$(env "$@" taskset -c 1 wrk -t1 -c"$c" -d"${secs}s" --latency -s bench/json.lua "$url")
  local rps p50 p99 errs
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errs=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr '\n' ' ' || true)
  printf "%-16s %4s %10s %9s %9s %s\n" "$label" "$c" "$rps" "$p50" "$p99" "$errs" | tee -a "$tmp/results"
}

# The scenarios: label, path, wrk environment. busbar serves them on instance a (:8281), but
# JsonToSoap on b (:8282); Camel serves them all on :8290.
scenarios=(
  "passthrough /api/passthrough BODY=$tmp/passthrough.json"
  "cbr /api/route BODY=$tmp/premium.json BODY2=$tmp/standard.json"
  "cbr-filter /api/route/filter BODY=$tmp/orders.json"
  "map /api/map BODY=$tmp/orders.json"
  "transform /api/transform BODY=$tmp/order.json"
  "scatter-gather /api/product/ IDS=1000"
  "json-to-soap /api/soap BODY=$tmp/orders.json"
)
busbar_url() { [[ $1 == json-to-soap ]] && echo "http://127.0.0.1:8282$2" || echo "http://127.0.0.1:8281$2"; }

# Load on each Camel scenario for WARMUP seconds, not recorded.
warm_camel() { # scenarios to warm
  local label path env
  for sc in "$@"; do
    read -r label path env <<<"$sc"
    # shellcheck disable=SC2086
    env $env taskset -c 1 wrk -t1 -c"$conc" -d"${warmup}s" -s bench/json.lua "http://127.0.0.1:8290$path" >/dev/null
  done
}

echo "== throughput: fixed JSON, no delay, c=$conc, $rounds rounds of ${secs}s; peers:$peers"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
start_busbar a 127.0.0.1:8281 127.0.0.1:9912 9010 "$tmp/fixed.json" 0ms
start_busbar b 127.0.0.1:8282 127.0.0.1:9913 9020 "" 0ms
echo "== correctness: busbar bench verify --suite integrator on the echoing instance"
if ! $bin bench verify http://127.0.0.1:8282/api --suite integrator --sizes 1k,5k,10k,100k \
  --concurrency 1,"$conc" > "$tmp/verify" 2>&1; then
  cat "$tmp/verify"; exit 1
fi
tail -1 "$tmp/verify"
if has nginx; then
  taskset -c 0 nginx -p "$tmp" -c "$PWD/bench/peers/nginx-json.conf" &
  for _ in $(seq 50); do curl -sf -o /dev/null -d x http://127.0.0.1:8381/api/passthrough && break; sleep 0.1; done
fi
if has camel; then
  start_camel
  echo "camel: ${warmup}s of warm-up per scenario"
  warm_camel "${scenarios[@]}"
fi
if part throughput; then
  printf "%-16s %4s %10s %9s %9s\n" target c req/s p50 p99
  for _ in $(seq "$rounds"); do
    cell echo-direct http://127.0.0.1:9010/echo "$conc" BODY="$tmp/passthrough.json"
    if has nginx; then cell nginx http://127.0.0.1:8381/api/passthrough "$conc" BODY="$tmp/passthrough.json"; fi
    for sc in "${scenarios[@]}"; do
      read -r label path env <<<"$sc"
      # shellcheck disable=SC2086
      cell "$label" "$(busbar_url "$label" "$path")" "$conc" $env
      # shellcheck disable=SC2086
      if has camel; then cell "camel-$label" "http://127.0.0.1:8290$path" "$conc" $env; fi
    done
  done
  mv "$tmp/results" "$tmp/throughput"
  # Other work on the machine shows here: 2 cores, and wrk alone takes one.
  echo "load average after the rounds: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "medians, and ratios to passthrough (and passthrough to nginx):"
  med() { awk -v t="$1" '$1==t {print $3}' "$tmp/throughput" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  pt=$(med passthrough)
  for t in echo-direct nginx passthrough cbr cbr-filter map transform scatter-gather json-to-soap; do
    m=$(med "$t")
    [[ -n $m ]] || continue
    awk -v t="$t" -v m="$m" -v pt="$pt" -v ng="$(med nginx)" 'BEGIN {
      r = m / pt; extra = (t == "passthrough" && ng > 0) ? sprintf("  (%.2fx nginx)", m / ng) : "";
      printf "%-16s %10.0f  %.2fx passthrough%s\n", t, m, r, extra }'
  done
  if has camel; then
    echo
    echo "Camel 4.14.0 medians, their ratio to Camel's passthrough, and busbar's to Camel's:"
    cpt=$(med camel-passthrough)
    for sc in "${scenarios[@]}"; do
      read -r label _ <<<"$sc"
      awk -v t="$label" -v m="$(med "camel-$label")" -v cpt="$cpt" -v b="$(med "$label")" 'BEGIN {
        printf "%-16s %10.0f  %.2fx passthrough  busbar %.2fx camel\n", t, m, m / cpt, b / m }'
    done
  fi

fi
if ! part latency; then exit 0; fi
echo
echo "== latency: back ends answer after 5 ms, in their own process on core 1"
# The back ends run beside wrk, not on the proxy's core: there they would charge their own
# work and wake-ups to the proxy's added latency. Every target calls the same ones.
kill "${pid[a]}" "${pid[b]}" 2>/dev/null || true; sleep 1
BUSBAR_LOG=warn BUSBAR_ECHO_JSON="$tmp/fixed.json" BUSBAR_ECHO_DELAY=5ms BUSBAR_ECHO=127.0.0.1:9009 \
  taskset -c 1 $bin run bench/rounds/backends.yaml > "$tmp/backends.log" 2>&1 &
pid[backends]=$!
BUSBAR_ECHO_EMBEDDED=false start_busbar a 127.0.0.1:8281 127.0.0.1:9912 9010 "" 0ms
latency=("${scenarios[0]}" "${scenarios[1]}" "${scenarios[5]}")
if has camel; then
  # Camel's pooled connections to the first instance a are gone: a few seconds of load first.
  warmup=5 warm_camel "${latency[@]}"
fi
printf "%-16s %4s %10s %9s %9s\n" target c req/s p50 p99
for _ in $(seq "$rounds"); do
  for c in 50 500; do
    cell echo-direct http://127.0.0.1:9010/echo "$c" BODY="$tmp/passthrough.json"
    for sc in "${latency[@]}"; do
      read -r label path env <<<"$sc"
      # shellcheck disable=SC2086
      cell "$label" "http://127.0.0.1:8281$path" "$c" $env
      # shellcheck disable=SC2086
      if has camel; then cell "camel-$label" "http://127.0.0.1:8290$path" "$c" $env; fi
    done
  done
done
mv "$tmp/results" "$tmp/latency"
echo
echo "medians over the rounds (ms), and p50 added over echo direct at c = 50:"
# wrk prints latencies with a unit: us, ms or s.
ms() { awk '{ v = $1; if (v ~ /us$/) v = v / 1000; else if (v ~ /ms$/) v = v + 0; else if (v ~ /s$/) v = v * 1000; print v }'; }
lmed() { # label c column
  awk -v t="$1" -v c="$2" -v k="$3" '$1==t && $2==c {print $k}' "$tmp/latency" | ms | sort -g \
    | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'
}
base=$(lmed echo-direct 50 4)
for t in echo-direct passthrough cbr scatter-gather camel-passthrough camel-cbr camel-scatter-gather; do
  p50=$(lmed "$t" 50 4)
  [[ -n $p50 ]] || continue
  awk -v t="$t" -v p50="$p50" -v p99="$(lmed "$t" 500 5)" -v base="$base" 'BEGIN {
    printf "%-22s c=50 p50 %7.2f (+%.2f)   c=500 p99 %7.2f\n", t, p50, p50 - base, p99 }'
done
