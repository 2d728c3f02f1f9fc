//! The event loops: epoll, accepting and handing connections between loops, and each
//! connection's state machine (read a head, answer it, write the response, linger).

use std::io::{IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

use super::admission::{
    AddressHold, Admission, ConnStats, Limits, SlowKey, WaitKey, abort_on_close, lock,
    set_socket_option, unacked,
};
use super::head::{REQUEST_KEPT, Request, Scan, ScanState, scan_head};
use super::response::{
    Answer, Body, Labels, Reply, Response, WHOLES_KEPT, Whole, Wholes, http_date, response_head,
    sendfile,
};
use crate::pipes;

/// How often each event loop checks its connections' deadlines.
const SWEEP: Duration = Duration::from_millis(100);
/// Times an event loop yields the CPU and looks for events again before it sleeps.
const SPIN: usize = 5;
/// Waits without spinning at most, after spins that found nothing (`Shard::poll`).
const SPIN_BACKOFF_MAX: u32 = 64;
/// Connections accepted per listener wake-up before other events get a turn.
const ACCEPT_BATCH: usize = 128;
/// Event tokens at or above this are listeners.
const LISTENER_BASE: u64 = u64::MAX - 64;
/// Descriptors an event loop holds besides its connections, at most: its epoll set and
/// eventfd, its whole-response memfds and its pipes (`crate::pipes`).
pub const LOOP_FDS: usize = 2 + WHOLES_KEPT + pipes::MAX_FDS;

/// The event token of a loop's inbox (connections other loops handed to it).
const INBOX: u64 = LISTENER_BASE - 1;
/// SO_SNDBUF of a connection (the kernel doubles it).
const SNDBUF: usize = 256 * 1024;
/// Bytes drained from a lingering connection before it is closed anyway.
const LINGER_BYTES: usize = 256 * 1024;

/// What answers requests. Each event loop keeps a [`Handler::Local`] of its own, made when
/// the loop starts and passed to every call the loop makes, so a handler keeps per-loop
/// state (clones, counter parts) without thread-locals.
pub trait Handler: Send + Sync + 'static {
    /// What one event loop keeps for the handler from one request to the next.
    type Local;
    /// What the handler labels its responses with (kept with each response and given back
    /// to [`Handler::done`]).
    type Labels: Labels;
    /// The value event loop number `index` (0, 1, ...) keeps.
    fn local(&self, index: usize) -> Self::Local;
    /// Answers `req` in `out`, which comes as `Response::new(200)` would (with buffers kept
    /// from earlier answers).
    fn handle(&self, local: &mut Self::Local, req: &Request, out: &mut Response<Self::Labels>);
    /// Called after each response is written (metrics, access log).
    fn done(
        &self,
        local: &mut Self::Local,
        req: Option<&Request>,
        resp: &Response<Self::Labels>,
        bytes: usize,
        took: Duration,
        peer: SocketAddr,
    );
}

/// A listening socket and, for HTTPS, its TLS configuration.
pub struct Listener {
    pub sock: TcpListener,
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Binds a listening socket with a deep backlog (a thundering herd of booting machines).
/// `defer_secs`: TCP_DEFER_ACCEPT (see [`defer_accept`]; 0: off).
pub fn bind(addr: SocketAddr, defer_secs: u32) -> Result<TcpListener> {
    use nix::sys::socket::{Backlog, listen};
    // std sets SO_REUSEADDR; calling listen() again on Linux raises the backlog.
    let l = TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
    listen(&l, Backlog::new(4096).unwrap_or(Backlog::MAXCONN))
        .with_context(|| format!("listening on {addr}"))?;
    // Accepted sockets inherit these from the listener (Linux copies the listener's socket
    // options into each connection it accepts), which saves two system calls per
    // connection. TCP_NODELAY: a response's last segment is not held back waiting for the
    // client's ACK. SO_SNDBUF (the kernel doubles it): room for a whole config of up to
    // ~256 KiB in one write, which the pipe path (`crate::pipes`) needs (measured: 64 KiB
    // cost a config of 150 KiB a third more CPU per request). A client that does not read
    // holds up to twice this of kernel memory (charged to the server's cgroup) until the
    // minimum send rate drops it.
    use nix::sys::socket::{setsockopt, sockopt};
    setsockopt(&l, sockopt::TcpNoDelay, &true)
        .with_context(|| format!("setting TCP_NODELAY on {addr}"))?;
    setsockopt(&l, sockopt::SndBuf, &SNDBUF)
        .with_context(|| format!("setting SO_SNDBUF on {addr}"))?;
    if defer_secs > 0 {
        defer_accept(&l, defer_secs)
            .with_context(|| format!("setting TCP_DEFER_ACCEPT on {addr}"))?;
    }
    Ok(l)
}

/// TCP_DEFER_ACCEPT of `secs` (`--defer-accept`, default 1): the kernel hands a connection to `accept`
/// once its first data (the request, a TLS ClientHello) has arrived, so an event loop wakes
/// once per connection instead of twice (once to accept, once more to read) and finds the
/// request there when it accepts. Measured on the fresh-connection herd of benches/fleet.sh:
/// server CPU per connection about 55 → 30 µs (nginx's `listen … deferred` does the same,
/// with the same 1 s). A client that connects and stays silent is handed over anyway once
/// the time is up (the kernel resends its SYN-ACK and the client's ACK completes it), and
/// from then on the header time-out and eviction apply as before.
fn defer_accept(l: &TcpListener, secs: u32) -> std::io::Result<()> {
    let secs = nix::libc::c_int::try_from(secs).unwrap_or(nix::libc::c_int::MAX);
    set_socket_option(
        l.as_raw_fd(),
        nix::libc::IPPROTO_TCP,
        nix::libc::TCP_DEFER_ACCEPT,
        &secs,
    )
}

/// accept4(2) of a non-blocking, close-on-exec connection with its peer's address, in one
/// system call (std's `accept` needs a second one to make the socket non-blocking).
fn accept_nonblocking(l: &TcpListener) -> std::io::Result<(TcpStream, SocketAddr)> {
    use nix::sys::socket::{SockaddrLike, SockaddrStorage};
    use std::os::fd::FromRawFd;
    // SAFETY: an all-zero sockaddr_storage is a valid value of that plain C struct.
    let mut addr: nix::libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<nix::libc::sockaddr_storage>() as nix::libc::socklen_t;
    // SAFETY: `addr` and `len` are valid, exclusively borrowed, and `len` is `addr`'s size;
    // the listener stays open for the duration of the call.
    let fd = unsafe {
        nix::libc::accept4(
            l.as_raw_fd(),
            (&raw mut addr).cast(),
            &mut len,
            nix::libc::SOCK_NONBLOCK | nix::libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: accept4 returned a new descriptor that nothing else owns.
    let sock = unsafe { TcpStream::from_raw_fd(fd) };
    // SAFETY: the kernel wrote a socket address of `len` bytes into `addr`.
    let peer = unsafe { SockaddrStorage::from_raw((&raw const addr).cast(), Some(len)) };
    let peer = match peer {
        Some(a) => match (a.as_sockaddr_in(), a.as_sockaddr_in6()) {
            (Some(v4), _) => SocketAddr::V4((*v4).into()),
            (_, Some(v6)) => SocketAddr::V6((*v6).into()),
            _ => return Err(std::io::Error::other("a connection that is not TCP/IP")),
        },
        None => return Err(std::io::Error::other("a connection without a peer address")),
    };
    Ok((sock, peer))
}

/// Stops a listening socket from taking new connections (used at shutdown).
pub fn stop_listener(l: &TcpListener) {
    let _ = nix::sys::socket::shutdown(l.as_raw_fd(), nix::sys::socket::Shutdown::Both);
}

/// The server shared by every event loop.
pub struct Server<H: Handler> {
    handler: Arc<H>,
    shutdown: Arc<AtomicBool>,
    adm: Admission,
}

impl<H: Handler> Server<H> {
    pub fn new(
        limits: Limits,
        handler: Arc<H>,
        stats: Arc<ConnStats>,
        shutdown: Arc<AtomicBool>,
    ) -> Arc<Self> {
        Arc::new(Server {
            handler,
            shutdown,
            adm: Admission::new(limits, stats),
        })
    }

    /// Starts `threads` event loops serving `listeners`. They return once shutdown is set and
    /// their connections are finished.
    pub fn start(
        self: &Arc<Self>,
        listeners: &[Listener],
        threads: usize,
    ) -> Result<Vec<std::thread::JoinHandle<()>>> {
        if listeners.len() as u64 >= u64::MAX - LISTENER_BASE {
            anyhow::bail!("too many listeners");
        }
        for l in listeners {
            l.sock
                .set_nonblocking(true)
                .context("making a listener non-blocking")?;
        }
        let threads = threads.max(1);
        let mut links = Vec::new();
        for _ in 0..threads {
            links.push(Link {
                inbox: Mutex::new(Inbox::default()),
                wake: nix::sys::eventfd::EventFd::from_flags(
                    nix::sys::eventfd::EfdFlags::EFD_CLOEXEC
                        | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
                )
                .context("creating an event fd")?,
            });
        }
        let links: Arc<[Link<H::Labels>]> = links.into();
        let loads: Arc<[AtomicUsize]> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
        if self.adm.stats.loops.set(loads.clone()).is_err() {
            anyhow::bail!("the server's loops were started before");
        }
        let mut handles = Vec::new();
        for i in 0..threads {
            let mut ls = Vec::new();
            for l in listeners {
                ls.push((
                    l.sock.try_clone().context("cloning a listener")?,
                    l.tls.clone(),
                ));
            }
            let epoll =
                Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).context("creating an epoll set")?;
            epoll
                .add(&links[i].wake, EpollEvent::new(EpollFlags::EPOLLIN, INBOX))
                .context("watching an event fd")?;
            let mut shard = Shard {
                srv: self.clone(),
                links: links.clone(),
                loads: loads.clone(),
                me: i,
                now: Instant::now(),
                date: String::new(),
                date_secs: 0,
                epoll,
                listeners: ls,
                listening: false,
                paused_until: None,
                spin_skip: 0,
                spin_backoff: 0,
                slots: Vec::new(),
                free: Vec::new(),
                live: 0,
                draining: false,
                last_accept_warning: None,
            };
            shard.listen(true).context("watching the listeners")?;
            handles.push(
                std::thread::Builder::new()
                    .name(format!("serve-{i}"))
                    .spawn(move || shard.run())
                    .context("starting an event-loop thread")?,
            );
        }
        Ok(handles)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for (the rest of) a request head, or for the TLS handshake.
    Head,
    /// The head is parsed: waiting for the rest of its body (`Conn::body`).
    Body,
    /// A response is being written.
    Writing,
    /// The last response is written and the write side shut: draining until the peer closes.
    Linger,
    /// The handler answers later (`Response::later`): the connection is out of the epoll set
    /// until its [`Reply`] arrives or the answer time-out passes.
    Deferred,
}

/// What to report to the handler once a response is written.
struct Finished {
    /// The response answers the connection's `req` (not a malformed or refused one).
    has_req: bool,
    bytes: usize,
    started: Instant,
}

struct Conn<L> {
    sock: TcpStream,
    peer: SocketAddr,
    tls: Option<Box<rustls::ServerConnection>>,
    /// Received plaintext not yet consumed.
    buf: Vec<u8>,
    scan: ScanState,
    phase: Phase,
    deadline: Instant,
    /// When the first byte of the current head arrived.
    head_start: Option<Instant>,
    /// Requests answered on this connection.
    served: u64,
    /// Key in the server's waiting set while waiting for a head.
    waiting: Option<WaitKey>,
    /// Holds a slot of max_connections.
    counted: bool,
    /// In `Phase::Body`: the body's length (reserved in the server's body budget) and when
    /// its request started.
    body: Option<(usize, Instant)>,
    /// What it counts for in the per-address map.
    address: AddressHold,
    /// A refused connection: answered 503 and closed.
    reject: bool,
    eof: bool,
    /// The last read found the socket empty (it took less than it asked for): nothing the
    /// client sent was left unread then (plain connections; nginx's `read->ready`).
    drained: bool,
    close_after: bool,
    /// Plain output: response head and body, and how much of both is written.
    out_head: Vec<u8>,
    out_body: Body,
    /// Plain output of a shared body: head and body in one memfd (see [`FileBody`]).
    out_whole: Option<Arc<Whole>>,
    /// How much of head and body is written (TLS: handed to rustls).
    out_pos: usize,
    /// TLS: bytes of the current response the socket took (plain: `out_pos`).
    sent: usize,
    /// Bytes of the current response the client had acknowledged when the current window of
    /// the minimum send rate began.
    delivered: usize,
    /// TLS: the close_notify of a closing response is queued.
    notified: bool,
    /// Key in the server's set of responses waiting for their client, while in it.
    slow: Option<SlowKey>,
    /// When the current response was queued.
    queued: Instant,
    /// The socket bytes of the current response, for the evicting thread (see
    /// `Admission::evict_slowest`); made when a response first waits for its client.
    shared_sent: Option<Arc<AtomicUsize>>,
    finished: Option<Finished>,
    /// The current request and its response, in buffers kept from one to the next.
    req: Request,
    resp: Response<L>,
    interest: Option<EpollFlags>,
    lingered: usize,
    /// Its event token (slot and epoch), which a [`Reply`] names.
    token: u64,
    /// Requests deferred so far: a reply names the one it answers, so a late reply (after
    /// the answer time-out) is not taken for the answer of a later request.
    ticket: u64,
    /// In `Phase::Deferred`: when the request started.
    deferred: Option<Instant>,
}

struct Slot<L> {
    epoch: u32,
    conn: Option<Box<Conn<L>>>,
}

/// A connection one event loop accepted and hands to another.
type Handoff = (TcpStream, SocketAddr, Option<Arc<rustls::ServerConfig>>);

/// What the event loops see of each other, to keep their connections even: whichever loop
/// wakes for the listener accepts, so one loop could end up with most of a burst of new
/// connections (measured: a 90/10 split of wrk's 100 keep-alive connections cut throughput
/// by a fifth) while the other idles.
struct Link<L> {
    inbox: Mutex<Inbox<L>>,
    /// Written after a push to the inbox; watched by the loop.
    wake: nix::sys::eventfd::EventFd,
}

struct Inbox<L> {
    handed: Vec<Handoff>,
    /// Answers of deferred requests: (connection token, ticket, response).
    replies: Vec<(u64, u64, Response<L>)>,
    /// The loop has returned (shutdown): nothing more may be handed to it.
    closed: bool,
}

impl<L> Default for Inbox<L> {
    fn default() -> Self {
        Inbox {
            handed: Vec::new(),
            replies: Vec::new(),
            closed: false,
        }
    }
}

/// The loop's side of a [`Reply`]: the connection it answers, by the loop's inbox and
/// event fd. Dropped unsent, it answers 500.
struct LoopReply<L: Labels> {
    links: Arc<[Link<L>]>,
    to: usize,
    token: u64,
    ticket: u64,
    sent: bool,
}

impl<L: Labels> Answer<L> for LoopReply<L> {
    fn send_boxed(mut self: Box<Self>, resp: Response<L>) {
        self.sent = true;
        self.push(resp);
    }
}

impl<L: Labels> LoopReply<L> {
    fn push(&self, resp: Response<L>) {
        let link = &self.links[self.to];
        {
            let mut inbox = lock(&link.inbox);
            if inbox.closed {
                return;
            }
            inbox.replies.push((self.token, self.ticket, resp));
            // A reply queued behind others needs no wake-up of its own: the loop takes them
            // all at once after the wake-up of the first (a writer answering a batch of
            // reports made a write to the event fd, and often a wake-up, for each).
            if inbox.replies.len() > 1 {
                return;
            }
        }
        if let Err(e) = link.wake.write(1) {
            // As in `hand`: the loop still looks at its inbox on its next sweep.
            log::error!("waking an event loop: {e}");
        }
    }
}

impl<L: Labels> Drop for LoopReply<L> {
    fn drop(&mut self) {
        if !self.sent {
            self.push(Response::text(
                500,
                "the request was dropped without an answer",
            ));
        }
    }
}

/// What one event loop keeps of its own from one event to the next, which no other thread
/// touches: made when the loop starts and passed to whatever needs it.
struct Local<L> {
    /// The read buffer: zeroed once, not on every read (measured: zeroing a 16 KiB array per
    /// read was 40% of the loop's own CPU time).
    scratch: Vec<u8>,
    /// The last whole responses (see [`Wholes`]).
    wholes: Wholes,
    /// Hot responses in pipes (see `crate::pipes`).
    pipes: pipes::Loop,
    /// The handler's own (see [`Handler::local`]).
    handler: L,
}

/// One event loop.
struct Shard<H: Handler> {
    srv: Arc<Server<H>>,
    /// Every loop's link and connection count (`ConnStats::loops`), and which is this loop's.
    links: Arc<[Link<H::Labels>]>,
    loads: Arc<[AtomicUsize]>,
    me: usize,
    /// When the current batch of events arrived, and its `Date` (see `tick`).
    now: Instant,
    date: String,
    date_secs: u64,
    epoll: Epoll,
    listeners: Vec<(TcpListener, Option<Arc<rustls::ServerConfig>>)>,
    listening: bool,
    paused_until: Option<Instant>,
    /// Waits left to skip spinning before, and the current length of that back-off
    /// (`Shard::poll`).
    spin_skip: u32,
    spin_backoff: u32,
    slots: Vec<Slot<H::Labels>>,
    free: Vec<usize>,
    live: usize,
    draining: bool,
    last_accept_warning: Option<Instant>,
}

fn token(idx: usize, epoch: u32) -> u64 {
    ((epoch as u64) << 32) | idx as u64
}

/// Writes rustls's pending records. Ok(true): all written; Ok(false): the socket is full.
fn flush_tls(t: &mut rustls::ServerConnection, sock: &mut TcpStream) -> std::io::Result<bool> {
    flush_tls_counted(t, sock, &mut 0)
}

/// [`flush_tls`], adding the bytes the socket took to `sent`.
fn flush_tls_counted(
    t: &mut rustls::ServerConnection,
    sock: &mut TcpStream,
    sent: &mut usize,
) -> std::io::Result<bool> {
    while t.wants_write() {
        match t.write_tls(sock) {
            Ok(n) => *sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn would_block(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock
}

impl<H: Handler> Shard<H> {
    fn listen(&mut self, on: bool) -> nix::Result<()> {
        if on == self.listening {
            return Ok(());
        }
        for (i, (l, _)) in self.listeners.iter().enumerate() {
            if on {
                self.epoll.add(
                    l,
                    EpollEvent::new(
                        EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE,
                        LISTENER_BASE + i as u64,
                    ),
                )?;
            } else {
                let _ = self.epoll.delete(l);
            }
        }
        self.listening = on;
        Ok(())
    }

    fn run(mut self) {
        let mut local = Local {
            scratch: vec![0; 16 * 1024],
            wholes: Wholes::default(),
            pipes: pipes::Loop::default(),
            handler: self.srv.handler.local(self.me),
        };
        let l = &mut local;
        let mut events = vec![EpollEvent::empty(); 256];
        self.tick();
        let mut next_sweep = self.now + SWEEP;
        loop {
            let wait = next_sweep.saturating_duration_since(self.now);
            let ms = (wait.as_millis() as u16).clamp(1, SWEEP.as_millis() as u16);
            let n = match self.poll(&mut events, ms) {
                Ok(n) => n,
                Err(Errno::EINTR) => 0,
                Err(e) => {
                    log::error!("waiting for events: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    0
                }
            };
            self.tick();
            for ev in &events[..n] {
                let data = ev.data();
                if data == INBOX {
                    self.take_inbox(l);
                    continue;
                }
                if data >= LISTENER_BASE {
                    self.accept(l, (data - LISTENER_BASE) as usize);
                    continue;
                }
                let (idx, epoch) = ((data & 0xffff_ffff) as usize, (data >> 32) as u32);
                let current = self
                    .slots
                    .get(idx)
                    .is_some_and(|s| s.epoch == epoch && s.conn.is_some());
                if current {
                    let readable = ev.events().intersects(
                        EpollFlags::EPOLLIN
                            | EpollFlags::EPOLLERR
                            | EpollFlags::EPOLLHUP
                            | EpollFlags::EPOLLRDHUP,
                    );
                    self.step(l, idx, readable);
                }
            }
            let now = self.now;
            if now >= next_sweep {
                self.take_inbox(l);
                self.sweep(l, now);
                next_sweep = now + SWEEP;
            }
            if self.paused_until.is_some_and(|t| now >= t) && !self.draining {
                self.paused_until = None;
                if let Err(e) = self.listen(true) {
                    log::error!("watching the listeners again: {e}");
                }
            }
            if self.srv.shutdown.load(Ordering::SeqCst) {
                if !self.draining {
                    self.drain(l);
                }
                self.take_inbox(l);
                if self.live == 0 {
                    let mut inbox = lock(&self.links[self.me].inbox);
                    if inbox.handed.is_empty() {
                        // Under the inbox lock: a connection is either taken or never
                        // handed here.
                        inbox.closed = true;
                        return;
                    }
                }
            }
        }
    }

    /// Reads the clocks, once per batch of events: deadlines, waiting times and the `Date`
    /// header go by this (request latencies are measured apart).
    fn tick(&mut self) {
        self.now = Instant::now();
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if secs != self.date_secs || self.date.is_empty() {
            self.date_secs = secs;
            self.date = http_date(secs);
        }
    }

    /// Waits up to `ms` for events. Before it sleeps, it gives the CPU away a few times and
    /// looks again: under load the next requests arrive within that, and a loop that does
    /// not sleep needs no wake-up, which saves both the server and its clients a switch
    /// each (measured: server CPU per request 10.1 → 8.6 µs on the serve benchmark; see
    /// README "Speed"). When no other task wants the CPU this costs a few microseconds per
    /// sleep, and spins that find nothing back off: a herd of fresh connections from slow
    /// clients (one request each, then a close) found nothing most times and paid for it
    /// (measured on benches/fleet.sh's herd: about a fifth of the server's CPU per
    /// connection).
    fn poll(&mut self, events: &mut [EpollEvent], ms: u16) -> nix::Result<usize> {
        if self.spin_skip > 0 {
            self.spin_skip -= 1;
        } else {
            for _ in 0..SPIN {
                let n = self.epoll.wait(events, EpollTimeout::ZERO)?;
                if n > 0 {
                    self.spin_backoff = 0;
                    return Ok(n);
                }
                std::thread::yield_now();
            }
            // Nothing came while spinning: skip the next 1, 2, 4, … (at most
            // SPIN_BACKOFF_MAX) waits' spins, until one finds events again.
            self.spin_backoff = (self.spin_backoff * 2).clamp(1, SPIN_BACKOFF_MAX);
            self.spin_skip = self.spin_backoff;
        }
        self.epoll.wait(events, EpollTimeout::from(ms))
    }

    /// Shutdown: stop accepting and close every connection that has no request in progress.
    fn drain(&mut self, l: &mut Local<H::Local>) {
        self.draining = true;
        let _ = self.listen(false);
        for idx in 0..self.slots.len() {
            let idle = self.slots[idx].conn.as_ref().is_some_and(|c| {
                !matches!(c.phase, Phase::Writing | Phase::Deferred) && c.head_start.is_none()
            });
            if idle {
                self.close(l, idx);
            }
        }
    }

    fn accept(&mut self, l: &mut Local<H::Local>, li: usize) {
        for _ in 0..ACCEPT_BATCH {
            if !self.listening {
                return;
            }
            let res = accept_nonblocking(&self.listeners[li].0);
            match res {
                Ok((sock, peer)) => {
                    let h = (sock, peer, self.listeners[li].1.clone());
                    let kept = match self.lighter() {
                        Some(to) => self.hand(to, h),
                        None => Err(h),
                    };
                    if let Err((sock, peer, tls)) = kept {
                        self.admit(l, sock, peer, tls);
                    }
                }
                Err(e) if would_block(&e) => return,
                Err(e) => match e.raw_os_error().map(Errno::from_raw) {
                    Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM) => {
                        // Out of descriptors or memory: make room and pause briefly.
                        self.srv.adm.evict_oldest();
                        let now = Instant::now();
                        if self
                            .last_accept_warning
                            .is_none_or(|t| now.duration_since(t) > Duration::from_secs(10))
                        {
                            log::warn!(
                                "accepting a connection: {e} (raise the open-files limit or lower --max-connections)"
                            );
                            self.last_accept_warning = Some(now);
                        }
                        let _ = self.listen(false);
                        self.paused_until = Some(now + Duration::from_millis(100));
                        return;
                    }
                    _ => {
                        if self.srv.shutdown.load(Ordering::SeqCst) {
                            return;
                        }
                    }
                },
            }
        }
    }

    /// Loop `i`'s connection count.
    fn load(&self, i: usize) -> &AtomicUsize {
        &self.loads[i]
    }

    /// Another loop with at least two connections fewer than this one, unless shutting down.
    fn lighter(&self) -> Option<usize> {
        if self.links.len() < 2 || self.draining || self.srv.shutdown.load(Ordering::Relaxed) {
            return None;
        }
        let mine = self.load(self.me).load(Ordering::Relaxed);
        let (to, load) = (0..self.links.len())
            .filter(|&i| i != self.me)
            .map(|i| (i, self.load(i).load(Ordering::Relaxed)))
            .min_by_key(|&(_, n)| n)?;
        (load + 2 <= mine).then_some(to)
    }

    /// Gives an accepted connection to loop `to`; Err gives it back when that loop has
    /// already returned (shutdown).
    fn hand(&self, to: usize, h: Handoff) -> Result<(), Handoff> {
        let link = &self.links[to];
        {
            let mut inbox = lock(&link.inbox);
            if inbox.closed {
                return Err(h);
            }
            self.load(to).fetch_add(1, Ordering::Relaxed);
            inbox.handed.push(h);
        }
        if let Err(e) = link.wake.write(1) {
            // Cannot happen (the counter would have to reach 2^64 - 1); the loop still
            // looks at its inbox on its next sweep.
            log::error!("waking an event loop: {e}");
        }
        Ok(())
    }

    /// Admits the connections other loops handed to this one.
    fn take_inbox(&mut self, l: &mut Local<H::Local>) {
        let link = &self.links[self.me];
        let _ = link.wake.read();
        let (handed, replies) = {
            let mut inbox = lock(&link.inbox);
            (
                std::mem::take(&mut inbox.handed),
                std::mem::take(&mut inbox.replies),
            )
        };
        for (token, ticket, resp) in replies {
            self.resume(l, token, ticket, resp);
        }
        let any = !handed.is_empty();
        for (sock, peer, tls) in handed {
            // Counted here by `hand` until now; counted again if it gets a slot.
            self.load(self.me).fetch_sub(1, Ordering::Relaxed);
            self.admit(l, sock, peer, tls);
        }
        if any && self.draining {
            // Handed over as the server began to shut down: like the rest, closed unless
            // a request is in progress.
            self.drain(l);
        }
    }

    /// Writes the answer of a deferred request, if its connection still waits for it.
    fn resume(
        &mut self,
        l: &mut Local<H::Local>,
        token: u64,
        ticket: u64,
        resp: Response<H::Labels>,
    ) {
        let (idx, epoch) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        if slot.epoch != epoch {
            return;
        }
        let Some(mut c) = slot.conn.take() else {
            return;
        };
        if c.phase == Phase::Deferred && c.ticket == ticket {
            let started = c.deferred.take().unwrap_or(self.now);
            c.resp = resp;
            // Not read while it waited: whatever the last read found is old news.
            c.drained = false;
            let keep = !c.req.close && !self.srv.shutdown.load(Ordering::Relaxed);
            let head_only = c.req.method() == "HEAD";
            self.queue(l, &mut c, true, keep, head_only, started);
            self.slots[idx].conn = Some(c);
            self.step(l, idx, false);
        } else {
            self.slots[idx].conn = Some(c);
        }
    }

    /// Takes on an accepted connection.
    fn admit(
        &mut self,
        l: &mut Local<H::Local>,
        sock: TcpStream,
        peer: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) {
        let srv = self.srv.clone();
        let ip = peer.ip().to_canonical();
        let address_ok = srv.adm.address_acquire(ip);
        let slot = address_ok && srv.adm.acquire_slot();
        let capped = srv.adm.limits.max_connections_per_address > 0;
        if address_ok && !slot && capped {
            srv.adm.address_release(ip, AddressHold::Active);
        }
        if !slot {
            srv.adm.stats.rejected.fetch_add(1, Ordering::Relaxed);
            if srv.adm.rejecting.fetch_add(1, Ordering::SeqCst) >= srv.adm.limits.reject_budget() {
                srv.adm.rejecting.fetch_sub(1, Ordering::SeqCst);
                return;
            }
        }
        let tls = match tls.map(rustls::ServerConnection::new) {
            None => None,
            // rustls's own buffer limit (64 KiB) stays: a response is handed to it one
            // record at a time (`flush_tls_response`).
            Some(Ok(t)) => Some(Box::new(t)),
            Some(Err(e)) => {
                log::error!("starting a TLS session: {e}");
                if slot {
                    srv.adm.stats.open.fetch_sub(1, Ordering::SeqCst);
                    if capped {
                        srv.adm.address_release(ip, AddressHold::Active);
                    }
                } else {
                    srv.adm.rejecting.fetch_sub(1, Ordering::SeqCst);
                }
                return;
            }
        };
        let now = self.now;
        let mut c = Box::new(Conn {
            sock,
            peer,
            tls,
            buf: Vec::new(),
            scan: ScanState::default(),
            phase: Phase::Head,
            deadline: now + srv.adm.limits.header_timeout,
            head_start: None,
            body: None,
            served: 0,
            waiting: None,
            counted: slot,
            address: if slot && capped {
                AddressHold::Active
            } else {
                AddressHold::None
            },
            reject: !slot,
            eof: false,
            drained: false,
            close_after: false,
            out_head: Vec::new(),
            out_body: Body::Empty,
            out_whole: None,
            out_pos: 0,
            sent: 0,
            delivered: 0,
            notified: false,
            slow: None,
            queued: now,
            shared_sent: None,
            finished: None,
            req: Request::default(),
            resp: Response::new(200),
            interest: None,
            lingered: 0,
            token: 0,
            ticket: 0,
            deferred: None,
        });
        if c.reject && c.tls.is_none() {
            self.queue_reject(l, &mut c);
        }
        // Not in the waiting set yet: the read below comes first, and a connection whose
        // request is not there whole joins it then (`drive`), evictable from then on.
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    epoch: 0,
                    conn: None,
                });
                self.slots.len() - 1
            }
        };
        c.token = token(idx, self.slots[idx].epoch);
        self.slots[idx].conn = Some(c);
        self.live += 1;
        self.load(self.me).fetch_add(1, Ordering::Relaxed);
        // Most clients send their request right after connecting: try to read it now.
        self.step(l, idx, true);
    }

    /// Runs a connection as far as it goes and updates its epoll registration.
    fn step(&mut self, l: &mut Local<H::Local>, idx: usize, readable: bool) {
        let Some(mut c) = self.slots[idx].conn.take() else {
            return;
        };
        match self.drive(l, &mut c, readable) {
            Some(want) if want.is_empty() => {
                // Deferred: no events until the answer comes.
                if c.interest.take().is_some() {
                    let _ = self.epoll.delete(&c.sock);
                }
                self.slots[idx].conn = Some(c);
            }
            Some(want) => {
                if c.interest != Some(want) {
                    let mut ev = EpollEvent::new(want, token(idx, self.slots[idx].epoch));
                    let res = if c.interest.is_some() {
                        self.epoll.modify(&c.sock, &mut ev)
                    } else {
                        self.epoll.add(&c.sock, ev)
                    };
                    if let Err(e) = res {
                        log::error!("watching a connection: {e}");
                        self.slots[idx].conn = Some(c);
                        self.close(l, idx);
                        return;
                    }
                    c.interest = Some(want);
                }
                self.slots[idx].conn = Some(c);
            }
            None => {
                self.slots[idx].conn = Some(c);
                self.close(l, idx);
            }
        }
    }

    fn close(&mut self, l: &mut Local<H::Local>, idx: usize) {
        let Some(mut c) = self.slots[idx].conn.take() else {
            return;
        };
        self.slots[idx].epoch = self.slots[idx].epoch.wrapping_add(1);
        self.free.push(idx);
        self.live -= 1;
        self.load(self.me).fetch_sub(1, Ordering::Relaxed);
        let srv = &self.srv;
        if let Some((n, _)) = c.body.take() {
            srv.adm.body_release(n);
        }
        // Leave the waiting set before the socket is closed (see `Admission::waiting`).
        if let Some(k) = c.waiting.take()
            && !srv.adm.wait_leave(k)
        {
            c.counted = false;
        }
        if let Some(k) = c.slow.take()
            && !srv.adm.slow_leave(k)
        {
            c.counted = false;
        }
        if c.counted {
            srv.adm.stats.open.fetch_sub(1, Ordering::SeqCst);
        }
        if c.reject {
            srv.adm.rejecting.fetch_sub(1, Ordering::SeqCst);
        }
        if c.address != AddressHold::None {
            srv.adm
                .address_release(c.peer.ip().to_canonical(), c.address);
        }
        if let Some(f) = c.finished.take() {
            // The response could not be written.
            let req = f.has_req.then_some(&c.req);
            srv.handler
                .done(&mut l.handler, req, &c.resp, 0, f.started.elapsed(), c.peer);
        }
        drop(c);
    }

    /// Checks deadlines.
    fn sweep(&mut self, l: &mut Local<H::Local>, now: Instant) {
        for idx in 0..self.slots.len() {
            let Some(c) = self.slots[idx].conn.as_mut() else {
                continue;
            };
            if now < c.deadline {
                continue;
            }
            match c.phase {
                Phase::Body => {
                    // The body did not arrive within the header time-out: say so, then close.
                    self.srv
                        .adm
                        .stats
                        .header_timeouts
                        .fetch_add(1, Ordering::Relaxed);
                    let started = c.body.take().map_or(now, |(n, s)| {
                        self.srv.adm.body_release(n);
                        s
                    });
                    self.time_out(
                        l,
                        idx,
                        Response::text(408, "the request body did not arrive in time"),
                        started,
                    );
                }
                Phase::Head => {
                    let handshaking = c.tls.as_ref().is_some_and(|t| t.is_handshaking());
                    if c.served == 0 || c.head_start.is_some() {
                        self.srv
                            .adm
                            .stats
                            .header_timeouts
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    if c.head_start.is_some() && !handshaking && !c.reject {
                        // Slow headers: say so, then close.
                        let started = c.head_start.unwrap_or(now);
                        self.time_out(l, idx, Response::new(408), started);
                    } else {
                        // Silent (or idle between requests): close quietly.
                        if let Some(t) = c.tls.as_mut()
                            && !handshaking
                        {
                            t.send_close_notify();
                            let _ = flush_tls(t, &mut c.sock);
                        }
                        self.close(l, idx);
                    }
                }
                Phase::Writing => {
                    // The minimum send rate: each window, a response in progress must have
                    // delivered (had acknowledged by the client) `min_send_rate` bytes per
                    // second of it, or be dropped. What the socket buffers is not counted as
                    // delivered, so the buffers cannot hide a client that does not read.
                    let limits = &self.srv.adm.limits;
                    let sent = if c.tls.is_some() { c.sent } else { c.out_pos };
                    let delivered = sent.saturating_sub(unacked(&c.sock));
                    let got = delivered.saturating_sub(c.delivered);
                    let secs = limits.send_window.as_secs_f64();
                    if (got as f64) < limits.min_send_rate as f64 * secs {
                        self.srv.adm.stats.too_slow.fetch_add(1, Ordering::Relaxed);
                        abort_on_close(c.sock.as_raw_fd());
                        self.close(l, idx);
                        continue;
                    }
                    c.delivered = delivered;
                    c.deadline = now + limits.send_window;
                }
                Phase::Linger => self.close(l, idx),
                Phase::Deferred => {
                    let started = c.deferred.take().unwrap_or(now);
                    let secs = self.srv.adm.limits.answer_timeout.as_secs();
                    self.time_out(
                        l,
                        idx,
                        Response::text(
                            503,
                            format!("no answer within {secs} s (the answer time-out); retry"),
                        )
                        .header("Retry-After", "5"),
                        started,
                    );
                }
            }
        }
    }

    /// Answers connection `idx` with `resp` (a 408) and closes it after; closes it at once
    /// when it was evicted meanwhile.
    fn time_out(
        &mut self,
        l: &mut Local<H::Local>,
        idx: usize,
        resp: Response<H::Labels>,
        started: Instant,
    ) {
        let Some(mut c) = self.slots[idx].conn.take() else {
            return;
        };
        let ours = self.leave_waiting(&mut c);
        if ours {
            c.resp = resp;
            self.queue(l, &mut c, false, false, false, started);
        }
        self.slots[idx].conn = Some(c);
        if ours {
            self.step(l, idx, false);
        } else {
            self.close(l, idx);
        }
    }

    /// Hands the parsed request (with its body, if any) to the handler and queues its answer.
    fn answer(&self, l: &mut Local<H::Local>, c: &mut Conn<H::Labels>, started: Instant) {
        let srv = &self.srv;
        c.resp.reset(200);
        c.req.peer = Some(c.peer.ip().to_canonical());
        srv.handler.handle(&mut l.handler, &c.req, &mut c.resp);
        if let Some(f) = c.resp.later.0.take() {
            c.ticket += 1;
            c.phase = Phase::Deferred;
            c.deferred = Some(started);
            c.deadline = self.now + srv.adm.limits.answer_timeout;
            f(Reply::new(LoopReply {
                links: self.links.clone(),
                to: self.me,
                token: c.token,
                ticket: c.ticket,
                sent: false,
            }));
            // The handler has what it needs of the body: not kept while the answer waits.
            if c.req.body.capacity() > REQUEST_KEPT {
                c.req.body = Vec::new();
            } else {
                c.req.body.clear();
            }
            return;
        }
        let keep = !c.req.close && !srv.shutdown.load(Ordering::Relaxed);
        let head_only = c.req.method() == "HEAD";
        self.queue(l, c, true, keep, head_only, started);
        if c.req.body.capacity() > REQUEST_KEPT {
            c.req.body = Vec::new();
        }
    }

    /// Leaves the waiting set; false when the connection was evicted meanwhile.
    fn leave_waiting(&self, c: &mut Conn<H::Labels>) -> bool {
        match c.waiting.take() {
            Some(k) if !self.srv.adm.wait_leave(k) => {
                c.counted = false;
                false
            }
            _ => true,
        }
    }

    fn queue_reject(&self, l: &mut Local<H::Local>, c: &mut Conn<H::Labels>) {
        c.resp = Response::text(503, "the server is at its connection limit; retry shortly")
            .header("Retry-After", "1");
        self.queue(l, c, false, false, false, self.now);
        // A refused connection is neither logged nor counted as a request.
        c.finished = None;
    }

    /// Queues `c.resp` and switches to writing it; `has_req`: it answers `c.req`.
    fn queue(
        &self,
        l: &mut Local<H::Local>,
        c: &mut Conn<H::Labels>,
        has_req: bool,
        keep: bool,
        head_only: bool,
        started: Instant,
    ) {
        let body = std::mem::replace(&mut c.resp.body, Body::Empty);
        let full_len = body.len();
        let send_body = !head_only && c.resp.status != 304;
        let sent_len = if send_body { full_len } else { 0 };
        let bytes;
        match c.tls.as_mut() {
            // Encrypted as the socket takes it (`flush_tls_response`).
            Some(_) => {
                response_head(&c.resp, keep, full_len, &self.date, &mut c.out_head);
                bytes = c.out_head.len() + sent_len;
                c.out_whole = None;
                c.out_body = if send_body { body } else { Body::Empty };
            }
            None => {
                c.out_whole = match &body {
                    Body::File(f) if send_body => {
                        l.wholes
                            .get(f, &c.resp, keep, (self.date_secs, &self.date), self.now)
                    }
                    _ => None,
                };
                // A whole response has its head; only others need one made.
                match &c.out_whole {
                    Some(w) => bytes = w.head.len() + sent_len,
                    None => {
                        response_head(&c.resp, keep, full_len, &self.date, &mut c.out_head);
                        bytes = c.out_head.len() + sent_len;
                    }
                }
                c.out_body = if send_body { body } else { Body::Empty };
            }
        }
        c.out_pos = 0;
        c.sent = 0;
        c.delivered = 0;
        c.queued = self.now;
        c.notified = false;
        c.finished = Some(Finished {
            has_req,
            bytes,
            started,
        });
        c.close_after = !keep;
        c.phase = Phase::Writing;
        // The end of the first window of the minimum send rate.
        c.deadline = self.now + self.srv.adm.limits.send_window;
    }

    /// Reads what the socket has (up to the head size limit). Err: the connection is broken.
    fn fill(&self, l: &mut Local<H::Local>, c: &mut Conn<H::Labels>) -> Result<(), ()> {
        let cap = self.srv.adm.limits.max_header_bytes + 4 + c.scan.start.unwrap_or(0);
        self.fill_with(c, cap, &mut l.scratch)
    }

    fn fill_with(&self, c: &mut Conn<H::Labels>, cap: usize, tmp: &mut [u8]) -> Result<(), ()> {
        let before = c.buf.len();
        let chunk = tmp.len();
        while c.buf.len() < cap && !c.eof {
            let want = (cap - c.buf.len()).min(chunk);
            match c.tls.as_mut() {
                // Never more than `cap`, and no spare capacity beyond it: a connection's
                // buffer is at most the head size limit (docs/serve.md).
                None => match c.sock.read(&mut tmp[..want]) {
                    Ok(0) => c.eof = true,
                    Ok(n) => {
                        c.drained = n < want;
                        c.buf.reserve_exact(n);
                        c.buf.extend_from_slice(&tmp[..n]);
                        if n < tmp.len() {
                            break;
                        }
                    }
                    Err(e) if would_block(&e) => {
                        c.drained = true;
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return Err(()),
                },
                Some(t) => {
                    match t.read_tls(&mut c.sock) {
                        Ok(0) => c.eof = true,
                        Ok(_) => {}
                        Err(e) if would_block(&e) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(_) => return Err(()),
                    }
                    if t.process_new_packets().is_err() {
                        // Send the alert rustls queued, then give up.
                        let _ = flush_tls(t, &mut c.sock);
                        return Err(());
                    }
                    loop {
                        match t.reader().read(tmp) {
                            Ok(0) => {
                                // close_notify: the client sends nothing more.
                                c.eof = true;
                                break;
                            }
                            Ok(n) => c.buf.extend_from_slice(&tmp[..n]),
                            Err(e) if would_block(&e) => break,
                            Err(_) => {
                                c.eof = true;
                                break;
                            }
                        }
                    }
                }
            }
        }
        if c.buf.len() > before && c.head_start.is_none() {
            // The start of the request's latency: not the batch's time, which may be a
            // while before this event's turn.
            let now = Instant::now();
            c.head_start = Some(now);
            if c.served > 0 {
                // A new head on a keep-alive connection: it has the header time-out from now.
                c.deadline = now + self.srv.adm.limits.header_timeout;
            }
        }
        Ok(())
    }

    /// Moves a connection forward. Some(events to wait for) or None to close it.
    fn drive(
        &self,
        l: &mut Local<H::Local>,
        c: &mut Conn<H::Labels>,
        mut readable: bool,
    ) -> Option<EpollFlags> {
        let srv = &self.srv;
        loop {
            match c.phase {
                Phase::Head => {
                    let mut scan = if c.buf.is_empty() {
                        Scan::More
                    } else {
                        scan_head(&c.buf, &mut c.scan, srv.adm.limits.max_header_bytes)
                    };
                    if scan == Scan::More && readable {
                        readable = false;
                        self.fill(l, c).ok()?;
                        if !c.buf.is_empty() {
                            scan = scan_head(&c.buf, &mut c.scan, srv.adm.limits.max_header_bytes);
                        }
                    }
                    if let Some(t) = c.tls.as_mut() {
                        // Handshake records (or an alert) to send.
                        let sent = flush_tls(t, &mut c.sock).ok()?;
                        if t.is_handshaking() {
                            if c.eof {
                                return None;
                            }
                            self.enter_waiting(c);
                            return Some(if sent {
                                EpollFlags::EPOLLIN
                            } else {
                                EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT
                            });
                        }
                        if c.reject {
                            // The handshake is done: answer in the listener's protocol.
                            self.queue_reject(l, c);
                            continue;
                        }
                        if !sent {
                            self.enter_waiting(c);
                            return Some(EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT);
                        }
                    }
                    match scan {
                        Scan::More => {
                            if c.eof || c.reject {
                                return None;
                            }
                            self.enter_waiting(c);
                            return Some(EpollFlags::EPOLLIN);
                        }
                        Scan::Bad(status) => {
                            if !self.leave_waiting(c) {
                                return None;
                            }
                            let started = c.head_start.unwrap_or_else(Instant::now);
                            c.resp.reset(status);
                            self.queue(l, c, false, false, false, started);
                        }
                        Scan::Head { start, end, next } => {
                            if !self.leave_waiting(c) {
                                return None;
                            }
                            let started = c.head_start.unwrap_or_else(Instant::now);
                            let parsed =
                                c.req.parse(&c.buf[start..end], srv.adm.limits.max_headers);
                            c.buf.drain(..next);
                            if c.buf.capacity() > REQUEST_KEPT {
                                // A large head (or leading empty lines) is not kept while its
                                // response is written: what is left is the next head's start.
                                c.buf.shrink_to(REQUEST_KEPT);
                            }
                            c.scan = ScanState::default();
                            c.head_start = None;
                            match parsed {
                                Ok(()) => match c.req.body_len(srv.adm.limits.max_body_bytes) {
                                    Err((status, why)) => {
                                        c.resp = Response::text(status, &why);
                                        self.queue(l, c, false, false, false, started);
                                    }
                                    Ok(0) => self.answer(l, c, started),
                                    Ok(n) if srv.adm.body_reserve(n) => {
                                        c.body = Some((n, started));
                                        c.phase = Phase::Body;
                                    }
                                    Ok(_) => {
                                        c.resp = Response::text(
                                            503,
                                            "the server is reading as many request bodies as it holds (--max-body-total); retry shortly",
                                        )
                                        .header("Retry-After", "1");
                                        self.queue(l, c, false, false, false, started);
                                    }
                                },
                                Err(status) => {
                                    c.resp.reset(status);
                                    self.queue(l, c, false, false, false, started);
                                }
                            }
                        }
                    }
                }
                Phase::Body => {
                    let (need, started) = c.body.expect("a body phase has its length");
                    if c.buf.len() < need && readable {
                        readable = false;
                        self.fill_with(c, need, &mut l.scratch).ok()?;
                    }
                    if c.buf.len() < need {
                        if c.eof {
                            return None;
                        }
                        // Within the header time-out from the head's first byte, evictable
                        // at the connection limit like a head still coming.
                        self.enter_waiting(c);
                        return Some(EpollFlags::EPOLLIN);
                    }
                    if !self.leave_waiting(c) {
                        return None;
                    }
                    c.body = None;
                    srv.adm.body_release(need);
                    c.req.body.clear();
                    c.req.body.extend_from_slice(&c.buf[..need]);
                    c.buf.drain(..need);
                    self.answer(l, c, started);
                }
                Phase::Writing => {
                    let done = match c.tls {
                        Some(_) => flush_tls_response(c),
                        None => flush_plain(c, &mut l.pipes),
                    };
                    match done {
                        Err(_) => return None,
                        Ok(false) => {
                            // Waiting for the client: the deadline stays the end of the
                            // current window of the minimum send rate (see `sweep`), and at
                            // the connection limit it may be evicted, slowest first.
                            let sent = if c.tls.is_some() { c.sent } else { c.out_pos };
                            match (&c.slow, &c.shared_sent) {
                                (Some(_), Some(s)) => s.store(sent, Ordering::Relaxed),
                                _ if c.counted => {
                                    let s = c.shared_sent.get_or_insert_default();
                                    s.store(sent, Ordering::Relaxed);
                                    let s = s.clone();
                                    c.slow = Some(srv.adm.slow_enter(
                                        self.me,
                                        c.sock.as_raw_fd(),
                                        c.queued,
                                        s,
                                    ));
                                }
                                _ => {}
                            }
                            return Some(EpollFlags::EPOLLOUT);
                        }
                        Ok(true) => {}
                    }
                    if let Some(k) = c.slow.take()
                        && !srv.adm.slow_leave(k)
                    {
                        // Evicted meanwhile: its slot went to another connection.
                        c.counted = false;
                        return None;
                    }
                    c.out_head.clear();
                    c.out_body = Body::Empty;
                    c.out_whole = None;
                    let now = Instant::now();
                    let at_once = closes_at_once(c);
                    if let Some(f) = c.finished.take() {
                        srv.handler.done(
                            &mut l.handler,
                            f.has_req.then_some(&c.req),
                            &c.resp,
                            f.bytes,
                            now.saturating_duration_since(f.started),
                            c.peer,
                        );
                        c.served += 1;
                    }
                    if c.req.text.capacity() > REQUEST_KEPT {
                        // A large head is not kept once it is answered.
                        c.req = Request::default();
                    }
                    // The request was read whole and nothing follows it: close at once, as
                    // nginx does (`closes_at_once`; anything else lingers below).
                    if c.close_after && (c.eof || at_once) {
                        return None;
                    }
                    // No request in progress any more and the connection stays (lingering
                    // or keep-alive): evictable again.
                    self.enter_waiting(c);
                    if c.close_after {
                        // The client has its whole answer: a lingering connection no longer
                        // counts against its address, so a client that opens its next
                        // connection as soon as it reads the end is not refused. Lingering
                        // ones have a cap of their own (an address that leaves more open is
                        // closed on at once).
                        if c.address == AddressHold::Active {
                            if !srv.adm.address_linger(c.peer.ip().to_canonical()) {
                                c.address = AddressHold::None;
                                return None;
                            }
                            c.address = AddressHold::Lingering;
                        }
                        // Lingering close: the client reads our answer, not a reset.
                        let _ = c.sock.shutdown(Shutdown::Write);
                        c.phase = Phase::Linger;
                        c.deadline = now + srv.adm.limits.linger;
                        readable = true;
                        continue;
                    }
                    c.phase = Phase::Head;
                    if c.buf.is_empty() {
                        c.deadline = now + srv.adm.limits.idle_timeout;
                    } else {
                        // The next (pipelined) request is already arriving.
                        c.head_start = Some(now);
                        c.deadline = now + srv.adm.limits.header_timeout;
                    }
                    // Level-triggered: if more is on the socket, epoll says so.
                    readable = false;
                }
                // Parked until its reply (`resume`) or the answer time-out (`sweep`).
                Phase::Deferred => return Some(EpollFlags::empty()),
                Phase::Linger => {
                    if readable {
                        let mut tmp = [0u8; 4096];
                        loop {
                            match c.sock.read(&mut tmp) {
                                Ok(0) => return None,
                                Ok(n) => {
                                    c.lingered += n;
                                    if c.lingered > LINGER_BYTES {
                                        return None;
                                    }
                                }
                                Err(e) if would_block(&e) => break,
                                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                                Err(_) => return None,
                            }
                        }
                    }
                    self.enter_waiting(c);
                    return Some(EpollFlags::EPOLLIN);
                }
            }
        }
    }

    /// Joins the waiting set (eviction candidates) unless already in it.
    fn enter_waiting(&self, c: &mut Conn<H::Labels>) {
        if c.waiting.is_none() && c.counted {
            c.waiting = Some(
                self.srv
                    .adm
                    .wait_enter(self.me, c.sock.as_raw_fd(), self.now),
            );
        }
    }
}

/// Writes the plain response. Ok(true): all written; Ok(false): the socket is full.
///
/// When the connection is closed at once after it (see `closes_at_once`), its end is sent
/// with MSG_MORE / SPLICE_F_MORE: the kernel holds the last segment back and the close
/// sends it together with the FIN, one segment (and the client's processing of it) fewer.
fn flush_plain<L>(c: &mut Conn<L>, pipes: &mut pipes::Loop) -> std::io::Result<bool> {
    if c.out_pos == 0 && !c.drained && closes_at_once_if_drained(c) {
        // The last read did not find the socket empty, or is old (a deferred answer's client
        // had time to send more): one more read, before the answer, decides. Closing with
        // bytes unread would reset the connection and drop what the kernel held back.
        let mut probe = [0u8; 512];
        match c.sock.read(&mut probe) {
            Err(e) if would_block(&e) => c.drained = true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Broken: nothing more will come.
            Ok(0) | Err(_) => c.eof = true,
            Ok(n) => c.lingered += n,
        }
    }
    let last = closes_at_once(c);
    loop {
        let head = match &c.out_whole {
            Some(w) => &w.head,
            None => &c.out_head,
        };
        let total = head.len() + c.out_body.len();
        if c.out_pos >= total {
            return Ok(true);
        }
        let res = match (&c.out_whole, &c.out_body) {
            // From the start: through this loop's pipe copy when it keeps one (see
            // `crate::pipes`); the rest of a response the socket took only part of, and
            // whatever that cannot take, from the memfd.
            (Some(w), Body::File(f)) => match (c.out_pos == 0)
                .then(|| pipes.send(&c.sock, w, &[&w.head, &f.bytes], last))
                .flatten()
            {
                Some(r) => r.map_err(std::io::Error::from),
                None => sendfile(&c.sock, &w.fd, c.out_pos, total - c.out_pos),
            },
            (Some(w), _) => sendfile(&c.sock, &w.fd, c.out_pos, total - c.out_pos),
            // The head, held back (MSG_MORE) to leave in the same segment as the body's start.
            (None, Body::File(_)) if c.out_pos < head.len() => nix::sys::socket::send(
                c.sock.as_raw_fd(),
                &head[c.out_pos..],
                nix::sys::socket::MsgFlags::from_bits_retain(nix::libc::MSG_MORE)
                    | nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
            )
            .map_err(std::io::Error::from),
            (None, Body::File(f)) => {
                let from = c.out_pos - head.len();
                sendfile(&c.sock, &f.fd, from, f.bytes.len() - from)
            }
            // From memory: the head's rest and the body's pieces, shared, never copied.
            (None, body) => {
                let mut bufs = [IoSlice::new(&[]); 16];
                let mut n = 0;
                if c.out_pos < head.len() {
                    bufs[0] = IoSlice::new(&head[c.out_pos..]);
                    n = 1;
                }
                let from = c.out_pos.saturating_sub(head.len());
                n += body.slices_from(from, usize::MAX, &mut bufs[n..]);
                if last {
                    nix::sys::socket::sendmsg::<()>(
                        c.sock.as_raw_fd(),
                        &bufs[..n],
                        &[],
                        nix::sys::socket::MsgFlags::from_bits_retain(nix::libc::MSG_MORE)
                            | nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
                        None,
                    )
                    .map_err(std::io::Error::from)
                } else {
                    c.sock.write_vectored(&bufs[..n])
                }
            }
        };
        match res {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => c.out_pos += n,
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Whether the connection is closed as soon as its response is written (`Shard::step`):
/// `Connection: close` after a request read whole (not an error answer, which may leave a
/// body unread), plain, nothing read after it and the socket found empty. Otherwise it
/// lingers: closing with unread data would make the kernel answer it with a reset, which
/// can cost the client the end of its answer.
fn closes_at_once<L>(c: &Conn<L>) -> bool {
    (c.drained || c.eof) && closes_at_once_if_drained(c)
}

/// [`closes_at_once`] but for whether the socket is known to be empty.
fn closes_at_once_if_drained<L>(c: &Conn<L>) -> bool {
    c.close_after
        && c.tls.is_none()
        && c.lingered == 0
        && c.buf.is_empty()
        && c.finished.as_ref().is_some_and(|f| f.has_req)
}

/// Plaintext handed to rustls at a time, and only once it has sent what it held: one
/// record. A TLS connection whose client does not read holds at most this of its response,
/// encrypted (the body itself is shared and read from where it is).
const TLS_CHUNK: usize = 16 * 1024;

/// Writes the TLS response: encrypts the next [`TLS_CHUNK`] of it only once the socket has
/// taken everything before. Ok(true): all written (and the close_notify of a closing
/// response); Ok(false): the socket is full.
fn flush_tls_response<L>(c: &mut Conn<L>) -> std::io::Result<bool> {
    let Conn {
        tls,
        sock,
        out_head,
        out_body,
        out_pos,
        sent,
        close_after,
        notified,
        ..
    } = c;
    let Some(t) = tls.as_mut() else {
        return Ok(true);
    };
    let total = out_head.len() + out_body.len();
    loop {
        if !flush_tls_counted(t, sock, sent)? {
            return Ok(false);
        }
        if *out_pos >= total {
            if *close_after && !*notified {
                t.send_close_notify();
                *notified = true;
                continue;
            }
            return Ok(true);
        }
        let mut bufs = [IoSlice::new(&[]); 16];
        let mut n = 0;
        let mut left = TLS_CHUNK;
        if *out_pos < out_head.len() {
            let h = &out_head[*out_pos..];
            let take = h.len().min(left);
            bufs[0] = IoSlice::new(&h[..take]);
            n = 1;
            left -= take;
        }
        let from = out_pos.saturating_sub(out_head.len());
        n += out_body.slices_from(from, left, &mut bufs[n..]);
        match t.writer().write_vectored(&bufs[..n]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(w) => *out_pos += w,
            Err(e) => return Err(e),
        }
    }
}
