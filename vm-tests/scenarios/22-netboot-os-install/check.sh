# Both machines installed the OS image from the network onto the disk their selector chose
# (vda, 512 MiB; vdb, 160 MiB, untouched), booted it from that disk, were provisioned by the
# installed system's first boot from the config the install placed, and reported running;
# node-1 installed again after `agent machines reprovision`.
N1=mac-52:54:00:41:00:01
N2=mac-52:54:00:41:00:02
[[ -n $ADMIN_URL ]] || fail "agent serve printed no admin listener"
machines() { "$AGENT_BIN" machines --server "$ADMIN_URL" "$@"; }
requests() { # N: "METHOD PATH STATUS" per request of boot N
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        print(r["method"], r["path"], r["status"])' "$WORK/server$1.log"
}
source "$WORK/os/layout.env"
for n in 1 2 5; do
    c=$WORK/console$n.log
    requests $n >"$WORK/requests$n"
    for want in "GET /boot.ipxe 200" "GET /ipxe 200" "GET /assets/vmlinuz 200" \
        "GET /assets/initramfs.img 200" "GET /assets/os.img.zst 200" "GET /machine-config 200" \
        "POST /report 200"; do
        grep -qx "$want" "$WORK/requests$n" || fail "boot $n: no '$want' in: $(tr '\n' ';' <"$WORK/requests$n")"
    done
    grep -aq 'info: install disk: vda: ' "$c" ||
        fail "boot $n: the selector did not choose vda: $(grep -a -m1 'install disk' "$c")"
    grep -aq 'Finished .*agent-install.ser' "$c" || fail "boot $n: agent-install.service did not run"
    if grep -aqE 'Agent: (fetch|disks|files)' "$c"; then fail "boot $n: a provisioning stage ran in the live boot"; fi
done
# The disks: the image on vda (its partitions as sfdisk and blkid see them), vdb untouched.
# node-2's was provisioned by its first boot; node-1's was installed again (boot 5): the
# image as written, the placed config and the first-boot stamp, nothing provisioned yet.
for d in "$WORK/disk.img" "$WORK/disk-2.img"; do
    DISK=$d
    expect_eq "$(part_get 1 name)" BIOS-BOOT "$d: partition 1"
    expect_eq "$(fs_get 2 LABEL)" boot "$d: partition 2 label"
    expect_eq "$(fs_get 3 LABEL)" root "$d: partition 3 label"
    bootdev=$(part_loop 2)
    debugfs -c -R 'cat /ignition/config.ign' "$bootdev" 2>/dev/null | grep -q os-image-hello ||
        fail "$d: no placed config (ignition/config.ign) on the boot partition"
    rootdev=$(part_loop 3)
    hello=$(debugfs -c -R 'cat /etc/os-image-test/hello' "$rootdev" 2>/dev/null || true)
    stamp=$(debugfs -c -R 'ls /' "$bootdev" 2>/dev/null | grep -c agent.firstboot || true)
    if [[ $d == */disk.img ]]; then
        expect_eq "$hello" "" "$d: the reinstalled root has no provisioned file yet"
        expect_eq "$stamp" 1 "$d: the reinstalled image's first-boot stamp"
    else
        expect_eq "$hello" "installed from the network" "$d: the config's file in the installed root"
        expect_eq "$stamp" 0 "$d: the first-boot stamp after provisioning"
    fi
done
for d in "$WORK/disk2.img" "$WORK/disk-22.img"; do
    [[ -z $(tr -d '\0' <"$d" | head -c1) ]] || fail "$d (vdb) was written to"
done
# Boots 3 and 4: the server sent each machine to its disk; GRUB booted the installed OS with
# the first-boot flag, which provisioned it; the OS came up, brought its network up, and the
# running report went out.
for n in 3 4; do
    c=$WORK/console$n.log
    requests $n >"$WORK/requests$n"
    grep -qx "GET /machine-config 200" "$WORK/requests$n" &&
        fail "boot $n fetched a config from the server: the installed system reads the placed one"
    grep -qx "GET /assets/vmlinuz 200" "$WORK/requests$n" && fail "boot $n: a network kernel"
    tr -d '\r\n' <"$c" | grep -aq "is installed: booting from the local disk" ||
        fail "boot $n: the console lacks the server's local-disk answer"
    grep -aq 'os-image: booting with agent.firstboot' "$c" || fail "boot $n: GRUB did not boot the installed OS's first boot"
    grep -aq 'Agent: files' "$c" || fail "boot $n: the installed system's files stage did not run"
    host=node-1
    [[ $n == 4 ]] && host=node-2
    grep -aq "CONFIG-UNIT-RAN host=$host" "$c" || fail "boot $n: the config's unit did not run as $host"
    grep -aq 'OS-IMAGE-NET ' "$c" || fail "boot $n: the installed OS's network did not come up"
    grep -aq 'OS-IMAGE-DONE .*agent-report-running=success/inactive' "$c" ||
        fail "boot $n: the running report: $(grep -a -m1 -o 'OS-IMAGE-DONE.*' "$c")"
    grep -qx "POST /report 200" "$WORK/requests$n" || fail "boot $n sent no report"
done
# The inventory: both running, with their hostnames; node-1's reprovision made it install again.
machines list --json >"$WORK/list.json" || fail "agent machines list"
python3 - "$WORK/list.json" "$N1" "$N2" "$WORK/node-1-before5.json" <<'PY' || fail "inventory (above)"
import json, sys
doc = json.load(open(sys.argv[1]))
ms = {m["id"]: m for m in (doc["machines"] if isinstance(doc, dict) else doc)}
n1, n2 = ms[sys.argv[2]], ms[sys.argv[3]]
print(json.dumps({k: (v["state"], v["identity"]["hostname"]) for k, v in ms.items()}))
assert len(ms) == 2, ms.keys()
assert n2["state"] == "running", n2
assert n2["identity"]["hostname"] == "node-2", n2["identity"]
assert n2["installed"] is not None and n2["boots"][-1]["kernel"], n2
# node-1 installed again (boot 5), its OS not booted since.
assert n1["state"] == "installed", n1
# Its live boot's install report says who the live system is (no hostname); before it,
# the installed system had reported running as node-1.
before = json.load(open(sys.argv[4]))
assert before["state"] == "running", before["state"]
assert before["identity"]["hostname"] == "node-1", before["identity"]
PY
for n in 1 2 3 4 5; do
    echo "boot $n: $(sed -n "${n}p" "$WORK/boot_each") s"
done
