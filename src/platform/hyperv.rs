//! `hyperv`: the config is the KVP (key-value pair) item `ignition.config` the Hyper-V host
//! puts in the guest's pool 0 (`Add-VMKvpItem`-style WMI calls on the host; "external" pool),
//! or, for configs over the 2048-byte value limit, the items `ignition.config.0`,
//! `ignition.config.1`, … concatenated in order (until the first missing number).
//!
//! As Ignition does it (with `github.com/containers/libhvee`'s `kvp` package): load `hv_utils`,
//! open the kernel's KVP device `/dev/vmbus/hv_kvp`, register as the KVP daemon (a message
//! with operation `KVP_OP_REGISTER1`), then read the host's messages until none comes for a
//! second. Each message is a `struct hv_kvp_msg` (`<linux/hyperv.h>`, 7432 bytes): a SET
//! carries pool, key and value (each with its length, NUL included); every message but the
//! registration's answer is acknowledged with a zeroed message (`HV_S_OK`). No item: no
//! config. No device (not Hyper-V, module missing): an error.
//!
//! The host sends the items once per boot, so, as Ignition does, every pool read (0 to 4,
//! empty ones too) is left for the target root as `/var/lib/hyperv/.kvp_pool_N`, the file
//! format of `hv_kvp_daemon` (one record per item: the key NUL-padded to 512 bytes, the value
//! to 2048), but with mode 0600 instead of the daemon's 0644: the config is among the items.
//! The files stage writes them ([`Provider::fetch_config_with_files`]). The fetch stage keeps
//! the config and the files for its online pass of the same boot (the state directory's
//! provider answer), so the host's single delivery is enough.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::{Found, Provider, ProviderFile};
use crate::fetch::Fetcher;

/// The kernel's KVP device.
pub const DEVICE: &str = "/dev/vmbus/hv_kvp";
/// The item holding the whole config.
pub const KEY: &str = "ignition.config";
/// Prefix of the items holding the config in pieces (`ignition.config.0`, …).
pub const SPLIT_PREFIX: &str = "ignition.config.";
/// The pool the host writes for the guest (`KVP_POOL_EXTERNAL`).
pub const POOL: u8 = 0;

/// `sizeof(struct hv_kvp_msg)`.
pub const MSG_SIZE: usize = 7432;
/// `HV_KVP_EXCHANGE_MAX_KEY_SIZE`, `HV_KVP_EXCHANGE_MAX_VALUE_SIZE`.
pub const MAX_KEY_SIZE: usize = 512;
pub const MAX_VALUE_SIZE: usize = 2048;
/// Offsets in a message: operation, pool, then the SET body (`struct hv_kvp_exchg_msg_value`:
/// value type, key size, value size, key, value).
pub const OFF_OPERATION: usize = 0;
pub const OFF_POOL: usize = 1;
pub const OFF_KEY_SIZE: usize = 8;
pub const OFF_VALUE_SIZE: usize = 12;
pub const OFF_KEY: usize = 16;
pub const OFF_VALUE: usize = 528;
/// Operations.
pub const OP_SET: u8 = 1;
pub const OP_REGISTER1: u8 = 100;

/// How long to wait for the next message before taking the pools as complete (libhvee's).
pub const QUIET: Duration = Duration::from_millis(1000);
/// Most messages read in one run (a bound on the loop; the host sends a few dozen).
const MAX_MESSAGES: usize = 100_000;

/// One item: pool, key, value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub pool: u8,
    pub key: String,
    pub value: String,
}

/// Where `hv_kvp_daemon` keeps the pools (`.kvp_pool_N`).
pub const POOL_DIR: &str = "/var/lib/hyperv";
/// The kernel's pools (`KVP_POOL_COUNT`).
pub const POOLS: u8 = 5;

/// A pool file of `hv_kvp_daemon`'s format: the items of `pool`, each as its key NUL-padded
/// to [`MAX_KEY_SIZE`] bytes and its value to [`MAX_VALUE_SIZE`] (cut if longer).
pub fn encode_pool_file(items: &[Item], pool: u8) -> Vec<u8> {
    let mut out = Vec::new();
    for i in items.iter().filter(|i| i.pool == pool) {
        for (text, size) in [(&i.key, MAX_KEY_SIZE), (&i.value, MAX_VALUE_SIZE)] {
            let mut rec = vec![0u8; size];
            let n = text.len().min(size);
            rec[..n].copy_from_slice(&text.as_bytes()[..n]);
            out.extend_from_slice(&rec);
        }
    }
    out
}

/// The pool files of `items` for the target root: pools 0 to 4 (empty ones too) and any
/// other pool an item names, mode 0600.
pub fn pool_files(items: &[Item]) -> Vec<ProviderFile> {
    let mut pools: Vec<u8> = (0..POOLS).chain(items.iter().map(|i| i.pool)).collect();
    pools.sort_unstable();
    pools.dedup();
    pools
        .into_iter()
        .map(|pool| ProviderFile {
            path: format!("{POOL_DIR}/.kvp_pool_{pool}"),
            mode: 0o600,
            contents: encode_pool_file(items, pool),
        })
        .collect()
}

/// The item of a SET message (key and value up to their lengths minus the NUL).
pub fn parse_set(msg: &[u8]) -> Result<Item> {
    if msg.len() != MSG_SIZE {
        bail!("a KVP message of {} bytes (want {MSG_SIZE})", msg.len());
    }
    let u32_at = |o: usize| u32::from_le_bytes(msg[o..o + 4].try_into().expect("4 bytes")) as usize;
    let (ks, vs) = (u32_at(OFF_KEY_SIZE), u32_at(OFF_VALUE_SIZE));
    if ks > MAX_KEY_SIZE || vs > MAX_VALUE_SIZE {
        bail!("a KVP item with a key of {ks} or a value of {vs} bytes (at most {MAX_KEY_SIZE} and {MAX_VALUE_SIZE})");
    }
    let key = &msg[OFF_KEY..OFF_KEY + ks.saturating_sub(1)];
    let value = &msg[OFF_VALUE..OFF_VALUE + vs.saturating_sub(1)];
    Ok(Item {
        pool: msg[OFF_POOL],
        key: String::from_utf8_lossy(key).into_owned(),
        value: String::from_utf8_lossy(value).into_owned(),
    })
}

/// Registers on the KVP device `fd` (opened non-blocking) and reads every item the host
/// sends, until none comes for `quiet`.
pub fn read_items(fd: &OwnedFd, quiet: Duration) -> Result<Vec<Item>> {
    let mut msg = vec![0u8; MSG_SIZE];
    msg[OFF_OPERATION] = OP_REGISTER1;
    write_msg(fd, &msg).context("registering with the KVP driver")?;
    let ack = vec![0u8; MSG_SIZE];
    let mut items = Vec::new();
    let timeout = PollTimeout::try_from(quiet).unwrap_or(PollTimeout::MAX);
    for _ in 0..MAX_MESSAGES {
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => return Ok(items),
            Ok(_) => {}
            Err(nix::errno::Errno::EINVAL) => bail!("polling the KVP device: EINVAL"),
            Err(_) => continue,
        }
        let n = match nix::unistd::read(fd, &mut msg) {
            Ok(n) => n,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).context("reading from the KVP device"),
        };
        if n != MSG_SIZE {
            bail!("reading from the KVP device: a message of {n} bytes (want {MSG_SIZE})");
        }
        match msg[OFF_OPERATION] {
            OP_REGISTER1 => continue,
            OP_SET => items.push(parse_set(&msg)?),
            _ => {}
        }
        write_msg(fd, &ack).context("acknowledging a KVP message")?;
    }
    bail!("the KVP device sent more than {MAX_MESSAGES} messages")
}

fn write_msg(fd: &OwnedFd, msg: &[u8]) -> Result<()> {
    let n = nix::unistd::write(fd, msg)?;
    if n != msg.len() {
        bail!("a short write of {n} bytes (of {})", msg.len());
    }
    Ok(())
}

/// The config in `items` (pool 0): `ignition.config`, else the pieces
/// `ignition.config.0`, `.1`, … joined; empty: none.
pub fn config(items: &[Item]) -> String {
    let get = |key: &str| {
        items
            .iter()
            .find(|i| i.pool == POOL && i.key == key)
            .map(|i| i.value.as_str())
    };
    if let Some(v) = get(KEY).filter(|v| !v.is_empty()) {
        log::debug!("hyperv: found KVP item {KEY}");
        return v.to_string();
    }
    let mut out = String::new();
    for n in 0.. {
        match get(&format!("{SPLIT_PREFIX}{n}")) {
            Some(v) => out.push_str(v),
            None => break,
        }
    }
    if !out.is_empty() {
        log::debug!("hyperv: joined KVP items {SPLIT_PREFIX}0…");
    }
    out
}

/// Opens the KVP device non-blocking (loading `hv_utils` first, as Ignition does, and
/// waiting a little for the device after).
fn open_device(path: &Path) -> Result<OwnedFd> {
    if !path.exists() {
        runtime::util::run("modprobe", &["hv_utils"]).context("loading the hv_utils kernel module (is this a Hyper-V VM?)")?;
        let until = Instant::now() + Duration::from_secs(5);
        while !path.exists() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_CLOEXEC | nix::libc::O_NONBLOCK)
        .open(path)
        .with_context(|| {
            format!(
                "opening {} (Hyper-V key-value pairs, module hv_utils): is this a Hyper-V VM?",
                path.display()
            )
        })?;
    Ok(f.into())
}

pub struct Hyperv;

impl Provider for Hyperv {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        self.fetch_config_with_files(f).map(|(found, _)| found)
    }

    /// The config, and the pool files for the target root (see the module documentation).
    fn fetch_config_with_files(&self, f: &Fetcher) -> Result<(Option<Found>, Vec<ProviderFile>)> {
        let fd = open_device(Path::new(DEVICE))?;
        let items = read_items(&fd, QUIET).context("reading the Hyper-V key-value pairs")?;
        log::info!("hyperv: {} key-value pairs from the host", items.len());
        let files = pool_files(&items);
        let cfg = config(&items);
        if cfg.is_empty() {
            log::info!("hyperv: no KVP item {KEY} or {SPLIT_PREFIX}0: no config");
            return Ok((None, files));
        }
        if cfg.len() as u64 > f.opts.limits.max_config_size {
            return Err(runtime::limits::TooLarge {
                what: format!("config from Hyper-V KVP {KEY}"),
                limit: f.opts.limits.max_config_size,
            }
            .into());
        }
        let found = Found {
            bytes: cfg.into_bytes(),
            source: format!("Hyper-V KVP {KEY}"),
        };
        Ok((Some(found), files))
    }
}

#[cfg(test)]
mod tests {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};

    use super::*;
    use crate::platform::cabi::c_values;

    #[test]
    fn message_layout_matches_the_kernel_header() {
        let c = c_values(
            &["linux/hyperv.h"],
            &[
                "sizeof(struct hv_kvp_msg)",
                "offsetof(struct hv_kvp_msg, kvp_hdr.operation)",
                "offsetof(struct hv_kvp_msg, kvp_hdr.pool)",
                "offsetof(struct hv_kvp_msg, body.kvp_set.data.key_size)",
                "offsetof(struct hv_kvp_msg, body.kvp_set.data.value_size)",
                "offsetof(struct hv_kvp_msg, body.kvp_set.data.key)",
                "offsetof(struct hv_kvp_msg, body.kvp_set.data.value)",
                "HV_KVP_EXCHANGE_MAX_KEY_SIZE",
                "HV_KVP_EXCHANGE_MAX_VALUE_SIZE",
                "KVP_OP_SET",
                "KVP_OP_REGISTER1",
                "HV_S_OK",
            ],
        );
        let rust: Vec<i128> = [
            MSG_SIZE,
            OFF_OPERATION,
            OFF_POOL,
            OFF_KEY_SIZE,
            OFF_VALUE_SIZE,
            OFF_KEY,
            OFF_VALUE,
            MAX_KEY_SIZE,
            MAX_VALUE_SIZE,
            OP_SET as usize,
            OP_REGISTER1 as usize,
            0,
        ]
        .iter()
        .map(|&v| v as i128)
        .collect();
        assert_eq!(rust, c);
    }

    /// A SET message as the kernel sends it (lengths include the NUL).
    fn set(pool: u8, key: &str, value: &str) -> Vec<u8> {
        let mut m = vec![0u8; MSG_SIZE];
        m[OFF_OPERATION] = OP_SET;
        m[OFF_POOL] = pool;
        m[4..8].copy_from_slice(&1u32.to_le_bytes()); // REG_SZ
        m[OFF_KEY_SIZE..OFF_KEY_SIZE + 4].copy_from_slice(&(key.len() as u32 + 1).to_le_bytes());
        m[OFF_VALUE_SIZE..OFF_VALUE_SIZE + 4]
            .copy_from_slice(&(value.len() as u32 + 1).to_le_bytes());
        m[OFF_KEY..OFF_KEY + key.len()].copy_from_slice(key.as_bytes());
        m[OFF_VALUE..OFF_VALUE + value.len()].copy_from_slice(value.as_bytes());
        m
    }

    fn item(pool: u8, key: &str, value: &str) -> Item {
        Item {
            pool,
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn set_messages_are_parsed_to_their_lengths() {
        assert_eq!(parse_set(&set(0, "k", "v")).unwrap(), item(0, "k", "v"));
        let long = "x".repeat(MAX_VALUE_SIZE - 1);
        assert_eq!(parse_set(&set(3, "key", &long)).unwrap(), item(3, "key", &long));
        let mut bad = set(0, "k", "v");
        bad[OFF_VALUE_SIZE..OFF_VALUE_SIZE + 4].copy_from_slice(&5000u32.to_le_bytes());
        assert!(parse_set(&bad).is_err());
        assert!(parse_set(&[0u8; 10]).is_err());
        // A zero length (no NUL either) is an empty string, not a panic.
        let mut empty = set(0, "k", "v");
        empty[OFF_KEY_SIZE..OFF_KEY_SIZE + 4].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(parse_set(&empty).unwrap().key, "");
    }

    #[test]
    fn the_single_key_wins_else_the_pieces_are_joined() {
        let items = [
            item(0, "other", "x"),
            item(1, KEY, "wrong pool"),
            item(0, "ignition.config.1", "B"),
            item(0, "ignition.config.0", "A"),
            item(0, "ignition.config.3", "D (after a gap: ignored)"),
        ];
        assert_eq!(config(&items), "AB");
        let mut with_single = items.to_vec();
        with_single.push(item(0, KEY, "whole"));
        assert_eq!(config(&with_single), "whole");
        // An empty single key falls back to the pieces, as Ignition.
        let mut empty_single = items.to_vec();
        empty_single.insert(0, item(0, KEY, ""));
        assert_eq!(config(&empty_single), "AB");
        assert_eq!(config(&[item(0, "x", "y")]), "");
    }

    /// The KVP exchange over a real fd pair (SOCK_SEQPACKET keeps message boundaries as the
    /// character device does): the "kernel" end has the registration's answer and the items
    /// queued; the agent's end must register, read them all, acknowledge each (and not the
    /// registration's answer), and stop when no more comes.
    #[test]
    fn the_kvp_exchange_over_a_message_fd() {
        let (ours, kernel) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        )
        .unwrap();
        let config_json = r#"{"ignition":{"version":"3.4.0"}}"#;
        let (a, b) = config_json.split_at(10);
        let mut reg = vec![0u8; MSG_SIZE];
        reg[OFF_OPERATION] = OP_REGISTER1;
        let sent = [
            reg,
            set(0, "ignition.config.0", a),
            set(2, "HostName", "host.example"),
            set(0, "ignition.config.1", b),
        ];
        for m in &sent {
            nix::unistd::write(&kernel, m).unwrap();
        }
        let items = read_items(&ours, Duration::from_millis(300)).unwrap();
        assert_eq!(
            items,
            [
                item(0, "ignition.config.0", a),
                item(2, "HostName", "host.example"),
                item(0, "ignition.config.1", b),
            ]
        );
        assert_eq!(config(&items), config_json);
        // What the kernel end got: the registration, then one all-zero (HV_S_OK)
        // acknowledgement per item, and nothing else.
        let mut buf = vec![0u8; MSG_SIZE + 1];
        let n = nix::unistd::read(&kernel, &mut buf).unwrap();
        assert_eq!((n, buf[OFF_OPERATION]), (MSG_SIZE, OP_REGISTER1));
        for _ in 0..3 {
            let n = nix::unistd::read(&kernel, &mut buf).unwrap();
            assert_eq!(n, MSG_SIZE);
            assert!(buf[..n].iter().all(|&b| b == 0), "an HV_S_OK acknowledgement");
        }
        assert_eq!(
            nix::unistd::read(&kernel, &mut buf).unwrap_err(),
            nix::errno::Errno::EAGAIN
        );
    }

    #[test]
    fn pool_files_in_the_daemons_record_format() {
        let long = "v".repeat(MAX_VALUE_SIZE + 10);
        let items = [
            item(0, "ignition.config", "{}"),
            item(2, "HostName", "h"),
            item(0, "other", &long),
            item(7, "odd", "pool"),
        ];
        let files = pool_files(&items);
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/var/lib/hyperv/.kvp_pool_0",
                "/var/lib/hyperv/.kvp_pool_1",
                "/var/lib/hyperv/.kvp_pool_2",
                "/var/lib/hyperv/.kvp_pool_3",
                "/var/lib/hyperv/.kvp_pool_4",
                "/var/lib/hyperv/.kvp_pool_7",
            ]
        );
        assert!(files.iter().all(|f| f.mode == 0o600));
        let rec = MAX_KEY_SIZE + MAX_VALUE_SIZE;
        let p0 = &files[0].contents;
        assert_eq!(p0.len(), 2 * rec);
        // Record 1: key, NUL padding, value, NUL padding.
        assert_eq!(&p0[..16], b"ignition.config\0");
        assert!(p0[15..MAX_KEY_SIZE].iter().all(|&b| b == 0));
        assert_eq!(&p0[MAX_KEY_SIZE..MAX_KEY_SIZE + 3], b"{}\0");
        assert!(p0[MAX_KEY_SIZE + 2..rec].iter().all(|&b| b == 0));
        // Record 2: a value over the limit is cut to the record.
        assert_eq!(&p0[rec..rec + 6], b"other\0");
        assert!(p0[rec + MAX_KEY_SIZE..].iter().all(|&b| b == b'v'));
        assert_eq!(files[1].contents, b"", "an empty pool is an empty file");
        assert_eq!(files[2].contents.len(), rec);
    }

    #[test]
    fn a_short_message_is_an_error() {
        let (ours, kernel) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        )
        .unwrap();
        nix::unistd::write(&kernel, &[OP_SET; 100]).unwrap();
        let e = format!("{:#}", read_items(&ours, Duration::from_secs(60)).unwrap_err());
        assert!(e.contains("a message of 100 bytes"), "{e}");
    }
}
