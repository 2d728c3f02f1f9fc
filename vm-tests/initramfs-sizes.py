#!/usr/bin/env python3
"""What the agent's dracut module adds to an initramfs, by what brought it in.

    vm-tests/initramfs-sizes.py AGENT_IMG REFERENCE_IMG

Unpacks both images (zstd cpio, as vm-tests/initramfs.sh builds them: the same dracut modules
with and without `agent`) and sizes every file of the first that the second lacks or has
smaller. Each file goes to a group of dracut/30agent/module-setup.sh: a tool by its name, a
shared library to the one group whose tools need it (ldd) or to "libraries shared by several
groups", a kernel module to "kernel modules" (by directory), anything else by its path.
Prints, per group, the uncompressed bytes and the bytes of the group's files alone compressed
the way dracut compresses the image (zstd -15; parts compress a little better together, so the
column adds up to more than the image grows).
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

# Keep in step with dracut/30agent/module-setup.sh.
GROUPS = [
    ("agent binary", ["agent"]),
    ("ext4: e2fsprogs", ["mkfs.ext4", "mke2fs", "mke2fs.conf"]),
    ("xfs: xfsprogs", ["mkfs.xfs"]),
    ("btrfs: btrfs-progs", ["mkfs.btrfs"]),
    ("vfat: dosfstools", ["mkfs.fat", "mkfs.vfat"]),
    ("util-linux: mkswap wipefs", ["mkswap", "wipefs"]),
    # Not installed by the module (the agent does not run them), counted if an image has them.
    ("not run by the agent: blkid partx sfdisk sgdisk swaplabel tune2fs fatlabel btrfs ...",
     ["swaplabel", "blkid", "partx", "sfdisk", "sgdisk", "tune2fs", "e2label", "xfs_admin",
      "btrfs", "fatlabel", "chpasswd", "find", "head", "wc", "clevis-luks-pass",
      "clevis-luks-list"]),
    ("mdadm", ["mdadm", "63-md-raid-arrays.rules"]),
    ("cryptsetup, dmsetup + dm udev rules",
     ["cryptsetup", "dmsetup", "10-dm.rules", "13-dm-disk.rules", "55-dm.rules",
      "60-persistent-storage-dm.rules", "95-dm-notify.rules"]),
    ("curl (clevis's tang pin)", ["curl"]),
    ("clevis + jose + luksmeta + pwmake (+ cracklib dict, bash, coreutils)",
     ["clevis", "clevis-decrypt", "clevis-decrypt-sss", "clevis-decrypt-tang",
      "clevis-decrypt-tpm2", "clevis-encrypt-sss", "clevis-encrypt-tang", "clevis-encrypt-tpm2",
      "clevis-luks-bind", "clevis-luks-common-functions", "clevis-luks-unlock", "jose",
      "pwmake", "luksmeta", "pwquality.conf", "cracklib_dict.hwm", "cracklib_dict.pwd",
      "cracklib_dict.pwi", "bash", "sed", "awk", "mawk", "gawk", "sort", "mktemp", "basename",
      "tr", "cat"]),
    ("tpm2-tools + libtss2 (clevis's tpm2 pin; the device TCTI it loads with dlopen)",
     ["tpm2", "tpm2_create", "tpm2_createpolicy", "tpm2_createprimary", "tpm2_flushcontext",
      "tpm2_load", "tpm2_pcrread", "tpm2_unseal", "libtss2-tcti-device.so.0",
      "libtss2-tcti-device.so.0.0.0"]),
    ("setfiles (policycoreutils)", ["setfiles"]),
    ("shadow: useradd family", ["useradd", "usermod", "userdel", "groupadd", "groupmod",
                                "groupdel", "chpasswd"]),
    ("systemd-networkd", ["systemd-networkd", "systemd-networkd-wait-online",
                          "systemd-networkd.service", "systemd-networkd.socket",
                          "systemd-networkd-wait-online.service", "99-agent-dhcp.network",
                          "networkctl"]),
    ("z/VM tools", ["vmur", "chccwdev", "cio_ignore"]),
    ("udevadm mount modprobe sync grep cut tail mkdir rm",
     ["udevadm", "mount", "umount", "modprobe", "kmod", "sync", "grep", "cut", "tail", "mkdir",
      "rm"]),
]
SHARED = "libraries shared by several groups"
OTHER_LIB = "other libraries"
MODULE = "module: units, generator, scripts, hooks"
TEST = "vm-tests hook (test image only)"
OTHER = "other files"
LIB_DIRS = ("usr/lib/x86_64-linux-gnu/", "lib/x86_64-linux-gnu/", "usr/lib64/", "lib64/")


def unpack(img, dest):
    un = subprocess.run(["zstd", "-dc", img], check=True, stdout=subprocess.PIPE).stdout
    subprocess.run(["cpio", "-idm", "--quiet", "--no-absolute-filenames"], input=un, cwd=dest,
                   check=True)


def files(root):
    """Relative path -> size of every regular file (symlinks cost nothing)."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                out[os.path.relpath(p, root)] = os.path.getsize(p)
    return out


def needed_libs(path):
    """Basenames of the real files of the shared libraries `path` needs (host ldd)."""
    try:
        r = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, check=False)
    except OSError:
        return set()
    libs = set()
    for line in r.stdout.splitlines():
        m = re.search(r"(/\S+)", line.split("=>")[-1])
        if m and os.path.exists(m.group(1)):
            libs.add(os.path.basename(os.path.realpath(m.group(1))))
            libs.add(os.path.basename(m.group(1)))
    return libs


def zstd_size(root, paths):
    if not paths:
        return 0
    tar = subprocess.run(["tar", "-C", root, "-cf", "-", "--null", "-T", "-"],
                         input="\0".join(sorted(paths)).encode(), stdout=subprocess.PIPE,
                         check=True).stdout
    z = subprocess.run(["zstd", "-15", "-q", "-T0", "-c"], input=tar, stdout=subprocess.PIPE,
                       check=True).stdout
    return len(z)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    agent_img, ref_img = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        a_root, r_root = os.path.join(tmp, "a"), os.path.join(tmp, "r")
        os.mkdir(a_root)
        os.mkdir(r_root)
        unpack(agent_img, a_root)
        unpack(ref_img, r_root)
        a, r = files(a_root), files(r_root)
        delta = {p: s - r.get(p, 0) for p, s in a.items() if s > r.get(p, 0)}

        by_name = {}
        for g, names in GROUPS:
            for n in names:
                by_name.setdefault(n, g)
        group_of = {}
        lib_users = collections.defaultdict(set)
        for p in delta:
            base = os.path.basename(p)
            if p.startswith(("usr/lib/modules/", "lib/modules/")):
                m = re.search(r"/kernel/([^/]+(?:/[^/]+)?)/", p)
                group_of[p] = "kernel modules" + (f": {m.group(1)}" if m else "")
            elif "agent-test" in p:
                group_of[p] = TEST
            elif base in by_name and not p.startswith(LIB_DIRS):
                group_of[p] = by_name[base]
                for lib in needed_libs(os.path.join(a_root, p)):
                    lib_users[lib].add(by_name[base])
            elif re.search(r"(^|/)([0-9]+-)?agent[-.][^/]*$|(^|/)agent/", p):
                group_of[p] = MODULE
        for p in delta:
            if p in group_of:
                continue
            base = os.path.basename(p)
            if p.startswith(LIB_DIRS) or ".so" in base:
                users = lib_users.get(base, set())
                group_of[p] = next(iter(users)) if len(users) == 1 else (
                    SHARED if users else OTHER_LIB)
            else:
                group_of[p] = OTHER

        sums = collections.defaultdict(int)
        members = collections.defaultdict(list)
        for p, s in delta.items():
            sums[group_of[p]] += s
            members[group_of[p]].append(p)
        total = sum(delta.values())
        kmod = sum(s for g, s in sums.items() if g.startswith("kernel modules"))
        print(f"  {'uncompressed':>12} {'zstd alone':>10}  group (files)")
        for g in sorted(sums, key=lambda g: -sums[g]):
            z = zstd_size(a_root, members[g])
            print(f"  {sums[g] // 1024:>8} KiB {z // 1024:>6} KiB  {g} ({len(members[g])})")
        print(f"  {total // 1024:>8} KiB {'':>10}  in all ({len(delta)} files; kernel modules "
              f"{kmod // 1024} KiB)")
        if os.environ.get("VERBOSE") == "1":
            for g in sorted(members):
                for p in sorted(members[g]):
                    print(f"{g}\t{delta[p]}\t{p}")


if __name__ == "__main__":
    main()
