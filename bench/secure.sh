#!/usr/bin/env bash
# SecureProxy (WS-Security) next to DirectProxy, same run: legacy and modern profiles, fresh
# messages (replay cache on), and the classic replayed message with the session-key cache on
# and the replay cache off. The load generator builds a pool of fresh signed and encrypted
# requests before each cell and decrypts and verifies every response with the client's key.
# Usage: bench/secure.sh [seconds per cell, default 10]
# Environment: SIZES (default "1024 10240"), CONC ("20"), ROUNDS (1), WORKERS (2),
# TARGETS (default below).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
cargo build --release --bin busbar
bin=./target/release/busbar
tests/interop/keys.sh target/keys
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
sizes=${SIZES:-1024 10240}
conc=${CONC:-20}
rounds=${ROUNDS:-1}
targets=${TARGETS:-DirectProxy SecureProxy SecureProxyModern SecureProxyCached SecureProxyModernCached}
keys=$PWD/target/keys

proxy() { # NAME PROFILE DIGEST DATA TRANSPORT CACHED
  local replay=true cache=false
  [[ $6 == cached ]] && replay=false cache=true
  cat <<YAML
  $1:
    path: /service/$1
    in:
      - wsse_verify:
          require: [timestamp, signature, encryption]
          trust: { ca: "$keys/ca.pem", subject: "CN=client" }
          decrypt_key: { pkcs12: "$keys/server.p12", password: server-pass }
          algorithms: $2
          replay_cache: { enabled: $replay }
          session_key_cache: { enabled: $cache }
      - call: echo
    out:
      - wsse_secure:
          timestamp: { ttl: 5m }
          sign: { key: "$keys/server.p12", password: server-pass, digest: $3 }
          encrypt: { for: request_signer, data: $4, key_transport: $5 }
YAML
}
{
  cat <<YAML
workers: ${WORKERS:-2}
log: { level: warn }
admin: { bind: "127.0.0.1:0" }
echo: { bind: "127.0.0.1:9000" }
listeners: { http: { bind: "127.0.0.1:8280" } }
endpoints: { echo: { url: "http://127.0.0.1:9000/service/EchoService" } }
proxies:
  DirectProxy:
    path: /service/DirectProxy
    in: [ { call: echo } ]
YAML
  proxy SecureProxy legacy sha1 aes128-cbc rsa-1_5 fresh
  proxy SecureProxyModern modern sha256 aes256-gcm rsa-oaep fresh
  proxy SecureProxyCached legacy sha1 aes128-cbc rsa-1_5 cached
  proxy SecureProxyModernCached modern sha256 aes256-gcm rsa-oaep cached
} > "$tmp/secure.yaml"
$bin run "$tmp/secure.yaml" > "$tmp/busbar.log" 2>&1 &
server=$!
# CPU seconds (user + system) a process has used so far.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
for _ in $(seq 100); do curl -sf -o /dev/null -d x http://127.0.0.1:8280/service/DirectProxy && break; sleep 0.1; done

# server_ms: CPU (user + system) of the busbar process (proxy and echo) per successful message.
printf "%-26s %7s %4s %10s %9s %9s %7s %10s\n" target size c msg/s p50_ms p99_ms errors server_ms
for size in $sizes; do
  for c in $conc; do
    for _ in $(seq "$rounds"); do
      for t in $targets; do
        case $t in
          DirectProxy) args=(--verify direct) ;;
          SecureProxy) args=(--verify secure --keys "$keys") ;;
          SecureProxyModern) args=(--verify secure-modern --keys "$keys") ;;
          SecureProxyCached) args=(--verify secure --keys "$keys" --replay) ;;
          SecureProxyModernCached) args=(--verify secure-modern --keys "$keys" --replay) ;;
        esac
        $bin bench load "http://127.0.0.1:8280/service/$t" --size "$size" -c "$c" \
          -d "${secs}s" --warmup 0s --pool 8000 --json "$tmp/r.json" "${args[@]}" \
          > /dev/null 2> "$tmp/load.err" &
        client=$!
        # The server is idle while the client builds its message pool, so its CPU over the
        # client's lifetime is the measured window's (there is no warm-up).
        s0=$(cpu_of $server); s1=$s0
        while kill -0 $client 2>/dev/null; do s1=$(cpu_of $server); sleep 0.05; done
        wait $client
        python3 - "$tmp/r.json" "$t" "$size" "$c" "$s0" "$s1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e = r["errors"]
n = max(r["successes"], 1)
s = (float(sys.argv[6]) - float(sys.argv[5])) * 1000 / n
print(f"{sys.argv[2]:<26} {sys.argv[3]:>7} {sys.argv[4]:>4} {r['tps']:>10.1f} {r['latency_ms']['p50']:>9.2f} {r['latency_ms']['p99']:>9.2f} {sum(e.values()):>7} {s:>10.2f}")
PY
      done
    done
  done
done
