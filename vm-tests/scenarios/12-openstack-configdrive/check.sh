# Boot 1: the config drive's user_data, found offline; no network.
c1=$WORK/console1.log
grep -aq "openstack: found the config drive /dev/sr[0-9] (iso9660, label config-2)" "$c1" ||
    fail "boot 1: no config drive found on the console"
grep -aq "fetched config from openstack config drive /dev/sr[0-9] (iso9660, label config-2), file openstack/latest/user_data" "$c1" ||
    fail "boot 1: the config's source is not the config drive"
grep -aq "AGENT-TEST-DONE complete=yes" "$c1" || fail "boot 1 did not complete"
if grep -aq "Started.*systemd-networkd" "$c1"; then fail "boot 1 started the network"; fi
if grep -aq "needs the network" "$c1"; then fail "boot 1: the offline pass asked for the network"; fi
expect_eq "$(part_count)" 1 "partition count"
expect_eq "$(fs_get 1 LABEL)" root "filesystem label"
r=$(mount_part 1)
expect_content "$r/etc/hostname" vm-openstack
# Boot 2: a drive without the file: no user config, nothing changed.
c2=$WORK/console2.log
grep -aq "has no openstack/latest/user_data: no user data" "$c2" || fail "boot 2: drive without user_data not reported"
grep -aq "no user config provided" "$c2" || fail "boot 2: not an empty config"
grep -aq "AGENT-TEST-DONE complete=yes" "$c2" || fail "boot 2 did not complete"
# Boot 3: the broken config: emergency, with an error naming platform, device and path.
expect_console "AGENT-FAILED: agent-fetch-offline.service failed"
grep -aq "config from openstack config drive /dev/sr[0-9] (iso9660, label config-2), file openstack/latest/user_data is invalid" "$CONSOLE" ||
    fail "boot 3: the error does not name the platform, device and path"
if grep -aq "AGENT-TEST-DONE complete=yes" "$CONSOLE"; then fail "boot 3 completed provisioning"; fi
expect_eq "$(sha256sum "$DISK" | cut -d' ' -f1)" "$(cat "$WORK/sum3")" "disk checksum across boot 3"
