# (c) merge chain: parent (fw_cfg) <- child (/ignition, bearer token) <- grandchild (data:).
expect_eq "$(part_get 1 name)" root "partition 1 name"
expect_eq "$(fs_get 1 LABEL)" root "filesystem label"
r=$(mount_part 1)
expect_content "$r/etc/agent-test/parent" from-fwcfg
expect_content "$r/etc/agent-test/child" from-server
expect_content "$r/etc/agent-test/grandchild" from-data-url
expect_content "$r/etc/agent-test/level" child
expect_console "AGENT-TEST-DONE complete=yes"
