# Rollouts: the canary (machine 1) got the broken config and failed; the rollout halted at
# stage 0 naming it and its error; machines 2 and 3 got the previous (good) config and
# provisioned; the page shows the halt with its reason; the metrics say halted.
M1=mac-52:54:00:21:00:01
M2=mac-52:54:00:21:00:02
M3=mac-52:54:00:21:00:03
[[ -n $ADMIN_URL ]] || fail "agent serve printed no admin listener"
"$AGENT_BIN" machines --server "$ADMIN_URL" list >"$WORK/list.txt" || fail "agent machines list"
cat "$WORK/list.txt"
expect_eq "$(awk -F'\t' -v id=$M1 '$1 == id {print $2}' "$WORK/list.txt")" failed "the canary"
expect_eq "$(awk -F'\t' -v id=$M2 '$1 == id {print $2}' "$WORK/list.txt")" provisioned "machine 2"
expect_eq "$(awk -F'\t' -v id=$M3 '$1 == id {print $2}' "$WORK/list.txt")" provisioned "machine 3"
grep -aq 'AGENT-TEST-DONE complete=yes' "$WORK/console2.log" || fail "boot 2 did not complete"
grep -aq 'AGENT-TEST-DONE complete=yes' "$WORK/console3.log" || fail "boot 3 did not complete"

"$AGENT_BIN" rollout --server "$ADMIN_URL" status worker >"$WORK/rollout.txt" || fail "agent rollout status"
cat "$WORK/rollout.txt"
grep -qx $'state\thalted' "$WORK/rollout.txt" || fail "the rollout is not halted"
grep -q $'^halted\tat .* (stage 0): 1 of 1 machines on the new config failed' "$WORK/rollout.txt" ||
    fail "no halt reason"
grep -q "^  $M1"$'\t'".*hash mismatch" "$WORK/rollout.txt" || fail "the halt does not name the canary's error"

# The page: the banner with the pool, the stage, the canary and its error.
curl -sf "$ADMIN_URL/ui/" >"$WORK/page.html" || fail "the page"
grep -q 'Rollout of pool worker halted' "$WORK/page.html" || fail "the page shows no halt banner"
grep -q 'hash mismatch' "$WORK/page.html" || fail "the page's banner lacks the error"
curl -sf "$ADMIN_URL/metrics" | grep -qx 'agent_rollout_state{pool="worker",state="halted"} 1' ||
    fail "the metric does not say halted"

# What each disk holds: machines 2 and 3 the good config's file.
r2=$(DISK=$WORK/disk-2.img mount_part 1)
expect_content "$r2/etc/agent-test/generation" good
r3=$(DISK=$WORK/disk-3.img mount_part 1)
expect_content "$r3/etc/agent-test/generation" good
