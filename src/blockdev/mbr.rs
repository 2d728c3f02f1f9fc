//! The DOS (MBR) partition table, read as the kernel's msdos parser (block/partitions/msdos.c)
//! numbers and sizes it, so that an image with such a table can be announced with BLKPG on a
//! kernel (or a loop device) that parses no partition tables: primary entries are 1-4, an
//! extended partition gets a node of one logical sector (at least 1 KiB, as the kernel leaves
//! room for a boot loader but none for a filesystem), and the logical partitions of its chain
//! of extended boot records are 5 on.

use std::fs::File;
use std::os::unix::fs::FileExt;

use anyhow::{Context, Result};

/// At most this many extended boot records are followed without finding a logical partition
/// (the kernel's limit on a chain that loops).
const CHAIN_LIMIT: u32 = 100;
/// Partition numbers the kernel gives at most (DISK_MAX_PARTS).
const MAX_PARTITIONS: u32 = 256;

/// One entry of a table: its number as the kernel gives it, start and length in bytes.
pub type Partition = (u32, u64, u64);

#[derive(Clone, Copy)]
struct Entry {
    kind: u8,
    start: u64,
    sectors: u64,
}

fn entries(sector: &[u8]) -> [Entry; 4] {
    std::array::from_fn(|i| {
        let e = &sector[446 + 16 * i..446 + 16 * (i + 1)];
        Entry {
            kind: e[4],
            start: u64::from(u32::from_le_bytes([e[8], e[9], e[10], e[11]])),
            sectors: u64::from(u32::from_le_bytes([e[12], e[13], e[14], e[15]])),
        }
    })
}

fn is_extended(kind: u8) -> bool {
    matches!(kind, 0x05 | 0x0f | 0x85)
}

fn has_magic(sector: &[u8]) -> bool {
    sector.len() >= 512 && sector[510] == 0x55 && sector[511] == 0xAA
}

/// The partitions of the DOS table at the start of `dev`, whose logical sector is
/// `sector_size` bytes. Reads only sectors inside `disk_bytes`.
pub fn read(dev: &File, sector_size: u64, disk_bytes: u64) -> Result<Vec<Partition>> {
    let at = |lba: u64| -> Result<Option<Vec<u8>>> {
        let off = lba * sector_size;
        if off + 512 > disk_bytes {
            return Ok(None);
        }
        let mut b = vec![0u8; 512];
        dev.read_exact_at(&mut b, off)
            .with_context(|| format!("reading the DOS partition table at byte {off}"))?;
        Ok(Some(b))
    };
    let Some(mbr) = at(0)? else {
        return Ok(Vec::new());
    };
    if !has_magic(&mbr) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (i, e) in entries(&mbr).into_iter().enumerate() {
        if e.sectors == 0 {
            continue;
        }
        let n = i as u32 + 1;
        if is_extended(e.kind) {
            let node = e
                .sectors
                .min((sector_size / 512).max(2) * 512 / sector_size);
            out.push((n, e.start * sector_size, node.max(1) * sector_size));
            logical(&at, e.start, e.sectors, sector_size, &mut out)?;
        } else {
            out.push((n, e.start * sector_size, e.sectors * sector_size));
        }
    }
    out.sort();
    Ok(out)
}

/// The logical partitions of the extended partition at `first` (`size` sectors), numbered
/// from 5 after those already in `out`, as the kernel's `parse_extended` finds them.
fn logical(
    at: &dyn Fn(u64) -> Result<Option<Vec<u8>>>,
    first: u64,
    size: u64,
    sector_size: u64,
    out: &mut Vec<Partition>,
) -> Result<()> {
    let mut next_number = out.iter().map(|p| p.0 + 1).max().unwrap_or(5).max(5);
    let (mut this, mut this_size) = (first, size);
    let mut loops = 0;
    loop {
        loops += 1;
        if loops > CHAIN_LIMIT || next_number > MAX_PARTITIONS {
            return Ok(());
        }
        let Some(ebr) = at(this)? else {
            return Ok(());
        };
        if !has_magic(&ebr) {
            return Ok(());
        }
        let es = entries(&ebr);
        for (i, e) in es.iter().enumerate() {
            if e.sectors == 0 || is_extended(e.kind) {
                continue;
            }
            let start = this + e.start;
            // The 3rd and 4th entries sometimes hold garbage: kept only inside the chain.
            if i >= 2
                && (e.start + e.sectors > this_size
                    || start < first
                    || start + e.sectors > first + size)
            {
                continue;
            }
            out.push((next_number, start * sector_size, e.sectors * sector_size));
            loops = 0;
            next_number += 1;
            if next_number > MAX_PARTITIONS {
                return Ok(());
            }
        }
        let Some(link) = es.iter().find(|e| e.sectors != 0 && is_extended(e.kind)) else {
            return Ok(());
        };
        this = first + link.start;
        this_size = link.sectors;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(sector: &mut [u8], slot: usize, kind: u8, start: u32, sectors: u32) {
        let e = &mut sector[446 + 16 * slot..446 + 16 * (slot + 1)];
        e[4] = kind;
        e[8..12].copy_from_slice(&start.to_le_bytes());
        e[12..16].copy_from_slice(&sectors.to_le_bytes());
        sector[510] = 0x55;
        sector[511] = 0xAA;
    }

    fn image(parts: &[(u64, usize, u8, u32, u32)], sectors: u64) -> File {
        let mut f = tempfile();
        let mut disk = vec![0u8; (sectors * 512) as usize];
        for &(lba, slot, kind, start, n) in parts {
            let o = (lba * 512) as usize;
            put(&mut disk[o..o + 512], slot, kind, start, n);
        }
        std::io::Write::write_all(&mut f, &disk).unwrap();
        f
    }

    fn tempfile() -> File {
        let p = std::env::temp_dir().join(format!(
            "agent-mbr-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }

    #[test]
    fn primary_extended_and_logical_as_the_kernel_numbers_them() {
        // 1: 2048+4096 (Linux); 2: extended 8192+8192; in it an EBR at 8192 with a logical at
        // +2048 (1024 sectors) and a link to the next EBR at +4096, holding one at +2048.
        let f = image(
            &[
                (0, 0, 0x83, 2048, 4096),
                (0, 1, 0x05, 8192, 8192),
                (8192, 0, 0x83, 2048, 1024),
                (8192, 1, 0x05, 4096, 4096),
                (12288, 0, 0x83, 2048, 1024),
            ],
            16384,
        );
        let got = read(&f, 512, 16384 * 512).unwrap();
        assert_eq!(
            got,
            vec![
                (1, 2048 * 512, 4096 * 512),
                (2, 8192 * 512, 1024),
                (5, (8192 + 2048) * 512, 1024 * 512),
                (6, (12288 + 2048) * 512, 1024 * 512),
            ]
        );
    }

    #[test]
    fn no_magic_no_partitions_and_a_looping_chain_ends() {
        let f = image(&[], 64);
        assert!(read(&f, 512, 64 * 512).unwrap().is_empty());
        // An EBR whose link points at itself: the chain stops at the limit, one logical found.
        let f = image(
            &[(0, 0, 0x05, 8, 56), (8, 0, 0x83, 2, 4), (8, 1, 0x05, 0, 56)],
            64,
        );
        let got = read(&f, 512, 64 * 512).unwrap();
        assert_eq!(got[0], (1, 8 * 512, 1024));
        assert!(got.len() <= MAX_PARTITIONS as usize);
        assert!(got[1..].iter().all(|p| p.1 == 10 * 512 && p.2 == 4 * 512));
    }

    #[test]
    fn entries_past_the_disk_are_not_read() {
        let f = image(&[(0, 0, 0x05, 1000, 10)], 64);
        assert_eq!(
            read(&f, 512, 64 * 512).unwrap(),
            vec![(1, 1000 * 512, 1024)]
        );
    }
}
