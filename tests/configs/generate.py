#!/usr/bin/env python3
"""Generates the config corpus used by tests/config/corpus.rs.

valid/full-3.N.0.ign   every field spec 3.N.0 allows, at least once
valid/butane-3.N.0.ign configs shaped like Butane's output for that version (compact JSON,
                       gzip+base64 data URLs, "compression": "", empty objects)
invalid/NAME.ign       one mistake each; invalid/NAME.expect holds the JSON path the error must
                       name and a fragment of its message, tab-separated

Run it from anywhere: it writes next to itself. The outputs are committed so tests need no
Python, and regenerating must give the same bytes.
"""
import base64, copy, gzip, hashlib, json, os, shutil

HERE = os.path.dirname(os.path.abspath(__file__))
SHA512 = "sha512-" + hashlib.sha512(b"hello\n").hexdigest()
SHA256 = "sha256-" + hashlib.sha256(b"hello\n").hexdigest()
HELLO = "data:,hello%0A"
UUID = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709"


def full(minor):
    """A config using every field available in 3.<minor>.0."""
    res = {"source": HELLO, "verification": {"hash": SHA512}}
    cfg_res = dict(res)
    file_res = {"source": "data:;base64," + base64.b64encode(gzip.compress(b"hello\n", mtime=0)).decode(),
                "compression": "gzip", "verification": {"hash": SHA512}}
    if minor >= 1:
        cfg_res = {"source": "http://config.example.com/child.ign", "compression": "gzip",
                   "verification": {"hash": SHA256},
                   "httpHeaders": [{"name": "Authorization", "value": "Bearer x"}]}
    c = {
        "ignition": {
            "version": f"3.{minor}.0",
            "config": {"merge": [cfg_res], "replace": {"source": None}},
            "timeouts": {"httpResponseHeaders": 20, "httpTotal": 600},
            "security": {"tls": {"certificateAuthorities": [{"source": "https://ca.example.com/ca.pem",
                                                             "verification": {"hash": SHA512}}]}},
        },
        "storage": {
            "disks": [{"device": "/dev/vda", "wipeTable": False, "partitions": [
                {"number": 1, "label": "root", "sizeMiB": 4096, "startMiB": 0,
                 "typeGuid": "0FC63DAF-8483-4772-8E79-3D69D8477DE4", "guid": UUID,
                 "wipePartitionEntry": True, "shouldExist": True},
                {"number": 5, "shouldExist": False, "wipePartitionEntry": True},
            ]}],
            "raid": [{"name": "md0", "level": "raid1", "devices": ["/dev/vdb", "/dev/vdc"], "spares": 1,
                      "options": ["--metadata=1.2"]}],
            "filesystems": [{"device": "/dev/disk/by-partlabel/root", "format": "ext4", "wipeFilesystem": True,
                             "label": "root", "uuid": UUID, "options": ["-E", "lazy_itable_init=1"],
                             "path": "/sysroot"}],
            "files": [{"path": "/etc/hostname", "overwrite": True, "contents": file_res,
                       "append": [{"source": "data:,more%0A"}], "mode": 420,
                       "user": {"id": 0}, "group": {"name": "root"}}],
            "directories": [{"path": "/var/lib/app", "overwrite": False, "mode": 493,
                             "user": {"name": "core"}, "group": {"id": 1000}}],
            "links": [{"path": "/etc/localtime", "target": "/usr/share/zoneinfo/UTC", "hard": False,
                       "overwrite": True, "user": {"id": 0}, "group": {"id": 0}},
                      {"path": "/etc/hostname-copy", "target": "/etc/hostname", "hard": True}],
        },
        "systemd": {"units": [{"name": "app.service", "enabled": True, "mask": False,
                               "contents": "[Unit]\nDescription=App\n[Service]\nExecStart=/usr/bin/true\n[Install]\nWantedBy=multi-user.target\n",
                               "dropins": [{"name": "10-env.conf", "contents": "[Service]\nEnvironment=A=1\n"}]},
                              {"name": "bad.service", "mask": True}]},
        "passwd": {
            "users": [{"name": "core", "passwordHash": "$6$rounds=4096$salt$hash", "sshAuthorizedKeys": ["ssh-ed25519 AAAA core@example"],
                       "uid": 1000, "gecos": "Core User", "homeDir": "/home/core", "noCreateHome": False,
                       "primaryGroup": "core", "groups": ["wheel"], "noUserGroup": False, "noLogInit": True,
                       "shell": "/bin/bash", "system": False}],
            "groups": [{"name": "core", "gid": 1000, "passwordHash": "*", "system": False}],
        },
    }
    if minor >= 1:
        c["ignition"]["proxy"] = {"httpProxy": "http://proxy.example.com:3128", "httpsProxy": "https://proxy.example.com:3129",
                                  "noProxy": ["10.0.0.0/8", ".example.com", "localhost"]}
        c["storage"]["filesystems"][0]["mountOptions"] = ["noatime"]
    if minor >= 2:
        c["storage"]["disks"][0]["partitions"][0]["resize"] = True
        c["storage"]["files"].append({"path": "/etc/from-gs", "contents": {"source": "gs://bucket/object"}})
        luks = {"name": "data", "device": "/dev/disk/by-partlabel/data", "keyFile": {"source": "data:,secret"},
                "label": "data", "uuid": UUID, "options": ["--iter-time", "1000"], "wipeVolume": True,
                "clevis": {"tang": [{"url": "http://tang.example.com", "thumbprint": "abc"}], "tpm2": True, "threshold": 1}}
        custom = {"name": "custom", "device": "/dev/vdd",
                  "clevis": {"custom": {"pin": "sss", "config": "{\"t\":1}", "needsNetwork": False}}}
        c["storage"]["luks"] = [luks, custom]
        c["passwd"]["users"][0]["shouldExist"] = True
        c["passwd"]["groups"][0]["shouldExist"] = True
    if minor >= 3:
        c["kernelArguments"] = {"shouldExist": ["quiet"], "shouldNotExist": ["debug"]}
        c["storage"]["filesystems"].append({"device": "/dev/vde", "format": "none", "wipeFilesystem": True})
    if minor >= 4:
        c["storage"]["files"].append({"path": "/etc/from-arn", "contents": {"source": "arn:aws:s3:::bucket/key"}})
        luks = c["storage"]["luks"][0]
        luks["discard"] = True
        luks["openOptions"] = ["--perf-no_read_workqueue"]
        luks["clevis"]["tang"][0]["advertisement"] = "{\"payload\": \"x\"}"
    if minor >= 5:
        c["storage"]["luks"].append({"name": "cex", "device": "/dev/vdf", "cex": {"enabled": True}})
    if minor >= 6:
        c["storage"]["files"][0]["mode"] = 0o4755
        c["storage"]["directories"][0]["mode"] = 0o1777
        c["storage"]["luks"][1]["clevis"]["custom"]["pin"] = "mypin"
    return c


def butane(minor):
    """What Butane emits for a typical FCOS config of this version."""
    gz = base64.b64encode(gzip.compress(b"[main]\ndns=none\n" * 20, mtime=0)).decode()
    c = {"ignition": {"version": f"3.{minor}.0"},
         "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample core"]}]},
         "storage": {"files": [
             {"path": "/etc/hostname", "contents": {"compression": "", "source": "data:,node1"}, "mode": 420},
             {"path": "/etc/NetworkManager/conf.d/dns.conf", "contents": {"compression": "gzip", "source": "data:;base64," + gz}, "mode": 420},
             {"path": "/usr/local/bin/hello", "contents": {"compression": "", "source": "data:,%23!%2Fbin%2Fsh%0Aecho%20hello%0A"}, "mode": 493}],
             "links": [{"path": "/etc/localtime", "target": "../usr/share/zoneinfo/Europe/Berlin"}],
             "directories": [{"path": "/var/lib/app", "mode": 448, "user": {"name": "core"}, "group": {"name": "core"}}]},
         "systemd": {"units": [{"contents": "[Unit]\nDescription=Hello\n\n[Service]\nType=oneshot\nExecStart=/usr/local/bin/hello\n\n[Install]\nWantedBy=multi-user.target\n",
                                "enabled": True, "name": "hello.service"},
                               {"dropins": [{"contents": "[Service]\nExecStart=\nExecStart=-/sbin/agetty --autologin core --noclear %I $TERM\n", "name": "autologin-core.conf"}],
                                "name": "serial-getty@ttyS0.service"},
                               {"mask": True, "name": "docker.service"}]}}
    if minor >= 1:
        c["storage"]["filesystems"] = [{"device": "/dev/disk/by-partlabel/var", "format": "xfs", "path": "/var", "wipeFilesystem": False,
                                        "mountOptions": ["defaults", "prjquota"]}]
        c["storage"]["disks"] = [{"device": "/dev/vda", "partitions": [{"label": "var", "number": 5, "sizeMiB": 0, "startMiB": 0}]}]
    if minor >= 3:
        c["kernelArguments"] = {"shouldExist": ["mitigations=auto,nosmt"], "shouldNotExist": ["mitigations=auto"]}
    if minor >= 2:
        c["storage"]["luks"] = [{"clevis": {"tpm2": True}, "device": "/dev/disk/by-partlabel/root", "label": "luks-root",
                                 "name": "root", "wipeVolume": True}]
    return c


def invalid():
    """(name, config, path, message fragment)"""
    base = {"ignition": {"version": "3.4.0"}}
    out = []

    def add(name, patch, path, msg, version=None):
        c = copy.deepcopy(base)
        if version:
            c["ignition"]["version"] = version
        for k, v in patch.items():
            c[k] = v
        out.append((name, c, path, msg))

    add("relative-path", {"storage": {"files": [{"path": "etc/a"}]}}, "$.storage.files.0.path", "path not absolute")
    add("unnormalised-path", {"storage": {"directories": [{"path": "/etc/../x"}]}}, "$.storage.directories.0.path", "not normalised")
    add("duplicate-path-across-kinds", {"storage": {"files": [{"path": "/etc/a"}], "links": [{"path": "/etc/a", "target": "/x"}]}},
        "$.storage.links.0.path", "duplicate path")
    add("path-through-link", {"storage": {"links": [{"path": "/etc/d", "target": "/x"}], "files": [{"path": "/etc/d/f"}]}},
        "$.storage.files.0", "includes link in config")
    add("overwrite-without-source", {"storage": {"files": [{"path": "/etc/a", "overwrite": True}]}}, "$.storage.files.0.overwrite", "needs contents.source")
    add("not-exist-with-attrs", {"storage": {"disks": [{"device": "/dev/vda", "partitions": [{"number": 1, "shouldExist": False, "sizeMiB": 5}]}]}},
        "$.storage.disks.0.partitions.0", "may only set number")
    add("not-exist-number-zero", {"storage": {"disks": [{"device": "/dev/vda", "partitions": [{"label": "x", "shouldExist": False}]}]}},
        "$.storage.disks.0.partitions.0.number", "number")
    add("duplicate-partition-number", {"storage": {"disks": [{"device": "/dev/vda", "partitions": [{"number": 1}, {"number": 1}]}]}},
        "$.storage.disks.0.partitions.1.number", "duplicate partition number")
    add("duplicate-disk", {"storage": {"disks": [{"device": "/dev/vda"}, {"device": "/dev/vda"}]}}, "$.storage.disks.1.device", "duplicate device")
    add("gpt-label-too-long", {"storage": {"disks": [{"device": "/dev/vda", "partitions": [{"number": 1, "label": "x" * 37}]}]}},
        "$.storage.disks.0.partitions.0.label", "36")
    add("xfs-label-too-long", {"storage": {"filesystems": [{"device": "/dev/vda1", "format": "xfs", "label": "x" * 13}]}},
        "$.storage.filesystems.0.label", "12")
    add("vfat-label-too-long", {"storage": {"filesystems": [{"device": "/dev/vda1", "format": "vfat", "label": "x" * 12}]}},
        "$.storage.filesystems.0.label", "11")
    add("swap-label-too-long", {"storage": {"filesystems": [{"device": "/dev/vda1", "format": "swap", "label": "x" * 16}]}},
        "$.storage.filesystems.0.label", "15")
    add("btrfs-label-too-long", {"storage": {"filesystems": [{"device": "/dev/vda1", "format": "btrfs", "label": "x" * 257}]}},
        "$.storage.filesystems.0.label", "256")
    add("bad-format", {"storage": {"filesystems": [{"device": "/dev/vda1", "format": "ntfs"}]}}, "$.storage.filesystems.0.format", "unsupported filesystem format")
    add("unit-no-suffix", {"systemd": {"units": [{"name": "app"}]}}, "$.systemd.units.0.name", "invalid unit name")
    add("dropin-not-conf", {"systemd": {"units": [{"name": "a.service", "dropins": [{"name": "x.txt"}]}]}},
        "$.systemd.units.0.dropins.0.name", ".conf")
    add("bad-hash-function", {"storage": {"files": [{"path": "/a", "contents": {"source": "data:,x", "verification": {"hash": "md5-abc"}}}]}},
        "$.storage.files.0.contents.verification.hash", "sha512 or sha256")
    add("bad-hash-length", {"storage": {"files": [{"path": "/a", "contents": {"source": "data:,x", "verification": {"hash": "sha512-abc"}}}]}},
        "$.storage.files.0.contents.verification.hash", "hex digits")
    add("spares-raid0", {"storage": {"raid": [{"name": "md0", "level": "raid0", "devices": ["/dev/a", "/dev/b"], "spares": 1}]}},
        "$.storage.raid.0.spares", "spares are not allowed")
    add("spares-linear", {"storage": {"raid": [{"name": "md0", "level": "linear", "devices": ["/dev/a"], "spares": 2}]}},
        "$.storage.raid.0.spares", "spares are not allowed")
    add("hard-link-to-directory", {"storage": {"directories": [{"path": "/d"}], "links": [{"path": "/l", "target": "/d", "hard": True}]}},
        "$.storage.links.0", "hard link target is a directory")
    add("bad-scheme", {"storage": {"files": [{"path": "/a", "contents": {"source": "ftp://x/y"}}]}}, "$.storage.files.0.contents.source", "unsupported URL scheme")
    add("headers-on-data", {"storage": {"files": [{"path": "/a", "contents": {"source": "data:,x", "httpHeaders": [{"name": "A", "value": "b"}]}}]}},
        "$.storage.files.0.contents.httpHeaders", "only allowed with http")
    add("bad-compression", {"storage": {"files": [{"path": "/a", "contents": {"source": "data:,x", "compression": "xz"}}]}},
        "$.storage.files.0.contents.compression", "unsupported compression")
    add("mode-out-of-range", {"storage": {"files": [{"path": "/a", "mode": 99999}]}}, "$.storage.files.0.mode", "invalid mode")
    add("wrong-type", {"storage": {"files": [{"path": 5}]}}, "$.storage.files.0.path", "expected a string")
    add("missing-path", {"storage": {"files": [{"mode": 420}]}}, "$.storage.files.0.path", "required")
    add("link-without-target", {"storage": {"links": [{"path": "/l"}]}}, "$.storage.links.0.target", "target is required")
    add("kernel-arg-both", {"kernelArguments": {"shouldExist": ["a"], "shouldNotExist": ["a"]}}, "$.kernelArguments.shouldNotExist.0", "both")
    add("duplicate-user", {"passwd": {"users": [{"name": "a"}, {"name": "a"}]}}, "$.passwd.users.1.name", "duplicate name")
    add("format-missing", {"storage": {"filesystems": [{"device": "/dev/vda1", "path": "/var"}]}}, "$.storage.filesystems.0.format", "format is required")
    add("invalid-guid", {"storage": {"disks": [{"device": "/dev/vda", "partitions": [{"number": 1, "typeGuid": "nope"}]}]}},
        "$.storage.disks.0.partitions.0.typeGuid", "invalid GUID")
    add("luks-no-device", {"storage": {"luks": [{"name": "x"}]}}, "$.storage.luks.0.device", "device is required")
    # Ignition parity (issue 16): corpus class (a) and the uid/gid range (issue 17).
    add("file-at-unit-path", {"storage": {"files": [{"path": "/etc/systemd/system/a.service"}]},
                              "systemd": {"units": [{"name": "a.service", "contents": "[Service]\nExecStart=/bin/true\n"}]}},
        "$.storage.files.0.path", "conflicts with systemd unit or dropin")
    add("link-at-dropin-path", {"storage": {"links": [{"path": "/etc/systemd/system/a.service.d/x.conf", "target": "/dev/null"}]},
                                "systemd": {"units": [{"name": "a.service", "dropins": [{"name": "x.conf", "contents": "[Unit]\nA=b\n"}]}]}},
        "$.storage.links.0.path", "conflicts with systemd unit or dropin")
    add("dir-at-unit-path", {"storage": {"directories": [{"path": "/etc/systemd/system/a.service"}]},
                             "systemd": {"units": [{"name": "a.service", "contents": "[Unit]\nA=b\n"}]}},
        "$.storage.directories.0.path", "conflicts with systemd unit or dropin")
    add("data-url-space", {"storage": {"files": [{"path": "/a", "contents": {"source": "data:,hello world"}}]}},
        "$.storage.files.0.contents.source", "must be %-escaped")
    add("data-url-non-ascii", {"storage": {"files": [{"path": "/a", "append": [{"source": "data:,caf\u00e9"}]}]}},
        "$.storage.files.0.append.0.source", "must be %-escaped")
    add("data-url-unpadded-base64", {"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "data:;base64,aGVsbG8"}]}}},
        "$.ignition.config.merge.0.source", "padding")
    add("data-url-urlsafe-base64", {"storage": {"files": [{"path": "/a", "contents": {"source": "data:;base64,-_-_"}}]}},
        "$.storage.files.0.contents.source", "A-Za-z0-9+/=")
    add("data-url-media-type-without-slash", {"storage": {"files": [{"path": "/a", "contents": {"source": "data:text,x"}}]}},
        "$.storage.files.0.contents.source", "media type")
    add("merge-empty-source", {"ignition": {"version": "3.4.0", "config": {"merge": [{"source": ""}]}}},
        "$.ignition.config.merge.0.source", "need a source")
    add("file-uid-minus-one", {"storage": {"files": [{"path": "/a", "user": {"id": 4294967295}}]}},
        "$.storage.files.0.user.id", "out of range")
    add("dir-gid-too-big", {"storage": {"directories": [{"path": "/d", "group": {"id": 1099511627776}}]}},
        "$.storage.directories.0.group.id", "out of range")
    add("user-uid-minus-one", {"passwd": {"users": [{"name": "a", "uid": 4294967295}]}}, "$.passwd.users.0.uid", "out of range")
    add("group-gid-negative", {"passwd": {"groups": [{"name": "a", "gid": -1}]}}, "$.passwd.groups.0.gid", "out of range")
    add("mode-minus-one", {"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/a", "mode": -1}]}}, "$.storage.files.0.mode", "invalid mode -1:")
    add("partitions-overlap", {"storage": {"disks": [{"device": "/dev/vda", "partitions": [
        {"number": 1, "startMiB": 1, "sizeMiB": 100}, {"number": 2, "startMiB": 50, "sizeMiB": 100}]}]}},
        "$.storage.disks.0.partitions.1", "partitions overlap")
    add("partition-without-key", {"storage": {"disks": [{"device": "/dev/vda", "partitions": [{"sizeMiB": 10}]}]}},
        "$.storage.disks.0.partitions.0", "number >= 1 or a label")
    add("partition-label-colon", {"storage": {"disks": [{"device": "/dev/vda", "partitions": [{"number": 1, "label": "a:b"}]}]}},
        "$.storage.disks.0.partitions.0.label", "':'")
    add("disk-device-empty", {"storage": {"disks": [{"device": ""}]}}, "$.storage.disks.0.device", "disk device is required")
    add("file-path-empty", {"storage": {"files": [{"path": ""}]}}, "$.storage.files.0.path", "path not specified")
    add("tang-without-thumbprint", {"storage": {"luks": [{"name": "x", "device": "/dev/a", "clevis": {"tang": [{"url": "http://t"}]}}]}},
        "$.storage.luks.0.clevis.tang.0.thumbprint", "thumbprint is required")
    add("tang-bad-advertisement", {"storage": {"luks": [{"name": "x", "device": "/dev/a", "clevis": {"tang": [{"url": "http://t", "thumbprint": "t", "advertisement": "{nope"}]}}]}},
        "$.storage.luks.0.clevis.tang.0.advertisement", "not valid JSON")
    add("luks-label-too-long", {"storage": {"luks": [{"name": "x", "device": "/dev/a", "label": "x" * 48}]}}, "$.storage.luks.0.label", "47")
    add("hash-without-source", {"storage": {"files": [{"path": "/a", "contents": {"verification": {"hash": SHA512}}}]}},
        "$.storage.files.0.contents.verification.hash", "source must be specified")
    add("header-empty-value", {"storage": {"files": [{"path": "/a", "contents": {"source": "http://x/y", "httpHeaders": [{"name": "A", "value": ""}]}}]}},
        "$.storage.files.0.contents.httpHeaders.0.value", "must not be empty")
    add("unit-empty-name", {"systemd": {"units": [{"name": "", "mask": True}]}}, "$.systemd.units.0.name", "invalid unit name")
    add("unit-long-line", {"systemd": {"units": [{"name": "a.service", "contents": "[Service]\nExecStart=/bin/echo " + "x" * 2100 + "\n"}]}},
        "$.systemd.units.0.contents", "line too long")
    add("duplicate-ssh-key", {"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA a", "ssh-ed25519 AAAA a"]}]}},
        "$.passwd.users.0.sshAuthorizedKeys.1", "duplicate SSH key")
    add("duplicate-kernel-arg", {"kernelArguments": {"shouldExist": ["quiet", "quiet"]}}, "$.kernelArguments.shouldExist.1", "duplicate kernel argument")
    # Fields newer than the declared version.
    add("v30-httpheaders", {"storage": {"files": [{"path": "/a", "contents": {"source": "http://x/y", "httpHeaders": [{"name": "A", "value": "b"}]}}]}},
        "$.storage.files.0.contents.httpHeaders", "3.1.0", "3.0.0")
    add("v30-sha256", {"storage": {"files": [{"path": "/a", "contents": {"source": "data:,x", "verification": {"hash": SHA256}}}]}},
        "$.storage.files.0.contents.verification.hash", "3.1.0", "3.0.0")
    add("v30-proxy", {"ignition": {"version": "3.0.0", "proxy": {"httpProxy": "http://p:1"}}}, "$.ignition.proxy", "3.1.0")
    add("v30-mountoptions", {"storage": {"filesystems": [{"device": "/dev/a", "format": "ext4", "mountOptions": ["ro"]}]}},
        "$.storage.filesystems.0.mountOptions", "3.1.0", "3.0.0")
    add("v30-merge-compression", {"ignition": {"version": "3.0.0", "config": {"merge": [{"source": "data:,x", "compression": "gzip"}]}}},
        "$.ignition.config.merge.0.compression", "3.1.0")
    add("v31-resize", {"storage": {"disks": [{"device": "/dev/vda", "partitions": [{"number": 1, "resize": True}]}]}},
        "$.storage.disks.0.partitions.0.resize", "3.2.0", "3.1.0")
    add("v31-luks", {"storage": {"luks": [{"name": "x", "device": "/dev/a"}]}}, "$.storage.luks", "3.2.0", "3.1.0")
    add("v31-gs", {"storage": {"files": [{"path": "/a", "contents": {"source": "gs://b/o"}}]}}, "$.storage.files.0.contents.source", "3.2.0", "3.1.0")
    add("v31-user-shouldexist", {"passwd": {"users": [{"name": "a", "shouldExist": False}]}}, "$.passwd.users.0.shouldExist", "3.2.0", "3.1.0")
    add("v32-kargs", {"kernelArguments": {"shouldExist": ["a"]}}, "$.kernelArguments", "3.3.0", "3.2.0")
    add("v32-format-none", {"storage": {"filesystems": [{"device": "/dev/a", "format": "none"}]}}, "$.storage.filesystems.0.format", "3.3.0", "3.2.0")
    add("v33-arn", {"storage": {"files": [{"path": "/a", "contents": {"source": "arn:aws:s3:::b/k"}}]}}, "$.storage.files.0.contents.source", "3.4.0", "3.3.0")
    add("v33-discard", {"storage": {"luks": [{"name": "x", "device": "/dev/a", "discard": True}]}}, "$.storage.luks.0.discard", "3.4.0", "3.3.0")
    add("v34-cex", {"storage": {"luks": [{"name": "x", "device": "/dev/a", "cex": {"enabled": True}}]}}, "$.storage.luks.0.cex", "3.5.0", "3.4.0")
    add("v35-custom-pin", {"storage": {"luks": [{"name": "x", "device": "/dev/a", "clevis": {"custom": {"pin": "foo", "config": "{}"}}}]}},
        "$.storage.luks.0.clevis.custom.pin", "3.6.0", "3.5.0")
    # Versions.
    out.append(("version-2x", {"ignition": {"version": "2.3.0"}}, "$.ignition.version", "not supported"))
    out.append(("version-unknown", {"ignition": {"version": "3.9.0"}}, "$.ignition.version", "unknown spec version"))
    out.append(("version-experimental", {"ignition": {"version": "3.6.0-experimental"}}, "$.ignition.version", "experimental"))
    out.append(("version-missing", {"ignition": {}}, "$.ignition.version", "required"))
    out.append(("not-an-object", [1, 2], "$", "must be a JSON object"))
    return out


def write(path, obj, compact=False):
    with open(path, "w") as f:
        if compact:
            json.dump(obj, f, separators=(",", ":"))
        else:
            json.dump(obj, f, indent=2)
            f.write("\n")


def main():
    for d in ("valid", "invalid"):
        shutil.rmtree(os.path.join(HERE, d), ignore_errors=True)
        os.makedirs(os.path.join(HERE, d))
    for m in range(7):
        write(os.path.join(HERE, "valid", f"full-3.{m}.0.ign"), full(m))
        write(os.path.join(HERE, "valid", f"butane-3.{m}.0.ign"), butane(m), compact=True)
    for name, cfg, path, msg in invalid():
        write(os.path.join(HERE, "invalid", name + ".ign"), cfg)
        with open(os.path.join(HERE, "invalid", name + ".expect"), "w") as f:
            f.write(f"{path}\t{msg}\n")
    # Raw-text cases a generator cannot express as objects.
    raw = {
        "truncated": ('{"ignition": {"version": "3.4.0"}', "$", "unexpected end of input"),
        "duplicate-key": ('{"ignition": {"version": "3.4.0", "version": "3.4.0"}}', "$", "duplicate key"),
        "trailing-garbage": ('{"ignition": {"version": "3.4.0"}} x', "$", "after the end"),
        "huge-number": ('{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/a", "mode": 1e400}]}}', "$", "number out of range"),
        "int-overflow": ('{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/a", "mode": 99999999999999999999}]}}', "$.storage.files.0.mode", "out of range"),
    }
    for name, (text, path, msg) in raw.items():
        with open(os.path.join(HERE, "invalid", name + ".ign"), "w") as f:
            f.write(text)
        with open(os.path.join(HERE, "invalid", name + ".expect"), "w") as f:
            f.write(f"{path}\t{msg}\n")
    with open(os.path.join(HERE, "invalid", "invalid-utf8.ign"), "wb") as f:
        f.write(b'{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/\xff"}]}}')
    with open(os.path.join(HERE, "invalid", "invalid-utf8.expect"), "w") as f:
        f.write("$\tinvalid UTF-8\n")


if __name__ == "__main__":
    main()
