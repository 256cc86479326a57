#!/usr/bin/env bash
# Starts Apache Synapse 2.1.0 with the benchmark proxies (bench/peers/synapse) in the foreground.
# On first use it unpacks org.apache.synapse:synapse-distribution:2.1.0:zip:bin from Maven
# (offline when Maven's local repository has it, online otherwise) into target/, and compiles
# the sun.misc.Service stand-in (src/) that Synapse needs on Java 9 and later. Every start
# writes the configuration afresh into target/run/.
# Environment: PORT (8292), ECHO (http://127.0.0.1:9000/service/EchoService), CPU (0: the core
# taskset pins the JVM to), JAVA_OPTS (replaces the heap/GC flags below), BUILD_ONLY (fetch and
# build, then exit). SIGTERM/SIGINT stop Synapse; the exit status is the JVM's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)

artifact=org.apache.synapse:synapse-distribution:2.1.0:zip:bin
dist="$here/target/synapse-2.1.0"
if [[ ! -f "$dist/lib/synapse-core-2.1.0.jar" ]]; then
  echo "synapse: unpacking $artifact into $here/target" >&2
  mkdir -p "$here/target"
  unpack=(dependency:unpack -Dartifact="$artifact" -DoutputDirectory="$here/target")
  # Run from target/: without a pom the plugin writes its marker files under a directory
  # literally named ${project.basedir} in the working directory.
  if ! (cd "$here/target" && mvn -q -B -o "${unpack[@]}" >/dev/null 2>&1); then
    (cd "$here/target" && mvn -q -B "${unpack[@]}")
  fi
  [[ -f "$dist/lib/synapse-core-2.1.0.jar" ]] || { echo "synapse: $dist is incomplete" >&2; exit 1; }
fi

patch="$here/target/patch"
shim="$here/src/sun/misc/Service.java"
if [[ ! -f "$patch/sun/misc/Service.class" || "$shim" -nt "$patch/sun/misc/Service.class" ]]; then
  echo "synapse: compiling $shim" >&2
  javac -d "$patch" --patch-module jdk.unsupported="$here/src" "$shim"
fi
[[ -z "${BUILD_ONLY:-}" ]] || exit 0

port=${PORT:-8292}
echo_url=${ECHO:-http://127.0.0.1:9000/service/EchoService}
run="$here/target/run"
rm -rf "$run"
mkdir -p "$run/tmp"

# axis2.xml: the distribution's, with the HTTP listener on 127.0.0.1:$port; the HTTPS listener
# and sender (they load the sample key stores), the VFS and mail listeners and the hot
# deployers of the synapse-config directory removed; services under /service/ instead of
# /services/, as the other peers serve them.
sed -e "s|<parameter name=\"port\">8280</parameter>|<parameter name=\"port\">$port</parameter>|" \
    -e 's|<!--parameter name="bind-address" locked="false">hostname or IP address</parameter-->|<parameter name="bind-address" locked="false">127.0.0.1</parameter>|' \
    -e '/<transportReceiver name="https"/,/<\/transportReceiver>/d' \
    -e '/<transportSender name="https"/,/<\/transportSender>/d' \
    -e '/<transportReceiver name="vfs"/d' \
    -e '/<transportReceiver name="mailto"/,/<\/transportReceiver>/d' \
    -e '/<deployer /d' \
    -e 's|<parameter name="hotdeployment">true</parameter>|<parameter name="hotdeployment">false</parameter>|' \
    -e 's|<parameter name="hotupdate">true</parameter>|<parameter name="hotupdate">false</parameter>|' \
    -e 's|<parameter name="servicePath">services</parameter>|<parameter name="servicePath">service</parameter>|' \
    "$dist/repository/conf/axis2.xml" >"$run/axis2.xml"
for expect in "<parameter name=\"port\">$port</parameter>" \
    '<parameter name="bind-address" locked="false">127.0.0.1</parameter>' \
    '<parameter name="servicePath">service</parameter>'; do
  grep -qF "$expect" "$run/axis2.xml" || { echo "synapse: axis2.xml lacks $expect" >&2; exit 1; }
done
if grep -qE '<transport(Receiver|Sender) name="https"|<deployer ' "$run/axis2.xml"; then
  echo "synapse: axis2.xml still has an HTTPS transport or a deployer" >&2
  exit 1
fi

# sed replacement text: escape the delimiter, & and backslashes.
quote() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }
sed -e "s|@ECHO@|$(quote "$echo_url")|g" -e "s|@XSLT@|$(quote "$repo/examples/xslt")|g" \
  "$here/synapse.xml" >"$run/synapse.xml"
cp "$here/synapse.properties" "$here/log4j.properties" "$run/"

# Same heap and collector as the figures in docs/benchmarks.md: a fixed 1 GiB heap so no run
# pays for heap growth, ParallelGC for throughput.
java_opts=${JAVA_OPTS:--Xms1g -Xmx1g -XX:+UseParallelGC}
cd "$run"
# shellcheck disable=SC2086
taskset -c "${CPU:-0}" java $java_opts \
  --patch-module jdk.unsupported="$patch" \
  -Djava.io.tmpdir="$run/tmp" \
  -Dlog4j.configuration="file:$run/log4j.properties" \
  -Dorg.apache.xerces.xni.parser.XMLParserConfiguration=org.apache.xerces.parsers.XMLGrammarCachingConfiguration \
  -cp "$run:$dist/lib/patches/*:$dist/lib:$dist/lib/*:$dist/lib/endorsed/*" \
  org.apache.synapse.SynapseServer \
  "$dist/repository" "$run/axis2.xml" "$dist" "$run/synapse.xml" "$dist/repository" &
pid=$!
echo "synapse: pid $pid port $port cpu ${CPU:-0}" >&2
# Forward the stop signal to the JVM (Synapse's shutdown hook stops the listeners) and wait.
trap 'kill -TERM $pid 2>/dev/null' TERM INT
rc=0
while :; do
  wait $pid && rc=0 || rc=$?
  kill -0 $pid 2>/dev/null || break
done
exit $rc
