#!/usr/bin/env bash
# Builds busbar with profile-guided optimisation: an instrumented build serves the bundled
# examples while busbar's own bench kit (the same instrumented binary) drives every classic and
# integrator scenario through it, then the release build is made again with that profile, so
# the code each exchange runs is laid out together and the rest kept apart. The result is
# target/pgo/busbar (what `make release-pgo` makes; docs/benchmarks.md, "Profile-guided build",
# counts what it saves); target/release/busbar stays the plain build.
# Needs rustup's llvm-tools component (installed here when missing) for llvm-profdata.
# Everything listens on loopback ports 18780-18830 for about a minute, and stops by itself.
# Usage: scripts/pgo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
scripts/setup.sh --run
make -s keys

rustup component list --installed 2>/dev/null | grep -q '^llvm-tools' || rustup component add llvm-tools
sysroot=$(rustc --print sysroot)
profdata=$(find "$sysroot/lib/rustlib" -name llvm-profdata -type f | head -n 1)
[ -x "$profdata" ] || { echo "pgo: llvm-profdata not found under $sysroot" >&2; exit 1; }

work=$PWD/target/pgo
rm -rf "$work/raw"
mkdir -p "$work/raw"
echo "pgo: instrumented build (target/pgo/gen)" >&2
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$work/raw" CARGO_TARGET_DIR=$work/gen \
  cargo build --release --locked --bin busbar
gen=$work/gen/release/busbar

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
up() {
  for _ in $(seq 100); do
    curl -s -o /dev/null -m 1 "$1" && return 0
    sleep 0.1
  done
  echo "pgo: nothing answers at $1 (logs in $work)" >&2
  exit 1
}

echo "pgo: training on the classic and integrator scenarios" >&2
"$gen" echo --listen 127.0.0.1:18790 --workers 1 > "$work/echo.log" 2>&1 &
pids+=($!)
BUSBAR_LISTEN=127.0.0.1:18780 BUSBAR_ECHO=127.0.0.1:18790 BUSBAR_ECHO_EMBEDDED=false \
  BUSBAR_ADMIN=127.0.0.1:18791 BUSBAR_KEYS=$PWD/target/keys BUSBAR_WORKERS=1 BUSBAR_LOG=warn \
  "$gen" run examples/esb-benchmark.yaml > "$work/classic.log" 2>&1 &
pids+=($!)
BUSBAR_LISTEN=127.0.0.1:18781 BUSBAR_ADMIN=127.0.0.1:18792 BUSBAR_ECHO_STANDARD=127.0.0.1:18810 \
  BUSBAR_ECHO_PREMIUM=127.0.0.1:18811 BUSBAR_ECHO_STOCK=127.0.0.1:18812 \
  BUSBAR_ECHO_PRICE=127.0.0.1:18813 BUSBAR_ECHO_REVIEWS=127.0.0.1:18814 BUSBAR_WORKERS=1 \
  BUSBAR_LOG=warn "$gen" run examples/integrator.yaml > "$work/integrator.log" 2>&1 &
pids+=($!)
up http://127.0.0.1:18780/
up http://127.0.0.1:18781/

classic=http://127.0.0.1:18780/service
# Every scenario, each answer checked: a profile of a build that answers wrongly is no profile.
"$gen" bench verify "$classic" --keys target/keys --scenarios \
  DirectProxy,CBRProxy,CBRSOAPHeaderProxy,CBRTransportHeaderProxy,XSLTProxy,SecureProxy,SecureProxyModern \
  > "$work/verify-classic.log"
"$gen" bench verify http://127.0.0.1:18781/api --suite integrator > "$work/verify-integrator.log"
# Load, so that the profile weighs the paths as a benchmark round does.
load() { "$gen" bench load "$@" > /dev/null; }
for size in 1024 10240 102400; do
  for c in 20 320; do load -c "$c" -d 3s --size "$size" --verify direct "$classic/DirectProxy"; done
done
load -c 1000 -d 2s --size 1024 --verify direct "$classic/DirectProxy"
load -c 20 -d 2s --size 10240 --verify cbr "$classic/CBRProxy"
load -c 20 -d 2s --size 10240 --verify cbr-soap-header "$classic/CBRSOAPHeaderProxy"
load -c 20 -d 2s --size 10240 --verify cbr-transport-header "$classic/CBRTransportHeaderProxy"
load -c 20 -d 2s --size 10240 --verify xslt "$classic/XSLTProxy"
load -c 20 -d 3s --size 1024 --verify secure --keys target/keys --pool 500 "$classic/SecureProxy"
cleanup
pids=()

"$profdata" merge -o "$work/busbar.profdata" "$work"/raw/*.profraw
echo "pgo: optimised build (target/pgo/use)" >&2
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$work/busbar.profdata" CARGO_TARGET_DIR=$work/use \
  cargo build --release --locked --bin busbar
cp "$work/use/release/busbar" "$work/busbar"
echo "pgo: built target/pgo/busbar" >&2
