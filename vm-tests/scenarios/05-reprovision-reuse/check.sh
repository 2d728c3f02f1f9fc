# Boot 2 reused both filesystems and kept the data; the user was added; the stamp is gone.
expect_eq "$(part_count)" 2 "partition count"
expect_eq "$(fs_get 1 UUID)" "$(cat "$WORK/root.uuid")" "root filesystem UUID (reused)"
expect_eq "$(fs_get 2 UUID)" "$(cat "$WORK/data.uuid")" "data filesystem UUID (reused)"
d=$(mount_part 2)
expect_content "$d/keep.txt" precious
r=$(mount_part 1)
expect_content "$r/etc/agent-test/first" 1
expect_content "$r/etc/agent-test/second" 2
grep -q '^core:x:1000:' "$r/etc/passwd" || fail "user core missing from /etc/passwd"
grep -q '^ops:x:1500:.*core' "$r/etc/group" || fail "core not in group ops"
grep -q 'AgentVmTestKey' "$r/home/core/.ssh/authorized_keys.d/ignition" || fail "SSH key missing"
[[ ! -e $r/boot/agent.firstboot ]] || fail "first-boot stamp not cleared"
expect_console "first-boot flag cleared"
