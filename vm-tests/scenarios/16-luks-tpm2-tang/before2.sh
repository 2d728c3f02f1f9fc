#!/bin/bash
# After boot 1: bothvol is LUKS2 with a clevis token binding sss, threshold 2, over tang and
# tpm2 (read on the host through a loop device); crypttab has "none" and _netdev, no key file.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
CONSOLE=$WORK/console1.log
expect_eq "$(blkid -p -c /dev/null -o value -s TYPE "$DISK2")" crypto_LUKS "vdb type"
expect_eq "$(blkid -p -c /dev/null -o value -s LABEL "$DISK2")" bvol "vdb label"
list=$(expect_clevis_pins "$DISK2" sss tang tpm2)
grep -q '"t":2' <<<"$list" || fail "threshold is not 2: $list"
u=$(blkid -p -c /dev/null -o value -s UUID "$DISK2")
echo "$u" >"$WORK/bothvol.uuid"
expect_console "luks bothvol on /dev/vdb: create LUKS2 (generated key), clevis sss (tang http://10.0.2.101, tpm2; threshold 2)"
r=$(mount_part 1)
grep -qx "bothvol UUID=$u none luks,_netdev" "$r/etc/crypttab" || fail "crypttab: $(cat "$r/etc/crypttab")"
[[ ! -e $r/etc/luks/bothvol ]] || fail "a key file was persisted for a clevis-bound volume"
echo "boot 1 OK: $list"
