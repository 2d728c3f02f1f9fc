//! `applehv`: the config comes from the host over vsock, as Ignition's provider gets it under
//! Apple's Virtualization framework (e.g. `podman machine`, `vfkit`): connect to the host
//! (CID 2) on port 1024 and send an HTTP/1.1 `GET /` with `Accept: application/json`; the
//! response body is the config (empty: no config). The host side is any HTTP server behind a
//! vsock listener; under QEMU, `vhost-vsock-pci` with `socat VSOCK-LISTEN:1024 …` does it.
//!
//! As Ignition: the `vsock` module is loaded first (a failure is an error), and a host that
//! does not accept the connection is an error. Unlike Ignition, which parses whatever body
//! comes back, a status other than 2xx is an error naming it. Reads and writes time out
//! after [`IO_TIMEOUT`] (Ignition waits forever).

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{Found, Provider};
use crate::fetch::Fetcher;
use crate::limits::{TooLarge, read_bounded};

/// The host's context id (`VMADDR_CID_HOST`).
pub const HOST_CID: u32 = 2;
/// The port Ignition connects to.
pub const PORT: u32 = 1024;
/// Longest wait for the host to answer (or take) data.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// The request Ignition sends (the host name is arbitrary: the connection is the address).
pub const REQUEST: &[u8] =
    b"GET / HTTP/1.1\r\nHost: d\r\nAccept: application/json\r\nConnection: close\r\n\r\n";

/// Longest status line or header line accepted.
const MAX_LINE: usize = 8192;
/// Most header lines accepted.
const MAX_HEADERS: usize = 100;

/// Sends [`REQUEST`] on `stream` and returns the response body (bounded by `limit`):
/// `Content-Length`, chunked, or up to the end of the stream.
pub fn http_get(stream: impl Read + Write, limit: u64) -> Result<Vec<u8>> {
    let mut r = BufReader::new(stream);
    r.get_mut().write_all(REQUEST).context("sending the request")?;
    r.get_mut().flush().context("sending the request")?;
    let status = line(&mut r).context("reading the status line")?;
    let mut parts = status.splitn(3, ' ');
    let (proto, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !proto.starts_with("HTTP/1.") || code.len() != 3 {
        bail!("not an HTTP/1.x response: {:?}", short(&status));
    }
    let code: u16 = code.parse().with_context(|| format!("status {code:?}"))?;
    if !(200..300).contains(&code) {
        bail!("the host answered {:?}", short(&status));
    }
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for n in 0.. {
        if n == MAX_HEADERS {
            bail!("more than {MAX_HEADERS} header lines");
        }
        let h = line(&mut r).context("reading the headers")?;
        if h.is_empty() {
            break;
        }
        let Some((name, value)) = h.split_once(':') else {
            bail!("a malformed header line {:?}", short(&h));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse()
                    .with_context(|| format!("Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
            if !chunked && !value.eq_ignore_ascii_case("identity") {
                bail!("unsupported Transfer-Encoding {value:?}");
            }
        } else if name.eq_ignore_ascii_case("content-encoding")
            && !value.eq_ignore_ascii_case("identity")
        {
            bail!("unsupported Content-Encoding {value:?} (the request asks for none)");
        }
    }
    let too_large = || TooLarge {
        what: "config from the applehv vsock host".into(),
        limit,
    };
    if chunked {
        let mut body = Vec::new();
        loop {
            let size_line = line(&mut r).context("reading a chunk size")?;
            let hex = size_line.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(hex, 16)
                .with_context(|| format!("a chunk size {:?}", short(&size_line)))?;
            if size == 0 {
                // Trailers, up to the empty line.
                for _ in 0..MAX_HEADERS {
                    if line(&mut r).context("reading the trailers")?.is_empty() {
                        return Ok(body);
                    }
                }
                bail!("more than {MAX_HEADERS} trailer lines");
            }
            if body.len() as u64 + size > limit {
                return Err(too_large().into());
            }
            let start = body.len();
            body.resize(start + size as usize, 0);
            r.read_exact(&mut body[start..])
                .context("reading a chunk (the host closed early)")?;
            if !line(&mut r).context("reading a chunk end")?.is_empty() {
                bail!("a chunk longer than its size");
            }
        }
    }
    match length {
        Some(n) if n > limit => Err(too_large().into()),
        Some(n) => {
            let mut body = vec![0u8; n as usize];
            r.read_exact(&mut body)
                .with_context(|| format!("reading a {n}-byte body (the host closed early)"))?;
            Ok(body)
        }
        None => read_bounded(r, limit, "config from the applehv vsock host"),
    }
}

/// One CRLF- (or LF-) terminated line, without its end; bounded.
fn line(r: &mut impl BufRead) -> Result<String> {
    let mut buf = Vec::new();
    let n = r
        .take(MAX_LINE as u64 + 2)
        .read_until(b'\n', &mut buf)
        .context("reading from the host")?;
    if n == 0 {
        bail!("the host closed the connection");
    }
    if buf.last() != Some(&b'\n') {
        if buf.len() > MAX_LINE {
            bail!("a line longer than {MAX_LINE} bytes");
        }
        bail!("the host closed the connection in the middle of a line");
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf).context("a line that is not UTF-8")
}

fn short(s: &str) -> &str {
    &s[..s.floor_char_boundary(120)]
}

/// A connected vsock stream to `cid`:`port`, with read and write timeouts.
fn connect(cid: u32, port: u32) -> Result<std::fs::File> {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, VsockAddr, setsockopt, socket, sockopt,
    };
    let fd = socket(
        AddressFamily::Vsock,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .context("creating a vsock socket (module vsock)")?;
    let tv = nix::sys::time::TimeVal::new(IO_TIMEOUT.as_secs() as _, 0);
    setsockopt(&fd, sockopt::ReceiveTimeout, &tv).context("setting a vsock read timeout")?;
    setsockopt(&fd, sockopt::SendTimeout, &tv).context("setting a vsock write timeout")?;
    nix::sys::socket::connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &VsockAddr::new(cid, port),
    )
    .with_context(|| {
        format!(
            "connecting to vsock {cid}:{port} (the host's config service): is this an Apple Hypervisor VM with a vsock device, and does the host listen on port {port}?"
        )
    })?;
    Ok(std::fs::File::from(fd))
}

pub struct Applehv;

impl Provider for Applehv {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        crate::util::run("modprobe", &["vsock"]).context("loading the vsock kernel module (needed for the host channel of Apple Hypervisor VMs)")?;
        let stream = connect(HOST_CID, PORT)?;
        let source = format!("applehv vsock {HOST_CID}:{PORT}");
        let bytes = http_get(stream, f.opts.limits.max_config_size)
            .with_context(|| format!("fetching the config from {source}"))?;
        if bytes.is_empty() {
            log::info!("applehv: the host sent an empty config: no config");
            return Ok(None);
        }
        Ok(Some(Found { bytes, source }))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;

    const CONFIG: &[u8] = br#"{"ignition":{"version":"3.4.0"}}"#;

    /// Runs `http_get` against a server end that reads the request and answers `response`;
    /// returns the result and the request the server saw.
    fn exchange(response: Vec<u8>, limit: u64) -> (Result<Vec<u8>>, Vec<u8>) {
        let (client, mut server) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.ends_with(b"\r\n\r\n") {
                let n = server.read(&mut buf).unwrap();
                assert!(n > 0, "the client closed before the request ended");
                req.extend_from_slice(&buf[..n]);
            }
            // The client may stop reading early (errors): ignore a broken pipe.
            let _ = server.write_all(&response);
            req
        });
        let got = http_get(client, limit);
        (got, t.join().unwrap())
    }

    fn ok(resp: &str) -> Vec<u8> {
        exchange(resp.as_bytes().to_vec(), 1 << 20).0.unwrap()
    }

    fn err(resp: &[u8], limit: u64) -> String {
        format!("{:#}", exchange(resp.to_vec(), limit).0.unwrap_err())
    }

    #[test]
    fn sends_ignitions_request() {
        let (got, req) = exchange(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
            100,
        );
        assert_eq!(got.unwrap(), b"{}");
        let req = String::from_utf8(req).unwrap();
        assert!(req.starts_with("GET / HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("\r\nAccept: application/json\r\n"), "{req}");
        assert!(req.contains("\r\nHost: d\r\n"), "{req}");
    }

    #[test]
    fn body_by_length_chunks_or_close() {
        let c = std::str::from_utf8(CONFIG).unwrap();
        assert_eq!(
            ok(&format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{c}",
                c.len()
            )),
            CONFIG
        );
        let (a, b) = c.split_at(7);
        assert_eq!(
            ok(&format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:X};ext=1\r\n{b}\r\n0\r\nX-Trailer: 1\r\n\r\n",
                a.len(),
                b.len()
            )),
            CONFIG
        );
        assert_eq!(ok(&format!("HTTP/1.0 200 OK\n\n{c}")), CONFIG);
        assert_eq!(ok("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"), b"");
    }

    #[test]
    fn errors_name_what_went_wrong() {
        let e = err(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 100);
        assert!(e.contains("the host answered \"HTTP/1.1 404 Not Found\""), "{e}");
        let e = err(b"SSH-2.0-OpenSSH\r\n", 100);
        assert!(e.contains("not an HTTP/1.x response"), "{e}");
        let e = err(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", 100);
        assert!(e.contains("closed early"), "{e}");
        let e = err(b"", 100);
        assert!(e.contains("closed the connection"), "{e}");
        let e = err(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n", 100);
        assert!(e.contains("unsupported Content-Encoding"), "{e}");
        let e = err(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 100);
        assert!(e.contains("chunk size"), "{e}");
        let long = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(10_000));
        let e = err(long.as_bytes(), 100);
        assert!(e.contains("longer than"), "{e}");
    }

    #[test]
    fn bodies_are_bounded() {
        for resp in [
            "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_string(),
            format!("HTTP/1.1 200 OK\r\n\r\n{}", "x".repeat(1000)),
            format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n{}\r\n0\r\n\r\n",
                "x".repeat(1000)
            ),
        ] {
            let (got, _) = exchange(resp.into_bytes(), 100);
            let e = got.unwrap_err();
            assert!(e.chain().any(|c| c.is::<TooLarge>()), "{e:#}");
        }
    }
}
