# The two commands of the README: `make run` and `make test`.
.PHONY: run test lint setup bench-setup release keys

CONFIG ?= examples/esb-benchmark.yaml

setup:
	@scripts/setup.sh

bench-setup:
	@scripts/setup.sh --bench

release:
	@scripts/setup.sh --run
	cargo build --release --bin busbar

# Test keys for the example's SecureProxy (CA, server, client; made with openssl, never
# committed). Clients sign with target/keys/client.p12 and encrypt for target/keys/server.pem.
keys:
	@tests/interop/keys.sh target/keys

# Builds, then serves the example config: the classic proxies on :8280, the embedded echo
# back end on :9000 and the admin API on 127.0.0.1:9901.
run: release keys
	./target/release/busbar run $(CONFIG)

# Every test of the workspace: unit, config, end-to-end over real sockets, interop oracles.
test: setup
	cargo test --workspace

lint: setup
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
