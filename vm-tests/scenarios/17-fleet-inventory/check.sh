# Issue 28: both machines are in agent serve's inventory with the right state, pool, identity
# and stage durations; the failed one with its error (redacted: no data URL contents); machine
# B's console shows the short failure summary; both disks hold what each run did.
A=28a0a0a0-0000-4000-8000-00000000000a
B=28b0b0b0-0000-4000-8000-00000000000b
[[ -n $ADMIN_URL ]] || fail "agent serve printed no admin listener (listening admin http://...)"
machines() { "$AGENT_BIN" machines --server "$ADMIN_URL" "$@"; }

# `agent machines list`: one line each, tab-separated: ID STATE POOL CONFIG LAST-SEEN HOSTNAME.
machines list >"$WORK/list.txt" || fail "agent machines list failed"
cat "$WORK/list.txt"
expect_eq "$(grep -c "^[0-9a-f]\{8\}-" "$WORK/list.txt")" 2 "machines in the inventory"
expect_eq "$(awk -F'\t' -v id=$A '$1 == id {print $2 "/" $3}' "$WORK/list.txt")" provisioned/worker \
    "machine A's state/pool"
expect_eq "$(awk -F'\t' -v id=$B '$1 == id {print $2 "/" $3}' "$WORK/list.txt")" failed/broken \
    "machine B's state/pool"
machines list --state failed >"$WORK/list-failed.txt" || fail "agent machines list --state failed"
grep -q "^$B" "$WORK/list-failed.txt" && ! grep -q "^$A" "$WORK/list-failed.txt" ||
    fail "list --state failed: $(cat "$WORK/list-failed.txt")"

# `agent machines show ID`: the text form names the failed stage and its error ...
machines show "$B" >"$WORK/b.txt" || fail "agent machines show $B failed"
cat "$WORK/b.txt"
grep -qP '^  files\tfailed\t[0-9]+ ms$' "$WORK/b.txt" || fail "show $B: no failed files stage"
grep -q '^    error: /etc/agent-test/payload: .*hash mismatch' "$WORK/b.txt" ||
    fail "show $B: no error naming the file and the hash mismatch"
# ... and the JSON record: identity, per stage outcome and duration, the error and log tail.
machines show --json "$A" >"$WORK/a.json" || fail "agent machines show --json $A"
machines show --json "$B" >"$WORK/b.json" || fail "agent machines show --json $B"
python3 - "$WORK/a.json" "$WORK/b.json" <<'PY' || fail "inventory records (above)"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
bad = []
def expect(what, got, want):
    if got != want:
        bad.append(f"{what}: expected {want!r}, got {got!r}")
for m, serial, mac, pool in ((a, "VMTEST-28-A", "52:54:00:28:00:0a", "worker"),
                             (b, "VMTEST-28-B", "52:54:00:28:00:0b", "broken")):
    i = m["identity"]
    expect(f"{m['id']} serial", i["serial"], serial)
    expect(f"{m['id']} uuid", i["uuid"], m["id"])
    expect(f"{m['id']} macs", i["macs"], [mac])
    expect(f"{m['id']} platform", i["platform"], "metal")
    expect(f"{m['id']} config pool", m["config"]["pool"], pool)
    expect(f"{m['id']} boots", len(m["boots"]), 1)
# The initramfs has no hostname of its own: A's is the one its config writes.
expect("A hostname", a["identity"].get("hostname"), "fleet-worker")
stages = lambda m: {s["stage"]: s for s in m["boots"][-1]["stages"]}
sa, sb = stages(a), stages(b)
expect("A stages", sorted((k, s["outcome"]) for k, s in sa.items()),
       [("disks", "ok"), ("fetch", "ok"), ("files", "ok")])
expect("B stages", sorted((k, s["outcome"]) for k, s in sb.items()),
       [("disks", "ok"), ("fetch", "ok"), ("files", "failed")])
for who, st in (("A", sa), ("B", sb)):
    for k, s in st.items():
        if not isinstance(s.get("durationMs"), int) or s["durationMs"] <= 0:
            bad.append(f"{who} {k}: no duration ({s.get('durationMs')!r})")
expect("A files final", sa["files"]["final"], True)
expect("A disks changes", sa["disks"]["detail"]["changes"]["filesystems"]["made"], ["/dev/vda1 (ext4)"])
if "/etc/hostname" not in sa["files"]["detail"]["changes"]["paths"]:
    bad.append("A files: /etc/hostname not among the changed paths")
err = sb["files"].get("error") or ""
for want in ("/etc/agent-test/payload", "hash mismatch"):
    if want not in err:
        bad.append(f"B files error lacks {want!r}: {err!r}")
# The failed stage's log tail is the run's (each stage is its own process: the earlier
# stages' lines come from agent.log), at most 50 lines.
tail = sb["files"]["detail"].get("logTail") or []
if not tail or len(tail) > 50:
    bad.append(f"B files: log tail of {len(tail)} lines")
elif not any(l.startswith("agent[fetch]") for l in tail):
    bad.append(f"B files: no fetch stage line in the log tail: {tail!r}")
# Never file contents in a report: the data URL is written `data:…`.
if "tampered" in json.dumps(b):
    bad.append("B's record holds the data URL's contents")
print("\n".join(bad) or "records ok")
sys.exit(1 if bad else 0)
PY

# Machine B's console: the summary, at most 20 lines, stage / what / why / check / log / report.
# (The stage's lines as the journal forwards them, "[  14.52] agent-stage[243]: ...";
# systemd's own status lines may be interleaved.)
summary=$(grep -a 'agent-stage\[[0-9]*\]: ' "$WORK/console2.log" | sed 's/^.*agent-stage\[[0-9]*\]: //' |
    awk '/^agent: the files stage FAILED/ && !s {s = 1} s {print} s && /^  report: / {exit}')
echo "$summary"
[[ -n $summary ]] || fail "console 2 has no failure summary"
n=$(wc -l <<<"$summary")
(( n <= 20 )) || fail "the summary has $n lines (at most 20)"
for want in '^  on: .*/etc/agent-test/payload' '^  doing: ' '^  why: .*hash mismatch' '^  check: ' \
    '^  log: .*/run/agent/agent.log' '^  report: sent to http://[0-9.:]*/report'; do
    grep -q -- "$want" <<<"$summary" || fail "the summary lacks '$want'"
done
expect_console "AGENT-FAILED: agent-files.service failed"
# Neither the summary nor the stage's own error line shows the data URL's payload.
! grep -aq 'tampered' "$WORK/console2.log" || fail "machine B's console shows the file's contents"
! grep -aq 'stage FAILED' "$WORK/console1.log" || fail "machine A's console shows a failure"

# Machine A's disk: provisioned. Machine B's: the file with the wrong hash was not written, and
# the files stage left the full log in the new root.
r=$(mount_part 1)
expect_content "$r/etc/hostname" fleet-worker
expect_content "$r/etc/agent-test/pool" worker
rb=$(DISK=$WORK/disk-b.img mount_part 1)
[[ ! -e $rb/etc/agent-test/payload ]] || fail "machine B: the file with the wrong hash was written"
expect_file "$rb/var/log/agent/agent.log"
grep -q "hash mismatch" "$rb/var/log/agent/agent.log" || fail "machine B: the full log lacks the error"
