# aws: one root partition filling the disk, the files of the user data; on the server's log,
# the token handshake and a user-data GET that carried the token.
expect_eq "$(part_count)" 1 "partition count"
expect_eq "$(part_get 1 name)" root "partition 1 name"
expect_eq "$(fs_get 1 TYPE)" ext4 "filesystem type"
r=$(mount_part 1)
expect_content "$r/etc/hostname" vm-aws
expect_content "$r/etc/agent-test/platform" aws
expect_console "AGENT-TEST-DONE complete=yes"
expect_console "needs the network"
grep -q "REQUEST PUT /latest/api/token .* 200" "$WORK/server.log" || fail "no token handshake in server.log"
grep -q "REQUEST GET /2019-10-01/user-data token=yes .* 200" "$WORK/server.log" ||
    fail "no user-data GET with the token in server.log"
! grep -q "token=no .* 401" "$WORK/server.log" || fail "a request without the token: $(grep 401 "$WORK/server.log")"
