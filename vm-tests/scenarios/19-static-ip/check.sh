# Static networking (ip=, ifname=): provisioned from the server over a link configured by the
# kernel command line, with no DHCP lease.
expect_eq "$(part_count)" 1 "partition count"
r=$(mount_part 1)
expect_content "$r/etc/hostname" vm-static
expect_console "AGENT-TEST-DONE complete=yes"
expect_console "needs the network"
line=$(grep -a "AGENT-TEST-NET " "$CONSOLE" | tail -n1)
[[ -n $line ]] || fail "console lacks AGENT-TEST-NET"
[[ $line == *"links="*"lan0,"* ]] || fail "the link was not renamed lan0: $line"
[[ $line == *"files="*"90-lan0.link,90-lan0.network,99-agent-dhcp.network,"* ]] ||
    fail "agent network-generate's files missing: $line"
[[ $line == *"leases= "* ]] || fail "a DHCP lease was taken: $line"
[[ $line == *"addrs="*"10.0.2.77,"* ]] || fail "the static address is not on the link: $line"
