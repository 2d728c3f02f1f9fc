//! `virtualbox`: the config is the guest property `/Ignition/Config`
//! (`VBoxManage guestproperty set VM /Ignition/Config "$(cat config.ign)"`), read through the
//! VirtualBox guest driver `/dev/vboxguest` with HGCM calls to the guest property service, as
//! Ignition does it (its `virtualbox.c`): negotiate the driver interface version, connect to
//! the service `VBoxGuestPropSvc`, call GET_PROP (function 1: name in, value buffer out,
//! timestamp out, size out; a first call with a 1-byte buffer asks the size), disconnect.
//! A property value comes back as `data NUL flags NUL`: the config is `data`.
//!
//! Like Ignition: a property `/Ignition/Config/Encoding` that is set and not empty is an error
//! (kept for a future encoding, as on VMware); no `/Ignition/Config` is no config; no
//! `/dev/vboxguest` (not VirtualBox, driver missing) is an error. After provisioning,
//! [`Provider::delete_config`] deletes both properties (DEL_PROP, function 4), as Ignition's
//! `ignition-rmcfg` does (GHSA-hj57-j5cw-2mwp); a read-only property (set with
//! `--flags RDONLYGUEST`) cannot be deleted and says so.
//!
//! The structs are those of Linux's `<linux/vboxguest.h>` and `<linux/vbox_vmmdev_types.h>`
//! (the tests compare sizes, offsets and ioctl numbers with the C headers).

use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result, bail};

use super::{Found, Provider};
use crate::fetch::Fetcher;
use runtime::limits::TooLarge;

/// The guest driver's device.
pub const DEVICE: &str = "/dev/vboxguest";
/// The property holding the config.
pub const CONFIG_PROP: &str = "/Ignition/Config";
/// The property that must be unset or empty (a future encoding).
pub const ENCODING_PROP: &str = "/Ignition/Config/Encoding";
/// The HGCM service of guest properties.
pub const SERVICE: &str = "VBoxGuestPropSvc";

/// `struct vbg_ioctl_hdr` version.
pub const HDR_VERSION: u32 = 0x10001;
/// `VBG_IOCTL_HDR_TYPE_DEFAULT`.
pub const HDR_TYPE_DEFAULT: u32 = 0;
/// The driver interface version asked for (`VBG_IOC_VERSION`), also the minimum accepted.
pub const IOC_VERSION: u32 = 0x0001_0000;
/// `VMMDEV_HGCM_LOC_LOCALHOST_EXISTING`.
pub const LOC_LOCALHOST_EXISTING: u32 = 2;
/// Guest property service functions.
pub const FN_GET_PROP: u32 = 1;
pub const FN_DEL_PROP: u32 = 4;
/// HGCM parameter types (`VMMDEV_HGCM_PARM_TYPE_*`).
pub const PARM_32BIT: u32 = 1;
pub const PARM_64BIT: u32 = 2;
pub const PARM_LINADDR: u32 = 4;
pub const PARM_LINADDR_IN: u32 = 5;

/// VirtualBox status codes (`<linux/vbox_err.h>`).
pub const VINF_SUCCESS: i32 = 0;
pub const VERR_GENERAL_FAILURE: i32 = -1;
pub const VERR_NO_MEMORY: i32 = -8;
pub const VERR_PERMISSION_DENIED: i32 = -10;
pub const VERR_BUFFER_OVERFLOW: i32 = -41;
pub const VERR_NOT_FOUND: i32 = -78;

/// `struct vbg_ioctl_hdr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IoctlHdr {
    pub size_in: u32,
    pub version: u32,
    pub type_: u32,
    pub rc: i32,
    pub size_out: u32,
    pub reserved: u32,
}

impl IoctlHdr {
    /// A header for a request whose body is `size_in` bytes in and `size_out` bytes out.
    fn new(size_in: usize, size_out: usize) -> IoctlHdr {
        let hdr = std::mem::size_of::<IoctlHdr>();
        IoctlHdr {
            size_in: (hdr + size_in) as u32,
            version: HDR_VERSION,
            type_: HDR_TYPE_DEFAULT,
            rc: VERR_GENERAL_FAILURE,
            size_out: (hdr + size_out) as u32,
            reserved: 0,
        }
    }
}

/// `struct vbg_ioctl_driver_version_info`: in `req_version, min_version, reserved1,
/// reserved2`; out `session_version, driver_version, driver_revision, reserved1,
/// reserved2` (a union of the two).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DriverVersionInfo {
    pub hdr: IoctlHdr,
    pub u: [u32; 5],
}

/// `struct vbg_ioctl_hgcm_connect`: in the service location (type, name); out the client id
/// (in the place of the location's type).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HgcmConnect {
    pub hdr: IoctlHdr,
    pub loc_type: u32,
    pub service_name: [u8; 128],
}

/// `struct vbg_ioctl_hgcm_disconnect`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HgcmDisconnect {
    pub hdr: IoctlHdr,
    pub client_id: u32,
}

/// `struct vbg_ioctl_hgcm_call` (its parameters follow it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HgcmCall {
    pub hdr: IoctlHdr,
    pub client_id: u32,
    pub function: u32,
    pub timeout_ms: u32,
    pub interruptible: u8,
    pub reserved: u8,
    pub parm_count: u16,
}

/// `struct vmmdev_hgcm_function_parameter64` (packed, 16 bytes): the type, then a union of
/// `value32` (`a`), `value64` (`a` low, `b` low half high), and `pointer { size (a),
/// linear_addr (b) }`.
#[repr(C, packed(4))]
#[derive(Debug, Clone, Copy, Default)]
pub struct HgcmParam64 {
    pub type_: u32,
    pub a: u32,
    pub b: u64,
}

impl HgcmParam64 {
    fn pointer(type_: u32, ptr: *const u8, size: usize) -> HgcmParam64 {
        HgcmParam64 {
            type_,
            a: size as u32,
            b: ptr as u64,
        }
    }
}

/// An HGCM call with `N` parameters, as one buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CallMsg<const N: usize> {
    pub call: HgcmCall,
    pub parms: [HgcmParam64; N],
}

impl<const N: usize> CallMsg<N> {
    fn new(client_id: u32, function: u32) -> CallMsg<N> {
        let body = std::mem::size_of::<Self>() - std::mem::size_of::<IoctlHdr>();
        CallMsg {
            call: HgcmCall {
                hdr: IoctlHdr::new(body, body),
                client_id,
                function,
                timeout_ms: u32::MAX,
                interruptible: 1,
                reserved: 0,
                parm_count: N as u16,
            },
            parms: [HgcmParam64::default(); N],
        }
    }
}

/// An ioctl request number.
pub type Request = nix::sys::ioctl::ioctl_num_type;

/// ioctl numbers (`_IOWR('V', nr, size)`; HGCM calls `_IOC(READ|WRITE, 'V', 7, size)`).
pub fn ioctl_driver_version_info() -> Request {
    nix::request_code_readwrite!(b'V', 0, std::mem::size_of::<DriverVersionInfo>())
}
pub fn ioctl_hgcm_connect() -> Request {
    nix::request_code_readwrite!(b'V', 4, std::mem::size_of::<HgcmConnect>())
}
pub fn ioctl_hgcm_disconnect() -> Request {
    nix::request_code_readwrite!(b'V', 5, std::mem::size_of::<HgcmDisconnect>())
}
pub fn ioctl_hgcm_call_64(size: usize) -> Request {
    nix::request_code_readwrite!(b'V', 7, size)
}

/// The name of a VirtualBox status code, for errors.
fn rc_name(rc: i32) -> String {
    match rc {
        VERR_GENERAL_FAILURE => "VERR_GENERAL_FAILURE".into(),
        VERR_NO_MEMORY => "VERR_NO_MEMORY".into(),
        VERR_PERMISSION_DENIED => "VERR_PERMISSION_DENIED".into(),
        VERR_BUFFER_OVERFLOW => "VERR_BUFFER_OVERFLOW".into(),
        VERR_NOT_FOUND => "VERR_NOT_FOUND".into(),
        other => format!("VirtualBox error {other} (see <linux/vbox_err.h>)"),
    }
}

/// Whatever carries the ioctls: the guest driver, or a simulated one in tests.
pub trait Driver {
    /// ioctl `request` on `arg` (a request struct of the size `request` encodes); an error is
    /// the ioctl's own failure (errno), not the VirtualBox status in the header.
    ///
    /// # Safety
    /// `arg` points at a writable request struct of the size encoded in `request`, whose
    /// pointer parameters (if any) point at live buffers of the sizes they give.
    unsafe fn ioctl(&mut self, request: Request, arg: *mut u8) -> std::io::Result<()>;
}

/// The guest driver device.
pub struct Device(OwnedFd);

impl Device {
    /// Opens `path` (read-write, as the driver wants).
    pub fn open(path: &Path) -> Result<Device> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::libc::O_CLOEXEC)
            .open(path)
            .with_context(|| {
                format!(
                    "opening {} (the VirtualBox guest driver, module vboxguest): is this a VirtualBox VM with the driver loaded?",
                    path.display()
                )
            })?;
        Ok(Device(f.into()))
    }
}

impl Driver for Device {
    unsafe fn ioctl(&mut self, request: Request, arg: *mut u8) -> std::io::Result<()> {
        // SAFETY: the caller guarantees `arg` is a request struct of the encoded size with
        // live buffers (this function's contract); the fd is the guest driver's, open for
        // as long as `self` lives.
        let r = unsafe { nix::libc::ioctl(self.0.as_raw_fd(), request as _, arg) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A connection to the guest property service.
pub struct Session<'a> {
    drv: &'a mut dyn Driver,
    client_id: u32,
    connected: bool,
}

/// Runs one request struct through the driver; its VirtualBox status.
///
/// # Safety
/// `msg` is a request struct starting with an [`IoctlHdr`], of the size `request` encodes;
/// its pointer parameters point at buffers that live across the call.
unsafe fn call<T>(drv: &mut dyn Driver, request: Request, msg: &mut T, what: &str) -> Result<i32> {
    // SAFETY: this function's contract.
    unsafe { drv.ioctl(request, (msg as *mut T).cast()) }
        .with_context(|| format!("VirtualBox guest driver: {what}"))?;
    // SAFETY: the request struct starts with its `IoctlHdr` (this function's contract).
    let hdr = unsafe { &*(msg as *const T).cast::<IoctlHdr>() };
    Ok(hdr.rc)
}

impl<'a> Session<'a> {
    /// Negotiates the driver interface version and connects to the property service.
    pub fn connect(drv: &'a mut dyn Driver) -> Result<Session<'a>> {
        let mut v = DriverVersionInfo {
            hdr: IoctlHdr::new(16, 20),
            u: [IOC_VERSION, IOC_VERSION, 0, 0, 0],
        };
        // SAFETY: a DriverVersionInfo with its own ioctl number; no pointers.
        let rc = unsafe { call(drv, ioctl_driver_version_info(), &mut v, "version negotiation") }?;
        if rc != VINF_SUCCESS {
            bail!(
                "VirtualBox guest driver: version negotiation failed: {}",
                rc_name(rc)
            );
        }
        let mut c = HgcmConnect {
            hdr: IoctlHdr::new(132, 4),
            loc_type: LOC_LOCALHOST_EXISTING,
            service_name: [0; 128],
        };
        c.service_name[..SERVICE.len()].copy_from_slice(SERVICE.as_bytes());
        // SAFETY: an HgcmConnect with its own ioctl number; no pointers.
        let rc = unsafe { call(drv, ioctl_hgcm_connect(), &mut c, "connecting to VBoxGuestPropSvc") }?;
        if rc != VINF_SUCCESS {
            bail!(
                "VirtualBox guest driver: connecting to {SERVICE}: {}",
                rc_name(rc)
            );
        }
        Ok(Session {
            drv,
            client_id: c.loc_type,
            connected: true,
        })
    }

    /// The raw value of property `name` (`data NUL flags NUL`), None when it does not
    /// exist; refused past `limit` bytes.
    pub fn get_raw(&mut self, name: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        let what = format!("reading VirtualBox guest property {name:?}");
        let cname = CString::new(name).context("a property name with a NUL")?;
        let mut first = [0u8; 1];
        let mut buf: Vec<u8> = Vec::new();
        // First ask with a 1-byte buffer, which reports the size; then read it whole.
        for attempt in 0..2 {
            let mut m = CallMsg::<4>::new(self.client_id, FN_GET_PROP);
            m.parms[0] = HgcmParam64::pointer(
                PARM_LINADDR_IN,
                cname.as_ptr().cast(),
                cname.as_bytes_with_nul().len(),
            );
            m.parms[1] = if attempt == 0 {
                HgcmParam64::pointer(PARM_LINADDR, first.as_mut_ptr(), first.len())
            } else {
                HgcmParam64::pointer(PARM_LINADDR, buf.as_mut_ptr(), buf.len())
            };
            m.parms[2].type_ = PARM_64BIT;
            m.parms[3].type_ = PARM_32BIT;
            // SAFETY: a CallMsg with the ioctl number of its size; its pointers are to
            // `cname`, `first` and `buf`, which outlive the call and have the sizes given.
            let rc = unsafe {
                call(
                    self.drv,
                    ioctl_hgcm_call_64(std::mem::size_of_val(&m)),
                    &mut m,
                    &what,
                )
            }?;
            match rc {
                VERR_NOT_FOUND if attempt == 0 => return Ok(None),
                VINF_SUCCESS | VERR_BUFFER_OVERFLOW if attempt == 0 => {
                    let size = u64::from(m.parms[3].a);
                    if size > limit {
                        return Err(TooLarge {
                            what: format!("VirtualBox guest property {name:?}"),
                            limit,
                        }
                        .into());
                    }
                    buf = vec![0u8; size as usize];
                }
                VINF_SUCCESS => return Ok(Some(buf)),
                rc => bail!("{what}: {}", rc_name(rc)),
            }
        }
        unreachable!("the loop returns on its second attempt")
    }

    /// The data of property `name` (before its NUL; the flags after it are dropped).
    pub fn get(&mut self, name: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        self.get_raw(name, limit)?
            .map(|raw| property_data(&raw, name))
            .transpose()
    }

    /// Deletes property `name` (no error when it does not exist).
    pub fn delete(&mut self, name: &str) -> Result<()> {
        let what = format!("deleting VirtualBox guest property {name:?}");
        let cname = CString::new(name).context("a property name with a NUL")?;
        let mut m = CallMsg::<1>::new(self.client_id, FN_DEL_PROP);
        m.parms[0] = HgcmParam64::pointer(
            PARM_LINADDR_IN,
            cname.as_ptr().cast(),
            cname.as_bytes_with_nul().len(),
        );
        // SAFETY: a CallMsg with the ioctl number of its size; its pointer is to `cname`,
        // which outlives the call.
        let rc = unsafe {
            call(
                self.drv,
                ioctl_hgcm_call_64(std::mem::size_of_val(&m)),
                &mut m,
                &what,
            )
        }?;
        match rc {
            VINF_SUCCESS => Ok(()),
            VERR_PERMISSION_DENIED => {
                bail!("{what}: permission denied; is the property read-only for the guest?")
            }
            rc => bail!("{what}: {}", rc_name(rc)),
        }
    }

    /// Disconnects from the service.
    pub fn disconnect(mut self) -> Result<()> {
        self.connected = false;
        let mut d = HgcmDisconnect {
            hdr: IoctlHdr::new(4, 0),
            client_id: self.client_id,
        };
        // SAFETY: an HgcmDisconnect with its own ioctl number; no pointers.
        let rc = unsafe {
            call(
                self.drv,
                ioctl_hgcm_disconnect(),
                &mut d,
                "disconnecting from VBoxGuestPropSvc",
            )
        }?;
        if rc != VINF_SUCCESS {
            bail!(
                "VirtualBox guest driver: disconnecting from {SERVICE}: {}",
                rc_name(rc)
            );
        }
        Ok(())
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if self.connected {
            let mut d = HgcmDisconnect {
                hdr: IoctlHdr::new(4, 0),
                client_id: self.client_id,
            };
            // SAFETY: an HgcmDisconnect with its own ioctl number; no pointers.
            let _ = unsafe { call(self.drv, ioctl_hgcm_disconnect(), &mut d, "disconnecting") };
        }
    }
}

/// The data of a raw property value `data NUL flags NUL`.
pub fn property_data(raw: &[u8], name: &str) -> Result<Vec<u8>> {
    match raw.iter().position(|&b| b == 0) {
        Some(n) => Ok(raw[..n].to_vec()),
        None => bail!("VirtualBox guest property {name:?} is not NUL-terminated"),
    }
}

/// The config from the properties of `drv` (empty: none).
pub fn config(drv: &mut dyn Driver, limit: u64) -> Result<Option<Vec<u8>>> {
    let mut s = Session::connect(drv)?;
    let enc = s.get(ENCODING_PROP, 4096)?;
    if let Some(e) = enc.filter(|e| !e.is_empty()) {
        bail!(
            "unsupported {ENCODING_PROP:?} value {:?}: the config in {CONFIG_PROP} must be plain JSON (delete {ENCODING_PROP})",
            String::from_utf8_lossy(&e)
        );
    }
    let config = s.get(CONFIG_PROP, limit)?;
    s.disconnect()?;
    Ok(config)
}

/// Deletes both properties (encoding first, as Ignition).
pub fn delete(drv: &mut dyn Driver) -> Result<()> {
    let mut s = Session::connect(drv)?;
    s.delete(ENCODING_PROP)?;
    s.delete(CONFIG_PROP)?;
    s.disconnect()
}

/// Opens the guest driver at `path`, loading the module first when `path` does not exist.
fn open_device(path: &Path) -> Result<Device> {
    if !path.exists()
        && runtime::util::have_program("modprobe")
        && let Err(e) = runtime::util::run("modprobe", &["vboxguest"])
    {
        log::warn!("loading vboxguest: {e:#}");
    }
    Device::open(path)
}

pub struct Virtualbox;

impl Provider for Virtualbox {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let mut dev = open_device(Path::new(DEVICE))?;
        match config(&mut dev, f.opts.limits.max_config_size)? {
            None => {
                log::info!("virtualbox: guest property {CONFIG_PROP} does not exist: no config");
                Ok(None)
            }
            Some(bytes) => Ok(Some(Found {
                bytes,
                source: format!("VirtualBox guest property {CONFIG_PROP}"),
            })),
        }
    }

    /// Deletes `/Ignition/Config` and `/Ignition/Config/Encoding`.
    fn delete_config(&self) -> Result<()> {
        log::info!("virtualbox: deleting the config from the guest properties");
        delete(&mut open_device(Path::new(DEVICE))?)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::mem::{offset_of, size_of};

    use super::*;
    use crate::platform::cabi::c_values;

    #[test]
    fn structs_and_ioctl_numbers_match_the_kernel_headers() {
        let c = c_values(
            &["linux/vboxguest.h", "linux/vbox_err.h"],
            &[
                "sizeof(struct vbg_ioctl_hdr)",
                "offsetof(struct vbg_ioctl_hdr, rc)",
                "offsetof(struct vbg_ioctl_hdr, size_out)",
                "sizeof(struct vbg_ioctl_driver_version_info)",
                "sizeof(struct vbg_ioctl_hgcm_connect)",
                "offsetof(struct vbg_ioctl_hgcm_connect, u.in.loc.type)",
                "offsetof(struct vbg_ioctl_hgcm_connect, u.in.loc.u.localhost.service_name)",
                "offsetof(struct vbg_ioctl_hgcm_connect, u.out.client_id)",
                "sizeof(struct vbg_ioctl_hgcm_disconnect)",
                "sizeof(struct vbg_ioctl_hgcm_call)",
                "offsetof(struct vbg_ioctl_hgcm_call, timeout_ms)",
                "offsetof(struct vbg_ioctl_hgcm_call, interruptible)",
                "offsetof(struct vbg_ioctl_hgcm_call, parm_count)",
                "sizeof(struct vmmdev_hgcm_function_parameter64)",
                "offsetof(struct vmmdev_hgcm_function_parameter64, u.value32)",
                "offsetof(struct vmmdev_hgcm_function_parameter64, u.pointer.size)",
                "offsetof(struct vmmdev_hgcm_function_parameter64, u.pointer.u.linear_addr)",
                "VBG_IOCTL_DRIVER_VERSION_INFO",
                "VBG_IOCTL_HGCM_CONNECT",
                "VBG_IOCTL_HGCM_DISCONNECT",
                "VBG_IOCTL_HGCM_CALL_64(sizeof(struct vbg_ioctl_hgcm_call) + 4 * sizeof(struct vmmdev_hgcm_function_parameter64))",
                "VBG_IOCTL_HDR_VERSION",
                "VBG_IOCTL_HDR_TYPE_DEFAULT",
                "VMMDEV_HGCM_LOC_LOCALHOST_EXISTING",
                "VMMDEV_HGCM_PARM_TYPE_32BIT",
                "VMMDEV_HGCM_PARM_TYPE_64BIT",
                "VMMDEV_HGCM_PARM_TYPE_LINADDR",
                "VMMDEV_HGCM_PARM_TYPE_LINADDR_IN",
                "VINF_SUCCESS",
                "VERR_GENERAL_FAILURE",
                "VERR_NO_MEMORY",
                "VERR_PERMISSION_DENIED",
                "VERR_BUFFER_OVERFLOW",
                "VERR_NOT_FOUND",
            ],
        );
        let rust: Vec<i128> = [
            size_of::<IoctlHdr>() as i128,
            offset_of!(IoctlHdr, rc) as i128,
            offset_of!(IoctlHdr, size_out) as i128,
            size_of::<DriverVersionInfo>() as i128,
            size_of::<HgcmConnect>() as i128,
            offset_of!(HgcmConnect, loc_type) as i128,
            offset_of!(HgcmConnect, service_name) as i128,
            offset_of!(HgcmConnect, loc_type) as i128,
            size_of::<HgcmDisconnect>() as i128,
            size_of::<HgcmCall>() as i128,
            offset_of!(HgcmCall, timeout_ms) as i128,
            offset_of!(HgcmCall, interruptible) as i128,
            offset_of!(HgcmCall, parm_count) as i128,
            size_of::<HgcmParam64>() as i128,
            offset_of!(HgcmParam64, a) as i128,
            offset_of!(HgcmParam64, a) as i128,
            offset_of!(HgcmParam64, b) as i128,
            ioctl_driver_version_info() as i128,
            ioctl_hgcm_connect() as i128,
            ioctl_hgcm_disconnect() as i128,
            ioctl_hgcm_call_64(size_of::<CallMsg<4>>()) as i128,
            HDR_VERSION as i128,
            HDR_TYPE_DEFAULT as i128,
            LOC_LOCALHOST_EXISTING as i128,
            PARM_32BIT as i128,
            PARM_64BIT as i128,
            PARM_LINADDR as i128,
            PARM_LINADDR_IN as i128,
            VINF_SUCCESS as i128,
            VERR_GENERAL_FAILURE as i128,
            VERR_NO_MEMORY as i128,
            VERR_PERMISSION_DENIED as i128,
            VERR_BUFFER_OVERFLOW as i128,
            VERR_NOT_FOUND as i128,
        ]
        .to_vec();
        assert_eq!(rust, c);
        assert_eq!(
            size_of::<CallMsg<4>>(),
            size_of::<HgcmCall>() + 4 * size_of::<HgcmParam64>()
        );
    }

    /// A simulated guest driver with the property service behind it: it reads the requests
    /// as the kernel would (following the pointer parameters) and answers from a map.
    #[derive(Default)]
    struct Sim {
        props: HashMap<String, Vec<u8>>,
        read_only: Vec<String>,
        connected: Option<u32>,
        calls: Vec<String>,
    }

    impl Driver for Sim {
        unsafe fn ioctl(&mut self, request: Request, arg: *mut u8) -> std::io::Result<()> {
            #[allow(clippy::unnecessary_cast)] // ioctl_num_type is not u64 on every libc
            let request = request as u64;
            let nr = request & 0xff;
            let size = ((request >> 16) & 0x3fff) as usize;
            assert_eq!((request >> 8) & 0xff, u64::from(b'V'));
            // SAFETY: the contract of `ioctl`: `arg` is a request struct of `size` bytes,
            // which starts with its header (copied out here).
            let hdr = unsafe { *arg.cast::<IoctlHdr>() };
            assert_eq!(hdr.version, HDR_VERSION);
            assert!(hdr.size_in as usize <= size && hdr.size_out as usize <= size);
            match nr {
                0 => {
                    assert_eq!(size, size_of::<DriverVersionInfo>());
                    // SAFETY: nr 0 carries a DriverVersionInfo (size checked).
                    let v = unsafe { &mut *arg.cast::<DriverVersionInfo>() };
                    assert_eq!(v.u[..2], [IOC_VERSION, IOC_VERSION]);
                    v.hdr.rc = VINF_SUCCESS;
                    self.calls.push("version".into());
                }
                4 => {
                    assert_eq!(size, size_of::<HgcmConnect>());
                    // SAFETY: nr 4 carries an HgcmConnect (size checked).
                    let c = unsafe { &mut *arg.cast::<HgcmConnect>() };
                    assert_eq!(c.loc_type, LOC_LOCALHOST_EXISTING);
                    assert_eq!(&c.service_name[..17], b"VBoxGuestPropSvc\0");
                    c.loc_type = 42; // the client id, in the union's out half
                    c.hdr.rc = VINF_SUCCESS;
                    self.connected = Some(42);
                    self.calls.push("connect".into());
                }
                5 => {
                    assert_eq!(size, size_of::<HgcmDisconnect>());
                    // SAFETY: nr 5 carries an HgcmDisconnect (size checked).
                    let d = unsafe { &mut *arg.cast::<HgcmDisconnect>() };
                    assert_eq!(Some(d.client_id), self.connected.take());
                    d.hdr.rc = VINF_SUCCESS;
                    self.calls.push("disconnect".into());
                }
                7 => {
                    // SAFETY: nr 7 carries an HgcmCall followed by its parameters.
                    let call = unsafe { &mut *arg.cast::<HgcmCall>() };
                    assert_eq!(Some(call.client_id), self.connected);
                    assert_eq!(
                        size,
                        size_of::<HgcmCall>() + call.parm_count as usize * size_of::<HgcmParam64>()
                    );
                    assert_eq!((call.timeout_ms, call.interruptible), (u32::MAX, 1));
                    // SAFETY: the parameters follow the call header (size checked above).
                    let parms = unsafe {
                        std::slice::from_raw_parts_mut(
                            arg.add(size_of::<HgcmCall>()).cast::<HgcmParam64>(),
                            call.parm_count as usize,
                        )
                    };
                    let p0 = parms[0];
                    assert_eq!(p0.type_, PARM_LINADDR_IN);
                    // SAFETY: parameter 0 points at the NUL-terminated name of its size.
                    let name = unsafe {
                        std::slice::from_raw_parts(p0.b as *const u8, p0.a as usize)
                    };
                    let name = String::from_utf8(name[..name.len() - 1].to_vec()).unwrap();
                    assert_eq!(p0.a as usize, name.len() + 1);
                    match call.function {
                        FN_GET_PROP => {
                            assert_eq!(call.parm_count, 4);
                            assert_eq!(
                                (parms[1].type_, parms[2].type_, parms[3].type_),
                                (PARM_LINADDR, PARM_64BIT, PARM_32BIT)
                            );
                            self.calls.push(format!("get {name}"));
                            call.hdr.rc = match self.props.get(&name) {
                                None => VERR_NOT_FOUND,
                                Some(v) => {
                                    let mut raw = v.clone();
                                    raw.extend_from_slice(b"\0RDONLYGUEST\0");
                                    parms[3].a = raw.len() as u32;
                                    let p1 = parms[1];
                                    if (p1.a as usize) < raw.len() {
                                        VERR_BUFFER_OVERFLOW
                                    } else {
                                        // SAFETY: parameter 1 points at a writable buffer of
                                        // its size, at least raw.len().
                                        unsafe {
                                            std::ptr::copy_nonoverlapping(
                                                raw.as_ptr(),
                                                p1.b as *mut u8,
                                                raw.len(),
                                            )
                                        };
                                        VINF_SUCCESS
                                    }
                                }
                            };
                        }
                        FN_DEL_PROP => {
                            assert_eq!(call.parm_count, 1);
                            self.calls.push(format!("del {name}"));
                            call.hdr.rc = if self.read_only.contains(&name) {
                                VERR_PERMISSION_DENIED
                            } else {
                                self.props.remove(&name);
                                VINF_SUCCESS
                            };
                        }
                        f => panic!("function {f}"),
                    }
                }
                n => panic!("ioctl nr {n}"),
            }
            Ok(())
        }
    }

    const CONFIG: &[u8] = br#"{"ignition":{"version":"3.4.0"}}"#;

    fn sim(props: &[(&str, &[u8])]) -> Sim {
        Sim {
            props: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect(),
            ..Sim::default()
        }
    }

    #[test]
    fn reads_the_config_property_through_hgcm() {
        let mut s = sim(&[(CONFIG_PROP, CONFIG)]);
        assert_eq!(config(&mut s, 1 << 20).unwrap().unwrap(), CONFIG);
        assert_eq!(
            s.calls,
            [
                "version",
                "connect",
                "get /Ignition/Config/Encoding",
                "get /Ignition/Config",
                "get /Ignition/Config",
                "disconnect"
            ]
        );
    }

    #[test]
    fn no_property_is_no_config_and_an_empty_encoding_is_fine() {
        let mut s = sim(&[]);
        assert_eq!(config(&mut s, 1 << 20).unwrap(), None);
        assert_eq!(s.connected, None, "disconnected");
        let mut s = sim(&[(CONFIG_PROP, CONFIG), (ENCODING_PROP, b"")]);
        assert_eq!(config(&mut s, 1 << 20).unwrap().unwrap(), CONFIG);
    }

    #[test]
    fn an_encoding_is_refused_and_sizes_are_bounded() {
        let mut s = sim(&[(CONFIG_PROP, CONFIG), (ENCODING_PROP, b"gzip")]);
        let e = format!("{:#}", config(&mut s, 1 << 20).unwrap_err());
        assert!(
            e.contains("unsupported \"/Ignition/Config/Encoding\" value \"gzip\""),
            "{e}"
        );
        assert_eq!(s.connected, None, "disconnected after an error too");
        let mut s = sim(&[(CONFIG_PROP, CONFIG)]);
        let e = config(&mut s, 10).unwrap_err();
        assert!(e.is::<TooLarge>(), "{e:#}");
    }

    #[test]
    fn delete_removes_both_properties_and_read_only_says_so() {
        let mut s = sim(&[(CONFIG_PROP, CONFIG), (ENCODING_PROP, b"")]);
        delete(&mut s).unwrap();
        assert!(s.props.is_empty());
        assert_eq!(
            s.calls[2..4],
            ["del /Ignition/Config/Encoding", "del /Ignition/Config"]
        );
        let mut s = sim(&[(CONFIG_PROP, CONFIG)]);
        s.read_only.push(CONFIG_PROP.into());
        let e = format!("{:#}", delete(&mut s).unwrap_err());
        assert!(e.contains("read-only"), "{e}");
    }

    #[test]
    fn property_values_end_at_their_first_nul() {
        assert_eq!(property_data(b"{}\0FLAGS\0", "p").unwrap(), b"{}");
        assert_eq!(property_data(b"\0\0", "p").unwrap(), b"");
        let e = format!("{:#}", property_data(b"{}", "p").unwrap_err());
        assert!(e.contains("not NUL-terminated"), "{e}");
    }

    #[test]
    fn no_guest_driver_is_a_clear_error() {
        let tmp = crate::platform::cabi::TmpDir::new("vbox");
        let e = format!("{:#}", Device::open(&tmp.0.join("vboxguest")).err().unwrap());
        assert!(
            e.contains("the VirtualBox guest driver") && e.contains("No such file"),
            "{e}"
        );
    }
}
