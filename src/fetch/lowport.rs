//! Plain-HTTP connections from a privileged source port (1–1023), for metadata services that
//! answer only such clients (Scaleway: only root on the instance may read the user data).
//! A ureq connector that binds a random port below 1024 before connecting (needs root or
//! `CAP_NET_BIND_SERVICE`), and a transport over the socket; no TLS, no proxy, no
//! connection reuse.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;

use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrStorage, bind, connect, setsockopt, socket, sockopt,
};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
};

/// Tries of a random source port before giving up (others may be in use).
const PORT_TRIES: usize = 16;

#[derive(Debug, Default)]
pub struct LowPortConnector;

impl<In: Transport> Connector<In> for LowPortConnector {
    type Out = Either<In, LowPortTransport>;

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
                Ok(s) => {
                    let c = details.config;
                    let buffers = LazyBuffers::new(c.input_buffer_size(), c.output_buffer_size());
                    return Ok(Some(Either::B(LowPortTransport { stream: s, buffers })));
                }
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

/// One connection made by [`LowPortConnector`].
pub struct LowPortTransport {
    stream: TcpStream,
    buffers: LazyBuffers,
}

impl std::fmt::Debug for LowPortTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LowPortTransport")
    }
}

/// The time-out of `t` for one I/O call; a spent budget is a time-out error.
fn io_timeout(t: NextTimeout) -> Result<Option<std::time::Duration>, ureq::Error> {
    if t.after.is_zero() {
        return Err(ureq::Error::Timeout(t.reason));
    }
    Ok(t.not_zero().map(|d| *d))
}

fn map_io(e: io::Error, t: NextTimeout) -> ureq::Error {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ureq::Error::Timeout(t.reason),
        _ => ureq::Error::Io(e),
    }
}

impl Transport for LowPortTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let t = timeout.for_write();
        self.stream.set_write_timeout(io_timeout(t)?)?;
        let out = &self.buffers.output()[..amount];
        self.stream.write_all(out).map_err(|e| map_io(e, t))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let t = timeout.for_read();
        self.stream.set_read_timeout(io_timeout(t)?)?;
        let buf = self.buffers.input_append_buf();
        let n = loop {
            match self.stream.read(buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(map_io(e, t)),
            }
        };
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        // Never reused: each request binds a fresh privileged port.
        false
    }
}
