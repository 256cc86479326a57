#!/usr/bin/env bash
# Starts Apache Camel 4.14.0 with the benchmark proxies (bench/peers/camel) in the foreground.
# Builds first when the classpath is missing or older than the sources (offline when Maven's
# local repository already has everything, online otherwise).
# Environment: PORT (8290), ECHO (http://127.0.0.1:9000/service/EchoService), CPU (0: the core
# taskset pins the JVM to), POOL (512 back-end connections), JAVA_OPTS (replaces the heap/GC
# flags below), BUILD_ONLY (build, then exit). SIGTERM/SIGINT stop Camel gracefully; the exit status is the JVM's.
# The integrator routes (/api/..., examples/integrator.yaml's back-end addresses by default):
# JSON_STANDARD (http://127.0.0.1:9010/echo), JSON_PREMIUM (http://127.0.0.1:9011/echo),
# JSON_SOAP (the SOAP service of /api/soap: JSON_STANDARD), JSON_STOCK, JSON_PRICE, JSON_REVIEWS
# (the product services' base URLs: http://127.0.0.1:9012, :9013, :9014).
# SecureProxy's keys: KEYS (the repository's target/keys; tests/interop/keys.sh DIR makes them;
# without server.p12 and ca.pem there, SecureProxy is not served), KEYS_PASSWORD (server-pass).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)

stamp="$here/target/lib/.built"
if [[ ! -f "$stamp" || -n $(find "$here/pom.xml" "$here/src" -newer "$stamp" -print -quit) ]]; then
  echo "camel: building $here" >&2
  if ! (cd "$here" && mvn -q -B -o package >/dev/null 2>&1); then
    (cd "$here" && mvn -q -B package)
  fi
  touch "$stamp"
fi
[[ -z "${BUILD_ONLY:-}" ]] || exit 0

# Same heap and collector as the figures in docs/benchmarks.md: a fixed 1 GiB heap so no run
# pays for heap growth, ParallelGC for throughput.
java_opts=${JAVA_OPTS:--Xms1g -Xmx1g -XX:+UseParallelGC}
port=${PORT:-8290}
# shellcheck disable=SC2086
taskset -c "${CPU:-0}" java $java_opts \
  -Dcamel.port="$port" \
  -Dcamel.echo="${ECHO:-http://127.0.0.1:9000/service/EchoService}" \
  -Dcamel.pool="${POOL:-512}" \
  -Dcamel.json.standard="${JSON_STANDARD:-http://127.0.0.1:9010/echo}" \
  -Dcamel.json.premium="${JSON_PREMIUM:-http://127.0.0.1:9011/echo}" \
  -Dcamel.json.soap="${JSON_SOAP:-${JSON_STANDARD:-http://127.0.0.1:9010/echo}}" \
  -Dcamel.json.stock="${JSON_STOCK:-http://127.0.0.1:9012}" \
  -Dcamel.json.price="${JSON_PRICE:-http://127.0.0.1:9013}" \
  -Dcamel.json.reviews="${JSON_REVIEWS:-http://127.0.0.1:9014}" \
  -Dcamel.xslt.request="$repo/examples/xslt/reverse-request.xsl" \
  -Dcamel.xslt.response="$repo/examples/xslt/reverse-response.xsl" \
  -Dcamel.keys="${KEYS:-$repo/target/keys}" \
  -Dcamel.keys.password="${KEYS_PASSWORD:-server-pass}" \
  -cp "$here/target/classes:$here/target/lib/*" busbar.bench.camel.CamelPeer &
pid=$!
echo "camel: pid $pid port $port cpu ${CPU:-0}" >&2
# Forward the stop signal to the JVM (camel-main shuts down on SIGTERM) and wait for it.
trap 'kill -TERM $pid 2>/dev/null' TERM INT
rc=0
while :; do
  wait $pid && rc=0 || rc=$?
  kill -0 $pid 2>/dev/null || break
done
exit $rc
