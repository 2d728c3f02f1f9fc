#!/usr/bin/env python3
"""Generates varied kernel command lines with dracut's network arguments for the differential
test against systemd-network-generator.

    python3 tests/network_diff/gen.py [--seed N] [--count N] > inputs.jsonl

Each line is {"id": N, "cmdline": "..."}. A command line combines one to five network
arguments (ip= in its three forms, IPv4 and IPv6, nameserver=, rd.route=, rd.peerdns=, bond=,
vlan=, bridge=, ifname=, hostname=, rd.neednet) from valid and broken fragments with noise
(root=, console=, quiet). `run.py` feeds them to systemd-network-generator.
"""

import argparse
import json
import random

IFACES = ["eth0", "eth1", "ens3", "enp1s0", "bond0", "br0", "vlan5", "eth0.7", "lan0"]
BAD_IFACES = ["", "all", "default", "1234", "a:b", "a/b", "eth%0", "abcdefghijklmnop", ".", "..", "é0"]
V4 = ["192.168.1.10", "10.0.2.15", "172.16.0.5", "0.0.0.0", "255.255.255.255", "1.2.3.4"]
BAD_V4 = ["192.168.1", "256.1.1.1", "01.2.3.4", "a.b.c.d", "1.2.3.4.5", "::1"]
V6 = ["2001:db8::5", "fd00::1", "::1", "fe80::1", "2001:db8:0:0:0:0:0:1", "::ffff:1.2.3.4"]
BAD_V6 = ["2001:db8::g", "1.2.3.4", ":::", "2001:db8"]
GW4 = ["192.168.1.1", "10.0.2.2", "", "172.16.0.1"]
MASKS = ["255.255.255.0", "24", "16", "32", "0", "", "255.255.0.0", "255.255.255.255", "0.0.0.0"]
BAD_MASKS = ["255.0.255.0", "33", "99", "255", "256", "-1", "24x", "255.255.255.1", "abc"]
PREFIX6 = ["64", "128", "48", "", "0"]
BAD_PREFIX6 = ["129", "[ffff::]", "x", "200"]
HOSTS = ["", "host1", "node-a.example.com", "a" * 63, "x1"]
BAD_HOSTS = ["-", "a..b", "a_b", "a" * 65, "host!", ".a", "a."]
METHODS = ["none", "off", "dhcp", "on", "any", "dhcp6", "auto6", "link6", "either6"]
BAD_METHODS = ["ibft", "single-dhcp", "static", "", "DHCP", "dhcp4"]
BARE = ["dhcp", "on", "any", "dhcp6", "auto6", "either6", "link6", "none", "off"]
BAD_BARE = ["single-dhcp", "ibft", "", "foo", "static"]
MTUS = ["", "1500", "9000", "68", "1280", "576"]
BAD_MTUS = ["67", "0", "65536", "100000", "1K", "x", "-5", "1500.5"]
MACS = ["", "52:54:00:12:34:56", "52:54:00:AA:BB:CC", "01-02-03-04-05-06", "0102.0304.0506", "1:2:3:4:5:6"]
BAD_MACS = ["52:54:00:12:34", "52:54:00:12:34:56:78", "zz:54:00:12:34:56", "525400123456", "123:4:5:6:7:8"]
DNS4 = ["8.8.8.8", "1.1.1.1", ""]
DNS6 = ["[2001:4860:4860::8888]", "[::1]"]
BAD_DNS = ["dns.example", "[1.2.3.4]", "2001:db8::1", "[2001:db8::1", "300.1.1.1"]


def pick(r, good, bad, p_bad=0.12):
    return r.choice(bad) if r.random() < p_bad else r.choice(good)


def iface(r, p_bad=0.06):
    return pick(r, IFACES, BAD_IFACES, p_bad)


def tail(r):
    """The optional [:<mtu>[:<mac>]] or [:<dns1>[:<dns2>]] after the method."""
    k = r.random()
    if k < 0.35:
        return ""
    if k < 0.7:
        mtu = pick(r, MTUS, BAD_MTUS)
        if r.random() < 0.5:
            return f":{mtu}"
        return f":{mtu}:{pick(r, MACS, BAD_MACS)}"
    d1 = pick(r, DNS4 + DNS6, BAD_DNS)
    if r.random() < 0.5:
        return f":{d1}"
    out = f":{d1}:{pick(r, DNS4 + DNS6, BAD_DNS)}"
    if r.random() < 0.05:
        out += ":junk"
    return out


def ip_static4(r):
    addr = pick(r, V4, BAD_V4, 0.08)
    peer = r.choice(["", "", "", "192.168.1.99"])
    gw = pick(r, GW4, BAD_V4, 0.05)
    mask = pick(r, MASKS, BAD_MASKS, 0.15)
    host = pick(r, HOSTS, BAD_HOSTS, 0.08)
    dev = r.choice([""] + IFACES) if r.random() < 0.1 else iface(r)
    method = pick(r, METHODS, BAD_METHODS, 0.08)
    s = f"ip={addr}:{peer}:{gw}:{mask}:{host}:{dev}:{method}{tail(r)}"
    if r.random() < 0.04:  # a field short
        s = s.rsplit(":", 1)[0]
    return s


def ip_static6(r):
    addr = pick(r, V6, BAD_V6, 0.08)
    peer = r.choice(["", "", "", "[fd00::99]"])
    gw = r.choice(["", "[2001:db8::1]", "[fe80::1]"]) if r.random() > 0.05 else "[zz::1]"
    pre = pick(r, PREFIX6, BAD_PREFIX6, 0.12)
    host = pick(r, HOSTS, BAD_HOSTS, 0.05)
    method = pick(r, METHODS, BAD_METHODS, 0.08)
    a = f"[{addr}]" if r.random() > 0.04 else addr
    return f"ip={a}:{peer}:{gw}:{pre}:{host}:{iface(r)}:{method}{tail(r)}"


def ip_iface(r):
    method = pick(r, METHODS, BAD_METHODS, 0.08)
    t = ""
    if r.random() < 0.5:
        t = f":{pick(r, MTUS, BAD_MTUS)}"
        if r.random() < 0.5:
            t += f":{pick(r, MACS, BAD_MACS)}"
    return f"ip={iface(r)}:{method}{t}"


def ip_bare(r):
    return f"ip={pick(r, BARE, BAD_BARE, 0.1)}"


def ip_any(r):
    k = r.random()
    if k < 0.45:
        return ip_static4(r)
    if k < 0.6:
        return ip_static6(r)
    if k < 0.85:
        return ip_iface(r)
    return ip_bare(r)


def nameserver(r):
    return f"nameserver={pick(r, ['8.8.8.8', '1.1.1.1', '2001:4860:4860::8888', '::1'], ['dns.example', '[::1]', '', '1.2.3'], 0.1)}"


def route(r):
    if r.random() < 0.75:
        net = pick(r, ["10.0.0.0/8", "192.168.200.0/24", "0.0.0.0/0", "10.1.2.3/16", "172.16.0.0", "10.0.0.0/32"],
                   ["10.0.0.0/33", "10.0.0.0/x", "10.0.0/8", "10.0.0.0/255.0.0.0"], 0.12)
        gw = pick(r, ["192.168.1.254", "10.0.2.2", ""], ["a.b", "1.2.3"], 0.05)
    else:
        net = pick(r, ["[2001:db8::/32]", "[fd00::/8]", "[::/0]"], ["[2001:db8::/129]", "2001:db8::/32", "[2001:db8::/32"], 0.15)
        gw = pick(r, ["[2001:db8::1]", "[fe80::1]", ""], ["2001:db8::1"], 0.08)
    dev = "" if r.random() < 0.35 else f":{iface(r, 0.03)}"
    s = f"rd.route={net}:{gw}{dev}"
    if r.random() < 0.04:
        s = f"rd.route={net}"
    return s


def bond(r):
    name = r.choice(["bond0", "bond1", "bond0"]) if r.random() > 0.04 else r.choice(BAD_IFACES)
    slaves = r.choice(["eth0,eth1", "eth0", "ens3,ens4", "eth0,,eth1", ",eth2", ""]) if r.random() > 0.04 else "eth0,a:b"
    opts = r.choice(["", "mode=802.3ad", "mode=active-backup,miimon=100", "mode=balance-rr", "mode=4,lacp_rate=fast",
                     "miimon=100,updelay=200,downdelay=200", "xmit_hash_policy=layer3+4,mode=802.3ad",
                     "mode=bogus", "frobnicate=1", "miimon", "arp_ip_target=10.0.0.1;10.0.0.2,arp_interval=100"])
    k = r.random()
    if k < 0.2:
        return f"bond={name}:{slaves}"
    if k < 0.55:
        return f"bond={name}:{slaves}:{opts}"
    if k < 0.95:
        return f"bond={name}:{slaves}:{opts}:{pick(r, MTUS[1:], BAD_MTUS)}"
    return r.choice(["bond", "bond=bond0", "bond=", f"bond={name}:{slaves}:{opts}:1500:extra"])


def vlan(r):
    name = pick(r, ["vlan5", "vlan0005", "eth0.5", "eth0.0007", "vlan0", "vlan4094", "bond0.100"],
                ["vlan", "vlan4095", "vlan5000", "5", "v5x", "foo", "vlan99999"], 0.15)
    phys = pick(r, ["eth0", "eth1", "bond0", "ens3"], ["", "a:b", "all"], 0.05)
    if r.random() < 0.03:
        return f"vlan={name}"
    return f"vlan={name}:{phys}"


def bridge(r):
    name = pick(r, ["br0", "br1"], ["", "all", "bridge:x"], 0.05)
    ports = pick(r, ["eth0", "eth0,eth1", "ens3,ens4", "eth0,,eth1"], ["", ",", "eth0,a/b"], 0.08)
    if r.random() < 0.03:
        return "bridge"
    return f"bridge={name}:{ports}"


def ifname(r):
    name = pick(r, ["lan0", "wan0", "eth0", "mgmt"], ["", "all", "1234", "abcdefghijklmnop"], 0.06)
    mac = pick(r, ["52:54:00:12:34:56", "52:54:00:AB:CD:EF", "02-00-00-00-00-01"], ["52:54:00:12:34", "zz:00:00:00:00:00", ""], 0.08)
    return f"ifname={name}:{mac}"


def other(r):
    return r.choice([
        "rd.peerdns=0", "rd.peerdns=1", "rd.peerdns", "rd.peerdns=maybe", "rd.neednet", "rd.neednet=1",
        "rd.neednet=0", "hostname=node1", "hostname=node1.example.com", "hostname=bad_name", "ip", "nameserver",
        "rd.route", "vlan", "ifname", "ifname=lan0",
    ])


NOISE = ["quiet", "root=LABEL=root", "console=ttyS0,115200n8", "ignition.firstboot", "rw", "ro", "BOOTIF=01-52-54-00-12-34-56"]


def case(r):
    parts = []
    if r.random() < 0.85:
        parts.append(ip_any(r))
    kinds = [ip_any, ip_any, nameserver, route, bond, vlan, bridge, ifname, other]
    for _ in range(r.choice([0, 1, 1, 2, 2, 3, 4])):
        parts.append(r.choice(kinds)(r))
    if r.random() < 0.5:
        parts.insert(r.randrange(len(parts) + 1), r.choice(NOISE))
    r.shuffle(parts)
    return " ".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--count", type=int, default=4000)
    a = ap.parse_args()
    r = random.Random(a.seed)
    seen = set()
    n = 0
    while n < a.count:
        c = case(r)
        if c in seen or not c.strip():
            continue
        seen.add(c)
        print(json.dumps({"id": n, "cmdline": c}))
        n += 1


if __name__ == "__main__":
    main()
