#!/bin/bash
# Before boot N (2: after the creating boot, 3: after the reusing boot): both members carry the
# superblock of one RAID1 "data" of 2 devices, the array's ext4 (read at the data offset: the
# host kernel has no md) holds the files; boot 2 kept the array (same UUID) and its data. Before
# boot 3, remember the members' checksums.
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
echo "loop $dev $DISK2" >>"$_lib_reg"
expect_eq "$(blkid -p -c /dev/null -o value -s TYPE "$dev")" ext4 "filesystem on the array"
expect_eq "$(blkid -p -c /dev/null -o value -s LABEL "$dev")" data "label on the array"
mp=$(mktemp -d "$WORK/mnt.XXXXXX")
mount -o ro,noload "$dev" "$mp"
echo "mount $mp" >>"$_lib_reg"
expect_content "$mp/hello" "on the array"
fsuuid=$(blkid -p -c /dev/null -o value -s UUID "$dev")
if [[ ! -e $WORK/array.uuid ]]; then
    echo "$u2 $fsuuid" >"$WORK/array.uuid"
    echo "after boot 1: raid1 any:data $u2, ext4 $fsuuid at offset $off with the file"
else
    expect_eq "$u2 $fsuuid" "$(cat "$WORK/array.uuid")" "array and filesystem UUIDs after boot 2"
    expect_content "$mp/second" 2
    grep -aq "assembling the existing array /dev/md/data" "$WORK/console2.log" ||
        fail "boot 2 did not assemble the existing array"
    sha256sum "$DISK2" "$DISK3" | cut -d' ' -f1 >"$WORK/members.sum"
    echo "after boot 2: same array $u2 and ext4 $fsuuid, both files"
fi
