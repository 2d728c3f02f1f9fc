expect_console "AGENT-FAILED: agent-disks.service failed"
expect_console "failing on purpose"
expect_eq "$(sha256sum "$DISK" | cut -d' ' -f1)" "$SUM_BEFORE" "disk image checksum"
