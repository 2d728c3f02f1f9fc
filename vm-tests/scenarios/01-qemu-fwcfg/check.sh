# (a) fw_cfg: GPT with one Linux partition "root", ext4 labelled root, and the files.
expect_eq "$(part_count)" 1 "partition count"
expect_eq "$(part_get 1 name)" root "partition 1 name"
expect_eq "$(part_get 1 type)" 0FC63DAF-8483-4772-8E79-3D69D8477DE4 "partition 1 type"
expect_eq "$(part_get 1 size)" $((768 * 2048)) "partition 1 size (sectors)"
expect_eq "$(fs_get 1 TYPE)" ext4 "filesystem type"
expect_eq "$(fs_get 1 LABEL)" root "filesystem label"
r=$(mount_part 1)
expect_content "$r/etc/hostname" vm-qemu
expect_mode "$r/etc/hostname" 644
expect_content "$r/etc/agent-test/secret" secret
expect_mode "$r/etc/agent-test/secret" 600
[[ -d $r/var/lib/agent-test ]] || fail "directory /var/lib/agent-test missing"
expect_mode "$r/var/lib/agent-test" 700
expect_eq "$(readlink "$r/etc/localtime")" /usr/share/zoneinfo/UTC "link target"
expect_file "$r/etc/systemd/system/hello.service"
expect_content "$r/etc/systemd/system/hello.service.d/10-env.conf" $'[Service]\nEnvironment=A=1'
grep -qx 'enable hello.service' "$r/etc/systemd/system-preset/20-ignition.preset" ||
    fail "hello.service not enabled in Ignition's preset file"
grep -qx 'enable hello.service' "$r/etc/systemd/system-preset/20-agent.preset" ||
    fail "hello.service not enabled in the earlier layout's preset file"
expect_eq "$(readlink "$r/etc/systemd/system/getty@tty1.service")" /dev/null "mask"
expect_file "$r/etc/.ignition-result.json"
expect_eq "$(readlink "$r/etc/.agent-result.json")" .ignition-result.json "earlier result name"
expect_console "AGENT-TEST-DONE complete=yes"
# No network without need: the offline pass rendered the config.
if grep -aq "Started.*systemd-networkd" "$CONSOLE"; then fail "the network was started"; fi
