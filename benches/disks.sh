#!/usr/bin/env bash
# Benchmark of the disks stage: a 4-partition, 3-filesystem layout (ext4, xfs, btrfs) on a loop
# device, run N times. Prints the stage's total time, the time spent in the external mkfs/wipefs
# tools, and the agent's own overhead (target <= 50 ms). Reference, measured in the same run: the
# same work done by a shell script (sfdisk + partx + the same mkfs commands, sequentially).
# Needs root, losetup, sfdisk, partx, mkfs.ext4, mkfs.xfs, mkfs.btrfs, wipefs.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-5}
cargo build --release --quiet
AGENT=$PWD/target/release/agent

work=$(mktemp -d)
dev=""
cleanup() {
    if [ -n "$dev" ]; then
        partx -d "$dev" >/dev/null 2>&1 || true
        losetup -d "$dev" || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

truncate -s 1G "$work/disk.img"
dev=$(losetup -f --show "$work/disk.img")
cat >"$work/config.json" <<JSON
{"ignition": {"version": "3.4.0"}, "storage": {
  "disks": [{"device": "$dev", "wipeTable": true, "partitions": [
    {"number": 1, "label": "root", "sizeMiB": 128},
    {"number": 2, "label": "var", "sizeMiB": 330},
    {"number": 3, "label": "data", "sizeMiB": 140},
    {"number": 4, "label": "spare", "sizeMiB": 0}]}],
  "filesystems": [
    {"device": "${dev}p1", "format": "ext4", "label": "root", "wipeFilesystem": true},
    {"device": "${dev}p2", "format": "xfs", "label": "var", "wipeFilesystem": true},
    {"device": "${dev}p3", "format": "btrfs", "label": "data", "wipeFilesystem": true}]}}
JSON

now_ms() { date +%s%N | awk '{printf "%.3f", $1/1e6}'; }

plan_ms=0 part_ms=0 sync_ms=0 probe_ms=0 agent_total=0 agent_tools=0 agent_fs=0 agent_own=0 agent_wall=0 ref_total=0
for i in $(seq "$N"); do
    t0=$(now_ms)
    log=$("$AGENT" run --stage disks --state-dir "$work" 2>&1)
    t1=$(now_ms)
    line=$(echo "$log" | grep 'done in')
    read -r P Q S R < <(echo "$log" | grep 'overhead: planning' | sed -E 's/.*planning ([0-9.]+) ms, partitioning ([0-9.]+) ms \(of which table write \+ fsync ([0-9.]+) ms\), probing ([0-9.]+) ms.*/\1 \2 \3 \4/')
    sync_ms=$(echo "$sync_ms + $S" | bc -l)
    plan_ms=$(echo "$plan_ms + $P" | bc -l)
    part_ms=$(echo "$part_ms + $Q" | bc -l)
    probe_ms=$(echo "$probe_ms + $R" | bc -l)
    # "done in T ms (external tools X ms summed, filesystem phase F ms, own overhead O ms)"
    read -r T X F O < <(echo "$line" | sed -E 's/.*done in ([0-9.]+) ms \(external tools ([0-9.]+) ms summed, filesystem phase ([0-9.]+) ms, own overhead ([0-9.]+) ms\).*/\1 \2 \3 \4/')
    agent_total=$(echo "$agent_total + $T" | bc -l)
    agent_tools=$(echo "$agent_tools + $X" | bc -l)
    agent_fs=$(echo "$agent_fs + $F" | bc -l)
    agent_own=$(echo "$agent_own + $O" | bc -l)
    agent_wall=$(echo "$agent_wall + $t1 - $t0" | bc -l)

    # Reference: the same work by hand, sequentially.
    t0=$(now_ms)
    partx -d "$dev" >/dev/null 2>&1 || true
    printf 'label: gpt\nsize=128MiB, name=root\nsize=330MiB, name=var\nsize=140MiB, name=data\nname=spare\n' \
        | sfdisk -q --no-reread --no-tell-kernel "$dev" >/dev/null 2>&1
    partx -a "$dev"
    for p in 1 2 3; do wipefs -q -a "${dev}p$p"; done
    mkfs.ext4 -F -q -L root "${dev}p1"
    mkfs.xfs -f -q -L var "${dev}p2"
    mkfs.btrfs -f -q -L data "${dev}p3" >/dev/null
    t1=$(now_ms)
    ref_total=$(echo "$ref_total + $t1 - $t0" | bc -l)
done

avg() { echo "scale=1; $1 / $N" | bc -l; }
echo "disks stage, 4 partitions + 3 filesystems (ext4, xfs, btrfs), mean of $N runs:"
echo "  agent process wall time:          $(avg "$agent_wall") ms"
echo "  agent stage total:                $(avg "$agent_total") ms"
echo "  external tools (summed):          $(avg "$agent_tools") ms"
echo "  filesystem phase (tools parallel): $(avg "$agent_fs") ms"
echo "  agent's own overhead:             $(avg "$agent_own") ms (target <= 50 ms)"
echo "    of which planning:              $(avg "$plan_ms") ms"
echo "    of which partitioning (+fsync): $(avg "$part_ms") ms"
echo "      (table write + fsync, disk I/O: $(avg "$sync_ms") ms)"
echo "    of which probing filesystems:   $(avg "$probe_ms") ms"
echo "  own overhead without the fsync:   $(echo "scale=1; ($agent_own - $sync_ms) / $N" | bc -l) ms"
echo "  reference (shell, sequential):    $(avg "$ref_total") ms"
echo "  ratio agent wall / reference:     $(echo "scale=2; $agent_wall / $ref_total" | bc -l)"
