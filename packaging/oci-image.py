#!/usr/bin/env python3
"""Writes the server's OCI image as an OCI image layout (`make image`), without a container
daemon or any tool beyond Python's standard library:

    packaging/oci-image.py --binary BIN --out DIR --version V [--revision R]

DIR becomes an OCI layout (oci-layout, index.json, blobs/sha256/...) holding one image tagged
V: one layer with the static binary at /usr/bin/agent, /etc/passwd and /etc/group naming the
non-root user agent-serve (65532:65532), its state directory /var/lib/agent-serve (0700, its
own) and /tmp; no shell, no libc, nothing else. The config runs /usr/bin/agent as 65532:65532;
its Cmd serves the configs mounted at /etc/agent-serve/source over plain HTTP on port 8080
(Kubernetes gives its own arguments: deploy/). Labels and annotations are the
org.opencontainers.image.* ones.

The same binary and revision give the same digest: files are written in name order with
fixed owners, modes and times (SOURCE_DATE_EPOCH, which `make image` sets to the last
commit's time, else the binary's modification time), the
layer is gzipped without a name or time.
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile

USER = "agent-serve"
UID = 65532
PASSWD = (
    "root:x:0:0:root:/root:/nonexistent\n"
    f"{USER}:x:{UID}:{UID}:agent machine config server:/var/lib/agent-serve:/nonexistent\n"
)
GROUP = f"root:x:0:\n{USER}:x:{UID}:\n"
CMD = ["serve", "--source=/etc/agent-serve/source", "--listen-http=0.0.0.0:8080"]


def layer(binary: str, mtime: int) -> bytes:
    """The one layer, an uncompressed tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name, kind, mode, data=b"", uid=0):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mode = mode
            info.uid = info.gid = uid
            info.uname = info.gname = ""
            info.mtime = mtime
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

        with open(binary, "rb") as f:
            agent = f.read()
        entries = [
            ("etc", tarfile.DIRTYPE, 0o755, b"", 0),
            ("etc/group", tarfile.REGTYPE, 0o644, GROUP.encode(), 0),
            ("etc/passwd", tarfile.REGTYPE, 0o644, PASSWD.encode(), 0),
            ("tmp", tarfile.DIRTYPE, 0o1777, b"", 0),
            ("usr", tarfile.DIRTYPE, 0o755, b"", 0),
            ("usr/bin", tarfile.DIRTYPE, 0o755, b"", 0),
            ("usr/bin/agent", tarfile.REGTYPE, 0o755, agent, 0),
            ("var", tarfile.DIRTYPE, 0o755, b"", 0),
            ("var/lib", tarfile.DIRTYPE, 0o755, b"", 0),
            ("var/lib/agent-serve", tarfile.DIRTYPE, 0o700, b"", UID),
        ]
        for e in entries:
            add(*e)
    return buf.getvalue()


def put_blob(out: str, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = os.path.join(out, "blobs", "sha256", digest.split(":", 1)[1])
    with open(path, "wb") as f:
        f.write(data)
    return {"digest": digest, "size": len(data)}


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", required=True, help="the static agent binary")
    p.add_argument("--out", required=True, help="the OCI layout directory (replaced)")
    p.add_argument("--version", required=True, help="image version and tag")
    p.add_argument("--revision", default="unknown", help="source revision (git commit)")
    a = p.parse_args()

    if not os.path.isfile(a.binary):
        print(f"oci-image: {a.binary} is not a file: build it first (make static)", file=sys.stderr)
        return 1
    with open(a.binary, "rb") as f:
        head = f.read(4)
    if head != b"\x7fELF":
        print(f"oci-image: {a.binary} is not an ELF binary", file=sys.stderr)
        return 1
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH") or os.stat(a.binary).st_mtime)
    created = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )

    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(os.path.join(a.out, "blobs", "sha256"))

    tar = layer(a.binary, mtime)
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, filename="") as z:
        z.write(tar)
    layer_desc = put_blob(a.out, gz.getvalue())
    layer_desc["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"

    labels = {
        "org.opencontainers.image.title": "agent",
        "org.opencontainers.image.description": "agent serve: the machine config server "
        "(Ignition 3.x configs for booting machines, their inventory)",
        "org.opencontainers.image.version": a.version,
        "org.opencontainers.image.revision": a.revision,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "Apache-2.0",
    }
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": f"{UID}:{UID}",
            "Entrypoint": ["/usr/bin/agent"],
            "Cmd": CMD,
            "Env": ["PATH=/usr/bin"],
            "WorkingDir": "/",
            "ExposedPorts": {"8080/tcp": {}, "22623/tcp": {}},
            "StopSignal": "SIGTERM",
            "Labels": labels,
        },
        "rootfs": {
            "type": "layers",
            "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()],
        },
        "history": [{"created": created, "created_by": "packaging/oci-image.py"}],
    }
    config_desc = put_blob(a.out, canonical(config))
    config_desc["mediaType"] = "application/vnd.oci.image.config.v1+json"
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
        "annotations": labels,
    }
    manifest_desc = put_blob(a.out, canonical(manifest))
    manifest_desc["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": a.version}
    manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [manifest_desc],
    }
    with open(os.path.join(a.out, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(a.out, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))
    print(f"{a.out}: agent:{a.version} {manifest_desc['digest']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
