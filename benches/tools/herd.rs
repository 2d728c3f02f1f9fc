//! A thundering-herd client for benches/serve.sh: N concurrent FRESH connections, each
//! connects, sends one GET, reads the whole answer (by Content-Length) and closes. It runs
//! on one thread with epoll, so the generator costs little CPU next to the server it
//! measures; the same herd runs against nginx as the reference.
//!
//! std only (a few libc calls declared here), so the bench builds it with a bare `rustc -O`:
//!     rustc -O --edition 2024 benches/tools/herd.rs -o herd
//!     herd 127.0.0.1:8080 5000 /config/worker
//! Prints one line: `p50_ms p99_ms max_ms errors ok wall_ms` (latency from socket() to the
//! last byte of the answer).

mod sys;

use std::os::raw::c_int;
use std::time::{Duration, Instant};

#[repr(C)]
struct SockaddrIn {
    family: u16,
    port: u16,
    addr: u32,
    zero: [u8; 8],
}

use sys::*;

unsafe extern "C" {
    fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int;
    fn connect(fd: c_int, addr: *const SockaddrIn, len: u32) -> c_int;
    fn __errno_location() -> *mut c_int;
}

const AF_INET: c_int = 2;
const SOCK_STREAM: c_int = 1;
const SOCK_NONBLOCK: c_int = 0o4000;
const SOCK_CLOEXEC: c_int = 0o2000000;
const EINPROGRESS: c_int = 115;
const EAGAIN: c_int = 11;
const EINTR: c_int = 4;
const EPOLL_CTL_ADD: c_int = 1;
const EPOLL_CTL_MOD: c_int = 3;
const EPOLLIN: u32 = 1;
const EPOLLOUT: u32 = 4;
const EPOLLERR: u32 = 8;
const EPOLLHUP: u32 = 16;
/// A connection not answered by then counts as an error.
const GIVE_UP: Duration = Duration::from_secs(30);

fn errno() -> c_int {
    unsafe { *__errno_location() }
}

#[derive(PartialEq)]
enum St {
    Connecting,
    Reading,
    Done,
}

struct Conn {
    fd: c_int,
    start: Instant,
    st: St,
    head: Vec<u8>,
    /// Body bytes still to read once the head is parsed.
    left: Option<usize>,
}

fn parse_head(h: &[u8]) -> Option<(u16, usize)> {
    let s = std::str::from_utf8(h).ok()?;
    let mut lines = s.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut len = 0;
    for l in lines {
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().ok()?;
        }
    }
    Some((status, len))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 && args.len() != 5 {
        eprintln!("usage: herd IPV4:PORT CONNECTIONS PATH [BATCH]");
        std::process::exit(2);
    }
    let addr: std::net::SocketAddrV4 = args[1].parse().expect("IPV4:PORT");
    let n: usize = args[2].parse().expect("CONNECTIONS");
    // New connections opened between two looks at the events (default: all at once).
    let batch: usize = args.get(4).map_or(n, |b| b.parse().expect("BATCH")).max(1);
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: herd\r\nAccept: */*\r\n\r\n",
        args[3], args[1]
    );
    let sa = SockaddrIn {
        family: AF_INET as u16,
        port: addr.port().to_be(),
        addr: u32::from(*addr.ip()).to_be(),
        zero: [0; 8],
    };
    let ep = unsafe { epoll_create1(SOCK_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1");
    let mut conns: Vec<Conn> = Vec::with_capacity(n);
    let mut lat: Vec<f64> = Vec::with_capacity(n);
    let mut errors = 0usize;
    let mut open = 0usize;
    let mut evs = vec![EpollEvent { events: 0, data: 0 }; 1024];
    let mut buf = vec![0u8; 256 * 1024];
    let t0 = Instant::now();
    let finish = |c: &mut Conn, ok: bool, lat: &mut Vec<f64>, errors: &mut usize| {
        if ok {
            lat.push(c.start.elapsed().as_secs_f64() * 1000.0);
        } else {
            *errors += 1;
        }
        unsafe { close(c.fd) };
        c.st = St::Done;
    };
    while conns.len() < n || open > 0 {
        for _ in 0..batch {
            if conns.len() >= n {
                break;
            }
            let start = Instant::now();
            let fd = unsafe { socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0) };
            assert!(fd >= 0, "socket: errno {} (raise ulimit -n)", errno());
            let r = unsafe { connect(fd, &sa, std::mem::size_of::<SockaddrIn>() as u32) };
            let idx = conns.len();
            conns.push(Conn {
                fd,
                start,
                st: St::Connecting,
                head: Vec::new(),
                left: None,
            });
            if r != 0 && errno() != EINPROGRESS {
                let c = &mut conns[idx];
                finish(c, false, &mut lat, &mut errors);
                continue;
            }
            let mut ev = EpollEvent {
                events: EPOLLOUT,
                data: idx as u64,
            };
            assert_eq!(unsafe { epoll_ctl(ep, EPOLL_CTL_ADD, fd, &mut ev) }, 0);
            open += 1;
        }
        let timeout = if conns.len() < n { 0 } else { 100 };
        let k = unsafe { epoll_wait(ep, evs.as_mut_ptr(), evs.len() as c_int, timeout) };
        if k < 0 {
            assert_eq!(errno(), EINTR, "epoll_wait");
            continue;
        }
        for e in &evs[..k as usize] {
            let (idx, events) = (e.data as usize, e.events);
            let c = &mut conns[idx];
            if c.st == St::Connecting {
                if events & (EPOLLERR | EPOLLHUP) != 0 {
                    finish(c, false, &mut lat, &mut errors);
                    open -= 1;
                    continue;
                }
                let w = unsafe { write(c.fd, req.as_ptr().cast(), req.len()) };
                if w != req.len() as isize {
                    finish(c, false, &mut lat, &mut errors);
                    open -= 1;
                    continue;
                }
                c.st = St::Reading;
                let mut ev = EpollEvent {
                    events: EPOLLIN,
                    data: idx as u64,
                };
                assert_eq!(unsafe { epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &mut ev) }, 0);
                continue;
            }
            if c.st != St::Reading {
                continue;
            }
            loop {
                let r = unsafe { read(c.fd, buf.as_mut_ptr().cast(), buf.len()) };
                if r < 0 {
                    let e = errno();
                    if e == EAGAIN {
                        break;
                    }
                    if e == EINTR {
                        continue;
                    }
                    finish(c, false, &mut lat, &mut errors);
                    open -= 1;
                    break;
                }
                if r == 0 {
                    finish(c, false, &mut lat, &mut errors);
                    open -= 1;
                    break;
                }
                let mut got = &buf[..r as usize];
                if c.left.is_none() {
                    let from = c.head.len().saturating_sub(3);
                    c.head.extend_from_slice(got);
                    let Some(end) = c.head[from..]
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map(|p| from + p)
                    else {
                        continue;
                    };
                    match parse_head(&c.head[..end]) {
                        Some((200, len)) => {
                            let body = c.head.len() - end - 4;
                            c.left = Some(len.saturating_sub(body));
                        }
                        _ => {
                            finish(c, false, &mut lat, &mut errors);
                            open -= 1;
                            break;
                        }
                    }
                    got = &[];
                }
                let left = c.left.unwrap_or(0).saturating_sub(got.len());
                c.left = Some(left);
                if left == 0 {
                    finish(c, true, &mut lat, &mut errors);
                    open -= 1;
                    break;
                }
            }
        }
        if conns.len() >= n && t0.elapsed() > GIVE_UP {
            for c in conns.iter_mut().filter(|c| c.st != St::Done) {
                finish(c, false, &mut lat, &mut errors);
            }
            break;
        }
    }
    let wall = t0.elapsed().as_secs_f64() * 1000.0;
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        if lat.is_empty() {
            0.0
        } else {
            lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1]
        }
    };
    println!(
        "{:.1} {:.1} {:.1} {} {} {:.0}",
        pct(0.50),
        pct(0.99),
        lat.last().copied().unwrap_or(0.0),
        errors,
        lat.len(),
        wall
    );
}
