#!/usr/bin/env bash
# The main job, end to end on this machine, with the static binary:
#   1. validate example configs (errors with JSON path, line and column);
#   2. provision a loop-device disk: plan, then fetch + disks + files into a temporary root;
#      read the result back with sfdisk and blkid; provision again and show the reuse;
#   3. serve a pool with `agent serve` and fetch it like a booting machine would; two machines
#      boot from it, one provisions, one fails, and the inventory shows both and why;
#   4. network boot: the boot script, a machine's own config, its one-time token.
# Needs root (loop devices, mounts). Cleans up after itself, also on failure.
# DEMO_KEEP=1 keeps the server running at the end (its page's URL is printed) until Ctrl-C.
# Colour only on a terminal, and never with NO_COLOR set.
set -euo pipefail
agent=$(readlink -f "${1:-target/x86_64-unknown-linux-gnu/release/agent}")
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/agent-demo.XXXXXX)
dev="" server=""
cleanup() {
    set +e
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    for m in $(findmnt -rn -o TARGET | grep "^$work" | sort -r); do umount "$m"; done
    if [ -n "$dev" ]; then partx -d "$dev" 2>/dev/null; losetup -d "$dev"; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
    step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
    step() { printf '\n== %s\n' "$*"; }
fi

echo "work directory: $work"

step "agent info"
"$agent" info

step "validate examples/webserver.ign (valid)"
"$agent" validate "$here/webserver.ign" && echo "valid"

step "agent butane: examples/webserver.bu to Ignition JSON, as Butane does; validate takes Butane too"
"$agent" butane --strict "$here/webserver.bu" -o "$work/webserver-from-bu.ign"
head -c 200 "$work/webserver-from-bu.ign"; echo " ..."
"$agent" validate "$here/webserver.bu" && echo "valid (Butane, told by content)"

step "validate examples/broken.ign (every error with its JSON path, line and column)"
if "$agent" validate "$here/broken.ign"; then echo "unexpectedly valid"; exit 1; else echo "exit $? (invalid, as expected)"; fi

step "provision a 2 GiB loop disk: GPT with root (ext4) and var (xfs), files, a unit"
truncate -s 2G "$work/disk.img"
dev=$(losetup -f --show "$work/disk.img")
echo "disk: $dev"
sed "s#@DEV@#$dev#g" "$here/loopdisk.ign" > "$work/config.ign"
mkdir -p "$work/root"

step "agent plan (prints what the disks stage will do; touches nothing)"
"$agent" plan --config-file "$work/config.ign"

step "agent run: fetch, disks, files"
"$agent" run --config-file "$work/config.ign" --root "$work/root" --state-dir "$work/state"

step "the disk as other tools see it"
sfdisk --json "$dev"
blkid -p -c /dev/null -o export "${dev}p1" "${dev}p2" | grep -E '^(DEVNAME|TYPE|LABEL)='

step "what was written into the new root"
mount -o ro "${dev}p1" "$work/root"
mount -o ro "${dev}p2" "$work/root/var"
(cd "$work/root" && find etc var/www -newer "$work/config.ign" \( -type f -o -type l \) | sort | sed 's/^/  /')
echo "etc/hostname: $(cat "$work/root/etc/hostname")"
echo "preset: $(cat "$work/root/etc/systemd/system-preset/20-ignition.preset" 2>/dev/null || true)"
umount "$work/root/var" "$work/root"

step "provision again (wipeTable false): partitions kept, filesystems reused, data kept"
mount "${dev}p2" "$work/root"
echo "precious" > "$work/root/keep.txt"
sum_before=$(sha256sum < "$work/root/keep.txt")
umount "$work/root"
sed 's#"wipeTable": true#"wipeTable": false#' "$work/config.ign" > "$work/again.ign"
"$agent" plan --config-file "$work/again.ign"
"$agent" run --config-file "$work/again.ign" --root "$work/root" --state-dir "$work/state2"
mount -o ro "${dev}p2" "$work/root"
[ "$(sha256sum < "$work/root/keep.txt")" = "$sum_before" ] && echo "var/keep.txt unchanged after re-provisioning"
umount "$work/root"

step "agent serve: a pool served to booting machines"
mkdir -p "$work/source/pools/master"
cp "$here/webserver.ign" "$work/source/pools/worker.ign"
cp "$here/master-etcd.ign" "$work/source/pools/master/10-etcd.ign"
# Bare metal (docs/serve.md, "Machines and network boot"): pool metal, one machine file
# selecting a MAC with its own values, and a boot profile with its kernel and initramfs.
mkdir -p "$work/source/machines" "$work/source/boot/assets"
cat > "$work/source/pools/metal.ign" <<'IGN'
{"ignition": {"version": "3.4.0"}, "storage": {"files": [
  {"path": "/etc/hostname", "mode": 420, "overwrite": true, "contents": {"source": "data:,%7B%7B.hostname%7D%7D%0A"}}]}}
IGN
echo '{"selector": {"mac": "52:54:00:00:00:01"}, "pool": "metal", "values": {"hostname": "rack1-node1"}}' > "$work/source/machines/rack1-node1.json"
echo '{"kernel": "vmlinuz", "initrd": ["initramfs.img"], "args": ["console=ttyS0", "ignition.platform.id=metal"]}' > "$work/source/boot/default.json"
head -c 65536 /dev/urandom > "$work/source/boot/assets/vmlinuz"
head -c 4096 /dev/urandom > "$work/source/boot/assets/initramfs.img"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
aport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$agent" serve --source "$work/source" --state-dir "$work/serve-state" --listen-http "127.0.0.1:$port" --admin-listen "127.0.0.1:$aport" --no-access-log 2>"$work/serve.log" >/dev/null &
server=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
echo "--- GET /config/worker (Accept: spec 3.2.0)"
curl -s -D - -o "$work/worker.json" -H 'Accept: application/vnd.coreos.ignition+json;version=3.2.0' "http://127.0.0.1:$port/config/worker" | grep -iE '^(HTTP|content-type|etag|content-length)'
"$agent" validate "$work/worker.json" && echo "served config is valid"
echo "--- GET /config/master?etcd_index=2: the etcd unit"
curl -s "http://127.0.0.1:$port/config/master?etcd_index=2" | python3 -c 'import json,sys; c=json.load(sys.stdin); print(c["systemd"]["units"][0]["contents"])'
echo "--- GET /config/nosuchpool"
curl -s -o /dev/null -w '%{http_code} (body %{size_download} bytes)\n' "http://127.0.0.1:$port/config/nosuchpool"
echo "--- the pointer config a worker boots with"
"$agent" pointer --state-dir "$work/serve-state" --pool worker --url "http://127.0.0.1:$port/ignition"
echo "--- GET /status (the generation served, each pool's version, the limits)"
curl -s "http://127.0.0.1:$port/status" | python3 -m json.tool

step "a machine boots from the pointer config, reports each stage; the server's inventory"
"$agent" pointer --state-dir "$work/serve-state" --pool worker --url "http://127.0.0.1:$port/ignition" > "$work/pointer.ign"
# A new root with its own (minimal) account databases, for the pool's user.
mkdir -p "$work/root3/etc"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$work/root3/etc/passwd"
printf 'root:x:0:\n' > "$work/root3/etc/group"
printf 'root:*:19000:0:99999:7:::\n' > "$work/root3/etc/shadow"
printf 'root:*::\n' > "$work/root3/etc/gshadow"
chmod 600 "$work/root3/etc/shadow" "$work/root3/etc/gshadow"
for f in passwd group shadow gshadow; do cp -p "$work/root3/etc/$f" "$work/root3/etc/$f.demo"; done
"$agent" run --config-file "$work/pointer.ign" --root "$work/root3" --state-dir "$work/state3" --stage fetch --stage files 2>&1 | grep -E "served pool|report sent" || true
echo "--- a second machine boots from the pool 'broken': a file whose contents fail their hash"
cat > "$work/source/pools/broken.ign" <<'IGN'
{"ignition": {"version": "3.4.0"}, "storage": {"files": [
  {"path": "/etc/motd", "mode": 420, "contents": {"source": "data:,hello%0A",
   "verification": {"hash": "sha512-00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"}}}]}}
IGN
# The server picks the new pool up and publishes its token within a moment.
for i in $(seq 100); do
    "$agent" pointer --state-dir "$work/serve-state" --pool broken --url "http://127.0.0.1:$port/ignition" \
        > "$work/pointer-broken.ign" 2>/dev/null && break
    [ "$i" = 100 ] && { echo "the server did not take the pool 'broken' up" >&2; exit 1; }
    sleep 0.1
done
mkdir -p "$work/root4/etc"
for f in passwd group shadow gshadow; do cp -p "$work/root3/etc/$f.demo" "$work/root4/etc/$f"; done
# Another machine: its own network interface as /sys/class/net shows it, in a private mount
# namespace (the host's view of /sys is untouched).
unshare -m sh -c 'mount -t tmpfs demo-net /sys/class/net && mkdir /sys/class/net/eth9 &&
    echo 52:54:00:00:00:02 > /sys/class/net/eth9/address && exec "$@"' sh \
    "$agent" run --config-file "$work/pointer-broken.ign" --root "$work/root4" --state-dir "$work/state4" \
    --stage fetch --stage files 2>&1 | grep -E "error|report sent" || true
echo "--- the inventory: one provisioned, one failed"
"$agent" machines list --server "http://127.0.0.1:$aport"
echo "--- why the failed one failed"
"$agent" machines show mac-52:54:00:00:00:02 --server "http://127.0.0.1:$aport" | grep -iE "state|stage|error" | head -8
echo "(the same on the page: http://127.0.0.1:$aport/ui/ while the server runs)"

step "network boot: /boot.ipxe, the machine's /ipxe script, its config once per token"
echo "--- GET /boot.ipxe (what a DHCP server points iPXE at)"
curl -s "http://127.0.0.1:$port/boot.ipxe"
echo "--- GET /ipxe?mac=52-54-00-00-00-01 (as iPXE asks)"
script=$(curl -s "http://127.0.0.1:$port/ipxe?mac=52-54-00-00-00-01")
sed -E 's/token=[A-Za-z0-9_-]+/token=<one-time token>/' <<<"$script"
url=$(grep -o 'agent.config.url=[^ ]*' <<<"$script" | cut -d= -f2-)
echo "--- the machine's config: its own hostname"
curl -s "$url" | python3 -c '
import base64, json, sys, urllib.parse
c = json.load(sys.stdin)
src = [f for f in c["storage"]["files"] if f["path"] == "/etc/hostname"][0]["contents"]["source"]
head, data = src.split(",", 1)
text = base64.b64decode(data) if head.endswith(";base64") else urllib.parse.unquote_to_bytes(data)
print("/etc/hostname:", text.decode().strip())'
echo "--- the same token again: $(curl -s -o /dev/null -w '%{http_code}' "$url") (spent)"
echo "--- a boot asset with Range: $(curl -s -o /dev/null -r 0-1023 -w '%{http_code} %{size_download} bytes' "http://127.0.0.1:$port/assets/vmlinuz")"
echo "demo complete"
if [ "${DEMO_KEEP:-}" = 1 ]; then
    step "the server keeps running (DEMO_KEEP=1): Ctrl-C stops it and cleans up"
    echo "the fleet page:   http://127.0.0.1:$aport/ui/"
    echo "the inventory:    $agent machines list --server http://127.0.0.1:$aport"
    echo "a pool's config:  curl http://127.0.0.1:$port/config/worker"
    wait "$server"
fi
