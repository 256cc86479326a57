#!/usr/bin/env bash
# Installs what building and testing busbar needs on a fresh Debian machine, and nothing
# that is already there. Safe to run repeatedly.
set -euo pipefail

# Build: libxml2/libxslt headers for the XPath/XSLT binding, pkg-config, a C compiler.
# Tests: xsltproc and xmllint (differential oracles), chromium (renders the bench report),
# openssl and curl (TLS listener tests), systemd (`systemd-analyze verify` of the unit file),
# jq (the oracle of the jq step's tests), postgresql (the database tests start throw-away
# servers of their own with initdb and pg_ctl; nothing uses the package's own cluster).
# Benchmarks (not needed for tests): wrk, nginx-light, hyperfine.
packages=(pkg-config gcc make libxml2-dev libxslt1-dev xsltproc libxml2-utils chromium openssl curl systemd jq postgresql)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(wrk nginx-light hyperfine)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no Rust toolchain found: install rustup (https://rustup.rs) and run this again" >&2
  exit 1
fi
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done

# WS-Security interop peers (Apache WSS4J, python-xmlsec): installs its own JDK, Maven and
# python3-venv from Debian when missing.
# `--run` (what `make run` needs) skips them.
if [[ "${1:-}" != "--run" ]]; then
  "$(dirname "${BASH_SOURCE[0]}")/../tests/interop/setup.sh"
fi
