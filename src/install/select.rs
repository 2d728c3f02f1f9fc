//! The install disk chosen by what it is, not by its name: a selector of properties read from
//! sysfs (`/sys/block/*`), of which exactly one disk must match. A disk's name (`sda`,
//! `nvme0n1`) depends on probe order; its size, model, serial, WWN, transport and whether it
//! spins or is removable do not.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// The properties a selector may ask for; each `None` matches anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// Bytes, inclusive.
    pub size_min: Option<u64>,
    pub size_max: Option<u64>,
    /// Globs (`*`, `?`, `[...]`), matched against the whole string.
    pub model: Option<String>,
    pub serial: Option<String>,
    pub wwn: Option<String>,
    pub transport: Option<Transport>,
    pub rotational: Option<bool>,
    pub removable: Option<bool>,
}

/// How a disk is attached, from its device path in sysfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Transport {
    Nvme,
    Sata,
    Scsi,
    Virtio,
    Usb,
    Loop,
    /// Anything else (mmc, xen, ...): only a selector without `transport` matches it.
    Other,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Nvme => "nvme",
            Transport::Sata => "sata",
            Transport::Scsi => "scsi",
            Transport::Virtio => "virtio",
            Transport::Usb => "usb",
            Transport::Loop => "loop",
            Transport::Other => "other",
        }
    }

    /// The transports a selector may name.
    pub const NAMES: [&'static str; 6] = ["nvme", "sata", "scsi", "virtio", "usb", "loop"];

    pub fn parse(s: &str) -> Result<Transport, String> {
        Ok(match s {
            "nvme" => Transport::Nvme,
            "sata" | "ata" => Transport::Sata,
            "scsi" => Transport::Scsi,
            "virtio" => Transport::Virtio,
            "usb" => Transport::Usb,
            "loop" => Transport::Loop,
            _ => {
                return Err(format!(
                    "unknown transport {s:?} (one of: {})",
                    Transport::NAMES.join(", ")
                ));
            }
        })
    }
}

/// One whole disk as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Kernel name (`sda`, `loop3`).
    pub name: String,
    pub size: u64,
    pub model: Option<String>,
    pub serial: Option<String>,
    pub wwn: Option<String>,
    pub transport: Transport,
    pub rotational: bool,
    pub removable: bool,
}

impl std::fmt::Display for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
        write!(
            f,
            "{}: size {} ({}), transport {}, model {}, serial {}, wwn {}, rotational {}, removable {}",
            self.name,
            self.size,
            runtime::limits::human(self.size),
            self.transport.name(),
            opt(&self.model),
            opt(&self.serial),
            opt(&self.wwn),
            yes_no(self.rotational),
            yes_no(self.removable)
        )
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Kernel names that are never install disks: RAM disks, device-mapper and md devices (built
/// on other disks), CD/DVD drives, floppies, network block devices.
fn not_a_disk(name: &str) -> bool {
    ["ram", "zram", "dm-", "md", "sr", "fd", "nbd"]
        .iter()
        .any(|p| name.starts_with(p))
}

fn read_trimmed(p: &Path) -> Option<String> {
    let s = std::fs::read(p).ok()?;
    let s = String::from_utf8_lossy(&s);
    let s = s.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    (!s.is_empty()).then(|| s.to_string())
}

/// The serial number in a SCSI VPD page 0x80 (unit serial number): a 4-byte header, the
/// length in bytes 2-3, then the serial (space-padded ASCII).
fn vpd_serial(page: &[u8]) -> Option<String> {
    let len = u16::from_be_bytes([*page.get(2)?, *page.get(3)?]) as usize;
    let s = page.get(4..4 + len).or_else(|| page.get(4..))?;
    let s = String::from_utf8_lossy(s);
    let s = s.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    (!s.is_empty()).then(|| s.to_string())
}

/// The transport of a disk from its name and its device path (the target of
/// `/sys/block/NAME`, e.g. `../devices/pci0000:00/0000:00:1f.2/ata1/host0/...`).
fn transport(name: &str, devpath: &str) -> Transport {
    let has = |s: &str| devpath.split('/').any(|c| c.starts_with(s));
    if name.starts_with("loop") {
        Transport::Loop
    } else if name.starts_with("nvme") || has("nvme") {
        Transport::Nvme
    } else if has("usb") {
        Transport::Usb
    } else if has("ata") {
        Transport::Sata
    } else if has("virtio") && !has("host") {
        // virtio-blk (vda); virtio-scsi disks have a SCSI host below the virtio device.
        Transport::Virtio
    } else if has("host") || has("target") {
        Transport::Scsi
    } else {
        Transport::Other
    }
}

/// Reads one disk, `dir` being `<sys>/block/NAME`.
fn read_disk(dir: &Path) -> Option<Disk> {
    let name = dir.file_name()?.to_string_lossy().into_owned();
    let num = |f: &str| -> Option<u64> { read_trimmed(&dir.join(f))?.parse().ok() };
    let size = num("size")? * 512;
    let devpath = std::fs::read_link(dir)
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let serial = read_trimmed(&dir.join("serial"))
        .or_else(|| read_trimmed(&dir.join("device/serial")))
        .or_else(|| vpd_serial(&std::fs::read(dir.join("device/vpd_pg80")).ok()?));
    Some(Disk {
        size,
        model: read_trimmed(&dir.join("device/model")),
        serial,
        wwn: read_trimmed(&dir.join("wwid")).or_else(|| read_trimmed(&dir.join("device/wwid"))),
        transport: transport(&name, &devpath),
        rotational: num("queue/rotational") == Some(1),
        removable: num("removable") == Some(1),
        name,
    })
}

/// Every whole disk under `<sys>/block` (normally `/sys`), by name; devices of no size (a
/// detached loop device, an empty card reader) and those that are no disks ([`not_a_disk`])
/// are left out.
pub fn disks(sys: &Path) -> Result<Vec<Disk>> {
    let block = sys.join("block");
    let rd = std::fs::read_dir(&block)
        .map_err(|e| anyhow::anyhow!("listing disks in {}: {e}", block.display()))?;
    let mut out: Vec<Disk> = rd
        .flatten()
        .filter(|e| !not_a_disk(&e.file_name().to_string_lossy()))
        .filter_map(|e| read_disk(&e.path()))
        .filter(|d| d.size > 0)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

impl Selector {
    /// Whether the selector asks for anything at all.
    pub fn is_empty(&self) -> bool {
        *self == Selector::default()
    }

    /// Why `d` does not match: every property that differs, or nothing when it matches.
    pub fn mismatches(&self, d: &Disk) -> Vec<String> {
        let mut why = Vec::new();
        if let Some(m) = self.size_min
            && d.size < m
        {
            why.push(format!(
                "size {} < --disk-size-min {}",
                runtime::limits::human(d.size),
                runtime::limits::human(m)
            ));
        }
        if let Some(m) = self.size_max
            && d.size > m
        {
            why.push(format!(
                "size {} > --disk-size-max {}",
                runtime::limits::human(d.size),
                runtime::limits::human(m)
            ));
        }
        let mut string = |flag: &str, want: &Option<String>, have: &Option<String>| {
            if let Some(g) = want {
                match have {
                    Some(h) if glob(g, h) => {}
                    Some(h) => why.push(format!("{flag} {g:?} does not match {h:?}")),
                    None => why.push(format!("{flag} {g:?}: the disk has none")),
                }
            }
        };
        string("--disk-model", &self.model, &d.model);
        string("--disk-serial", &self.serial, &d.serial);
        string("--disk-wwn", &self.wwn, &d.wwn);
        if let Some(t) = self.transport
            && t != d.transport
        {
            why.push(format!(
                "transport {} is not --disk-transport {}",
                d.transport.name(),
                t.name()
            ));
        }
        if let Some(r) = self.rotational
            && r != d.rotational
        {
            why.push(format!(
                "rotational {} is not --disk-rotational {}",
                yes_no(d.rotational),
                yes_no(r)
            ));
        }
        if let Some(r) = self.removable
            && r != d.removable
        {
            why.push(format!(
                "removable {} is not --disk-removable {}",
                yes_no(d.removable),
                yes_no(r)
            ));
        }
        why
    }
}

/// The outcome of a selection: every candidate with why it did not match (empty: it did).
#[derive(Debug, Clone)]
pub struct Choice {
    pub candidates: Vec<(Disk, Vec<String>)>,
}

impl Choice {
    pub fn matched(&self) -> Vec<&Disk> {
        self.candidates
            .iter()
            .filter(|(_, w)| w.is_empty())
            .map(|(d, _)| d)
            .collect()
    }

    /// The one disk that matched; an error listing every candidate otherwise.
    pub fn one(&self) -> Result<&Disk> {
        let m = self.matched();
        match m.len() {
            1 => Ok(m[0]),
            0 if self.candidates.is_empty() => {
                bail!("no disk matches the selector: no disks found")
            }
            0 => bail!("no disk matches the selector; the disks:\n{self}"),
            n => bail!(
                "{n} disks match the selector ({}), exactly one must: add properties (--disk-serial, --disk-wwn, --disk-model, ...) until one is left; the disks:\n{self}",
                m.iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (d, why) in &self.candidates {
            if why.is_empty() {
                writeln!(f, "  {d}\n    matches")?;
            } else {
                writeln!(f, "  {d}\n    no match: {}", why.join("; "))?;
            }
        }
        Ok(())
    }
}

/// Matches every disk under `sys` against `sel`.
pub fn choose(sys: &Path, sel: &Selector) -> Result<Choice> {
    let candidates = disks(sys)?
        .into_iter()
        .map(|d| {
            let why = sel.mismatches(&d);
            (d, why)
        })
        .collect();
    Ok(Choice { candidates })
}

/// The stable path of disk `name`: a `/dev/disk/by-id/` link to it when udev made one (the
/// first in name order, WWN links first), else `/dev/NAME`.
pub fn stable_path(name: &str) -> PathBuf {
    stable_path_in(Path::new("/dev/disk/by-id"), name)
}

fn stable_path_in(by_id: &Path, name: &str) -> PathBuf {
    let dev = PathBuf::from("/dev").join(name);
    let Ok(rd) = std::fs::read_dir(by_id) else {
        return dev;
    };
    let mut links: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            std::fs::read_link(p)
                .ok()
                .and_then(|t| t.file_name().map(|n| n == name))
                .unwrap_or(false)
        })
        .collect();
    // wwn- links name the medium itself; then the others in name order.
    links.sort_by_key(|p| {
        let n = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        (!n.starts_with("wwn-"), n)
    });
    links.into_iter().next().unwrap_or(dev)
}

/// Shell-style glob over a whole string: `*`, `?`, `[abc]`, `[a-z]`, `[!x]`; `\` escapes.
pub fn glob(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = s.chars().collect();
    // Iterative matching with one backtrack point for the last `*`: linear in practice,
    // O(len(p) × len(s)) at worst.
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                '[' => {
                    if let Some((ok, next)) = class(&p, pi, s[si])
                        && ok
                    {
                        pi = next;
                        si += 1;
                        continue;
                    }
                }
                '\\' if pi + 1 < p.len() && p[pi + 1] == s[si] => {
                    pi += 2;
                    si += 1;
                    continue;
                }
                '\\' if pi + 1 < p.len() => {}
                c if c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Matches `c` against the class starting at `p[at] == '['`: (matched, index after `]`);
/// None when the class is not closed (then `[` is literal).
fn class(p: &[char], at: usize, c: char) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negate = matches!(p.get(i), Some('!') | Some('^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                hit = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                hit = true;
            }
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (p, s, want) in [
            ("*", "", true),
            ("Samsung*", "Samsung SSD 980", true),
            ("*SSD*", "Samsung SSD 980", true),
            ("*ssd*", "Samsung SSD 980", false),
            ("S?msung", "Samsung", true),
            ("S?msung", "Smsung", false),
            ("[ab]c", "bc", true),
            ("[!ab]c", "bc", false),
            ("[a-c]x", "bx", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("abc", "abcd", false),
            ("*a*b", "xaxb", true),
            ("[", "[", false),
        ] {
            assert_eq!(glob(p, s), want, "{p:?} vs {s:?}");
        }
    }

    #[test]
    fn transports_from_device_paths() {
        for (name, path, want) in [
            ("loop3", "../devices/virtual/block/loop3", Transport::Loop),
            (
                "nvme0n1",
                "../devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1",
                Transport::Nvme,
            ),
            (
                "vda",
                "../devices/pci0000:00/0000:00:02.0/virtio1/block/vda",
                Transport::Virtio,
            ),
            (
                "sda",
                "../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda",
                Transport::Sata,
            ),
            (
                "sdb",
                "../devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block/sdb",
                Transport::Usb,
            ),
            (
                "sdc",
                "../devices/pci0000:00/0000:00:05.0/virtio2/host2/target2:0:0/2:0:0:0/block/sdc",
                Transport::Scsi,
            ),
            (
                "mmcblk0",
                "../devices/platform/mmc0/mmc_host/mmc0/mmc0:0001/block/mmcblk0",
                Transport::Other,
            ),
        ] {
            assert_eq!(transport(name, path), want, "{path}");
        }
    }

    #[test]
    fn vpd_page_80() {
        let mut page = vec![0u8, 0x80, 0, 8];
        page.extend_from_slice(b"  S123  ");
        assert_eq!(vpd_serial(&page).as_deref(), Some("S123"));
        assert_eq!(vpd_serial(&[0, 0x80, 0, 0]), None);
    }

    /// A sysfs tree written by the test: disks with every property, read back and selected.
    #[test]
    fn selection_over_a_written_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("agent-select-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = root.join("devices");
        let block = root.join("block");
        std::fs::create_dir_all(&block).unwrap();
        let disk = |name: &str, devpath: &str, files: &[(&str, &[u8])]| {
            let d = dev.join(devpath).join(name);
            for (f, v) in files {
                let p = d.join(f);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, v).unwrap();
            }
            std::os::unix::fs::symlink(&d, block.join(name)).unwrap();
        };
        disk(
            "nvme0n1",
            "pci0000:00/0000:00:04.0/nvme/nvme0",
            &[
                ("size", b"1953525168\n"),
                ("queue/rotational", b"0\n"),
                ("removable", b"0\n"),
                (
                    "device/model",
                    b"Samsung SSD 980 PRO 1TB                 \n",
                ),
                ("device/serial", b"S5GXNF0R123456  \n"),
                ("wwid", b"eui.002538b111b2c3d4\n"),
            ],
        );
        let mut vpd = vec![0u8, 0x80, 0, 10];
        vpd.extend_from_slice(b"WD-WX12345");
        disk(
            "sda",
            "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block",
            &[
                ("size", b"7814037168\n"),
                ("queue/rotational", b"1\n"),
                ("removable", b"0\n"),
                ("device/model", b"WDC WD40EFRX-68N\n"),
                ("device/vpd_pg80", &vpd),
                ("device/wwid", b"naa.50014ee2b1234567\n"),
            ],
        );
        disk(
            "sdb",
            "pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block",
            &[
                ("size", b"62521344\n"),
                ("queue/rotational", b"0\n"),
                ("removable", b"1\n"),
                ("device/model", b"Ultra Fit\n"),
            ],
        );
        disk("zram0", "virtual/block", &[("size", b"8388608\n")]);
        disk("loop7", "virtual/block", &[("size", b"0\n")]);

        let all = disks(&root).unwrap();
        let names: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["nvme0n1", "sda", "sdb"]);
        assert_eq!(all[0].serial.as_deref(), Some("S5GXNF0R123456"));
        assert_eq!(all[0].model.as_deref(), Some("Samsung SSD 980 PRO 1TB"));
        assert_eq!(all[1].serial.as_deref(), Some("WD-WX12345"));
        assert_eq!(all[1].wwn.as_deref(), Some("naa.50014ee2b1234567"));
        assert_eq!(all[2].transport, Transport::Usb);
        assert!(all[2].removable && !all[2].rotational && all[1].rotational);

        let pick = |s: Selector| -> Result<String> { Ok(choose(&root, &s)?.one()?.name.clone()) };
        let g = 1u64 << 30;
        for (sel, want) in [
            (
                Selector {
                    transport: Some(Transport::Nvme),
                    ..Default::default()
                },
                "nvme0n1",
            ),
            (
                Selector {
                    rotational: Some(true),
                    ..Default::default()
                },
                "sda",
            ),
            (
                Selector {
                    removable: Some(true),
                    ..Default::default()
                },
                "sdb",
            ),
            (
                Selector {
                    model: Some("Samsung*".into()),
                    ..Default::default()
                },
                "nvme0n1",
            ),
            (
                Selector {
                    serial: Some("WD-*".into()),
                    ..Default::default()
                },
                "sda",
            ),
            (
                Selector {
                    wwn: Some("eui.*".into()),
                    ..Default::default()
                },
                "nvme0n1",
            ),
            (
                Selector {
                    size_min: Some(2000 * g),
                    ..Default::default()
                },
                "sda",
            ),
            (
                Selector {
                    size_max: Some(100 * g),
                    ..Default::default()
                },
                "sdb",
            ),
            (
                Selector {
                    size_min: Some(500 * g),
                    size_max: Some(2000 * g),
                    ..Default::default()
                },
                "nvme0n1",
            ),
        ] {
            assert_eq!(pick(sel.clone()).unwrap(), want, "{sel:?}");
        }
        // None: every disk listed with why.
        let e = pick(Selector {
            transport: Some(Transport::Virtio),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("no disk matches"), "{e}");
        for n in [
            "nvme0n1",
            "sda",
            "sdb",
            "transport nvme is not --disk-transport virtio",
        ] {
            assert!(e.contains(n), "{e}");
        }
        // Two: both named.
        let e = pick(Selector {
            rotational: Some(false),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("2 disks match the selector (nvme0n1, sdb)"),
            "{e}"
        );
        // A property the disk lacks.
        let e = pick(Selector {
            serial: Some("*".into()),
            removable: Some(true),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--disk-serial \"*\": the disk has none"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn stable_paths_prefer_wwn_links() {
        let dir = std::env::temp_dir().join(format!("agent-byid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink("../../sda", dir.join("ata-WDC_X")).unwrap();
        std::os::unix::fs::symlink("../../sda", dir.join("wwn-0x5001")).unwrap();
        std::os::unix::fs::symlink("../../sda1", dir.join("wwn-0x5001-part1")).unwrap();
        assert_eq!(stable_path_in(&dir, "sda"), dir.join("wwn-0x5001"));
        assert_eq!(stable_path_in(&dir, "sdb"), PathBuf::from("/dev/sdb"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
