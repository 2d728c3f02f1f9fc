//! GPT on-disk format: reading (primary header, falling back to the backup) and writing a whole
//! table at once (protective MBR, primary header and entries, backup entries and header).
//!
//! Our own codec rather than the `gpt` crate: gpt 4.1 compacts the entry array on write (deleting
//! partition 2 of 1,2,3 silently renumbers 3 to 2) and asserts on an unusual entry size (a panic on
//! a corrupt disk), both unacceptable for a provisioning agent.

use std::fs::File;
use std::os::unix::fs::FileExt;

use anyhow::{Context, Result, bail};
use uuid::Uuid;

/// Linux filesystem data, the default partition type.
pub const LINUX_FS_TYPE: Uuid = uuid::uuid!("0FC63DAF-8483-4772-8E79-3D69D8477DE4");
const ENTRY_SIZE: u64 = 128;
const DEFAULT_ENTRIES: u32 = 128;
const MIB: u64 = 1024 * 1024;

/// Size of a disk in logical sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub sector_size: u64,
    pub sectors: u64,
}

impl Geometry {
    pub fn new(sector_size: u64, bytes: u64) -> Result<Self> {
        if sector_size != 512 && sector_size != 4096 {
            bail!("unsupported logical sector size {sector_size}");
        }
        let g = Geometry {
            sector_size,
            sectors: bytes / sector_size,
        };
        // Both table copies, the protective MBR and one usable sector (Ignition's own test
        // disks can be this small: ~1 MiB with nothing to create on them).
        if g.sectors < 2 * g.entry_sectors(DEFAULT_ENTRIES) + 4 {
            bail!("disk of {bytes} bytes is too small for a GPT");
        }
        Ok(g)
    }
    /// Sectors per MiB, also the alignment of new partitions (like sgdisk: 1 MiB).
    pub fn align(&self) -> u64 {
        MIB / self.sector_size
    }
    pub fn mib(&self, mib: u64) -> Option<u64> {
        mib.checked_mul(self.align())
    }
    fn entry_sectors(&self, entries: u32) -> u64 {
        (entries as u64 * ENTRY_SIZE).div_ceil(self.sector_size)
    }
    pub fn first_usable(&self) -> u64 {
        2 + self.entry_sectors(DEFAULT_ENTRIES)
    }
    pub fn last_usable(&self) -> u64 {
        self.sectors - 2 - self.entry_sectors(DEFAULT_ENTRIES)
    }
}

/// One used partition entry. `end` is inclusive, like in the on-disk format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub number: u32,
    pub start: u64,
    pub end: u64,
    pub type_guid: Uuid,
    pub guid: Uuid,
    pub name: String,
    pub attrs: u64,
}

impl Entry {
    pub fn size(&self) -> u64 {
        self.end + 1 - self.start
    }
}

/// A partition table: used entries sorted by number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub disk_guid: Uuid,
    pub entries: Vec<Entry>,
}

impl Table {
    pub fn get(&self, number: u32) -> Option<&Entry> {
        self.entries.iter().find(|e| e.number == number)
    }
}

/// What was found on a disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnDisk {
    /// No GPT signature in either header, no MBR partitions.
    None,
    /// An MBR (DOS) partition table and no GPT.
    Mbr,
    Gpt(Table),
}

/// CRC-32 (IEEE, reflected), as GPT uses.
pub fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !0u32;
    for &b in data {
        c = TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

fn le64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]))
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]))
}
fn guid_at(b: &[u8], o: usize) -> Uuid {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[o..o + 16]);
    Uuid::from_bytes_le(a)
}

fn read_at(dev: &File, what: &str, off: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    dev.read_exact_at(&mut buf, off)
        .with_context(|| format!("reading {what} at byte {off}"))?;
    Ok(buf)
}

/// Parses one header and its entry array; `Ok(None)` when there is no GPT signature.
fn read_one(dev: &File, g: &Geometry, lba: u64) -> Result<Option<Table>> {
    let ss = g.sector_size;
    let h = read_at(dev, "GPT header", lba * ss, ss as usize)?;
    if &h[0..8] != b"EFI PART" {
        return Ok(None);
    }
    let hsize = le32(&h, 12) as usize;
    if !(92..=ss as usize).contains(&hsize) {
        bail!("GPT header at LBA {lba} has an invalid size {hsize}");
    }
    let mut hc = h[..hsize].to_vec();
    hc[16..20].fill(0);
    if crc32(&hc) != le32(&h, 16) {
        bail!("GPT header at LBA {lba} has a bad checksum");
    }
    if le64(&h, 24) != lba {
        bail!(
            "GPT header at LBA {lba} claims to be at LBA {}",
            le64(&h, 24)
        );
    }
    let entries_lba = le64(&h, 72);
    let n = le32(&h, 80);
    let esize = le32(&h, 84) as u64;
    if esize != ENTRY_SIZE || n == 0 || n > 4096 {
        bail!("GPT header at LBA {lba}: unsupported entry array ({n} entries of {esize} bytes)");
    }
    if entries_lba >= g.sectors {
        bail!("GPT header at LBA {lba}: entry array outside the disk");
    }
    let arr = read_at(
        dev,
        "GPT entries",
        entries_lba * ss,
        (n as u64 * esize) as usize,
    )?;
    if crc32(&arr) != le32(&h, 88) {
        bail!("GPT entry array of header at LBA {lba} has a bad checksum");
    }
    let mut entries = Vec::new();
    for i in 0..n as usize {
        let e = &arr[i * 128..(i + 1) * 128];
        let type_guid = guid_at(e, 0);
        if type_guid.is_nil() {
            continue;
        }
        let units: Vec<u16> = (0..36)
            .map(|k| u16::from_le_bytes([e[56 + 2 * k], e[57 + 2 * k]]))
            .take_while(|&u| u != 0)
            .collect();
        let entry = Entry {
            number: i as u32 + 1,
            type_guid,
            guid: guid_at(e, 16),
            start: le64(e, 32),
            end: le64(e, 40),
            attrs: le64(e, 48),
            name: String::from_utf16_lossy(&units),
        };
        if entry.end < entry.start || entry.end >= g.sectors {
            bail!(
                "GPT entry {} has an invalid extent {}..{}",
                entry.number,
                entry.start,
                entry.end
            );
        }
        entries.push(entry);
    }
    Ok(Some(Table {
        disk_guid: guid_at(&h, 56),
        entries,
    }))
}

/// Reads the GPT of `dev`: the primary header, else the backup; an error if a signature is there
/// but neither copy is valid (a corrupt table: only `wipeTable` gets past that).
pub fn read(dev: &File, g: &Geometry) -> Result<OnDisk> {
    let primary = match read_one(dev, g, 1) {
        Ok(Some(t)) => return Ok(OnDisk::Gpt(t)),
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    let backup = read_one(dev, g, g.sectors - 1);
    match (primary, backup) {
        (_, Ok(Some(t))) => {
            log::warn!("primary GPT header is missing or invalid; using the backup");
            Ok(OnDisk::Gpt(t))
        }
        (Ok(()), Ok(None)) => {
            let m = read_at(dev, "MBR", 0, 512)?;
            let has_dos = m[510] == 0x55
                && m[511] == 0xAA
                && (0..4).any(|i| !matches!(m[446 + 16 * i + 4], 0 | 0xEE));
            Ok(if has_dos { OnDisk::Mbr } else { OnDisk::None })
        }
        (Err(e), _) | (_, Err(e)) => Err(e.context("the partition table is corrupt")),
    }
}

/// Serialises the entry array (128 entries).
fn entry_array(t: &Table) -> Result<Vec<u8>> {
    let mut arr = vec![0u8; DEFAULT_ENTRIES as usize * ENTRY_SIZE as usize];
    for e in &t.entries {
        if e.number == 0 || e.number > DEFAULT_ENTRIES {
            bail!("partition number {} is outside 1..=128", e.number);
        }
        let o = (e.number as usize - 1) * 128;
        let b = &mut arr[o..o + 128];
        b[0..16].copy_from_slice(&e.type_guid.to_bytes_le());
        b[16..32].copy_from_slice(&e.guid.to_bytes_le());
        b[32..40].copy_from_slice(&e.start.to_le_bytes());
        b[40..48].copy_from_slice(&e.end.to_le_bytes());
        b[48..56].copy_from_slice(&e.attrs.to_le_bytes());
        let units: Vec<u16> = e.name.encode_utf16().collect();
        if units.len() > 36 {
            bail!(
                "partition {} label {:?} is longer than 36 UTF-16 units",
                e.number,
                e.name
            );
        }
        for (k, u) in units.iter().enumerate() {
            b[56 + 2 * k..58 + 2 * k].copy_from_slice(&u.to_le_bytes());
        }
    }
    Ok(arr)
}

fn header(g: &Geometry, t: &Table, primary: bool, arr_crc: u32) -> Vec<u8> {
    let mut h = vec![0u8; g.sector_size as usize];
    let last = g.sectors - 1;
    let (my, alt, entries) = if primary {
        (1u64, last, 2u64)
    } else {
        (last, 1, last - g.entry_sectors(DEFAULT_ENTRIES))
    };
    h[0..8].copy_from_slice(b"EFI PART");
    h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
    h[12..16].copy_from_slice(&92u32.to_le_bytes());
    h[24..32].copy_from_slice(&my.to_le_bytes());
    h[32..40].copy_from_slice(&alt.to_le_bytes());
    h[40..48].copy_from_slice(&g.first_usable().to_le_bytes());
    h[48..56].copy_from_slice(&g.last_usable().to_le_bytes());
    h[56..72].copy_from_slice(&t.disk_guid.to_bytes_le());
    h[72..80].copy_from_slice(&entries.to_le_bytes());
    h[80..84].copy_from_slice(&DEFAULT_ENTRIES.to_le_bytes());
    h[84..88].copy_from_slice(&(ENTRY_SIZE as u32).to_le_bytes());
    h[88..92].copy_from_slice(&arr_crc.to_le_bytes());
    let crc = crc32(&h[..92]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

fn protective_mbr(g: &Geometry, old: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; 512];
    // Keep boot code and disk signature, replace the partition records.
    m[..446].copy_from_slice(&old[..446]);
    let rec = &mut m[446..462];
    rec[1..4].copy_from_slice(&[0x00, 0x02, 0x00]);
    rec[4] = 0xEE;
    rec[5..8].copy_from_slice(&[0xFF, 0xFF, 0xFF]);
    rec[8..12].copy_from_slice(&1u32.to_le_bytes());
    let size = (g.sectors - 1).min(u32::MAX as u64) as u32;
    rec[12..16].copy_from_slice(&size.to_le_bytes());
    m[510] = 0x55;
    m[511] = 0xAA;
    m
}

/// The byte ranges a table write touches: saved before a write so it can be undone.
#[derive(Debug, Clone)]
pub struct Snapshot {
    head: Vec<u8>,
    tail: Vec<u8>,
    tail_off: u64,
}

fn ranges(g: &Geometry) -> (u64, u64, u64) {
    let head_len = g.first_usable() * g.sector_size;
    let tail_off = (g.last_usable() + 1) * g.sector_size;
    (head_len, tail_off, g.sectors * g.sector_size - tail_off)
}

pub fn snapshot(dev: &File, g: &Geometry) -> Result<Snapshot> {
    let (hl, to, tl) = ranges(g);
    Ok(Snapshot {
        head: read_at(dev, "table area", 0, hl as usize)?,
        tail: read_at(dev, "backup table area", to, tl as usize)?,
        tail_off: to,
    })
}

/// Puts back the bytes saved by `snapshot`.
pub fn restore(dev: &File, s: &Snapshot) -> Result<()> {
    dev.write_all_at(&s.tail, s.tail_off)
        .context("restoring the backup table area")?;
    dev.write_all_at(&s.head, 0)
        .context("restoring the table area")?;
    dev.sync_all().context("syncing")
}

/// Writes `t` as the whole table: backup copy first, then the primary and the protective MBR,
/// then fsync. Everything is computed before the first byte is written. `keep_boot_code` keeps
/// the MBR's boot code and disk signature (not when the table is wiped).
pub fn write(dev: &File, g: &Geometry, t: &Table, keep_boot_code: bool) -> Result<()> {
    let arr = entry_array(t)?;
    let crc = crc32(&arr);
    let ss = g.sector_size;
    let (hl, to, tl) = ranges(g);
    let old_mbr = if keep_boot_code {
        read_at(dev, "MBR", 0, 512)?
    } else {
        vec![0u8; 512]
    };
    let mut head = vec![0u8; hl as usize];
    let mbr = protective_mbr(g, &old_mbr);
    head[..512].copy_from_slice(&mbr);
    head[ss as usize..2 * ss as usize].copy_from_slice(&header(g, t, true, crc));
    head[2 * ss as usize..2 * ss as usize + arr.len()].copy_from_slice(&arr);
    let mut tail = vec![0u8; tl as usize];
    tail[..arr.len()].copy_from_slice(&arr);
    let hoff = (tl - ss) as usize;
    tail[hoff..].copy_from_slice(&header(g, t, false, crc));
    dev.write_all_at(&tail, to)
        .context("writing the backup GPT")?;
    dev.write_all_at(&head, 0)
        .context("writing the primary GPT")?;
    dev.sync_all().context("syncing the partition table")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_reference() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    fn tmpdisk(bytes: u64) -> (File, std::path::PathBuf) {
        let p = std::env::temp_dir().join(format!("agent-gpt-{}", Uuid::new_v4()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(bytes).unwrap();
        (f, p)
    }

    #[test]
    fn roundtrip_both_sector_sizes_and_backup_fallback() {
        for ss in [512u64, 4096] {
            let (f, p) = tmpdisk(64 * MIB);
            let g = Geometry::new(ss, 64 * MIB).unwrap();
            assert_eq!(read(&f, &g).unwrap(), OnDisk::None);
            let t = Table {
                disk_guid: Uuid::new_v4(),
                entries: vec![
                    Entry {
                        number: 1,
                        start: g.align(),
                        end: 2 * g.align() - 1,
                        type_guid: LINUX_FS_TYPE,
                        guid: Uuid::new_v4(),
                        name: "één".into(),
                        attrs: 0,
                    },
                    Entry {
                        number: 3,
                        start: 4 * g.align(),
                        end: 8 * g.align() - 1,
                        type_guid: LINUX_FS_TYPE,
                        guid: Uuid::new_v4(),
                        name: String::new(),
                        attrs: 4,
                    },
                ],
            };
            write(&f, &g, &t, true).unwrap();
            assert_eq!(read(&f, &g).unwrap(), OnDisk::Gpt(t.clone()));
            // Corrupt the primary header: the backup is used.
            f.write_all_at(b"garbage!", ss + 30).unwrap();
            assert_eq!(read(&f, &g).unwrap(), OnDisk::Gpt(t.clone()));
            // Corrupt the backup too: an error, no panic.
            f.write_all_at(b"garbage!", (g.sectors - 1) * ss + 30)
                .unwrap();
            assert!(read(&f, &g).is_err());
            std::fs::remove_file(p).unwrap();
        }
    }
}
