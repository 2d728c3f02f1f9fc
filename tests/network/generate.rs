//! `agent network-generate`, the binary: the kernel command line's network as systemd-networkd
//! files in the output directory, the initramfs's DHCP default masked; nothing without ip=;
//! a bad argument is an error naming it, and nothing is written.

use std::path::Path;
use std::process::Command;

fn generate(dir: &Path, cmdline: &str) -> std::process::Output {
    let file = dir.join("cmdline");
    std::fs::write(&file, format!("{cmdline}\n")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["network-generate", "--cmdline"])
        .arg(&file)
        .arg("--output")
        .arg(dir.join("net"))
        .output()
        .unwrap()
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(r) => r
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("agent-netgen-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_static_address_replaces_the_dhcp_default() {
    let d = tmp("static");
    let out = generate(
        &d,
        "BOOT_IMAGE=/vmlinuz root=LABEL=root ip=10.0.2.15::10.0.2.2:255.255.255.0:node1:eth0:none nameserver=10.0.2.3 ifname=eth0:52:54:00:12:34:56 agent.firstboot",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let net = d.join("net");
    assert_eq!(
        listing(&net),
        ["90-eth0.link", "90-eth0.network", "99-agent-dhcp.network"]
    );
    let mask = std::fs::read_link(net.join("99-agent-dhcp.network")).unwrap();
    assert_eq!(mask, Path::new("/dev/null"));
    let n = std::fs::read_to_string(net.join("90-eth0.network")).unwrap();
    for want in [
        "Name=eth0\n",
        "DHCP=no\n",
        "DNS=10.0.2.3\n",
        "Hostname=node1\n",
        "Address=10.0.2.15/24\n",
        "Gateway=10.0.2.2\n",
    ] {
        assert!(n.contains(want), "{want:?} in {n}");
    }
    // Again: the same files (the mask is replaced, not an error).
    let again = generate(&d, &std::fs::read_to_string(d.join("cmdline")).unwrap());
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(net.join("90-eth0.network")).unwrap(),
        n
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn without_ip_nothing_is_written() {
    let d = tmp("noip");
    for cmdline in [
        "root=LABEL=root quiet",
        "root=LABEL=root nameserver=1.1.1.1 bond=bond0:eth0,eth1",
    ] {
        let out = generate(&d, cmdline);
        assert!(
            out.status.success(),
            "{cmdline}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(listing(&d.join("net")).is_empty(), "{cmdline}");
    }
    let out = generate(&d, "nameserver=1.1.1.1");
    assert!(String::from_utf8_lossy(&out.stderr).contains("without ip= are not used"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_bad_argument_is_refused_by_name() {
    let d = tmp("bad");
    let out = generate(&d, "ip=eth0:dhcp bond=bond0:eth0,eth1:mode=fast");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "bond=bond0:eth0,eth1:mode=fast: bond option mode: \"fast\" is not one of balance-rr"
        ),
        "{err}"
    );
    assert!(listing(&d.join("net")).is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_huge_cmdline_file_is_refused() {
    let d = tmp("huge");
    let out = generate(&d, &format!("ip=eth0:dhcp {}", "x".repeat(70 * 1024)));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("larger than 64 KiB, not a kernel command line"),
        "{err}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_bond_with_a_vlan_on_top() {
    let d = tmp("bond");
    let out = generate(
        &d,
        "bond=bond0:ens3,ens4:mode=active-backup,miimon=100:9000 vlan=bond0.42:bond0 ip=[2001:db8::5]::[2001:db8::1]:64::bond0.42:none",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let net = d.join("net");
    assert_eq!(
        listing(&net),
        [
            "90-bond0.42.netdev",
            "90-bond0.42.network",
            "90-bond0.netdev",
            "90-bond0.network",
            "90-ens3.network",
            "90-ens4.network",
            "99-agent-dhcp.network"
        ]
    );
    let bond = std::fs::read_to_string(net.join("90-bond0.netdev")).unwrap();
    assert!(bond.contains("Kind=bond\nName=bond0\nMTUBytes=9000\n\n[Bond]\nMode=active-backup\nMIIMonitorSec=100ms\n"), "{bond}");
    let vlan = std::fs::read_to_string(net.join("90-bond0.42.network")).unwrap();
    assert!(
        vlan.contains("Address=2001:db8::5/64\n") && vlan.contains("Gateway=2001:db8::1\n"),
        "{vlan}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}
