# After three power cuts (the image write; the installed system's disks stage; its files
# stage) the machine converged: installed once whole, provisioned, up and reported running.
N=mac-52:54:00:41:00:03
[[ -n $ADMIN_URL ]] || fail "agent serve printed no admin listener"
requests() { # N: "METHOD PATH STATUS" per request of boot N
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        print(r["method"], r["path"], r["status"])' "$WORK/server$1.log"
}
for n in 1 2; do
    requests $n >"$WORK/requests$n"
    grep -qx "GET /assets/os.img.zst 200" "$WORK/requests$n" ||
        fail "boot $n did not fetch the image: $(tr '\n' ';' <"$WORK/requests$n")"
done
grep -aq 'installed to /dev/' "$WORK/console1.log" && fail "boot 1 finished the install before the cut"
for n in 3 4 5; do
    requests $n >"$WORK/requests$n"
    grep -qx "GET /assets/vmlinuz 200" "$WORK/requests$n" && fail "boot $n: a network kernel after the install"
    grep -aq 'os-image: booting with agent.firstboot' "$WORK/console$n.log" ||
        fail "boot $n: not a first boot of the installed OS (the stamp must stay until provisioning succeeds)"
done
c=$WORK/console5.log
grep -aq 'CONFIG-UNIT-RAN host=node-3' "$c" || fail "boot 5: the config's unit did not run"
grep -aq 'OS-IMAGE-DONE .*agent-report-running=success/inactive' "$c" ||
    fail "boot 5: the running report: $(grep -a -m1 -o 'OS-IMAGE-DONE.*' "$c")"
# The disk: the image's partitions and the config's /var, as sfdisk and blkid see them.
expect_eq "$(part_get 1 name)" BIOS-BOOT "partition 1"
expect_eq "$(fs_get 3 LABEL)" root "partition 3 label"
expect_eq "$(part_get 4 name)" var "partition 4 (the config's)"
expect_eq "$(fs_get 4 LABEL)" var "partition 4's filesystem"
expect_eq "$(fs_get 4 TYPE)" ext4 "partition 4's filesystem type"
rootdev=$(part_loop 3)
expect_eq "$(debugfs -c -R 'cat /etc/os-image-test/hello' "$rootdev" 2>/dev/null)" \
    "installed from the network" "the config's file in the installed root"
bootdev=$(part_loop 2)
debugfs -c -R 'ls /' "$bootdev" 2>/dev/null | grep -q agent.firstboot &&
    fail "the first-boot stamp is still there after provisioning"
"$AGENT_BIN" machines --server "$ADMIN_URL" show --json "$N" >"$WORK/n.json" || fail "machines show"
python3 - "$WORK/n.json" <<'PY' || fail "the inventory record (above)"
import json, sys
m = json.load(open(sys.argv[1]))
print(m["state"], m.get("installed"))
assert m["state"] == "running", m["state"]
assert m["installed"] is not None
PY
