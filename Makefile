# The two commands of the README: `make run` and `make test`.
.PHONY: run test lint setup bench-setup release

CONFIG ?= examples/esb-benchmark.yaml

setup:
	@scripts/setup.sh

bench-setup:
	@scripts/setup.sh --bench

release: setup
	cargo build --release --bin busbar

# Builds, then serves the example config: the classic proxies on :8280, the embedded echo
# back end on :9000 and the admin API on 127.0.0.1:9901. The SecureProxy keys are made
# once into target/keys.
run: release
	tests/interop/keys.sh target/keys
	./target/release/busbar run $(CONFIG)

# Every test of the workspace: unit, config, end-to-end over real sockets, interop oracles.
test: setup
	cargo test --workspace

lint: setup
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
