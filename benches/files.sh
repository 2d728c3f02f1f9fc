#!/usr/bin/env bash
# Benchmark of the files stage: 10,000 small files plus 100 MiB of contents (data: URLs),
# written by `agent run --stage files`, against `tar -x` of the same tree in the same run.
# Both sides end with the data durable on disk (agent: one syncfs; tar: `sync -f`).
# Prints best-of-N times and the ratios tar/agent (targets: wall >= 0.8, cpu >= 0.5). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

SMALL=${SMALL:-10000}
BIG_MIB=${BIG_MIB:-100}
RUNS=${RUNS:-3}

cargo build --release --quiet
BIN=$PWD/target/release/agent
WORK=$(mktemp -d /var/tmp/agent-bench-files.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

python3 - "$WORK" "$SMALL" "$BIG_MIB" <<'PY'
import base64, json, os, sys
work, small, big_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tree = os.path.join(work, "tree")
files = []
def add(path, data, mode=0o644):
    host = os.path.join(tree, path.lstrip("/"))
    os.makedirs(os.path.dirname(host), exist_ok=True)
    with open(host, "wb") as f:
        f.write(data)
    os.chmod(host, mode)
    files.append({"path": path, "mode": mode,
                  "contents": {"source": "data:;base64," + base64.b64encode(data).decode()}})
for i in range(small):
    add(f"/usr/share/bench/d{i // 100:03}/f{i:05}.txt",
        (f"small file {i}\n" * (1 + i % 40)).encode())
n_big = 4
for i in range(n_big):
    add(f"/var/lib/bench/big{i}.bin", os.urandom(big_mib * 1024 * 1024 // n_big))
os.makedirs(os.path.join(work, "state"))
with open(os.path.join(work, "state", "config.json"), "w") as f:
    json.dump({"ignition": {"version": "3.6.0"}, "storage": {"files": files}}, f)
PY
tar -C "$WORK/tree" -cf "$WORK/tree.tar" .
echo "tree: $(find "$WORK/tree" -type f | wc -l) files, $(du -sm "$WORK/tree" | cut -f1) MiB;" \
     "config: $(du -m "$WORK/state/config.json" | cut -f1) MiB"

calc() { awk "BEGIN { print $1 }"; }

# Each side writes onto a fresh ext4 filesystem (a loop device), as at first boot: reusing one
# filesystem after deleting 10,000 files makes ext4's inode allocator skip recently deleted
# inodes and times become noise.
cleanup() {
    for d in "$WORK/root-tar" "$WORK/root-agent"; do
        mountpoint -q "$d" && umount "$d"
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
[ -n "${KEEP_WORK:-}" ] && trap - EXIT && echo "work: $WORK"
fresh_fs() { # $1: mount point, $2: image
    mountpoint -q "$1" && umount "$1"
    rm -f "$2"
    truncate -s 1G "$2"
    mkfs.ext4 -q -F "$2"
    mkdir -p "$1"
    mount -o loop "$2" "$1"
}

TIMEFORMAT='%R %U %S'
best_tar=999999
best_agent=999999
best_tar_cpu=999999
best_agent_cpu=999999
for i in $(seq "$RUNS"); do
    fresh_fs "$WORK/root-tar" "$WORK/tar.img"
    fresh_fs "$WORK/root-agent" "$WORK/agent.img"
    sync
    { time { tar -C "$WORK/root-tar" -xf "$WORK/tree.tar"; sync -f "$WORK/root-tar"; }; } 2>"$WORK/tar.time"
    { time "$BIN" -q run --stage files --root "$WORK/root-agent" --state-dir "$WORK/state"; } \
        2>"$WORK/agent.time"
    read -r tt tu ts < <(tail -n 1 "$WORK/tar.time")
    read -r ta au as < <(tail -n 1 "$WORK/agent.time")
    tc=$(calc "$tu + $ts")
    ac=$(calc "$au + $as")
    printf 'run %d: tar -x %.3f s (cpu %.3f s), agent %.3f s (cpu %.3f s)\n' "$i" "$tt" "$tc" "$ta" "$ac"
    best_tar=$(calc "($tt < $best_tar) ? $tt : $best_tar")
    best_agent=$(calc "($ta < $best_agent) ? $ta : $best_agent")
    best_tar_cpu=$(calc "($tc < $best_tar_cpu) ? $tc : $best_tar_cpu")
    best_agent_cpu=$(calc "($ac < $best_agent_cpu) ? $ac : $best_agent_cpu")
done
# The trees must be identical.
diff -r "$WORK/root-tar/usr" "$WORK/root-agent/usr" >/dev/null
diff -r "$WORK/root-tar/var" "$WORK/root-agent/var" >/dev/null
printf 'best wall: tar -x %.3f s, agent %.3f s, ratio tar/agent %.2f (target >= 0.8)\n' \
    "$best_tar" "$best_agent" "$(calc "$best_tar / $best_agent")"
printf 'best cpu:  tar -x %.3f s, agent %.3f s, ratio tar/agent %.2f (target >= 0.5)\n' \
    "$best_tar_cpu" "$best_agent_cpu" "$(calc "$best_tar_cpu / $best_agent_cpu")"
