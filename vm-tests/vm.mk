# VM test, initramfs and install targets (included by the top-level Makefile).
#
#   make static       the fully static agent binary the initramfs needs
#   make install      binary, dracut module (with its units), agent-serve unit; DESTDIR, PREFIX
#   make initramfs    test initramfs with our module for KVER (default: Debian's cloud kernel,
#                     unpacked by vm-tests/setup.sh) -> $(VM_CACHE)/initrd-agent.img
#   make vm-test      every VM scenario (installs QEMU, dracut and the kernel itself)

PREFIX ?= /usr/local
DESTDIR ?=
VM_CACHE ?= $(CURDIR)/target/vm
STATIC_TARGET := x86_64-unknown-linux-gnu
STATIC_BIN := target/$(STATIC_TARGET)/release/agent
DRACUT_MODDIR ?= $(PREFIX)/lib/dracut/modules.d/30agent
SYSTEMD_UNITDIR ?= $(PREFIX)/lib/systemd/system

# Static glibc build (measured recipe):
# - crt-static needs an explicit --target, else proc-macro crates fail to build;
# - SELINUX_STATIC=1 makes selinux-sys link libselinux.a, but nothing links libpcre2-8 (which
#   libselinux needs): name the archive itself, -lpcre2-8 would pick the .so and fail;
# - GNU ld (-fuse-ld=bfd), not the rust-lld the toolchain picks by default: linked by lld, the
#   static binary dies before main (SIGSEGV in __libc_fatal called from __libc_start_main, even
#   for --version; the binary keeps a .rela.dyn of GLOB_DAT relocations that static glibc's
#   startup does not expect);
# - relocation-model=static: a classic static executable rather than static-pie.
STATIC_RUSTFLAGS := -C target-feature=+crt-static -C relocation-model=static \
	-C link-arg=-fuse-ld=bfd -C link-arg=-l:libpcre2-8.a
.PHONY: static
static:
	RUSTFLAGS='$(STATIC_RUSTFLAGS)' SELINUX_STATIC=1 cargo build --release --target $(STATIC_TARGET)
	@file -L $(STATIC_BIN) | grep -Eq 'statically linked|static-pie linked' || \
		{ echo "$(STATIC_BIN) is not statically linked" >&2; exit 1; }
	@$(STATIC_BIN) --version >/dev/null || { echo "$(STATIC_BIN) does not run" >&2; exit 1; }

.PHONY: install
install: static
	install -D -m 0755 $(STATIC_BIN) $(DESTDIR)$(PREFIX)/bin/agent
	dracut/stage-module.sh $(DESTDIR)$(DRACUT_MODDIR)
	@if [ -f systemd/agent-serve.service ]; then \
		install -D -m 0644 systemd/agent-serve.service \
			$(DESTDIR)$(SYSTEMD_UNITDIR)/agent-serve.service; fi

.PHONY: initramfs
initramfs: static
	AGENT_BIN=$(CURDIR)/$(STATIC_BIN) VM_CACHE=$(VM_CACHE) vm-tests/initramfs.sh $(KVER)

.PHONY: vm-test
vm-test: static
	AGENT_BIN=$(CURDIR)/$(STATIC_BIN) VM_CACHE=$(VM_CACHE) vm-tests/run.sh $(SCENARIOS)

# The boot machinery alone (generator, units, emergency path), with a shell stand-in for the
# agent: independent of the state of the real stages.
.PHONY: vm-selftest
vm-selftest:
	AGENT_BIN=$(CURDIR)/vm-tests/selftest/agent-stub VM_SELFTEST=1 VM_SKIP_REFERENCE=1 \
		VM_CACHE=$(VM_CACHE) vm-tests/run.sh $(SCENARIOS)
