# agent: build, test, demo, benchmarks.
#
#   make            static x86_64 binary: target/x86_64-unknown-linux-gnu/release/agent
#   make demo       install what the demo needs, build, run the product on example configs
#   make test       install test dependencies, run every test
#   make bench      run the benchmarks (ratios against references measured in the same run)

SHELL       := /bin/bash
TARGET      := x86_64-unknown-linux-gnu
STATIC_BIN  := target/$(TARGET)/release/agent
# Fully static, non-PIE: no dynamic section at all (the initramfs has no matching libc).
# - crt-static needs an explicit --target, else proc-macro crates fail to build;
# - SELINUX_STATIC=1 makes selinux-sys link libselinux.a; nothing links the libpcre2-8 it needs:
#   name the archive itself (-lpcre2-8 would pick the .so);
# - GNU ld, not the rust-lld the toolchain picks by default: linked by lld, the static binary
#   can die before main (SIGSEGV in __libc_fatal from __libc_start_main; lld leaves GLOB_DAT
#   relocations static glibc's start-up does not process).
STATIC_RUSTFLAGS := -C target-feature=+crt-static -C relocation-model=static \
	-C link-arg=-fuse-ld=bfd -C link-arg=-l:libpcre2-8.a
PREFIX      ?= /usr
DESTDIR     ?=

.PHONY: deny deny-advisories all static check-static deps demo-deps test-deps demo test lint bench bench-config bench-serve fuzz clean

all: static

static:
	RUSTFLAGS='$(STATIC_RUSTFLAGS)' SELINUX_STATIC=1 cargo build --release --locked --target $(TARGET)
	@$(STATIC_BIN) --version >/dev/null || { echo "$(STATIC_BIN) does not run" >&2; exit 1; }

# Fails unless the binary is fully static (no dynamic section, ldd agrees).
check-static: static
	@file $(STATIC_BIN) | tee /dev/stderr | grep -q 'statically linked'
	@! readelf -d $(STATIC_BIN) | grep -q 'Dynamic section'
	@ldd $(STATIC_BIN) 2>&1 | grep -qE 'not a dynamic executable|statically linked'
	@echo "static: OK, $$(stat -c %s $(STATIC_BIN)) bytes stripped"

# Build dependencies (Debian): static C archives and libclang for bindgen.
deps:
	.ci/install-packages build

demo-deps:
	.ci/install-packages demo

# Everything the tests need (packages listed in .ci/packages/*.apt and *.pip).
test-deps:
	.ci/install-packages all

demo: demo-deps static
	examples/demo.sh $(STATIC_BIN)

test: test-deps
	cargo test --locked --workspace -- --test-threads=4

lint:
	cargo fmt --all -- --check
	cargo clippy --locked --workspace --all-targets -- -D warnings

bench: bench-config
	@for b in benches/*.sh; do [ -x "$$b" ] || continue; echo "== $$b"; "$$b" || exit 1; done

bench-config:
	cargo bench --locked --bench config

bench-serve:
	benches/serve.sh

# Every fuzz target for FUZZ_SECONDS each (default 180), seeded from the test inputs
# (fuzz/seed.sh); prints each target's run count.
FUZZ_TARGETS := parse http_head accept data_url tftp_packet
fuzz:
	command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
	fuzz/seed.sh
	@cd fuzz && for t in $(FUZZ_TARGETS); do \
	  cargo +nightly fuzz run $$t corpus/$$t -- -max_total_time=$${FUZZ_SECONDS:-180} \
	    -print_final_stats=1 2>&1 | tee /tmp/agent-fuzz-$$t.log | grep -E 'stat::number_of_executed_units|ERROR|panicked' ; \
	  st=$${PIPESTATUS[0]}; [ $$st -eq 0 ] || { echo "fuzz target $$t failed (see /tmp/agent-fuzz-$$t.log)"; exit 1; }; \
	  echo "$$t: $$(grep -o 'stat::number_of_executed_units: *[0-9]*' /tmp/agent-fuzz-$$t.log | grep -o '[0-9]*$$') runs"; \
	done

# Licences, bans and sources of every dependency (deny.toml), offline. Installs cargo-deny.
deny:
	command -v cargo-deny >/dev/null || cargo install --locked cargo-deny
	cargo deny --offline check licenses bans sources

# The RustSec advisories check needs the advisory database (network).
deny-advisories:
	command -v cargo-deny >/dev/null || cargo install --locked cargo-deny
	cargo deny check advisories

clean:
	cargo clean

-include vm-tests/vm.mk
