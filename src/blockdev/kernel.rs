//! Talking to the kernel about block devices: sizes, partition nodes (BLKPG add/delete/resize
//! per partition, BLKRRPART as a fallback), waiting for device nodes.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::libc;

use super::gpt::{Geometry, Table};

mod ioctl {
    use nix::libc;
    nix::ioctl_read_bad!(blksszget, 0x1268, libc::c_int);
    nix::ioctl_read!(blkgetsize64, 0x12, 114, u64);
    nix::ioctl_none!(blkrrpart, 0x12, 95);
    nix::ioctl_write_ptr_bad!(blkpg, 0x1269, super::BlkpgArg);
}

#[repr(C)]
pub struct BlkpgArg {
    op: libc::c_int,
    flags: libc::c_int,
    datalen: libc::c_int,
    data: *mut libc::c_void,
}

#[repr(C)]
struct BlkpgPartition {
    start: libc::c_longlong,
    length: libc::c_longlong,
    pno: libc::c_int,
    devname: [libc::c_char; 64],
    volname: [libc::c_char; 64],
}

const BLKPG_ADD: libc::c_int = 1;
const BLKPG_DEL: libc::c_int = 2;
const BLKPG_RESIZE: libc::c_int = 3;

/// Geometry of a block device (logical sector size, size) or of a regular file (512 bytes).
pub fn geometry(dev: &File, path: &Path) -> Result<Geometry> {
    let md = dev
        .metadata()
        .with_context(|| format!("inspecting {}", path.display()))?;
    if md.file_type().is_block_device() {
        let mut ss: libc::c_int = 0;
        let mut bytes: u64 = 0;
        // SAFETY: valid fd and pointers to correctly sized integers.
        unsafe {
            ioctl::blksszget(dev.as_raw_fd(), &mut ss)
                .with_context(|| format!("BLKSSZGET on {}", path.display()))?;
            ioctl::blkgetsize64(dev.as_raw_fd(), &mut bytes)
                .with_context(|| format!("BLKGETSIZE64 on {}", path.display()))?;
        }
        Geometry::new(ss as u64, bytes).with_context(|| format!("disk {}", path.display()))
    } else {
        Geometry::new(512, md.len()).with_context(|| format!("disk {}", path.display()))
    }
}

/// The kernel name of a block device node ("loop3"), via sysfs.
pub fn sys_name(path: &Path) -> Result<String> {
    let md = std::fs::metadata(path).with_context(|| format!("inspecting {}", path.display()))?;
    if !md.file_type().is_block_device() {
        bail!("{} is not a block device", path.display());
    }
    let (maj, min) = (libc::major(md.rdev()), libc::minor(md.rdev()));
    let link = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
    let target =
        std::fs::read_link(&link).with_context(|| format!("reading {}", link.display()))?;
    Ok(target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// Node name of partition `n` of disk `disk` ("loop3" -> "loop3p1", "sda" -> "sda1").
pub fn part_name(disk: &str, n: u32) -> String {
    if disk.ends_with(|c: char| c.is_ascii_digit()) {
        format!("{disk}p{n}")
    } else {
        format!("{disk}{n}")
    }
}

/// Partitions the kernel knows for `disk`: (number, start, size) in bytes.
pub fn kernel_partitions(disk: &str) -> Vec<(u32, u64, u64)> {
    let mut out = Vec::new();
    let dir = PathBuf::from(format!("/sys/block/{disk}"));
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return out;
    };
    for ent in rd.flatten() {
        let p = ent.path();
        let rd = |f: &str| -> Option<u64> {
            std::fs::read_to_string(p.join(f)).ok()?.trim().parse().ok()
        };
        if let (Some(n), Some(s), Some(l)) = (rd("partition"), rd("start"), rd("size")) {
            out.push((n as u32, s * 512, l * 512));
        }
    }
    out.sort();
    out
}

fn blkpg(dev: &File, op: libc::c_int, n: u32, start: u64, len: u64) -> nix::Result<()> {
    let mut part = BlkpgPartition {
        start: start as i64,
        length: len as i64,
        pno: n as libc::c_int,
        devname: [0; 64],
        volname: [0; 64],
    };
    let arg = BlkpgArg {
        op,
        flags: 0,
        datalen: std::mem::size_of::<BlkpgPartition>() as libc::c_int,
        data: &mut part as *mut BlkpgPartition as *mut libc::c_void,
    };
    // SAFETY: arg points to a live, correctly laid out blkpg_partition for the call's duration.
    unsafe { ioctl::blkpg(dev.as_raw_fd(), &arg) }.map(|_| ())
}

/// Brings the kernel's partition nodes of `disk` in line with `table`: delete what is gone or
/// moved, resize what changed size, add what is new. Falls back to BLKRRPART if BLKPG fails.
/// Returns the node paths expected to exist afterwards.
pub fn sync_partitions(
    dev: &File,
    disk: &str,
    g: &Geometry,
    table: &Table,
) -> Result<Vec<PathBuf>> {
    let ss = g.sector_size;
    let have = kernel_partitions(disk);
    let want: Vec<(u32, u64, u64)> = table
        .entries
        .iter()
        .map(|e| (e.number, e.start * ss, e.size() * ss))
        .collect();
    let mut res: Result<()> = Ok(());
    for &(n, s, l) in &have {
        match want.iter().find(|w| w.0 == n) {
            Some(&(_, ws, wl)) if ws == s => {
                if wl != l {
                    log::info!(
                        "resizing kernel partition {} to {wl} bytes",
                        part_name(disk, n)
                    );
                    res = res.and(
                        blkpg(dev, BLKPG_RESIZE, n, ws, wl)
                            .with_context(|| format!("BLKPG resize of {}", part_name(disk, n))),
                    );
                }
            }
            _ => {
                log::info!("removing kernel partition {}", part_name(disk, n));
                res = res.and(
                    blkpg(dev, BLKPG_DEL, n, 0, 0)
                        .with_context(|| format!("BLKPG delete of {}", part_name(disk, n))),
                );
            }
        }
    }
    for &(n, s, l) in &want {
        if !have.iter().any(|h| h.0 == n && h.1 == s) {
            log::info!("adding kernel partition {}", part_name(disk, n));
            res = res.and(
                blkpg(dev, BLKPG_ADD, n, s, l)
                    .with_context(|| format!("BLKPG add of {}", part_name(disk, n))),
            );
        }
    }
    if let Err(e) = res {
        log::warn!("{e:#}; asking the kernel to re-read the whole table (BLKRRPART)");
        // SAFETY: plain ioctl without arguments on a valid fd.
        unsafe { ioctl::blkrrpart(dev.as_raw_fd()) }
            .with_context(|| format!("BLKRRPART on {disk} (after: {e:#})"))?;
    }
    Ok(want
        .iter()
        .map(|w| PathBuf::from("/dev").join(part_name(disk, w.0)))
        .collect())
}

/// Removes every partition node the kernel has for `disk` (before detaching a loop device:
/// nodes added with BLKPG outlive the loop device's backing file).
pub fn remove_partitions(dev: &File, disk: &str) -> Result<()> {
    for (n, _, _) in kernel_partitions(disk) {
        blkpg(dev, BLKPG_DEL, n, 0, 0)
            .with_context(|| format!("BLKPG delete of {}", part_name(disk, n)))?;
    }
    Ok(())
}

/// Waits until every path exists (following symlinks), polling; names the missing ones on timeout.
pub fn wait_for(paths: &[PathBuf], timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let missing: Vec<&PathBuf> = paths.iter().filter(|p| !p.exists()).collect();
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let names: Vec<String> = missing.iter().map(|p| p.display().to_string()).collect();
            bail!(
                "device nodes never appeared within {:?}: {}",
                timeout,
                names.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `udevadm settle` only when a udev daemon is running (its control socket exists).
pub fn udev_settle() {
    if Path::new("/run/udev/control").exists()
        && crate::util::have_program("udevadm")
        && let Err(e) = crate::util::run("udevadm", &["settle", "--timeout=10"])
    {
        log::warn!("{e:#}");
    }
}

/// Loads a kernel module (best effort) unless it is loaded or built in: an initramfs may not
/// load md/dm-crypt on demand. A failure is only logged; the tool that needs it reports it.
pub fn load_module(name: &str) {
    if Path::new("/sys/module").join(name).exists() || !crate::util::have_program("modprobe") {
        return;
    }
    if let Err(e) = crate::util::run("modprobe", &["-q", name]) {
        log::warn!("{e:#}");
    }
}
