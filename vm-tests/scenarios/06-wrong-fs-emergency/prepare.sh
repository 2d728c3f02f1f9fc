#!/bin/bash
# GPT with partition 1 "root" (512 MiB) holding an ext4 filesystem labelled root with a file.
set -euo pipefail
sgdisk --clear --new=1:2048:+512M --change-name=1:root --typecode=1:8300 "$DISK" >/dev/null
dev=$(losetup -f --show -o $((2048 * 512)) --sizelimit $((512 * 1024 * 1024)) "$DISK")
trap 'umount "$WORK/m" 2>/dev/null || true; losetup -d "$dev"' EXIT
mkfs.ext4 -q -L root "$dev"
mkdir -p "$WORK/m"
mount "$dev" "$WORK/m"
echo "old data" >"$WORK/m/old.txt"
umount "$WORK/m"
