//! Connection admission and eviction: the connection limits, the global and per-address
//! connection counts, the sets of connections waiting for a head and of responses waiting
//! for their client, and eviction from them at `max_connections`. What a connection holds
//! of them is a value ([`Admitted`], [`BodyBudget`]) that gives it back when dropped.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub max_headers: usize,
    /// From accept (and from the first byte of each later head) to the end of the head.
    pub header_timeout: Duration,
    /// Between requests on a keep-alive connection.
    pub idle_timeout: Duration,
    /// The minimum send rate, in bytes per second: a response in progress that delivers less
    /// than this times `send_window` in any window of `send_window` is dropped.
    pub min_send_rate: usize,
    pub send_window: Duration,
    pub max_connections: usize,
    /// 0: no per-address cap.
    pub max_connections_per_address: usize,
    /// How long a closing connection is drained before it is closed (lingering close).
    pub linger: Duration,
    /// The largest request body read (a machine's report); larger is answered 413.
    pub max_body_bytes: usize,
    /// Request bodies being read, all connections together, in bytes: beyond it a request
    /// with a body is answered 503 (Retry-After: 1), so bodies add at most this to the
    /// server's memory whatever the number of connections.
    pub max_body_total: usize,
    /// A request answered later (`Response::later`: a report waiting for the inventory
    /// store) is answered 503 (Retry-After) if no answer came within this.
    pub answer_timeout: Duration,
}

/// The default [`Limits::answer_timeout`]: the etcd store's own bound on one report (a
/// request to each member, rounds, pauses) is longer; the agent gives up on an answer sooner.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            min_send_rate: 4096,
            send_window: Duration::from_secs(10),
            max_connections: 10_000,
            max_connections_per_address: 0,
            linger: Duration::from_secs(2),
            max_body_bytes: 256 * 1024,
            max_body_total: 32 << 20,
            answer_timeout: ANSWER_TIMEOUT,
        }
    }
}

impl Limits {
    /// Refused connections answered at the same time (the 503 and, on TLS, its handshake);
    /// beyond this they are closed without an answer.
    pub fn reject_budget(&self) -> usize {
        (self.max_connections / 8).clamp(16, 1024)
    }
}

/// Connection counters shared with the metrics.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections holding a slot of `max_connections`.
    pub open: AtomicUsize,
    /// Connections refused (connection limit with nothing to evict, or per-address cap).
    pub rejected: AtomicU64,
    /// Connections closed to make room for a new one at the connection limit.
    pub evicted: AtomicU64,
    /// Connections closed because no whole request head (or TLS handshake) arrived within
    /// the header time-out.
    pub header_timeouts: AtomicU64,
    /// Responses dropped for delivering less than the minimum send rate.
    pub too_slow: AtomicU64,
    /// Per event loop: the connections it has, with those handed to it and not yet taken
    /// (set when the loops start).
    pub loops: std::sync::OnceLock<Arc<[AtomicUsize]>>,
}

/// One part of the server's waiting set. Each event loop uses one part (its number's), so
/// loops do not take turns at one lock on every request.
#[derive(Default)]
#[repr(align(128))]
struct WaitPart(Mutex<BTreeSet<(u64, RawFd)>>);

pub(super) const WAIT_PARTS: usize = 8;

/// A waiting connection's entry: its part, when it started waiting, its socket.
#[derive(Debug, Clone, Copy)]
struct WaitKey {
    part: usize,
    at: u64,
    fd: RawFd,
}

/// A connection's entry among the responses waiting for their client: its part, its socket.
#[derive(Debug, Clone, Copy)]
struct SlowKey {
    part: usize,
    fd: RawFd,
}

/// One part of the server's set of responses waiting for their client: per socket, when its
/// response was queued (on the clock of `Admission::waiting`) and the bytes of it the socket
/// took so far (kept by its owner).
#[derive(Default)]
#[repr(align(128))]
struct SlowPart(Mutex<HashMap<RawFd, (u64, Arc<AtomicUsize>)>>);

/// The server's admission state, shared by every event loop: the limits, the counts, and
/// the eviction candidates.
pub(super) struct Admission {
    pub(super) limits: Limits,
    pub(super) stats: Arc<ConnStats>,
    /// Connections waiting for a request head (the eviction candidates), in parts: when
    /// each started waiting, and its socket. A connection's owner removes its entry (under
    /// its part's lock) before it closes the socket, so an evicting thread may shut the
    /// socket down while holding every part's lock.
    waiting: [WaitPart; WAIT_PARTS],
    /// The clock of `waiting`.
    born: Instant,
    /// Responses the socket took only part of, waiting for their client: the candidates for
    /// eviction when no connection is waiting for a request head, slowest first. The same
    /// rule as for `waiting`: the owner removes its entry before it closes the socket.
    slow: [SlowPart; WAIT_PARTS],
    /// Per client address: connections counted against the cap, and lingering ones.
    per_address: Mutex<HashMap<IpAddr, AddressCount>>,
    /// Refused connections still being answered.
    rejecting: AtomicUsize,
    /// Bytes of request bodies being read (see [`Limits::max_body_total`]).
    bodies: AtomicUsize,
}

/// `n` bytes of the body budget ([`Limits::max_body_total`]), given back when dropped.
pub(super) struct BodyBudget {
    adm: Arc<Admission>,
    n: usize,
}

impl Drop for BodyBudget {
    fn drop(&mut self) {
        self.adm.bodies.fetch_sub(self.n, Ordering::AcqRel);
    }
}

/// What one connection holds of the server's admission, given back when it is dropped: its
/// slot of `max_connections` (or, refused, its place among the refusals being answered),
/// its count against its address, and its entries among the eviction candidates. A
/// connection drops this before it closes its socket (see [`Admission`]'s `waiting`).
pub(super) struct Admitted {
    adm: Arc<Admission>,
    /// The connection's event loop (its part of the sets), socket and client address.
    part: usize,
    fd: RawFd,
    ip: IpAddr,
    /// Holds a slot of `max_connections` (false once evicted: the evicting thread released it).
    slot: bool,
    /// Refused: answered 503 and closed, counted in `rejecting`.
    refused: bool,
    /// What it counts for in the per-address map.
    address: AddressHold,
    /// Its key in the waiting set while waiting for a head.
    waiting: Option<WaitKey>,
    /// Its key among the responses waiting for their client, while in it, and the bytes of
    /// its response the socket took, for the evicting thread (made when a response first
    /// waits for its client).
    slow: Option<SlowKey>,
    sent: Option<Arc<AtomicUsize>>,
}

impl Admitted {
    /// Refused: the connection gets a 503 (in its listener's protocol) and is closed.
    pub(super) fn refused(&self) -> bool {
        self.refused
    }

    /// Joins the waiting set (eviction candidates) unless already in it.
    pub(super) fn enter_waiting(&mut self, now: Instant) {
        if self.waiting.is_none() && self.slot {
            self.waiting = Some(self.adm.wait_enter(self.part, self.fd, now));
        }
    }

    /// Leaves the waiting set; false when the connection was evicted meanwhile (its slot
    /// went to another connection and its socket is shut down).
    pub(super) fn leave_waiting(&mut self) -> bool {
        match self.waiting.take() {
            Some(k) if !self.adm.wait_leave(k) => {
                self.slot = false;
                false
            }
            _ => true,
        }
    }

    /// The response queued at `queued` waits for its client, which has taken `sent` bytes
    /// of it: at the connection limit it may be evicted, slowest first.
    pub(super) fn wait_for_client(&mut self, queued: Instant, sent: usize) {
        match (&self.slow, &self.sent) {
            (Some(_), Some(s)) => s.store(sent, Ordering::Relaxed),
            _ if self.slot => {
                let s = self.sent.get_or_insert_default();
                s.store(sent, Ordering::Relaxed);
                let s = s.clone();
                self.slow = Some(self.adm.slow_enter(self.part, self.fd, queued, s));
            }
            _ => {}
        }
    }

    /// Leaves the responses waiting for their client; false when the connection was
    /// evicted meanwhile.
    pub(super) fn leave_slow(&mut self) -> bool {
        match self.slow.take() {
            Some(k) if !self.adm.slow_leave(k) => {
                self.slot = false;
                false
            }
            _ => true,
        }
    }

    /// The connection has sent its last answer: it stops counting against its address's
    /// cap and lingers, unless its address already has the cap of lingering connections
    /// (false: close it at once).
    pub(super) fn linger(&mut self) -> bool {
        if self.address != AddressHold::Active {
            return true;
        }
        if !self.adm.address_linger(self.ip) {
            self.address = AddressHold::None;
            return false;
        }
        self.address = AddressHold::Lingering;
        true
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        // Leave the eviction sets before the socket is closed (see `Admission::waiting`).
        self.leave_waiting();
        self.leave_slow();
        let adm = &self.adm;
        if self.slot {
            adm.stats.open.fetch_sub(1, Ordering::SeqCst);
        }
        if self.refused {
            adm.rejecting.fetch_sub(1, Ordering::SeqCst);
        }
        if self.address != AddressHold::None {
            adm.address_release(self.ip, self.address);
        }
    }
}

impl Admission {
    /// Admits a connection of event loop `part` on socket `fd` from `ip`: a slot of
    /// `max_connections` (evicting at the limit) within its address's cap, or else a place
    /// among the refused connections being answered. None: refused beyond those too (close
    /// it without an answer).
    pub(super) fn admit(self: &Arc<Self>, part: usize, fd: RawFd, ip: IpAddr) -> Option<Admitted> {
        let address_ok = self.address_acquire(ip);
        let slot = address_ok && self.acquire_slot();
        let capped = self.limits.max_connections_per_address > 0;
        if address_ok && !slot && capped {
            self.address_release(ip, AddressHold::Active);
        }
        if !slot {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            if self.rejecting.fetch_add(1, Ordering::SeqCst) >= self.limits.reject_budget() {
                self.rejecting.fetch_sub(1, Ordering::SeqCst);
                return None;
            }
        }
        Some(Admitted {
            adm: self.clone(),
            part,
            fd,
            ip,
            slot,
            refused: !slot,
            address: if slot && capped {
                AddressHold::Active
            } else {
                AddressHold::None
            },
            waiting: None,
            slow: None,
            sent: None,
        })
    }

    /// Reserves `n` bytes of the body budget; None when it would pass `max_body_total`.
    pub(super) fn body_reserve(self: &Arc<Self>, n: usize) -> Option<BodyBudget> {
        let max = self.limits.max_body_total;
        self.bodies
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b + n <= max).then_some(b + n)
            })
            .ok()?;
        Some(BodyBudget {
            adm: self.clone(),
            n,
        })
    }

    pub(super) fn new(limits: Limits, stats: Arc<ConnStats>) -> Self {
        Admission {
            limits,
            stats,
            waiting: Default::default(),
            born: Instant::now(),
            slow: Default::default(),
            per_address: Mutex::new(HashMap::new()),
            rejecting: AtomicUsize::new(0),
            bodies: AtomicUsize::new(0),
        }
    }

    /// Registers a connection of event loop `part` (its number) as waiting for a head;
    /// returns its key.
    fn wait_enter(&self, part: usize, fd: RawFd, now: Instant) -> WaitKey {
        let k = WaitKey {
            part: part % WAIT_PARTS,
            at: now.saturating_duration_since(self.born).as_nanos() as u64,
            fd,
        };
        lock(&self.waiting[k.part].0).insert((k.at, k.fd));
        k
    }

    /// Unregisters a waiting connection. false: it was evicted meanwhile (its slot already
    /// went to another connection and its socket is shut down).
    fn wait_leave(&self, k: WaitKey) -> bool {
        lock(&self.waiting[k.part].0).remove(&(k.at, k.fd))
    }

    /// Evicts the connection that has waited longest for a request head and releases its
    /// slot. false: every connection is busy with a request.
    pub(super) fn evict_oldest(&self) -> bool {
        // Every part, always in this order (a thread holds at most one part otherwise).
        let mut parts: Vec<_> = self.waiting.iter().map(|p| lock(&p.0)).collect();
        let Some((oldest, part)) = parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((*p.first()?, i)))
            .min()
        else {
            return false;
        };
        parts[part].remove(&oldest);
        // Its owner cannot close the socket before taking the lock we hold (see `waiting`);
        // shutting it down wakes the owner, which then closes it.
        let _ = nix::sys::socket::shutdown(oldest.1, nix::sys::socket::Shutdown::Both);
        drop(parts);
        self.stats.open.fetch_sub(1, Ordering::SeqCst);
        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Registers a response of event loop `part` queued at `queued` that waits for its client, with the counter
    /// of its bytes the socket took; returns its key.
    fn slow_enter(
        &self,
        part: usize,
        fd: RawFd,
        queued: Instant,
        sent: Arc<AtomicUsize>,
    ) -> SlowKey {
        let k = SlowKey {
            part: part % WAIT_PARTS,
            fd,
        };
        let at = queued.saturating_duration_since(self.born).as_nanos() as u64;
        lock(&self.slow[k.part].0).insert(fd, (at, sent));
        k
    }

    /// Unregisters a waiting response. false: it was evicted meanwhile.
    fn slow_leave(&self, k: SlowKey) -> bool {
        lock(&self.slow[k.part].0).remove(&k.fd).is_some()
    }

    /// Evicts the slowest response waiting for its client and releases its slot: the one
    /// whose client acknowledged the fewest bytes per second since it was queued (counted
    /// over at least a second, so a response just queued is not the slowest for having had
    /// no time). false: none is waiting.
    pub(super) fn evict_slowest(&self) -> bool {
        let mut parts: Vec<_> = self.slow.iter().map(|p| lock(&p.0)).collect();
        let now = self.born.elapsed().as_nanos() as u64;
        let rate = |fd: RawFd, at: u64, sent: &AtomicUsize| {
            // The socket is open: its owner closes it only after removing its entry, under
            // the lock held here.
            let delivered = sent.load(Ordering::Relaxed).saturating_sub(unacked_fd(fd));
            let secs = (now.saturating_sub(at) as f64 / 1e9).max(1.0);
            delivered as f64 / secs
        };
        let Some((_, part, fd)) = parts
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.iter()
                    .map(move |(&fd, (at, sent))| (rate(fd, *at, sent), i, fd))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
        else {
            return false;
        };
        parts[part].remove(&fd);
        // As in `evict_oldest`: the owner closes it once it sees the shutdown.
        abort_on_close(fd);
        let _ = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Both);
        drop(parts);
        self.stats.open.fetch_sub(1, Ordering::SeqCst);
        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Takes a connection slot, evicting at the limit a connection waiting for a request
    /// head or, when there is none, the slowest response waiting for its client.
    fn acquire_slot(&self) -> bool {
        if self.stats.open.fetch_add(1, Ordering::SeqCst) < self.limits.max_connections {
            return true;
        }
        if self.evict_oldest() || self.evict_slowest() {
            return true;
        }
        self.stats.open.fetch_sub(1, Ordering::SeqCst);
        false
    }

    fn address_acquire(&self, ip: IpAddr) -> bool {
        let cap = self.limits.max_connections_per_address;
        if cap == 0 {
            return true;
        }
        let mut m = lock(&self.per_address);
        let n = m.entry(ip).or_default();
        if n.active >= cap {
            return false;
        }
        n.active += 1;
        true
    }

    /// Gives back what `hold` holds of `ip`'s counts.
    fn address_release(&self, ip: IpAddr, hold: AddressHold) {
        let mut m = lock(&self.per_address);
        if let Some(n) = m.get_mut(&ip) {
            match hold {
                AddressHold::None => {}
                AddressHold::Active => n.active -= 1,
                AddressHold::Lingering => n.lingering -= 1,
            }
            if n.active == 0 && n.lingering == 0 {
                m.remove(&ip);
            }
        }
    }

    /// A counted connection has sent its last answer: it stops counting against the cap and
    /// may linger, unless its address already has `cap` lingering connections (false: close
    /// it at once).
    fn address_linger(&self, ip: IpAddr) -> bool {
        let cap = self.limits.max_connections_per_address;
        let mut m = lock(&self.per_address);
        let Some(n) = m.get_mut(&ip) else {
            return false;
        };
        n.active -= 1;
        // Not lingering: the entry stays, it still counts `cap` lingering connections.
        let linger = n.lingering < cap;
        if linger {
            n.lingering += 1;
        }
        linger
    }
}

/// One client address's connections under `max_connections_per_address`.
#[derive(Debug, Default)]
struct AddressCount {
    /// Counted against the cap: every connection until its last answer is sent.
    active: usize,
    /// Lingering after their last answer (at most the cap more).
    lingering: usize,
}

/// What a connection holds of its address's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddressHold {
    None,
    Active,
    Lingering,
}

/// Makes the close of socket `fd` a reset (SO_LINGER 0): what its send buffer still holds
/// is dropped at once, instead of the kernel going on sending it, unowned, to a client that
/// does not read (a dropped slow response).
pub(super) fn abort_on_close(fd: RawFd) {
    let l = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // `fd` is an open socket: its owner closes it only after leaving the sets this is
    // called under, or is the caller.
    let _ = set_socket_option(fd, nix::libc::SOL_SOCKET, nix::libc::SO_LINGER, &l);
}

/// setsockopt(2) of a plain C value, for the options nix has no typed wrapper of (or none
/// that takes a raw descriptor). `fd` must be an open socket for the duration of the call.
pub(super) fn set_socket_option<T: Copy>(
    fd: RawFd,
    level: nix::libc::c_int,
    name: nix::libc::c_int,
    value: &T,
) -> std::io::Result<()> {
    // SAFETY: `value` is a valid, initialised T of the size given, borrowed for the call;
    // the kernel only reads it. A closed `fd` is an error (EBADF), not undefined behaviour.
    let r = unsafe {
        nix::libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::from_ref(value).cast(),
            std::mem::size_of::<T>() as nix::libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Bytes written to `sock` that its peer has not acknowledged yet (SIOCOUTQ); 0 when it
/// cannot be told.
pub(super) fn unacked(sock: &TcpStream) -> usize {
    unacked_fd(sock.as_raw_fd())
}

/// [`unacked`] of an open socket's descriptor.
fn unacked_fd(fd: RawFd) -> usize {
    let mut n: nix::libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one c_int to the valid, exclusively borrowed `n`;
    // the caller keeps the socket open for the duration of the call.
    let r = unsafe { nix::libc::ioctl(fd, nix::libc::TIOCOUTQ, &mut n) };
    if r < 0 { 0 } else { n.max(0) as usize }
}

/// `m` locked; a poisoned lock is taken as it is.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a connection holds (its slot or its place among the refusals, its address's
    /// count, its entry in the waiting set, a body's budget) is given back when the value
    /// holding it is dropped, once, and not at all for a slot an eviction took.
    #[test]
    fn what_a_connection_holds_is_given_back_when_dropped() {
        let limits = Limits {
            max_connections: 1,
            max_connections_per_address: 1,
            max_body_total: 10,
            ..Limits::default()
        };
        let adm = Arc::new(Admission::new(limits, Arc::default()));
        let (one, two): (IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let open = |adm: &Admission| adm.stats.open.load(Ordering::SeqCst);
        // Evicting shuts the socket down: a real one.
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut a = adm.admit(0, sock.as_raw_fd(), one).unwrap();
        assert!(!a.refused());
        assert_eq!(open(&adm), 1);
        // At the limit with nothing to evict: refused, and its address is not counted.
        let b = adm.admit(0, sock.as_raw_fd(), two).unwrap();
        assert!(b.refused());
        assert_eq!(adm.rejecting.load(Ordering::SeqCst), 1);
        assert!(lock(&adm.per_address).get(&two).is_none());
        drop(b);
        assert_eq!(adm.rejecting.load(Ordering::SeqCst), 0);
        // Waiting for a head, `a` is evicted for a new connection, which takes its slot.
        a.enter_waiting(Instant::now());
        let c = adm.admit(1, sock.as_raw_fd(), two).unwrap();
        assert!(!c.refused());
        assert_eq!(adm.stats.evicted.load(Ordering::Relaxed), 1);
        assert!(!a.leave_waiting());
        drop(a);
        assert_eq!(open(&adm), 1, "an evicted slot is not given back twice");
        assert!(lock(&adm.per_address).get(&one).is_none());
        drop(c);
        assert_eq!(open(&adm), 0);
        assert!(lock(&adm.per_address).is_empty());
        // The body budget.
        let r = adm.body_reserve(6).unwrap();
        assert!(adm.body_reserve(6).is_none());
        drop(r);
        assert!(adm.body_reserve(10).is_some());
        assert_eq!(adm.bodies.load(Ordering::SeqCst), 0);
    }
}
