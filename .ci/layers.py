#!/usr/bin/env python3
"""The agent crate's layer rule, checked: a module imports only from its own layer and the
layers below it, plus the rules that go beyond "down only" (ARCHITECTURE.md, "Layers").

The crates below the agent crate (spec, butane, runtime, http-core, serve) are kept apart by Cargo
itself: each Cargo.toml names what it may use. Inside the agent crate, this script reads every
`crate::` path and every `super::` path that leaves a top-level module, and every path that
names one of those crates (`runtime::limits`, `spec::config`, `serve::Options`), and fails on
one that runs up a layer or breaks a named rule (a crate named where its modules may not
use it: `serve` outside the command line).

  python3 .ci/layers.py            check src/
  python3 .ci/layers.py --self-test   show that the check fails on a deliberate upward import
"""
import os
import re
import sys
import tempfile

# Layer of each top-level module of src/ (ARCHITECTURE.md, "Layers").
LAYERS = {
    "mounts": 2, "endpoints": 2, "metadata": 2, "fetch": 2, "state": 2, "network": 2,
    "platform": 3, "blockdev": 3, "files": 3, "report": 3,
    "stages": 4, "install": 4,
    "cli": 5,
}
# Layer of each crate of ours the agent crate depends on (ARCHITECTURE.md, "Layers"), by the
# name a path gives it. A path that names one is checked as an import of a module of that
# layer; the crate root re-exports none of them, so each module has one name.
CRATES = {"spec": 0, "report_format": 0, "butane": 0, "runtime": 1, "serve": 2}
# Crates only some modules may name, though the layers allow more: (crate, modules, why).
ONLY = [
    ("serve", ("cli",), "the config server is the command line's to start: the provisioning code is built without it (`--no-default-features`, the initramfs binary)"),
]
# Imports forbidden even where the layers allow them: (from, to, why).
NEVER = [
    ("blockdev", "files", "blockdev never writes into the target root: it leaves what the files stage writes in state"),
    ("blockdev", "platform", "a block device does not know where the config came from"),
    ("files", "blockdev", "the files stage writes a root; it does not touch block devices"),
    ("files", "platform", "the files stage does not know where the config came from"),
    ("platform", "blockdev", "a platform reads its config; it never modifies a disk (it may only probe one: blockdev::probe)"),
    ("platform", "files", "a platform reads its config; it never writes the target root"),
]

# Narrow exceptions to NEVER: (from, module path) pairs.
ALLOWED = {"platform": ("blockdev::probe",)}

# A path that starts with a crate's name (`runtime::x`, `::serve::y`), not one inside another
# path (`crate::cli::serve`, `super::spec`).
CRATE_PATH = re.compile(r"(?<![A-Za-z0-9_:])(?:::)?(" + "|".join(CRATES) + r")::")

PATH = re.compile(r"\b(crate|super(?:::super)*)::(\{[^;]*?\}|[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)?)", re.S)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"//.*$", "", line) for line in text.splitlines())


def module_of(rel):
    """Module path of a file under src/: src/fetch/http.rs -> ['fetch', 'http']."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def targets(rel, text):
    """(line, top-level module) for each import of `rel` that names a top-level module."""
    mod = module_of(rel)
    out = []
    for m in PATH.finditer(text):
        head, rest = m.group(1), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if head == "crate":
            base = []
        else:
            # `super` of crate::a::b is crate::a, whether b is a.rs's b.rs or b/mod.rs.
            base = mod[: max(0, len(mod) - head.count("super"))]
            if base:
                continue  # stays inside the top-level module
        names = re.findall(r"(?:^|[{,])\s*([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)?)", rest.strip("{}")) if rest.startswith("{") else [rest]
        for n in names:
            out.append((line, n))
    return out


def crate_paths(text):
    """(line, crate) for each path in `text` that names a crate of CRATES."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in CRATE_PATH.finditer(text)]


def check(src):
    errors = []
    for dirpath, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src)
            mod = module_of(rel)
            if not mod:
                continue  # lib.rs / main.rs: the crate root
            top = mod[0]
            if top not in LAYERS:
                errors.append(f"{rel}: module `{top}` has no layer in .ci/layers.py (add it, and to ARCHITECTURE.md)")
                continue
            with open(path, encoding="utf-8") as fh:
                text = strip_comments(fh.read())
            for line, name in targets(rel, text):
                target = name.split("::")[0]
                if name in ALLOWED.get(top, ()):
                    continue
                if target == top or target not in LAYERS:
                    continue
                if LAYERS[target] > LAYERS[top]:
                    errors.append(f"{rel}:{line}: `{top}` (layer {LAYERS[top]}) imports `{target}` (layer {LAYERS[target]}): an import that runs up a layer")
                for a, b, why in NEVER:
                    if top == a and target == b:
                        errors.append(f"{rel}:{line}: `{a}` imports `{b}`: {why}")
            for line, krate in crate_paths(text):
                if CRATES[krate] > LAYERS[top]:
                    errors.append(f"{rel}:{line}: `{top}` (layer {LAYERS[top]}) names crate `{krate}` (layer {CRATES[krate]}): a path that runs up a layer")
                for c, mods, why in ONLY:
                    if krate == c and top not in mods:
                        errors.append(f"{rel}:{line}: `{top}` names crate `{c}`, which only {', '.join(mods)} may: {why}")
    return errors


def self_test():
    """A tree with an upward import, a forbidden import and a crate named where it may not be
    must fail; a clean one pass."""
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "fetch"))
        os.makedirs(os.path.join(d, "blockdev"))
        os.makedirs(os.path.join(d, "stages"))
        def w(rel, text):
            with open(os.path.join(d, rel), "w") as fh:
                fh.write(text)
        w("lib.rs", "pub mod fetch;\npub mod blockdev;\npub mod stages;\n")
        w("stages/mod.rs", "use crate::fetch::Fetcher;\nuse super::blockdev;\n")
        w("fetch/mod.rs", "// crate::stages in a comment is not an import\nuse super::retry;\n")
        w("blockdev/mod.rs", "use crate::{state, fetch::Options};\nuse runtime::limits::Limits;\nfn f(c: &spec::config::Config) {}\n")
        os.makedirs(os.path.join(d, "cli"))
        w("cli/mod.rs", "mod serve;\nfn f() { serve::run(); ::serve::run(); }\n")
        w("cli/run.rs", "use crate::cli::serve::Args;\nuse super::serve::x;\n")
        w("stages/context.rs", "// serve::Options in a comment is not a path\nuse crate::fetch::serve::x;\n")
        if check(d):
            return f"a clean tree failed: {check(d)}"
        w("fetch/http.rs", "use crate::stages::Context;\n")
        w("blockdev/luks.rs", "fn f() { super::super::files::write(); }\n")
        w("stages/disks.rs", "use runtime::limits;\n\nfn f() -> serve::Options { todo!() }\n")
        errs = check(d)
        want = [
            "fetch/http.rs:1: `fetch` (layer 2) imports `stages` (layer 4)",
            "blockdev/luks.rs:1: `blockdev` imports `files`",
            "stages/disks.rs:3: `stages` names crate `serve`, which only cli may",
        ]
        for x in want:
            if not any(e.startswith(x) for e in errs):
                return f"missed: {x}; got {errs}"
    return None


if __name__ == "__main__":
    if "--self-test" in sys.argv:
        problem = self_test()
        if problem:
            print(f"layers self-test FAILED: {problem}")
            sys.exit(1)
        print("layers self-test: an upward import, a forbidden import and a crate named where it may not be are all caught")
        sys.exit(0)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    errs = check(root)
    for e in errs:
        print(e)
    if errs:
        print(f"layers: {len(errs)} import(s) break the layer rules (ARCHITECTURE.md, \"Layers\")")
        sys.exit(1)
    print("layers: every import in src/ runs down or sideways within its layer")
