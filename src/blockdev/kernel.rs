//! Talking to the kernel about block devices: sizes, partition nodes (BLKPG delete, resize
//! and add per partition, in that order; BLKRRPART only as a fallback on a disk with no
//! partition in use), waiting for device nodes.

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
    nix::ioctl_write_ptr_bad!(blkzeroout, nix::request_code_none!(0x12, 127), [u64; 2]);
}

/// Has the device make `[start, start + len)` read as zeros (BLKZEROOUT: a Write Zeroes
/// command on a disk that has one, a zeroed range of a loop device's file; the kernel writes
/// zeros itself on a device with neither). Both must be multiples of the logical block size.
/// `ENOTTY`, `EOPNOTSUPP` or `EINVAL`: the file cannot do it (the caller writes the zeros).
pub fn zero_out(dev: &File, start: u64, len: u64) -> nix::Result<()> {
    let range = [start, len];
    // SAFETY: valid fd and a pointer to two u64s, as the ioctl reads them.
    unsafe { ioctl::blkzeroout(dev.as_raw_fd(), &range) }.map(|_| ())
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

/// What the kernel must be told to go from the partitions it has to the ones wanted, each
/// `(number, start, size)` in bytes, in the order it must be told: every deletion first (gone,
/// or moved to another start), then every resize (same start, other size: a partition grows
/// into space that a deletion freed, which the kernel refuses with EBUSY while the deleted
/// partition is still there), then every addition. A partition that stays as it is is not
/// touched: its node, and whoever has it open or mounted, keep it throughout.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Updates {
    pub delete: Vec<u32>,
    pub resize: Vec<(u32, u64, u64)>,
    pub add: Vec<(u32, u64, u64)>,
}

impl Updates {
    pub fn between(have: &[(u32, u64, u64)], want: &[(u32, u64, u64)]) -> Updates {
        let mut u = Updates::default();
        for &(n, s, l) in have {
            match want.iter().find(|w| w.0 == n) {
                Some(&(_, ws, wl)) if ws == s => {
                    if wl != l {
                        u.resize.push((n, ws, wl));
                    }
                }
                _ => u.delete.push(n),
            }
        }
        for &(n, s, l) in want {
            if !have.iter().any(|h| h.0 == n && h.1 == s) {
                u.add.push((n, s, l));
            }
        }
        u.delete.sort_unstable();
        u.resize.sort_unstable();
        u.add.sort_unstable();
        u
    }

    pub fn is_empty(&self) -> bool {
        self.delete.is_empty() && self.resize.is_empty() && self.add.is_empty()
    }

    /// Tells the kernel, in order; stops at the first refusal.
    fn apply(&self, dev: &File, disk: &str) -> Result<()> {
        for &n in &self.delete {
            log::info!("removing kernel partition {}", part_name(disk, n));
            blkpg_checked(dev, BLKPG_DEL, n, 0, 0)
                .with_context(|| format!("BLKPG delete of {}", part_name(disk, n)))?;
        }
        for &(n, s, l) in &self.resize {
            log::info!(
                "resizing kernel partition {} to {l} bytes",
                part_name(disk, n)
            );
            blkpg_checked(dev, BLKPG_RESIZE, n, s, l)
                .with_context(|| format!("BLKPG resize of {}", part_name(disk, n)))?;
        }
        for &(n, s, l) in &self.add {
            log::info!(
                "adding kernel partition {} ({l} bytes at {s})",
                part_name(disk, n)
            );
            blkpg_checked(dev, BLKPG_ADD, n, s, l)
                .with_context(|| format!("BLKPG add of {}", part_name(disk, n)))?;
        }
        Ok(())
    }
}

/// [`blkpg`], failing once per process at the test failpoint `blkpg` (test builds only; as a
/// busy partition would).
fn blkpg_checked(dev: &File, op: libc::c_int, n: u32, start: u64, len: u64) -> Result<()> {
    super::failpoint::hit_once("blkpg")?;
    Ok(blkpg(dev, op, n, start, len)?)
}

/// Why no partition table of `disk` may be re-read as a whole: a partition of it that is
/// mounted, an active swap or held by another device.
fn partition_in_use(disk: &str) -> Option<String> {
    kernel_partitions(disk)
        .into_iter()
        .find_map(|(n, _, _)| super::inuse::in_use(&part_name(disk, n)))
}

/// Brings the kernel's partition nodes of `disk` in line with `table` with BLKPG, one
/// partition at a time ([`Updates`]: delete, then resize, then add). Partitions that stay
/// keep their nodes. If the kernel refuses an update, and no partition of the disk is in use,
/// the whole table is re-read (BLKRRPART) and whatever the kernel then lacks is added with
/// BLKPG (a kernel that parses no partition tables loses every node on a re-read); with a
/// partition in use it is an error, as a re-read would take that partition's node away or be
/// refused. Returns the node paths expected to exist afterwards.
pub fn sync_partitions(
    dev: &File,
    disk: &str,
    g: &Geometry,
    table: &Table,
) -> Result<Vec<PathBuf>> {
    let ss = g.sector_size;
    let want: Vec<(u32, u64, u64)> = table
        .entries
        .iter()
        .map(|e| (e.number, e.start * ss, e.size() * ss))
        .collect();
    sync_partition_list(dev, disk, &want)
}

/// [`sync_partitions`] for partitions given as `(number, start, size)` in bytes (a DOS
/// table's, [`super::mbr::read`]).
pub fn sync_partition_list(
    dev: &File,
    disk: &str,
    want: &[(u32, u64, u64)],
) -> Result<Vec<PathBuf>> {
    let nodes = want
        .iter()
        .map(|w| PathBuf::from("/dev").join(part_name(disk, w.0)))
        .collect();
    let updates = Updates::between(&kernel_partitions(disk), want);
    let Err(e) = updates.apply(dev, disk) else {
        return Ok(nodes);
    };
    if let Some(why) = partition_in_use(disk) {
        bail!("{e:#}; not re-reading the whole partition table of /dev/{disk} (BLKRRPART): {why}");
    }
    log::warn!("{e:#}; re-reading the whole partition table of /dev/{disk} (BLKRRPART)");
    // SAFETY: plain ioctl without arguments on a valid fd.
    unsafe { ioctl::blkrrpart(dev.as_raw_fd()) }
        .with_context(|| format!("BLKRRPART on /dev/{disk} (after: {e:#})"))?;
    let rest = Updates::between(&kernel_partitions(disk), want);
    if !rest.is_empty() {
        log::info!("completing the kernel's partitions of /dev/{disk} after the re-read");
    }
    rest.apply(dev, disk).with_context(|| {
        format!("after re-reading the partition table of /dev/{disk} (first: {e:#})")
    })?;
    Ok(nodes)
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
        && runtime::util::have_program("udevadm")
        && let Err(e) = runtime::util::run("udevadm", &["settle", "--timeout=10"])
    {
        log::warn!("{e:#}");
    }
}

/// Loads a kernel module (best effort) unless it is loaded or built in: an initramfs may not
/// load md/dm-crypt on demand. A failure is only logged; the tool that needs it reports it.
pub fn load_module(name: &str) {
    if Path::new("/sys/module").join(name).exists() || !runtime::util::have_program("modprobe") {
        return;
    }
    if let Err(e) = runtime::util::run("modprobe", &["-q", name]) {
        log::warn!("{e:#}");
    }
}

#[cfg(test)]
mod tests {
    use super::Updates;

    #[test]
    fn updates_delete_then_resize_then_add() {
        const M: u64 = 1 << 20;
        // (have, want, deletions, resizes, additions); (number, start, size).
        type Parts = Vec<(u32, u64, u64)>;
        type Case = (&'static str, Parts, Parts, Vec<u32>, Parts, Parts);
        let cases: Vec<Case> = vec![
            (
                "unchanged",
                vec![(1, M, M)],
                vec![(1, M, M)],
                vec![],
                vec![],
                vec![],
            ),
            (
                // Ignition's partitions.complex: 3 grows into where 4 was.
                "complex",
                vec![
                    (1, M, 64 * M),
                    (2, 65 * M, M),
                    (3, 97 * M, M),
                    (4, 193 * M, M),
                ],
                vec![(1, M, 32 * M), (2, 65 * M, M), (3, 97 * M, 128 * M)],
                vec![4],
                vec![(1, M, 32 * M), (3, 97 * M, 128 * M)],
                vec![],
            ),
            (
                "moved",
                vec![(1, M, M), (2, 2 * M, M)],
                vec![(1, M, 2 * M), (2, 9 * M, M)],
                vec![2],
                vec![(1, M, 2 * M)],
                vec![(2, 9 * M, M)],
            ),
            (
                "from nothing",
                vec![],
                vec![(2, 2 * M, M), (1, M, M)],
                vec![],
                vec![],
                vec![(1, M, M), (2, 2 * M, M)],
            ),
            (
                "to nothing",
                vec![(3, M, M), (1, 2 * M, M)],
                vec![],
                vec![1, 3],
                vec![],
                vec![],
            ),
        ];
        for (name, have, want, del, resize, add) in cases {
            let u = Updates::between(&have, &want);
            assert_eq!(
                u,
                Updates {
                    delete: del,
                    resize,
                    add
                },
                "{name}"
            );
            assert_eq!(u.is_empty(), name == "unchanged", "{name}");
        }
    }
}
