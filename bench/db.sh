#!/usr/bin/env bash
# Same-run measurement of DbCrud single-row reads (examples/db-crud.yaml, docs/databases.md):
# busbar over PostgreSQL against `pgbench -S` (select-only, prepared statements, the same
# client count) on the same server, busbar over SQLite, and busbar's JsonPassthrough
# (examples/integrator.yaml, fixed JSON back end). Servers (PostgreSQL, busbar) on core 0, the
# load (wrk, pgbench) on core 1. ROUNDS rounds; medians.
# Usage: bench/db.sh [seconds per cell, default 10]. Environment: ROUNDS (3), POOL (16).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${ROUNDS:-3}
pool=${POOL:-16}
scripts/setup.sh --bench >/dev/null
cargo build --release --bin busbar
bin=./target/release/busbar
tmp=$(mktemp -d)
source bench/pg.sh
cleanup() {
  kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true
  pg_stop "$tmp"
  rm -rf "$tmp"
}
trap cleanup EXIT

port=5497
pg_start "$tmp" $port -c max_connections=600 -c shared_buffers=256MB
url="postgres://busbar@127.0.0.1:$port/postgres"
"$pgbin/pgbench" -q -i -s 2 -h 127.0.0.1 -p $port -U busbar postgres >/dev/null 2>&1

start() { # name config listen admin [env...]
  local name=$1 config=$2 listen=$3 admin=$4; shift 4
  env BUSBAR_WORKERS=1 BUSBAR_LOG=warn BUSBAR_LISTEN=$listen BUSBAR_ADMIN=$admin "$@" \
    taskset -c 0 $bin run "$config" > "$tmp/$name.log" 2>&1 &
  for _ in $(seq 600); do curl -sf -o /dev/null "http://$admin/readyz" && return; sleep 0.1; done
  echo "busbar $name did not become ready"; cat "$tmp/$name.log"; exit 1
}
echo '{"status":"ok","id":42,"items":[{"sku":"A","qty":1},{"sku":"A","qty":1}]}' > "$tmp/fixed.json"
head -c 200 /dev/zero | tr '\0' 'x' | sed 's/.*/{"payload":"&"}/' > "$tmp/body.json"
start pg examples/db-crud.yaml 127.0.0.1:8282 127.0.0.1:9923 BUSBAR_DB_URL="$url" BUSBAR_DB_POOL="$pool"
start sqlite examples/db-crud.yaml 127.0.0.1:8283 127.0.0.1:9924 BUSBAR_DB_FILE="$tmp/crud.sqlite" BUSBAR_DB_POOL=2
start pass examples/integrator.yaml 127.0.0.1:8284 127.0.0.1:9925 BUSBAR_ECHO_JSON="$tmp/fixed.json" \
  BUSBAR_ECHO_STANDARD=127.0.0.1:9030 BUSBAR_ECHO_PREMIUM=127.0.0.1:9031 BUSBAR_ECHO_STOCK=127.0.0.1:9032 \
  BUSBAR_ECHO_PRICE=127.0.0.1:9033 BUSBAR_ECHO_REVIEWS=127.0.0.1:9034

wrk_cell() { # label url conc script [env...]
  local label=$1 url=$2 c=$3 script=$4; shift 4
  local out rps p50 p99 errs
  out=$(env "$@" taskset -c 1 wrk -t1 -c"$c" -d"${secs}s" --latency -s "$script" "$url")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errs=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr '\n' ' ' || true)
  printf "%-14s %4s %10s %9s %9s %s\n" "$label" "$c" "$rps" "$p50" "$p99" "$errs" | tee -a "$tmp/results"
}
pgbench_cell() { # conc
  local out rps
  out=$(taskset -c 1 "$pgbin/pgbench" -S -M prepared -n -c "$1" -j 1 -T "$secs" -h 127.0.0.1 -p $port -U busbar postgres 2>&1)
  rps=$(awk '/^tps/ {print $3; exit}' <<<"$out")
  printf "%-14s %4s %10s\n" pgbench-S "$1" "$rps" | tee -a "$tmp/results"
}

printf "%-14s %4s %10s %9s %9s\n" target c req/s p50 p99
for _ in $(seq "$rounds"); do
  for c in 50 500; do
    pgbench_cell "$c"
    wrk_cell pg-read http://127.0.0.1:8282/api/customers/ "$c" bench/db.lua
    wrk_cell sqlite-read http://127.0.0.1:8283/api/customers/ "$c" bench/db.lua
    wrk_cell passthrough http://127.0.0.1:8284/api/passthrough "$c" bench/json.lua BODY="$tmp/body.json"
  done
done
echo
echo "medians (req/s, p99) and ratios:"
med() { awk -v t="$1" -v c="$2" -v col="$3" '$1==t && $2==c {print $col}' "$tmp/results" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for c in 50 500; do
  pgb=$(med pgbench-S "$c" 3); pg=$(med pg-read "$c" 3); sq=$(med sqlite-read "$c" 3); pt=$(med passthrough "$c" 3)
  awk -v c="$c" -v pgb="$pgb" -v pg="$pg" -v sq="$sq" -v pt="$pt" -v pgp99="$(med pg-read "$c" 5)" -v sqp99="$(med sqlite-read "$c" 5)" 'BEGIN {
    printf "c=%s: pgbench -S %.0f, busbar pg %.0f (%.2fx pgbench, %.2fx passthrough, p99 %s), busbar sqlite %.0f (%.2fx passthrough, p99 %s), passthrough %.0f\n",
      c, pgb, pg, pg / pgb, pg / pt, pgp99, sq, sq / pt, sqp99, pt }'
done
