#!/bin/bash
# The OVF provisioning CD: UDF with ovf-env.xml, CustomData = base64 of the config (wrapped, as
# base64 tools do).
set -euo pipefail
src=$WORK/ovf-src
rm -rf "$src"
mkdir -p "$src"
b64=$(base64 -w 60 "$SCENARIO/custom-data.ign")
cat >"$src/ovf-env.xml" <<XML
<?xml version="1.0" encoding="utf-8"?>
<ns0:Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:ns0="http://schemas.dmtf.org/ovf/environment/1" xmlns:ns1="http://schemas.microsoft.com/windowsazure" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">
  <ns1:ProvisioningSection>
    <ns1:Version>1.0</ns1:Version>
    <ns1:LinuxProvisioningConfigurationSet>
      <ns1:ConfigurationSetType>LinuxProvisioningConfiguration</ns1:ConfigurationSetType>
      <ns1:HostName>vm-azure</ns1:HostName>
      <ns1:UserName>core</ns1:UserName>
      <ns1:CustomData>$b64</ns1:CustomData>
      <ns1:DisableSshPasswordAuthentication>true</ns1:DisableSshPasswordAuthentication>
    </ns1:LinuxProvisioningConfigurationSet>
  </ns1:ProvisioningSection>
</ns0:Environment>
XML
genisoimage -quiet -udf -V rd_rdfe_stable -o "$WORK/ovf.iso" "$src"
blkid -p -c /dev/null -o value -s TYPE "$WORK/ovf.iso" | grep -qx udf
