#!/bin/bash
# Assembles the dracut module directory: dracut/30agent/* plus the initramfs units from
# systemd/initrd/ under units/. Used by `make install` and by the VM tests.
#   dracut/stage-module.sh DEST_DIR
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
dest=$1
rm -rf "$dest"
mkdir -p "$dest/units"
install -m 0755 "$src/30agent/module-setup.sh" "$src/30agent/agent-generator" \
    "$src/30agent/agent-stage" "$src/30agent/agent-network-up" \
    "$src/30agent/agent-firstboot-done" "$src/30agent/agent-emergency.sh" \
    "$src/30agent/agent-setup-user" "$dest/"
install -m 0644 "$src/30agent/99-agent-dhcp.network" "$src/30agent/README.md" "$dest/"
install -m 0644 "$src/../systemd/initrd/"*.service "$src/../systemd/initrd/"*.target "$dest/units/"
