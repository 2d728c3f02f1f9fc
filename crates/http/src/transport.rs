//! A connection's transport: plain TCP or TLS over it, behind one type. What differs between
//! them (reading plaintext, flushing handshake records, writing a response, the close_notify)
//! is here; the connection's state machine (`event_loop`) does not ask which one it has.

use std::io::{IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use super::head::ScanState;
use super::pipes;
use super::response::{Body, Whole, sendfile};

/// A connection's socket, and its TLS session on HTTPS.
pub(super) enum Transport {
    Plain(TcpStream),
    Tls {
        sock: TcpStream,
        tls: Box<rustls::ServerConnection>,
    },
}

/// What a connection has read and not consumed yet, and what it knows of the socket's read
/// side.
#[derive(Default)]
pub(super) struct Input {
    /// Received plaintext not yet consumed.
    pub(super) buf: Vec<u8>,
    /// How far `buf` is scanned for the end of a head.
    pub(super) scan: ScanState,
    /// When the first byte of the current head arrived (set by any read that brings bytes
    /// while it is unset; cleared when a head is parsed).
    pub(super) head_start: Option<Instant>,
    /// The client sends nothing more.
    pub(super) eof: bool,
    /// The last read found the socket empty (it took less than it asked for): nothing the
    /// client sent was left unread then (plain connections; nginx's `read->ready`).
    pub(super) drained: bool,
    /// Bytes read after the last request and dropped (while writing its answer, or
    /// lingering).
    pub(super) discarded: usize,
}

/// A response being written: its head and body, and how far the socket took them.
pub(super) struct Out {
    /// The response head (unused when `whole` has it).
    pub(super) head: Vec<u8>,
    pub(super) body: Body,
    /// Plain output of a shared body: head and body in one memfd (see `FileBody`).
    pub(super) whole: Option<Arc<Whole>>,
    /// How much of head and body is written (TLS: handed to rustls).
    pub(super) pos: usize,
    /// Bytes of the response the socket took (TLS: records; plain: `pos`).
    pub(super) sent: usize,
    /// Bytes the client had acknowledged when the current window of the minimum send rate
    /// began.
    pub(super) delivered: usize,
    /// The connection closes after this response.
    pub(super) close_after: bool,
    /// TLS: the close_notify of a closing response is queued.
    pub(super) notified: bool,
    /// When the response was queued.
    pub(super) queued: Instant,
    /// What to report to the handler once it is written; None for a refused connection's.
    pub(super) finished: Option<Finished>,
}

/// What to report to the handler once a response is written.
pub(super) struct Finished {
    /// The response answers the connection's request (not a malformed or refused one).
    pub(super) has_req: bool,
    pub(super) bytes: usize,
    pub(super) started: Instant,
}

impl Out {
    /// Whether the connection is closed as soon as this response is written: `Connection:
    /// close` after a request read whole (not an error answer, which may leave a body
    /// unread), plain, nothing read after it and the socket found empty. Otherwise it
    /// lingers: closing with unread data would make the kernel answer it with a reset, which
    /// can cost the client the end of its answer.
    pub(super) fn closes_at_once(&self, input: &Input, plain: bool) -> bool {
        (input.drained || input.eof) && self.closes_at_once_if_drained(input, plain)
    }

    /// [`Out::closes_at_once`] but for whether the socket is known to be empty.
    fn closes_at_once_if_drained(&self, input: &Input, plain: bool) -> bool {
        self.close_after
            && plain
            && input.discarded == 0
            && input.buf.is_empty()
            && self.finished.as_ref().is_some_and(|f| f.has_req)
    }
}

/// Plaintext handed to rustls at a time, and only once it has sent what it held: one
/// record. A TLS connection whose client does not read holds at most this of its response,
/// encrypted (the body itself is shared and read from where it is).
const TLS_CHUNK: usize = 16 * 1024;

pub(super) fn would_block(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock
}

fn interrupted(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::Interrupted
}

impl Transport {
    /// A connection's transport: TLS when its listener has a configuration.
    pub(super) fn new(
        sock: TcpStream,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Result<Transport, rustls::Error> {
        Ok(match tls {
            None => Transport::Plain(sock),
            // rustls's own buffer limit (64 KiB) stays: a response is handed to it one
            // record at a time (`write_tls`).
            Some(cfg) => Transport::Tls {
                sock,
                tls: Box::new(rustls::ServerConnection::new(cfg)?),
            },
        })
    }

    pub(super) fn sock(&self) -> &TcpStream {
        match self {
            Transport::Plain(sock) | Transport::Tls { sock, .. } => sock,
        }
    }

    /// Plain: a shared body goes out from its memfd (sendfile, pipes); TLS encrypts it from
    /// memory.
    pub(super) fn is_plain(&self) -> bool {
        matches!(self, Transport::Plain(_))
    }

    /// TLS before the end of its handshake.
    pub(super) fn handshaking(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            Transport::Tls { tls, .. } => tls.is_handshaking(),
        }
    }

    /// Writes what TLS has queued (handshake records, an alert). Ok(true): all written;
    /// Ok(false): the socket is full. Plain: nothing to write.
    pub(super) fn flush(&mut self) -> std::io::Result<bool> {
        match self {
            Transport::Plain(_) => Ok(true),
            Transport::Tls { sock, tls } => flush_tls(tls, sock, &mut 0),
        }
    }

    /// Ends TLS with a close_notify, as far as the socket takes it (a closing connection
    /// whose handshake is done).
    pub(super) fn close_notify(&mut self) {
        if let Transport::Tls { sock, tls } = self
            && !tls.is_handshaking()
        {
            tls.send_close_notify();
            let _ = flush_tls(tls, sock, &mut 0);
        }
    }

    /// Shuts the socket's write side (a lingering close).
    pub(super) fn shutdown_write(&self) {
        let _ = self.sock().shutdown(Shutdown::Write);
    }

    /// Reads what the socket has into `input` (plaintext), up to `cap` bytes of buffer, in
    /// reads of at most `tmp`'s length. Err: the connection is broken.
    pub(super) fn fill(&mut self, input: &mut Input, cap: usize, tmp: &mut [u8]) -> Result<(), ()> {
        while input.buf.len() < cap && !input.eof {
            let want = (cap - input.buf.len()).min(tmp.len());
            let more = match self {
                Transport::Plain(sock) => read_plain(sock, input, want, tmp)?,
                Transport::Tls { sock, tls } => read_tls(tls, sock, input, tmp)?,
            };
            if !more {
                break;
            }
        }
        Ok(())
    }

    /// Writes the response in `out`. Ok(true): all written (and a closing TLS response's
    /// close_notify); Ok(false): the socket is full.
    pub(super) fn write(
        &mut self,
        out: &mut Out,
        input: &mut Input,
        pipes: &mut pipes::Loop,
    ) -> std::io::Result<bool> {
        match self {
            Transport::Plain(sock) => write_plain(sock, out, input, pipes),
            Transport::Tls { sock, tls } => write_tls(tls, sock, out),
        }
    }
}

/// One read of a plain socket. Ok(false): no more to read now.
fn read_plain(
    sock: &mut TcpStream,
    input: &mut Input,
    want: usize,
    tmp: &mut [u8],
) -> Result<bool, ()> {
    // Never more than `cap`, and no spare capacity beyond it: a connection's buffer is at
    // most the head size limit (docs/serve.md).
    match sock.read(&mut tmp[..want]) {
        Ok(0) => input.eof = true,
        Ok(n) => {
            input.drained = n < want;
            input.buf.reserve_exact(n);
            input.buf.extend_from_slice(&tmp[..n]);
            if n < tmp.len() {
                return Ok(false);
            }
        }
        Err(e) if would_block(&e) => {
            input.drained = true;
            return Ok(false);
        }
        Err(e) if interrupted(&e) => {}
        Err(_) => return Err(()),
    }
    Ok(true)
}

/// One read of TLS records and the plaintext they hold. Ok(false): no more to read now.
fn read_tls(
    t: &mut rustls::ServerConnection,
    sock: &mut TcpStream,
    input: &mut Input,
    tmp: &mut [u8],
) -> Result<bool, ()> {
    match t.read_tls(sock) {
        Ok(0) => input.eof = true,
        Ok(_) => {}
        Err(e) if would_block(&e) => return Ok(false),
        Err(e) if interrupted(&e) => return Ok(true),
        Err(_) => return Err(()),
    }
    if t.process_new_packets().is_err() {
        // Send the alert rustls queued, then give up.
        let _ = flush_tls(t, sock, &mut 0);
        return Err(());
    }
    loop {
        match t.reader().read(tmp) {
            Ok(0) => {
                // close_notify: the client sends nothing more.
                input.eof = true;
                break;
            }
            Ok(n) => input.buf.extend_from_slice(&tmp[..n]),
            Err(e) if would_block(&e) => break,
            Err(_) => {
                input.eof = true;
                break;
            }
        }
    }
    Ok(true)
}

/// Writes rustls's pending records, adding the bytes the socket took to `sent`. Ok(true):
/// all written; Ok(false): the socket is full.
fn flush_tls(
    t: &mut rustls::ServerConnection,
    sock: &mut TcpStream,
    sent: &mut usize,
) -> std::io::Result<bool> {
    while t.wants_write() {
        match t.write_tls(sock) {
            Ok(n) => *sent += n,
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) if interrupted(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Writes the plain response. Ok(true): all written; Ok(false): the socket is full.
///
/// When the connection is closed at once after it (see [`Out::closes_at_once`]), its end is
/// sent with MSG_MORE / SPLICE_F_MORE: the kernel holds the last segment back and the close
/// sends it together with the FIN, one segment (and the client's processing of it) fewer.
fn write_plain(
    sock: &mut TcpStream,
    out: &mut Out,
    input: &mut Input,
    pipes: &mut pipes::Loop,
) -> std::io::Result<bool> {
    if out.pos == 0 && !input.drained && out.closes_at_once_if_drained(input, true) {
        // The last read did not find the socket empty, or is old (a deferred answer's client
        // had time to send more): one more read, before the answer, decides. Closing with
        // bytes unread would reset the connection and drop what the kernel held back.
        let mut probe = [0u8; 512];
        match sock.read(&mut probe) {
            Err(e) if would_block(&e) => input.drained = true,
            Err(e) if interrupted(&e) => {}
            // Broken: nothing more will come.
            Ok(0) | Err(_) => input.eof = true,
            Ok(n) => input.discarded += n,
        }
    }
    let last = out.closes_at_once(input, true);
    loop {
        let head = match &out.whole {
            Some(w) => &w.head,
            None => &out.head,
        };
        let total = head.len() + out.body.len();
        if out.pos >= total {
            return Ok(true);
        }
        match send_plain(sock, out, head, total, last, pipes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                out.pos += n;
                out.sent = out.pos;
            }
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) if interrupted(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// One send of the rest of a plain response (of `total` bytes, `head` first); `last`: the
/// connection closes at once after it.
fn send_plain(
    sock: &TcpStream,
    out: &Out,
    head: &[u8],
    total: usize,
    last: bool,
    pipes: &mut pipes::Loop,
) -> std::io::Result<usize> {
    use nix::sys::socket::MsgFlags;
    let more = MsgFlags::from_bits_retain(nix::libc::MSG_MORE) | MsgFlags::MSG_NOSIGNAL;
    let pos = out.pos;
    match (&out.whole, &out.body) {
        // From the start: through this loop's pipe copy when it keeps one (see `pipes`); the
        // rest of a response the socket took only part of, and whatever that cannot take,
        // from the memfd.
        (Some(w), Body::File(f)) => match (pos == 0)
            .then(|| pipes.send(sock, w, &[&w.head, &f.bytes], last))
            .flatten()
        {
            Some(r) => r.map_err(std::io::Error::from),
            None => sendfile(sock, &w.fd, pos, total - pos),
        },
        (Some(w), _) => sendfile(sock, &w.fd, pos, total - pos),
        // The head, held back (MSG_MORE) to leave in the same segment as the body's start.
        (None, Body::File(_)) if pos < head.len() => {
            nix::sys::socket::send(sock.as_raw_fd(), &head[pos..], more)
                .map_err(std::io::Error::from)
        }
        (None, Body::File(f)) => {
            let from = pos - head.len();
            sendfile(sock, &f.fd, from, f.bytes.len() - from)
        }
        // From memory: the head's rest and the body's pieces, shared, never copied.
        (None, body) => {
            let mut bufs = [IoSlice::new(&[]); 16];
            let mut n = 0;
            if pos < head.len() {
                bufs[0] = IoSlice::new(&head[pos..]);
                n = 1;
            }
            let from = pos.saturating_sub(head.len());
            n += body.slices_from(from, usize::MAX, &mut bufs[n..]);
            if last {
                nix::sys::socket::sendmsg::<()>(sock.as_raw_fd(), &bufs[..n], &[], more, None)
                    .map_err(std::io::Error::from)
            } else {
                (&*sock).write_vectored(&bufs[..n])
            }
        }
    }
}

/// Writes the TLS response: encrypts the next [`TLS_CHUNK`] of it only once the socket has
/// taken everything before. Ok(true): all written (and the close_notify of a closing
/// response); Ok(false): the socket is full.
fn write_tls(
    t: &mut rustls::ServerConnection,
    sock: &mut TcpStream,
    out: &mut Out,
) -> std::io::Result<bool> {
    let total = out.head.len() + out.body.len();
    loop {
        if !flush_tls(t, sock, &mut out.sent)? {
            return Ok(false);
        }
        if out.pos >= total {
            if out.close_after && !out.notified {
                t.send_close_notify();
                out.notified = true;
                continue;
            }
            return Ok(true);
        }
        let mut bufs = [IoSlice::new(&[]); 16];
        let mut n = 0;
        let mut left = TLS_CHUNK;
        if out.pos < out.head.len() {
            let h = &out.head[out.pos..];
            let take = h.len().min(left);
            bufs[0] = IoSlice::new(&h[..take]);
            n = 1;
            left -= take;
        }
        let from = out.pos.saturating_sub(out.head.len());
        n += out.body.slices_from(from, left, &mut bufs[n..]);
        match t.writer().write_vectored(&bufs[..n]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(w) => out.pos += w,
            Err(e) => return Err(e),
        }
    }
}
