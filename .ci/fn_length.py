#!/usr/bin/env python3
"""No function longer than MAX lines in the config server's crates (crates/serve, crates/http):
a function is counted from its `fn` line to the closing brace at the same indent (rustfmt
puts it there), its doc comment and attributes not included.

  python3 .ci/fn_length.py              check crates/serve and crates/http
  python3 .ci/fn_length.py --list N     show the N longest functions
  python3 .ci/fn_length.py --self-test  show that the check fails on a long function
"""
import os
import re
import sys
import tempfile

MAX = 120
CRATES = ("crates/serve", "crates/http")

FN = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:(?:const|async|unsafe|extern\s+\"[^\"]*\")\s+)*fn\s+([A-Za-z_][A-Za-z0-9_]*)")


def functions(text):
    """(name, first line, lines) of each function with a body in `text`."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        indent, name = m.group(1), m.group(2)
        close = indent + "}"
        # The signature ends at the first line ending in `{` (a body) or `;` (none).
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
            j += 1
        if j >= len(lines) or lines[j].rstrip().endswith(";"):
            continue
        for k in range(j, len(lines)):
            s = lines[k].rstrip()
            if k == i and s.endswith("}"):
                break
            if s.startswith(close) and (s == close or s[len(close)] in " );,"):
                out.append((name, i + 1, k - i + 1))
                break
    return out


def scan(root):
    found = []
    for crate in CRATES:
        for dirpath, _, files in os.walk(os.path.join(root, crate)):
            if "/target" in dirpath:
                continue
            for f in sorted(files):
                if f.endswith(".rs"):
                    p = os.path.join(dirpath, f)
                    with open(p, encoding="utf-8") as fh:
                        for name, line, n in functions(fh.read()):
                            found.append((n, os.path.relpath(p, root), line, name))
    return sorted(found, reverse=True)


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "crates/serve/src"))
        body = "\n".join(f"    let x{i} = {i};" for i in range(MAX - 2))
        inner = "\n".join("    " + l for l in body.splitlines())
        with open(os.path.join(d, "crates/serve/src/lib.rs"), "w") as fh:
            fh.write(f"pub fn short() {{\n{body}\n}}\n\nimpl A {{\n    fn long(&self) {{\n{inner}\n        let y = 0;\n    }}\n\n    fn decl(&self);\n}}\n")
        got = [(n, name) for n, _, _, name in scan(d) if n > MAX]
        if got != [(MAX + 1, "long")]:
            return f"wanted only `long` ({MAX + 1} lines) over {MAX}; got {scan(d)}"
    return None


if __name__ == "__main__":
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if "--self-test" in sys.argv:
        problem = self_test()
        if problem:
            print(f"fn_length self-test FAILED: {problem}")
            sys.exit(1)
        print(f"fn_length self-test: a function of {MAX + 1} lines is caught, one of {MAX} is not")
        sys.exit(0)
    found = scan(root)
    if "--list" in sys.argv:
        for n, p, line, name in found[: int(sys.argv[sys.argv.index("--list") + 1])]:
            print(f"{n:5} {p}:{line} {name}")
        sys.exit(0)
    long = [x for x in found if x[0] > MAX]
    for n, p, line, name in long:
        print(f"{p}:{line}: fn {name} is {n} lines (at most {MAX}: split it)")
    if long:
        sys.exit(1)
    print(f"fn_length: no function in {', '.join(CRATES)} is longer than {MAX} lines")
