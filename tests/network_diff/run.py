#!/usr/bin/env python3
"""Records systemd-network-generator's answers to the command lines of gen.py.

    python3 tests/network_diff/gen.py | python3 tests/network_diff/run.py --record

For each command line: the exit status of
`systemd-network-generator --root=DIR -- <words>` and the files it wrote into
DIR/run/systemd/network (comment lines dropped). --record writes them, with the generator's
version, to tests/network_diff/fixtures.jsonl.gz, which tests/network/diff.rs replays (the
comparison itself is there: systemd is not needed to run the test).
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

GEN = "/usr/lib/systemd/systemd-network-generator"
HERE = os.path.dirname(os.path.abspath(__file__))


def answer(cmdline):
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([GEN, f"--root={d}", "--"] + cmdline.split(), capture_output=True, text=True, timeout=20)
        out = {}
        net = os.path.join(d, "run/systemd/network")
        if os.path.isdir(net):
            for name in sorted(os.listdir(net)):
                with open(os.path.join(net, name)) as f:
                    out[name] = "".join(l for l in f if not l.startswith("#"))
        return {"rc": p.returncode, "stderr": p.stderr.strip()[-300:], "files": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    version = subprocess.run(["systemctl", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    rows = []
    for line in sys.stdin:
        c = json.loads(line)
        c.update(answer(c["cmdline"]))
        rows.append(c)
    ok = sum(1 for r in rows if r["rc"] == 0)
    print(f"{len(rows)} command lines, {ok} accepted by {version}", file=sys.stderr)
    if a.record:
        with gzip.open(os.path.join(HERE, "fixtures.jsonl.gz"), "wt", compresslevel=9) as f:
            f.write(json.dumps({"oracle": GEN, "version": version}) + "\n")
            for r in rows:
                f.write(json.dumps(r, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
