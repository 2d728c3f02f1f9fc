#!/bin/bash
# Builds an initramfs with dracut and our module for a kernel.
#   vm-tests/initramfs.sh [--variant agent|test|reference] [KVER]
#     agent      base systemd initramfs + the agent module  -> $VM_CACHE/initrd-agent.img
#     test       + the vm-tests hook (report, power off)     -> $VM_CACHE/initrd-agent-test.img
#     reference  the same initramfs without the agent       -> $VM_CACHE/initrd-reference.img
# KVER defaults to Debian's cloud kernel unpacked by setup.sh under $VM_CACHE/kernel/; another
# KVER uses /lib/modules/KVER. INITRAMFS_OUT=FILE writes the image there instead (os-image.sh).
# Prints the image path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
VM_CACHE=${VM_CACHE:-$top/target/vm}
AGENT_BIN=${AGENT_BIN:-$top/target/x86_64-unknown-linux-gnu/release/agent}
variant=agent
if [[ ${1:-} == --variant ]]; then variant=$2; shift 2; fi
kver=${1:-}
if [[ -z $kver ]]; then
    kver=$("$here/setup.sh" | tail -n1)
fi
kroot=$VM_CACHE/kernel/$kver
if [[ -d $kroot ]]; then
    kmoddir=$kroot/lib/modules/$kver
    [[ -d $kmoddir ]] || kmoddir=$kroot/usr/lib/modules/$kver
else
    kmoddir=/lib/modules/$kver
fi
[[ -d $kmoddir ]] || { echo "initramfs: no modules for $kver ($kmoddir)" >&2; exit 1; }

out=$VM_CACHE/initrd-$variant.img
[[ $variant == test ]] && out=$VM_CACHE/initrd-agent-test.img
out=${INITRAMFS_OUT:-$out}

# dracut reads its modules from $dracutbasedir: a copy of the host's, plus ours (one per
# output: builds of different images may run at the same time).
base=$out.dracut-base
rm -rf "$base"
cp -a /usr/lib/dracut "$base"
"$top/dracut/stage-module.sh" "$base/modules.d/30agent"
cp -a "$here/dracut/99agent-test" "$base/modules.d/99agent-test"

modules="base systemd systemd-initrd dracut-systemd udev-rules"
case $variant in
    agent) modules+=" agent" ;;
    test) modules+=" agent agent-test" ;;
    reference) ;;
    *) echo "initramfs: unknown variant $variant" >&2; exit 2 ;;
esac
if ! dracutbasedir=$base AGENT_BIN=$AGENT_BIN dracut --force --no-hostonly \
    --no-hostonly-cmdline --no-early-microcode --reproducible --compress zstd \
    --kver "$kver" --kmoddir "$kmoddir" --modules "$modules" \
    --add-drivers "virtio_blk virtio_pci virtio_rng" "$out" >"$out.log" 2>&1; then
    tail -n 30 "$out.log" >&2
    echo "initramfs: dracut failed (log: $out.log)" >&2
    exit 1
fi
rm -rf "$base"
echo "$out"
