# agent: build, test, demo, benchmarks.
#
#   make            static x86_64 binary: target/x86_64-unknown-linux-gnu/release/agent
#   make demo       install what the demo needs, build, run the product on example configs
#   make test       install test dependencies, run every test (as root)
#   make test-pure  the tests any user can run (plain `cargo test`)
#   make test-root  only the tests that need root
#   make bench      run the benchmarks (ratios against references measured in the same run)
#   make install    binary, dracut module, units, sysusers/tmpfiles entries, man pages,
#                   completions into DESTDIR (PREFIX=/usr); docs/install.md
#   make deb        Debian package: target/deb/agent_VERSION_amd64.deb
#   make image      OCI image of the server (no container daemon): target/oci

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
VERSION     := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

.PHONY: docs man completions install deb image deny deny-advisories all static bench-deps static-initramfs sizes check-static check-no-test-hooks deps demo-deps test-deps demo test test-pure test-root corpus-present lint bench bench-config bench-butane bench-rollout bench-serve fuzz clean

all: static

static:
	RUSTFLAGS='$(STATIC_RUSTFLAGS)' SELINUX_STATIC=1 cargo build --release --locked --target $(TARGET)
	@$(STATIC_BIN) --version >/dev/null || { echo "$(STATIC_BIN) does not run" >&2; exit 1; }

# The initramfs build: the same static binary without the config server (`agent serve`,
# `token`, `pointer`), in its own target directory.
INITRAMFS_BIN := target/initramfs/$(TARGET)/release/agent
static-initramfs:
	RUSTFLAGS='$(STATIC_RUSTFLAGS)' SELINUX_STATIC=1 CARGO_TARGET_DIR=target/initramfs \
	  cargo build --release --locked --target $(TARGET) --no-default-features
	@$(INITRAMFS_BIN) --version >/dev/null || { echo "$(INITRAMFS_BIN) does not run" >&2; exit 1; }

# Sizes of the default binary (every subcommand) and of the initramfs build (no server).
sizes: static static-initramfs
	@full=$$(stat -c %s $(STATIC_BIN)); small=$$(stat -c %s $(INITRAMFS_BIN)); \
	  echo "default build (with serve): $$full bytes"; \
	  echo "initramfs build (no serve): $$small bytes ($$(( (full - small) * 100 / full ))% smaller)"

# Fails unless the binary is fully static (no dynamic section, ldd agrees).
check-static: static
	@file $(STATIC_BIN)
	@file $(STATIC_BIN) | grep -q 'statically linked'
	@! readelf -d $(STATIC_BIN) | grep -q 'Dynamic section'
	@ldd $(STATIC_BIN) 2>&1 | grep -qE 'not a dynamic executable|statically linked'
	@echo "static: OK, $$(stat -c %s $(STATIC_BIN)) bytes stripped"

# The shipped binary has no test hooks (cargo feature test-hooks: failpoints, the serve fake
# clock, hidden --test-* flags, the test-dummy platform) and reads none of the environment
# variables that once pointed it at test doubles: fails if any of their names is in it. The
# first line checks that `strings` sees the binary's text at all (a name it must contain).
TEST_HOOK_STRINGS := AGENT_FAILPOINTS|AGENT_SERVE_TEST_CLOCK|AGENT_QEMU_FW_CFG|AGENT_KERNEL_CMDLINE|AGENT_AWS_IMDS_URL|AGENT_S3_ENDPOINT|AGENT_GS_ENDPOINT|AGENT_DEVICE_TIMEOUT_MS|test-kernel-cmdline-file|test-qemu-fw-cfg-dir|test-aws-imds-url|test-gs-endpoint|test-dummy
check-no-test-hooks: static
	@strings $(STATIC_BIN) | grep -q 'agent.config.url' || { echo "strings sees nothing in $(STATIC_BIN)" >&2; exit 1; }
	@if strings $(STATIC_BIN) | grep -E '$(TEST_HOOK_STRINGS)'; then \
	  echo "$(STATIC_BIN) contains test hooks (above): built with feature test-hooks?" >&2; exit 1; fi
	@echo "no test hooks: OK"

# Man pages and bash/zsh/fish completions, generated from the CLI definition by the binary
# itself (`agent generate-docs`, hidden): target/docs/man/*.1, target/docs/completions/.
DOCS_DIR := target/docs
docs man completions: static
	$(STATIC_BIN) generate-docs $(DOCS_DIR)

# Where `make install` puts things; the defaults suit PREFIX=/usr (the dracut module and the
# units name /usr/bin/agent; other prefixes get units rewritten to $(BINDIR)/agent).
BINDIR          ?= $(PREFIX)/bin
SYSCONFDIR      ?= /etc
DATADIR         ?= $(PREFIX)/share
MANDIR          ?= $(DATADIR)/man
DRACUT_MODDIR   ?= $(PREFIX)/lib/dracut/modules.d/30agent
SYSTEMD_UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR     ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR     ?= $(PREFIX)/lib/tmpfiles.d
BASH_COMPDIR    ?= $(DATADIR)/bash-completion/completions
ZSH_COMPDIR     ?= $(DATADIR)/zsh/site-functions
FISH_COMPDIR    ?= $(DATADIR)/fish/vendor_completions.d

install: static docs
	install -D -m 0755 $(STATIC_BIN) $(DESTDIR)$(BINDIR)/agent
	dracut/stage-module.sh $(DESTDIR)$(DRACUT_MODDIR)
	install -d -m 0755 $(DESTDIR)$(SYSTEMD_UNITDIR)
	for u in agent-serve.service agent-delete-config.service; do \
	  sed 's|/usr/bin/agent|$(BINDIR)/agent|g' systemd/$$u > $(DESTDIR)$(SYSTEMD_UNITDIR)/$$u && \
	  chmod 0644 $(DESTDIR)$(SYSTEMD_UNITDIR)/$$u || exit 1; done
	install -D -m 0644 systemd/agent-serve.sysusers $(DESTDIR)$(SYSUSERSDIR)/agent-serve.conf
	install -D -m 0644 systemd/agent-serve.tmpfiles $(DESTDIR)$(TMPFILESDIR)/agent-serve.conf
	install -D -m 0644 packaging/agent-serve.default $(DESTDIR)$(SYSCONFDIR)/default/agent-serve
	install -d -m 0755 $(DESTDIR)$(MANDIR)/man1
	install -m 0644 $(DOCS_DIR)/man/*.1 $(DESTDIR)$(MANDIR)/man1/
	install -D -m 0644 $(DOCS_DIR)/completions/agent.bash $(DESTDIR)$(BASH_COMPDIR)/agent
	install -D -m 0644 $(DOCS_DIR)/completions/_agent $(DESTDIR)$(ZSH_COMPDIR)/_agent
	install -D -m 0644 $(DOCS_DIR)/completions/agent.fish $(DESTDIR)$(FISH_COMPDIR)/agent.fish

# The Debian package: `make install` into a staging tree (units under /lib, where Debian 12
# keeps them), then packaging/deb/build.sh. DEB_MAINTAINER names who built it.
DEB_ROOT       := target/deb/root
DEB_MAINTAINER ?= $(shell git log -1 --format='%an <%ae>' 2>/dev/null || echo 'agent maintainers <agent@invalid>')
deb: static docs
	rm -rf $(DEB_ROOT)
	$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/$(DEB_ROOT) PREFIX=/usr \
	  SYSTEMD_UNITDIR=/lib/systemd/system ZSH_COMPDIR=/usr/share/zsh/vendor-completions
	packaging/deb/build.sh $(DEB_ROOT) target/deb $(VERSION) '$(DEB_MAINTAINER)'

# The server's OCI image, as an OCI layout (target/oci, tag $(VERSION)), written by a script:
# no container daemon, the same digest for the same binary. `skopeo copy oci:target/oci:TAG
# docker://REGISTRY/agent:TAG` pushes it; docs/install.md.
OCI_DIR := target/oci
image: static
	SOURCE_DATE_EPOCH=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null)} \
	  python3 packaging/oci-image.py --binary $(STATIC_BIN) --out $(OCI_DIR) --version $(VERSION) \
	  --revision "$$(git rev-parse HEAD 2>/dev/null || echo unknown)"

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

# The package dev-depends on itself with feature test-hooks: `cargo test` alone builds them.
# Tests that need root (loop devices, mount, chown to other users, device nodes, SELinux
# labels, tftpd's chroot, an open-files hard limit above the usual one) are marked
# #[ignore = "needs root: make test-root"]: plain `cargo test` skips them, --include-ignored
# (test) and --ignored (test-root) run them, and run as non-root they fail, never skip.
#
# The checks against the shared corpus (../shared/corpus, beside the repository and not part
# of it: tests/config/real_world_corpus.rs, tests/butane/corpus.rs) are #[ignore]d with a reason
# too, so plain `cargo test` lists them as ignored; run without the corpus they fail, never
# pass. Without it `make test` and `make test-root` leave them out by name (cargo counts them
# as filtered out) and say so; with CI set they fail instead.
CORPUS_TESTS := shared_corpus_has_no_failures butane_corpus_translations
CORPUS_SKIP  := $(if $(wildcard ../shared/corpus),,$(foreach t,$(CORPUS_TESTS),--skip $(t)))

corpus-present:
	@if [ ! -d ../shared/corpus ]; then \
	  if [ -n "$$CI" ]; then \
	    echo "../shared/corpus is missing: the corpus checks ($(CORPUS_TESTS)) cannot run, and CI is set" >&2; exit 1; \
	  fi; \
	  echo "note: ../shared/corpus is missing: the corpus checks ($(CORPUS_TESTS)) are left out, not passed" >&2; \
	fi

test: test-deps corpus-present
	cargo test --locked --workspace -- --include-ignored --test-threads=4 $(CORPUS_SKIP)

test-pure:
	cargo test --locked --workspace

test-root: test-deps corpus-present
	cargo test --locked --workspace -- --ignored --test-threads=4 $(CORPUS_SKIP)

# Clippy twice: with every target (tests turn the feature test-hooks on) and for the shipped
# library and binary alone (without it).
# The layer rule inside the agent crate (the crates below it are kept apart by Cargo):
# .ci/layers.py fails on an import that runs up a layer; its self-test shows it failing on
# a deliberate one. .ci/fn_length.py fails on a function of the config server's crates
# (crates/serve, crates/http) longer than 120 lines.
lint:
	python3 .ci/layers.py --self-test
	python3 .ci/layers.py
	python3 .ci/fn_length.py --self-test
	python3 .ci/fn_length.py
	cargo fmt --all -- --check
	cargo clippy --locked --workspace --all-targets -- -D warnings
	cargo clippy --locked --workspace -- -D warnings
	cargo clippy --locked --workspace --no-default-features -- -D warnings

# What the benchmarks call (wrk, nginx, curl, time, mkfs tools), installed as `make test` does.
bench-deps: deps
	.ci/install-packages bench

bench: bench-deps bench-config bench-butane bench-rollout
	@for b in benches/*.sh; do [ -x "$$b" ] || continue; echo "== $$b"; "$$b" || exit 1; done

bench-config:
	cargo bench --locked --bench config

bench-butane:
	cargo bench --locked --bench butane

bench-rollout:
	cargo bench --locked --bench rollout

bench-serve: bench-deps
	benches/serve.sh

# Every fuzz target for FUZZ_SECONDS each (default 180), seeded from the test inputs
# (fuzz/seed.sh); prints each target's run count.
FUZZ_TARGETS := parse http_head accept data_url tftp_packet butane
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
CARGO_DENY_VERSION := 0.20.2
deny:
	command -v cargo-deny >/dev/null || cargo install --locked --version $(CARGO_DENY_VERSION) cargo-deny
	cargo fetch --locked
	cargo deny --offline check licenses bans sources

# The RustSec advisories check needs the advisory database (network).
deny-advisories:
	command -v cargo-deny >/dev/null || cargo install --locked --version $(CARGO_DENY_VERSION) cargo-deny
	cargo deny check advisories

clean:
	cargo clean

-include vm-tests/vm.mk
