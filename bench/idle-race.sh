#!/usr/bin/env bash
# Requests that meet a back end's idle close: busbar in front of a busbar back end that closes
# idle client connections after 1 s (its `header_read_timeout`), while the front keeps them for
# its default `keep_alive`. wrk sends bursts of POSTs separated by lulls just under a second,
# so that pooled connections are taken again as the back end closes them. Prints, for each
# binary: requests, answers other than 2xx, and `busbar_upstream_resent_total` (requests sent
# again because the close crossed them before any of them reached the back end).
# Usage: bench/idle-race.sh [bursts, default 10]
# Environment: BUSBAR (a busbar binary instead of this tree's release build), BASE (another
# binary, e.g. a previous commit's build, run the same way after it), SIZE (request body bytes,
# 10240), C (connections, 200), BURST (seconds of load per burst, 1), LULL (seconds between
# bursts, 0.99), TLS=1 (the back end speaks HTTPS, with a certificate made for the run).
set -euo pipefail
cd "$(dirname "$0")/.."
bursts=${1:-10}
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
scheme=http tls_listener="" tls_endpoint=""
if [ -n "${TLS:-}" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/ca.key" -out "$tmp/ca.pem" -days 1 \
    -subj "/CN=idle-race CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$tmp/back.key" -out "$tmp/back.csr" \
    -subj "/CN=127.0.0.1" 2>/dev/null
  printf "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n" > "$tmp/ext"
  openssl x509 -req -in "$tmp/back.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" \
    -CAcreateserial -out "$tmp/back.pem" -days 1 -extfile "$tmp/ext" 2>/dev/null
  scheme=https
  tls_listener=", tls: { cert: \"$tmp/back.pem\", key: \"$tmp/back.key\" }"
  tls_endpoint=", tls: { ca: \"$tmp/ca.pem\" }"
fi
cat > "$tmp/back.yaml" <<YAML
workers: 1
log: { level: warn }
admin: { enabled: false }
listeners: { back: { bind: "127.0.0.1:20602", header_read_timeout: 1s$tls_listener } }
proxies:
  Echo:
    path: /echo
    in:
      - respond: {}
YAML
cat > "$tmp/front.yaml" <<YAML
workers: 1
log: { level: warn }
admin: { bind: "127.0.0.1:20603" }
listeners: { http: { bind: "127.0.0.1:20601" } }
endpoints: { back: { url: "$scheme://127.0.0.1:20602/echo"$tls_endpoint } }
proxies:
  P:
    path: /p
    in:
      - call: back
YAML
"$bin" bench payload --size "${SIZE:-10240}" > "$tmp/body"

# One binary as front and back: requests, non-2xx answers, resent.
run() {
  taskset -c 0 "$1" run "$tmp/back.yaml" > "$tmp/back.log" 2>&1 &
  local back=$!
  taskset -c 0 "$1" run "$tmp/front.yaml" > "$tmp/front.log" 2>&1 &
  local front=$!
  for _ in $(seq 50); do curl -sf -o /dev/null -d x http://127.0.0.1:20601/p && break; sleep 0.1; done
  local total=0 bad=0 out n e
  for _ in $(seq "$bursts"); do
    out=$(BODY="$tmp/body" taskset -c 1 wrk -t1 -c"${C:-200}" -d"${BURST:-1}s" \
      -s bench/post.lua http://127.0.0.1:20601/p)
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    e=$(awk '/Non-2xx/ {print $5}' <<<"$out")
    total=$((total + n)); bad=$((bad + ${e:-0}))
    sleep "${LULL:-0.99}"
  done
  local resent
  resent=$(curl -s http://127.0.0.1:20603/metrics | awk '/^busbar_upstream_resent_total/ {print $2}')
  printf "%-40s requests %8s  non-2xx %4s  resent %s\n" "$1" "$total" "$bad" "${resent:--}"
  kill "$back" "$front"; wait "$back" "$front" 2>/dev/null || true
}
run "$bin"
[ -z "${BASE:-}" ] || run "$BASE"
