//! User data as hypervisor channels hand it over, shared by their providers: the
//! `encoding` names of VMware guestinfo (`ignition.config.data.encoding`: none, base64, gzip,
//! gzip+base64, as Ignition accepts them) and the NUL padding some channels leave around a
//! config (z/VM's reader, NVIDIA BlueField's bootfifo, VirtualBox guest properties).
//!
//! Everything decoded here is bounded by the config size limit after decompression
//! ([`runtime::limits::Limits::max_config_size`]).

use anyhow::{Context, Result, bail};

use runtime::limits::read_bounded;
use spec::encoding::base64_decode;

/// The encodings [`decode`] accepts, as Ignition's VMware provider names them.
pub const ENCODINGS: &str =
    "\"\" (none), base64 (b64), gzip (gz), gzip+base64 (gz+base64, gzip+b64, gz+b64)";

/// Decodes `data` as `encoding` says (Ignition's names, see [`ENCODINGS`]); `what` names
/// the data in errors ("VMware guestinfo ignition.config.data"). The result is refused past
/// `limit` bytes.
pub fn decode(data: &[u8], encoding: &str, limit: u64, what: &str) -> Result<Vec<u8>> {
    let out = match encoding {
        "" => data.to_vec(),
        "b64" | "base64" => base64(data, what)?,
        "gz" | "gzip" => gunzip(data, limit, what)?,
        "gz+base64" | "gzip+base64" | "gz+b64" | "gzip+b64" => {
            gunzip(&base64(data, what)?, limit, what)?
        }
        other => bail!(
            "{what}: unsupported encoding {other:?} (supported: {ENCODINGS}); fix the encoding value"
        ),
    };
    if out.len() as u64 > limit {
        return Err(runtime::limits::TooLarge {
            what: what.to_string(),
            limit,
        }
        .into());
    }
    Ok(out)
}

/// Standard base64 with padding, as Go's `base64.StdEncoding` reads it (which skips line
/// breaks: `base64` wraps its output at 76 columns).
fn base64(data: &[u8], what: &str) -> Result<Vec<u8>> {
    let clean: Vec<u8> = data
        .iter()
        .copied()
        .filter(|&c| c != b'\r' && c != b'\n')
        .collect();
    base64_decode(&clean).with_context(|| format!("{what}: decoding base64"))
}

/// Gzip (one or more members, as Go's `gzip.Reader` reads them), bounded by `limit`.
fn gunzip(data: &[u8], limit: u64, what: &str) -> Result<Vec<u8>> {
    if data.len() < 2 || data[..2] != [0x1f, 0x8b] {
        bail!("{what}: not gzip data (no gzip header); check the encoding value");
    }
    read_bounded(flate2::read::MultiGzDecoder::new(data), limit, what)
        .with_context(|| format!("{what}: decompressing gzip data"))
}

/// `data` without NUL bytes at either end (a config padded to a record or page size).
pub fn trim_nul(data: &[u8]) -> &[u8] {
    let start = data.iter().position(|&b| b != 0).unwrap_or(data.len());
    let end = data.iter().rposition(|&b| b != 0).map_or(start, |e| e + 1);
    &data[start..end]
}

#[cfg(test)]
pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use spec::encoding::base64_encode;

    const CONFIG: &[u8] = br#"{"ignition":{"version":"3.4.0"}}"#;
    const LIMIT: u64 = 1 << 20;

    fn dec(data: &[u8], enc: &str) -> Result<Vec<u8>> {
        decode(data, enc, LIMIT, "guestinfo test")
    }

    #[test]
    fn every_encoding_name_ignition_accepts() {
        assert_eq!(dec(CONFIG, "").unwrap(), CONFIG);
        let b64 = base64_encode(CONFIG);
        for e in ["b64", "base64"] {
            assert_eq!(dec(b64.as_bytes(), e).unwrap(), CONFIG, "{e}");
        }
        let gz = gzip(CONFIG);
        for e in ["gz", "gzip"] {
            assert_eq!(dec(&gz, e).unwrap(), CONFIG, "{e}");
        }
        let gzb64 = base64_encode(&gz);
        for e in ["gz+base64", "gzip+base64", "gz+b64", "gzip+b64"] {
            assert_eq!(dec(gzb64.as_bytes(), e).unwrap(), CONFIG, "{e}");
        }
    }

    #[test]
    fn wrapped_base64_is_read_like_go() {
        // `base64` (coreutils) wraps at 76 columns; Go's decoder skips \r and \n.
        let long = CONFIG.repeat(5);
        let b64 = base64_encode(&long);
        let wrapped: Vec<u8> = b64
            .as_bytes()
            .chunks(76)
            .flat_map(|c| c.iter().copied().chain(*b"\r\n"))
            .collect();
        assert_eq!(dec(&wrapped, "base64").unwrap(), long);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let e = format!("{:#}", dec(CONFIG, "zstd").unwrap_err());
        assert!(
            e.contains("guestinfo test: unsupported encoding \"zstd\"")
                && e.contains("gzip+base64"),
            "{e}"
        );
        let e = format!("{:#}", dec(b"not base64!", "base64").unwrap_err());
        assert!(e.contains("guestinfo test: decoding base64"), "{e}");
        let e = format!("{:#}", dec(CONFIG, "gzip").unwrap_err());
        assert!(e.contains("not gzip data"), "{e}");
        let e = format!(
            "{:#}",
            dec(base64_encode(CONFIG).as_bytes(), "gzip+base64").unwrap_err()
        );
        assert!(e.contains("not gzip data"), "{e}");
        let mut truncated = gzip(CONFIG);
        truncated.truncate(truncated.len() - 6);
        let e = format!("{:#}", dec(&truncated, "gzip").unwrap_err());
        assert!(e.contains("decompressing gzip data"), "{e}");
    }

    #[test]
    fn decompressed_size_is_bounded() {
        let bomb = gzip(&vec![b' '; 4096]);
        let e = decode(&bomb, "gzip", 1000, "guestinfo test").unwrap_err();
        assert!(
            e.chain().any(|c| c.is::<runtime::limits::TooLarge>()),
            "{e:#}"
        );
        let e = decode(&[b'x'; 2000], "", 1000, "guestinfo test").unwrap_err();
        assert!(e.is::<runtime::limits::TooLarge>(), "{e:#}");
    }

    #[test]
    fn nul_padding_is_trimmed_at_both_ends() {
        assert_eq!(trim_nul(b"\0\0{}\0\0\0"), b"{}");
        assert_eq!(trim_nul(b"{}"), b"{}");
        assert_eq!(trim_nul(b"\0\0\0"), b"");
        assert_eq!(trim_nul(b""), b"");
        assert_eq!(trim_nul(b"a\0b"), b"a\0b");
    }
}
