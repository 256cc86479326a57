#!/usr/bin/env bash
# The proxy's CPU per fresh legacy SecureProxy message against the cost of its two RSA private
# operations, measured in the same run.
#
# The floor is what `rsa_costs` (crates/busbar-wssec/tests/crypto.rs) times on core 0: one
# RSA-1.5 unwrap (the request's key) plus one RSA-SHA1 signature (the answer's), run before and
# after the rounds. The proxy is bench/secure-legacy.yaml's SecureProxy (legacy profile, fresh
# messages, replay cache on, one worker), as bench/secure-camel.sh measures it, on core 0; `busbar bench load --verify secure` on core 1
# sends fresh signed and encrypted messages and decrypts and verifies every answer. The proxy's
# CPU time (user + system, from /proc) over the window is divided by the messages answered. Each
# build runs twice per round: with its embedded echo, and calling an echo of its own process
# (`busbar echo`, on core 1), so that only the proxy's work is counted.
# Prints one line per cell, then per build and layout the medians and the ratio to the floor.
# Usage: bench/secure-cpu.sh [seconds per cell, default 8]
# Environment: SIZE (1024), ROUNDS (3), POOL (messages built before each cell, 12000), KEYS
# (target/keys), BUSBAR (a busbar binary instead of this tree's build), BASE (another build,
# measured alternating with it, e.g. the previous commit's), PORT_BUSBAR (8280), PORT_ECHO (9000).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
size=${SIZE:-1024}
rounds=${ROUNDS:-3}
pool=${POOL:-12000}
keys=$(realpath -m "${KEYS:-target/keys}")
pb=${PORT_BUSBAR:-8280}
pe=${PORT_ECHO:-9000}

if [[ -n ${BUSBAR:-} ]]; then
  bin=$BUSBAR
else
  cargo build --release --bin busbar
  bin=${CARGO_TARGET_DIR:-target}/release/busbar
fi
builds=("$bin")
if [[ -n ${BASE:-} ]]; then builds+=("$BASE"); fi
tests/interop/keys.sh "$keys"
cargo test --release -p busbar-wssec --test crypto --no-run 2> /dev/null
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

floor() {
  taskset -c 0 cargo test -q --release -p busbar-wssec --test crypto -- --ignored --nocapture \
    rsa_costs 2> /dev/null |
    awk '/RSA-1.5 unwrap  / {u = $(NF-1)} /SHA-1 sign/ {s = $(NF-1)}
         END {if (u == "" || s == "") exit 1; printf "%.1f %.1f %.1f\n", u, s, u + s}'
}

read -r unwrap1 sign1 floor1 < <(floor)
echo "floor before: RSA-1.5 unwrap $unwrap1 µs + RSA-SHA1 sign $sign1 µs = $floor1 µs"

cpu() { awk '{print $14 + $15, $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
printf "%-6s %-28s %-9s %8s %12s %10s\n" round build echo ok "cpu µs/msg" "sys µs"
for r in $(seq "$rounds"); do
  for b in "${builds[@]}"; do
    for layout in embedded process; do
      echo_pid=
      if [[ $layout == process ]]; then
        taskset -c 1 "$bin" echo --listen "127.0.0.1:$pe" --workers 1 > "$tmp/echo.log" 2>&1 &
        echo_pid=$!
      fi
      embedded=true
      [[ $layout == process ]] && embedded=false
      BUSBAR_KEYS=$keys BUSBAR_LISTEN=127.0.0.1:$pb BUSBAR_ECHO=127.0.0.1:$pe BUSBAR_ECHO_EMBEDDED=$embedded \
        taskset -c 0 "$b" run bench/secure-legacy.yaml > "$tmp/busbar.log" 2>&1 &
      pid=$!
      for _ in $(seq 100); do
        curl -s -o /dev/null -m 1 "http://127.0.0.1:$pb/" && break
        sleep 0.1
      done
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "busbar ($b, $layout) did not start:" >&2
        cat "$tmp/busbar.log" >&2
        exit 1
      fi
      read -r t0 s0 < <(cpu "$pid")
      out=$(taskset -c 1 "$bin" bench load "http://127.0.0.1:$pb/service/SecureProxy" \
        --size "$size" -c 20 -d "${secs}s" --pool "$pool" --verify secure --keys "$keys" 2>&1)
      read -r t1 s1 < <(cpu "$pid")
      kill "$pid" $echo_pid 2>/dev/null || true
      wait "$pid" $echo_pid 2>/dev/null || true
      ok=$(sed -n 's/.* \([0-9]*\) ok,.*/\1/p' <<<"$out" | head -1)
      bad=$(grep -o 'errors: .*' <<<"$out" | grep -v 'connect 0, timeout 0, read 0, write 0, status 0, verify 0' || true)
      if [[ -z $ok || $ok == 0 || -n $bad ]]; then
        echo "round $r, $b, $layout: $out" >&2
        exit 1
      fi
      awk -v r="$r" -v b="$b" -v l="$layout" -v ok="$ok" -v t="$((t1 - t0))" -v s="$((s1 - s0))" -v hz="$ticks" \
        'BEGIN {printf "%-6s %-28s %-9s %8d %12.1f %10.1f\n", r, b, l, ok, t * 1e6 / hz / ok, s * 1e6 / hz / ok}' |
        tee -a "$tmp/cells"
    done
  done
done
read -r unwrap2 sign2 floor2 < <(floor)
echo "floor after: RSA-1.5 unwrap $unwrap2 µs + RSA-SHA1 sign $sign2 µs = $floor2 µs"
f=$(awk -v a="$floor1" -v b="$floor2" 'BEGIN {printf "%.1f", (a + b) / 2}')
echo "floor (mean of both): $f µs"
python3 - "$tmp/cells" "$f" <<'PY'
import statistics, sys
cells, floor = {}, float(sys.argv[2])
for line in open(sys.argv[1]):
    _, build, echo, _, cpu, system = line.split()
    cells.setdefault((build, echo), []).append((float(cpu), float(system)))
for (build, echo), runs in cells.items():
    cpu = statistics.median(c for c, _ in runs)
    system = statistics.median(s for _, s in runs)
    print(f"{build + ' ' + echo:<38} median {cpu:7.1f} µs per message (sys {system:5.1f}), "
          f"{cpu / floor:.2f}x the floor")
PY
