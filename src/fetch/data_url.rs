//! `data:` URLs (RFC 2397): `data:[<mediatype>][;base64],<data>`.

use anyhow::{Result, bail};

/// Splits a data URL into (is it base64, the still-encoded payload).
fn split(url: &str) -> Result<(bool, &str)> {
    let Some(rest) = url.strip_prefix("data:") else {
        bail!("not a data URL");
    };
    let Some((meta, data)) = rest.split_once(',') else {
        bail!("invalid data URL: no ',' before the data");
    };
    Ok((
        meta.split(';').any(|p| p.eq_ignore_ascii_case("base64")),
        data,
    ))
}

/// Decodes the payload of a data URL.
pub fn decode(url: &str) -> Result<Vec<u8>> {
    let (is_base64, data) = split(url)?;
    // Base64 payloads rarely carry %-escapes: decode them in place without a copy.
    if is_base64 && !data.contains('%') {
        return base64_decode(data.as_bytes());
    }
    let bytes = percent_decode(data)?;
    if is_base64 {
        base64_decode(&bytes)
    } else {
        Ok(bytes)
    }
}

/// Checks that a data URL decodes, without keeping (or, for base64, allocating) the payload.
pub fn check(url: &str) -> Result<()> {
    let (is_base64, data) = split(url)?;
    if is_base64 && !data.contains('%') {
        return base64_check(data.as_bytes());
    }
    let bytes = percent_decode(data)?;
    if is_base64 {
        base64_check(&bytes)?;
    }
    Ok(())
}

/// The validity rules of `base64_decode`, without output.
fn base64_check(input: &[u8]) -> Result<()> {
    let mut symbols = 0usize;
    let mut pad = false;
    // Fast path: runs of eight plain symbols.
    let mut i = 0;
    while i + 8 <= input.len() {
        let special = input[i..i + 8]
            .iter()
            .fold(0u8, |acc, &c| acc | B64[c as usize]);
        if special & 0xC0 != 0 {
            break;
        }
        symbols += 8;
        i += 8;
    }
    for &c in &input[i..] {
        match B64[c as usize] {
            B64_PAD => pad = true,
            B64_SKIP => {}
            B64_INVALID => bail!("invalid base64 in data URL"),
            _ if pad => bail!("invalid base64 in data URL: data after padding"),
            _ => symbols += 1,
        }
    }
    if symbols % 4 == 1 {
        bail!("invalid base64 in data URL: truncated");
    }
    Ok(())
}

fn percent_decode(s: &str) -> Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // Copy the run up to the next escape at once (base64 payloads have none).
        let run = b[i..]
            .iter()
            .position(|&c| c == b'%')
            .unwrap_or(b.len() - i);
        out.extend_from_slice(&b[i..i + run]);
        i += run;
        if i == b.len() {
            break;
        }
        let hex = b
            .get(i + 1..i + 3)
            .ok_or_else(|| anyhow::anyhow!("invalid data URL: truncated %-escape"))?;
        let h = std::str::from_utf8(hex)
            .ok()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match h {
            Some(v) => out.push(v),
            None => bail!("invalid data URL: bad %-escape"),
        }
        i += 3;
    }
    Ok(out)
}

const B64_INVALID: u8 = 0xFF;
const B64_SKIP: u8 = 0xFE;
const B64_PAD: u8 = 0xFD;

/// Symbol values of standard and URL-safe base64; the markers above for everything else.
static B64: [u8; 256] = {
    let mut t = [B64_INVALID; 256];
    let mut i = 0;
    while i < 26 {
        t[b'A' as usize + i] = i as u8;
        t[b'a' as usize + i] = 26 + i as u8;
        i += 1;
    }
    let mut d = 0;
    while d < 10 {
        t[b'0' as usize + d] = 52 + d as u8;
        d += 1;
    }
    t[b'+' as usize] = 62;
    t[b'-' as usize] = 62;
    t[b'/' as usize] = 63;
    t[b'_' as usize] = 63;
    t[b'=' as usize] = B64_PAD;
    t[b' ' as usize] = B64_SKIP;
    t[b'\n' as usize] = B64_SKIP;
    t[b'\r' as usize] = B64_SKIP;
    t[b'\t' as usize] = B64_SKIP;
    t
};

/// Standard or URL-safe base64, padding optional, whitespace ignored.
pub fn base64_decode(input: &[u8]) -> Result<Vec<u8>> {
    // At most 3 bytes per 4 symbols, plus 2 for a final partial group.
    let mut out = vec![0u8; input.len() / 4 * 3 + 3];
    let mut n = 0;
    let mut i = 0;
    // Fast path: whole groups of four plain symbols.
    while i + 4 <= input.len() {
        let q = [
            B64[input[i] as usize],
            B64[input[i + 1] as usize],
            B64[input[i + 2] as usize],
            B64[input[i + 3] as usize],
        ];
        if (q[0] | q[1] | q[2] | q[3]) & 0xC0 != 0 {
            break;
        }
        let v = (u32::from(q[0]) << 18)
            | (u32::from(q[1]) << 12)
            | (u32::from(q[2]) << 6)
            | u32::from(q[3]);
        out[n..n + 3].copy_from_slice(&v.to_be_bytes()[1..]);
        n += 3;
        i += 4;
    }
    // The rest (padding, whitespace, errors) symbol by symbol.
    let mut acc: u32 = 0;
    let mut bits = 0;
    let mut pad = false;
    for &c in &input[i..] {
        let v = match B64[c as usize] {
            B64_PAD => {
                pad = true;
                continue;
            }
            B64_SKIP => continue,
            B64_INVALID => bail!("invalid base64 in data URL"),
            v => v,
        };
        if pad {
            bail!("invalid base64 in data URL: data after padding");
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out[n] = (acc >> bits) as u8;
            n += 1;
        }
    }
    if bits >= 6 {
        bail!("invalid base64 in data URL: truncated");
    }
    out.truncate(n);
    Ok(out)
}

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk.len();
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
        out.push(T[(v >> 18) as usize & 63] as char);
        out.push(T[(v >> 12) as usize & 63] as char);
        out.push(if n > 1 {
            T[(v >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if n > 2 {
            T[v as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes() {
        assert_eq!(decode("data:,hello%20world").unwrap(), b"hello world");
        assert_eq!(decode("data:text/plain;base64,aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode("data:;base64,aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode("data:,").unwrap(), b"");
        assert!(decode("data:nocomma").is_err());
        assert!(decode("data:;base64,a*b").is_err());
        assert!(decode("data:,%zz").is_err());
    }

    #[test]
    fn base64_fast_and_slow_paths_agree() {
        assert_eq!(base64_decode(b"aGVs bG8=").unwrap(), b"hello");
        assert_eq!(base64_decode(b"aGVsbG8=\n").unwrap(), b"hello");
        assert_eq!(base64_decode(b"-_-_").unwrap(), [0xfb, 0xff, 0xbf]);
        assert!(base64_decode(b"aGVsbG8=aGVs").is_err());
        assert!(base64_decode(b"aGVsb").is_err());
        for bad in [
            "data:;base64,aGVsbG8=aGVs",
            "data:;base64,aGVsb",
            "data:;base64,a*b",
            "data:,%zz",
            "data:x",
        ] {
            assert!(check(bad).is_err(), "{bad}");
            assert!(decode(bad).is_err(), "{bad}");
        }
        for good in [
            "data:;base64,aGVs%20bG8=",
            "data:;base64,aGVsbG8",
            "data:,a%20b",
            "data:,",
        ] {
            assert!(check(good).is_ok(), "{good}");
            assert!(decode(good).is_ok(), "{good}");
        }
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7919 % 251) as u8).collect();
        let enc = base64_encode(&data);
        assert_eq!(base64_decode(enc.as_bytes()).unwrap(), data);
        let wrapped: String = enc
            .as_bytes()
            .chunks(76)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        assert_eq!(base64_decode(wrapped.as_bytes()).unwrap(), data);
    }

    #[test]
    fn base64_round_trip() {
        for n in 0..20 {
            let data: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
            assert_eq!(
                base64_decode(base64_encode(&data).as_bytes()).unwrap(),
                data
            );
        }
    }
}
