//! The kernel's floor for benches/serve.sh: the least any HTTP server can do per request on
//! this benchmark, measured in the same run as nginx and the agent so that the agent's
//! ratio can be read against what the machine allows at all (the load generator shares its
//! cores with the server, so the kernel's TCP path and wrk cost most of each request).
//!
//! It is not a server anyone should run: two threads, each with its own epoll set on the
//! shared listener (EPOLLEXCLUSIVE), level-triggered; per readable event one recv(2) and the
//! same prepared response sent by splice(2) from a per-thread pipe that tee(2) refills with
//! several copies at a time — the agent's send path without HTTP parsing, routing, limits,
//! time-outs, metrics or any check of what was asked. Before it sleeps a thread looks
//! again a few times with sched_yield between, as the agent's loops do.
//!
//! std only (a few libc calls declared here), so the bench builds it with a bare `rustc -O`:
//!     rustc -O --edition 2024 benches/tools/floor.rs -o floor
//!     floor 127.0.0.1:8081 body-file content-type
//! Prints `listening` once it accepts connections; runs until killed.

mod sys;

use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::raw::{c_int, c_uint, c_void};

use sys::*;

unsafe extern "C" {
    fn accept4(fd: c_int, addr: *mut c_void, len: *mut c_void, flags: c_int) -> c_int;
    fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize;
    fn splice(fd_in: c_int, off_in: *mut i64, fd_out: c_int, off_out: *mut i64, n: usize, flags: c_uint) -> isize;
    fn tee(fd_in: c_int, fd_out: c_int, n: usize, flags: c_uint) -> isize;
    fn pipe2(fds: *mut c_int, flags: c_int) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: u32) -> c_int;
    fn sched_yield() -> c_int;
}

const EPOLLIN: u32 = 0x1;
const EPOLLEXCLUSIVE: u32 = 1 << 28;
const EPOLL_CTL_ADD: c_int = 1;
const F_SETPIPE_SZ: c_int = 1031;
const SOCK_CLOEXEC: c_int = 0o2000000;
const IPPROTO_TCP: c_int = 6;
const TCP_NODELAY: c_int = 1;
const SOL_SOCKET: c_int = 1;
const SO_SNDBUF: c_int = 7;
const LISTENER: u64 = u64::MAX;
/// Copies of the response one tee(2) puts in the scratch pipe (the agent: 256 KiB of them).
const PIPE_BYTES: usize = 256 * 1024;
/// Looks before a thread sleeps (the agent's SPIN).
const SPIN: usize = 5;

fn pipe(size: usize) -> [c_int; 2] {
    let mut p = [0; 2];
    // SAFETY: p has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { pipe2(p.as_mut_ptr(), SOCK_CLOEXEC) }, 0, "pipe2");
    // SAFETY: F_SETPIPE_SZ takes an int; a smaller size than asked is fine for a floor.
    unsafe { fcntl(p[1], F_SETPIPE_SZ, size.next_power_of_two() as c_int) };
    p
}

/// Splices exactly `len` bytes from the pipe `from` into the blocking socket `to`; false when
/// the client is gone (what is left of the copy is drained so the next one starts whole).
fn send(from: c_int, to: c_int, len: usize) -> bool {
    let mut left = len;
    while left > 0 {
        // SAFETY: both are open descriptors; no offsets (pipe and socket).
        let n = unsafe { splice(from, std::ptr::null_mut(), to, std::ptr::null_mut(), left, 0) };
        if n <= 0 {
            let mut sink = vec![0u8; left];
            let mut off = 0;
            while off < left {
                // SAFETY: reads into sink's remaining room from the pipe.
                let r = unsafe { read(from, sink[off..].as_mut_ptr().cast(), left - off) };
                if r <= 0 {
                    break;
                }
                off += r as usize;
            }
            return false;
        }
        left -= n as usize;
    }
    true
}

fn serve(lfd: c_int, resp: &'static [u8]) {
    // SAFETY: plain epoll calls on descriptors this thread owns or shares read-only.
    let ep = unsafe { epoll_create1(SOCK_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1");
    let mut ev = EpollEvent { events: EPOLLIN | EPOLLEXCLUSIVE, data: LISTENER };
    // SAFETY: ev is a valid event for the call.
    assert_eq!(unsafe { epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &mut ev) }, 0, "epoll_ctl");
    let copies = (PIPE_BYTES / resp.len()).max(1);
    let master = pipe(resp.len() * copies);
    for _ in 0..copies {
        let mut off = 0;
        while off < resp.len() {
            // SAFETY: writes resp's remaining bytes into the master pipe.
            let n = unsafe { write(master[1], resp[off..].as_ptr().cast(), resp.len() - off) };
            assert!(n > 0, "filling the pipe");
            off += n as usize;
        }
    }
    let scratch = pipe(resp.len() * copies);
    let mut ready = 0;
    let mut evs = [EpollEvent { events: 0, data: 0 }; 256];
    let mut buf = [0u8; 16 * 1024];
    loop {
        let mut n = 0;
        for _ in 0..SPIN {
            // SAFETY: evs has room for 256 events.
            n = unsafe { epoll_wait(ep, evs.as_mut_ptr(), 256, 0) };
            if n > 0 {
                break;
            }
            // SAFETY: no arguments.
            unsafe { sched_yield() };
        }
        if n <= 0 {
            // SAFETY: as above.
            n = unsafe { epoll_wait(ep, evs.as_mut_ptr(), 256, 1000) };
        }
        for e in &evs[..n.max(0) as usize] {
            let data = e.data;
            if data == LISTENER {
                loop {
                    // SAFETY: no peer address wanted.
                    let fd = unsafe { accept4(lfd, std::ptr::null_mut(), std::ptr::null_mut(), SOCK_CLOEXEC) };
                    if fd < 0 {
                        break;
                    }
                    let one: c_int = 1;
                    let sndbuf: c_int = 256 * 1024;
                    let mut ev = EpollEvent { events: EPOLLIN, data: fd as u64 };
                    // SAFETY: options of an open socket; ev is valid.
                    unsafe {
                        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, (&one as *const c_int).cast(), 4);
                        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, (&sndbuf as *const c_int).cast(), 4);
                        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &mut ev);
                    }
                }
                continue;
            }
            let fd = data as c_int;
            // SAFETY: reads into buf from an open socket.
            let r = unsafe { recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if r <= 0 {
                // SAFETY: closing removes it from the epoll set.
                unsafe { close(fd) };
                continue;
            }
            if ready == 0 {
                // SAFETY: tee takes page references from master into scratch (empty here).
                let t = unsafe { tee(master[0], scratch[1], resp.len() * copies, 0) };
                assert_eq!(t as usize, resp.len() * copies, "tee");
                ready = copies;
            }
            ready -= 1;
            if !send(scratch[0], fd, resp.len()) {
                // SAFETY: as above.
                unsafe { close(fd) };
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: floor ADDR BODY-FILE CONTENT-TYPE");
        std::process::exit(2);
    }
    let body = std::fs::read(&args[2]).expect("reading the body");
    let mut resp = format!(
        "HTTP/1.1 200 OK\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n",
        args[3],
        body.len()
    )
    .into_bytes();
    resp.extend_from_slice(&body);
    let resp: &'static [u8] = Box::leak(resp.into_boxed_slice());
    let l = TcpListener::bind(&args[1]).expect("binding");
    l.set_nonblocking(true).expect("non-blocking listener");
    let lfd = l.as_raw_fd();
    println!("listening");
    let threads: Vec<_> = (0..2).map(|_| std::thread::spawn(move || serve(lfd, resp))).collect();
    for t in threads {
        let _ = t.join();
    }
}
