//! Plain-HTTP connections from a privileged source port (1–1023), for metadata services that
//! answer only such clients (Scaleway: only root on the instance may read the user data).
//! A ureq connector that binds a random port below 1024 before connecting (needs root or
//! `CAP_NET_BIND_SERVICE`); the transport is [`super::stream`]'s. No TLS, no proxy, no
//! connection reuse.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;

use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrStorage, bind, connect, setsockopt, socket, sockopt,
};
use ureq::unversioned::transport::{ConnectionDetails, Connector, Either, Transport};

use super::stream::StreamTransport;

/// Tries of a random source port before giving up (others may be in use).
const PORT_TRIES: usize = 16;

#[derive(Debug, Default)]
pub struct LowPortConnector;

impl<In: Transport> Connector<In> for LowPortConnector {
    type Out = Either<In, StreamTransport<TcpStream>>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(t) = chained {
            return Ok(Some(Either::A(t)));
        }
        if details.needs_tls() {
            return Err(ureq::Error::BadUri(format!(
                "{}: connections from a privileged source port are plain HTTP only",
                details.uri
            )));
        }
        let timeout = details
            .timeout
            .not_zero()
            .map(|d| *d)
            .filter(|d| !d.is_zero());
        let mut last = None;
        for addr in details.addrs.iter() {
            match connect_from_low_port(*addr, timeout) {
                Ok(s) => return Ok(Some(Either::B(StreamTransport::new(s, details.config)))),
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or(ureq::Error::ConnectionFailed, ureq::Error::Io))
    }
}

/// A TCP connection to `to` from a random port in 1..=1023; `timeout` bounds the connect.
fn connect_from_low_port(
    to: SocketAddr,
    timeout: Option<std::time::Duration>,
) -> io::Result<TcpStream> {
    let family = if to.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let mut last = io::Error::other("no source port tried");
    for _ in 0..PORT_TRIES {
        let fd: OwnedFd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
        let port = 1 + (uuid::Uuid::new_v4().as_u128() % 1023) as u16;
        let local: SocketAddr = if to.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, port).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, port).into()
        };
        if let Err(e) = bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &SockaddrStorage::from(local),
        ) {
            last = io::Error::from(e);
            if e == nix::errno::Errno::EADDRINUSE {
                continue;
            }
            return Err(io::Error::new(
                last.kind(),
                format!("binding source port {port} (needs root): {last}"),
            ));
        }
        // A blocking connect honours the send time-out (Linux).
        if let Some(t) = timeout {
            let tv = nix::sys::time::TimeVal::new(t.as_secs() as _, t.subsec_micros() as _);
            setsockopt(&fd, sockopt::SendTimeout, &tv)?;
        }
        match connect(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &SockaddrStorage::from(to),
        ) {
            Ok(()) => {
                let s = TcpStream::from(fd);
                s.set_write_timeout(None)?;
                return Ok(s);
            }
            Err(nix::errno::Errno::EADDRINUSE | nix::errno::Errno::EADDRNOTAVAIL) => {
                last = io::Error::from(nix::errno::Errno::EADDRINUSE);
                continue;
            }
            Err(nix::errno::Errno::EINPROGRESS | nix::errno::Errno::EAGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {to}: timed out"),
                ));
            }
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    Err(last)
}
