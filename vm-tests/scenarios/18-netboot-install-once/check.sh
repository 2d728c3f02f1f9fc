# Issue 29: both machines booted from the network, each installed with its own values and
# reported; their second network boots went to the local disk (no kernel, no config fetch: the
# harness checked the console and that each disk is unchanged); after `agent machines
# reprovision`, node-1 installed again.
N1=29000000-0000-4000-8000-000000000001
N2=mac-52:54:00:29:00:02
[[ -n $ADMIN_URL ]] || fail "agent serve printed no admin listener"
machines() { "$AGENT_BIN" machines --server "$ADMIN_URL" "$@"; }

# What each boot asked the server for (agent serve's access log: method and path, no query).
requests() { # N: "METHOD PATH STATUS" per request of boot N
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        print(r["method"], r["path"], r["status"])' "$WORK/server$1.log"
}
for n in 1 2 5; do
    requests $n >"$WORK/requests$n"
    for want in "GET /boot.ipxe 200" "GET /ipxe 200" "GET /assets/vmlinuz 200" \
        "GET /assets/initramfs.img 200" "GET /machine-config 200" "POST /report 200"; do
        grep -qx "$want" "$WORK/requests$n" || fail "boot $n: no '$want' in: $(tr '\n' ';' <"$WORK/requests$n")"
    done
    expect_eq "$(grep -c '^POST /report 200$' "$WORK/requests$n")" 3 "boot $n: reports (fetch, disks, files)"
    c=$WORK/console$n.log
    grep -aq 'Filename: http://10.0.2.100:8080/boot.ipxe' "$c" || fail "boot $n: iPXE got no bootfile by DHCP"
    grep -aq 'AGENT-TEST-DONE complete=yes' "$c" || fail "boot $n: provisioning did not complete"
done
for n in 3 4; do
    requests $n >"$WORK/requests$n"
    expect_eq "$(tr '\n' ';' <"$WORK/requests$n")" "GET /boot.ipxe 200;GET /ipxe 200;" \
        "boot $n's requests (a script, then no kernel, initramfs or config)"
    # iPXE ran the answer: its echo line, then `exit`: SeaBIOS goes on to the hard disk.
    id=$N1
    [[ $n == 4 ]] && id=$N2
    tr -d '\r\n' <"$WORK/console$n.log" |
        grep -aqF "agent serve: machine $id is installed: booting from the local disk" ||
        fail "boot $n: the console lacks the server's local-disk answer for $id"
    grep -aq 'Booting from Hard Disk' "$WORK/console$n.log" || fail "boot $n: not on to the disk"
done

# The one-time token: the config URL boot 1's kernel got (the test hook prints it with
# agent.test.config-url) was spent by the agent's fetch; asked again from the host, refused.
url1=$(grep -ao -m1 'AGENT-TEST-CONFIG-URL [^ ]*' "$WORK/console1.log" | tr -d '\r' | sed 's/.* //')
[[ $url1 == http://10.0.2.100:8080/machine-config\?token=* ]] || fail "boot 1's config URL: '$url1'"
code=$(curl -s -o "$WORK/replay.txt" -w '%{http_code}' "$SERVER_URL${url1#http://10.0.2.100:8080}")
expect_eq "$code" 403 "fetching boot 1's config URL again ($(cat "$WORK/replay.txt"))"

# The inventory: two machines, provisioned, authenticated by their boot tokens; node-1 with two
# installs (boots 1 and 5), node-2 with one; each report's identity agrees with /ipxe's facts.
machines list >"$WORK/list.txt" || fail "agent machines list"
cat "$WORK/list.txt"
expect_eq "$(awk -F'\t' -v id=$N1 '$1 == id {print $2 "/" $3}' "$WORK/list.txt")" provisioned/worker "node-1"
expect_eq "$(awk -F'\t' -v id=$N2 '$1 == id {print $2 "/" $3}' "$WORK/list.txt")" provisioned/worker "node-2"
expect_eq "$(grep -vc '^ID' "$WORK/list.txt")" 2 "machines in the inventory"
machines show --json "$N1" >"$WORK/n1.json" || fail "agent machines show $N1"
machines show --json "$N2" >"$WORK/n2.json" || fail "agent machines show $N2"
python3 - "$WORK/n1.json" "$WORK/n2.json" <<'PY' || fail "inventory records (above)"
import json, sys
bad = []
for path, boots, mac, serial, host in ((sys.argv[1], 2, "52:54:00:29:00:01", "VMTEST-29-1", "node-1"),
                                       (sys.argv[2], 1, "52:54:00:29:00:02", None, "node-2")):
    m = json.load(open(path))
    who = m["id"]
    def expect(what, got, want):
        if got != want:
            bad.append(f"{who} {what}: expected {want!r}, got {got!r}")
    expect("state", m["state"], "provisioned")
    expect("authenticated", m["authenticated"], True)
    expect("macs", m["identity"]["macs"], [mac])
    # The hostname its machine file's values gave it (the config's /etc/hostname).
    expect("hostname", m["identity"].get("hostname"), host)
    if serial:
        expect("serial", m["identity"]["serial"], serial)
    expect("installs (boots with reports)", len(m["boots"]), boots)
    for b in m["boots"]:
        st = {s["stage"]: s["outcome"] for s in b["stages"]}
        expect(f"boot {b['bootId']} stages", st, {"fetch": "ok", "disks": "ok", "files": "ok"})
        for s in b["stages"]:
            if not isinstance(s.get("durationMs"), int) or s["durationMs"] <= 0:
                bad.append(f"{who} {s['stage']}: no duration")
            if not s.get("authenticated"):
                bad.append(f"{who} {s['stage']}: report not authenticated")
print("\n".join(bad) or "records ok")
sys.exit(1 if bad else 0)
PY

# Each disk holds its own machine's values; node-1's root was made again by boot 5.
r1=$(mount_part 1)
expect_content "$r1/etc/hostname" node-1
expect_content "$r1/etc/agent-test/values" "ip=10.29.0.1 rack=r1"
grep -q 'ExecStart=/usr/bin/node-agent --name=node-1 --ip=10.29.0.1$' "$r1/etc/systemd/system/node-agent.service" ||
    fail "node-1's unit lacks its values"
uuid5=$(fs_get 1 UUID)
[[ -s $WORK/root1.uuid && $uuid5 != "$(cat "$WORK/root1.uuid")" ]] ||
    fail "node-1's root filesystem was not made again by boot 5 ($uuid5)"
r2=$(DISK=$WORK/disk-2.img mount_part 1)
expect_content "$r2/etc/hostname" node-2
expect_content "$r2/etc/agent-test/values" "ip=10.29.0.2 rack=r2"
grep -q -- '--name=node-2 --ip=10.29.0.2$' "$r2/etc/systemd/system/node-agent.service" ||
    fail "node-2's unit lacks its values"
