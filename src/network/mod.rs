//! Network configuration from the kernel command line, in dracut's syntax (dracut.cmdline(7)):
//! `ip=`, `nameserver=`, `rd.route=`, `rd.peerdns=`, `bond=`, `vlan=`, `bridge=`, `ifname=`,
//! `hostname=` and `rd.neednet`. [`parse`] reads them into a [`Plan`] (one network per
//! interface, the virtual devices, the renames), [`networkd`] writes it as systemd-networkd
//! files. The reading follows systemd-network-generator (the same forms, the same merge of
//! `nameserver=`/`rd.route=`/`rd.peerdns=` into every named interface) except where
//! `tests/network_diff/known.tsv` says why not: we refuse what it would write and networkd
//! would then ignore or misread (a prefix length over 32, a netmask with holes, an unknown bond
//! option, iBFT), and we write the bond options it drops.

pub mod networkd;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{Result, anyhow, bail};

/// How an interface gets its addresses (the last field of `ip=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Autoconf {
    /// `none`, `off`: static addresses only.
    None,
    /// `on`, `any`: DHCPv4 and DHCPv6.
    On,
    /// `dhcp`: DHCPv4.
    Dhcp,
    /// `dhcp6`: DHCPv6.
    Dhcp6,
    /// `auto6`: IPv6 router advertisements (SLAAC).
    Auto6,
    /// `either6`: DHCPv6, else router advertisements.
    Either6,
    /// `link6`: IPv6 link-local only.
    Link6,
    /// `single-dhcp`: DHCPv4 on every link, the first lease is enough.
    SingleDhcp,
}

impl Autoconf {
    fn parse(arg: &str, s: &str) -> Result<Self> {
        Ok(match s {
            "none" | "off" => Self::None,
            "on" | "any" => Self::On,
            "dhcp" => Self::Dhcp,
            "dhcp6" => Self::Dhcp6,
            "auto6" => Self::Auto6,
            "either6" => Self::Either6,
            "link6" => Self::Link6,
            "single-dhcp" => Self::SingleDhcp,
            "ibft" => bail!(
                "{arg}: ibft (the address from the firmware's iSCSI table) is not supported; give the address, or dhcp"
            ),
            "" => bail!(
                "{arg}: the autoconfiguration method is missing (none, dhcp, dhcp6, auto6, ...)"
            ),
            _ => bail!(
                "{arg}: unknown autoconfiguration method {s:?} (none, off, on, any, dhcp, dhcp6, auto6, either6, link6, single-dhcp)"
            ),
        })
    }
}

/// A static address of an interface (`ip=<client-IP>:[<peer>]:...:<netmask>:...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub addr: IpAddr,
    pub prefix: u8,
    pub peer: Option<IpAddr>,
}

/// A route (`ip=`'s gateway: the default route; `rd.route=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// None: the default route.
    pub dest: Option<(IpAddr, u8)>,
    pub gateway: Option<IpAddr>,
}

/// The configuration of one interface; the name "" stands for every physical link.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Network {
    pub name: String,
    pub autoconf: Option<Autoconf>,
    pub hostname: Option<String>,
    pub mtu: Option<u32>,
    pub mac: Option<[u8; 6]>,
    pub addresses: Vec<Address>,
    pub routes: Vec<Route>,
    pub dns: Vec<IpAddr>,
    /// `rd.peerdns=`: whether DHCP's name servers are used.
    pub use_dns: Option<bool>,
    /// VLANs on this interface (`vlan=<name>:<this>`).
    pub vlans: Vec<String>,
    pub bridge: Option<String>,
    pub bond: Option<String>,
}

/// A virtual device (`bond=`, `vlan=`, `bridge=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetDev {
    pub name: String,
    pub kind: NetDevKind,
    pub mtu: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetDevKind {
    /// networkd's `[Bond]` settings from the bond options, in the order given.
    Bond(Vec<(&'static str, String)>),
    Vlan(u16),
    Bridge,
}

impl NetDevKind {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Bond(_) => "bond",
            Self::Vlan(_) => "vlan",
            Self::Bridge => "bridge",
        }
    }
}

/// What the command line asks of the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// By interface name ("" = every link, merged away when named interfaces exist).
    pub networks: BTreeMap<String, Network>,
    pub netdevs: BTreeMap<String, NetDev>,
    /// `ifname=<name>:<MAC>`: the name given to the link with that MAC.
    pub renames: BTreeMap<String, [u8; 6]>,
    /// At least one `ip=` (without it the agent keeps DHCP on every ethernet link).
    pub has_ip: bool,
    /// `rd.neednet` (bare, `=1`) or `rd.neednet=0`.
    pub neednet: Option<bool>,
    /// `hostname=`: sent to DHCP servers by the interfaces whose `ip=` names none.
    pub hostname: Option<String>,
}

/// The keys [`parse`] reads; every other argument is left alone.
pub const KEYS: &[&str] = &[
    "ip",
    "nameserver",
    "rd.route",
    "rd.peerdns",
    "bond",
    "vlan",
    "bridge",
    "ifname",
    "hostname",
    "rd.neednet",
];

/// The largest MTU accepted (the kernel's IP_MAX_MTU).
pub const MAX_MTU: u32 = 65535;
/// At most this many network arguments are read (a command line is at most a few KiB).
pub const MAX_ARGS: usize = 256;

/// The kernel command line's words as `(key, value)`; values lose their surrounding quotes.
fn words(cmdline: &str) -> impl Iterator<Item = (&str, Option<&str>)> {
    cmdline
        .split_ascii_whitespace()
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k, Some(v.trim_matches('"'))),
            None => (w, None),
        })
}

/// Reads the network arguments of `cmdline`. The first bad one is an error naming it.
pub fn parse(cmdline: &str) -> Result<Plan> {
    let mut plan = Plan::default();
    let mut n = 0;
    for (key, value) in words(cmdline) {
        if !KEYS.contains(&key) {
            continue;
        }
        n += 1;
        if n > MAX_ARGS {
            bail!("more than {MAX_ARGS} network arguments on the kernel command line");
        }
        let shown = match value {
            Some(v) => format!("{key}={v}"),
            None => key.to_string(),
        };
        plan.arg(key, value, &shown)?;
    }
    plan.merge_defaults();
    Ok(plan)
}

impl Plan {
    fn arg(&mut self, key: &str, value: Option<&str>, arg: &str) -> Result<()> {
        if key == "rd.neednet" {
            self.neednet = Some(match value {
                None => true,
                Some(v) => parse_bool(v).ok_or_else(|| anyhow!("{arg}: not a boolean (1 or 0)"))?,
            });
            return Ok(());
        }
        if key == "rd.peerdns" {
            let v = match value {
                None => true,
                Some(v) => parse_bool(v).ok_or_else(|| anyhow!("{arg}: not a boolean (1 or 0)"))?,
            };
            self.network(arg, "")?.use_dns = Some(v);
            return Ok(());
        }
        let Some(value) = value else {
            bail!("{arg}: needs a value ({key}=...)");
        };
        match key {
            "ip" => {
                self.has_ip = true;
                self.ip(arg, value)
            }
            "nameserver" => {
                let a = parse_ip_auto(value)
                    .ok_or_else(|| anyhow!("{arg}: {value:?} is not an IP address"))?;
                self.network(arg, "")?.dns.push(a);
                Ok(())
            }
            "rd.route" => self.route(arg, value),
            "vlan" => self.vlan(arg, value),
            "bridge" => self.bridge(arg, value),
            "bond" => self.bond(arg, value),
            "ifname" => self.ifname(arg, value),
            "hostname" => {
                check_hostname(arg, value)?;
                self.hostname = Some(value.to_string());
                Ok(())
            }
            _ => unreachable!("KEYS lists {key}"),
        }
    }

    /// The network of interface `name`, created on first use.
    fn network(&mut self, arg: &str, name: &str) -> Result<&mut Network> {
        if !self.networks.contains_key(name) {
            if !name.is_empty() {
                check_ifname(arg, name)?;
            }
            let n = Network {
                name: name.to_string(),
                ..Default::default()
            };
            self.networks.insert(name.to_string(), n);
        }
        Ok(self.networks.get_mut(name).expect("inserted above"))
    }

    fn netdev(&mut self, arg: &str, name: &str, kind: NetDevKind) -> Result<&mut NetDev> {
        match self.netdevs.get(name) {
            Some(d) if d.kind.name() != kind.name() => bail!(
                "{arg}: {name} is already a {} (from an earlier argument)",
                d.kind.name()
            ),
            Some(_) => {}
            None => {
                check_ifname(arg, name)?;
                let d = NetDev {
                    name: name.to_string(),
                    kind,
                    mtu: None,
                };
                self.netdevs.insert(name.to_string(), d);
            }
        }
        Ok(self.netdevs.get_mut(name).expect("inserted above"))
    }

    /// `ip=`, in its three forms.
    fn ip(&mut self, arg: &str, value: &str) -> Result<()> {
        if !value.contains(':') {
            // ip={dhcp|on|any|dhcp6|auto6|either6|link6|single-dhcp}
            let a = Autoconf::parse(arg, value)?;
            self.network(arg, "")?.autoconf = Some(a);
            return Ok(());
        }
        if value.starts_with('[') {
            return self.ip_static(arg, value, true);
        }
        // A static address, else <interface>:<method>; the error is the static form's when the
        // first field is an address.
        let mut attempt = self.clone();
        match attempt.ip_static(arg, value, false) {
            Ok(()) => {
                *self = attempt;
                Ok(())
            }
            Err(e) => {
                let first = value.split(':').next().unwrap_or_default();
                let mut attempt = self.clone();
                match attempt.ip_interface(arg, value) {
                    Ok(()) => {
                        *self = attempt;
                        Ok(())
                    }
                    Err(_) if first.parse::<Ipv4Addr>().is_ok() => Err(e),
                    Err(e2) => Err(e2),
                }
            }
        }
    }

    /// ip=<client-IP>:[<peer>]:<gateway-IP>:<netmask>:<client_hostname>:<interface>:<method>
    /// [:[<mtu>][:<macaddr>]] or [:[<dns1>][:<dns2>]]
    fn ip_static(&mut self, arg: &str, value: &str, v6: bool) -> Result<()> {
        let family = if v6 { "IPv6" } else { "IPv4" };
        let mut rest = value;
        let addr = addr_field(arg, &mut rest, v6, "client address")?;
        let peer = addr_field(arg, &mut rest, v6, "peer address")?;
        let gateway = addr_field(arg, &mut rest, v6, "gateway")?;
        let prefix = if rest.starts_with('[') {
            if v6 {
                bail!(
                    "{arg}: an IPv6 netmask is given as a prefix length (e.g. 64), not an address"
                );
            }
            bail!("{arg}: the netmask is not an IPv4 netmask");
        } else if let Some(r) = rest.strip_prefix(':') {
            rest = r;
            if v6 { 128 } else { 32 }
        } else {
            let (f, r) = rest
                .split_once(':')
                .ok_or_else(|| anyhow!("{arg}: too few fields (<client-IP>:[<peer>]:<gateway-IP>:<netmask>:<hostname>:<interface>:<method>)"))?;
            rest = r;
            let max = if v6 { 128 } else { 32 };
            if !v6 && f.contains('.') {
                let m: Ipv4Addr = f
                    .parse()
                    .map_err(|_| anyhow!("{arg}: netmask {f:?} is not an IPv4 netmask"))?;
                let bits = u32::from(m);
                if bits.leading_ones() + bits.trailing_zeros() != 32 {
                    bail!("{arg}: netmask {f} has holes (its one bits must come first)");
                }
                bits.leading_ones() as u8
            } else {
                match f.parse::<u8>() {
                    Ok(p) if p <= max && f.bytes().all(|b| b.is_ascii_digit()) => p,
                    _ => bail!(
                        "{arg}: netmask {f:?} is neither a prefix length (0 to {max}) nor a dotted {family} netmask"
                    ),
                }
            }
        };
        let (hostname, r) = rest.split_once(':').ok_or_else(|| {
            anyhow!("{arg}: too few fields (the hostname, interface and method are missing)")
        })?;
        rest = r;
        if !hostname.is_empty() {
            check_hostname(arg, hostname)?;
        }
        let (ifname, r) = rest
            .split_once(':')
            .ok_or_else(|| anyhow!("{arg}: too few fields (the interface or method is missing)"))?;
        rest = r;
        let (method, tail) = match rest.split_once(':') {
            Some((m, t)) => (m, Some(t)),
            None => (rest, None),
        };
        let autoconf = Autoconf::parse(arg, method)?;
        let n = self.network(arg, ifname)?;
        n.autoconf = Some(autoconf);
        n.hostname = (!hostname.is_empty()).then(|| hostname.to_string());
        // 0.0.0.0 and :: are no address (e.g. ip=0.0.0.0:...:eth0:dhcp: DHCP with a gateway).
        if let Some(addr) = addr.filter(|a| !a.is_unspecified()) {
            n.addresses.push(Address { addr, prefix, peer });
        }
        if gateway.is_some() {
            n.routes.push(Route {
                dest: None,
                gateway,
            });
        }
        let Some(tail) = tail else {
            return Ok(());
        };
        // [<mtu>][:<macaddr>], else [<dns1>][:<dns2>]
        if let Ok((mtu, mac)) = mtu_mac(arg, tail) {
            set_mtu_mac(n, mtu, mac);
            return Ok(());
        }
        let first = tail.split(':').next().unwrap_or_default();
        if !first.is_empty() && !first.starts_with('[') && !first.contains('.') {
            // Not an address: the MTU's error.
            mtu_mac(arg, tail)?;
        }
        let mut t = tail;
        for _ in 0..2 {
            if let Some(dns) = dns_field(arg, &mut t)? {
                n.dns.push(dns);
            }
            t = t.strip_prefix(':').unwrap_or(t);
        }
        if !t.is_empty() {
            bail!(
                "{arg}: {tail:?} after the method is neither <mtu>[:<macaddr>] nor <dns1>[:<dns2>]"
            );
        }
        Ok(())
    }

    /// ip=<interface>:<method>[:[<mtu>][:<macaddr>]]
    fn ip_interface(&mut self, arg: &str, value: &str) -> Result<()> {
        let (ifname, rest) = value
            .split_once(':')
            .expect("the caller checked for a colon");
        let (method, tail) = match rest.split_once(':') {
            Some((m, t)) => (m, Some(t)),
            None => (rest, None),
        };
        let autoconf = Autoconf::parse(arg, method)?;
        let mtu_mac = tail.map(|t| mtu_mac(arg, t)).transpose()?;
        let n = self.network(arg, ifname)?;
        n.autoconf = Some(autoconf);
        if let Some((mtu, mac)) = mtu_mac {
            set_mtu_mac(n, mtu, mac);
        }
        Ok(())
    }

    /// rd.route=<net>/<prefix>:<gateway>[:<interface>] (IPv6 in brackets).
    fn route(&mut self, arg: &str, value: &str) -> Result<()> {
        let (net, rest, v6) = if let Some(v) = value.strip_prefix('[') {
            let (net, r) = v
                .split_once(']')
                .ok_or_else(|| anyhow!("{arg}: the IPv6 network lacks its closing bracket"))?;
            let r = r
                .strip_prefix(':')
                .ok_or_else(|| anyhow!("{arg}: the network is not followed by :<gateway>"))?;
            (net, r, true)
        } else {
            let (net, r) = value
                .split_once(':')
                .ok_or_else(|| anyhow!("{arg}: expected <net>/<prefix>:<gateway>[:<interface>]"))?;
            (net, r, false)
        };
        let (a, p) = match net.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (net, None),
        };
        let dest: IpAddr = if v6 {
            a.parse::<Ipv6Addr>().map(IpAddr::V6)
        } else {
            a.parse::<Ipv4Addr>().map(IpAddr::V4)
        }
        .map_err(|_| {
            anyhow!(
                "{arg}: {a:?} is not an {} network",
                if v6 { "IPv6" } else { "IPv4" }
            )
        })?;
        let max = if v6 { 128 } else { 32 };
        let prefix = match p {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max && p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => bail!("{arg}: prefix length {p:?} is not 0 to {max}"),
            },
        };
        let rest = if rest.contains(':') {
            rest.to_string()
        } else {
            format!("{rest}:")
        };
        let mut r = rest.as_str();
        let gateway = addr_field(arg, &mut r, v6, "gateway")?;
        let iface = r.to_string();
        let dest = (!dest.is_unspecified()).then_some((dest, prefix));
        if dest.is_none() && gateway.is_none() {
            return Ok(());
        }
        self.network(arg, &iface)?
            .routes
            .push(Route { dest, gateway });
        Ok(())
    }

    /// vlan=<vlanname>:<phys>; the id is the name's trailing number (vlan0005, vlan5,
    /// eth0.0005, eth0.5).
    fn vlan(&mut self, arg: &str, value: &str) -> Result<()> {
        let (name, phys) = value
            .split_once(':')
            .ok_or_else(|| anyhow!("{arg}: expected <vlanname>:<phys>"))?;
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if name.is_empty() || digits == 0 || digits == name.len() {
            bail!(
                "{arg}: the VLAN id comes from the name's trailing number (vlan0005, vlan5, eth0.0005, eth0.5); {name:?} has none"
            );
        }
        let id: u16 = name[name.len() - digits..]
            .parse()
            .ok()
            .filter(|id| *id <= 4094)
            .ok_or_else(|| anyhow!("{arg}: VLAN id of {name} is over 4094"))?;
        self.netdev(arg, name, NetDevKind::Vlan(id))?.kind = NetDevKind::Vlan(id);
        self.network(arg, phys)?.vlans.push(name.to_string());
        Ok(())
    }

    /// bridge=<bridgename>:<ethnames> (comma-separated).
    fn bridge(&mut self, arg: &str, value: &str) -> Result<()> {
        let (name, ports) = value
            .split_once(':')
            .ok_or_else(|| anyhow!("{arg}: expected <bridgename>:<ethnames>"))?;
        self.netdev(arg, name, NetDevKind::Bridge)?;
        if ports.is_empty() {
            bail!("{arg}: no interfaces for the bridge");
        }
        for p in ports.split(',').filter(|p| !p.is_empty()) {
            self.network(arg, p)?.bridge = Some(name.to_string());
        }
        Ok(())
    }

    /// bond=<bondname>:<bondslaves>[:<options>[:<mtu>]] (slaves and options comma-separated).
    fn bond(&mut self, arg: &str, value: &str) -> Result<()> {
        let (name, rest) = value.split_once(':').ok_or_else(|| {
            anyhow!("{arg}: expected <bondname>:<bondslaves>[:<options>[:<mtu>]]")
        })?;
        self.netdev(arg, name, NetDevKind::Bond(Vec::new()))?;
        let (slaves, rest) = match rest.split_once(':') {
            Some((s, r)) => (s, Some(r)),
            None => (rest, None),
        };
        if slaves.is_empty() {
            bail!("{arg}: no slave interfaces for the bond");
        }
        for s in slaves.split(',').filter(|s| !s.is_empty()) {
            self.network(arg, s)?.bond = Some(name.to_string());
        }
        let Some(rest) = rest else {
            return Ok(());
        };
        let (options, mtu) = match rest.split_once(':') {
            Some((o, m)) => (o, Some(m)),
            None => (rest, None),
        };
        let options = bond_options(arg, options)?;
        let mtu = mtu.map(|m| parse_mtu(arg, m)).transpose()?;
        let d = self.netdevs.get_mut(name).expect("created above");
        d.kind = NetDevKind::Bond(options);
        if mtu.is_some() {
            d.mtu = mtu;
        }
        Ok(())
    }

    /// ifname=<interface>:<MAC>
    fn ifname(&mut self, arg: &str, value: &str) -> Result<()> {
        let (name, mac) = value
            .split_once(':')
            .ok_or_else(|| anyhow!("{arg}: expected <interface>:<MAC>"))?;
        check_ifname(arg, name)?;
        let mac = parse_mac(mac).ok_or_else(|| anyhow!("{arg}: {mac:?} is not a MAC address"))?;
        if self.renames.insert(name.to_string(), mac).is_some() {
            bail!("{arg}: {name} is named by an earlier ifname= too");
        }
        Ok(())
    }

    /// `nameserver=`, `rd.route=` without an interface and `rd.peerdns=` apply to every named
    /// interface when there is one (the network "" then goes).
    fn merge_defaults(&mut self) {
        if self.networks.len() <= 1 {
            return;
        }
        let Some(all) = self.networks.remove("") else {
            return;
        };
        for n in self.networks.values_mut() {
            n.use_dns = all.use_dns;
            n.dns.extend(all.dns.iter().copied());
            n.routes.extend(all.routes.iter().cloned());
        }
    }
}

fn set_mtu_mac(n: &mut Network, mtu: Option<u32>, mac: Option<[u8; 6]>) {
    if mtu.is_some() {
        n.mtu = mtu;
    }
    if mac.is_some() {
        n.mac = mac;
    }
}

/// `[<mtu>][:<macaddr>]`
fn mtu_mac(arg: &str, s: &str) -> Result<(Option<u32>, Option<[u8; 6]>)> {
    let (mtu, mac) = match s.split_once(':') {
        Some((m, a)) => (m, a),
        None => (s, ""),
    };
    let mtu = (!mtu.is_empty()).then(|| parse_mtu(arg, mtu)).transpose()?;
    let mac = if mac.is_empty() {
        None
    } else {
        Some(parse_mac(mac).ok_or_else(|| anyhow!("{arg}: {mac:?} is not a MAC address"))?)
    };
    Ok((mtu, mac))
}

fn parse_mtu(arg: &str, s: &str) -> Result<u32> {
    match s.parse::<u32>() {
        Ok(m) if (68..=MAX_MTU).contains(&m) && s.bytes().all(|b| b.is_ascii_digit()) => Ok(m),
        _ => bail!("{arg}: MTU {s:?} is not a number from 68 to {MAX_MTU}"),
    }
}

/// One address field followed by `:` (empty: none); IPv6 in brackets.
fn addr_field(arg: &str, rest: &mut &str, v6: bool, what: &str) -> Result<Option<IpAddr>> {
    if let Some(r) = rest.strip_prefix(':') {
        *rest = r;
        return Ok(None);
    }
    if v6 {
        let inner = rest
            .strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .ok_or_else(|| anyhow!("{arg}: the {what} must be an IPv6 address in brackets"))?;
        let r = inner
            .1
            .strip_prefix(':')
            .ok_or_else(|| anyhow!("{arg}: the {what} is not followed by ':'"))?;
        let a: Ipv6Addr = inner
            .0
            .parse()
            .map_err(|_| anyhow!("{arg}: {what} {:?} is not an IPv6 address", inner.0))?;
        *rest = r;
        Ok(Some(IpAddr::V6(a)))
    } else {
        let (f, r) = rest
            .split_once(':')
            .ok_or_else(|| anyhow!("{arg}: too few fields (after the {what})"))?;
        let a: Ipv4Addr = f
            .parse()
            .map_err(|_| anyhow!("{arg}: {what} {f:?} is not an IPv4 address"))?;
        *rest = r;
        Ok(Some(IpAddr::V4(a)))
    }
}

/// One DNS server of `ip=`'s tail: IPv4, or IPv6 in brackets; empty is none.
fn dns_field(arg: &str, rest: &mut &str) -> Result<Option<IpAddr>> {
    if rest.is_empty() {
        return Ok(None);
    }
    if let Some(r) = rest.strip_prefix('[') {
        let (a, r) = r
            .split_once(']')
            .ok_or_else(|| anyhow!("{arg}: the IPv6 name server lacks its closing bracket"))?;
        if !(r.is_empty() || r.starts_with(':')) {
            bail!("{arg}: unexpected {r:?} after the name server [{a}]");
        }
        let a: Ipv6Addr = a
            .parse()
            .map_err(|_| anyhow!("{arg}: name server [{a}] is not an IPv6 address"))?;
        *rest = r;
        return Ok(Some(IpAddr::V6(a)));
    }
    let end = rest.find(':').unwrap_or(rest.len());
    let f = &rest[..end];
    if f.is_empty() {
        return Ok(None);
    }
    let a: Ipv4Addr = f.parse().map_err(|_| {
        anyhow!("{arg}: {f:?} is neither an MTU nor an IPv4 name server (IPv6 ones go in brackets)")
    })?;
    *rest = &rest[end..];
    Ok(Some(IpAddr::V4(a)))
}

/// An IPv4 or IPv6 address without brackets (`nameserver=`).
fn parse_ip_auto(s: &str) -> Option<IpAddr> {
    s.parse().ok()
}

/// `xx:xx:xx:xx:xx:xx` or `xx-xx-xx-xx-xx-xx` (one or two hex digits each), or
/// `xxxx.xxxx.xxxx`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let parts: Vec<&str> = if s.contains(':') {
        s.split(':').collect()
    } else if s.contains('-') {
        s.split('-').collect()
    } else {
        let groups: Vec<&str> = s.split('.').collect();
        if groups.len() != 3 || groups.iter().any(|g| g.len() != 4) {
            return None;
        }
        for (i, g) in groups.iter().enumerate() {
            let v = u16::from_str_radix(g, 16).ok()?;
            if !g.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        }
        return Some(out);
    };
    if parts.len() != 6 {
        return None;
    }
    for (o, p) in out.iter_mut().zip(&parts) {
        if p.is_empty() || p.len() > 2 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *o = u8::from_str_radix(p, 16).ok()?;
    }
    Some(out)
}

/// dracut's boolean (and systemd's): 1/yes/true/on, 0/no/false/off.
fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "yes" | "y" | "true" | "t" | "on" => Some(true),
        "0" | "no" | "n" | "false" | "f" | "off" => Some(false),
        _ => None,
    }
}

/// A kernel interface name: 1 to 15 printable ASCII characters, none of `:`, `/`, `%` or
/// space, not `.`/`..`, `all`, `default` or a number.
pub fn check_ifname(arg: &str, name: &str) -> Result<()> {
    let why = if name.is_empty() {
        "is empty"
    } else if name.len() > 15 {
        "is longer than 15 characters"
    } else if name == "." || name == ".." || name == "all" || name == "default" {
        "is reserved"
    } else if name.bytes().all(|b| b.is_ascii_digit()) {
        "is a number"
    } else if name
        .bytes()
        .any(|b| b <= b' ' || b >= 0x7f || matches!(b, b':' | b'/' | b'%'))
    {
        "has a character interface names cannot have (space, ':', '/', '%', non-ASCII)"
    } else {
        return Ok(());
    };
    bail!("{arg}: interface name {name:?} {why}")
}

/// A host name: at most 64 characters, dot-separated labels of letters, digits and '-' (not
/// at either end of a label).
fn check_hostname(arg: &str, h: &str) -> Result<()> {
    let ok = !h.is_empty()
        && h.len() <= 64
        && h.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !ok {
        bail!(
            "{arg}: host name {h:?} is not valid (at most 64 characters; labels of letters, digits and inner '-', separated by single dots)"
        );
    }
    Ok(())
}

/// How a bond option's value is read.
enum BondValue {
    /// One of these names, or its index (as the bonding driver takes it).
    Pick(&'static [&'static str]),
    /// Milliseconds, written with the unit.
    Millis,
    /// Seconds, written with the unit.
    Secs,
    /// A number up to the bound.
    Num(u64),
    /// 0 or 1, written no or yes.
    Flag,
    /// IPv4 addresses separated by ';' (a comma separates options).
    Targets,
}

/// The bond options of dracut's bond= (the bonding driver's names) and their networkd
/// `[Bond]` settings.
const BOND_OPTIONS: &[(&str, &str, BondValue)] = &[
    (
        "mode",
        "Mode",
        BondValue::Pick(&[
            "balance-rr",
            "active-backup",
            "balance-xor",
            "broadcast",
            "802.3ad",
            "balance-tlb",
            "balance-alb",
        ]),
    ),
    ("miimon", "MIIMonitorSec", BondValue::Millis),
    ("updelay", "UpDelaySec", BondValue::Millis),
    ("downdelay", "DownDelaySec", BondValue::Millis),
    ("arp_interval", "ARPIntervalSec", BondValue::Millis),
    ("lp_interval", "LearnPacketIntervalSec", BondValue::Secs),
    (
        "lacp_rate",
        "LACPTransmitRate",
        BondValue::Pick(&["slow", "fast"]),
    ),
    (
        "xmit_hash_policy",
        "TransmitHashPolicy",
        BondValue::Pick(&["layer2", "layer3+4", "layer2+3", "encap2+3", "encap3+4"]),
    ),
    (
        "ad_select",
        "AdSelect",
        BondValue::Pick(&["stable", "bandwidth", "count"]),
    ),
    (
        "fail_over_mac",
        "FailOverMACPolicy",
        BondValue::Pick(&["none", "active", "follow"]),
    ),
    (
        "arp_validate",
        "ARPValidate",
        BondValue::Pick(&[
            "none",
            "active",
            "backup",
            "all",
            "filter",
            "filter_active",
            "filter_backup",
        ]),
    ),
    (
        "arp_all_targets",
        "ARPAllTargets",
        BondValue::Pick(&["any", "all"]),
    ),
    (
        "primary_reselect",
        "PrimaryReselectPolicy",
        BondValue::Pick(&["always", "better", "failure"]),
    ),
    ("min_links", "MinLinks", BondValue::Num(65535)),
    ("resend_igmp", "ResendIGMP", BondValue::Num(255)),
    ("num_grat_arp", "GratuitousARP", BondValue::Num(255)),
    ("num_unsol_na", "GratuitousARP", BondValue::Num(255)),
    (
        "packets_per_slave",
        "PacketsPerSlave",
        BondValue::Num(65535),
    ),
    ("all_slaves_active", "AllSlavesActive", BondValue::Flag),
    ("arp_ip_target", "ARPIPTargets", BondValue::Targets),
];

/// The bond options (comma-separated `key=value`) as networkd's `[Bond]` settings.
fn bond_options(arg: &str, s: &str) -> Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    for o in s.split(',').filter(|o| !o.is_empty()) {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| anyhow!("{arg}: bond option {o:?} is not <name>=<value>"))?;
        let Some((_, key, how)) = BOND_OPTIONS.iter().find(|(n, _, _)| *n == k) else {
            let known: Vec<&str> = BOND_OPTIONS.iter().map(|(n, _, _)| *n).collect();
            bail!("{arg}: unknown bond option {k:?} ({})", known.join(", "));
        };
        let num = |max: u64| -> Result<u64> {
            match v.parse::<u64>() {
                Ok(n) if n <= max && v.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
                _ => bail!("{arg}: bond option {k}: {v:?} is not a number up to {max}"),
            }
        };
        let val = match how {
            BondValue::Pick(names) => {
                let i = v.parse::<usize>().ok().filter(|i| *i < names.len());
                match (names.iter().find(|n| **n == v), i) {
                    (Some(n), _) => (*n).to_string(),
                    (None, Some(i)) => names[i].to_string(),
                    _ => bail!(
                        "{arg}: bond option {k}: {v:?} is not one of {}",
                        names.join(", ")
                    ),
                }
            }
            BondValue::Millis => format!("{}ms", num(1 << 31)?),
            BondValue::Secs => format!("{}s", num(0x7fff_ffff)?),
            BondValue::Num(max) => num(*max)?.to_string(),
            BondValue::Flag => match v {
                "0" => "no".to_string(),
                "1" => "yes".to_string(),
                _ => bail!("{arg}: bond option {k}: {v:?} is not 0 or 1"),
            },
            BondValue::Targets => {
                let mut t = Vec::new();
                for a in v.split(';') {
                    let ip: Ipv4Addr = a.parse().map_err(|_| {
                        anyhow!("{arg}: bond option {k}: {a:?} is not an IPv4 address")
                    })?;
                    t.push(ip.to_string());
                }
                t.join(" ")
            }
        };
        out.push((*key, val));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
