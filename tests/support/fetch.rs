//! Fetch test support: external daemons (tftpd), free ports, the test PKI.

#![allow(dead_code)]

pub use super::TempDir;
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

/// A CA and a leaf for 127.0.0.1 signed by it (rustls rejects a self-signed leaf).
pub struct Pki {
    _dir: TempDir,
    pub ca: Vec<u8>,
    pub chain: Vec<u8>,
    pub key: Vec<u8>,
}

pub fn make_pki() -> Pki {
    require("openssl", "openssl");
    let d = TempDir::new("pki");
    let p = |f: &str| d.join(f).to_string_lossy().into_owned();
    let run = |args: &[&str]| {
        let o = Command::new("openssl").args(args).output().unwrap();
        assert!(
            o.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.pem"),
        "-days",
        "2",
        "-subj",
        "/CN=agent test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &p("leaf.key"),
        "-out",
        &p("leaf.csr"),
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        d.join("ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        &p("leaf.csr"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-out",
        &p("leaf.pem"),
        "-days",
        "2",
        "-extfile",
        &p("ext"),
    ]);
    Pki {
        ca: std::fs::read(d.join("ca.pem")).unwrap(),
        chain: std::fs::read(d.join("leaf.pem")).unwrap(),
        key: std::fs::read(d.join("leaf.key")).unwrap(),
        _dir: d,
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

/// Runs `openssl args`, failing the test with its stderr.
pub fn openssl(args: &[&str]) {
    require("openssl", "openssl");
    super::sh("openssl", args, None);
}

/// A self-signed certificate made the way `openssl req -x509` makes them (CA:TRUE), for
/// `san` (e.g. "IP:127.0.0.1"), and its key, as PEM.
pub struct SelfSigned {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

/// Makes a [`SelfSigned`] in `dir` under `name`; `expired` makes one whose notAfter is a
/// day before its notBefore (expired at any time after its creation).
pub fn self_signed(dir: &Path, name: &str, san: &str, expired: bool) -> SelfSigned {
    let p = |ext: &str| {
        dir.join(format!("{name}.{ext}"))
            .to_string_lossy()
            .into_owned()
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &p("key"),
        "-out",
        &p("pem"),
        "-days",
        "2",
        "-subj",
        &format!("/CN={name}"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        &format!("subjectAltName={san}"),
    ]);
    if expired {
        // Re-sign with notAfter = notBefore - 1 day; the extensions stay.
        openssl(&[
            "x509",
            "-in",
            &p("pem"),
            "-key",
            &p("key"),
            "-days",
            "-1",
            "-out",
            &p("old.pem"),
        ]);
        std::fs::rename(p("old.pem"), p("pem")).unwrap();
    }
    SelfSigned {
        cert: std::fs::read(p("pem")).unwrap(),
        key: std::fs::read(p("key")).unwrap(),
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
