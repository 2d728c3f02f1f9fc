//! Detached image signatures in minisign's format (`minisign -S`), verified with the
//! Ed25519 of `ring` (already in the binary for TLS) and a BLAKE2b-512 of our own: minisign
//! signs the BLAKE2b-512 digest of the file (its "prehashed" `ED` algorithm), which is what
//! lets the signature be checked while the image streams to the disk. The trusted comment is
//! signed too (the global signature) and is checked as well.
//!
//! Key file (`minisign -G` writes `minisign.pub`): a comment line, then base64 of
//! `"Ed" ‖ key id (8) ‖ public key (32)`. Signature file (`IMAGE.minisig`): a comment line,
//! base64 of `algorithm (2) ‖ key id (8) ‖ signature (64)`, `trusted comment: …`, base64 of
//! the global signature over `signature ‖ trusted comment`.

use anyhow::{Context, Result, bail};
use spec::encoding::data_url::base64_decode;

/// A minisign public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub id: [u8; 8],
    key: [u8; 32],
}

/// A parsed minisign signature.
#[derive(Debug, Clone)]
pub struct Signature {
    pub key_id: [u8; 8],
    sig: [u8; 64],
    pub trusted_comment: String,
    global: [u8; 64],
}

/// The last line of `text` that is not a comment and not empty, decoded.
fn base64_line<'a>(lines: impl Iterator<Item = &'a str>, what: &str) -> Result<Vec<u8>> {
    let line = lines
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("untrusted comment:"))
        .with_context(|| format!("{what}: no base64 line"))?;
    base64_decode(line.as_bytes()).with_context(|| format!("{what}: not base64"))
}

fn key_id_hex(id: &[u8; 8]) -> String {
    // As minisign prints it: a little-endian 64-bit number in upper-case hex.
    format!("{:X}", u64::from_le_bytes(*id))
}

impl PublicKey {
    /// Parses a key file's text (or the bare base64 line, as `minisign -P` takes it).
    pub fn parse(text: &str) -> Result<PublicKey> {
        let b = base64_line(text.lines(), "minisign public key")?;
        if b.len() != 42 || &b[..2] != b"Ed" {
            bail!(
                "minisign public key: expected 42 bytes starting with \"Ed\", got {} bytes",
                b.len()
            );
        }
        let mut id = [0; 8];
        id.copy_from_slice(&b[2..10]);
        let mut key = [0; 32];
        key.copy_from_slice(&b[10..]);
        Ok(PublicKey { id, key })
    }

    pub fn id_hex(&self) -> String {
        key_id_hex(&self.id)
    }

    fn verify_raw(&self, msg: &[u8], sig: &[u8; 64]) -> bool {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &self.key)
            .verify(msg, sig)
            .is_ok()
    }
}

impl Signature {
    /// Parses a `.minisig` file's text.
    pub fn parse(text: &str) -> Result<Signature> {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let first = lines.next().context("minisign signature: empty")?;
        let sig_line = if first.starts_with("untrusted comment:") {
            lines
                .next()
                .context("minisign signature: no signature line")?
        } else {
            first
        };
        let b = base64_decode(sig_line.as_bytes()).context("minisign signature: not base64")?;
        if b.len() != 74 {
            bail!("minisign signature: expected 74 bytes, got {}", b.len());
        }
        match &b[..2] {
            b"ED" => {}
            b"Ed" => bail!(
                "minisign signature: a legacy (not prehashed) signature, which cannot be checked \
                 while the image streams: sign the image with minisign -S without -l"
            ),
            other => bail!(
                "minisign signature: unknown algorithm {:?}",
                String::from_utf8_lossy(other)
            ),
        }
        let tc = lines
            .next()
            .context("minisign signature: no trusted comment")?
            .strip_prefix("trusted comment: ")
            .context("minisign signature: the third line is not a trusted comment")?;
        let g = base64_decode(
            lines
                .next()
                .context("minisign signature: no global signature")?
                .as_bytes(),
        )
        .context("minisign signature: global signature not base64")?;
        if g.len() != 64 {
            bail!(
                "minisign signature: global signature of {} bytes, not 64",
                g.len()
            );
        }
        let mut key_id = [0; 8];
        key_id.copy_from_slice(&b[2..10]);
        let mut sig = [0; 64];
        sig.copy_from_slice(&b[10..]);
        let mut global = [0; 64];
        global.copy_from_slice(&g);
        Ok(Signature {
            key_id,
            sig,
            trusted_comment: tc.to_string(),
            global,
        })
    }

    /// Checks the signature of the file whose BLAKE2b-512 digest is `digest`, and of the
    /// trusted comment, against `key`.
    pub fn verify(&self, key: &PublicKey, digest: &[u8; 64]) -> Result<()> {
        if self.key_id != key.id {
            bail!(
                "the image is signed with key {}, not with the given key {}",
                key_id_hex(&self.key_id),
                key.id_hex()
            );
        }
        if !key.verify_raw(digest, &self.sig) {
            bail!(
                "signature verification failed: the image is not the one signed with key {}",
                key.id_hex()
            );
        }
        let mut g = self.sig.to_vec();
        g.extend_from_slice(self.trusted_comment.as_bytes());
        if !key.verify_raw(&g, &self.global) {
            bail!("signature verification failed: the trusted comment was altered");
        }
        Ok(())
    }
}

/// BLAKE2b (RFC 7693) with a 64-byte digest and no key, streaming.
#[derive(Clone)]
pub struct Blake2b512 {
    h: [u64; 8],
    t: u128,
    buf: [u8; 128],
    len: usize,
}

const IV: [u64; 8] = [
    0x6a09e667f3bcc908,
    0xbb67ae8584caa73b,
    0x3c6ef372fe94f82b,
    0xa54ff53a5f1d36f1,
    0x510e527fade682d1,
    0x9b05688c2b3e6c1f,
    0x1f83d9abfb41bd6b,
    0x5be0cd19137e2179,
];

const SIGMA: [[usize; 16]; 10] = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
    [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
    [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
    [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
    [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
    [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
    [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
    [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
];

impl Default for Blake2b512 {
    fn default() -> Self {
        let mut h = IV;
        // Parameter block: digest length 64, no key, fanout 1, depth 1.
        h[0] ^= 0x0101_0000 ^ 64;
        Blake2b512 {
            h,
            t: 0,
            buf: [0; 128],
            len: 0,
        }
    }
}

#[inline(always)]
fn g(v: &mut [u64; 16], a: usize, b: usize, c: usize, d: usize, x: u64, y: u64) {
    v[a] = v[a].wrapping_add(v[b]).wrapping_add(x);
    v[d] = (v[d] ^ v[a]).rotate_right(32);
    v[c] = v[c].wrapping_add(v[d]);
    v[b] = (v[b] ^ v[c]).rotate_right(24);
    v[a] = v[a].wrapping_add(v[b]).wrapping_add(y);
    v[d] = (v[d] ^ v[a]).rotate_right(16);
    v[c] = v[c].wrapping_add(v[d]);
    v[b] = (v[b] ^ v[c]).rotate_right(63);
}

impl Blake2b512 {
    fn compress(&mut self, block: &[u8; 128], last: bool) {
        let mut m = [0u64; 16];
        for (i, w) in m.iter_mut().enumerate() {
            let mut b = [0; 8];
            b.copy_from_slice(&block[i * 8..i * 8 + 8]);
            *w = u64::from_le_bytes(b);
        }
        let mut v = [0u64; 16];
        v[..8].copy_from_slice(&self.h);
        v[8..].copy_from_slice(&IV);
        v[12] ^= self.t as u64;
        v[13] ^= (self.t >> 64) as u64;
        if last {
            v[14] = !v[14];
        }
        for r in 0..12 {
            let s = &SIGMA[r % 10];
            g(&mut v, 0, 4, 8, 12, m[s[0]], m[s[1]]);
            g(&mut v, 1, 5, 9, 13, m[s[2]], m[s[3]]);
            g(&mut v, 2, 6, 10, 14, m[s[4]], m[s[5]]);
            g(&mut v, 3, 7, 11, 15, m[s[6]], m[s[7]]);
            g(&mut v, 0, 5, 10, 15, m[s[8]], m[s[9]]);
            g(&mut v, 1, 6, 11, 12, m[s[10]], m[s[11]]);
            g(&mut v, 2, 7, 8, 13, m[s[12]], m[s[13]]);
            g(&mut v, 3, 4, 9, 14, m[s[14]], m[s[15]]);
        }
        for i in 0..8 {
            self.h[i] ^= v[i] ^ v[i + 8];
        }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        // A full buffer is compressed only once more data follows: the last block is
        // compressed with the final flag.
        while !data.is_empty() {
            if self.len == 128 {
                self.t += 128;
                let b = self.buf;
                self.compress(&b, false);
                self.len = 0;
            }
            if self.len == 0 && data.len() > 128 {
                let (block, rest) = data.split_at(128);
                self.t += 128;
                self.compress(block.try_into().expect("128 bytes"), false);
                data = rest;
                continue;
            }
            let n = (128 - self.len).min(data.len());
            self.buf[self.len..self.len + n].copy_from_slice(&data[..n]);
            self.len += n;
            data = &data[n..];
        }
    }

    pub fn finalize(mut self) -> [u8; 64] {
        self.t += self.len as u128;
        self.buf[self.len..].fill(0);
        let b = self.buf;
        self.compress(&b, true);
        let mut out = [0; 64];
        for (i, w) in self.h.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spec::encoding::hex;

    fn b2(data: &[u8]) -> String {
        let mut h = Blake2b512::default();
        h.update(data);
        hex(&h.finalize())
    }

    #[test]
    fn blake2b_known_answers() {
        // RFC 7693 appendix A, and the empty input.
        assert_eq!(
            b2(b"abc"),
            "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923"
        );
        assert_eq!(
            b2(b""),
            "786a02f742015903c6c6fd852552d272912f4740e15847618a86e217f71f5419d25e1031afee585313896444934eb04b903a685b1448b755d56f701afe9be2ce"
        );
        // Any split of the input gives the same digest (block boundaries at 128, 256).
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let whole = b2(&data);
        for step in [1, 63, 127, 128, 129, 256, 999] {
            let mut h = Blake2b512::default();
            for c in data.chunks(step) {
                h.update(c);
            }
            assert_eq!(hex(&h.finalize()), whole, "step {step}");
        }
        for n in [127, 128, 129, 256] {
            let mut h = Blake2b512::default();
            h.update(&data[..n]);
            let mut one = Blake2b512::default();
            for b in &data[..n] {
                one.update(std::slice::from_ref(b));
            }
            assert_eq!(hex(&h.finalize()), hex(&one.finalize()), "len {n}");
        }
    }

    #[test]
    fn malformed_keys_and_signatures_are_refused() {
        assert!(PublicKey::parse("untrusted comment: x\n").is_err());
        assert!(PublicKey::parse("untrusted comment: x\nRWQ=\n").is_err());
        let e = Signature::parse("untrusted comment: x\n").unwrap_err();
        assert!(format!("{e:#}").contains("no signature line"), "{e:#}");
    }
}
