# Boot 3 asked for raid0 over the raid1's members: refused, emergency, members untouched.
expect_console "AGENT-FAILED: agent-disks.service failed"
sed -n '/AGENT-FAILED: agent-disks.service failed/,/AGENT-FAILED: end/p' "$CONSOLE" |
    grep -aq 'does not match the config' || fail "the disks stage failed, but not over the array"
expect_eq "$(sha256sum "$DISK2" "$DISK3" | cut -d' ' -f1 | tr '\n' ' ')" \
    "$(tr '\n' ' ' <"$WORK/members.sum")" "members' checksums"
if grep -aq "AGENT-TEST-DONE complete=yes" "$CONSOLE"; then fail "provisioning completed"; fi
