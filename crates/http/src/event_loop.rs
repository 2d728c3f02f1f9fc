//! The event loops: epoll, accepting and handing connections between loops, and each
//! connection's state machine (read a head, answer it, write the response, linger).

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

use super::admission::{
    Admission, Admitted, BodyBudget, ConnStats, Limits, abort_on_close, lock, set_socket_option,
    unacked,
};
use super::head::{REQUEST_KEPT, Request, Scan, ScanState, scan_head};
use super::pipes;
use super::response::{
    Answer, Body, Labels, Reply, Response, WHOLES_KEPT, Wholes, http_date, response_head,
};
use super::transport::{Finished, Input, Out, Transport, would_block};

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
    adm: Arc<Admission>,
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
            adm: Arc::new(Admission::new(limits, stats)),
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

/// Where a connection is: reading a request, waiting for its answer, or writing a response,
/// each with what it needs.
enum Phase {
    Reading(Reading),
    /// The handler answers later (`Response::later`): the connection is out of the epoll set
    /// until its [`Reply`] arrives or the answer time-out passes. When the request started.
    Deferred {
        started: Instant,
    },
    Writing(Writing),
}

/// Reading a request.
enum Reading {
    /// Waiting for (the rest of) a request head, or for the TLS handshake.
    Head,
    /// The head is parsed: waiting for the rest of its body, `len` bytes (reserved in the
    /// server's body budget), of a request that started at `started`.
    Body {
        len: usize,
        started: Instant,
        _budget: BodyBudget,
    },
}

/// Writing.
enum Writing {
    /// A response is being written.
    Response(Out),
    /// The last response is written and the write side shut: draining until the peer closes.
    Linger,
}

/// One connection. `adm` comes first: it leaves the server's eviction sets (when the
/// connection is dropped) before `io` closes the socket.
struct Conn<L> {
    adm: Admitted,
    io: Transport,
    peer: SocketAddr,
    input: Input,
    phase: Phase,
    deadline: Instant,
    /// Requests answered on this connection.
    served: u64,
    /// The current request and its response, in buffers kept from one to the next.
    req: Request,
    resp: Response<L>,
    /// The response head's buffer while no response is being written.
    spare_head: Vec<u8>,
    interest: Option<EpollFlags>,
    /// Its event token (slot and epoch), which a [`Reply`] names.
    token: u64,
    /// Requests deferred so far: a reply names the one it answers, so a late reply (after
    /// the answer time-out) is not taken for the answer of a later request.
    ticket: u64,
}

impl<L> Conn<L> {
    /// The response being written.
    fn out(&mut self) -> Option<&mut Out> {
        match &mut self.phase {
            Phase::Writing(Writing::Response(out)) => Some(out),
            _ => None,
        }
    }
}

/// What [`Shard::drive`]'s steps tell it: go on with the connection's new phase, or wait for
/// these events.
enum Step {
    Again,
    Wait(EpollFlags),
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
                !matches!(
                    c.phase,
                    Phase::Writing(Writing::Response(_)) | Phase::Deferred { .. }
                ) && c.input.head_start.is_none()
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
        if let Phase::Deferred { started } = c.phase
            && c.ticket == ticket
        {
            c.resp = resp;
            // Not read while it waited: whatever the last read found is old news.
            c.input.drained = false;
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
        let Some(adm) = srv.adm.admit(self.me, sock.as_raw_fd(), ip) else {
            return;
        };
        let io = match Transport::new(sock, tls) {
            Ok(io) => io,
            Err(e) => {
                log::error!("starting a TLS session: {e}");
                return;
            }
        };
        let now = self.now;
        let mut c = Box::new(Conn {
            adm,
            io,
            peer,
            input: Input::default(),
            phase: Phase::Reading(Reading::Head),
            deadline: now + srv.adm.limits.header_timeout,
            served: 0,
            req: Request::default(),
            resp: Response::new(200),
            spare_head: Vec::new(),
            interest: None,
            token: 0,
            ticket: 0,
        });
        if c.adm.refused() && c.io.is_plain() {
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
                    let _ = self.epoll.delete(c.io.sock());
                }
                self.slots[idx].conn = Some(c);
            }
            Some(want) => {
                if c.interest != Some(want) {
                    let mut ev = EpollEvent::new(want, token(idx, self.slots[idx].epoch));
                    let res = if c.interest.is_some() {
                        self.epoll.modify(c.io.sock(), &mut ev)
                    } else {
                        self.epoll.add(c.io.sock(), ev)
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

    /// Closes connection `idx`: what it holds of the server's admission is given back
    /// (before its socket is closed), and a response it could not write is reported.
    fn close(&mut self, l: &mut Local<H::Local>, idx: usize) {
        let Some(mut c) = self.slots[idx].conn.take() else {
            return;
        };
        self.slots[idx].epoch = self.slots[idx].epoch.wrapping_add(1);
        self.free.push(idx);
        self.live -= 1;
        self.load(self.me).fetch_sub(1, Ordering::Relaxed);
        let finished = c.out().and_then(|o| o.finished.take());
        let Conn {
            adm,
            phase,
            io,
            req,
            resp,
            peer,
            ..
        } = *c;
        drop((adm, phase));
        if let Some(f) = finished {
            // The response could not be written.
            let req = f.has_req.then_some(&req);
            self.srv
                .handler
                .done(&mut l.handler, req, &resp, 0, f.started.elapsed(), peer);
        }
        drop(io);
    }

    /// Checks deadlines.
    fn sweep(&mut self, l: &mut Local<H::Local>, now: Instant) {
        for idx in 0..self.slots.len() {
            if self.slots[idx]
                .conn
                .as_ref()
                .is_some_and(|c| now >= c.deadline)
            {
                self.expire(l, idx, now);
            }
        }
    }

    /// Connection `idx` is past its deadline.
    fn expire(&mut self, l: &mut Local<H::Local>, idx: usize, now: Instant) {
        let Some(c) = self.slots[idx].conn.as_mut() else {
            return;
        };
        let stats = &self.srv.adm.stats;
        match &c.phase {
            Phase::Reading(Reading::Body { started, .. }) => {
                // The body did not arrive within the header time-out: say so, then close.
                stats.header_timeouts.fetch_add(1, Ordering::Relaxed);
                let started = *started;
                c.phase = Phase::Reading(Reading::Head);
                let resp = Response::text(408, "the request body did not arrive in time");
                self.time_out(l, idx, resp, started);
            }
            Phase::Reading(Reading::Head) => self.head_expired(l, idx),
            Phase::Writing(Writing::Response(_)) => self.check_send_rate(l, idx, now),
            Phase::Writing(Writing::Linger) => self.close(l, idx),
            Phase::Deferred { started } => {
                let started = *started;
                let secs = self.srv.adm.limits.answer_timeout.as_secs();
                let msg = format!("no answer within {secs} s (the answer time-out); retry");
                let resp = Response::text(503, msg).header("Retry-After", "5");
                self.time_out(l, idx, resp, started);
            }
        }
    }

    /// No whole head (or TLS handshake) within the header time-out, or idle too long between
    /// requests.
    fn head_expired(&mut self, l: &mut Local<H::Local>, idx: usize) {
        let Some(c) = self.slots[idx].conn.as_mut() else {
            return;
        };
        let handshaking = c.io.handshaking();
        if c.served == 0 || c.input.head_start.is_some() {
            let stats = &self.srv.adm.stats;
            stats.header_timeouts.fetch_add(1, Ordering::Relaxed);
        }
        match c.input.head_start {
            Some(started) if !handshaking && !c.adm.refused() => {
                // Slow headers: say so, then close.
                self.time_out(l, idx, Response::new(408), started);
            }
            _ => {
                // Silent (or idle between requests): close quietly.
                c.io.close_notify();
                self.close(l, idx);
            }
        }
    }

    /// The minimum send rate: each window, a response in progress must have delivered (had
    /// acknowledged by the client) `min_send_rate` bytes per second of it, or be dropped.
    /// What the socket buffers is not counted as delivered, so the buffers cannot hide a
    /// client that does not read.
    fn check_send_rate(&mut self, l: &mut Local<H::Local>, idx: usize, now: Instant) {
        let Some(c) = self.slots[idx].conn.as_mut() else {
            return;
        };
        let limits = &self.srv.adm.limits;
        let (fd, unacked) = (c.io.sock().as_raw_fd(), unacked(c.io.sock()));
        let Phase::Writing(Writing::Response(out)) = &mut c.phase else {
            return;
        };
        let delivered = out.sent.saturating_sub(unacked);
        let got = delivered.saturating_sub(out.delivered);
        let secs = limits.send_window.as_secs_f64();
        if (got as f64) < limits.min_send_rate as f64 * secs {
            self.srv.adm.stats.too_slow.fetch_add(1, Ordering::Relaxed);
            abort_on_close(fd);
            self.close(l, idx);
            return;
        }
        out.delivered = delivered;
        c.deadline = now + limits.send_window;
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
        let ours = c.adm.leave_waiting();
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
        if let Some(f) = c.resp.take_later() {
            c.ticket += 1;
            c.phase = Phase::Deferred { started };
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

    fn queue_reject(&self, l: &mut Local<H::Local>, c: &mut Conn<H::Labels>) {
        c.resp = Response::text(503, "the server is at its connection limit; retry shortly")
            .header("Retry-After", "1");
        self.queue(l, c, false, false, false, self.now);
        // A refused connection is neither logged nor counted as a request.
        if let Some(out) = c.out() {
            out.finished = None;
        }
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
        // Plain: a shared body goes out with its head from this loop's whole responses. TLS
        // encrypts as the socket takes it (`Transport::write`).
        let whole = match &body {
            Body::File(f) if send_body && c.io.is_plain() => {
                l.wholes
                    .get(f, &c.resp, keep, (self.date_secs, &self.date), self.now)
            }
            _ => None,
        };
        // A whole response has its head; only others need one made.
        let mut head = std::mem::take(&mut c.spare_head);
        let bytes = match &whole {
            Some(w) => w.head.len() + sent_len,
            None => {
                response_head(&c.resp, keep, full_len, &self.date, &mut head);
                head.len() + sent_len
            }
        };
        c.phase = Phase::Writing(Writing::Response(Out {
            head,
            body: if send_body { body } else { Body::Empty },
            whole,
            pos: 0,
            sent: 0,
            delivered: 0,
            close_after: !keep,
            notified: false,
            queued: self.now,
            finished: Some(Finished {
                has_req,
                bytes,
                started,
            }),
        }));
        // The end of the first window of the minimum send rate.
        c.deadline = self.now + self.srv.adm.limits.send_window;
    }

    /// Reads what the socket has (up to the head size limit). Err: the connection is broken.
    fn fill(&self, l: &mut Local<H::Local>, c: &mut Conn<H::Labels>) -> Result<(), ()> {
        let cap = self.srv.adm.limits.max_header_bytes + 4 + c.input.scan.start.unwrap_or(0);
        self.fill_with(c, cap, &mut l.scratch)
    }

    fn fill_with(&self, c: &mut Conn<H::Labels>, cap: usize, tmp: &mut [u8]) -> Result<(), ()> {
        let before = c.input.buf.len();
        c.io.fill(&mut c.input, cap, tmp)?;
        if c.input.buf.len() > before && c.input.head_start.is_none() {
            // The start of the request's latency: not the batch's time, which may be a
            // while before this event's turn.
            let now = Instant::now();
            c.input.head_start = Some(now);
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
        loop {
            let step = match c.phase {
                Phase::Reading(Reading::Head) => self.read_head(l, c, &mut readable)?,
                Phase::Reading(Reading::Body { .. }) => self.read_body(l, c, &mut readable)?,
                Phase::Writing(Writing::Response(_)) => self.write(l, c, &mut readable)?,
                Phase::Writing(Writing::Linger) => self.linger(c, readable)?,
                // Parked until its reply (`resume`) or the answer time-out (`sweep`).
                Phase::Deferred { .. } => Step::Wait(EpollFlags::empty()),
            };
            match step {
                Step::Again => {}
                Step::Wait(want) => return Some(want),
            }
        }
    }

    /// Reads a request head (after the TLS handshake). None: close the connection.
    fn read_head(
        &self,
        l: &mut Local<H::Local>,
        c: &mut Conn<H::Labels>,
        readable: &mut bool,
    ) -> Option<Step> {
        let max = self.srv.adm.limits.max_header_bytes;
        let mut scan = if c.input.buf.is_empty() {
            Scan::More
        } else {
            scan_head(&c.input.buf, &mut c.input.scan, max)
        };
        if scan == Scan::More && *readable {
            *readable = false;
            self.fill(l, c).ok()?;
            if !c.input.buf.is_empty() {
                scan = scan_head(&c.input.buf, &mut c.input.scan, max);
            }
        }
        // Handshake records (or an alert) to send; nothing on a plain connection.
        let flushed = c.io.flush().ok()?;
        if c.io.handshaking() {
            if c.input.eof {
                return None;
            }
            c.adm.enter_waiting(self.now);
            return Some(Step::Wait(if flushed {
                EpollFlags::EPOLLIN
            } else {
                EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT
            }));
        }
        if c.adm.refused() {
            // The handshake is done: answer in the listener's protocol (a plain refused
            // connection is answered at once, see `admit`).
            self.queue_reject(l, c);
            return Some(Step::Again);
        }
        if !flushed {
            c.adm.enter_waiting(self.now);
            return Some(Step::Wait(EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT));
        }
        match scan {
            Scan::More => {
                if c.input.eof {
                    return None;
                }
                c.adm.enter_waiting(self.now);
                return Some(Step::Wait(EpollFlags::EPOLLIN));
            }
            Scan::Bad(status) => {
                if !c.adm.leave_waiting() {
                    return None;
                }
                let started = c.input.head_start.unwrap_or_else(Instant::now);
                c.resp.reset(status);
                self.queue(l, c, false, false, false, started);
            }
            Scan::Head { start, end, next } => {
                if !c.adm.leave_waiting() {
                    return None;
                }
                self.parsed_head(l, c, (start, end, next));
            }
        }
        Some(Step::Again)
    }

    /// A whole head is in the buffer at `start..end` (the next one begins at `next`): parses
    /// it, then answers it, or waits for its body.
    fn parsed_head(
        &self,
        l: &mut Local<H::Local>,
        c: &mut Conn<H::Labels>,
        (start, end, next): (usize, usize, usize),
    ) {
        let limits = &self.srv.adm.limits;
        let started = c.input.head_start.unwrap_or_else(Instant::now);
        let parsed = c.req.parse(&c.input.buf[start..end], limits.max_headers);
        c.input.buf.drain(..next);
        if c.input.buf.capacity() > REQUEST_KEPT {
            // A large head (or leading empty lines) is not kept while its response is
            // written: what is left is the next head's start.
            c.input.buf.shrink_to(REQUEST_KEPT);
        }
        c.input.scan = ScanState::default();
        c.input.head_start = None;
        if let Err(status) = parsed {
            c.resp.reset(status);
            return self.queue(l, c, false, false, false, started);
        }
        match c.req.body_len(limits.max_body_bytes) {
            Err((status, why)) => {
                c.resp = Response::text(status, &why);
                self.queue(l, c, false, false, false, started);
            }
            Ok(0) => self.answer(l, c, started),
            Ok(len) => match self.srv.adm.body_reserve(len) {
                Some(budget) => {
                    c.phase = Phase::Reading(Reading::Body {
                        len,
                        started,
                        _budget: budget,
                    })
                }
                None => {
                    c.resp = Response::text(
                        503,
                        "the server is reading as many request bodies as it holds (--max-body-total); retry shortly",
                    )
                    .header("Retry-After", "1");
                    self.queue(l, c, false, false, false, started);
                }
            },
        }
    }

    /// Reads a request's body, then answers the request. None: close the connection.
    fn read_body(
        &self,
        l: &mut Local<H::Local>,
        c: &mut Conn<H::Labels>,
        readable: &mut bool,
    ) -> Option<Step> {
        let Phase::Reading(Reading::Body { len, started, .. }) = c.phase else {
            return Some(Step::Again);
        };
        if c.input.buf.len() < len && *readable {
            *readable = false;
            self.fill_with(c, len, &mut l.scratch).ok()?;
        }
        if c.input.buf.len() < len {
            if c.input.eof {
                return None;
            }
            // Within the header time-out from the head's first byte, evictable at the
            // connection limit like a head still coming.
            c.adm.enter_waiting(self.now);
            return Some(Step::Wait(EpollFlags::EPOLLIN));
        }
        if !c.adm.leave_waiting() {
            return None;
        }
        // Gives the body budget back.
        c.phase = Phase::Reading(Reading::Head);
        c.req.body.clear();
        c.req.body.extend_from_slice(&c.input.buf[..len]);
        c.input.buf.drain(..len);
        self.answer(l, c, started);
        Some(Step::Again)
    }

    /// Writes the response. None: close the connection.
    fn write(
        &self,
        l: &mut Local<H::Local>,
        c: &mut Conn<H::Labels>,
        readable: &mut bool,
    ) -> Option<Step> {
        let Phase::Writing(Writing::Response(out)) = &mut c.phase else {
            return Some(Step::Again);
        };
        if !c.io.write(out, &mut c.input, &mut l.pipes).ok()? {
            // Waiting for the client: the deadline stays the end of the current window of
            // the minimum send rate (see `sweep`), and at the connection limit it may be
            // evicted, slowest first.
            c.adm.wait_for_client(out.queued, out.sent);
            return Some(Step::Wait(EpollFlags::EPOLLOUT));
        }
        if !c.adm.leave_slow() {
            // Evicted meanwhile: its slot went to another connection.
            return None;
        }
        self.written(l, c, readable)
    }

    /// The response is written: reports it, then reads the next request, lingers, or closes
    /// the connection (None).
    fn written(
        &self,
        l: &mut Local<H::Local>,
        c: &mut Conn<H::Labels>,
        readable: &mut bool,
    ) -> Option<Step> {
        let srv = &self.srv;
        let phase = std::mem::replace(&mut c.phase, Phase::Reading(Reading::Head));
        let Phase::Writing(Writing::Response(out)) = phase else {
            return Some(Step::Again);
        };
        let now = Instant::now();
        let at_once = out.closes_at_once(&c.input, c.io.is_plain());
        let Out {
            mut head,
            finished,
            close_after,
            ..
        } = out;
        head.clear();
        c.spare_head = head;
        if let Some(f) = finished {
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
        // The request was read whole and nothing follows it: close at once, as nginx does
        // (`Out::closes_at_once`; anything else lingers below).
        if close_after && (c.input.eof || at_once) {
            return None;
        }
        // No request in progress any more and the connection stays (lingering or
        // keep-alive): evictable again.
        c.adm.enter_waiting(self.now);
        if close_after {
            // The client has its whole answer: a lingering connection no longer counts
            // against its address, so a client that opens its next connection as soon as it
            // reads the end is not refused. Lingering ones have a cap of their own (an
            // address that leaves more open is closed on at once).
            if !c.adm.linger() {
                return None;
            }
            // Lingering close: the client reads our answer, not a reset.
            c.io.shutdown_write();
            c.phase = Phase::Writing(Writing::Linger);
            c.deadline = now + srv.adm.limits.linger;
            *readable = true;
            return Some(Step::Again);
        }
        if c.input.buf.is_empty() {
            c.deadline = now + srv.adm.limits.idle_timeout;
        } else {
            // The next (pipelined) request is already arriving.
            c.input.head_start = Some(now);
            c.deadline = now + srv.adm.limits.header_timeout;
        }
        // Level-triggered: if more is on the socket, epoll says so.
        *readable = false;
        Some(Step::Again)
    }

    /// Drains a lingering connection until its client closes. None: close it.
    fn linger(&self, c: &mut Conn<H::Labels>, readable: bool) -> Option<Step> {
        if readable {
            let mut tmp = [0u8; 4096];
            loop {
                match c.io.sock().read(&mut tmp) {
                    Ok(0) => return None,
                    Ok(n) => {
                        c.input.discarded += n;
                        if c.input.discarded > LINGER_BYTES {
                            return None;
                        }
                    }
                    Err(e) if would_block(&e) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return None,
                }
            }
        }
        c.adm.enter_waiting(self.now);
        Some(Step::Wait(EpollFlags::EPOLLIN))
    }
}
