#!/usr/bin/env python3
"""Generates varied Butane inputs for the differential test against real Butane v0.29.0.

    python3 tests/butane_diff/gen.py [--seed N] [--count N] > inputs.jsonl

Each line is {"id": N, "input": "<text>"} (the input as a string; a few cases are bytes that
are not UTF-8, kept as {"b64": ...}). Inputs combine a header (every variant and version
Butane v0.29.0 knows) with random fragments from the classes of issue 26: openshift raw
output, YAML as go-yaml reads it, translation and validation rules, the agent's own Ignition
checks, and diagnostics at the YAML path. `run.py` feeds them to both translators.
"""

import base64
import json
import random
import sys

VERSIONS = {
    "fcos": ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0", "1.6.0", "1.7.0", "1.7.0-experimental", "1.8.0-experimental"],
    "flatcar": ["1.0.0", "1.1.0", "1.2.0-experimental"],
    "openshift": [f"4.{m}.0" for m in range(8, 23)] + ["4.23.0-experimental"],
    "r4e": ["1.0.0", "1.1.0", "1.2.0-experimental"],
    "fiot": ["1.0.0", "1.1.0-experimental"],
}

# Fragments: (top-level key, YAML text). A case takes fragments with distinct keys.
F = []


def frag(key, text):
    F.append((key, text))


# --- storage.files ---------------------------------------------------------------------
for mode in ["0644", "0755", "420", "04755", "01777", "0o644", "!!str 0644", "0644.5", "644", "2.0", "-1", "0x1ed", "4294967295"]:
    frag("storage", f"storage:\n  files:\n    - path: /etc/a\n      mode: {mode}\n      contents:\n        inline: hi\n")
for inline in ["hello", "'" + "x" * 300 + "'", "|\n          " + "\n          ".join(["line"] * 60), '""', "\"\\/\"", "\"\\u00e9\\x41\"", "\"a\\tb\"", "\"\\e\\N\\_\\L\\P\""]:
    frag("storage", f"storage:\n  files:\n    - path: /etc/f\n      contents:\n        inline: {inline}\n")
for comp in ["gzip", "\"\"", "null", "bzip2"]:
    frag("storage", f"storage:\n  files:\n    - path: /etc/c\n      contents:\n        compression: {comp}\n        source: data:,hi\n")
for src in ['""', "http://example.com/x", "https://example.com/x", "s3://b/k", "tftp://h/x", "gs://b/o", "arn:aws:s3:::b/k", "'http://[::1'", "'%zz'", "data:,x", "'::'", "'http://a b/'"]:
    frag("storage", f"storage:\n  files:\n    - path: /etc/s\n      contents:\n        source: {src}\n")
    frag("ignition", f"ignition:\n  config:\n    merge:\n      - source: {src}\n")
frag("storage", "storage:\n  files:\n    - path: /etc/h\n      contents:\n        source: https://example.com/x\n        http_headers:\n          - name: A\n            value: b\n        verification:\n          hash: sha512-" + "0" * 128 + "\n")
frag("storage", "storage:\n  files:\n    - path: /etc/h\n      contents:\n        source: https://example.com/x\n        verification:\n          hash: sha256-" + "a" * 64 + "\n")
frag("storage", "storage:\n  files:\n    - path: /etc/ap\n      append:\n        - inline: more\n        - local: a.txt\n")
frag("storage", "storage:\n  files:\n    - path: /etc/l\n      contents:\n        local: a.txt\n    - path: /etc/big\n      contents:\n        local: big.txt\n")
frag("storage", "storage:\n  files:\n    - path: /etc/l\n      contents:\n        local: missing.txt\n")
frag("storage", "storage:\n  files:\n    - path: /etc/l\n      contents:\n        local: ../etc/passwd\n")
frag("storage", "storage:\n  files:\n    - path: /etc/l\n      contents:\n        local: a.txt\n        inline: x\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a\n    - path: /etc/a\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a\n      user:\n        id: 4294967295\n      group:\n        name: wheel\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a\n      user:\n        id: 5\n        name: x\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a\n      overwrite: false\n      contents:\n        inline: x\n")
frag("storage", "storage:\n  files:\n    - path: /boot/x\n    - path: /var/lib/x/\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a\n      mode: 0644\n  directories:\n    - path: /etc/a\n")
frag("storage", "storage:\n  directories:\n    - path: /etc/d\n      mode: 01777\n    - path: /etc/e\n      mode: 0755\n      user:\n        name: core\n")
frag("storage", "storage:\n  links:\n    - path: /etc/ln\n      target: /usr/bin/x\n      hard: false\n    - path: /etc/hl\n      target: /etc/x\n      hard: true\n")
frag("storage", "storage:\n  links:\n    - path: /etc/ln\n      target: relative/x\n")
frag("storage", "storage:\n  links:\n    - path: /etc/ln\n")
# trees
for extra in ["", "      file_mode: 0600\n", "      dir_mode: 0700\n", "      user:\n        name: core\n", "      group:\n        id: 10\n", "      file_mode: 0600\n      dir_mode: 0750\n      user:\n        id: 1000\n      group:\n        name: wheel\n", "      path: /etc/t\n", "      file_mode: \"x\"\n"]:
    for local in ["tree", "treelink", "tree2", "missing", "a.txt", "tree/sub"]:
        frag("storage", f"storage:\n  trees:\n    - local: {local}\n{extra}")
frag("storage", "storage:\n  trees:\n    - local: tree\n      path: /etc/t\n  files:\n    - path: /etc/t/run.sh\n      mode: 0700\n")
frag("storage", "storage:\n  trees:\n    - local: tree\n      path: /etc/t\n  directories:\n    - path: /etc/t/sub\n      mode: 0700\n")
# filesystems / disks
for fmt in ["xfs", "ext4", "vfat", "swap", "none", "btrfs", "\"\"", "ntfs"]:
    for p in ["/var", "/etc/x", "/home", "/var/log", "null", "swap", "/usr", "/boot"]:
        for wmu in ["true", "false"]:
            frag("storage", f"storage:\n  filesystems:\n    - device: /dev/disk/by-label/x\n      format: {fmt}\n      path: {p}\n      with_mount_unit: {wmu}\n")
frag("storage", "storage:\n  filesystems:\n    - device: /dev/vdb\n      format: vfat\n      uuid: 1234-ABCD\n      label: EFI\n    - device: /dev/vdc\n      format: ext4\n      label: " + "a" * 20 + "\n")
frag("storage", "storage:\n  filesystems:\n    - device: /dev/vdb\n      format: xfs\n      label: boot\n      wipe_filesystem: true\n")
frag("storage", "storage:\n  filesystems:\n    - device: /dev/disk/by-partlabel/root\n      format: xfs\n      label: root\n      wipe_filesystem: true\n")
for part in [
    "        - label: root\n          number: 4\n          size_mib: 8192\n          resize: true\n",
    "        - label: root\n          number: 4\n          size_mib: 0\n",
    "        - label: root\n          number: 4\n          size_mib: 4000\n        - label: var\n",
    "        - label: var\n          size_mib: 0\n        - label: data\n",
    "        - label: var\n          number: 5\n          start_mib: 0\n          size_mib: 10\n",
    "        - label: boot\n          number: 1\n",
    "        - number: 4\n          should_exist: false\n          wipe_partition_entry: true\n",
    "        - label: \"\"\n          number: 0\n",
    "        - label: x\n          type_guid: not-a-guid\n",
    "        - label: a\n        - label: a\n",
]:
    frag("storage", "storage:\n  disks:\n    - device: /dev/disk/by-id/coreos-boot-disk\n      wipe_table: false\n      partitions:\n" + part)
    frag("storage", "storage:\n  disks:\n    - device: /dev/vda\n      partitions:\n" + part)
frag("storage", "storage:\n  luks:\n    - name: data\n      device: /dev/vdb\n      clevis:\n        tpm2: true\n      wipe_volume: true\n  filesystems:\n    - device: /dev/mapper/data\n      format: xfs\n      path: /var/data\n      with_mount_unit: true\n")
frag("storage", "storage:\n  luks:\n    - name: data\n      device: /dev/vdb\n      cex:\n        enabled: true\n")
frag("storage", "storage:\n  luks:\n    - name: data\n      device: /dev/vdb\n      cex:\n        enabled: true\n      clevis:\n        tpm2: true\n")
frag("storage", "storage:\n  luks:\n    - name: data\n      device: /dev/vdb\n      key_file:\n        inline: secret\n      discard: true\n      open_options: [--allow-discards]\n")
frag("storage", "storage:\n  raid:\n    - name: md0\n      level: raid1\n      devices: [/dev/vdb, /dev/vdc]\n")
frag("storage", "storage: ~\n")
frag("storage", "storage:\n  files: ~\n  directories: []\n")
# --- systemd -----------------------------------------------------------------------------
for name in ["a.service", "a", "a/b.service", "a.mount", "foo@.service", "foo@x.service", "-.mount", "a.timer"]:
    frag("systemd", f"systemd:\n  units:\n    - name: {name}\n      enabled: true\n      contents: |\n        [Unit]\n        Description=x\n        [Install]\n        WantedBy=multi-user.target\n")
for contents in ["\"[Unit]\\nDescription=a [b]\\n\"", "\"[Unit\\n\"", "\"Foo=bar\\n\"", "\"[Unit]\\nDescription=x\\\\\\n  y\\n\"", "\"\"", "\"[Unit]\\n[Service]\\nExecStart=/bin/x\\n\"", "\"[Un[it]\\n\""]:
    frag("systemd", f"systemd:\n  units:\n    - name: c.service\n      contents: {contents}\n")
    frag("systemd", f"systemd:\n  units:\n    - name: c.service\n      dropins:\n        - name: d.conf\n          contents: {contents}\n")
frag("systemd", "systemd:\n  units:\n    - name: m.service\n      mask: true\n      enabled: true\n")
frag("systemd", "systemd:\n  units:\n    - name: m.service\n      mask: true\n      contents: x\n")
frag("systemd", "systemd:\n  units:\n    - name: a.service\n    - name: a.service\n")
frag("systemd", "systemd:\n  units:\n    - name: a.service\n      contents_local: unit.service\n    - name: b.service\n      dropins:\n        - name: x.conf\n          contents_local: unit.service\n")
frag("systemd", "systemd:\n  units:\n    - name: a.service\n      dropins:\n        - name: x\n        - name: x.conf\n        - name: x.conf\n")
frag("systemd", "systemd: ~\n")
frag("systemd", "systemd:\n  units: ~\n")
frag("systemd", "systemd:\n  units:\n    - name: e.service\n      enabled: false\n")
# --- passwd ------------------------------------------------------------------------------
frag("passwd", "passwd:\n  users:\n    - name: core\n      ssh_authorized_keys:\n        - ssh-ed25519 AAAA\n      ssh_authorized_keys_local:\n        - key.pub\n")
frag("passwd", "passwd:\n  users:\n    - name: core\n      uid: 4294967295\n      groups: [wheel]\n      password_hash: x\n      home_dir: /home/c\n      shell: /bin/sh\n      no_create_home: true\n      system: true\n      gecos: G\n      primary_group: core\n      no_user_group: true\n      no_log_init: true\n      should_exist: true\n")
frag("passwd", "passwd:\n  users:\n    - name: core\n    - name: core\n")
frag("passwd", "passwd:\n  users:\n    - name: root\n      uid: 0\n  groups:\n    - name: g\n      gid: 100\n      system: true\n      password_hash: x\n")
frag("passwd", "passwd:\n  users:\n    - name: core\n      ssh_authorized_keys_local:\n        - missing.pub\n")
frag("passwd", "passwd:\n  users:\n    - name: x\n      should_exist: false\n")
frag("passwd", "passwd: ~\n")
# --- ignition ----------------------------------------------------------------------------
for inl in ["'{\"ignition\":{\"version\":\"3.0.0\"}}'", "'{\"ignition\":{\"version\":\"3.4.0\"}}'", "not json", "'{}'", "'{\"ignition\":{\"version\":\"9.9.9\"}}'", "'[1]'"]:
    frag("ignition", f"ignition:\n  config:\n    merge:\n      - inline: {inl}\n")
    frag("ignition", f"ignition:\n  config:\n    replace:\n      inline: {inl}\n")
frag("ignition", "ignition:\n  config:\n    merge:\n      - local: a.txt\n")
frag("ignition", "ignition:\n  config:\n    merge: []\n    replace: {}\n")
frag("ignition", "ignition:\n  config:\n    merge:\n      - {}\n")
frag("ignition", "ignition:\n  timeouts:\n    http_response_headers: 10\n    http_total: 0\n  proxy:\n    http_proxy: http://p:3128\n    no_proxy: [a, a]\n")
frag("ignition", "ignition:\n  security:\n    tls:\n      certificate_authorities:\n        - inline: x\n        - local: a.txt\n")
frag("ignition", "ignition:\n  security:\n    tls:\n      certificate_authorities:\n        - source: http://x/ca\n          compression: gzip\n")
frag("ignition", "ignition:\n  version: 3.0.0\n")
frag("ignition", "ignition: ~\n")
# --- kernel_arguments / boot_device / grub ------------------------------------------------
frag("kernel_arguments", "kernel_arguments:\n  should_exist:\n    - quiet\n    - a=b\n  should_not_exist:\n    - debug\n")
frag("kernel_arguments", "kernel_arguments:\n  should_exist: [x, x]\n")
frag("kernel_arguments", "kernel_arguments:\n  should_exist: [x]\n  should_not_exist: [x]\n")
for layout in ["x86_64", "aarch64", "ppc64le", "s390x-eckd", "s390x-virt", "s390x-zfcp", "s390x", "arm", "null"]:
    frag("boot_device", f"boot_device:\n  layout: {layout}\n  mirror:\n    devices: [/dev/vda, /dev/vdb]\n")
    frag("boot_device", f"boot_device:\n  layout: {layout}\n  luks:\n    tpm2: true\n    device: /dev/dasda\n")
    frag("boot_device", f"boot_device:\n  layout: {layout}\n  luks:\n    cex:\n      enabled: true\n    device: /dev/dasda\n")
frag("boot_device", "boot_device:\n  mirror:\n    devices: [/dev/vda, /dev/vdb]\n")
frag("boot_device", "boot_device:\n  mirror:\n    devices: [/dev/vda]\n")
frag("boot_device", "boot_device:\n  luks:\n    tang:\n      - url: http://t\n        thumbprint: x\n    threshold: 2\n    discard: true\n")
frag("boot_device", "boot_device:\n  luks:\n    tpm2: true\n  mirror:\n    devices: [/dev/vda, /dev/vdb]\n")
frag("boot_device", "boot_device:\n  layout: s390x-eckd\n  luks:\n    tpm2: true\n    device: /dev/sda\n")
frag("boot_device", "boot_device:\n  layout: s390x-zfcp\n  luks:\n    tpm2: true\n    device: /dev/dasda\n")
frag("grub", "grub:\n  users:\n    - name: root\n      password_hash: grub.pbkdf2.sha512.10000.x\n")
frag("grub", "grub:\n  users:\n    - name: root\n")
frag("grub", "grub:\n  users:\n    - name: a\n      password_hash: x\n    - name: a\n      password_hash: y\n")
# --- experimental quadlets ----------------------------------------------------------------
for q in [
    "  quadlets:\n    - name: web.container\n      contents: |\n        [Container]\n        Image=x\n",
    "  quadlets:\n    - name: web.container\n      rootful: false\n      contents: \"[Container]\\n\"\n",
    "  quadlets:\n    - name: web.container\n      dropins:\n        - name: a.conf\n          contents: \"[Container]\\n\"\n",
    "  quadlets:\n    - name: web\n      contents: x\n",
    "  quadlets:\n    - name: web.volume\n      enabled: true\n      contents: \"[Volume]\\n\"\n",
    "  quadlets:\n    - name: a.network\n    - name: a.network\n",
]:
    frag("podman", "podman:\n" + q)
    frag("systemd", "systemd:\n  units:\n    - name: z.service\n      contents: x\n" + q)
# --- openshift ----------------------------------------------------------------------------
for os_ in [
    "openshift:\n  fips: false\n", "openshift:\n  fips: true\n", "openshift:\n  kernel_type: \"\"\n",
    "openshift:\n  kernel_type: realtime\n", "openshift:\n  kernel_type: default\n", "openshift:\n  kernel_type: 64k-pages\n",
    "openshift:\n  kernel_type: bogus\n", "openshift:\n  kernel_arguments: [a, b]\n", "openshift:\n  kernel_arguments: []\n",
    "openshift:\n  extensions: [usbguard]\n", "openshift:\n  extensions: []\n", "openshift: ~\n", "openshift:\n  fips: ~\n",
]:
    frag("openshift", os_)
# --- YAML forms ---------------------------------------------------------------------------
frag("storage", "x-base: &b\n  mode: 0644\n  overwrite: true\nstorage:\n  files:\n    - <<: *b\n      path: /etc/m\n")
frag("storage", "storage:\n  files:\n    - &f\n      path: /etc/a\n    - <<: *f\n      path: /etc/b\n")
frag("storage", "storage:\n  files:\n    - <<: [{mode: 0600}, {overwrite: true}]\n      path: /etc/mm\n")
frag("storage", "storage:\n  files:\n    - path: !!str /etc/t\n      contents:\n        inline: !!binary aGVsbG8=\n")
frag("storage", "storage:\n  files:\n    - path: /etc/t\n      mode: !!int 420\n")
frag("storage", "storage:\n  files:\n    - path: \"/etc/q\n  w\"\n")
frag("storage", "storage:\n  files:\n    - path: \"/etc/q\n        w\"\n")
frag("storage", "storage:\n  files:\n    - path: /etc/x\x85y\n")
frag("storage", "storage:\n  files:\n    - path: \"/etc/x\u2028y\"\n")
frag("storage", "storage:\n  files:\n    - path: /etc/ctl\x01\n")
frag("storage", "storage:\n  files:\n    - path: /etc/del\x7f\n")
frag("storage", "storage:\n  files:\n    - path: /etc/c1\x9b\n")
frag("storage", "storage:\n  files:\n    - {path: /etc/flow, mode: 0644, contents: {inline: x}}\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a\n      mode: 0644\n      mode: 0600\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a\n      ? complex\n      : x\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a\n      1: x\n")
frag("storage", "storage:\n  files:\n  - path: /etc/a\n    contents:\n      inline: >-\n        folded\n        text\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a\n      contents:\n        inline: |+\n          keep\n\n")
frag("storage", "storage:\n  files:\n    - path: '/etc/it''s'\n")
frag("storage", "storage:\n  files:\n    - path: /etc/a # comment\n")
frag("storage", "storage:\n\tfiles: []\n")
frag("unknown", "unknown_top: 1\n")
frag("unknown", "Storage: {}\n")
frag("unknown", "%TAG ! tag:x,2000:\n")
frag("unknown", "x: *undefined\n")

HEAD_VERSIONS = ["1.5.0", "01.5.0", "1.5", "v1.5.0", "1.5.0+meta", "\"1.5.0\"", "1.5.0-experimental", "1.05.0"]
OS_META = [
    "metadata:\n  name: worker-x\n  labels:\n    machineconfiguration.openshift.io/role: worker\n",
    "metadata:\n  name: worker-x\n",
    "metadata:\n  labels:\n    machineconfiguration.openshift.io/role: worker\n",
    "metadata:\n  name: m\n  labels:\n    machineconfiguration.openshift.io/role: \"\"\n",
    "metadata:\n  name: m\n  labels:\n    other: x\n",
    "",
]


# --- duplicates a sugar merge must not hide (Ignition's merge keeps the child's duplicates) --
GRUB_USERS = ["grub:\n  users:\n    - name: root\n      password_hash: grub.pbkdf2.sha512.10000.x\n", "grub:\n  users: []\n", ""]
for g in GRUB_USERS:
    frag("storage", g + "storage:\n  files:\n    - path: /boot/grub2/user.cfg\n      contents:\n        inline: a\n    - path: /boot/grub2/user.cfg\n      append:\n        - inline: b\n")
    frag("storage", g + "storage:\n  files:\n    - path: /etc/d\n    - path: /etc/d\n      mode: 0600\n")
    frag("systemd", g + "systemd:\n  units:\n    - name: a.service\n    - name: a.service\n      enabled: true\n")
for empty in ["boot_device: {}\n", "boot_device:\n  mirror:\n    devices: []\n", "storage:\n  filesystems:\n    - device: /dev/vdb\n      format: ext4\n      path: /var/x\n      with_mount_unit: false\n"]:
    frag("passwd", empty + "passwd:\n  users:\n    - name: u\n    - name: u\n      uid: 5\n")
    frag("systemd", empty + "systemd:\n  units:\n    - name: var-x.mount\n    - name: var-x.mount\n")
# --- unit contents with `[` inside a line (go-systemd's deserializer) -----------------------
for body in ["[Unit]\\nDescription=a[b]\\n", "[Unit] x\\nA=b\\n", "[Unit\\nA=b\\n", "x [Unit]\\n", "[Unit]]\\nA=b\\n",
             "[[Unit]\\n", "[Unit]\\nA=[\\n", "[]\\nA=b\\n", " [Unit]\\nA=b\\n", "[Unit]\\n[Service\\nExecStart=x\\n",
             "[Unit]\\nA=b \\\\\\n  [x]\\n", "# [x\\n[Unit]\\n", "[Unit]#c\\nA=b\\n"]:
    frag("systemd", f"systemd:\n  units:\n    - name: b.service\n      contents: \"{body}\"\n")
    frag("systemd", f"systemd:\n  units:\n    - name: b.service\n      dropins:\n        - name: d.conf\n          contents: \"{body}\"\n")
# --- LS/PS (U+2028, U+2029) in plain scalars: go-yaml takes them as line breaks there -------
for sep in ["\u2028", "\u2029", "\u0085"]:
    frag("storage", f"storage:\n  files:\n    - path: /etc/a{sep}b\n")
    frag("storage", f"storage:\n  files:\n    - path: /etc/a\n      contents:\n        inline: x{sep}y\n")
    frag("storage", f"storage:\n  files:\n    - path: /etc/a\n      contents:\n        inline: x{sep}  y{sep}\n")
    frag("storage", f"storage:\n  files:\n    - path: /etc/a\n      contents:\n        inline: \"x{sep}y\"\n")
    frag("storage", f"storage:\n  files:\n    - path: /etc/a\n      contents:\n        inline: 'x{sep}y'\n")
    frag("storage", f"storage:\n  files:\n    - path: /etc/a\n      contents:\n        inline: |\n          x{sep}y\n")
    frag("passwd", f"passwd:\n  users:\n    - name: a{sep}\n")
    frag("passwd", f"passwd:{sep}  users:\n    - name: a\n")


# --- second extension: MachineConfig output, grub on every openshift version, unit text before
# the first section, flow roots with trailing content, CEX, hard-link targets ----------------
for g in ["grub:\n  users:\n    - name: root\n      password_hash: grub.pbkdf2.sha512.10000.x\n",
          "grub:\n  users:\n    - name: root\n      password_hash: h1\n    - name: admin\n      password_hash: h2\n"]:
    frag("grub", g)
    frag("grub", g + "storage:\n  files:\n    - path: /boot/grub2/user.cfg\n      append:\n        - inline: more\n")
for body in ["a=b[c]d\\n[Unit]\\nA=b\\n", "a=[b\\n", "x # [y\\n[Unit]\\nA=b\\n", "x ; [y\\n[Unit]\\n",
             "[Unit\\nA=b]\\nC=d\\n", "[Unit]\\nFoo", "[Unit]\\nFoo\\n", "pre [Install]\\nWantedBy=a\\n",
             "a\\\\\\n[b\\n[Unit]\\n", "[Unit]\\nA=" + "x" * 2100 + "\\n", "[Unit]\\n" + "B=c\\n" * 1000 + "A=" + "x" * 2100 + "\\n",
             "\\t[Unit]\\nA=b\\n", "[Unit]  \\nA=b\\n[Install]\\nWantedBy=x\\n"]:
    frag("systemd", f"systemd:\n  units:\n    - name: g.service\n      enabled: true\n      contents: \"{body}\"\n")
    frag("systemd", f"systemd:\n  units:\n    - name: g.service\n      dropins:\n        - name: d.conf\n          contents: \"{body}\"\n")
for tgt in ["../x", "x", "/etc/x", "/etc/./x", "/etc//x/", "../../etc/x", "/etc/y/../x"]:
    frag("storage", f"storage:\n  directories:\n    - path: /etc/x\n  links:\n    - path: /etc/l\n      target: {tgt}\n      hard: true\n")
for luks in [
    "    - name: root\n      device: /dev/vdb\n      cex:\n        enabled: true\n",
    "    - name: data\n      device: /dev/vdb\n      cex:\n        enabled: true\n      clevis:\n        threshold: 1\n",
    "    - name: data\n      device: /dev/vdb\n      cex:\n        enabled: true\n      clevis:\n        threshold: 0\n",
    "    - name: data\n      device: /dev/vdb\n      key_file:\n        source: 'http://[::1'\n",
    "    - name: data\n      device: /dev/vdb\n      key_file:\n        source: ftp://x/k\n",
    "    - name: data\n      device: /dev/vdb\n      clevis:\n        custom:\n          pin: ''\n",
    "    - name: data\n      device: /dev/vdb\n      cex:\n        enabled: true\n      key_file:\n        source: ''\n",
]:
    frag("storage", "storage:\n  luks:\n" + luks)
    frag("openshift", "openshift:\n  kernel_arguments: [rd.luks.key=/etc/luks/cex.key]\nstorage:\n  luks:\n" + luks)
# MachineConfig field filters and YAML styles.
for mc in [
    "passwd:\n  groups:\n    - name: g\n",
    "passwd:\n  users:\n    - name: core\n      password_hash: x\n      ssh_authorized_keys: [ssh-ed25519 AAAA]\n",
    "passwd:\n  users:\n    - name: core\n      uid: 0\n      groups: []\n      shell: /bin/sh\n      system: false\n      home_dir: /h\n",
    "passwd:\n  users:\n    - name: core\n      should_exist: true\n      no_create_home: false\n      gecos: x\n",
    "storage:\n  directories:\n    - path: /etc/d\n",
    "storage:\n  links:\n    - path: /etc/l\n      target: /x\n",
    "storage:\n  files:\n    - path: /etc/f\n      append:\n        - inline: x\n",
    "storage:\n  files:\n    - path: /etc/f\n      contents:\n        source: data:,x\n        http_headers:\n          - name: a\n            value: b\n",
    "storage:\n  files:\n    - path: /etc/f\n      contents:\n        compression: gzip\n        source: data:,x\n",
    "storage:\n  files:\n    - path: /etc/f\n      contents:\n        inline: '" + "hello world " * 40 + "'\n",
    "storage:\n  files:\n    - path: /etc/f\n      mode: 0600\n      user:\n        id: 1000000\n      group:\n        id: 123456\n      contents:\n        inline: x\n",
    "storage:\n  files:\n    - path: /etc/yes\n    - path: '/etc/a b'\n    - path: /etc/x:y\n    - path: '/etc/#c'\n",
    "storage:\n  trees:\n    - local: tree\n      path: /etc/t\n",
    "kernel_arguments:\n  should_exist: [a]\n",
    "systemd:\n  units:\n    - name: u.service\n      contents: \"[Unit]\\nA=b \\n\"\n",
    "systemd:\n  units:\n    - name: u.service\n      contents: \"[Unit]\\n\\n\\n\"\n",
    "systemd:\n  units:\n    - name: u.service\n      contents: \"\\n[Unit]\\nA=b\"\n",
    "systemd:\n  units:\n    - name: u.service\n      contents: \" [Unit]\\nA=b\\n\"\n",
    "systemd:\n  units:\n    - name: u.service\n      contents: \"[Unit]\\nDescription=caf\u00e9 \\u2603 \\U0001F600\\n\"\n",
    "systemd:\n  units:\n    - name: u.service\n      contents: \"[Unit]\\n\\tA=b\\n\"\n",
    "systemd:\n  units:\n    - name: u.service\n      mask: true\n    - name: v.service\n      enabled: false\n",
    "storage:\n  filesystems:\n    - device: /dev/vdb\n      format: xfs\n      path: /var/lib/x\n      with_mount_unit: true\n      mount_options: [noatime]\n",
]:
    frag("storage" if mc.startswith("storage") else mc.split(":")[0], mc)
for os_ in [
    "openshift:\n  kernel_arguments: ['a=1', 'b c', '- d', 'e: f', 'true', '0644', '', 'x#y', '#z', '@a', 'on', '1e3', '2021-01-01', '1:20', '~']\n",
    "openshift:\n  extensions: [usbguard, kernel-devel]\n  fips: true\n  kernel_type: realtime\n",
    "openshift:\n  kernel_type: \"\"\n  fips: false\n",
]:
    frag("openshift", os_)
OS_META += [
    "metadata:\n  name: 'a b'\n  labels:\n    machineconfiguration.openshift.io/role: worker\n    z: 'yes'\n    a10: ''\n    a2: x\n    A: '1'\n    b: ~\n",
    "metadata:\n  name: \"123\"\n  labels:\n    machineconfiguration.openshift.io/role: master\n    k8s.io/x: 'null'\n",
]
FLOW_TAILS = ["foo: [", "@x", "a: b: c", "}", "\"unterminated", "\tfoo", "x", "# c\n[", "&", "*a b", "'a'\n]", "%FOO", "- a", "]]]"]


def case(rng):
    variant = rng.choice(list(VERSIONS))
    version = rng.choice(VERSIONS[variant])
    head = f"variant: {variant}\nversion: {version}\n"
    if rng.random() < 0.01:
        head = f"variant: fcos\nversion: {rng.choice(HEAD_VERSIONS)}\n"
    if variant == "openshift":
        head += OS_META[0] if rng.random() < 0.7 else rng.choice(OS_META)
    n = rng.choice([1, 1, 1, 2, 2, 3])
    used = set()
    body = ""
    for _ in range(n):
        key, text = rng.choice(F)
        if key in used:
            continue
        used.add(key)
        body += text
    text = head + body
    if rng.random() < 0.01:
        text = f"{{variant: {variant}, version: {version}}}\n{rng.choice(FLOW_TAILS)}\n"
    r = rng.random()
    if r < 0.01:
        return {"b64": base64.b64encode(b"\xff\xfe" + text.encode("utf-16-le")).decode()}
    if r < 0.02:
        return {"b64": base64.b64encode(b"\xfe\xff" + text.encode("utf-16-be")).decode()}
    if r < 0.025:
        return {"b64": base64.b64encode(b"\xef\xbb\xbf" + text.encode()).decode()}
    if r < 0.03:
        return {"b64": base64.b64encode(text.encode() + b"\xff").decode()}
    return {"input": text}


def with_mode(rng, c):
    """openshift: half the cases as a MachineConfig (no --raw), half as `butane --raw`."""
    text = c.get("input") or ""
    if "variant: openshift" in text and rng.random() < 0.5:
        c["mc"] = True
    return c


def main():
    seed, count = 26, 7000
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--seed":
            seed = int(args.pop(0))
        elif a == "--count":
            count = int(args.pop(0))
    rng = random.Random(seed)
    seen = set()
    i = 0
    while i < count:
        c = with_mode(rng, case(rng))
        key = (c.get("input") or c.get("b64")) + ("mc" if c.get("mc") else "")
        if key in seen:
            continue
        seen.add(key)
        c["id"] = i
        print(json.dumps(c, ensure_ascii=False))
        i += 1


if __name__ == "__main__":
    main()
