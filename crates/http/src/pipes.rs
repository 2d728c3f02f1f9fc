//! Sending one shared response to many sockets through pipes.
//!
//! Each event loop keeps a hot response in a pipe of its own (a "master"), written there
//! several times over. Sending it is splice(2) of one copy from the master's scratch pipe
//! into the socket; when the scratch pipe is empty, one tee(2) refills it with every copy in
//! the master (tee only takes page references). sendfile(2) from the memfd does the same
//! in one call but looks every page up in the page cache on every send. Measured on the
//! serve benchmark (~54 KiB config, 100 keep-alive connections): see README "Speed".
//!
//! Bounded: a loop keeps masters for at most [`BUDGET`] bytes, only for responses of at most
//! [`MAX_LEN`] bytes, and only for a response it has been asked to send before (a stream of
//! ever-new responses never fills pipes). Whatever cannot go this way (no pipe could be
//! made, a bigger response, the rest of a response the socket did not take at once) goes
//! the memfd way.

use std::any::Any;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice, tee};

/// Largest response kept in a master pipe.
pub const MAX_LEN: usize = 256 * 1024;
/// Bytes a master holds at most (as many copies of its response as fit, at least one).
const MASTER_BYTES: usize = 256 * 1024;
/// Copies a master holds at most (a small response is not copied thousands of times).
const MAX_COPIES: usize = 16;
/// Bytes of masters each event loop keeps.
pub const BUDGET: usize = 2 * 1024 * 1024;
/// Descriptors a loop's masters hold at most: two pipes each.
pub const MAX_FDS: usize = 4 * MAX_MASTERS;
/// Masters a loop keeps at most.
const MAX_MASTERS: usize = 16;
/// Responses remembered as asked for once (the second ask gets a master).
const SEEN: usize = 16;

struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl Pipe {
    /// A non-blocking pipe that holds at least `len` bytes.
    fn new(len: usize) -> Option<Pipe> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).ok()?;
        // The default (16 pages) may be enough; the kernel rounds the size up to a power
        // of two pages.
        if len > 16 * 4096 {
            let size = i32::try_from(len).ok()?;
            fcntl(&w, FcntlArg::F_SETPIPE_SZ(size)).ok()?;
        }
        Some(Pipe { r, w })
    }
}

struct Master {
    /// Holds the response, so its address stays its identity while it is here.
    key: Arc<dyn Any + Send + Sync>,
    len: usize,
    /// Copies of the response in `pipe`.
    copies: usize,
    pipe: Pipe,
    /// Whole copies ready to splice, and the pipe they are in (None: to be made).
    scratch: Option<Pipe>,
    ready: usize,
}

impl Master {
    fn bytes(&self) -> usize {
        self.len * self.copies
    }
}

/// One event loop's masters (each loop owns one and passes it to [`Loop::send`]).
#[derive(Default)]
pub struct Loop {
    /// Most recently used last.
    masters: Vec<Master>,
    /// Addresses of responses asked for once without a master (compared, never followed).
    seen: Vec<usize>,
    /// A pipe could not be made: this loop sends the memfd way until then.
    off_until: Option<std::time::Instant>,
}

fn addr<T: ?Sized>(k: &Arc<T>) -> usize {
    Arc::as_ptr(k).cast::<()>() as usize
}

impl Loop {
    /// Sends `parts` (one response, `key`'s bytes: the same key always stands for the same
    /// bytes) from the start into `sock`. None: not this way (send it otherwise); else
    /// splice(2)'s result: the bytes the socket took, which may be fewer than all. `last`:
    /// the socket is closed right after (SPLICE_F_MORE: the kernel holds the end back to
    /// leave with the FIN, one segment fewer).
    pub fn send<K: Any + Send + Sync>(
        &mut self,
        sock: &impl AsFd,
        key: &Arc<K>,
        parts: &[&[u8]],
        last: bool,
    ) -> Option<nix::Result<usize>> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len == 0 || len > MAX_LEN {
            return None;
        }
        if let Some(t) = self.off_until {
            if std::time::Instant::now() < t {
                return None;
            }
            self.off_until = None;
        }
        let at = self.master(key, parts, len)?;
        let m = &mut self.masters[at];
        if m.ready == 0 {
            if m.scratch.is_none() {
                m.scratch = Pipe::new(m.bytes());
                if m.scratch.is_none() {
                    // Out of descriptors or pipe pages, maybe for a moment: try again later.
                    self.off_until =
                        Some(std::time::Instant::now() + std::time::Duration::from_secs(1));
                    return None;
                }
            }
            let scratch = m.scratch.as_ref()?;
            let all = m.bytes();
            match tee(&m.pipe.r, &scratch.w, all, SpliceFFlags::SPLICE_F_NONBLOCK) {
                Ok(n) if n == all => m.ready = m.copies,
                _ => {
                    m.scratch = None;
                    return None;
                }
            }
        }
        let scratch = m.scratch.as_ref()?;
        let mut flags = SpliceFFlags::SPLICE_F_NONBLOCK;
        if last {
            flags |= SpliceFFlags::SPLICE_F_MORE;
        }
        let res = splice(&scratch.r, None, sock, None, len, flags);
        if res == Ok(len) {
            m.ready -= 1;
        } else {
            // Part of a copy may be left at the front of the scratch pipe: a new one next.
            m.scratch = None;
            m.ready = 0;
        }
        Some(res)
    }

    /// The index of `key`'s master, made if it was asked for before. None: not (yet) kept.
    fn master<K: Any + Send + Sync>(
        &mut self,
        key: &Arc<K>,
        parts: &[&[u8]],
        len: usize,
    ) -> Option<usize> {
        let a = addr(key);
        if let Some(i) = self.masters.iter().position(|m| addr(&m.key) == a) {
            if i + 1 != self.masters.len() {
                let m = self.masters.remove(i);
                self.masters.push(m);
            }
            return Some(self.masters.len() - 1);
        }
        match self.seen.iter().position(|&s| s == a) {
            Some(i) => {
                self.seen.remove(i);
            }
            None => {
                if self.seen.len() == SEEN {
                    self.seen.remove(0);
                }
                self.seen.push(a);
                return None;
            }
        }
        let copies = (MASTER_BYTES / len).clamp(1, MAX_COPIES);
        let pipe = Pipe::new(len * copies)?;
        let mut all = Vec::with_capacity(len * copies);
        for _ in 0..copies {
            for p in parts {
                all.extend_from_slice(p);
            }
        }
        // The pipe holds them all, so a non-blocking write takes it all.
        std::io::Write::write_all(&mut std::fs::File::from(pipe.w.try_clone().ok()?), &all).ok()?;
        let mut held: usize = self.masters.iter().map(Master::bytes).sum();
        while (held + len * copies > BUDGET || self.masters.len() >= MAX_MASTERS)
            && !self.masters.is_empty()
        {
            held -= self.masters.remove(0).bytes();
        }
        let key: Arc<dyn Any + Send + Sync> = key.clone();
        self.masters.push(Master {
            key,
            len,
            copies,
            pipe,
            scratch: None,
            ready: 0,
        });
        Some(self.masters.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// Bytes waiting in a pipe.
    fn pending(p: &Pipe) -> usize {
        use std::os::fd::AsRawFd;
        let mut n: nix::libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int to the valid, exclusively borrowed `n`.
        let r = unsafe { nix::libc::ioctl(p.r.as_raw_fd(), nix::libc::FIONREAD, &mut n) };
        assert_eq!(r, 0);
        n as usize
    }

    /// The most recent master's scratch pipe holds exactly its ready copies.
    fn check_scratch(l: &Loop) -> usize {
        let m = l.masters.last().unwrap();
        let held = m.scratch.as_ref().map_or(0, pending);
        assert_eq!(held, m.ready * m.len);
        m.ready
    }

    #[test]
    fn every_send_has_the_same_bytes() {
        let mut l = Loop::default();
        let (mut rx, tx) = pair();
        let key = Arc::new(());
        let head = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        let body: Vec<u8> = (0..60_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let len = head.len() + body.len();
        // More sends than the master holds copies: the scratch pipe is refilled.
        let sends = 2 * (MASTER_BYTES / len) + 3;
        let reader = std::thread::spawn(move || {
            let mut got = vec![0; sends * len];
            rx.read_exact(&mut got).unwrap();
            got
        });
        // First ask: remembered, not kept.
        assert!(l.send(&tx, &key, &[&head, &body], false).is_none());
        let mut refills = 0;
        let mut last = 0;
        for _ in 1..sends {
            // A blocking socket takes it all.
            assert_eq!(l.send(&tx, &key, &[&head, &body], false).unwrap(), Ok(len));
            let ready = check_scratch(&l);
            if ready > last {
                refills += 1;
            }
            last = ready;
        }
        assert!(refills >= 2, "{refills}");
        // The first send went the other way; the test writes it itself.
        std::io::Write::write_all(&mut &tx, &head).unwrap();
        std::io::Write::write_all(&mut &tx, &body).unwrap();
        let got = reader.join().unwrap();
        for r in got.chunks(len) {
            assert_eq!(&r[..head.len()], &head[..]);
            assert_eq!(&r[head.len()..], &body[..]);
        }
    }

    #[test]
    fn bounded_by_size_and_budget() {
        let mut l = Loop::default();
        let (_rx, tx) = pair();
        // Nobody reads: what the socket does not take is dropped.
        tx.set_nonblocking(true).unwrap();
        let big = vec![0u8; MAX_LEN + 1];
        let key = Arc::new(());
        assert!(l.send(&tx, &key, &[&big], false).is_none());
        assert!(l.send(&tx, &key, &[&big], false).is_none());
        // Many different responses: the masters never hold more than the budget.
        let part = vec![1u8; 200 * 1024];
        let keys: Vec<_> = (0..24).map(|_| Arc::new(())).collect();
        for k in &keys {
            let _ = l.send(&tx, k, &[&part], false);
            let _ = l.send(&tx, k, &[&part], false);
            assert!(l.masters.iter().map(Master::bytes).sum::<usize>() <= BUDGET);
            assert!(l.seen.len() <= SEEN);
        }
        // Many small ones: a bounded number of masters, each with a bounded number of copies.
        let small: Vec<_> = (0..40).map(|_| Arc::new(())).collect();
        for k in &small {
            let _ = l.send(&tx, k, &[b"HTTP/1.1 200 OK\r\n\r\nok"], false);
            let _ = l.send(&tx, k, &[b"HTTP/1.1 200 OK\r\n\r\nok"], false);
            assert!(l.masters.len() <= MAX_MASTERS);
            assert!(l.masters.iter().all(|m| m.copies <= MAX_COPIES));
        }
    }

    #[test]
    fn a_socket_that_takes_part_leaves_no_bytes_behind() {
        let mut l = Loop::default();
        let (rx, tx) = pair();
        // A small send buffer and nobody reading: the socket takes only part.
        nix::sys::socket::setsockopt(&tx, nix::sys::socket::sockopt::SndBuf, &4096).unwrap();
        nix::sys::socket::setsockopt(&rx, nix::sys::socket::sockopt::RcvBuf, &4096).unwrap();
        tx.set_nonblocking(true).unwrap();
        let key = Arc::new(());
        let body = vec![9u8; 100 * 1024];
        assert!(l.send(&tx, &key, &[&body], false).is_none());
        let mut sends = 0;
        loop {
            sends += 1;
            assert!(sends < 10_000, "the socket never filled");
            let res = l.send(&tx, &key, &[&body], false).unwrap();
            check_scratch(&l);
            match res {
                Ok(n) if n == body.len() => {}
                // Part of a copy stayed in the scratch pipe, which is dropped for a new one.
                Ok(_) => assert!(l.masters[0].scratch.is_none()),
                Err(e) => {
                    assert_eq!(e, Errno::EAGAIN);
                    assert!(l.masters[0].scratch.is_none());
                    break;
                }
            }
        }
        drop(rx);
    }
}
