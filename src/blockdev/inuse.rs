//! In-use guards: a disk or partition that is mounted, an active swap, or held by another device
//! (device-mapper, md) must not be modified.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Result, bail};

/// Device numbers `(major, minor)` of mounted block devices, from /proc/self/mountinfo (field 3,
/// and the mount source resolved, since btrfs reports an anonymous device number).
fn mounted_devs() -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return out;
    };
    for line in mi.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let mountpoint = f.get(4).copied().unwrap_or("?").to_string();
        if let Some(mm) = f.get(2)
            && let Some((a, b)) = mm.split_once(':')
            && let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>())
        {
            out.push((libc_makedev(a, b), mountpoint.clone()));
        }
        if let Some(dash) = f.iter().position(|x| *x == "-")
            && let Some(src) = f.get(dash + 2)
            && src.starts_with('/')
            && let Ok(md) = std::fs::metadata(src)
        {
            out.push((md.rdev(), mountpoint));
        }
    }
    out
}

fn libc_makedev(a: u32, b: u32) -> u64 {
    nix::libc::makedev(a, b)
}

fn swaps() -> Vec<u64> {
    let Ok(s) = std::fs::read_to_string("/proc/swaps") else {
        return Vec::new();
    };
    s.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|p| std::fs::metadata(p.replace("\\040", " ")).ok())
        .filter(|m| m.rdev() != 0)
        .map(|m| m.rdev())
        .collect()
}

/// Why the block device `name` (a kernel name such as "loop3p1") is in use, if it is.
pub fn in_use(name: &str) -> Option<String> {
    let Ok(dev) = std::fs::read_to_string(format!("/sys/class/block/{name}/dev")) else {
        return None;
    };
    let (a, b) = dev.trim().split_once(':')?;
    let rdev = libc_makedev(a.parse().ok()?, b.parse().ok()?);
    if let Some((_, mp)) = mounted_devs().into_iter().find(|(d, _)| *d == rdev) {
        return Some(format!("/dev/{name} is mounted on {mp}"));
    }
    if swaps().contains(&rdev) {
        return Some(format!("/dev/{name} is an active swap device"));
    }
    let holders = Path::new("/sys/class/block").join(name).join("holders");
    if let Ok(rd) = std::fs::read_dir(&holders) {
        let hs: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if !hs.is_empty() {
            return Some(format!("/dev/{name} is held by {}", hs.join(", ")));
        }
    }
    None
}

/// Fails if `name` is in use.
pub fn ensure_free(name: &str, doing: &str) -> Result<()> {
    if let Some(why) = in_use(name) {
        bail!("refusing to {doing}: {why}");
    }
    Ok(())
}
