#!/usr/bin/env python3
"""Network boot's costs (docs/benchmarks.md): the time `agent serve` takes to load
a source of one pool (21 placeholders) with 0 and with 1,000 machine files (median of 3
starts), and, with 1,000, a machine's `/ipxe` + `/machine-config` against the plain
`/config/worker` fetch in the same run (200 each, one client in sequence).

    AGENT=target/release/agent python3 benches/boot_load.py
"""
import json, os, shutil, subprocess, tempfile, time, urllib.request

AGENT = os.environ.get("AGENT", "target/release/agent")
PLACEHOLDER = "%7B%7B.ip%7D%7D"
POOL = {"ignition": {"version": "3.3.0"}, "storage": {"files": [
    {"path": "/etc/hostname", "mode": 420, "overwrite": True,
     "contents": {"source": "data:,%7B%7B.hostname%7D%7D%0A"}}]
    + [{"path": f"/etc/f{i}", "mode": 420, "contents": {"source": "data:,x%20" + PLACEHOLDER}}
       for i in range(20)]},
    "systemd": {"units": [{"name": "app.service",
                           "contents": "[Service]\nExecStart=/bin/app --ip={{.ip}}\n"}]}}


def mac(i, sep):
    return sep.join(["52", "54", "00"] + ["%02x" % (i >> s & 255) for s in (16, 8, 0)])


def make(top, n):
    d = os.path.join(top, f"src{n}")
    for sub in ("pools", "machines", "boot/assets"):
        os.makedirs(os.path.join(d, sub))
    json.dump(POOL, open(f"{d}/pools/worker.ign", "w"))
    for i in range(n):
        json.dump({"selector": {"mac": mac(i, ":")}, "pool": "worker",
                   "values": {"hostname": f"node-{i}", "ip": f"10.0.{i >> 8 & 255}.{i & 255}"}},
                  open(f"{d}/machines/m{i}.json", "w"))
    json.dump({"kernel": "k", "initrd": [], "args": []}, open(f"{d}/boot/default.json", "w"))
    open(f"{d}/boot/assets/k", "wb").write(b"k" * 1000)
    return d


def start(top, d, r):
    st = os.path.join(top, f"state-{os.path.basename(d)}-{r}")
    t = time.monotonic()
    p = subprocess.Popen([AGENT, "serve", "--source", d, "--listen-http", "127.0.0.1:0",
                          "--admin-listen", "off", "--state-dir", st, "--no-access-log"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    addr = None
    for line in p.stdout:
        if line.startswith("listening http://"):
            addr = line.split("//")[1].strip()
        if line.startswith("source"):
            assert "source loaded" in line, line
            return p, addr, time.monotonic() - t
    raise SystemExit("agent serve stopped")


def main():
    res = {}
    with tempfile.TemporaryDirectory() as top:
        for n in (0, 1000):
            d = make(top, n)
            times = []
            for r in range(3):
                p, addr, took = start(top, d, r)
                times.append(took)
                if n and r == 2:
                    k = 200
                    t = time.monotonic()
                    for i in range(k):
                        s = urllib.request.urlopen(f"http://{addr}/ipxe?mac={mac(i, '-')}").read().decode()
                        url = [w for w in s.split() if w.startswith("agent.config.url=")][0]
                        urllib.request.urlopen(url.split("=", 1)[1]).read()
                    res["ipxe_and_config_ms"] = (time.monotonic() - t) / k * 1000
                    t = time.monotonic()
                    for i in range(k):
                        urllib.request.urlopen(f"http://{addr}/config/worker").read()
                    res["plain_config_ms"] = (time.monotonic() - t) / k * 1000
                p.terminate()
                p.wait()
            res[f"load_s_{n}_machines"] = sorted(times)[1]
    print(json.dumps(res))


main()
