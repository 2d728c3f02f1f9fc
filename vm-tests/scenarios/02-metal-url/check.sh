# (b) metal + agent.config.url: the whole disk is one root partition; files from the server.
expect_eq "$(part_count)" 1 "partition count"
expect_eq "$(part_get 1 name)" root "partition 1 name"
expect_eq "$(fs_get 1 TYPE)" ext4 "filesystem type"
expect_eq "$(fs_get 1 LABEL)" root "filesystem label"
# sizeMiB 0 = to the end of the disk (GPT backup header: 33 sectors; alignment: 1 MiB).
size=$(part_get 1 size)
(( size > (DISK_MIB - 2) * 2048 )) || fail "partition 1 does not fill the disk ($size sectors)"
r=$(mount_part 1)
expect_content "$r/etc/hostname" vm-metal
expect_content "$r/etc/agent-test/pool" worker
expect_file "$r/etc/systemd/system/kubelet.service"
# The served config carries the node agent's annotations file (MachineConfigServer behaviour).
ls "$r/etc" >/dev/null
expect_console "AGENT-TEST-DONE complete=yes"
# The network came up only because the config needed it.
expect_console "needs the network"
