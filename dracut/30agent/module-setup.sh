#!/bin/bash
# dracut module for the agent: the static binary, the tools its stages call, the initramfs units
# and the generator that enables them on first boot only.
# Sources: the module directory holds the scripts; units come from $moddir/units (make install
# and the test harness copy systemd/initrd/*.{service,target} there); the binary from
# $AGENT_BIN (harness) or /usr/bin/agent (installed).

check() {
    # Only when asked for (dracut -a agent / add_dracutmodules+=" agent ").
    return 255
}

depends() {
    echo systemd systemd-initrd udev-rules
}

installkernel() {
    # fw_cfg for the qemu platform, filesystems and block layers the disks stage may create.
    hostonly='' instmods -c qemu_fw_cfg
    hostonly='' instmods ext4 xfs btrfs vfat nls_cp437 nls_iso8859-1 nls_ascii \
        md_mod raid0 raid1 raid10 raid456 dm_crypt virtio_net
    # The virtual devices of the kernel command line's bond=, vlan= and bridge=
    # (agent network-generate).
    hostonly='' instmods bonding 8021q bridge
    # Config drives and seed disks (platform/drive.rs): their filesystems and the CD-ROM stack
    # (IDE and virtio-scsi CD-ROMs).
    hostonly='' instmods iso9660 isofs udf vfat nls_utf8 nls_cp437 nls_iso8859-1 sr_mod cdrom \
        ata_piix virtio_scsi
    # LUKS2: dm-crypt's default cipher (aes-xts-plain64) and the kernel crypto API cryptsetup uses.
    hostonly='' instmods dm_mod xts aesni_intel algif_skcipher af_alg
    # clevis's tpm2 pin: the TPM drivers (TIS on QEMU's tpm-tis and most PCs, CRB on newer
    # firmware TPMs; built into Debian's cloud kernel, modules in Fedora's), as in FCOS's initramfs.
    hostonly='' instmods tpm_tis tpm_crb
    # Hypervisor channels (modules absent from a kernel or architecture are skipped):
    # VirtualBox guest properties, Hyper-V KVP, vsock (applehv), z/VM reader, BlueField bootfifo.
    hostonly='' instmods vboxguest hv_vmbus hv_utils vsock vmw_vsock_virtio_transport \
        vmur vmcp mlxbf_bootctl
}

install() {
    local bin=${AGENT_BIN:-}
    [[ -n $bin ]] || for bin in /usr/bin/agent /usr/local/bin/agent; do [[ -x $bin ]] && break; done
    [[ -x $bin ]] || { dfatal "agent: binary $bin not found"; return 1; }
    inst_simple "$bin" /usr/bin/agent

    inst_script "$moddir/agent-generator" "$systemdutildir/system-generators/agent-generator"
    inst_script "$moddir/agent-stage" /usr/lib/agent/agent-stage
    inst_script "$moddir/agent-setup-user" /usr/lib/agent/agent-setup-user
    inst_script "$moddir/agent-network-up" /usr/lib/agent/agent-network-up
    inst_script "$moddir/agent-firstboot-done" /usr/lib/agent/agent-firstboot-done
    inst_hook emergency 90 "$moddir/agent-emergency.sh"
    inst_hook shutdown-emergency 90 "$moddir/agent-emergency.sh"

    local u
    for u in "$moddir"/units/*.service "$moddir"/units/*.target; do
        inst_simple "$u" "$systemdsystemunitdir/${u##*/}"
    done

    # Exactly the tools something in the initramfs runs (checked against src/ by
    # tests/dracut/main.rs): the agent (util::run: mkfs.{ext4,xfs,btrfs,fat}, mkswap, wipefs,
    # mdadm, cryptsetup, clevis, setfiles, the useradd family, udevadm, modprobe; systemctl for
    # the reboot after `agent install --from-kargs`), the units and
    # scripts (udevadm, mount, umount, modprobe, sync, mkdir, rm, tail). No relabelling or
    # partitioning tools: the agent writes GPT itself and reads filesystems with libblkid.
    inst_multiple -o \
        mkfs.ext4 mkfs.xfs mkfs.btrfs mkfs.fat mkswap wipefs mdadm cryptsetup setfiles \
        useradd usermod userdel groupadd groupmod groupdel udevadm mount umount \
        modprobe sync grep cut tail mkdir rm systemctl
    # RAID/LUKS: dmsetup for the dm rules; udev rules that name /dev/md/<name> and
    # /dev/mapper/<name> and release libdevmapper's udev cookie (without 95-dm-notify
    # cryptsetup waits for udev forever). No auto-assembly rules: the agent assembles itself.
    inst_multiple -o dmsetup
    inst_rules 10-dm.rules 13-dm-disk.rules 55-dm.rules 60-persistent-storage-dm.rules \
        95-dm-notify.rules 63-md-raid-arrays.rules
    # clevis bindings (tang/tpm2/sss) of LUKS volumes, when the build host has clevis: what
    # `clevis luks bind` and `clevis luks unlock` run (clevis-luks-common-functions, the pins;
    # jose, curl for tang, pwmake for the new passphrase, luksmeta for LUKS1 volumes, and the
    # shell tools the scripts call).
    inst_multiple -o \
        clevis clevis-decrypt clevis-decrypt-sss clevis-decrypt-tang clevis-decrypt-tpm2 \
        clevis-encrypt-sss clevis-encrypt-tang clevis-encrypt-tpm2 clevis-luks-bind \
        clevis-luks-common-functions clevis-luks-unlock \
        jose curl pwmake luksmeta bash sed awk sort mktemp basename tr cat \
        /etc/security/pwquality.conf /var/cache/cracklib/cracklib_dict.hwm \
        /var/cache/cracklib/cracklib_dict.pwd /var/cache/cracklib/cracklib_dict.pwi
    # The tpm2 pin (clevis-tpm2, tpm2-tools): the tpm2_* programs clevis-{en,de}crypt-tpm2 run
    # (symlinks to the multi-call `tpm2`) and the TCTI they load with dlopen, which dracut's
    # library resolution cannot see: clevis sets TPM2TOOLS_TCTI=device:/dev/tpmrm0 (no
    # resource manager daemon), so libtss2-tctildr opens libtss2-tcti-device.
    inst_multiple -o \
        tpm2 tpm2_createprimary tpm2_create tpm2_createpolicy tpm2_load tpm2_unseal \
        tpm2_flushcontext tpm2_pcrread
    inst_libdir_file 'libtss2-tcti-device.so*'
    # zvm: the s390-tools that read the z/VM reader.
    inst_multiple -o vmur chccwdev cio_ignore
    # mke2fs reads its defaults from here.
    inst_multiple -o /etc/mke2fs.conf

    # Network for the online fetch, started only by agent-network-up (never enabled).
    if [[ -x $systemdutildir/systemd-networkd ]]; then
        inst_multiple -o \
            "$systemdutildir"/systemd-networkd \
            "$systemdutildir"/systemd-networkd-wait-online \
            "$systemdsystemunitdir"/systemd-networkd.service \
            "$systemdsystemunitdir"/systemd-networkd.socket \
            "$systemdsystemunitdir"/systemd-networkd-wait-online.service
        # The DHCP default, under /usr/lib so that agent network-generate can mask it from /run.
        inst_simple "$moddir/99-agent-dhcp.network" "$systemdutildir/network/99-agent-dhcp.network"
        # networkd drops its privileges to this user.
        grep -q '^systemd-network:' "$initdir/etc/passwd" 2>/dev/null ||
            echo 'systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin' \
                >>"$initdir/etc/passwd"
        grep -q '^systemd-network:' "$initdir/etc/group" 2>/dev/null ||
            echo 'systemd-network:x:998:' >>"$initdir/etc/group"
    fi
}
