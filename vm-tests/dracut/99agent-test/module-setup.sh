#!/bin/bash
# Test-only dracut module (vm-tests): there is no real OS on the test disk, so instead of
# switching root the guest reports the provisioning time and powers off once the agent's
# stages are complete. Never install this module on a real machine.

check() { return 255; }

depends() { echo agent; }

installkernel() {
    hostonly='' instmods virtio_blk virtio_pci virtio_net virtio_rng
}

install() {
    inst_script "$moddir/agent-test-done" /usr/lib/agent-test/agent-test-done
    inst_simple "$moddir/agent-test-done.service" "$systemdsystemunitdir/agent-test-done.service"
    mkdir -p "$initdir$systemdsystemunitdir/initrd.target.wants"
    ln_r "$systemdsystemunitdir/agent-test-done.service" \
        "$systemdsystemunitdir/initrd.target.wants/agent-test-done.service"
    inst_multiple -o sync umount cut systemctl sleep seq cat grep sed tr cp sgdisk mkfs.ext4 ls mkdir mount blkid cryptsetup sort
}
