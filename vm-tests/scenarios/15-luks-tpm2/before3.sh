#!/bin/bash
# After boot 2 (same TPM): tpmvol was reused through the TPM (same header, its ext4 kept the
# boot-1 file and got the new one); tpmgen was opened from the root's crypttab with clevis and
# holds its boot-1 file. Then the TPM is reset: boot 3 gets a new swtpm state directory.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
CONSOLE=$WORK/console2.log
expect_eq "$(blkid -p -c /dev/null -o value -s UUID "$DISK2")" "$(cat "$WORK/tpmvol.uuid")" "vdb LUKS UUID"
expect_eq "$(blkid -p -c /dev/null -o value -s UUID "$DISK3")" "$(cat "$WORK/tpmgen.uuid")" "vdc LUKS UUID"
expect_console "luks tpmvol on /dev/vdb: reuse (open with clevis), clevis sss (tpm2)"
expect_console "reusing the existing LUKS volume on /dev/vdb as tpmvol"
expect_console "reusing the existing ext4 filesystem on /dev/mapper/tpmvol"
line=$(grep -a 'AGENT-TEST-CRYPTTAB tpmvol ' "$CONSOLE" | tail -n1) || fail "no hook line for tpmvol"
[[ $line == *files=*one,second,* ]] || fail "tpmvol: $line"
line=$(grep -a 'AGENT-TEST-CRYPTTAB tpmgen ' "$CONSOLE" | tail -n1) || fail "no hook line for tpmgen"
[[ $line == *opened=clevis* && $line == *files=*two,* ]] || fail "tpmgen: $line"
mv "$WORK/tpm" "$WORK/tpm.A"
echo "boot 2 OK; TPM state A moved away"
