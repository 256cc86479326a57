#!/usr/bin/env bash
# Installs the WS-Security interop peers; scripts/setup.sh calls it. Safe to run repeatedly:
# each part is skipped while its inputs are unchanged.
#
#   target/interop/venv/          python-xmlsec + lxml (tests/interop/requirements.txt)
#   target/interop/wss4j/         Wss4jTool: wss4j-tool.jar, lib/, and the wss4j-tool launcher
#
# Needs java/javac 17+, mvn, python3 with venv, openssl; installs the missing ones from
# Debian (default-jdk-headless, maven, python3-venv, openssl) when it can.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$root/target/interop
mkdir -p "$out"

say() { echo "interop setup: $*" >&2; }

sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
apt_updated=""
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    say "missing $*, and no apt-get to install it: install it by hand"
    exit 1
  fi
  say "installing $* from Debian"
  if [[ -z "$apt_updated" ]]; then
    $sudo apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

hash_files() { # FILE... -> one sha256 over names and contents
  local f
  for f in "$@"; do
    printf '%s\n' "${f#"$root"/}"
    cat "$f"
  done | sha256sum | cut -d' ' -f1
}

# --- tools -----------------------------------------------------------------------------------
need=()
command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
((${#need[@]} == 0)) || apt_install "${need[@]}"

if ! command -v python3 >/dev/null 2>&1; then
  apt_install python3 python3-venv
fi
# Debian's own python3 has venv only with python3-venv (ensurepip); pyenv builds have it.
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  apt_install python3-venv
fi

java_major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
if [[ -z "$java_major" || "$java_major" -lt 17 ]]; then
  say "Java 17 or newer needed (found '${java_major:-none}')"
  exit 1
fi

# --- python-xmlsec venv ----------------------------------------------------------------------
venv=$out/venv
stamp=$(hash_files "$here/requirements.txt")-$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ -f "$venv/.stamp" && "$(cat "$venv/.stamp")" == "$stamp" ]] &&
  "$venv/bin/python" -c 'import xmlsec, lxml, cryptography' >/dev/null 2>&1; then
  say "python venv up to date ($venv)"
else
  say "creating python venv $venv and installing tests/interop/requirements.txt"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
  if ! "$venv/bin/python" -c 'import xmlsec, lxml.etree' 2>&1; then
    say "xmlsec does not import next to lxml: see the pins in tests/interop/requirements.txt"
    exit 1
  fi
  echo "$stamp" >"$venv/.stamp"
fi

# --- Wss4jTool -------------------------------------------------------------------------------
wss=$out/wss4j
mapfile -t sources < <(find "$here/wss4j/src" -type f -name '*.java' | LC_ALL=C sort)
stamp=$(hash_files "$here/wss4j/pom.xml" "${sources[@]}")-java$java_major
if [[ -f "$wss/.stamp" && "$(cat "$wss/.stamp")" == "$stamp" && -f "$wss/wss4j-tool.jar" ]]; then
  say "Wss4jTool up to date ($wss/wss4j-tool.jar)"
else
  say "building Wss4jTool with Maven (WSS4J 3.0.4; the first run downloads its dependencies)"
  rm -rf "${wss:?}/lib" "${wss:?}/build" "${wss:?}/wss4j-tool.jar"
  mkdir -p "$wss"
  if ! mvn -q -B -f "$here/wss4j/pom.xml" package >"$wss/build.log" 2>&1; then
    cat "$wss/build.log" >&2
    say "Maven build failed (log: $wss/build.log)"
    exit 1
  fi
  cat >"$wss/wss4j-tool" <<'EOF'
#!/bin/sh
# Launcher for Wss4jTool (tests/interop/wss4j); see tests/interop/README.md.
exec java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto -jar "$(dirname "$0")/wss4j-tool.jar" "$@"
EOF
  chmod +x "$wss/wss4j-tool"
  echo "$stamp" >"$wss/.stamp"
  say "built $wss/wss4j-tool.jar"
fi
