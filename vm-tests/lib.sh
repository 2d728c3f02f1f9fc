# Host-side helpers for scenario checks (sourced by run.sh before check.sh).
# The host kernel parses no partition table: partitions are read through read-only loop devices
# at the partition's offset. $DISK is the guest's disk image, $CONSOLE its last console log;
# for another machine's disk, set DISK for the call: `r=$(DISK=$WORK/disk-b.img mount_part 1)`.
# Every helper fails loudly (non-zero + message on stderr).

# Loop devices ("loop DEV [BACKING-FILE]", the file defaulting to $DISK) and mounts are
# recorded in a file (helpers run in command substitutions, i.e. subshells, so shell arrays
# would lose them) and released on exit, mounts first.
_lib_reg=${WORK:-/tmp}/.lib-reg.$$
: >"$_lib_reg"
_lib_cleanup() {
    local kind what file
    while read -r kind what; do
        [[ $kind == mount ]] && { umount "$what" 2>/dev/null || umount -l "$what" 2>/dev/null; rmdir "$what" 2>/dev/null; }
    done < <(tac "$_lib_reg")
    while read -r kind what file; do
        # Only while it still backs the image it was made for ("loop DEV [FILE]", FILE
        # defaulting to $DISK): never detach a device reused by someone else.
        [[ $kind == loop && $(losetup -n -O BACK-FILE "$what" 2>/dev/null) == "${file:-$DISK}"* ]] &&
            losetup -d "$what" 2>/dev/null
    done <"$_lib_reg"
    rm -f "$_lib_reg"
    return 0
}
trap _lib_cleanup EXIT

fail() { echo "CHECK FAILED: $*" >&2; exit 1; }

# part_json: the partition table as sfdisk JSON.
part_json() { sfdisk --json "$DISK"; }

# part_get N FIELD: a field of partition N (start, size, type, uuid, name) from sfdisk.
part_get() {
    part_json | python3 -c '
import json, re, sys
n, field = sys.argv[1], sys.argv[2]
t = json.load(sys.stdin)["partitiontable"]
for p in t.get("partitions", []):
    if re.search(r"(\d+)$", p["node"]).group(1) == n:
        print(p.get(field, "")); sys.exit(0)
sys.exit("no partition " + n)' "$1" "$2"
}

# part_num_by_name NAME: number of the GPT partition named NAME.
part_num_by_name() {
    part_json | python3 -c '
import json, re, sys
t = json.load(sys.stdin)["partitiontable"]
for p in t.get("partitions", []):
    if p.get("name") == sys.argv[1]:
        print(re.search(r"(\d+)$", p["node"]).group(1)); sys.exit(0)
sys.exit("no partition named %s" % sys.argv[1])' "$1"
}

# part_count: number of partitions.
part_count() { part_json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["partitiontable"].get("partitions",[])))'; }

# part_loop N: a read-only loop device over partition N.
part_loop() {
    local start size dev
    start=$(part_get "$1" start) || fail "partition $1 not found"
    size=$(part_get "$1" size)
    dev=$(losetup -f --show -r -o $((start * 512)) --sizelimit $((size * 512)) "$DISK") ||
        fail "losetup for partition $1"
    echo "loop $dev $DISK" >>"$_lib_reg"
    echo "$dev"
}

# fs_get N TAG: blkid tag (TYPE, LABEL, UUID) of the filesystem on partition N.
fs_get() {
    local dev
    dev=$(part_loop "$1")
    blkid -p -c /dev/null -o value -s "$2" "$dev" || true
}

# mount_part N: mounts partition N read-only, prints the mount point.
mount_part() {
    local dev mp type opts=ro
    dev=$(part_loop "$1")
    type=$(blkid -p -c /dev/null -o value -s TYPE "$dev")
    [[ $type == ext4 ]] && opts=ro,noload
    [[ $type == xfs ]] && opts=ro,norecovery
    mp=$(mktemp -d "${WORK:-/tmp}/mnt.XXXXXX")
    mount -t "$type" -o "$opts" "$dev" "$mp" || fail "mounting partition $1 ($type)"
    echo "mount $mp" >>"$_lib_reg"
    echo "$mp"
}

expect_eq() { [[ "$1" == "$2" ]] || fail "${3:-value}: expected '$2', got '$1'"; }
expect_file() { [[ -f "$1" ]] || fail "missing file ${1#"$WORK"/mnt.*/}"; }
expect_content() { [[ "$(cat "$1")" == "$2" ]] || fail "content of $1: expected '$2', got '$(head -c 200 "$1")'"; }
expect_mode() { expect_eq "$(stat -c %a "$1")" "$2" "mode of $1"; }
expect_console() { grep -aq -- "$1" "$CONSOLE" || fail "console lacks '$1'"; }

# image_loop FILE: a read-only loop device over a whole disk image (e.g. $DISK2), for tools
# that want a block device (clevis luks list).
image_loop() {
    local dev
    dev=$(losetup -f --show -r "$1") || fail "losetup for $1"
    echo "loop $dev $1" >>"$_lib_reg"
    echo "$dev"
}

# expect_clevis_pins FILE PIN...: the LUKS2 header of the image FILE has a clevis token, and
# `clevis luks list` names every PIN in its binding (the first one is the top pin:
# `1: sss '{"t":1,"pins":{"tpm2":[...]}}'`). Prints the list.
expect_clevis_pins() {
    local img=$1 dev list p
    shift
    cryptsetup luksDump --dump-json-metadata "$img" | tr -d ' \n' | grep -q '"type":"clevis"' ||
        fail "no clevis token in the header of ${img##*/}"
    dev=$(image_loop "$img")
    list=$(clevis luks list -d "$dev") || fail "clevis luks list -d $dev (${img##*/})"
    grep -q "^[0-9]*: $1 " <<<"$list" || fail "${img##*/}: not bound with pin $1: $list"
    shift
    for p in "$@"; do
        grep -q "\"$p\"" <<<"$list" || fail "${img##*/}: no $p pin in: $list"
    done
    echo "${img##*/}: $list"
}
