#!/bin/bash
# Builds the OS image, checks its compressed forms and checksums, writes it to $DISK and puts the
# config at ignition/config.ign on its boot partition, as `agent install` does.
set -euo pipefail
top=$(cd "$(dirname "$0")/../../.." && pwd)
s=$(date +%s.%N)
"$top/vm-tests/os-image.sh" --platform qemu \
    --append "rd.emergency=poweroff rd.shell=0 printk.devkmsg=on" "$WORK/os"
e=$(date +%s.%N)
awk "BEGIN { printf \"%.1f\n\", $e - $s }" >"$WORK/build_s"
cd "$WORK/os"
sha256sum --quiet -c SHA256SUMS
sha512sum --quiet -c SHA512SUMS
raw=$(sha256sum <os.img)
[[ $(zstd -dc os.img.zst | sha256sum) == "$raw" ]] || { echo "os.img.zst is not os.img" >&2; exit 1; }
[[ $(xz -dc os.img.xz | sha256sum) == "$raw" ]] || { echo "os.img.xz is not os.img" >&2; exit 1; }
stat -c '%n %s' os.img os.img.zst os.img.xz >"$WORK/sizes"
du -B1 os.img | awk '{print "os.img allocated", $1}' >>"$WORK/sizes"
cp --sparse=always os.img "$DISK"
[[ ${VM_KEEP:-} == 1 ]] || rm -f os.img os.img.zst os.img.xz
# The config on the partition labelled boot, written with debugfs into a copy of the partition
# (no loop device, no mount), then copied back.
source "$WORK/os/layout.env"
dd if="$DISK" of="$WORK/boot.fs" bs=512 skip="$BOOT_START" count="$BOOT_SIZE" status=none
debugfs -w -R "mkdir ignition" "$WORK/boot.fs"
cp "$SCENARIO/config.ign" "$WORK/config.ign.src"
debugfs -w -R "write $WORK/config.ign.src ignition/config.ign" "$WORK/boot.fs"
dd if="$WORK/boot.fs" of="$DISK" bs=512 seek="$BOOT_START" conv=notrunc status=none
rm -f "$WORK/boot.fs"
