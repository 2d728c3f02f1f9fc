r=$(mount_part 1)
expect_content "$r/etc/agent-stub" "platform=metal"
grep -q over-the-network "$r/etc/agent-stub-config" || fail "config not fetched over the network"
expect_console "needs the network"
expect_console "AGENT-TEST-DONE complete=yes"
