#!/bin/bash
# Builds the OS image the machines install (vm-tests/os-image.sh) as the boot asset os.img.zst,
# and its hash for the boot profile (@OS_HASH@).
set -euo pipefail
top=$(cd "$(dirname "$0")/../../.." && pwd)
"$top/vm-tests/os-image.sh" --platform metal \
    --append "rd.emergency=poweroff rd.shell=0 printk.devkmsg=on" "$WORK/os"
mkdir -p "$WORK/assets"
mv "$WORK/os/os.img.zst" "$WORK/assets/os.img.zst"
[[ ${VM_KEEP:-} == 1 ]] || rm -f "$WORK/os/os.img" "$WORK/os/os.img.xz"
echo "OS_HASH=sha256-$(sha256sum <"$WORK/assets/os.img.zst" | cut -d' ' -f1)" >"$WORK/serve.env"
