//! A ureq transport over any connected byte stream that can time out its reads and writes:
//! the TCP socket of [`super::lowport`] and the vsock socket of Apple HV's config channel
//! (`platform::applehv`), each made by its own connector. No TLS, no connection reuse.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use ureq::unversioned::transport::{Buffers, LazyBuffers, NextTimeout, Transport};

/// A connected stream whose reads and writes can time out.
pub trait TimedStream: Read + Write + Send + Sync + 'static {
    /// Sets the time-out of the next reads (None: wait for ever).
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// Sets the time-out of the next writes (None: wait for ever).
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl TimedStream for std::net::TcpStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_write_timeout(self, t)
    }
}

impl TimedStream for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_write_timeout(self, t)
    }
}

/// A stream socket of a family std has no type for (vsock), as a file descriptor.
pub struct Socket(pub std::fs::File);

impl Socket {
    fn set_timeout(&self, opt: SockTimeout, t: Option<Duration>) -> io::Result<()> {
        use nix::sys::socket::{setsockopt, sockopt};
        // Zero means "no time-out" to the kernel; a zero Duration would be an instant one.
        let t = t
            .map(|d| d.max(Duration::from_micros(1)))
            .unwrap_or_default();
        let tv = nix::sys::time::TimeVal::new(t.as_secs() as _, t.subsec_micros() as _);
        let fd = self.0.as_fd();
        match opt {
            SockTimeout::Read => setsockopt(&fd, sockopt::ReceiveTimeout, &tv)?,
            SockTimeout::Write => setsockopt(&fd, sockopt::SendTimeout, &tv)?,
        }
        Ok(())
    }
}

enum SockTimeout {
    Read,
    Write,
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl TimedStream for Socket {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_timeout(SockTimeout::Read, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_timeout(SockTimeout::Write, t)
    }
}

/// One connection: a stream and ureq's buffers.
pub struct StreamTransport<S> {
    stream: S,
    buffers: LazyBuffers,
}

impl<S> StreamTransport<S> {
    /// A transport over `stream` with the buffer sizes of `config`.
    pub fn new(stream: S, config: &ureq::config::Config) -> Self {
        let buffers = LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size());
        StreamTransport { stream, buffers }
    }
}

impl<S> std::fmt::Debug for StreamTransport<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamTransport")
    }
}

/// The time-out of `t` for one I/O call; a spent budget is a time-out error.
fn io_timeout(t: NextTimeout) -> Result<Option<Duration>, ureq::Error> {
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

impl<S: TimedStream> Transport for StreamTransport<S> {
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
        // Never reused: each connection serves one request.
        false
    }
}
