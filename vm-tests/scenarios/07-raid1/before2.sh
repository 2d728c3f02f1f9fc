#!/bin/bash
# Between the boots: both members carry the superblock of one RAID1 "data" of 2 devices, the
# array's ext4 (read at the data offset: the host kernel has no md) holds the file; remember the
# members' checksums for boot 2.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
u2=$(mdadm --examine --export "$DISK2" | sed -n 's/^MD_UUID=//p')
u3=$(mdadm --examine --export "$DISK3" | sed -n 's/^MD_UUID=//p')
[[ -n $u2 && $u2 == "$u3" ]] || fail "members belong to different arrays: '$u2' '$u3'"
mdadm --examine --export "$DISK2" | grep -qx 'MD_LEVEL=raid1' || fail "not raid1"
mdadm --examine --export "$DISK2" | grep -qx 'MD_DEVICES=2' || fail "not 2 devices"
mdadm --examine --export "$DISK2" | grep -qx 'MD_NAME=any:data' || fail "not named any:data"
off=$(mdadm --examine "$DISK2" | sed -n 's/^ *Data Offset : \([0-9]*\) sectors.*/\1/p')
[[ -n $off ]] || fail "no data offset"
dev=$(losetup -f --show -r -o $((off * 512)) "$DISK2")
echo "loop $dev" >>"$_lib_reg"
expect_eq "$(blkid -p -c /dev/null -o value -s TYPE "$dev")" ext4 "filesystem on the array"
expect_eq "$(blkid -p -c /dev/null -o value -s LABEL "$dev")" data "label on the array"
mp=$(mktemp -d "$WORK/mnt.XXXXXX")
mount -o ro,noload "$dev" "$mp"
echo "mount $mp" >>"$_lib_reg"
expect_content "$mp/hello" "on the array"
sha256sum "$DISK2" "$DISK3" | cut -d' ' -f1 >"$WORK/members.sum"
echo "boot 1 OK: raid1 any:data $u2, ext4 at offset $off with the file"
