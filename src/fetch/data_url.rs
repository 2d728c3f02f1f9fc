//! `data:` URLs (RFC 2397): `data:[<mediatype>][;base64],<data>`.

use anyhow::{Result, bail};

/// Decodes the payload of a data URL.
pub fn decode(url: &str) -> Result<Vec<u8>> {
    let Some(rest) = url.strip_prefix("data:") else {
        bail!("not a data URL");
    };
    let Some((meta, data)) = rest.split_once(',') else {
        bail!("invalid data URL: no ',' before the data");
    };
    let bytes = percent_decode(data)?;
    if meta.split(';').any(|p| p.eq_ignore_ascii_case("base64")) {
        base64_decode(&bytes)
    } else {
        Ok(bytes)
    }
}

fn percent_decode(s: &str) -> Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
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
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Standard or URL-safe base64, padding optional, whitespace ignored.
pub fn base64_decode(input: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    let mut pad = false;
    for &c in input {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => {
                pad = true;
                continue;
            }
            b' ' | b'\n' | b'\r' | b'\t' => continue,
            _ => bail!("invalid base64 in data URL"),
        };
        if pad {
            bail!("invalid base64 in data URL: data after padding");
        }
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits >= 6 {
        bail!("invalid base64 in data URL: truncated");
    }
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
