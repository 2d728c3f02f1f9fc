# The disks stage failed, the emergency target printed its log, the disk is untouched.
expect_console "AGENT-FAILED: agent-disks.service failed"
expect_console "rendered config written"
if grep -aq "AGENT-TEST-DONE complete=yes" "$CONSOLE"; then fail "provisioning completed"; fi
expect_eq "$(sha256sum "$DISK" | cut -d' ' -f1)" "$SUM_BEFORE" "disk image checksum"
r=$(mount_part 1)
expect_content "$r/old.txt" "old data"
[[ ! -e $r/etc/should-not-exist ]] || fail "files stage ran"
