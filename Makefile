# One entry point for humans and CI.
#   make dev     run a node on embedded defaults (sets up Docker and the base image first)
#   make test    unit and end-to-end tests against real Docker (what .ci/run calls)
#   make verify  rustfmt check + clippy -D warnings + tests
#   make bench   benchmarks with ratios against baselines measured in the same run

SHELL := /bin/bash
# A toolchain that host-setup installs (rustup) lands here: every later line finds it.
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
MUSL := x86_64-unknown-linux-musl
GUEST_DEBUG := $(TARGET_DIR)/$(MUSL)/debug/warren-guest
GUEST_RELEASE := $(TARGET_DIR)/$(MUSL)/release/warren-guest

.PHONY: dev test verify bench setup setup-test guest guest-release build fmt clippy image clean-sandboxes

setup:
	deploy/host-setup.sh

# The tests also drive the web page in headless Chromium and use moto's S3 server.
setup-test:
	deploy/host-setup.sh --test-deps

image:
	deploy/image/build-local.sh

guest:
	$(CARGO) build -p warren-guest --target $(MUSL)

guest-release:
	$(CARGO) build --release -p warren-guest --target $(MUSL)

build: guest
	$(CARGO) build --workspace --all-targets

dev: setup guest-release
	$(CARGO) build --release -p warren-cli
	WARREN_GUEST_BIN=$(GUEST_RELEASE) $(TARGET_DIR)/release/warren dev

# The rolling-upgrade test starts the previous version (test-support/previous-version) too.
test: setup-test guest
	previous=$$(test-support/build-previous-version.sh) && \
	WARREN_PREVIOUS_BIN=$$previous WARREN_GUEST_BIN=$(abspath $(GUEST_DEBUG)) \
		$(CARGO) nextest run --workspace --no-fail-fast

fmt:
	$(CARGO) fmt --all -- --check

clippy: guest
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p warren-guest --target $(MUSL) -- -D warnings

verify: fmt clippy test

bench: setup guest-release
	$(CARGO) build --release -p warren-cli -p warren-loadtest
	WARREN_GUEST_BIN=$(abspath $(GUEST_RELEASE)) $(TARGET_DIR)/release/warren-bench

# Removes every container and network any warren node made on this Docker host.
clean-sandboxes:
	-docker rm -f $$(docker ps -aq --filter label=warren.managed=true) 2>/dev/null
	-docker network rm $$(docker network ls -q --filter label=warren.managed=true) 2>/dev/null
