//! Encodings shared by the config model, the fetcher and the config server: hex, base64 and
//! `data:` URLs (RFC 2397, parsed as strictly as Ignition does).

pub mod data_url;

pub use data_url::{base64_decode, base64_encode};

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(DIGITS[usize::from(x >> 4)] as char);
        s.push(DIGITS[usize::from(x & 0x0f)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex() {
        assert_eq!(super::hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(super::hex(&[]), "");
    }
}
