# agent: build, test, demo, benchmarks.
#
#   make            static x86_64 binary: target/x86_64-unknown-linux-gnu/release/agent
#   make demo       install what the demo needs, build, run the product on example configs
#   make test       install test dependencies, run every test
#   make bench      run the benchmarks (ratios against references measured in the same run)

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

.PHONY: all static check-static deps demo-deps test-deps demo test lint bench bench-config bench-serve fuzz clean

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
	cargo test --locked -- --test-threads=4

lint:
	cargo fmt --all -- --check
	cargo clippy --locked --all-targets -- -D warnings

bench: bench-config
	@for b in benches/*.sh; do [ -x "$$b" ] || continue; echo "== $$b"; "$$b" || exit 1; done

bench-config:
	cargo bench --locked --bench config

bench-serve:
	benches/serve.sh

fuzz:
	cargo install --locked cargo-fuzz 2>/dev/null || true
	cd fuzz && cargo +nightly fuzz run parse -- -max_total_time=$${FUZZ_SECONDS:-60}

clean:
	cargo clean

-include vm-tests/vm.mk
