use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net<'a>(p: &'a Plan, name: &str) -> &'a Network {
    p.networks
        .get(name)
        .unwrap_or_else(|| panic!("no network {name:?} in {p:#?}"))
}

fn err(cmdline: &str) -> String {
    format!("{:#}", parse(cmdline).unwrap_err())
}

#[test]
fn static_ipv4_with_every_field() {
    let p = parse("quiet ip=192.168.1.10:192.168.1.9:192.168.1.1:255.255.255.0:host1:eth0:none:1500:52:54:00:AA:bb:cc nameserver=1.1.1.1").unwrap();
    assert!(p.has_ip);
    let n = net(&p, "eth0");
    assert_eq!(n.autoconf, Some(Autoconf::None));
    assert_eq!(
        n.addresses,
        [Address {
            addr: ip("192.168.1.10"),
            prefix: 24,
            peer: Some(ip("192.168.1.9"))
        }]
    );
    assert_eq!(
        n.routes,
        [Route {
            dest: None,
            gateway: Some(ip("192.168.1.1"))
        }]
    );
    assert_eq!(n.hostname.as_deref(), Some("host1"));
    assert_eq!(n.mtu, Some(1500));
    assert_eq!(n.mac, Some([0x52, 0x54, 0, 0xaa, 0xbb, 0xcc]));
    // nameserver= went to every named interface.
    assert_eq!(n.dns, [ip("1.1.1.1")]);
    assert!(!p.networks.contains_key(""));
}

#[test]
fn the_forms_of_ip() {
    // (command line, interface, method, addresses, dns, mtu)
    type Row = (
        &'static str,
        &'static str,
        Autoconf,
        &'static [&'static str],
        &'static [&'static str],
        Option<u32>,
    );
    let table: &[Row] = &[
        ("ip=dhcp", "", Autoconf::Dhcp, &[], &[], None),
        ("ip=single-dhcp", "", Autoconf::SingleDhcp, &[], &[], None),
        ("ip=either6", "", Autoconf::Either6, &[], &[], None),
        ("ip=eth1:dhcp6", "eth1", Autoconf::Dhcp6, &[], &[], None),
        (
            "ip=eth1:auto6:9000",
            "eth1",
            Autoconf::Auto6,
            &[],
            &[],
            Some(9000),
        ),
        (
            "ip=eth1:link6::52:54:00:00:00:01",
            "eth1",
            Autoconf::Link6,
            &[],
            &[],
            None,
        ),
        (
            "ip=10.0.2.15::10.0.2.2:24::eth0:off",
            "eth0",
            Autoconf::None,
            &["10.0.2.15/24"],
            &[],
            None,
        ),
        (
            "ip=10.0.2.15::10.0.2.2:::eth0:none",
            "eth0",
            Autoconf::None,
            &["10.0.2.15/32"],
            &[],
            None,
        ),
        (
            "ip=10.0.2.15::10.0.2.2:0.0.0.0::eth0:none",
            "eth0",
            Autoconf::None,
            &["10.0.2.15/0"],
            &[],
            None,
        ),
        (
            "ip=10.0.2.15::10.0.2.2:255.255.0.0::eth0:none:8.8.8.8:9.9.9.9",
            "eth0",
            Autoconf::None,
            &["10.0.2.15/16"],
            &["8.8.8.8", "9.9.9.9"],
            None,
        ),
        (
            "ip=10.0.2.15::10.0.2.2:24::eth0:none::9.9.9.9",
            "eth0",
            Autoconf::None,
            &["10.0.2.15/24"],
            &["9.9.9.9"],
            None,
        ),
        (
            "ip=10.0.2.15::10.0.2.2:24::eth0:none:[2001:db8::53]",
            "eth0",
            Autoconf::None,
            &["10.0.2.15/24"],
            &["2001:db8::53"],
            None,
        ),
        (
            "ip=[2001:db8::5]::[2001:db8::1]:64:h:eth0:none",
            "eth0",
            Autoconf::None,
            &["2001:db8::5/64"],
            &[],
            None,
        ),
        (
            "ip=[2001:db8::5]::::h:eth0:none:1280",
            "eth0",
            Autoconf::None,
            &["2001:db8::5/128"],
            &[],
            Some(1280),
        ),
        (
            "ip=0.0.0.0::10.0.2.2:24::eth0:dhcp",
            "eth0",
            Autoconf::Dhcp,
            &[],
            &[],
            None,
        ),
        // A static address without an interface: every link.
        (
            "ip=10.0.2.15::10.0.2.2:24:::none",
            "",
            Autoconf::None,
            &["10.0.2.15/24"],
            &[],
            None,
        ),
    ];
    for (cmdline, iface, method, addrs, dns, mtu) in table {
        let p = parse(cmdline).unwrap_or_else(|e| panic!("{cmdline}: {e:#}"));
        let n = net(&p, iface);
        assert_eq!(n.autoconf, Some(*method), "{cmdline}");
        let got: Vec<String> = n
            .addresses
            .iter()
            .map(|a| format!("{}/{}", a.addr, a.prefix))
            .collect();
        assert_eq!(got, *addrs, "{cmdline}");
        let got: Vec<String> = n.dns.iter().map(ToString::to_string).collect();
        assert_eq!(got, *dns, "{cmdline}");
        assert_eq!(n.mtu, *mtu, "{cmdline}");
    }
}

#[test]
fn repeated_ip_configures_several_interfaces_and_addresses() {
    let p = parse("ip=10.0.0.2::10.0.0.1:24::eth0:none ip=[fd00::2]::[fd00::1]:64::eth0:none ip=eth1:dhcp rd.route=10.9.0.0/16:10.0.0.254 rd.route=[2001:db8::/32]:[fd00::9]:eth1 rd.peerdns=0").unwrap();
    let e0 = net(&p, "eth0");
    assert_eq!(e0.addresses.len(), 2);
    // The route without an interface and rd.peerdns=0 went to both.
    assert_eq!(e0.routes.len(), 3);
    assert_eq!(e0.use_dns, Some(false));
    let e1 = net(&p, "eth1");
    assert_eq!(
        e1.routes,
        [
            Route {
                dest: Some((ip("2001:db8::"), 32)),
                gateway: Some(ip("fd00::9"))
            },
            Route {
                dest: Some((ip("10.9.0.0"), 16)),
                gateway: Some(ip("10.0.0.254"))
            }
        ]
    );
    assert_eq!(p.networks.len(), 2);
}

#[test]
fn bonds_vlans_bridges_and_renames() {
    let p = parse("bond=bond0:eth0,eth1:mode=802.3ad,miimon=100,xmit_hash_policy=layer3+4,lacp_rate=1:9000 vlan=bond0.100:bond0 vlan=vlan0005:eth2 bridge=br0:eth3,eth4 ifname=lan0:52-54-00-00-00-09 ip=bond0.100:dhcp hostname=node1 rd.neednet=1").unwrap();
    let b = &p.netdevs["bond0"];
    assert_eq!(b.mtu, Some(9000));
    assert_eq!(
        b.kind,
        NetDevKind::Bond(vec![
            ("Mode", "802.3ad".into()),
            ("MIIMonitorSec", "100ms".into()),
            ("TransmitHashPolicy", "layer3+4".into()),
            ("LACPTransmitRate", "fast".into()),
        ])
    );
    assert_eq!(p.netdevs["bond0.100"].kind, NetDevKind::Vlan(100));
    assert_eq!(p.netdevs["vlan0005"].kind, NetDevKind::Vlan(5));
    assert_eq!(p.netdevs["br0"].kind, NetDevKind::Bridge);
    assert_eq!(net(&p, "eth0").bond.as_deref(), Some("bond0"));
    assert_eq!(net(&p, "eth1").bond.as_deref(), Some("bond0"));
    assert_eq!(net(&p, "bond0").vlans, ["bond0.100"]);
    assert_eq!(net(&p, "eth4").bridge.as_deref(), Some("br0"));
    assert_eq!(p.renames["lan0"], [0x52, 0x54, 0, 0, 0, 9]);
    assert_eq!(p.hostname.as_deref(), Some("node1"));
    assert_eq!(p.neednet, Some(true));

    let files = networkd::render(&p);
    let get = |n: &str| &files.iter().find(|(f, _)| f == n).unwrap().1;
    let bond = get("90-bond0.netdev");
    assert!(
        bond.contains("[NetDev]\nKind=bond\nName=bond0\nMTUBytes=9000\n"),
        "{bond}"
    );
    assert!(
        bond.contains("[Bond]\nMode=802.3ad\nMIIMonitorSec=100ms\n"),
        "{bond}"
    );
    assert!(get("90-bond0.100.netdev").contains("[VLAN]\nId=100\n"));
    assert!(get("90-bond0.network").contains("VLAN=bond0.100\n"));
    assert!(get("90-eth0.network").contains("Bond=bond0\n"));
    let vlan = get("90-bond0.100.network");
    assert!(
        vlan.contains("DHCP=ipv4\n") && vlan.contains("Hostname=node1\n"),
        "{vlan}"
    );
    assert!(
        get("90-lan0.link")
            .contains("[Match]\nMACAddress=52:54:00:00:00:09\n\n[Link]\nName=lan0\n")
    );
}

#[test]
fn static_network_file() {
    let p = parse("ip=10.0.2.15::10.0.2.2:255.255.255.0:node1:eth0:none:[2001:db8::53]:10.0.2.3")
        .unwrap();
    let files = networkd::render(&p);
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].0, "90-eth0.network");
    assert_eq!(
        files[0].1,
        "# Generated by agent network-generate from the kernel command line\n\n[Match]\nName=eth0\n\n[Link]\n\n[Network]\nDHCP=no\nDNS=2001:db8::53\nDNS=10.0.2.3\n\n[DHCP]\nHostname=node1\n\n[Address]\nAddress=10.0.2.15/24\n\n[Route]\nGateway=10.0.2.2\n"
    );
    let every = networkd::render(&parse("ip=dhcp").unwrap());
    assert_eq!(every[0].0, "91-default.network");
    assert!(every[0].1.contains("[Match]\nKind=!*\nType=!loopback\n"));
}

#[test]
fn errors_name_the_argument_and_the_fault() {
    let table: &[(&str, &str)] = &[
        ("ip", "ip: needs a value"),
        ("ip=", "autoconfiguration method is missing"),
        ("ip=static", "unknown autoconfiguration method \"static\""),
        ("ip=eth0:ibft", "ip=eth0:ibft: ibft"),
        (
            "ip=10.0.0.2::10.0.0.1:33::eth0:none",
            "netmask \"33\" is neither a prefix length (0 to 32)",
        ),
        (
            "ip=10.0.0.2::10.0.0.1:255.0.255.0::eth0:none",
            "netmask 255.0.255.0 has holes",
        ),
        (
            "ip=[fd00::2]::[fd00::1]:129::eth0:none",
            "prefix length (0 to 128)",
        ),
        (
            "ip=[fd00::2]::fd00::1:64::eth0:none",
            "gateway must be an IPv6 address in brackets",
        ),
        (
            "ip=10.0.0.2::10.0.0.1:24:bad_host:eth0:none",
            "host name \"bad_host\" is not valid",
        ),
        (
            "ip=10.0.0.2::10.0.0.1:24::eth0:none:65536",
            "MTU \"65536\" is not a number from 68 to 65535",
        ),
        (
            "ip=10.0.0.2::10.0.0.1:24::eth0:none:1500:zz",
            "\"zz\" is not a MAC address",
        ),
        (
            "ip=10.0.0.2::10.0.0.1:24::eth0:none:8.8.8.8:x",
            "\"x\" is neither an MTU nor an IPv4 name server",
        ),
        (
            "ip=10.0.0.2::10.0.0.1:24::eth0:none:8.8.8.8:9.9.9.9:1",
            "\"8.8.8.8:9.9.9.9:1\" after the method",
        ),
        (
            "ip=abcdefghijklmnop:dhcp",
            "interface name \"abcdefghijklmnop\" is longer than 15",
        ),
        ("ip=all:dhcp", "interface name \"all\" is reserved"),
        ("ip=eth0:dhcp:1K", "MTU \"1K\""),
        (
            "nameserver=dns.example",
            "nameserver=dns.example: \"dns.example\" is not an IP address",
        ),
        (
            "rd.route=10.0.0.0/33:10.0.0.1",
            "prefix length \"33\" is not 0 to 32",
        ),
        ("rd.route=10.0.0.0/8", "expected <net>/<prefix>:<gateway>"),
        ("bond=bond0", "bond=bond0: expected <bondname>:<bondslaves>"),
        ("bond=bond0:", "no slave interfaces"),
        (
            "bond=bond0:eth0:mode=fast",
            "bond option mode: \"fast\" is not one of balance-rr",
        ),
        (
            "bond=bond0:eth0:frobnicate=1",
            "unknown bond option \"frobnicate\"",
        ),
        ("bond=bond0:eth0:mode=1:9000:x", "MTU \"9000:x\""),
        ("vlan=vlan:eth0", "\"vlan\" has none"),
        ("vlan=vlan4095:eth0", "VLAN id of vlan4095 is over 4094"),
        (
            "bond=x0:eth0 vlan=x0:eth1",
            "vlan=x0:eth1: x0 is already a bond",
        ),
        ("bridge=br0:", "no interfaces for the bridge"),
        ("ifname=lan0:52:54:00", "\"52:54:00\" is not a MAC address"),
        (
            "ifname=lan0:52:54:00:00:00:01 ifname=lan0:52:54:00:00:00:02",
            "lan0 is named by an earlier ifname= too",
        ),
        ("rd.peerdns=maybe", "rd.peerdns=maybe: not a boolean"),
        ("hostname=-x", "hostname=-x: host name \"-x\" is not valid"),
    ];
    for (cmdline, want) in table {
        let e = err(cmdline);
        assert!(e.contains(want), "{cmdline}: {e}");
    }
}

#[test]
fn other_arguments_and_bounds() {
    let p = parse("root=LABEL=root ignition.firstboot ipv6.disable=1 ip.x=1 quiet").unwrap();
    assert_eq!(p, Plan::default());
    let many = "nameserver=1.1.1.1 ".repeat(MAX_ARGS + 1);
    assert!(err(&many).contains(&format!("more than {MAX_ARGS} network arguments")));
}

#[test]
fn macs() {
    for (s, ok) in [
        ("52:54:00:12:34:56", true),
        ("1:2:3:4:5:6", true),
        ("01-02-03-04-05-06", true),
        ("0102.0304.0506", true),
        ("52:54:00:12:34", false),
        ("525400123456", false),
        ("123:4:5:6:7:8", false),
        ("01-02-03:04-05-06", false),
        ("+102.0304.0506", false),
    ] {
        assert_eq!(parse_mac(s).is_some(), ok, "{s}");
    }
}
