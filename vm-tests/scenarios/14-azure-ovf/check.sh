# IMDS first (it never answers here), then the CD's ovf-env.xml CustomData.
expect_console "azure: the instance metadata service did not answer"
expect_console "azure: found the OVF provisioning CD /dev/sr0 (udf"
expect_console "fetched config from azure OVF provisioning CD /dev/sr0 (udf"
expect_console "file ovf-env.xml (CustomData)"
expect_console "AGENT-TEST-DONE complete=yes"
expect_eq "$(part_count)" 1 "partition count"
r=$(mount_part 1)
expect_content "$r/etc/hostname" vm-azure
