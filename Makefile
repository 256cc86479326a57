# The two commands of the README: `make run` and `make test`.
.PHONY: run test lint setup bench-setup release release-pgo keys install

CONFIG ?= examples/esb-benchmark.yaml

setup:
	@scripts/setup.sh

bench-setup:
	@scripts/setup.sh --bench

release:
	@scripts/setup.sh --run
	cargo build --release --bin busbar

# The fastest build, profile-guided (scripts/pgo.sh), into target/pgo/busbar.
# It builds twice and trains on the bundled examples in between (about three times as long).
release-pgo:
	@scripts/pgo.sh

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

# Installs the binary, the systemd unit and an example config (kept if one is already there):
#   sudo make install [PREFIX=/usr/local] [DESTDIR=...]
# then `systemctl daemon-reload && systemctl enable --now busbar`.
PREFIX ?= /usr/local
install: release
	install -D -m 0755 target/release/busbar $(DESTDIR)$(PREFIX)/bin/busbar
	install -D -m 0644 packaging/busbar.service $(DESTDIR)/etc/systemd/system/busbar.service
	sed -i 's#/usr/local/bin/busbar#$(PREFIX)/bin/busbar#g' $(DESTDIR)/etc/systemd/system/busbar.service
	install -d -m 0755 $(DESTDIR)/etc/busbar
	test -e $(DESTDIR)/etc/busbar/busbar.yaml || install -m 0644 packaging/busbar.yaml $(DESTDIR)/etc/busbar/busbar.yaml
