# Boot 2: "ciphered" reused (same LUKS header, its ext4 kept the boot-1 file and got the new one);
# "gen", no longer in the config, opened by the test hook from the root's crypttab and key file.
expect_eq "$(blkid -p -c /dev/null -o value -s UUID "$DISK2")" "$(cat "$WORK/ciphered.uuid")" "vdb LUKS UUID"
expect_eq "$(blkid -p -c /dev/null -o value -s UUID "$DISK3")" "$(cat "$WORK/gen.uuid")" "vdc LUKS UUID"
expect_console "reusing the existing LUKS volume on /dev/vdb as ciphered"
expect_console "reusing the existing ext4 filesystem on /dev/mapper/ciphered"
line=$(grep -a 'AGENT-TEST-CRYPTTAB ciphered ' "$CONSOLE" | tail -n1) || fail "no crypttab line for ciphered"
[[ $line == *files=*one,*three,* ]] || fail "ciphered: $line"
line=$(grep -a 'AGENT-TEST-CRYPTTAB gen ' "$CONSOLE" | tail -n1) || fail "no crypttab line for gen"
[[ $line == *opened=crypttab* && $line == *files=*two,* ]] || fail "gen: $line"
r=$(mount_part 1)
grep -q "^gen UUID=$(cat "$WORK/gen.uuid") " "$r/etc/crypttab" || fail "gen's crypttab line lost in boot 2"
