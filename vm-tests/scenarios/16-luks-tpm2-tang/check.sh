# Boot 3 (TPM reset, tang still there): one share of two is not enough, the disks stage fails
# naming the volume and its pins, and vdb is bit-for-bit as boot 2 left it.
expect_console "AGENT-FAILED: agent-disks"
expect_console "luks bothvol: clevis could not unlock the existing volume on /dev/vdb bound with sss (tang http://10.0.2.101, tpm2; threshold 2)"
sha256sum -c --quiet "$WORK/before3.sha256" || fail "vdb changed in the failed boot"
expect_clevis_pins "$DISK2" sss tang tpm2 >/dev/null
