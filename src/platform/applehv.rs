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
//!
//! The HTTP exchange is ureq's, as for every other HTTP fetch (crate adopted here in place of
//! a hand-written HTTP/1.1 client: one HTTP implementation for the agent): the connector
//! hands ureq the vsock stream connected beforehand, through the transport of
//! [`crate::fetch::stream`], and no name is ever resolved.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{ConnectionDetails, Connector, NextTimeout, Transport};

use super::{Found, Provider};
use crate::fetch::Fetcher;
use crate::fetch::stream::{Socket, StreamTransport, TimedStream};
use runtime::limits::{TooLarge, read_bounded};

/// The host's context id (`VMADDR_CID_HOST`).
pub const HOST_CID: u32 = 2;
/// The port Ignition connects to.
pub const PORT: u32 = 1024;
/// Longest wait for the host to answer (or take) data.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// The URL of the request (the host name is arbitrary: the connection is the address).
pub const URL: &str = "http://d/";

/// Longest response head (status line and headers) accepted.
const MAX_HEAD: usize = 8192;

/// Hands ureq the one stream connected before the request.
struct Connected<S>(Mutex<Option<S>>);

impl<S> std::fmt::Debug for Connected<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Connected")
    }
}

impl<In: Transport, S: TimedStream> Connector<In> for Connected<S> {
    type Out = StreamTransport<S>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let stream = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .ok_or(ureq::Error::ConnectionFailed)?;
        Ok(Some(StreamTransport::new(stream, details.config)))
    }
}

/// No name lookup: the stream is already connected ([`Connected`] ignores the address).
#[derive(Debug)]
struct NoLookup;

impl Resolver for NoLookup {
    fn resolve(
        &self,
        _uri: &ureq::http::Uri,
        _config: &ureq::config::Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut addrs = self.empty();
        addrs.push(std::net::SocketAddr::from(([0, 0, 0, 0], 80)));
        Ok(addrs)
    }
}

/// What ureq's error `e` means for the exchange with the host.
fn describe(e: ureq::Error) -> anyhow::Error {
    match e {
        ureq::Error::LargeResponseHeader(..) => {
            anyhow::anyhow!("a response head longer than {MAX_HEAD} bytes")
        }
        ureq::Error::Protocol(p) => anyhow::anyhow!("not an HTTP/1.x response ({p})"),
        ureq::Error::Timeout(t) => {
            anyhow::anyhow!("the host sent or took nothing for {} s ({t})", IO_TIMEOUT.as_secs())
        }
        ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            anyhow::anyhow!("the host closed the connection before answering")
        }
        e => anyhow::Error::new(e),
    }
}

/// Whether `e` comes from the stream ending early.
fn ended_early(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
    })
}

/// Sends `GET /` with `Accept: application/json` on `stream` and returns the response body
/// (bounded by `limit`): `Content-Length`, chunked, or up to the end of the stream.
pub fn http_get<S: TimedStream>(stream: S, limit: u64) -> Result<Vec<u8>> {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(ureq::config::AutoHeaderValue::None)
        .timeout_per_read(Some(IO_TIMEOUT))
        .timeout_per_write(Some(IO_TIMEOUT))
        .max_response_header_size(MAX_HEAD)
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .build();
    let agent = ureq::Agent::with_parts(config, Connected(Mutex::new(Some(stream))), NoLookup);
    let resp = agent
        .get(URL)
        .header("Accept", "application/json")
        .header("Connection", "close")
        .call()
        .map_err(describe)?;
    let status = resp.status();
    if !status.is_success() {
        bail!("the host answered {:?}", format!("{:?} {status}", resp.version()));
    }
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
    };
    if let Some(te) = header("transfer-encoding")
        && !te.eq_ignore_ascii_case("chunked")
        && !te.eq_ignore_ascii_case("identity")
    {
        bail!("unsupported Transfer-Encoding {te:?}");
    }
    if let Some(ce) = header("content-encoding")
        && !ce.eq_ignore_ascii_case("identity")
    {
        bail!("unsupported Content-Encoding {ce:?} (the request asks for none)");
    }
    const WHAT: &str = "config from the applehv vsock host";
    if let Some(n) = resp.body().content_length()
        && n > limit
    {
        return Err(TooLarge {
            what: WHAT.into(),
            limit,
        }
        .into());
    }
    let length = resp.body().content_length();
    let body = read_bounded(resp.into_body().into_reader(), limit, WHAT);
    body.map_err(|e| {
        let early = if ended_early(&e) {
            " (the host closed early)"
        } else {
            ""
        };
        match length {
            Some(n) => e.context(format!("reading a {n}-byte body{early}")),
            None => e.context(format!("reading the body{early}")),
        }
    })
}

/// A connected vsock stream to `cid`:`port`, with read and write timeouts.
fn connect(cid: u32, port: u32) -> Result<Socket> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, VsockAddr, socket};
    let fd = socket(
        AddressFamily::Vsock,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .context("creating a vsock socket (module vsock)")?;
    let sock = Socket(std::fs::File::from(fd));
    sock.set_read_timeout(Some(IO_TIMEOUT))
        .context("setting a vsock read timeout")?;
    // Bounds the connect as well.
    sock.set_write_timeout(Some(IO_TIMEOUT))
        .context("setting a vsock write timeout")?;
    nix::sys::socket::connect(
        std::os::fd::AsRawFd::as_raw_fd(&sock.0),
        &VsockAddr::new(cid, port),
    )
    .with_context(|| {
        format!(
            "connecting to vsock {cid}:{port} (the host's config service): is this an Apple Hypervisor VM with a vsock device, and does the host listen on port {port}?"
        )
    })?;
    Ok(sock)
}

pub struct Applehv;

impl Provider for Applehv {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        runtime::util::run("modprobe", &["vsock"]).context("loading the vsock kernel module (needed for the host channel of Apple Hypervisor VMs)")?;
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
    use std::io::{Read, Write};
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
        // Header names are case-insensitive (ureq sends them in lower case).
        let req = String::from_utf8(req).unwrap().to_ascii_lowercase();
        assert!(req.starts_with("get / http/1.1\r\n"), "{req}");
        assert!(req.contains("\r\naccept: application/json\r\n"), "{req}");
        assert!(req.contains("\r\nhost: d\r\n"), "{req}");
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
        // ureq's wording: "chunk length cannot be read as a number".
        assert!(e.contains("chunk length"), "{e}");
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
