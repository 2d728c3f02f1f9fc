#!/bin/bash
# Host-side test of dracut/30agent/agent-generator (no VM): which command lines enable the
# stages and which platform they record. Prints "N passed, M failed".
set -euo pipefail
gen=$(cd "$(dirname "$0")/.." && pwd)/dracut/30agent/agent-generator
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
case_() { # NAME CMDLINE EXPECT_ENABLED(yes|no) EXPECT_PLATFORM
    local name=$1 cmdline=$2 want=$3 wantp=${4:-} got=no gotp=
    rm -rf "$tmp/units" "$tmp/run"
    mkdir -p "$tmp/units"
    printf '%s\n' "$cmdline" >"$tmp/cmdline"
    AGENT_GENERATOR_CMDLINE=$tmp/cmdline AGENT_GENERATOR_RUNDIR=$tmp/run "$gen" "$tmp/units" "$tmp/units" "$tmp/units"
    [[ -L $tmp/units/initrd.target.requires/agent-complete.target ]] && got=yes
    [[ -L $tmp/units/initrd.target.requires/agent-install.service ]] && got=install
    [[ -f $tmp/run/platform.env ]] && gotp=$(sed -n 's/^AGENT_PLATFORM=//p' "$tmp/run/platform.env")
    if [[ $got == "$want" && $gotp == "$wantp" ]]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL generator $name: enabled=$got platform=$gotp (want $want $wantp)"
    fi
}
case_ "no flag" "root=LABEL=root quiet" no ""
case_ "agent flag, default platform" "root=LABEL=root agent.firstboot" yes metal
case_ "ignition flag" "ignition.firstboot ignition.platform.id=qemu" yes qemu
case_ "agent platform wins" "ignition.platform.id=aws agent.firstboot agent.platform.id=qemu" yes qemu
case_ "flag with value" "agent.firstboot=1 agent.platform.id=metal" yes metal
case_ "look-alike is not the flag" "agent.firstbootx agent.platform.id=qemu" no ""
case_ "platform without flag" "agent.platform.id=qemu" no ""
case_ "platform sanitised" 'agent.firstboot agent.platform.id=qe$(x)mu;' yes qexmu
case_ "flatcar flag and oem id" "flatcar.first_boot=detected flatcar.oem.id=qemu" yes qemu
case_ "flatcar bare flag" "flatcar.first_boot" yes metal
case_ "flatcar flag off" "flatcar.first_boot=0 flatcar.oem.id=qemu" no ""
case_ "flatcar flag, last value wins" "flatcar.first_boot=1 flatcar.first_boot=no" no ""
case_ "coreos flag, ec2 is aws" "coreos.first_boot=1 coreos.oem.id=ec2" yes aws
case_ "gce is gcp, pxe is metal" "flatcar.first_boot=yes flatcar.oem.id=gce" yes gcp
case_ "pxe is metal" "flatcar.first_boot=yes coreos.oem.id=pxe" yes metal
case_ "flatcar oem before coreos" "flatcar.first_boot=1 coreos.oem.id=aws flatcar.oem.id=qemu" yes qemu
case_ "ignition platform before oem id" "ignition.firstboot flatcar.oem.id=aws ignition.platform.id=qemu" yes qemu
case_ "ignition names are not renamed" "ignition.firstboot ignition.platform.id=ec2" yes ec2
case_ "install disk asks for an install" "coreos.inst.install_dev=sda coreos.inst.image_url=http://h/i" install ""
case_ "image URL alone asks for an install" "coreos.inst.image_url=http://h/i.raw.xz" install ""
case_ "install wins over first boot" "agent.firstboot coreos.inst.install_dev=/dev/vda" install ""
case_ "selector karg asks for an install" "agent.install.disk.transport=virtio coreos.inst.image_url=http://h/i" install ""
case_ "empty install disk is no install" "coreos.inst.install_dev= agent.firstboot" yes metal
case_ "skip_reboot alone is no install" "coreos.inst.skip_reboot root=LABEL=root" no ""
echo "generator: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
