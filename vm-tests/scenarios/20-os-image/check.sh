# The OS image from its own disk: boot 1 provisioned and came up, boot 2 came up without
# provisioning. The disk: the config's file in the root, the stamp gone from the boot partition.
c1=$WORK/console1.log c2=$WORK/console2.log
grep -aq 'os-image: booting with agent.firstboot' "$c1" ||
    fail "boot 1: GRUB did not add agent.firstboot (stamp file on the boot partition)"
grep -aq 'first-boot flag cleared (boot-partition)' "$c1" ||
    fail "boot 1: agent-firstboot-done did not remove the stamp from the boot partition"
grep -aq 'Agent: files' "$c1" || fail "boot 1: the files stage did not run"
up1=$(grep -a -m1 -o 'OS-IMAGE-UP boot_id=[^[:cntrl:]]*' "$c1" | tr -d '\r')
up2=$(grep -a -m1 -o 'OS-IMAGE-UP boot_id=[^[:cntrl:]]*' "$c2" | tr -d '\r')
grep -aq 'Welcome to .*agent test OS image' "$c1" || fail "boot 1: no switch to the image's root"
[[ $up1 == *kernel=$(. "$WORK/os/layout.env"; echo "$KERNEL_RELEASE")* ]] || fail "boot 1: $up1"
[[ $up1 == *agent_log=yes* ]] || fail "boot 1: the root has no /var/log/agent/agent.log: $up1"
grep -aq 'CONFIG-UNIT-RAN' "$c1" || fail "boot 1: the config's unit did not run in the booted root"
grep -aq 'OS-IMAGE-DONE agent-report=none' "$c1" || fail "boot 1: no OS-IMAGE-DONE (or a report unit without a report URL)"
# Boot 2: no first-boot flag, no stage, the OS up again (another boot id).
grep -a 'os-image: booting with' "$c2" | grep -q agent.firstboot &&
    fail "boot 2: GRUB still adds agent.firstboot"
grep -aq 'os-image: booting with' "$c2" || fail "boot 2: GRUB's line missing"
if grep -aqE 'Agent: |agent: ' "$c2"; then fail "boot 2: the agent ran: $(grep -aE -m1 'Agent: |agent: ' "$c2")"; fi
[[ -n $up2 ]] || fail "boot 2: no OS-IMAGE-UP"
[[ ${up1%% kernel=*} != "${up2%% kernel=*}" ]] || fail "boot 2 has boot 1's boot id"
grep -aq 'CONFIG-UNIT-RAN' "$c2" || fail "boot 2: the config's unit (enabled at first boot) did not run"
grep -aq 'OS-IMAGE-DONE agent-report=' "$c2" || fail "boot 2: no OS-IMAGE-DONE"
# The disk, read with debugfs through read-only loop devices at the partitions' offsets.
expect_eq "$(part_get 1 name)" BIOS-BOOT "partition 1 name"
expect_eq "$(fs_get 2 LABEL)" boot "partition 2 label"
expect_eq "$(fs_get 3 LABEL)" root "partition 3 label"
rootdev=$(part_loop 3)
bootdev=$(part_loop 2)
expect_eq "$(debugfs -c -R 'cat /etc/os-image-test/hello' "$rootdev" 2>/dev/null)" \
    "provisioned at first boot" "the config's file in the root"
debugfs -c -R 'stat /var/log/agent/agent.log' "$rootdev" 2>&1 | grep -q 'Type: regular' ||
    fail "no /var/log/agent/agent.log in the root"
debugfs -c -R 'ls /' "$bootdev" 2>/dev/null | grep -q 'agent.firstboot' &&
    fail "the stamp agent.firstboot is still on the boot partition"
debugfs -c -R 'cat /ignition/config.ign' "$bootdev" 2>/dev/null | grep -q os-image-hello ||
    fail "ignition/config.ign missing from the boot partition"
for n in 1 2; do
    u=$(grep -a -m1 -o 'OS-IMAGE-UP boot_id=[^[:cntrl:]]*' "$WORK/console$n.log" | sed 's/.*uptime_s=\([0-9.]*\).*/\1/')
    echo "boot $n: OS-IMAGE-UP at ${u}s after kernel start"
done
echo "build $(cat "$WORK/build_s") s; $(tr '\n' ';' <"$WORK/sizes")"
