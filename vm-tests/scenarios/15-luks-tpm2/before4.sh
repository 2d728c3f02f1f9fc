#!/bin/bash
# After boot 3 (TPM state B): tpmvol with wipeVolume true was recreated (a new header, bound to
# B, a new ext4 with only the boot-3 file); tpmgen, bound to A, did not open. Then the TPM is
# reset again (state C) and the images' digests are kept for the last check.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
CONSOLE=$WORK/console3.log
expect_console "luks tpmvol on /dev/vdb: wipe crypto_LUKS and create LUKS2 (generated key), clevis sss (tpm2)"
expect_console "binding /dev/vdb to clevis pin sss"
u2=$(blkid -p -c /dev/null -o value -s UUID "$DISK2")
[[ $u2 != "$(cat "$WORK/tpmvol.uuid")" ]] || fail "vdb was not recreated (same LUKS UUID $u2)"
echo "$u2" >"$WORK/tpmvol.uuid"
expect_clevis_pins "$DISK2" sss tpm2
expect_eq "$(blkid -p -c /dev/null -o value -s UUID "$DISK3")" "$(cat "$WORK/tpmgen.uuid")" "vdc LUKS UUID"
line=$(grep -a 'AGENT-TEST-CRYPTTAB tpmvol ' "$CONSOLE" | tail -n1) || fail "no hook line for tpmvol"
[[ $line == *files=*third,* && $line != *one,* ]] || fail "tpmvol (the old data must be gone): $line"
line=$(grep -a 'AGENT-TEST-CRYPTTAB tpmgen ' "$CONSOLE" | tail -n1) || fail "no hook line for tpmgen"
[[ $line == *opened=failed* ]] || fail "tpmgen opened with another TPM: $line"
r=$(mount_part 1)
grep -qx "tpmvol UUID=$u2 none luks" "$r/etc/crypttab" || fail "crypttab: $(cat "$r/etc/crypttab")"
mv "$WORK/tpm" "$WORK/tpm.B"
sha256sum "$DISK2" "$DISK3" >"$WORK/before4.sha256"
echo "boot 3 OK; TPM state B moved away"
