#!/bin/bash
# Installs what the VM tests need, idempotently, without disturbing the host:
#  - qemu-system-x86 from bookworm-backports (the image's qemu-utils comes from there; the
#    bookworm QEMU would downgrade/remove it);
#  - dracut-core (not `dracut`, which conflicts with initramfs-tools) and its dependency udev,
#    installed with service starts refused: a udev daemon on the host would re-read partition
#    tables behind the other tests' backs;
#  - the tools the agent's stages call, copied into the initramfs by our dracut module (mdadm,
#    cryptsetup, clevis and its tpm2 pin for RAID/LUKS), tang (a tang server for 09-luks-tang)
#    and swtpm (a software TPM for the tpm2 scenarios); ipxe-qemu (the iPXE ROM of QEMU's
#    virtio-net-pci, for network boot; a dependency of qemu-system-x86 too); GRUB for BIOS
#    for os-image.sh (grub-pc-bin: the i386-pc modules and boot.img; grub-common: grub-mkimage;
#    unlike grub-pc, neither installs a boot loader on the host);
#  - Debian's cloud kernel, unpacked (never installed) under $VM_CACHE/kernel.
# Prints the kernel release it prepared on the last line of stdout.
set -euo pipefail

VM_CACHE=${VM_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/target/vm}
mkdir -p "$VM_CACHE"

log() { echo "setup: $*" >&2; }

need_update=
if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    log "adding bookworm-backports"
    cat >/etc/apt/sources.list.d/agent-vm-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    need_update=1
fi

pkgs_main="dracut-core udev kmod cpio lz4 zstd e2fsprogs dosfstools xfsprogs btrfs-progs
    util-linux fdisk gdisk passwd policycoreutils file mtools socat
    mdadm cryptsetup-bin clevis clevis-luks jose curl tang libpwquality-tools cracklib-runtime
    clevis-tpm2 tpm2-tools swtpm
    xorriso genisoimage ipxe-qemu grub-pc-bin grub-common xz-utils"
missing=()
for p in $pkgs_main; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
have_qemu=
dpkg-query -W -f='${Status}' qemu-system-x86 2>/dev/null | grep -q 'install ok installed' && have_qemu=1

if [[ ${#missing[@]} -gt 0 || -z $have_qemu ]]; then
    if [[ -n $need_update || ! -e /var/lib/apt/lists/lock ]] || \
        ! ls /var/lib/apt/lists/ | grep -q backports; then
        apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    fi
    # Refuse service starts for the duration (udev's postinst would start udevd).
    policy=/usr/sbin/policy-rc.d
    made_policy=
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        made_policy=1
    fi
    trap '[[ -n $made_policy ]] && rm -f "$policy"' EXIT
    export DEBIAN_FRONTEND=noninteractive
    if [[ ${#missing[@]} -gt 0 ]]; then
        log "installing ${missing[*]}"
        apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >&2
    fi
    if [[ -z $have_qemu ]]; then
        log "installing qemu-system-x86 from bookworm-backports"
        apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends -t bookworm-backports \
            qemu-system-x86 >&2
    fi
fi

# The kernel: newest linux-image-*-cloud-amd64 that the metapackage points at.
kpkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
    awk '/Depends: linux-image-/ {print $2; exit}')
if [[ -z $kpkg ]]; then
    apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    kpkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
fi
kver=${kpkg#linux-image-}
kdir=$VM_CACHE/kernel/$kver
if [[ ! -e $kdir/.done ]]; then
    log "unpacking $kpkg into $kdir"
    rm -rf "$kdir"
    mkdir -p "$kdir"
    (cd "$VM_CACHE" && rm -f "$kpkg"_*.deb && apt-get download "$kpkg" >&2)
    dpkg -x "$VM_CACHE/$kpkg"_*.deb "$kdir"
    rm -f "$VM_CACHE/$kpkg"_*.deb
    # Debian ships modules under /lib/modules (usrmerge: maybe /usr/lib/modules).
    moddir=$kdir/lib/modules/$kver
    [[ -d $moddir ]] || moddir=$kdir/usr/lib/modules/$kver
    depmod -b "${moddir%/lib/modules/$kver}" "$kver"
    touch "$kdir/.done"
fi
echo "$kver"
