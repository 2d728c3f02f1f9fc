#!/usr/bin/env python3
"""Differential run of `agent butane` against real Butane v0.29.0 (the oracle).

    python3 tests/butane_diff/gen.py > /tmp/inputs.jsonl
    python3 tests/butane_diff/run.py --oracle /work/oracle/butane --agent target/release/agent \
        /tmp/inputs.jsonl [--record tests/butane_diff/fixtures.jsonl.gz] [--show CLASS]

Both run with `--files-dir tests/butane_diff/files` and `--raw-errors`, and with `--raw` except
for the cases marked `"mc": true` (openshift configs written as a MachineConfig). Compared: the
exit status, the output (JSON parsed; a MachineConfig byte for byte), the set of paths of
warnings (which decides `--strict`) and, where both refuse, the set of paths of errors (class
`errors`; also counted apart). `--record` writes the oracle's verdicts as the fixtures that
`tests/butane/diff.rs` replays without Go: one JSON line per case with the input, the exit
status, the output (compact JSON text), the warning paths and the error paths. `--known FILE`
writes the cases that differ (id, class) for `known.tsv`, whose third column (why) is written by
hand.

How to build the oracle: `git archive v0.29.0` of github.com/coreos/butane, then
`GOFLAGS=-mod=vendor CGO_ENABLED=0 go build -o butane internal/main.go` (go 1.23 works after
lowering go.mod's `go` line; the vendored modules build with it).
"""

import base64
import gzip
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(HERE, "files")
PATH_RE = re.compile(r"^(warning|error)(?: at (\$[^,:]*)|\[(\$[^\]]*)\])")


def diags(stderr):
    warns, errs = set(), set()
    for line in stderr.decode("utf-8", "replace").splitlines():
        m = PATH_RE.match(line)
        if not m:
            continue
        p = m.group(2) or m.group(3) or ""
        (warns if m.group(1) == "warning" else errs).add(p)
    return sorted(warns), sorted(errs)


def data(c):
    if "b64" in c:
        return base64.b64decode(c["b64"])
    return c["input"].encode()


def run(cmd, inp, mc=False):
    p = subprocess.run(cmd, input=inp, capture_output=True, timeout=60, cwd=HERE)
    w, e = diags(p.stderr)
    out = None
    if p.returncode == 0 and mc:
        out = p.stdout.decode("utf-8", "replace")
    elif p.returncode == 0:
        try:
            out = json.loads(p.stdout)
        except ValueError:
            out = "<not json>"
    return {"exit": p.returncode, "json": out, "warnings": w, "errors": e, "stdout": p.stdout, "stderr": p.stderr}


def main():
    args = sys.argv[1:]
    oracle, agent, record, show, inputs, known = None, None, None, None, None, None
    known_rows = []
    old = False
    while args:
        a = args.pop(0)
        if a == "--oracle":
            oracle = args.pop(0)
        elif a == "--agent":
            agent = os.path.abspath(args.pop(0))
        elif a == "--record":
            record = args.pop(0)
        elif a == "--known":
            known = args.pop(0)
        elif a == "--old":
            old = True  # an agent from before -r/--raw-errors (raw output, one-line errors)
        elif a == "--show":
            show = args.pop(0)
        else:
            inputs = a
    cases = [json.loads(l) for l in open(inputs)]

    def one(c):
        inp = data(c)
        mode = [] if c.get("mc") else ["--raw"]
        o = run([oracle, *mode, "--raw-errors", "-d", FILES], inp, c.get("mc")) if oracle else None
        flags = [] if old else [*mode, "--raw-errors"]
        g = run([agent, "butane", *flags, "-d", FILES], inp, c.get("mc")) if agent else None
        return c, o, g

    counts = {"agree": 0, "exit/json": 0, "warnings": 0, "errors": 0}
    error_paths = [0, 0]
    rec = []
    with ThreadPoolExecutor(max_workers=3) as ex:
        for c, o, g in ex.map(one, cases):
            if o is not None:
                rec.append({k: v for k, v in c.items()} | {
                    "exit": o["exit"],
                    "output": (o["stdout"].decode() if c.get("mc") else o["stdout"].decode().strip()) if o["exit"] == 0 else None,
                    "warnings": o["warnings"],
                    "errors": o["errors"],
                })
            if o is None or g is None:
                continue
            if o["exit"] != g["exit"] or o["json"] != g["json"]:
                cls = "exit/json"
            elif o["warnings"] != g["warnings"]:
                cls = "warnings"
            elif o["exit"] != 0 and o["errors"] != g["errors"]:
                cls = "errors"
            else:
                cls = "agree"
            counts[cls] += 1
            if o["exit"] != 0 and g["exit"] != 0:
                error_paths[0] += 1
                error_paths[1] += o["errors"] == g["errors"]
            if cls != "agree":
                known_rows.append(f"{c['id']}\t{cls}\n")
            if show and (show == cls or show == "all") and cls != "agree":
                print("=" * 70)
                print(f"case {c['id']} [{cls}]")
                print(data(c).decode("utf-8", "replace"))
                print(f"-- oracle exit {o['exit']} warn {o['warnings']} errors {o['errors']}\n{o['stderr'].decode('utf-8','replace')[:600]}{o['stdout'].decode()[:800]}")
                print(f"-- agent exit {g['exit']} warn {g['warnings']} errors {g['errors']}\n{g['stderr'].decode('utf-8','replace')[-600:]}{g['stdout'].decode()[:800]}")
    n = sum(counts.values())
    print(f"N={n} agree={counts['agree']} differ-exit/json={counts['exit/json']} differ-warnings-only={counts['warnings']} differ-errors-only={counts['errors']}", file=sys.stderr)
    print(f"refused by both: {error_paths[0]}, same error paths: {error_paths[1]}", file=sys.stderr)
    if known:
        with open(known, "w") as f:
            f.write("# Cases of fixtures.jsonl.gz where agent butane still differs from Butane v0.29.0\n")
            f.write("# (id, what differs: exit/json, warnings or errors, why: filled in by hand). Written by run.py --known; tests/butane/diff.rs fails on any\n")
            f.write("# other difference and on a listed case that now agrees.\n")
            f.writelines(sorted(known_rows, key=lambda r: int(r.split("\t")[0])))
    if record:
        with gzip.open(record, "wt") as f:
            for r in rec:
                f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
