#!/usr/bin/env bash
# Durable WS-BPEL instances (docs/processes.md "Durable instances"): SimpleInvoke1 (x = 1,
# written once, at its end), SimpleWait1 (the same with a wait point before its reply: written
# twice) and HelloWorld direct, with instances in memory, durable on SQLite (a file in a
# temporary folder), durable on PostgreSQL (a throw-away server on core 0 beside busbar) with
# its default `synchronous_commit = on` (every commit waits for the WAL's fsync), and durable on
# PostgreSQL with `synchronous_commit = off` for busbar's database (a commit survives a crash of
# busbar, as SQLite's WAL with synchronous=NORMAL does, but not of the server or the machine),
# completion policy `always`. Each round runs the three modes one after the other
# (bench/bpel.sh per mode, one round each); busbar on core 0, the kit on core 1.
# Usage: bench/bpel-durable.sh [seconds per cell, default 8]. Environment: ROUNDS (3),
# CONC (20,320), MODES ("memory sqlite postgres postgres-async"), OUT (bench/out/bpel-durable).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${ROUNDS:-3}
conc=${CONC:-20,320}
modes=${MODES:-memory sqlite postgres postgres-async}
out=${OUT:-bench/out/bpel-durable}
cargo build --release --bin busbar
bin=${CARGO_TARGET_DIR:-target}/release/busbar
tmp=$(mktemp -d)
source bench/pg.sh
cleanup() {
  kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true
  pg_stop "$tmp"
  rm -rf "$tmp"
}
trap cleanup EXIT
port=5498
pg_start "$tmp" $port -c max_connections=200
pg="postgres://busbar@127.0.0.1:$port/postgres"
"$pgbin/psql" -q -h 127.0.0.1 -p $port -U busbar -c "CREATE DATABASE flows_async" postgres
"$pgbin/psql" -q -h 127.0.0.1 -p $port -U busbar -c "ALTER DATABASE flows_async SET synchronous_commit = off" postgres
pg_async="postgres://busbar@127.0.0.1:$port/flows_async"
mkdir -p "$tmp/sqlite" && chmod 777 "$tmp/sqlite"

rm -rf "$out"
for r in $(seq "$rounds"); do
  for mode in $modes; do
    case $mode in
      memory) env=(BUSBAR_PERSISTENCE=transient) ;;
      sqlite) env=(BUSBAR_PERSISTENCE=durable "BUSBAR_FLOW_DB=sqlite:$tmp/sqlite/flows.db") ;;
      postgres) env=(BUSBAR_PERSISTENCE=durable "BUSBAR_FLOW_DB=$pg") ;;
      postgres-async) env=(BUSBAR_PERSISTENCE=durable "BUSBAR_FLOW_DB=$pg_async") ;;
    esac
    echo "== round $r: $mode"
    env "${env[@]}" ROUNDS=1 WARMUP=2 X=1 CONC="$conc" OUT="$out/$mode-$r" \
      bench/bpel.sh "$secs" | sed -n '/^scenario/,$p'
    # SimpleWait1: the kit's x = 1 answers, at the SimpleWait1 URL.
    env "${env[@]}" BUSBAR_WORKERS=1 BUSBAR_LOG=warn BUSBAR_LISTEN=127.0.0.1:8283 \
      BUSBAR_HELLOWORLD=127.0.0.1:8283 BUSBAR_ADMIN=127.0.0.1:9904 \
      taskset -c 0 "$bin" run examples/orchestration/simple-invoke.yaml > "$tmp/wait.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:9904/readyz && break; sleep 0.1; done
    for c in ${conc//,/ }; do
      printf "SimpleWait1 c=%s: " "$c"
      timeout $((secs + 30)) taskset -c 1 "$bin" bench load http://127.0.0.1:8283/service/SimpleWait1 \
        --suite bpel --verify bpel --x 1 -c "$c" -d "${secs}s" --warmup 2s \
        --json "$out/$mode-$r-wait-c$c.json" | grep -E "req/s|latency ms|errors:" | tr '\n' ' '
      echo
    done
    kill "$pid"; wait "$pid" 2>/dev/null || true
    if [[ $mode == sqlite ]]; then ls -la "$tmp/sqlite"; rm -f "$tmp/sqlite"/flows.db*; fi
  done
done
for db in postgres flows_async; do
  echo "$db rows: $("$pgbin/psql" -h 127.0.0.1 -p $port -U busbar -tAc 'SELECT state, count(*) FROM busbar_bpel_instances GROUP BY state' $db 2>/dev/null | tr '\n' ' ')"
done
