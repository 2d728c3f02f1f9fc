//! Fetch test support: external daemons (tftpd), free ports; the test PKI is `super::pki`'s.

pub use super::TempDir;
pub use super::pki::{Pki, SelfSigned, make_pki, self_signed};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A daemon started by a test, killed on drop.
pub struct Daemon(pub Child, pub &'static str);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Fails with a clear message when a tool the test needs is missing.
pub fn require(program: &str, package: &str) {
    assert!(
        runtime::util::have_program(program),
        "{program} is missing: install the Debian/PyPI package {package} (listed in .ci/packages/fetch.*)"
    );
}

/// A port free at the time of asking (for daemons that cannot bind port 0 and report it).
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `program args` with output to `log`.
pub fn spawn(program: &'static str, args: &[&str], log: &Path) -> Daemon {
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {program}: {e}"));
    Daemon(child, program)
}

/// Waits until something accepts TCP connections on 127.0.0.1:port.
pub fn wait_tcp(port: u16, limit: Duration) {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listening on 127.0.0.1:{port} after {limit:?}");
}

pub fn resource(url: &str) -> spec::config::types::Resource {
    spec::config::types::Resource {
        source: Some(url.into()),
        ..Default::default()
    }
}

/// tftpd-hpa on a free port serving a temp root; stopped on drop.
pub struct Tftpd {
    _d: Daemon,
    pub port: u16,
    pub root: TempDir,
    _logdir: TempDir,
}

pub fn tftpd() -> Tftpd {
    // in.tftpd -s chroots and -u root switches user: both need root (as non-root the
    // daemon exits and a fetch from it would retry forever).
    super::root::must_be_root();
    require("in.tftpd", "tftpd-hpa");
    let root = TempDir::new("tftproot");
    std::fs::set_permissions(
        root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let port = free_udp_port();
    let logdir = TempDir::new("tftplog");
    let log = logdir.join("tftpd.log");
    let d = spawn(
        "in.tftpd",
        &[
            "-L",
            "-u",
            "root",
            "-a",
            &format!("127.0.0.1:{port}"),
            "-s",
            root.path().to_str().unwrap(),
        ],
        &log,
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    Tftpd {
        _d: d,
        port,
        root,
        _logdir: logdir,
    }
}

/// `s` as a percent-encoded data URL.
pub fn data_url(s: &[u8]) -> String {
    let mut out = String::from("data:,");
    for &b in s {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
