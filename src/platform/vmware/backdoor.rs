//! The VMware backdoor and the RPCI channel over it: how a guest reads and writes its
//! guestinfo variables (`info-get guestinfo.KEY`, `info-set guestinfo.KEY VALUE`) without
//! VMware Tools.
//!
//! The backdoor is an I/O port the hypervisor intercepts: `in eax, dx` on port 0x5658 with
//! the magic `0x564D5868` ("VMXh") in eax and a command in cx; the hypervisor answers in the
//! registers. On any other machine the same instruction faults (or reaches real hardware), so
//! it is only ever executed after [`super::detect`] found VMware's CPUID signature.
//!
//! The message protocol (command 30, "message"; the message type in the high half of ecx):
//! open a channel for protocol "RPCI" (`0x49435052`, asking for cookies with flag
//! `0x80000000`: the channel id comes back in the high half of edx, the cookies in esi/edi),
//! send the request's size, then the request (4 bytes per call in ebx, or all at once
//! through the high-bandwidth port 0x5659 with `rep outsb` when the size reply says so),
//! receive the reply's size, then the reply (4 bytes per call, or `rep insb`), acknowledge
//! it (receive-status), and close the channel. Every reply carries a status in the high half
//! of ecx (ebx for the high-bandwidth port): bit 0 success, bit 1 "a reply is waiting", bit 4
//! "the VM was checkpointed, start over", bit 7 "high bandwidth available". This is the
//! protocol of open-vm-tools' `lib/message` and `lib/backdoor` and of
//! `github.com/vmware/vmw-guestinfo`, which Ignition uses.
//!
//! [`Channel`] runs the protocol on any [`Backdoor`]: [`Port`] is the real one (x86_64 inline
//! assembly); the tests run it against a simulated host.
//!
//! Not replaced by the `vmw_backdoor` crate (0.2.4 of 2023, which afterburn uses; checked
//! 2026-11): it sends no RPCI command but `info-get`, `log` and `tools.set.version` (no
//! `info-set`, so [`super::delete`] could not be built on it), speaks only high bandwidth
//! with no checkpoint retry, no cookie-less fallback and no bound on the reply it allocates,
//! and has no seam to run its protocol against the simulated host of the tests below;
//! measured, it also adds 8,192 bytes to the static binary (5,237,432 → 5,245,624) and a
//! second `thiserror` (1.x).

use anyhow::{Result, bail};

/// "VMXh": eax of every backdoor call.
pub const MAGIC: u32 = 0x564D_5868;
/// The low-bandwidth backdoor port ("VX").
pub const PORT: u16 = 0x5658;
/// The high-bandwidth backdoor port ("VY").
pub const HB_PORT: u16 = 0x5659;
/// Backdoor command: the hypervisor's version (ebx answers [`MAGIC`] on VMware).
pub const CMD_GETVERSION: u16 = 10;
/// Backdoor command: the message protocol.
pub const CMD_MESSAGE: u16 = 30;
/// High-bandwidth command: a message payload.
pub const HB_CMD_MESSAGE: u16 = 0;

/// Message types (the high half of ecx).
pub const TYPE_OPEN: u16 = 0;
pub const TYPE_SEND_SIZE: u16 = 1;
pub const TYPE_SEND_PAYLOAD: u16 = 2;
pub const TYPE_RECV_SIZE: u16 = 3;
pub const TYPE_RECV_PAYLOAD: u16 = 4;
pub const TYPE_RECV_STATUS: u16 = 5;
pub const TYPE_CLOSE: u16 = 6;

/// Status bits of a message reply.
pub const STATUS_SUCCESS: u16 = 0x0001;
pub const STATUS_DORECV: u16 = 0x0002;
pub const STATUS_CPT: u16 = 0x0010;
pub const STATUS_HB: u16 = 0x0080;

/// The RPCI protocol ("RPCI"): guest-to-host commands such as `info-get`.
pub const PROTO_RPCI: u32 = 0x4943_5052;
/// Open flag: ask for cookies (checked on every later call of the channel).
pub const FLAG_COOKIE: u32 = 0x8000_0000;

/// How many times a message is started over after a checkpoint before giving up.
const CHECKPOINT_RETRIES: usize = 8;

/// The registers of a backdoor call, in and out (32 bits each: the protocol uses no more,
/// except for the buffer pointers of the high-bandwidth calls, which [`Backdoor::hb_out`] and
/// [`Backdoor::hb_in`] take as slices).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Regs {
    pub ax: u32,
    pub bx: u32,
    pub cx: u32,
    pub dx: u32,
    pub si: u32,
    pub di: u32,
    pub bp: u32,
}

/// A backdoor: the real port ([`Port`]) or, in tests, a simulated host.
pub trait Backdoor {
    /// `in eax, dx` on the low-bandwidth port (ax and dx's low half are set by the caller).
    fn call(&mut self, r: Regs) -> Regs;
    /// `rep outsb` of `buf` to the high-bandwidth port (esi points at `buf`, ecx is its
    /// length; `r.si` and `r.cx` are ignored).
    fn hb_out(&mut self, r: Regs, buf: &[u8]) -> Regs;
    /// `rep insb` from the high-bandwidth port into `buf` (edi points at `buf`, ecx is its
    /// length; `r.di` and `r.cx` are ignored).
    fn hb_in(&mut self, r: Regs, buf: &mut [u8]) -> Regs;
}

/// The status half of a low-bandwidth message reply.
fn status(r: &Regs) -> u16 {
    (r.cx >> 16) as u16
}

/// The real backdoor port. Only [`super::detect`] creates one, after finding VMware.
#[cfg(target_arch = "x86_64")]
pub struct Port {
    _private: (),
}

#[cfg(target_arch = "x86_64")]
impl Port {
    /// The port, for a caller that checked the CPUID signature of VMware.
    ///
    /// # Safety
    /// The machine must be a VMware virtual machine: elsewhere the backdoor instructions
    /// fault or touch whatever device decodes these I/O ports.
    pub(super) unsafe fn new_on_vmware() -> Port {
        Port { _private: () }
    }
}

#[cfg(target_arch = "x86_64")]
impl Backdoor for Port {
    fn call(&mut self, r: Regs) -> Regs {
        let mut o = r;
        let mut bx = u64::from(r.bx);
        // SAFETY: a Port exists only on VMware (see `new_on_vmware`), where `in` on the
        // backdoor port is intercepted by the hypervisor and only changes the six registers
        // declared here. rbx cannot be an operand (LLVM reserves it), so its value travels in
        // r8 and is swapped in and back; rbx is restored before the block ends.
        unsafe {
            core::arch::asm!(
                "xchg r8, rbx",
                "in eax, dx",
                "xchg r8, rbx",
                inout("eax") o.ax,
                inout("r8") bx,
                inout("ecx") o.cx,
                inout("edx") o.dx,
                inout("esi") o.si,
                inout("edi") o.di,
                options(nostack),
            );
        }
        o.bx = bx as u32;
        o
    }

    fn hb_out(&mut self, r: Regs, buf: &[u8]) -> Regs {
        let mut o = r;
        let mut bx = u64::from(r.bx);
        let mut bp = u64::from(r.bp);
        let mut cx = buf.len();
        let mut si = buf.as_ptr() as usize;
        let mut di = u64::from(r.di);
        // SAFETY: on VMware only (see `new_on_vmware`). `rep outsb` reads exactly
        // `buf.len()` bytes from `buf` (cx, si) forwards (cld). rbx and rbp cannot be
        // operands, so their values travel in r8 and r9: rbx is swapped in and back, rbp is
        // saved on the stack (hence no `nostack`) and restored; both are as before at the
        // end. The hypervisor only changes the registers declared here.
        unsafe {
            core::arch::asm!(
                "xchg r8, rbx",
                "push rbp",
                "mov rbp, r9",
                "cld",
                "rep outsb",
                "mov r9, rbp",
                "pop rbp",
                "xchg r8, rbx",
                inout("eax") o.ax,
                inout("r8") bx,
                inout("rcx") cx,
                inout("edx") o.dx,
                inout("rsi") si,
                inout("rdi") di,
                inout("r9") bp,
            );
        }
        let _ = (cx, si);
        o.bx = bx as u32;
        o.di = di as u32;
        o.bp = bp as u32;
        o
    }

    fn hb_in(&mut self, r: Regs, buf: &mut [u8]) -> Regs {
        let mut o = r;
        let mut bx = u64::from(r.bx);
        let mut bp = u64::from(r.bp);
        let mut cx = buf.len();
        let mut di = buf.as_mut_ptr() as usize;
        let mut si = u64::from(r.si);
        // SAFETY: on VMware only (see `new_on_vmware`). `rep insb` writes exactly
        // `buf.len()` bytes into `buf` (cx, di) forwards (cld), which we borrow mutably. rbx
        // and rbp travel in r8 and r9 as in `hb_out`, and are as before at the end.
        unsafe {
            core::arch::asm!(
                "xchg r8, rbx",
                "push rbp",
                "mov rbp, r9",
                "cld",
                "rep insb",
                "mov r9, rbp",
                "pop rbp",
                "xchg r8, rbx",
                inout("eax") o.ax,
                inout("r8") bx,
                inout("rcx") cx,
                inout("edx") o.dx,
                inout("rsi") si,
                inout("rdi") di,
                inout("r9") bp,
            );
        }
        let _ = (cx, di);
        o.bx = bx as u32;
        o.si = si as u32;
        o.bp = bp as u32;
        o
    }
}

/// Asks the backdoor for the hypervisor's version: ebx answers [`MAGIC`] on VMware.
pub fn get_version(bd: &mut dyn Backdoor) -> Option<u32> {
    let r = bd.call(Regs {
        ax: MAGIC,
        bx: !MAGIC,
        cx: u32::from(CMD_GETVERSION),
        dx: u32::from(PORT),
        ..Regs::default()
    });
    (r.bx == MAGIC && r.ax != u32::MAX).then_some(r.ax)
}

/// An open message channel.
pub struct Channel<'a> {
    bd: &'a mut dyn Backdoor,
    id: u16,
    cookie_high: u32,
    cookie_low: u32,
    open: bool,
}

impl<'a> Channel<'a> {
    /// Opens a channel for `proto` (with cookies; without, if the host does not offer them).
    pub fn open(bd: &'a mut dyn Backdoor, proto: u32) -> Result<Channel<'a>> {
        for flags in [FLAG_COOKIE, 0] {
            let r = bd.call(Regs {
                ax: MAGIC,
                bx: proto | flags,
                cx: u32::from(TYPE_OPEN) << 16 | u32::from(CMD_MESSAGE),
                dx: u32::from(PORT),
                ..Regs::default()
            });
            if status(&r) & STATUS_SUCCESS != 0 {
                return Ok(Channel {
                    bd,
                    id: (r.dx >> 16) as u16,
                    cookie_high: r.si,
                    cookie_low: r.di,
                    open: true,
                });
            }
        }
        bail!("VMware backdoor: the host refused to open an RPCI channel")
    }

    /// A low-bandwidth message call of type `ty` with `bx`.
    fn msg(&mut self, ty: u16, bx: u32) -> Regs {
        self.bd.call(Regs {
            ax: MAGIC,
            bx,
            cx: u32::from(ty) << 16 | u32::from(CMD_MESSAGE),
            dx: u32::from(self.id) << 16 | u32::from(PORT),
            si: self.cookie_high,
            di: self.cookie_low,
            bp: 0,
        })
    }

    /// Registers of a high-bandwidth call (the caller adds the cookies).
    fn hb_regs(&self) -> Regs {
        Regs {
            ax: MAGIC,
            bx: u32::from(STATUS_SUCCESS) << 16 | u32::from(HB_CMD_MESSAGE),
            dx: u32::from(self.id) << 16 | u32::from(HB_PORT),
            ..Regs::default()
        }
    }

    /// Sends one message.
    pub fn send(&mut self, buf: &[u8]) -> Result<()> {
        let Ok(size) = u32::try_from(buf.len()) else {
            bail!("VMware backdoor: a message of {} bytes is too large", buf.len());
        };
        'attempt: for _ in 0..CHECKPOINT_RETRIES {
            let r = self.msg(TYPE_SEND_SIZE, size);
            if status(&r) & STATUS_SUCCESS == 0 {
                bail!("VMware backdoor: the host refused a message of {size} bytes");
            }
            if buf.is_empty() {
                return Ok(());
            }
            if status(&r) & STATUS_HB != 0 {
                // Out: esi is the buffer; the cookies go in ebp (high) and edi (low).
                let mut regs = self.hb_regs();
                regs.bp = self.cookie_high;
                regs.di = self.cookie_low;
                let r = self.bd.hb_out(regs, buf);
                let st = (r.bx >> 16) as u16;
                if st & STATUS_SUCCESS == 0 {
                    if st & STATUS_CPT != 0 {
                        continue 'attempt;
                    }
                    bail!("VMware backdoor: the host refused the message (high bandwidth)");
                }
                return Ok(());
            }
            for chunk in buf.chunks(4) {
                let mut word = [0u8; 4];
                word[..chunk.len()].copy_from_slice(chunk);
                let r = self.msg(TYPE_SEND_PAYLOAD, u32::from_le_bytes(word));
                if status(&r) & STATUS_SUCCESS == 0 {
                    if status(&r) & STATUS_CPT != 0 {
                        continue 'attempt;
                    }
                    bail!("VMware backdoor: the host refused the message payload");
                }
            }
            return Ok(());
        }
        bail!("VMware backdoor: sending kept being interrupted by checkpoints")
    }

    /// Receives one message (None: no message is waiting), refusing more than `max` bytes.
    pub fn receive(&mut self, max: u64) -> Result<Option<Vec<u8>>> {
        'attempt: for _ in 0..CHECKPOINT_RETRIES {
            let r = self.msg(TYPE_RECV_SIZE, 0);
            if status(&r) & STATUS_SUCCESS == 0 {
                bail!("VMware backdoor: receiving the reply's size failed");
            }
            if status(&r) & STATUS_DORECV == 0 {
                return Ok(None);
            }
            if (r.dx >> 16) as u16 != TYPE_SEND_SIZE {
                bail!("VMware backdoor: protocol error (the host did not announce a size)");
            }
            let size = r.bx as usize;
            if size as u64 > max {
                bail!("VMware backdoor: a reply of {size} bytes is larger than the {max}-byte limit");
            }
            let mut buf = vec![0u8; size];
            if size > 0 {
                if status(&r) & STATUS_HB != 0 {
                    // In: edi is the buffer; the cookies go in esi (high) and ebp (low).
                    let mut regs = self.hb_regs();
                    regs.si = self.cookie_high;
                    regs.bp = self.cookie_low;
                    let r = self.bd.hb_in(regs, &mut buf);
                    let st = (r.bx >> 16) as u16;
                    if st & STATUS_SUCCESS == 0 {
                        if st & STATUS_CPT != 0 {
                            continue 'attempt;
                        }
                        self.msg(TYPE_RECV_PAYLOAD, 0);
                        bail!("VMware backdoor: receiving the reply failed (high bandwidth)");
                    }
                } else {
                    for chunk in buf.chunks_mut(4) {
                        let r = self.msg(TYPE_RECV_PAYLOAD, u32::from(STATUS_SUCCESS));
                        if status(&r) & STATUS_SUCCESS == 0 {
                            if status(&r) & STATUS_CPT != 0 {
                                continue 'attempt;
                            }
                            self.msg(TYPE_RECV_PAYLOAD, 0);
                            bail!("VMware backdoor: receiving the reply failed");
                        }
                        if (r.dx >> 16) as u16 != TYPE_SEND_PAYLOAD {
                            self.msg(TYPE_RECV_PAYLOAD, 0);
                            bail!("VMware backdoor: protocol error (the host did not send payload)");
                        }
                        let n = chunk.len();
                        chunk.copy_from_slice(&r.bx.to_le_bytes()[..n]);
                    }
                }
            }
            let r = self.msg(TYPE_RECV_STATUS, u32::from(STATUS_SUCCESS));
            if status(&r) & STATUS_SUCCESS == 0 {
                if status(&r) & STATUS_CPT != 0 {
                    continue 'attempt;
                }
                bail!("VMware backdoor: acknowledging the reply failed");
            }
            return Ok(Some(buf));
        }
        bail!("VMware backdoor: receiving kept being interrupted by checkpoints")
    }

    /// Closes the channel.
    pub fn close(mut self) -> Result<()> {
        self.open = false;
        let r = self.msg(TYPE_CLOSE, 0);
        if status(&r) & STATUS_SUCCESS == 0 {
            bail!("VMware backdoor: closing the RPCI channel failed");
        }
        Ok(())
    }
}

impl Drop for Channel<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.msg(TYPE_CLOSE, 0);
        }
    }
}

/// An RPCI command on an open channel: the reply's text after its status, and whether the
/// host succeeded ("1 …") rather than failed ("0 reason").
pub fn rpci(ch: &mut Channel<'_>, command: &[u8], max_reply: u64) -> Result<(bool, Vec<u8>)> {
    ch.send(command)?;
    let Some(reply) = ch.receive(max_reply)? else {
        bail!("VMware backdoor: no reply to an RPCI command");
    };
    let ok = reply.starts_with(b"1 ") || reply == b"1";
    let text = reply.get(2..).unwrap_or_default().to_vec();
    Ok((ok, text))
}

#[cfg(test)]
pub(crate) mod sim {
    //! A simulated VMware host: the message protocol as the hypervisor speaks it (channels,
    //! cookies, low- and high-bandwidth transfers, checkpoints), answering RPCI `info-get`
    //! and `info-set` from a map of guestinfo variables.

    use std::collections::HashMap;

    use super::*;

    #[derive(Default)]
    pub struct Host {
        pub vars: HashMap<String, String>,
        /// Offer high bandwidth.
        pub hb: bool,
        /// Refuse cookies (an old host).
        pub no_cookies: bool,
        /// Checkpoint the VM at these call numbers (the call then fails with the CPT bit).
        pub checkpoints: Vec<usize>,
        /// Every request the host received.
        pub requests: Vec<String>,
        pub calls: usize,
        pub open_channels: usize,
        pub(crate) chan: Option<Chan>,
    }

    pub(crate) struct Chan {
        id: u16,
        cookies: (u32, u32),
        inbox: Vec<u8>,
        expect: usize,
        reply: Vec<u8>,
        sent: usize,
    }

    const COOKIES: (u32, u32) = (0xC0C0_0001, 0xC0C0_0002);

    fn reply(status: u16, bx: u32) -> Regs {
        Regs {
            ax: 0,
            bx,
            cx: u32::from(status) << 16,
            ..Regs::default()
        }
    }

    impl Host {
        fn checkpointed(&mut self) -> bool {
            self.calls += 1;
            self.checkpoints.contains(&self.calls)
        }

        fn answer(&mut self, request: &[u8]) -> Vec<u8> {
            let req = String::from_utf8_lossy(request).into_owned();
            self.requests.push(req.clone());
            if let Some(key) = req.strip_prefix("info-get guestinfo.") {
                return match self.vars.get(&key.to_ascii_lowercase()) {
                    Some(v) => format!("1 {v}").into_bytes(),
                    None => b"0 No value found".to_vec(),
                };
            }
            if let Some(kv) = req.strip_prefix("info-set guestinfo.") {
                let (k, v) = kv.split_once(' ').unwrap_or((kv, ""));
                self.vars.insert(k.to_ascii_lowercase(), v.to_string());
                return b"1 ".to_vec();
            }
            b"0 Unknown command".to_vec()
        }

        fn chan_for(&mut self, r: &Regs, cookies: (u32, u32)) -> Option<&mut Chan> {
            let id = (r.dx >> 16) as u16;
            let no_cookies = self.no_cookies;
            self.chan
                .as_mut()
                .filter(|c| c.id == id && (no_cookies || c.cookies == cookies))
        }
    }

    impl Backdoor for Host {
        fn call(&mut self, r: Regs) -> Regs {
            assert_eq!(r.ax, MAGIC, "every call carries the magic");
            assert_eq!(r.dx as u16, PORT, "low-bandwidth calls use port 0x5658");
            let cmd = r.cx as u16;
            if cmd == CMD_GETVERSION {
                return Regs {
                    ax: 6,
                    bx: MAGIC,
                    ..Regs::default()
                };
            }
            assert_eq!(cmd, CMD_MESSAGE);
            let ty = (r.cx >> 16) as u16;
            if ty == TYPE_OPEN {
                assert_eq!(r.bx & !FLAG_COOKIE, PROTO_RPCI);
                if r.bx & FLAG_COOKIE != 0 && self.no_cookies {
                    return reply(0, 0);
                }
                assert!(self.chan.is_none(), "one channel at a time");
                self.open_channels += 1;
                self.chan = Some(Chan {
                    id: 7,
                    cookies: COOKIES,
                    inbox: Vec::new(),
                    expect: 0,
                    reply: Vec::new(),
                    sent: 0,
                });
                return Regs {
                    cx: u32::from(STATUS_SUCCESS) << 16,
                    dx: 7 << 16,
                    si: COOKIES.0,
                    di: COOKIES.1,
                    ..Regs::default()
                };
            }
            if ty == TYPE_CLOSE {
                self.chan = None;
                return reply(STATUS_SUCCESS, 0);
            }
            if self.checkpointed() {
                return reply(STATUS_CPT, 0);
            }
            let hb = if self.hb { STATUS_HB } else { 0 };
            let mut answer = None;
            let Some(c) = self.chan_for(&r, (r.si, r.di)) else {
                return reply(0, 0);
            };
            let out = match ty {
                TYPE_SEND_SIZE => {
                    c.inbox.clear();
                    c.expect = r.bx as usize;
                    if c.expect == 0 {
                        answer = Some(Vec::new());
                    }
                    reply(STATUS_SUCCESS | hb, 0)
                }
                TYPE_SEND_PAYLOAD => {
                    let take = (c.expect - c.inbox.len()).min(4);
                    c.inbox.extend_from_slice(&r.bx.to_le_bytes()[..take]);
                    if c.inbox.len() == c.expect {
                        answer = Some(std::mem::take(&mut c.inbox));
                    }
                    reply(STATUS_SUCCESS, 0)
                }
                TYPE_RECV_SIZE => {
                    if c.reply.is_empty() {
                        reply(STATUS_SUCCESS, 0)
                    } else {
                        c.sent = 0;
                        Regs {
                            dx: u32::from(TYPE_SEND_SIZE) << 16,
                            ..reply(STATUS_SUCCESS | STATUS_DORECV | hb, c.reply.len() as u32)
                        }
                    }
                }
                TYPE_RECV_PAYLOAD => {
                    let mut w = [0u8; 4];
                    let n = (c.reply.len() - c.sent).min(4);
                    w[..n].copy_from_slice(&c.reply[c.sent..c.sent + n]);
                    c.sent += n;
                    Regs {
                        dx: u32::from(TYPE_SEND_PAYLOAD) << 16,
                        ..reply(STATUS_SUCCESS, u32::from_le_bytes(w))
                    }
                }
                TYPE_RECV_STATUS => {
                    c.reply.clear();
                    reply(STATUS_SUCCESS, 0)
                }
                _ => reply(0, 0),
            };
            if let Some(req) = answer {
                let a = self.answer(&req);
                self.chan.as_mut().unwrap().reply = a;
            }
            out
        }

        fn hb_out(&mut self, r: Regs, buf: &[u8]) -> Regs {
            assert_eq!(r.ax, MAGIC);
            assert_eq!(r.dx as u16, HB_PORT, "high-bandwidth calls use port 0x5659");
            assert_eq!(r.bx, u32::from(STATUS_SUCCESS) << 16 | u32::from(HB_CMD_MESSAGE));
            if self.checkpointed() {
                return reply(0, u32::from(STATUS_CPT) << 16);
            }
            // Out: cookies in ebp (high) and edi (low).
            let Some(c) = self.chan_for(&r, (r.bp, r.di)) else {
                return reply(0, 0);
            };
            assert_eq!(buf.len(), c.expect);
            let req = buf.to_vec();
            let a = self.answer(&req);
            self.chan.as_mut().unwrap().reply = a;
            reply(0, u32::from(STATUS_SUCCESS) << 16)
        }

        fn hb_in(&mut self, r: Regs, buf: &mut [u8]) -> Regs {
            assert_eq!(r.ax, MAGIC);
            assert_eq!(r.dx as u16, HB_PORT);
            if self.checkpointed() {
                return reply(0, u32::from(STATUS_CPT) << 16);
            }
            // In: cookies in esi (high) and ebp (low).
            let Some(c) = self.chan_for(&r, (r.si, r.bp)) else {
                return reply(0, 0);
            };
            assert_eq!(buf.len(), c.reply.len());
            buf.copy_from_slice(&c.reply);
            reply(0, u32::from(STATUS_SUCCESS) << 16)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sim::Host;
    use super::*;

    fn get(host: &mut Host, key: &str) -> (bool, Vec<u8>) {
        let mut ch = Channel::open(host, PROTO_RPCI).unwrap();
        let r = rpci(&mut ch, format!("info-get guestinfo.{key}").as_bytes(), 1 << 20).unwrap();
        ch.close().unwrap();
        r
    }

    #[test]
    fn getversion_answers_the_magic() {
        assert_eq!(get_version(&mut Host::default()), Some(6));
    }

    #[test]
    fn info_get_in_low_and_high_bandwidth() {
        // Sizes around the 4-byte words of low bandwidth.
        for len in [0, 1, 3, 4, 5, 8, 1001] {
            for hb in [false, true] {
                let value = "x".repeat(len);
                let mut host = Host {
                    hb,
                    ..Host::default()
                };
                host.vars.insert("k".into(), value.clone());
                assert_eq!(get(&mut host, "k"), (true, value.into_bytes()), "{len} {hb}");
                assert_eq!(host.requests, ["info-get guestinfo.k"]);
                assert_eq!(host.open_channels, 1);
            }
        }
    }

    #[test]
    fn a_missing_variable_is_a_failed_reply() {
        let mut host = Host::default();
        assert_eq!(get(&mut host, "nope"), (false, b"No value found".to_vec()));
    }

    #[test]
    fn hosts_without_cookies_are_used_without() {
        let mut host = Host {
            no_cookies: true,
            ..Host::default()
        };
        host.vars.insert("k".into(), "v".into());
        assert_eq!(get(&mut host, "k"), (true, b"v".to_vec()));
    }

    #[test]
    fn checkpoints_start_the_transfer_over() {
        // Low bandwidth, for "info-get guestinfo.key" and its 12-byte reply: call 1 sends
        // the size, 2-6 the payload, 7 asks the reply's size, 8-10 receive it, 11
        // acknowledges. High bandwidth: 1 size, 2 out, 3 reply size, 4 in, 5 acknowledge.
        let cases = [(false, [2, 4, 6, 9, 11]), (true, [2, 4, 5, 4, 2])];
        for (hb, points) in cases {
            for at in points {
                let mut host = Host {
                    hb,
                    checkpoints: vec![at],
                    ..Host::default()
                };
                host.vars.insert("key".into(), "some value".into());
                assert_eq!(
                    get(&mut host, "key"),
                    (true, b"some value".to_vec()),
                    "checkpoint at call {at}, hb {hb}"
                );
            }
        }
    }

    #[test]
    fn endless_checkpoints_are_bounded() {
        let mut host = Host {
            checkpoints: (2..100).step_by(2).collect(),
            ..Host::default()
        };
        let mut ch = Channel::open(&mut host, PROTO_RPCI).unwrap();
        let e = format!("{:#}", rpci(&mut ch, b"info-get guestinfo.k", 100).unwrap_err());
        assert!(e.contains("checkpoint"), "{e}");
    }

    #[test]
    fn replies_over_the_limit_are_refused() {
        let mut host = Host::default();
        host.vars.insert("big".into(), "y".repeat(5000));
        let mut ch = Channel::open(&mut host, PROTO_RPCI).unwrap();
        let e = format!(
            "{:#}",
            rpci(&mut ch, b"info-get guestinfo.big", 1000).unwrap_err()
        );
        assert!(e.contains("larger than the 1000-byte limit"), "{e}");
    }

    #[test]
    fn info_set_then_get() {
        let mut host = Host {
            hb: true,
            ..Host::default()
        };
        let mut ch = Channel::open(&mut host, PROTO_RPCI).unwrap();
        let (ok, _) = rpci(&mut ch, b"info-set guestinfo.a b c", 100).unwrap();
        assert!(ok);
        drop(ch); // closes the channel
        assert_eq!(get(&mut host, "a"), (true, b"b c".to_vec()));
    }
}
