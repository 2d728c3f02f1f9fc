#!/bin/bash
# Builds a small OS image that boots from its own disk (BIOS: SeaBIOS, GRUB i386-pc) with the
# agent's first boot, from Debian's packages (apt-get download + dpkg -x: nothing is installed
# on the host but the tools of .ci/packages/vm.apt).
#
#   vm-tests/os-image.sh [--platform ID] [--append ARGS] [--config FILE] OUTDIR
#
#     --platform ID   the platform on the kernel command line (agent.platform.id= and
#                     ignition.platform.id=; default metal)
#     --append ARGS   more kernel arguments (e.g. "rd.emergency=poweroff rd.shell=0")
#     --config FILE   put FILE at ignition/config.ign on the boot partition (what
#                     `agent install` and coreos-installer do after writing the image)
#
# Writes OUTDIR/os.img (raw), os.img.zst, os.img.xz and SHA256SUMS, SHA512SUMS (all three), and
# OUTDIR/layout.env (partition offsets, for tests and installers).
#
# The disk (GPT, 512-byte sectors):
#   1 BIOS-BOOT  1 MiB at 1 MiB   GRUB's core.img (BIOS boot partition type); sector 0 holds
#                                 GRUB's boot.img in the protective MBR
#   2 boot       ext4, label boot kernel (vmlinuz), initramfs.img (dracut + the agent's module),
#                                 grub/grub.cfg, the first-boot stamp agent.firstboot and, once
#                                 installed, ignition/config.ign
#   3 root       ext4, label root systemd 252 with its libraries and busybox; the units
#                                 os-image-up.service (prints OS-IMAGE-UP on the console),
#                                 os-image-net.service (DHCP with busybox udhcpc on the first
#                                 ethernet link, virtio_net from the root's modules, when a
#                                 unit wants network-online.target) and os-image-done.service
#                                 (after multi-user.target, where the agent's
#                                 agent-report.service and agent-report-running.service run:
#                                 prints OS-IMAGE-DONE, then powers off)
# First boot: GRUB adds `agent.firstboot` to the command line while the boot partition has
# the stamp file agent.firstboot; the agent's agent-firstboot-done removes it once
# provisioning succeeded, so later boots do not provision again.
#
# Environment: VM_CACHE (default target/vm: the kernel, the .deb cache os-debs/), AGENT_BIN.
# No loop device and no mount: each filesystem is made in a file (mke2fs -d) and copied in.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
export VM_CACHE=${VM_CACHE:-$top/target/vm}
export AGENT_BIN=${AGENT_BIN:-$top/target/x86_64-unknown-linux-gnu/release/agent}

log() { echo "os-image: $*" >&2; }
die() { log "error: $*"; exit 1; }

platform=metal append= config=
while [[ $# -gt 1 ]]; do
    case $1 in
        --platform) platform=$2; shift 2 ;;
        --append) append=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        *) die "unknown option $1 (usage: os-image.sh [--platform ID] [--append ARGS] [--config FILE] OUTDIR)" ;;
    esac
done
[[ $# -eq 1 && $1 != -* ]] || die "usage: os-image.sh [--platform ID] [--append ARGS] [--config FILE] OUTDIR"
[[ $platform =~ ^[A-Za-z0-9_.-]+$ ]] || die "--platform: '$platform' is not a platform name"
[[ -z $config || -f $config ]] || die "--config: $config is not a file"
for t in grub-mkimage sfdisk mke2fs debugfs dpkg apt-get zstd xz readelf; do
    command -v "$t" >/dev/null || die "$t missing (.ci/install-packages all, or vm-tests/setup.sh)"
done
grubdir=/usr/lib/grub/i386-pc
[[ -r $grubdir/boot.img ]] || die "$grubdir/boot.img missing (apt-get install grub-pc-bin)"
[[ -x $AGENT_BIN ]] || die "agent binary $AGENT_BIN missing (make static)"

out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
t_start=$(date +%s.%N)
work=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- kernel and initramfs ---------------------------------------------------------------------
kver=$("$here/setup.sh" | tail -n1)
kroot=$VM_CACHE/kernel/$kver
kernel=$kroot/boot/vmlinuz-$kver
[[ -r $kernel ]] || die "kernel $kernel missing"
mkdir -p "$work/boot/grub"
# The initramfs is cached by what goes into it: the agent binary, the module and its units, the
# build script and the kernel (a rebuild takes 15-50 s on a loaded machine).
key=$( (sha256sum "$AGENT_BIN" "$top"/dracut/30agent/* "$top"/dracut/stage-module.sh \
    "$top"/systemd/initrd/* "$here/initramfs.sh"; echo "$kver"; dracut --version 2>/dev/null || true) |
    sha256sum | cut -c1-16)
initrd_cache=$VM_CACHE/os-initrd/initramfs-$key.img
if [[ ! -s $initrd_cache ]]; then
    mkdir -p "$VM_CACHE/os-initrd"
    rm -f "$VM_CACHE"/os-initrd/initramfs-*.img
    # Scenarios building images at the same time each build their own copy (this process's
    # id); the last rename wins, and every copy is the same.
    tmp=$initrd_cache.tmp.$$
    INITRAMFS_OUT=$tmp "$here/initramfs.sh" --variant agent "$kver" >/dev/null ||
        die "building the initramfs failed (log: $tmp.log)"
    mv "$tmp" "$initrd_cache"
    rm -rf "$tmp.log" "$tmp.dracut-base"
else
    log "initramfs from the cache: $initrd_cache"
fi
cp "$initrd_cache" "$work/boot/initramfs.img"
cp "$kernel" "$work/boot/vmlinuz"
t_initrd=$(date +%s.%N)

# --- the root's packages ----------------------------------------------------------------------
# systemd and the libraries its programs link (checked below), mount (systemd's mount units run
# it), busybox for /bin/sh and the few tools the units run. No udev, no kernel modules, no
# login: the image boots, runs its units and powers off.
root_pkgs="systemd libsystemd-shared libsystemd0 libc6 libgcc-s1 libacl1 libapparmor1 libaudit1
    libcap-ng0 libcap2 libcrypt1 libgcrypt20 libgpg-error0 libip4tc2 libkmod2 liblz4-1 liblzma5
    libmount1 libblkid1 libpam0g libpcre2-8-0 libseccomp2 libselinux1 libssl3 libzstd1
    mount libsmartcols1 busybox"
debs=$VM_CACHE/os-debs
mkdir -p "$debs"
missing=()
for p in $root_pkgs; do
    compgen -G "$debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    log "downloading ${missing[*]}"
    (cd "$debs" && apt-get download -q "${missing[@]}" >&2) ||
        die "apt-get download failed (apt-get update first?)"
fi
root=$work/root
mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/usr/lib64"
stage=$work/stage
mkdir -p "$stage"
for p in $root_pkgs; do
    # The newest cached version of each.
    deb=$(ls -v "$debs/${p}"_*.deb | tail -n1)
    dpkg -x "$deb" "$stage"
done
# Merged /usr: the packages' /bin, /sbin, /lib and /lib64 go under /usr.
for d in bin sbin lib lib64; do
    if [[ -d $stage/$d && ! -L $stage/$d ]]; then
        cp -a "$stage/$d/." "$root/usr/$d/"
        rm -rf "${stage:?}/$d"
    fi
    ln -s "usr/$d" "$root/$d"
done
cp -a "$stage/." "$root/"
rm -rf "$stage"
# What nothing here reads: documentation, translations, charset converters, shell completions.
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bash-completion,zsh,bug} \
    "$root"/usr/lib/x86_64-linux-gnu/gconv
# Presets: systemd applies them at its first boot (no /etc/machine-id), enabling only. Debian's
# would enable what this image does not have (getty, networkd, timesyncd); no preset at all
# means "enable everything". Ours: the image's units, then nothing else. The agent's files stage
# adds the config's (20-ignition.preset), which come first.
rm -rf "$root"/usr/lib/systemd/system-preset
mkdir -p "$root"/usr/lib/systemd/system-preset
printf 'enable os-image-up.service\nenable os-image-done.service\nenable os-image-net.service\ndisable *\n' \
    >"$root/usr/lib/systemd/system-preset/99-os-image.preset"
# Generators for what the image has not (LUKS, dm-verity/integrity, hibernation, GPT
# auto-discovery, SysV scripts, rc.local): each is one more program run at every boot.
rm -f "$root"/usr/lib/systemd/system-generators/systemd-{cryptsetup,veritysetup,integritysetup,hibernate-resume,gpt-auto,sysv,rc-local}-generator
for a in sh rm cat uname cut mkdir ls sleep echo grep tr ip udhcpc modprobe; do
    ln -s busybox "$root/usr/bin/$a"
done
ln -s ../lib/systemd/systemd "$root/usr/sbin/init"
# Every library the programs the boot runs need is in the root (they fail at boot otherwise).
libdirs=("$root/usr/lib/x86_64-linux-gnu" "$root/usr/lib/x86_64-linux-gnu/systemd" "$root/usr/lib64" "$root/usr/lib")
check_libs() { # ELF...
    local f lib d found
    for f in "$@"; do
        [[ -e $f ]] || die "the root lacks ${f#"$root"}"
        for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            found=
            for d in "${libdirs[@]}"; do [[ -e $d/$lib ]] && { found=1; break; }; done
            [[ -n $found ]] || die "${f#"$root"} needs $lib, which no package of the root provides"
        done
    done
}
check_libs "$root"/usr/lib/systemd/{systemd,systemd-journald,systemd-shutdown} "$root"/usr/bin/{systemd-sysusers,systemd-tmpfiles} "$root"/usr/lib/x86_64-linux-gnu/systemd/*.so \
    "$root"/usr/bin/{systemctl,busybox,journalctl,mount,umount} "$root"/usr/lib/x86_64-linux-gnu/lib*.so.*

# /etc: users and groups systemd's units name (systemd-sysusers adds the rest at first boot),
# no /etc/machine-id (systemd's first boot: it makes one and applies the presets).
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
adm:x:4:
tty:x:5:
disk:x:6:
kmem:x:15:
utmp:x:43:
systemd-journal:x:999:
nogroup:x:65534:
EOF
printf 'root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n' >"$root/etc/shadow"
chmod 0640 "$root/etc/shadow"
cat >"$root/usr/lib/os-release" <<'EOF'
PRETTY_NAME="agent test OS image (Debian 12 packages)"
NAME="agent-os-image"
ID=agent-os-image
ID_LIKE=debian
VERSION_ID=12
EOF
ln -sf ../usr/lib/os-release "$root/etc/os-release"
mkdir -p "$root"/{dev,proc,sys,run,tmp,root,var/tmp,var/log,boot,etc/systemd/system/multi-user.target.wants}
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"
: >"$root/etc/fstab"

mkdir -p "$root/usr/lib/os-image"
cat >"$root/usr/lib/os-image/os-image-up" <<'EOF'
#!/bin/sh
# The switched-to root is up: one line on the console for the test harness.
provisioned=no
[ -e /var/log/agent/agent.log ] && provisioned=yes
echo "OS-IMAGE-UP boot_id=$(cat /proc/sys/kernel/random/boot_id) kernel=$(uname -r)" \
    "uptime_s=$(cut -d' ' -f1 /proc/uptime) agent_log=$provisioned" >/dev/console
EOF
cat >"$root/usr/lib/os-image/os-image-done" <<'EOF'
#!/bin/sh
# After multi-user.target (the agent's agent-report.service and the config's units ran):
# what the agent's report unit did, then power off.
state() { # UNIT: none, or its ActiveState/Result
    if [ "$(systemctl show -p LoadState --value "$1")" = not-found ]; then
        echo none
    else
        r=$(systemctl show -p ActiveState,Result --value "$1" | tr '\n' '/')
        echo "${r%/}"
    fi
}
echo "OS-IMAGE-DONE agent-report=$(state agent-report.service)" \
    "agent-report-running=$(state agent-report-running.service)" \
    "uptime_s=$(cut -d' ' -f1 /proc/uptime)" >/dev/console
# (systemctl poweroff would ask logind first, over D-Bus, which the image has not.)
systemctl --no-block start --job-mode=replace-irreversibly poweroff.target
EOF
cat >"$root/usr/lib/os-image/os-image-net" <<'EOF'
#!/bin/sh
# The network, as an installed OS brings it up: DHCP on the first ethernet link (QEMU's user
# network: 10.0.2.15, the router 10.0.2.2).
[ -e /sys/module/virtio_net ] || modprobe virtio_net
d=
for i in 1 2 3 4 5 6 7 8 9 10; do
    for d in /sys/class/net/e*; do [ -e "$d" ] && break 2; done
    sleep 0.5
done
[ -e "$d" ] || { echo "os-image-net: no ethernet link" >/dev/console; exit 1; }
dev=${d##*/}
ip link set "$dev" up
udhcpc -i "$dev" -n -q -t 10 -s /usr/lib/os-image/udhcpc.script
echo "OS-IMAGE-NET $dev $(ip -4 -o addr show dev "$dev" | tr -s ' ' | cut -d' ' -f4)" >/dev/console
EOF
cat >"$root/usr/lib/os-image/udhcpc.script" <<'EOF'
#!/bin/sh
# busybox udhcpc's hook: the lease's address and default route on $interface.
case $1 in
    deconfig) ip -4 addr flush dev "$interface"; ip link set "$interface" up ;;
    bound | renew)
        ip -4 addr flush dev "$interface"
        ip addr add "$ip/${mask:-24}" dev "$interface"
        [ -z "$router" ] || ip route replace default via "${router%% *}" dev "$interface" ;;
esac
EOF
chmod 0755 "$root"/usr/lib/os-image/*
cat >"$root/etc/systemd/system/os-image-up.service" <<'EOF'
[Unit]
Description=Report on the console that the root is up
After=sysinit.target

[Service]
Type=oneshot
ExecStart=/usr/lib/os-image/os-image-up

[Install]
WantedBy=multi-user.target
EOF
cat >"$root/etc/systemd/system/os-image-net.service" <<'EOF'
[Unit]
Description=DHCP on the first ethernet link (busybox udhcpc)
DefaultDependencies=no
After=sysinit.target
Before=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/os-image/os-image-net

[Install]
WantedBy=network-online.target
EOF
cat >"$root/etc/systemd/system/os-image-done.service" <<'EOF'
[Unit]
Description=Report on the console, then power off
After=multi-user.target os-image-up.service agent-report.service agent-report-running.service

[Service]
Type=oneshot
ExecStart=/usr/lib/os-image/os-image-done

[Install]
WantedBy=multi-user.target
EOF
for u in os-image-up.service os-image-done.service; do
    ln -s "/etc/systemd/system/$u" "$root/etc/systemd/system/multi-user.target.wants/$u"
done
mkdir -p "$root/etc/systemd/system/network-online.target.wants"
ln -s /etc/systemd/system/os-image-net.service \
    "$root/etc/systemd/system/network-online.target.wants/os-image-net.service"
# virtio_net and what it needs, from the test kernel's modules (busybox modprobe reads
# modules.dep).
mdir=lib/modules/$kver
for m in net/core/failover.ko drivers/net/net_failover.ko drivers/net/virtio_net.ko; do
    mkdir -p "$root/usr/$mdir/kernel/$(dirname "$m")"
    cp "$kroot/$mdir/kernel/$m" "$root/usr/$mdir/kernel/$m"
done
depmod -b "$root/usr" "$kver" || die "depmod failed"
ln -s /usr/lib/systemd/system/multi-user.target "$root/etc/systemd/system/default.target"
# Nothing to log in with, no D-Bus, no udev: the login prompt, logind and the interactive
# first-boot wizard would only wait.
for u in getty.target systemd-logind.service systemd-firstboot.service; do
    ln -s /dev/null "$root/etc/systemd/system/$u"
done

# --- the boot partition: GRUB's config, the stamp, the config ------------------------------------
args="root=LABEL=root rw console=ttyS0,115200n8 loglevel=4 agent.platform.id=$platform ignition.platform.id=$platform"
[[ -z $append ]] || args+=" $append"
cat >"$work/boot/grub/grub.cfg" <<EOF
# The agent's first boot: agent.firstboot while the stamp file is on this partition
# (agent-firstboot-done in the initramfs removes it once provisioning succeeded).
set timeout=0
# GRUB's own lines straight to the first serial port as well as the screen.
serial --unit=0 --speed=115200
terminal_output console serial
set agent_firstboot=
if [ -f (\$root)/agent.firstboot ]; then set agent_firstboot=agent.firstboot; fi
echo "os-image: booting with \$agent_firstboot"
linux (\$root)/vmlinuz $args \$agent_firstboot
initrd (\$root)/initramfs.img
boot
EOF
echo "Written by os-image.sh: the next boot provisions with the agent." >"$work/boot/agent.firstboot"
if [[ -n $config ]]; then
    mkdir -p "$work/boot/ignition"
    cp "$config" "$work/boot/ignition/config.ign"
fi

# GRUB's core image: finds the boot partition by label, reads grub/grub.cfg there.
cat >"$work/early.cfg" <<'EOF'
search --no-floppy --label boot --set root
set prefix=($root)/grub
EOF
grub-mkimage -O i386-pc -d "$grubdir" -o "$work/core.img" -c "$work/early.cfg" -p /grub \
    biosdisk part_gpt ext2 search search_label normal linux boot test echo serial terminal ||
    die "grub-mkimage failed"

# --- filesystems and the disk --------------------------------------------------------------------
mib() { echo $(( ($(du -s --apparent-size -B1 "$1" | cut -f1) + 1048575) / 1048576 )); }
boot_mib=$(( $(mib "$work/boot") * 5 / 4 + 16 ))
root_mib=$(( $(mib "$root") * 5 / 4 + 48 ))
core_sectors=$(( ($(stat -c %s "$work/core.img") + 511) / 512 ))
[[ $core_sectors -le 2048 ]] || die "core.img is $core_sectors sectors, more than the 1 MiB BIOS boot partition"
# GRUB 2.06 refuses ext4 with metadata_csum_seed; no other feature of Debian's defaults matters.
mkfs() { # LABEL DIR FILE MIB
    mke2fs -q -F -t ext4 -b 4096 -L "$1" -O ^metadata_csum_seed -E root_owner=0:0 -d "$2" "$3" "${4}M" \
        >"$work/mke2fs.log" 2>&1 || die "mke2fs of $1 failed: $(tail -n3 "$work/mke2fs.log")"
}
mkfs boot "$work/boot" "$work/boot.fs" "$boot_mib"
mkfs root "$root" "$work/root.fs" "$root_mib"

bb_start=2048 bb_size=2048
boot_start=$((bb_start + bb_size)) boot_size=$((boot_mib * 2048))
root_start=$((boot_start + boot_size)) root_size=$((root_mib * 2048))
total=$((root_start + root_size + 2048))
img=$out/os.img
rm -f "$img"
truncate -s $((total * 512)) "$img"
sfdisk -q --no-reread --no-tell-kernel "$img" <<EOF || die "sfdisk failed"
label: gpt
start=$bb_start, size=$bb_size, type=21686148-6449-6E6F-744E-656564454649, name="BIOS-BOOT"
start=$boot_start, size=$boot_size, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="boot"
start=$root_start, size=$root_size, type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, name="root"
EOF
dd if="$work/boot.fs" of="$img" bs=1M seek=$((boot_start / 2048)) conv=notrunc,sparse status=none
dd if="$work/root.fs" of="$img" bs=1M seek=$((root_start / 2048)) conv=notrunc,sparse status=none

# GRUB as grub-install sets it up: boot.img's code in sector 0 (the partition table stays),
# pointing at core.img's first sector (offset 0x5c), the drive check replaced by NOPs (0x66: a
# hard disk); core.img in the BIOS boot partition, its first sector's block list (the last 12
# bytes: start, 64-bit) pointing at the rest of it.
python3 - "$img" "$grubdir/boot.img" "$work/core.img" "$bb_start" <<'EOF'
import struct, sys
img, boot_img, core_img, start = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
boot = bytearray(open(boot_img, "rb").read())
core = bytearray(open(core_img, "rb").read())
assert len(boot) == 512, "boot.img is not one sector"
struct.pack_into("<Q", boot, 0x5C, start)
boot[0x66:0x68] = b"\x90\x90"
first, length = struct.unpack_from("<QH", core, 512 - 12)
assert first == 2 and length == (len(core) + 511) // 512 - 1, (first, length)
struct.pack_into("<Q", core, 512 - 12, start + 1)
with open(img, "r+b") as f:
    f.seek(0)
    f.write(boot[:440])
    f.seek(start * 512)
    f.write(core)
EOF

cat >"$out/layout.env" <<EOF
# os.img's partitions, in 512-byte sectors (start, size).
KERNEL_RELEASE=$kver
PLATFORM=$platform
BIOSBOOT_START=$bb_start BIOSBOOT_SIZE=$bb_size
BOOT_START=$boot_start BOOT_SIZE=$boot_size
ROOT_START=$root_start ROOT_SIZE=$root_size
EOF
t_img=$(date +%s.%N)
# Fast levels: most of the image is the kernel (lz4) and the initramfs (zstd), which do not
# compress again (xz -6 gains 2 % over -0 and takes minutes on a loaded machine).
zstd -q -f -T2 -6 "$img" -o "$img.zst" &
zpid=$!
xz -q -f -k -T2 -0 "$img"
wait "$zpid"
(cd "$out" && sha256sum os.img os.img.zst os.img.xz >SHA256SUMS && sha512sum os.img os.img.zst os.img.xz >SHA512SUMS)
t_end=$(date +%s.%N)
calc() { awk "BEGIN { printf \"%.1f\", $* }"; }
log "built in $(calc "$t_end - $t_start") s (initramfs $(calc "$t_initrd - $t_start") s, root and disk $(calc "$t_img - $t_initrd") s, compression $(calc "$t_end - $t_img") s)"
log "os.img $((total / 2048)) MiB (boot $boot_mib MiB, root $root_mib MiB; $(( $(du -B1 "$img" | cut -f1) / 1048576 )) MiB allocated)," \
    "os.img.zst $(( $(stat -c %s "$img.zst") / 1024 )) KiB, os.img.xz $(( $(stat -c %s "$img.xz") / 1024 )) KiB"
echo "$img"
