#!/bin/bash
# After boot 2: bothvol reused through tang and the TPM (same header, ext4 and data). Then the
# TPM is reset (a new swtpm state directory) and vdb's digest kept for the last check.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
CONSOLE=$WORK/console2.log
expect_eq "$(blkid -p -c /dev/null -o value -s UUID "$DISK2")" "$(cat "$WORK/bothvol.uuid")" "vdb LUKS UUID"
expect_console "luks bothvol on /dev/vdb: reuse (open with clevis)"
expect_console "reusing the existing ext4 filesystem on /dev/mapper/bothvol"
line=$(grep -a 'AGENT-TEST-CRYPTTAB bothvol ' "$CONSOLE" | tail -n1) || fail "no hook line for bothvol"
[[ $line == *files=both,* ]] || fail "bothvol: $line"
grep -q . "$WORK/tangd.log" || fail "tang was never asked"
mv "$WORK/tpm" "$WORK/tpm.A"
sha256sum "$DISK2" >"$WORK/before3.sha256"
echo "boot 2 OK; TPM state A moved away"
