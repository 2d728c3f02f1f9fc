#!/bin/bash
# Between the boots (the host kernel has no dm-crypt: headers and keys are checked with
# cryptsetup's --test-passphrase, which needs none): both volumes are LUKS2, the key file opens
# "ciphered", the root holds /etc/luks/{ciphered,gen} (0600, directory 0700) and a crypttab line
# per volume, and the persisted generated key opens "gen".
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
expect_eq "$(blkid -p -c /dev/null -o value -s TYPE "$DISK2")" crypto_LUKS "vdb type"
expect_eq "$(blkid -p -c /dev/null -o value -s VERSION "$DISK2")" 2 "vdb LUKS version"
expect_eq "$(blkid -p -c /dev/null -o value -s LABEL "$DISK2")" cvol "vdb LUKS label"
expect_eq "$(blkid -p -c /dev/null -o value -s TYPE "$DISK3")" crypto_LUKS "vdc type"
u2=$(blkid -p -c /dev/null -o value -s UUID "$DISK2")
u3=$(blkid -p -c /dev/null -o value -s UUID "$DISK3")
echo "$u2" >"$WORK/ciphered.uuid"
echo "$u3" >"$WORK/gen.uuid"
printf 's3cret-key' | cryptsetup open --test-passphrase --key-file=- "$DISK2" ||
    fail "the key file does not open vdb"
r=$(mount_part 1)
expect_mode "$r/etc/luks" 700
expect_mode "$r/etc/luks/ciphered" 600
expect_mode "$r/etc/luks/gen" 600
expect_content "$r/etc/luks/ciphered" s3cret-key
expect_eq "$(stat -c %s "$r/etc/luks/gen")" 128 "generated key size (64 random bytes, hex)"
cryptsetup open --test-passphrase --key-file "$r/etc/luks/gen" "$DISK3" ||
    fail "the persisted generated key does not open vdc"
grep -qx "ciphered UUID=$u2 /etc/luks/ciphered luks,discard" "$r/etc/crypttab" ||
    fail "crypttab line for ciphered: $(cat "$r/etc/crypttab")"
grep -qx "gen UUID=$u3 /etc/luks/gen luks" "$r/etc/crypttab" ||
    fail "crypttab line for gen: $(cat "$r/etc/crypttab")"
echo "boot 1 OK: $(cat "$r/etc/crypttab")"
