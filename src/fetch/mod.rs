//! Fetching resources (configs, CAs, file contents): one fetcher per URL scheme, with
//! decompression and hash verification in one place.

pub mod data_url;

use std::io::Read;

use anyhow::{Context, Result, bail};
use sha2::Digest;

use crate::config::types::{Config, Resource};

/// Settings that shape every fetch, taken from a config's `ignition` section.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub http_response_headers: Option<i64>,
    pub http_total: Option<i64>,
}

impl Options {
    pub fn from_config(c: &Config) -> Self {
        Options {
            http_response_headers: c.ignition.timeouts.http_response_headers,
            http_total: c.ignition.timeouts.http_total,
        }
    }
}

pub struct Fetcher {
    pub opts: Options,
}

impl Fetcher {
    pub fn new(opts: Options) -> Self {
        Fetcher { opts }
    }

    /// Fetches a resource into memory: decompressed and verified. For configs and CAs.
    pub fn fetch_bytes(&self, r: &Resource) -> Result<Vec<u8>> {
        let Some(src) = &r.source else {
            return Ok(Vec::new());
        };
        let raw = match src.split_once(':').map(|(s, _)| s) {
            Some("data") => data_url::decode(src).context("decoding data URL")?,
            Some(scheme) => bail!("fetching {scheme}: URLs is not implemented yet ({src})"),
            None => bail!("invalid source URL {src:?}"),
        };
        let data = decompress(r, raw)?;
        verify(r, &data)?;
        Ok(data)
    }
}

impl Fetcher {
    /// Streams a resource, decompressed and verified, into `out`; returns the bytes written.
    /// Callers write into a temporary file and rename it into place only on `Ok`, so an
    /// unverified or partial download never becomes the target.
    pub fn fetch_to(&self, r: &Resource, out: &mut dyn std::io::Write) -> Result<u64> {
        let data = self.fetch_bytes(r)?;
        out.write_all(&data).context("writing fetched data")?;
        Ok(data.len() as u64)
    }
}

fn decompress(r: &Resource, raw: Vec<u8>) -> Result<Vec<u8>> {
    match r.compression.as_deref() {
        None | Some("") => Ok(raw),
        Some("gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&raw[..])
                .read_to_end(&mut out)
                .context("decompressing gzip data")?;
            Ok(out)
        }
        Some(other) => bail!("unsupported compression {other:?}"),
    }
}

/// Checks `verification.hash` against the decompressed data.
pub fn verify(r: &Resource, data: &[u8]) -> Result<()> {
    let Some(h) = &r.verification.hash else {
        return Ok(());
    };
    let (func, want) = h.split_once('-').context("malformed hash")?;
    let got = match func {
        "sha512" => hex(&sha2::Sha512::digest(data)),
        "sha256" => hex(&sha2::Sha256::digest(data)),
        other => bail!("unsupported hash function {other}"),
    };
    if !got.eq_ignore_ascii_case(want) {
        bail!("hash mismatch: expected {func}-{want}, got {func}-{got}");
    }
    Ok(())
}

pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// SHA-512 of `data` as hex, for logs.
pub fn sha512_hex(data: &[u8]) -> String {
    hex(&sha2::Sha512::digest(data))
}
