# The disks stage failed, the emergency target printed its log, the disk is untouched.
expect_console "AGENT-FAILED: agent-disks.service failed"
expect_console "rendered config written"
if grep -aq "AGENT-TEST-DONE complete=yes" "$CONSOLE"; then fail "provisioning completed"; fi
# Failed for the right reason: the error names the filesystem mismatch.
sed -n '/AGENT-FAILED: agent-disks.service failed/,/AGENT-FAILED: end/p' "$CONSOLE" |
    grep -aiqE 'xfs|ext4|filesystem' || fail "the disks stage failed, but not over the filesystem"
expect_eq "$(sha256sum "$DISK" | cut -d' ' -f1)" "$SUM_BEFORE" "disk image checksum"
r=$(mount_part 1)
expect_content "$r/old.txt" "old data"
[[ ! -e $r/etc/should-not-exist ]] || fail "files stage ran"
