#!/usr/bin/env bash
# Benchmark of `agent install`: image write throughput (fetch from a file, decompress, verify
# the SHA-256 of the compressed stream, write with O_DIRECT) onto a loop device, against the
# shell pipeline `zstd -dc IMG | dd of=LOOP bs=1M oflag=direct` (and `xz -dc`), onto the same
# loop device in the same run. The pipeline is given iflag=fullblock (whole 1 MiB writes, not
# the pipe's 64 KiB pieces) and conv=fsync (it ends synced, as the agent does): the strongest
# form of the reference. Best of N runs each, alternating; prints MiB/s and the ratio agent /
# reference (target >= 1.0).
# The image: SIZE_MIB MiB (default 512) of which three quarters are real files (/usr, as a tar
# stream) and the rest zeros, which compresses about as an OS image does.
# Needs root, losetup, partx, zstd, xz, tar, sha256sum, bc.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-3}
SIZE_MIB=${SIZE_MIB:-512}
cargo build --release --locked --quiet
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

img=$work/os.img
truncate -s "${SIZE_MIB}M" "$img"
(tar cf - /usr 2>/dev/null || true) | head -c $((SIZE_MIB * 3 / 4 * 1048576)) \
    | dd of="$img" conv=notrunc bs=1M iflag=fullblock status=none
zstd -q -T0 -f "$img" -o "$img.zst"
xz -q -T0 -3 -k -f "$img"
truncate -s $((SIZE_MIB + 64))M "$work/disk"
dev=$(losetup -f --show "$work/disk")

now() { date +%s.%N; }
best() { # best BEST_SO_FAR NEW: the smaller
    if [ -z "$1" ] || [ "$(echo "$2 < $1" | bc -l)" = 1 ]; then echo "$2"; else echo "$1"; fi
}
mibs() { echo "scale=1; $SIZE_MIB / $1" | bc -l; }

for fmt in zst xz; do
    file=$img.$fmt
    hash=sha256-$(sha256sum "$file" | cut -d' ' -f1)
    tool=zstd
    [ "$fmt" = xz ] && tool=xz
    a_best="" r_best=""
    for _ in $(seq "$N"); do
        t0=$(now)
        "$AGENT" -q install "$dev" --image-file "$file" --image-hash "$hash" --overwrite \
            --state-dir "$work" >/dev/null
        t1=$(now)
        a_best=$(best "$a_best" "$(echo "$t1 - $t0" | bc -l)")
        # The agent told the kernel about the image's partitions: drop them for dd.
        partx -d "$dev" >/dev/null 2>&1 || true
        t0=$(now)
        $tool -dc "$file" | dd of="$dev" bs=1M oflag=direct iflag=fullblock conv=fsync status=none
        t1=$(now)
        r_best=$(best "$r_best" "$(echo "$t1 - $t0" | bc -l)")
    done
    a=$(mibs "$a_best")
    r=$(mibs "$r_best")
    echo "$fmt image ($(stat -c %s "$file") bytes compressed, $SIZE_MIB MiB raw), best of $N:"
    echo "  agent install (decompress + sha256 + O_DIRECT write): $a MiB/s"
    echo "  $tool -dc | dd bs=1M oflag=direct:                     $r MiB/s"
    echo "  ratio agent / reference: $(echo "scale=2; $r_best / $a_best" | bc -l) (target >= 1.0)"
done
