#!/bin/bash
# The seed: vfat labelled cidata with user-data (the Ignition config) and meta-data.
set -euo pipefail
mkfs.vfat -n cidata "$DISK2" >/dev/null 2>&1
printf 'instance-id: vm-proxmoxve\nlocal-hostname: vm-proxmoxve\n' >"$WORK/meta-data"
MTOOLS_SKIP_CHECK=1 mcopy -i "$DISK2" "$SCENARIO/user-data.ign" ::user-data
MTOOLS_SKIP_CHECK=1 mcopy -i "$DISK2" "$WORK/meta-data" ::meta-data
blkid -p -c /dev/null -o value -s LABEL "$DISK2" | grep -qx cidata
sha256sum "$DISK2" | cut -d' ' -f1 >"$WORK/seed.sum"
