# Boot 4 (TPM state C, wipeVolume false): the TPM does not release tpmvol's key, so the disks
# stage fails naming the volume and its pin, the emergency target powers off, and nothing was
# wiped: vdb and vdc are bit-for-bit as boot 3 left them (header, clevis token, data).
expect_console "AGENT-FAILED: agent-disks"
expect_console "luks tpmvol: clevis could not unlock the existing volume on /dev/vdb bound with sss (tpm2)"
expect_console "wipeVolume is false, so the volume was left untouched"
sha256sum -c --quiet "$WORK/before4.sha256" || fail "a volume changed in the failed boot"
expect_eq "$(blkid -p -c /dev/null -o value -s UUID "$DISK2")" "$(cat "$WORK/tpmvol.uuid")" "vdb LUKS UUID"
expect_clevis_pins "$DISK2" sss tpm2
