//! The few libc calls the bench tools (herd.rs, floor.rs) share, declared here so that each
//! builds with a bare `rustc -O` and std alone (`mod sys;` finds this file beside them).

use std::os::raw::{c_int, c_void};

#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct EpollEvent {
    pub events: u32,
    pub data: u64,
}

unsafe extern "C" {
    pub fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    pub fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    pub fn close(fd: c_int) -> c_int;
    pub fn epoll_create1(flags: c_int) -> c_int;
    pub fn epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: *mut EpollEvent) -> c_int;
    pub fn epoll_wait(ep: c_int, evs: *mut EpollEvent, max: c_int, timeout: c_int) -> c_int;
}
