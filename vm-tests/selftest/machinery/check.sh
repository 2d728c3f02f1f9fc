expect_eq "$(part_get 1 name)" root "partition name"
expect_eq "$(fs_get 1 LABEL)" root "filesystem label"
r=$(mount_part 1)
expect_content "$r/etc/agent-stub" "platform=qemu"
expect_console "AGENT-TEST-DONE complete=yes"
expect_console "first-boot flag cleared"
# No network without need: the offline pass rendered the config.
if grep -aq "Started.*systemd-networkd" "$CONSOLE"; then fail "the network was started"; fi
