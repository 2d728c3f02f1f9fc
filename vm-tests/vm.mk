# VM test, initramfs and install targets (included by the top-level Makefile).
#
#   make install      binary, dracut module (with its units), agent-serve and
#                     agent-delete-config units; DESTDIR, PREFIX
#   make initramfs    test initramfs with our module for KVER (default: Debian's cloud kernel,
#                     unpacked by vm-tests/setup.sh) -> $(VM_CACHE)/initrd-agent.img
#   make vm-test      every VM scenario (installs QEMU, dracut and the kernel itself)

PREFIX ?= /usr/local
DESTDIR ?=
VM_CACHE ?= $(CURDIR)/target/vm
DRACUT_MODDIR ?= $(PREFIX)/lib/dracut/modules.d/30agent
SYSTEMD_UNITDIR ?= $(PREFIX)/lib/systemd/system

# The static binary (`static`, STATIC_BIN) comes from the top-level Makefile.

.PHONY: install
install: static
	install -D -m 0755 $(STATIC_BIN) $(DESTDIR)$(PREFIX)/bin/agent
	dracut/stage-module.sh $(DESTDIR)$(DRACUT_MODDIR)
	@if [ -f systemd/agent-serve.service ]; then \
		install -D -m 0644 systemd/agent-serve.service \
			$(DESTDIR)$(SYSTEMD_UNITDIR)/agent-serve.service; fi
	install -D -m 0644 systemd/agent-delete-config.service \
		$(DESTDIR)$(SYSTEMD_UNITDIR)/agent-delete-config.service

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
