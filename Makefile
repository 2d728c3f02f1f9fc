# Minimal top-level Makefile (the lead owns the real one): VM targets live in vm-tests/vm.mk.
.PHONY: all
all: static

include vm-tests/vm.mk
