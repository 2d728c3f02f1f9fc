# gcp: one root partition filling the disk, the files of the user data; every request to the
# metadata server carried Metadata-Flavor: Google (else 403).
expect_eq "$(part_count)" 1 "partition count"
expect_eq "$(fs_get 1 TYPE)" ext4 "filesystem type"
r=$(mount_part 1)
expect_content "$r/etc/hostname" vm-gcp
expect_content "$r/etc/agent-test/platform" gcp
expect_console "AGENT-TEST-DONE complete=yes"
expect_console "needs the network"
grep -q "REQUEST GET /computeMetadata/v1/instance/attributes/user-data token=no flavor=yes 200" \
    "$WORK/server.log" || fail "no user-data GET with Metadata-Flavor in server.log"
! grep -q " 403$" "$WORK/server.log" || fail "a request without the header: $(grep ' 403$' "$WORK/server.log")"
