# Boot 1 bound the volume to tang (LUKS2 header with a clevis token, crypttab "none" + _netdev,
# no key file persisted); boot 2 unlocked it through tang and reused its ext4 and data.
expect_eq "$(blkid -p -c /dev/null -o value -s TYPE "$DISK2")" crypto_LUKS "vdb type"
expect_eq "$(blkid -p -c /dev/null -o value -s LABEL "$DISK2")" tvol "vdb label"
u=$(blkid -p -c /dev/null -o value -s UUID "$DISK2")
cryptsetup luksDump --dump-json-metadata "$DISK2" | tr -d ' \n' | grep -q '"type":"clevis"' ||
    fail "no clevis token in the header"
grep -aq "binding /dev/vdb to clevis pin sss" "$WORK/console1.log" || fail "boot 1 did not bind"
expect_console "luks tangvol on /dev/vdb: reuse (open with clevis)"
expect_console "reusing the existing LUKS volume on /dev/vdb as tangvol"
expect_console "reusing the existing ext4 filesystem on /dev/mapper/tangvol"
line=$(grep -a 'AGENT-TEST-CRYPTTAB tangvol ' "$CONSOLE" | tail -n1) || fail "no hook line for tangvol"
[[ $line == *files=*bound,* ]] || fail "tangvol: $line"
r=$(mount_part 1)
grep -qx "tangvol UUID=$u none luks,_netdev" "$r/etc/crypttab" || fail "crypttab: $(cat "$r/etc/crypttab")"
[[ ! -e $r/etc/luks/tangvol ]] || fail "a key file was persisted for a clevis-bound volume"
