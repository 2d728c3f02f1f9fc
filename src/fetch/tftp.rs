//! `tftp://host[:port]/path`: an RFC 1350 client (octet mode, RFC 2348 `blksize` option)
//! over UDP, streaming block by block with per-packet time-outs and retransmission.

use std::io::{self, Read};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use anyhow::{Context, anyhow};

use super::fetcher::{Fetcher, Scheme, short};
use super::retry::Failure;
use spec::config::types::Resource;

const OP_RRQ: u16 = 1;
const OP_DATA: u16 = 3;
const OP_ACK: u16 = 4;
const OP_ERROR: u16 = 5;
const OP_OACK: u16 = 6;
const DEFAULT_BLKSIZE: usize = 512;
const WANT_BLKSIZE: usize = 1428;
const PACKET_TIMEOUT: Duration = Duration::from_secs(1);
const PACKET_TRIES: u32 = 5;

pub struct Tftp;

impl Scheme for Tftp {
    fn open(
        &self,
        _: &Fetcher,
        url: &str,
        _: &Resource,
        _: Option<Duration>,
    ) -> Result<Box<dyn Read>, Failure> {
        let (addr, file) = parse(url).map_err(Failure::Fatal)?;
        let r = Transfer::start(addr, &file).map_err(|e| {
            let final_ = e.kind() == io::ErrorKind::NotFound;
            let e = anyhow!(e).context(format!("tftp {}", short(url)));
            if final_ {
                Failure::Fatal(e)
            } else {
                Failure::Retry(e)
            }
        })?;
        Ok(Box::new(r))
    }
}

fn parse(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let rest = url
        .strip_prefix("tftp://")
        .with_context(|| format!("not a tftp URL: {url}"))?;
    let (hostport, path) = rest.split_once('/').context("tftp URL without a path")?;
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => {
            (h.trim_matches(['[', ']']), p.parse().context("tftp port")?)
        }
        _ => (hostport, 69u16),
    };
    let addr = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("no address for {host}"))?;
    Ok((addr, path.to_string()))
}

/// A packet from the server, as far as a reading client cares (RFC 1350, RFC 2347/2348).
#[derive(Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    Data {
        block: u16,
        data: &'a [u8],
    },
    Error {
        code: u16,
        message: String,
    },
    /// Option acknowledgement; `blksize` when the server sent a valid one.
    Oack {
        blksize: Option<usize>,
    },
    /// Too short, an opcode a client never receives, or garbage: ignored.
    Other,
}

impl<'a> Packet<'a> {
    /// Decodes any byte string; never panics (fuzzed: `fuzz/fuzz_targets/tftp_packet.rs`).
    pub fn decode(pkt: &'a [u8]) -> Packet<'a> {
        if pkt.len() < 4 {
            return Packet::Other;
        }
        let op = u16::from_be_bytes([pkt[0], pkt[1]]);
        let arg = u16::from_be_bytes([pkt[2], pkt[3]]);
        match op {
            OP_DATA => Packet::Data {
                block: arg,
                data: &pkt[4..],
            },
            OP_ERROR => {
                let msg = String::from_utf8_lossy(&pkt[4..]);
                Packet::Error {
                    code: arg,
                    message: msg.trim_end_matches('\0').to_string(),
                }
            }
            OP_OACK => {
                let opts: Vec<&[u8]> = pkt[2..].split(|&b| b == 0).collect();
                let mut blksize = None;
                for kv in opts.chunks(2) {
                    if kv.len() == 2 && kv[0].eq_ignore_ascii_case(b"blksize") {
                        // RFC 2348: 8..=65464 octets.
                        blksize = std::str::from_utf8(kv[1])
                            .ok()
                            .and_then(|s| s.parse::<usize>().ok())
                            .filter(|v| (8..=65464).contains(v));
                    }
                }
                Packet::Oack { blksize }
            }
            _ => Packet::Other,
        }
    }
}

/// One read transfer in progress.
struct Transfer {
    sock: UdpSocket,
    server: SocketAddr,
    peer: Option<SocketAddr>,
    blksize: usize,
    next: u16,
    last_packet: Vec<u8>,
    buf: Vec<u8>,
    pos: usize,
    done: bool,
}

fn ack(block: u16) -> Vec<u8> {
    let mut p = OP_ACK.to_be_bytes().to_vec();
    p.extend_from_slice(&block.to_be_bytes());
    p
}

impl Transfer {
    fn start(server: SocketAddr, file: &str) -> io::Result<Self> {
        let bind: SocketAddr = if server.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let sock = UdpSocket::bind(bind)?;
        sock.set_read_timeout(Some(PACKET_TIMEOUT))?;
        let mut rrq = OP_RRQ.to_be_bytes().to_vec();
        for s in [file, "octet", "blksize", &WANT_BLKSIZE.to_string()] {
            rrq.extend_from_slice(s.as_bytes());
            rrq.push(0);
        }
        let mut t = Transfer {
            sock,
            server,
            peer: None,
            blksize: DEFAULT_BLKSIZE,
            next: 1,
            last_packet: rrq,
            buf: Vec::new(),
            pos: 0,
            done: false,
        };
        t.sock.send_to(&t.last_packet, server)?;
        t.fill()?;
        Ok(t)
    }

    /// Receives the next DATA block into `buf`, acknowledging it.
    fn fill(&mut self) -> io::Result<()> {
        let mut pkt = vec![0u8; WANT_BLKSIZE.max(DEFAULT_BLKSIZE) + 4];
        let mut tries = 0;
        loop {
            let (n, from) = match self.sock.recv_from(&mut pkt) {
                Ok(v) => v,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    tries += 1;
                    if tries >= PACKET_TRIES {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no answer from {} after {tries} tries", self.server),
                        ));
                    }
                    let to = self.peer.unwrap_or(self.server);
                    self.sock.send_to(&self.last_packet, to)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match self.peer {
                Some(p) if p != from => continue,
                None if from.ip() != self.server.ip() => continue,
                _ => {}
            }
            match Packet::decode(&pkt[..n]) {
                Packet::Error { code, message } => {
                    let kind = if code == 1 {
                        io::ErrorKind::NotFound
                    } else {
                        io::ErrorKind::Other
                    };
                    return Err(io::Error::new(
                        kind,
                        format!("server error {code}: {message}"),
                    ));
                }
                Packet::Oack { blksize } if self.peer.is_none() => {
                    self.peer = Some(from);
                    self.blksize = blksize.unwrap_or(DEFAULT_BLKSIZE).min(WANT_BLKSIZE);
                    self.last_packet = ack(0);
                    self.sock.send_to(&self.last_packet, from)?;
                    tries = 0;
                }
                Packet::Data { block, data } if block == self.next => {
                    self.peer = Some(from);
                    self.buf.clear();
                    self.buf.extend_from_slice(data);
                    self.pos = 0;
                    self.last_packet = ack(block);
                    self.sock.send_to(&self.last_packet, from)?;
                    self.next = self.next.wrapping_add(1);
                    if data.len() < self.blksize {
                        self.done = true;
                    }
                    return Ok(());
                }
                Packet::Data { block, .. } if block == self.next.wrapping_sub(1) => {
                    // Our ACK was lost: acknowledge the duplicate again.
                    self.sock.send_to(&ack(block), from)?;
                }
                _ => {}
            }
        }
    }
}

impl Read for Transfer {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.buf.len() {
            if self.done {
                return Ok(0);
            }
            self.fill()?;
        }
        let k = out.len().min(self.buf.len() - self.pos);
        out[..k].copy_from_slice(&self.buf[self.pos..self.pos + k]);
        self.pos += k;
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_urls() {
        let (a, f) = super::parse("tftp://127.0.0.1:6969/dir/x.ign").unwrap();
        assert_eq!(a.port(), 6969);
        assert_eq!(f, "dir/x.ign");
        let (a, _) = super::parse("tftp://127.0.0.1/x").unwrap();
        assert_eq!(a.port(), 69);
        assert!(super::parse("tftp://127.0.0.1").is_err());
    }

    #[test]
    fn decodes_packets() {
        use super::Packet;
        assert_eq!(
            Packet::decode(&[0, 3, 0, 7, b'h', b'i']),
            Packet::Data {
                block: 7,
                data: b"hi"
            }
        );
        assert_eq!(
            Packet::decode(b"\x00\x05\x00\x01File not found\0"),
            Packet::Error {
                code: 1,
                message: "File not found".into()
            }
        );
        assert_eq!(
            Packet::decode(b"\x00\x06blksize\x001428\x00"),
            Packet::Oack {
                blksize: Some(1428)
            }
        );
        assert_eq!(
            Packet::decode(b"\x00\x06BLKSIZE\x000\x00"),
            Packet::Oack { blksize: None }
        );
        assert_eq!(Packet::decode(b"\x00\x03\x00"), Packet::Other);
        assert_eq!(Packet::decode(b"\x00\x09\x00\x00"), Packet::Other);
    }
}
