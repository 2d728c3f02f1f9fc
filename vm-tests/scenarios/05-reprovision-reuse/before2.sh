#!/bin/bash
# Between the boots: remember the filesystems' UUIDs, keep data on "data", set the stamp.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
fs_get 1 UUID >"$WORK/root.uuid"
fs_get 2 UUID >"$WORK/data.uuid"
for n in 1 2; do
    start=$(part_get $n start) size=$(part_get $n size)
    dev=$(losetup -f --show -o $((start * 512)) --sizelimit $((size * 512)) "$DISK")
    echo "loop $dev" >>"$_lib_reg"
    mp=$(mktemp -d "$WORK/rw.XXXXXX")
    mount "$dev" "$mp"
    if [[ $n == 1 ]]; then
        mkdir -p "$mp/boot" && : >"$mp/boot/agent.firstboot"
    else
        echo "precious" >"$mp/keep.txt"
    fi
    umount "$mp"
    rmdir "$mp"
done
