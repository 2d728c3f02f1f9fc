#!/bin/bash
# After boot 1: both volumes are LUKS2 with a clevis token whose binding is sss over tpm2 (read
# from the host through a loop device), the root's crypttab opens them with "none" (clevis),
# and no key file was kept.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
CONSOLE=$WORK/console1.log
for img in "$DISK2" "$DISK3"; do
    expect_eq "$(blkid -p -c /dev/null -o value -s TYPE "$img")" crypto_LUKS "${img##*/} type"
    expect_eq "$(blkid -p -c /dev/null -o value -s VERSION "$img")" 2 "${img##*/} LUKS version"
    expect_clevis_pins "$img" sss tpm2
done
expect_eq "$(blkid -p -c /dev/null -o value -s LABEL "$DISK2")" tpmv "vdb LUKS label"
u2=$(blkid -p -c /dev/null -o value -s UUID "$DISK2")
u3=$(blkid -p -c /dev/null -o value -s UUID "$DISK3")
echo "$u2" >"$WORK/tpmvol.uuid"
echo "$u3" >"$WORK/tpmgen.uuid"
expect_console "luks tpmvol on /dev/vdb: create LUKS2 (generated key), clevis sss (tpm2)"
expect_console "binding /dev/vdb to clevis pin sss"
expect_console "binding /dev/vdc to clevis pin sss"
r=$(mount_part 1)
grep -qx "tpmvol UUID=$u2 none luks" "$r/etc/crypttab" || fail "crypttab: $(cat "$r/etc/crypttab")"
grep -qx "tpmgen UUID=$u3 none luks" "$r/etc/crypttab" || fail "crypttab: $(cat "$r/etc/crypttab")"
[[ ! -e $r/etc/luks/tpmvol && ! -e $r/etc/luks/tpmgen ]] ||
    fail "a key file was persisted for a TPM-bound volume"
echo "boot 1 OK: $(cat "$r/etc/crypttab")"
