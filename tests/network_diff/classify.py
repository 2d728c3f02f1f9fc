#!/usr/bin/env python3
"""Sorts the differences of tests/network/diff.rs into the deliberate categories of known.tsv.

    NETWORK_DIFF_DUMP=/tmp/nd.jsonl cargo test --test network diff::
    python3 tests/network_diff/classify.py /tmp/nd.jsonl   # rewrites known.tsv

A difference no rule explains is printed and left out of known.tsv (the test then fails on it).
"""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CATEGORIES = [
    ("no-ip", "without ip= the agent writes nothing and keeps DHCP on every ethernet link (as the initramfs did before); systemd writes the other arguments' files, whose 91-default.network would turn DHCP off on every link"),
    ("hostname-arg", "hostname= is checked (a bad host name is refused) and sent to DHCP servers by the interfaces whose ip= names none; systemd ignores hostname="),
    ("single-dhcp", "ip=single-dhcp (dracut.cmdline(7)) is DHCPv4 on every link; systemd refuses it"),
    ("empty-dns1", "ip=...:<method>::<dns2> (no first name server, a second) is accepted as dracut.cmdline(7) writes it; systemd refuses an empty first name server followed by a second"),
    ("ibft", "ip=...:ibft is refused: the agent does not read the firmware's iSCSI table; systemd writes DHCP=no, leaving the link unconfigured"),
    ("prefix-range", "a prefix length over 32 (IPv4) or 128 (IPv6) is refused; systemd writes it (e.g. Address=10.0.0.2/99) and networkd then drops the address"),
    ("netmask-holes", "a netmask whose one bits are not contiguous (255.0.255.0) is refused; systemd counts its trailing zeros (255.0.255.0 becomes /24)"),
    ("mtu-range", "an MTU must be a plain number from 68 (IPv4's minimum) to 65535; systemd takes 0 as none, below 68, above 65535 and sizes like 1K or 1500.5"),
    ("bond-options", "bond options are checked and written as networkd's [Bond] settings (mode=, miimon=, ...); an unknown option or value is refused; systemd ignores the options"),
]


def category(r):
    cmd = r["cmdline"]
    words = cmd.split()
    err = r["ours"].get("Err") if isinstance(r["ours"], dict) else None
    why = r["why"]
    has_ip = any(w.startswith("ip=") or w == "ip" for w in words)
    if err:
        if "ibft" in err:
            return "ibft"
        if "bond option" in err:
            return "bond-options"
        if "has holes" in err:
            return "netmask-holes"
        if "neither a prefix length" in err or "prefix length" in err:
            return "prefix-range"
        if "MTU" in err:
            return "mtu-range"
        if err.startswith("hostname="):
            return "hostname-arg"
        return None
    if why.startswith("we accept"):
        bad = re.search(r'Failed to parse command line "([^"]*)"', r["stderr"] or "")
        arg = bad.group(1) if bad else ""
        if "single-dhcp" in arg:
            return "single-dhcp"
        if re.search(r":(none|off|dhcp|on|any|dhcp6|auto6|link6|either6)::(\[|\d)", arg):
            return "empty-dns1"
        return None
    # Files differ.
    if not has_ip:
        return "no-ip"
    toks = why[len("files differ: "):].split(" ")
    if any("hostname=" in w for w in words) and all(t.startswith("+DHCP.Hostname=") for t in toks):
        return "hostname-arg"
    return None


def main():
    rows = [json.loads(l) for l in open(sys.argv[1])]
    out = ["# Cases of fixtures.jsonl.gz where agent network-generate deliberately differs from",
           "# systemd-network-generator: \"#= category<TAB>reason\", then \"id<TAB>category\".",
           "# Written by classify.py (see there)."]
    for c, why in CATEGORIES:
        out.append(f"#= {c}\t{why}")
    unexplained = 0
    for r in rows:
        c = category(r)
        if c is None:
            unexplained += 1
            print(f"{r['id']}: {r['cmdline']}\n    {r['why'][:400]}\n    ours: {str(r['ours'])[:300]}\n    systemd: {r['stderr'][-200:]}")
            continue
        out.append(f"{r['id']}\t{c}")
    with open(os.path.join(HERE, "known.tsv"), "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"{len(rows) - unexplained} classified, {unexplained} unexplained", file=sys.stderr)


if __name__ == "__main__":
    main()
