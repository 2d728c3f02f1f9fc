# Boot 1: firmware -> iPXE (DHCP bootfile) -> script -> kernel + initramfs over HTTP -> the stub.
c1=$WORK/console1.log
grep -aq 'iPXE' "$c1" || fail "console 1: no iPXE output (SeaBIOS serial console)"
grep -aq 'Filename: http://10.0.2.100:8080/boot.ipxe' "$c1" || fail "console 1: iPXE got no bootfile by DHCP"
# (iPXE wraps its lines at 80 columns: join them.)
tr -d '\r\n' <"$c1" | grep -aq 'AGENT-IPXE-SELFTEST mac=52-54-00-29-00-aa uuid=29000000-0000-4000-8000-0000000000aa serial=SELFTEST-NET' ||
    fail "console 1: the script's line with the machine's MAC and UUID is missing"
for f in boot.ipxe boot/assets/vmlinuz boot/assets/initramfs.img pools/worker.ign; do
    grep -q "\"GET /$f HTTP/1.[01]\" 200" "$WORK/server1.log" || fail "boot 1 did not fetch /$f"
done
grep -aq 'AGENT-TEST-DONE complete=yes' "$c1" || fail "console 1: provisioning did not complete"
# Boot 2: exit -> SeaBIOS tries the disk; nothing but the script fetched.
c2=$WORK/console2.log
grep -aq 'AGENT-IPXE-SELFTEST exit' "$c2" || fail "console 2: exit.ipxe did not run"
grep -aq 'Booting from Hard Disk' "$c2" || fail "console 2: the firmware did not go on to the disk"
expect_eq "$(grep -c '"GET ' "$WORK/server2.log")" 1 "requests in boot 2 (exit.ipxe only)"
r=$(mount_part 1)
expect_content "$r/etc/agent-stub" "platform=metal"
