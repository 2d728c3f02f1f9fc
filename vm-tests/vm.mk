# VM test and initramfs targets (included by the top-level Makefile, which has `install`).
#
#   make initramfs    test initramfs with our module for KVER (default: Debian's cloud kernel,
#                     unpacked by vm-tests/setup.sh) -> $(VM_CACHE)/initrd-agent.img
#   make vm-test      every VM scenario (installs QEMU, dracut and the kernel itself)
#   make os-image     a bootable OS image with the agent's first boot (PLATFORM, default metal)
#                     -> $(VM_CACHE)/os-image/os.img{,.zst,.xz}

VM_CACHE ?= $(CURDIR)/target/vm

# The static binary (`static`, STATIC_BIN) comes from the top-level Makefile.

.PHONY: initramfs
initramfs: static
	AGENT_BIN=$(CURDIR)/$(STATIC_BIN) VM_CACHE=$(VM_CACHE) vm-tests/initramfs.sh $(KVER)

.PHONY: os-image
os-image: static
	AGENT_BIN=$(CURDIR)/$(STATIC_BIN) VM_CACHE=$(VM_CACHE) vm-tests/os-image.sh \
		--platform $(or $(PLATFORM),metal) $(VM_CACHE)/os-image

.PHONY: vm-test
vm-test: static
	AGENT_BIN=$(CURDIR)/$(STATIC_BIN) VM_CACHE=$(VM_CACHE) vm-tests/run.sh $(SCENARIOS)

# The boot machinery alone (generator, units, emergency path), with a shell stand-in for the
# agent: independent of the state of the real stages.
.PHONY: vm-selftest
vm-selftest:
	AGENT_BIN=$(CURDIR)/vm-tests/selftest/agent-stub VM_SELFTEST=1 VM_SKIP_REFERENCE=1 \
		VM_CACHE=$(VM_CACHE) vm-tests/run.sh $(SCENARIOS)
