# The seed's user-data, found offline; no network; the seed untouched.
expect_console "proxmoxve: found the cloud-init drive /dev/vdb (vfat, label cidata)"
expect_console "fetched config from proxmoxve cloud-init drive /dev/vdb (vfat, label cidata), file user-data"
expect_console "AGENT-TEST-DONE complete=yes"
if grep -aq "Started.*systemd-networkd" "$CONSOLE"; then fail "the network was started"; fi
expect_eq "$(part_count)" 1 "partition count"
r=$(mount_part 1)
expect_content "$r/etc/hostname" vm-proxmoxve
expect_eq "$(sha256sum "$DISK2" | cut -d' ' -f1)" "$(cat "$WORK/seed.sum")" "seed disk checksum"
