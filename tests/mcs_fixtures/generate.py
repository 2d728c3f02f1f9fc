#!/usr/bin/env python3
"""Writes inputs.jsonl: the spec 3.x configs (and OpenShift node-file cases) whose outputs
from the OpenShift Machine Config Server's code are recorded in v22.jsonl and
node_files.jsonl (see README.md). Deterministic: the same seed writes the same lines."""

import json
import random
import sys

SEED = 2202
COUNT = 600

TEXT = ["a", "hello world\n", "<tag> & \"q\" \\ \t\u2028 é\n", "line1\nline2\n", "", "%41 +/=?#"]


def data_url(rnd):
    t = rnd.choice(TEXT)
    if rnd.random() < 0.5:
        import base64
        return "data:;base64," + base64.b64encode(t.encode()).decode()
    from urllib.parse import quote
    return "data:," + quote(t, safe="")


def source(rnd, minor, gs_ok=True):
    r = rnd.random()
    if r < 0.6:
        return data_url(rnd)
    if r < 0.8:
        return "https://example.com/f%d?x=<1>&y=2" % rnd.randrange(100)
    if r < 0.9 or minor < 2 or not gs_ok:
        return "http://10.0.0.1/x"
    return "gs://bucket/object"


def maybe(rnd, p=0.5):
    return rnd.random() < p


def unit_text(rnd):
    return rnd.choice([
        "[Unit]\nDescription=x <&> y\n[Service]\nExecStart=/bin/true\n",
        "[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo \"hi\" > /tmp/x'\n",
        "[Unit]\nDescription=t\u2028\n",
    ])


def resource(rnd, minor, ignition_ref):
    r = {"source": source(rnd, minor)}
    if maybe(rnd, 0.3):
        r["verification"] = {"hash": "sha512-" + "ab" * 64}
    if minor >= 1 and r["source"].startswith("http") and maybe(rnd, 0.15):
        r["httpHeaders"] = [{"name": "X-A", "value": "b"}]
    if ignition_ref and minor >= 1 and maybe(rnd, 0.08):
        r["compression"] = "gzip"
    return r


def owner(rnd):
    if maybe(rnd, 0.3):
        return {"id": rnd.randrange(0, 2000)}
    if maybe(rnd, 0.2):
        return {"name": rnd.choice(["core", "root"])}
    return None


def config(rnd, minor):
    c = {"ignition": {"version": "3.%d.0" % minor}}
    ign = c["ignition"]
    if maybe(rnd, 0.2):
        ign["config"] = {"merge": [resource(rnd, minor, True) for _ in range(rnd.randrange(1, 3))]}
        if maybe(rnd, 0.3):
            ign["config"]["replace"] = resource(rnd, minor, True)
    if maybe(rnd, 0.15):
        ign["security"] = {"tls": {"certificateAuthorities": [resource(rnd, minor, True)]}}
    if maybe(rnd, 0.2):
        ign["timeouts"] = {"httpResponseHeaders": rnd.randrange(0, 30), "httpTotal": rnd.randrange(0, 300)}
    if minor >= 1 and maybe(rnd, 0.05):
        ign["proxy"] = {"httpsProxy": "http://proxy:3128", "noProxy": ["a.example"]}
    if minor >= 3 and maybe(rnd, 0.08):
        c["kernelArguments"] = {"shouldExist": ["nosmt"]}
    st = {}
    paths = set()

    def new_path(prefix):
        while True:
            p = prefix + "/n%d" % rnd.randrange(10000)
            if p not in paths:
                paths.add(p)
                return p

    fss = []
    if maybe(rnd, 0.3):
        for i in range(rnd.randrange(1, 3)):
            fs = {"device": "/dev/vd%s" % "bcdef"[i], "format": rnd.choice(["xfs", "ext4", "vfat"])}
            if maybe(rnd, 0.7):
                fs["path"] = rnd.choice(["/var/lib/d%d" % i, "/srv%d" % i])
                fss.append(fs["path"])
            if maybe(rnd, 0.4):
                fs["label"] = "L%d" % i
            if maybe(rnd, 0.3):
                fs["uuid"] = "8b9c7a2e-1d2f-4a3b-9c8d-%012d" % i
            if maybe(rnd, 0.3):
                fs["options"] = ["-m", "0"] if fs["format"] == "ext4" else ["-f"]
            if maybe(rnd, 0.3):
                fs["wipeFilesystem"] = maybe(rnd)
            if minor >= 1 and maybe(rnd, 0.1):
                fs["mountOptions"] = ["noatime"]
            st.setdefault("filesystems", []).append(fs)
    prefixes = ["/etc", "/opt/x"] + fss
    for _ in range(rnd.randrange(0, 4)):
        f = {"path": new_path(rnd.choice(prefixes))}
        if maybe(rnd, 0.85):
            f["contents"] = resource(rnd, minor, False)
            if maybe(rnd, 0.2):
                f["contents"]["compression"] = "gzip" if maybe(rnd) else ""
        if maybe(rnd, 0.2):
            f["append"] = [resource(rnd, minor, False) for _ in range(rnd.randrange(1, 3))]
        if maybe(rnd, 0.7):
            f["mode"] = rnd.choice([0o644, 0o600, 0o755, 0, 0o444])
        if maybe(rnd, 0.5):
            f["overwrite"] = maybe(rnd) and "append" not in f and "contents" in f
        for k in ("user", "group"):
            o = owner(rnd)
            if o:
                f[k] = o
        st.setdefault("files", []).append(f)
    for _ in range(rnd.randrange(0, 3)):
        d = {"path": new_path(rnd.choice(prefixes))}
        if maybe(rnd, 0.6):
            d["mode"] = rnd.choice([0o755, 0o700, 0])
        if maybe(rnd, 0.3):
            d["overwrite"] = maybe(rnd)
        o = owner(rnd)
        if o:
            d["user"] = o
        st.setdefault("directories", []).append(d)
    for _ in range(rnd.randrange(0, 3)):
        l = {"path": new_path(rnd.choice(prefixes)), "target": "/usr/bin/true"}
        if maybe(rnd, 0.3):
            l["hard"] = maybe(rnd)
        if maybe(rnd, 0.3):
            l["overwrite"] = maybe(rnd)
        st.setdefault("links", []).append(l)
    if maybe(rnd, 0.25):
        parts = []
        for n in range(1, rnd.randrange(2, 4)):
            p = {"number": n}
            if maybe(rnd, 0.5):
                p["label"] = "p%d" % n
            if maybe(rnd, 0.3):
                p["typeGuid"] = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
            if maybe(rnd, 0.2):
                p["guid"] = "5c0a1a2b-3c4d-4e5f-8a9b-%012d" % n
            if maybe(rnd, 0.1):
                p["sizeMiB"] = 100
            if maybe(rnd, 0.1):
                p["shouldExist"] = maybe(rnd)
            if maybe(rnd, 0.1):
                p["wipePartitionEntry"] = maybe(rnd)
            if minor >= 2 and maybe(rnd, 0.05):
                p["resize"] = True
                p["sizeMiB"] = 200
            parts.append(p)
        disk = {"device": "/dev/vda", "partitions": parts}
        if maybe(rnd, 0.3):
            disk["wipeTable"] = maybe(rnd)
        st["disks"] = [disk]
    if maybe(rnd, 0.1):
        r = {"name": "md0", "level": rnd.choice(["raid1", "raid0"]), "devices": ["/dev/vdx", "/dev/vdy"]}
        if r["level"] == "raid1" and maybe(rnd, 0.5):
            r["spares"] = 1
        if maybe(rnd, 0.3):
            r["options"] = ["--verbose"]
        st["raid"] = [r]
    if minor >= 2 and maybe(rnd, 0.05):
        st["luks"] = [{"name": "data", "device": "/dev/vdz"}]
    if st:
        c["storage"] = st
    pw = {}
    if maybe(rnd, 0.3):
        u = {"name": rnd.choice(["core", "alice"])}
        for k, v in [("passwordHash", "$6$x$y"), ("sshAuthorizedKeys", ["ssh-ed25519 AAAA <me>"]),
                     ("uid", 1001), ("gecos", "A & B"), ("homeDir", "/home/a"), ("noCreateHome", True),
                     ("primaryGroup", "wheel"), ("groups", ["wheel", "adm"]), ("noUserGroup", True),
                     ("noLogInit", False), ("shell", "/bin/bash"), ("system", True)]:
            if maybe(rnd, 0.3):
                u[k] = v
        if minor >= 2 and maybe(rnd, 0.1):
            u["shouldExist"] = maybe(rnd)
        pw["users"] = [u]
    if maybe(rnd, 0.2):
        g = {"name": "grp"}
        for k, v in [("gid", 2000), ("passwordHash", "$6$z"), ("system", True)]:
            if maybe(rnd, 0.4):
                g[k] = v
        if minor >= 2 and maybe(rnd, 0.1):
            g["shouldExist"] = maybe(rnd)
        pw["groups"] = [g]
    if pw:
        c["passwd"] = pw
    units = []
    for i in range(rnd.randrange(0, 3)):
        u = {"name": "u%d.service" % i}
        if maybe(rnd, 0.7):
            u["contents"] = unit_text(rnd)
        if maybe(rnd, 0.5):
            u["enabled"] = maybe(rnd)
        if maybe(rnd, 0.1):
            u["mask"] = True
        if maybe(rnd, 0.3):
            u["dropins"] = [{"name": "10-x.conf", "contents": "[Service]\nEnvironment=A=<b>\n"}]
        units.append(u)
    if units:
        c["systemd"] = {"units": units}
    return c


def main():
    rnd = random.Random(SEED)
    out = sys.stdout
    for i in range(COUNT):
        minor = i % 6
        out.write(json.dumps({"config": config(rnd, minor)}, ensure_ascii=False, sort_keys=True) + "\n")
    names = ["rendered-worker-0123456789abcdef0123456789abcdef", "rendered-master-1", "worker-a1b2c3d4e5f6a7b8"]
    kubeconfigs = [None, "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://api-int.example:6443\n  name: local\n", ""]
    for i in range(COUNT // 10):
        rec = {
            "mcs": True,
            "name": names[i % len(names)],
            "config": config(rnd, i % 6),
        }
        kc = kubeconfigs[i % len(kubeconfigs)]
        if kc is not None:
            rec["kubeconfig"] = kc
        out.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
