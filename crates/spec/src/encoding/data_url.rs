//! `data:` URLs (RFC 2397): `data:[<mediatype>][;base64],<data>`, parsed as strictly as the
//! parser Ignition uses (so a config Ignition rejects is rejected here too, at validate time):
//! - a media type, when given, is `type/subtype` with RFC 2045 token characters, and the type is
//!   one of `text`, `image`, `audio`, `video`, `application`, `message`, `multipart` (or starts
//!   with them) or an `x-` extension;
//! - parameters are `;attr=value` (value a token or a quoted string); `;base64` comes last;
//! - plain data is ASCII without controls, space or `<>#"{}|\^[]` and backquote; anything else
//!   must be `%XX`-escaped, and every `%` starts a valid escape;
//! - base64 data uses only `A-Za-z0-9+/=` and must be padded (standard alphabet, no `%XX`).

use anyhow::{Result, bail};

/// A parsed data URL: whether its data is base64, and the still-encoded data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataUrl<'a> {
    pub base64: bool,
    pub data: &'a str,
}

/// RFC 2045 `tspecials`.
fn is_tspecial(c: u8) -> bool {
    matches!(
        c,
        b'(' | b')'
            | b'<'
            | b'>'
            | b'@'
            | b','
            | b';'
            | b':'
            | b'\\'
            | b'"'
            | b'/'
            | b'['
            | b']'
            | b'?'
            | b'='
    )
}

/// An RFC 2045 token character: printable ASCII other than space and `tspecials`.
fn is_token(c: u8) -> bool {
    c > b' ' && c < 0x7f && !is_tspecial(c)
}

/// A character allowed unescaped in plain (not base64) data.
fn is_url_char(c: u8) -> bool {
    c > b' '
        && c < 0x7f
        && !matches!(
            c,
            b'<' | b'>' | b'#' | b'"' | b'{' | b'}' | b'|' | b'\\' | b'^' | b'[' | b']' | b'`'
        )
}

const MEDIA_TYPES: &[&str] = &[
    "text",
    "image",
    "audio",
    "video",
    "application",
    "message",
    "multipart",
];

/// Parses and checks a data URL's syntax (not yet its base64 payload's padding).
pub fn parse(url: &str) -> Result<DataUrl<'_>> {
    parse_with(url, true)
}

/// [`parse`]; without `scan_base64`, a base64 payload's symbols are left for the caller to
/// check ([`payload`] does, with the symbol scan of `base64_shape`).
fn parse_with(url: &str, scan_base64: bool) -> Result<DataUrl<'_>> {
    let Some(rest) = url.strip_prefix("data:") else {
        bail!("not a data URL: must start with \"data:\"");
    };
    let b = rest.as_bytes();
    let mut i = 0;
    // Media type.
    if i < b.len() && b[i] != b';' && b[i] != b',' {
        let start = i;
        while i < b.len() && is_token(b[i]) {
            i += 1;
        }
        if i == b.len() {
            bail!(
                "invalid data URL: media type without '/' (e.g. text/plain) or no ',' before the data"
            );
        }
        if b[i] != b'/' {
            bail!(
                "invalid data URL: invalid character {:?} in the media type",
                b[i] as char
            );
        }
        let ty = &rest[start..i];
        let extension = ty.len() >= 2
            && ty.as_bytes()[0].eq_ignore_ascii_case(&b'x')
            && ty.as_bytes()[1] == b'-';
        if !extension && !MEDIA_TYPES.iter().any(|t| ty.starts_with(t)) {
            bail!(
                "invalid data URL: unknown media type {ty:?} (text, image, audio, video, application, message, multipart or x-...)"
            );
        }
        i += 1;
        while i < b.len() && is_token(b[i]) {
            i += 1;
        }
        match b.get(i) {
            Some(b';' | b',') => {}
            None => bail!("invalid data URL: no ',' before the data"),
            Some(&c) => bail!(
                "invalid data URL: invalid character {:?} in the media subtype",
                c as char
            ),
        }
    }
    // Parameters, then `;base64`.
    let mut base64 = false;
    while b.get(i) == Some(&b';') {
        i += 1;
        let start = i;
        while i < b.len() && is_token(b[i]) {
            i += 1;
        }
        if i == start {
            bail!("invalid data URL: empty or invalid parameter after ';'");
        }
        match b.get(i) {
            Some(b',') => {
                if &rest[start..i] != "base64" {
                    bail!(
                        "invalid data URL: parameter {:?} needs a value (only \"base64\" stands alone, last)",
                        &rest[start..i]
                    );
                }
                base64 = true;
            }
            Some(b'=') => {
                i += 1;
                if b.get(i) == Some(&b'"') {
                    i += 1;
                    loop {
                        match b.get(i) {
                            None => bail!("invalid data URL: unclosed quoted parameter value"),
                            Some(b'"') => {
                                i += 1;
                                break;
                            }
                            Some(b'\\') if b.get(i + 1).is_some_and(|c| c.is_ascii()) => i += 2,
                            Some(&c) if c.is_ascii() && !c.is_ascii_control() => i += 1,
                            Some(_) => bail!(
                                "invalid data URL: invalid character in a quoted parameter value"
                            ),
                        }
                    }
                } else {
                    let vstart = i;
                    while i < b.len() && is_token(b[i]) {
                        i += 1;
                    }
                    if i == vstart {
                        bail!("invalid data URL: empty or invalid parameter value");
                    }
                    percent_check(&rest[vstart..i])?;
                }
                match b.get(i) {
                    Some(b';' | b',') => {}
                    None => bail!("invalid data URL: no ',' before the data"),
                    Some(&c) => bail!(
                        "invalid data URL: expected ';' or ',' after a parameter, found {:?}",
                        c as char
                    ),
                }
            }
            None => bail!("invalid data URL: no ',' before the data"),
            Some(&c) => bail!(
                "invalid data URL: invalid character {:?} in a parameter name",
                c as char
            ),
        }
        if base64 {
            break;
        }
    }
    if b.get(i) != Some(&b',') {
        bail!("invalid data URL: no ',' before the data");
    }
    let data = &rest[i + 1..];
    if base64 {
        if scan_base64
            && !all_in::<true>(data.as_bytes())
            && let Some(p) = data
                .bytes()
                .position(|c| B64[c as usize] >= 64 && c != b'=')
        {
            bail!(
                "invalid data URL: character {:?} at offset {p} of the base64 data (only A-Za-z0-9+/= are allowed; no %-escapes, no URL-safe alphabet)",
                data[p..].chars().next().unwrap_or('?')
            );
        }
    } else {
        if let Some(p) = data.bytes().position(|c| !is_url_char(c) && c != b'%') {
            let ch = data[p..].chars().next().unwrap_or('?');
            bail!(
                "invalid data URL: character {ch:?} at offset {p} of the data must be %-escaped (as %{})",
                ch.to_string()
                    .bytes()
                    .map(|x| format!("{x:02X}"))
                    .collect::<Vec<_>>()
                    .join("%")
            );
        }
        percent_check(data)?;
    }
    Ok(DataUrl { base64, data })
}

/// Every `%` starts an escape of two hex digits.
fn percent_check(s: &str) -> Result<()> {
    let b = s.as_bytes();
    let mut i = 0;
    while let Some(p) = b[i..].iter().position(|&c| c == b'%') {
        i += p;
        if !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            bail!("invalid data URL: '%' at offset {i} does not start a %XX escape");
        }
        i += 3;
    }
    Ok(())
}

/// Decodes the payload of a data URL.
pub fn decode(url: &str) -> Result<Vec<u8>> {
    Ok(match payload(url)? {
        Payload::Base64(d) => d.into_vec(),
        Payload::Bytes(b) => b,
    })
}

/// A data URL's payload, ready to be decoded piece by piece.
#[derive(Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Base64 symbols, already checked (alphabet, padding, length): [`Base64Decoder`] decodes
    /// them without failing and without a copy of the whole payload.
    Base64(Base64Decoder<'a>),
    /// Plain data, %-decoded.
    Bytes(Vec<u8>),
}

/// Parses and checks a data URL and returns its payload, base64 still encoded (checked, so
/// its decoding cannot fail).
pub fn payload(url: &str) -> Result<Payload<'_>> {
    let d = parse_with(url, false)?;
    if d.base64 {
        let input = d.data.as_bytes();
        if let Err(e) = base64_shape(input) {
            // The full parse says which symbol, in the words it uses at validation time.
            parse(url)?;
            return Err(e);
        }
        // base64_shape: a multiple of 4 symbols, '=' only as the last one or two.
        Ok(Payload::Base64(Base64Decoder { rest: input }))
    } else {
        Ok(Payload::Bytes(percent_decode(d.data)?))
    }
}

/// Decodes checked base64 symbols into a caller's buffer, a few groups at a time.
#[derive(Debug, PartialEq, Eq)]
pub struct Base64Decoder<'a> {
    rest: &'a [u8],
}

impl Base64Decoder<'_> {
    /// Whether every symbol has been decoded.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Decodes every symbol left.
    pub fn into_vec(mut self) -> Vec<u8> {
        let mut out = vec![0u8; self.rest.len() / 4 * 3];
        let n = self.decode_into(&mut out);
        out.truncate(n);
        out
    }

    /// Decodes as many whole groups as `out` has room for (at least one group needs 3 bytes;
    /// with less, nothing is decoded) and returns the number of bytes written.
    pub fn decode_into(&mut self, out: &mut [u8]) -> usize {
        let groups = (out.len() / 3).min(self.rest.len() / 4);
        let (now, later) = self.rest.split_at(groups * 4);
        self.rest = later;
        // Checked symbols: only the very last group may end in '='.
        let (full, last) = match now.last_chunk::<4>() {
            Some(q) if later.is_empty() && q[3] == b'=' => (&now[..now.len() - 4], Some(q)),
            _ => (now, None),
        };
        let group = |q: &[u8]| {
            (u32::from(B64[q[0] as usize] & 63) << 18)
                | (u32::from(B64[q[1] as usize] & 63) << 12)
                | (u32::from(B64[q[2] as usize] & 63) << 6)
                | u32::from(B64[q[3] as usize] & 63)
        };
        for (q, o) in full.chunks_exact(4).zip(out.chunks_exact_mut(3)) {
            let v = group(q).to_be_bytes();
            o[0] = v[1];
            o[1] = v[2];
            o[2] = v[3];
        }
        let mut n = full.len() / 4 * 3;
        if let Some(q) = last {
            let v = group(q).to_be_bytes();
            let k = if q[2] == b'=' { 1 } else { 2 };
            out[n..n + k].copy_from_slice(&v[1..=k]);
            n += k;
        }
        n
    }
}

/// Checks that a data URL is valid and decodes, without keeping (or allocating) the payload.
pub fn check(url: &str) -> Result<()> {
    let d = parse(url)?;
    if d.base64 {
        base64_shape(d.data.as_bytes())?;
    }
    Ok(())
}

/// Standard base64 with padding: the length is a multiple of 4 and `=` only ends the input.
fn base64_shape(input: &[u8]) -> Result<usize> {
    if !input.len().is_multiple_of(4) {
        bail!(
            "invalid base64: {} symbols, not a multiple of 4 (standard base64 with '=' padding is required)",
            input.len()
        );
    }
    let pad = input
        .iter()
        .rev()
        .take(2)
        .take_while(|&&c| c == b'=')
        .count();
    let body = &input[..input.len() - pad];
    if !all_in::<false>(body)
        && let Some(p) = body.iter().position(|&c| B64[c as usize] >= 64)
    {
        bail!(
            "invalid base64: {:?} at offset {p} (only A-Za-z0-9+/ and '=' padding at the end)",
            body[p] as char
        );
    }
    Ok(pad)
}

/// `%XX` escapes of `s` decoded (a data URL's payload, a URL path segment).
pub fn percent_decode(s: &str) -> Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // Copy the run up to the next escape at once.
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

/// Symbol values of standard base64; `B64_INVALID` for everything else (including `=`).
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
    t[b'/' as usize] = 63;
    t
};

/// Standard base64 with `=` padding (RFC 4648 §4), as Go's `base64.StdEncoding` decodes it.
pub fn base64_decode(input: &[u8]) -> Result<Vec<u8>> {
    base64_shape(input)?;
    Ok(Base64Decoder { rest: input }.into_vec())
}

/// Whether `c` is a base64 symbol (or `=`, with `PAD`).
#[inline(always)]
fn is_symbol<const PAD: bool>(c: u8) -> bool {
    (c.wrapping_sub(b'A') < 26)
        | (c.wrapping_sub(b'a') < 26)
        | (c.wrapping_sub(b'0') < 10)
        | (c == b'+')
        | (c == b'/')
        | (PAD & (c == b'='))
}

/// Whether every byte of `data` is a base64 symbol (or `=`, with `PAD`); the callers look for
/// the first bad byte only when this fails.
///
/// Validation runs it over every byte of a config's base64 data URLs. The release build's link-time
/// optimisation runs at the binary's size level, which does not vectorise loops, so the
/// byte-by-byte form ran at 0.7 GB/s; SSE2 (part of every x86_64) does 16 bytes per step,
/// about 9 GB/s here.
fn all_in<const PAD: bool>(data: &[u8]) -> bool {
    let mut blocks = data.chunks_exact(64);
    for block in &mut blocks {
        if !block_in::<PAD>(block) {
            return false;
        }
    }
    blocks.remainder().iter().all(|&c| is_symbol::<PAD>(c))
}

/// [`all_in`] for one block of 64 bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn block_in<const PAD: bool>(block: &[u8]) -> bool {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_cmplt_epi8, _mm_loadu_si128,
        _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    debug_assert_eq!(block.len(), 64);
    // SAFETY: SSE2 is part of the x86_64 baseline, so the intrinsics are available; each load
    // reads 16 bytes of `block` (64 bytes long), and loadu has no alignment requirement.
    unsafe {
        // Signed compares: bytes >= 0x80 are negative and fall outside every range.
        let within = |x: __m128i, lo: u8, hi: u8| {
            _mm_and_si128(
                _mm_cmpgt_epi8(x, _mm_set1_epi8(lo as i8 - 1)),
                _mm_cmplt_epi8(x, _mm_set1_epi8(hi as i8 + 1)),
            )
        };
        let eq = |x: __m128i, c: u8| _mm_cmpeq_epi8(x, _mm_set1_epi8(c as i8));
        let mut all = _mm_set1_epi8(-1);
        for q in block.chunks_exact(16) {
            let x = _mm_loadu_si128(q.as_ptr().cast());
            let mut good = _mm_or_si128(
                _mm_or_si128(within(x, b'A', b'Z'), within(x, b'a', b'z')),
                _mm_or_si128(
                    within(x, b'0', b'9'),
                    _mm_or_si128(eq(x, b'+'), eq(x, b'/')),
                ),
            );
            if PAD {
                good = _mm_or_si128(good, eq(x, b'='));
            }
            all = _mm_and_si128(all, good);
        }
        _mm_movemask_epi8(all) == 0xFFFF
    }
}

/// [`all_in`] for one block of 64 bytes.
#[cfg(not(target_arch = "x86_64"))]
fn block_in<const PAD: bool>(block: &[u8]) -> bool {
    block.iter().fold(true, |a, &c| a & is_symbol::<PAD>(c))
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
    fn payload_decodes_as_decode_does_in_any_steps() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(700).collect();
        for len in [0, 1, 2, 3, 4, 5, 47, 48, 49, 700] {
            let url = format!("data:;base64,{}", base64_encode(&bytes[..len]));
            for step in [1, 2, 3, 4, 5, 7, 64, 1 << 16] {
                let Payload::Base64(mut d) = payload(&url).unwrap() else {
                    panic!("base64 payload")
                };
                let mut got = Vec::new();
                let mut buf = vec![0u8; step];
                while !d.is_empty() {
                    let n = d.decode_into(&mut buf);
                    if step < 3 {
                        assert_eq!(n, 0);
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                if step >= 3 {
                    assert_eq!(got, &bytes[..len], "len {len} step {step}");
                }
            }
        }
        assert_eq!(
            payload("data:,a%20b").unwrap(),
            Payload::Bytes(b"a b".to_vec())
        );
        for bad in [
            "data:;base64,AB=C",
            "data:;base64,A===",
            "data:;base64,ABC",
            "data:;base64,AB%3D",
        ] {
            assert!(payload(bad).is_err(), "{bad}");
        }
        let e = payload("data:;base64,AB*D").unwrap_err().to_string();
        assert!(e.contains("'*'"), "{e}");
    }

    #[test]
    fn symbol_scan_matches_the_alphabet() {
        // Every byte value at every position of the vector blocks and of the tail.
        for b in 0..=255u8 {
            let want = |pad: bool| {
                b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || (pad && b == b'=')
            };
            for pos in 0..140 {
                let mut s = vec![b'A'; 140];
                s[pos] = b;
                assert_eq!(all_in::<true>(&s), want(true), "byte {b} at {pos}");
                assert_eq!(all_in::<false>(&s), want(false), "byte {b} at {pos}");
            }
        }
        assert!(all_in::<false>(b""));
    }

    #[test]
    fn decodes() {
        assert_eq!(decode("data:,hello%20world").unwrap(), b"hello world");
        assert_eq!(decode("data:text/plain;base64,aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode("data:;base64,aGVsbA==").unwrap(), b"hell");
        assert_eq!(decode("data:,").unwrap(), b"");
        assert_eq!(decode("data:;base64,").unwrap(), b"");
        assert_eq!(
            decode("data:text/plain;charset=utf-8;base64,aGk=").unwrap(),
            b"hi"
        );
        assert_eq!(decode("data:text/plain;charset=\"a,b\",x").unwrap(), b"x");
        assert_eq!(decode("data:x-foo/bar,abc").unwrap(), b"abc");
        assert_eq!(
            decode("data:,a/b?c=d&e;f:g@h!$'()*+~_-.").unwrap(),
            b"a/b?c=d&e;f:g@h!$'()*+~_-."
        );
    }

    /// What Ignition's parser rejects, we reject, each class once (the corpus's class (a)).
    #[test]
    fn rejects_what_ignition_rejects() {
        for bad in [
            "data:nocomma",
            "DATA:,x",
            "data:,hello world",
            "data:,a<b",
            "data:,a>b",
            "data:,a#b",
            "data:,a\"b",
            "data:,{}",
            "data:,a|b",
            "data:,a\\b",
            "data:,a^b",
            "data:,[x]",
            "data:,`x`",
            "data:,tab\there",
            "data:,new\nline",
            "data:,caf\u{e9}",
            "data:,%zz",
            "data:,%4",
            "data:;base64,aGVsbG8",
            "data:;base64,aGVs bG8=",
            "data:;base64,aGVsbG8=\n",
            "data:;base64,-_-_",
            "data:;base64,aGVs%20bG8=",
            "data:;base64,aGVsbG8=aGVs",
            "data:;base64,a===",
            "data:;base64,a*b=",
            "data:text,abc",
            "data:foo/bar,abc",
            "data:text/plain;base64;charset=x,aGk=",
            "data:;BASE64,aGk=",
            "data:;charset,abc",
            "data:;charset=,abc",
            "data:text/pl ain,abc",
        ] {
            assert!(check(bad).is_err(), "{bad:?} passes the check");
            assert!(decode(bad).is_err(), "{bad:?} decodes");
        }
    }

    #[test]
    fn base64_round_trip() {
        for n in 0..50 {
            let data: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let enc = base64_encode(&data);
            assert_eq!(base64_decode(enc.as_bytes()).unwrap(), data);
            assert!(check(&format!("data:;base64,{enc}")).is_ok());
        }
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7919 % 251) as u8).collect();
        let enc = base64_encode(&data);
        assert_eq!(
            decode(&format!("data:application/octet-stream;base64,{enc}")).unwrap(),
            data
        );
    }
}
