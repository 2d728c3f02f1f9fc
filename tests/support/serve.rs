//! Helpers for the `agent serve` integration tests: a server child process
//! (killed on drop), a raw HTTP/1.1 client.

pub use super::TempDir;
pub use super::pki::{make_ca, make_leaf};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const AGENT: &str = env!("CARGO_BIN_EXE_agent");

pub fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

pub struct Server {
    pub child: Child,
    /// The first listener (HTTPS when there is one).
    pub addr: SocketAddr,
    pub scheme: String,
    /// Every listener: (scheme, address), in the order the server reports them.
    pub listeners: Vec<(String, SocketAddr)>,
    /// A private checkpoint directory, when the test did not give --state-dir (never the
    /// default /var/lib/agent-serve, which tests running in parallel would share).
    pub state: Option<TempDir>,
    /// The server's --state-dir (its token store is `tokens` in it).
    pub state_dir: PathBuf,
}

impl Server {
    /// Starts `agent serve` with `args` (which must include a listener) and waits for its
    /// "listening" lines (one per listener) and the line that reports the first load of the
    /// source (the server listens, serving its checkpoint, before it loads the source).
    pub fn start(args: &[&str], envs: &[(&str, &str)]) -> Server {
        Self::start_logged(args, envs, None)
    }

    /// Like `start`, with the server's stderr (logs) going to `log` when given.
    pub fn start_logged(args: &[&str], envs: &[(&str, &str)], log: Option<&Path>) -> Server {
        Self::start_with(args, envs, log, true)
    }

    /// Like `start`, but returns once the server listens, without waiting for the first
    /// load of the source.
    pub fn start_listening(args: &[&str], envs: &[(&str, &str)]) -> Server {
        Self::start_with(args, envs, None, false)
    }

    fn start_with(
        args: &[&str],
        envs: &[(&str, &str)],
        log: Option<&Path>,
        wait_load: bool,
    ) -> Server {
        let mut cmd = Command::new(AGENT);
        cmd.arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let given = args
            .iter()
            .any(|a| *a == "--state-dir" || a.starts_with("--state-dir="));
        let state = (!given).then(|| TempDir::new("serve-state"));
        let state_dir = match &state {
            Some(d) => d.path().join("state"),
            None => {
                let i = args.iter().position(|a| *a == "--state-dir");
                let v = match i {
                    Some(i) => args[i + 1].to_string(),
                    None => args
                        .iter()
                        .find_map(|a| a.strip_prefix("--state-dir="))
                        .unwrap()
                        .to_string(),
                };
                PathBuf::from(v)
            }
        };
        if state.is_some() {
            cmd.arg("--state-dir").arg(&state_dir);
        }
        // The admin listener on a port of its own (the default, 22625, is one per host).
        let admin_given = args
            .iter()
            .any(|a| *a == "--admin-listen" || a.starts_with("--admin-listen="));
        if !admin_given {
            cmd.args(["--admin-listen", "127.0.0.1:0"]);
        }
        let admin = !args.windows(2).any(|w| w == ["--admin-listen", "off"])
            && !args.contains(&"--admin-listen=off");
        if std::env::var_os("SERVE_TEST_LOG").is_some() {
            cmd.stderr(Stdio::inherit());
        }
        if let Some(l) = log {
            cmd.stderr(std::fs::File::create(l).unwrap());
        }
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting agent serve");
        let stdout = child.stdout.take().unwrap();
        // Killed (SIGKILL) should it never report its address: no server left behind.
        let mut child = KillOnDrop(Some(child));
        let expect = (args.contains(&"--tls-cert") as usize
            + args.contains(&"--listen-http") as usize)
            .max(1)
            + admin as usize;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            for _ in 0..expect + 1 {
                let mut line = String::new();
                let _ = r.read_line(&mut line);
                let _ = tx.send(line);
            }
            // Keep draining so the child never blocks on stdout.
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let mut listeners = Vec::new();
        for _ in 0..expect {
            let line = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("agent serve did not report its address");
            let line = line.trim();
            let rest = line
                .strip_prefix("listening ")
                .unwrap_or_else(|| panic!("unexpected: {line:?}"));
            let (scheme, addr) = rest.split_once("://").unwrap();
            // "listening admin http://ADDR": the admin listener, as scheme "admin".
            let scheme = if scheme.starts_with("admin ") {
                "admin"
            } else {
                scheme
            };
            listeners.push((scheme.to_string(), addr.parse().unwrap()));
        }
        if wait_load {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("agent serve did not report its first load of the source");
            assert!(line.starts_with("source "), "unexpected: {line:?}");
        }
        Server {
            child: child.0.take().unwrap(),
            addr: listeners[0].1,
            scheme: listeners[0].0.clone(),
            listeners,
            state,
            state_dir,
        }
    }

    /// The address of the listener for `scheme` ("http", "https", or "admin").
    pub fn addr_of(&self, scheme: &str) -> SocketAddr {
        self.listeners
            .iter()
            .find(|(s, _)| s == scheme)
            .unwrap_or_else(|| panic!("no {scheme} listener"))
            .1
    }

    /// A counter or gauge from /metrics (fetched over the plain listener).
    pub fn metric(&self, name: &str) -> u64 {
        let m = request(
            self.addr_of("http"),
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(m.status, 200);
        let text = m.text();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{}", self.scheme, self.addr, path)
    }

    /// The plain HTTP listener when there is one (else the first listener).
    pub fn plain(&self) -> SocketAddr {
        self.listeners
            .iter()
            .find(|(s, _)| s == "http")
            .map_or(self.addr, |l| l.1)
    }

    pub fn get(&self, path: &str) -> Resp {
        request(
            self.plain(),
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        )
    }

    pub fn get_h(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut s = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        for (k, v) in headers {
            s.push_str(&format!("{k}: {v}\r\n"));
        }
        s.push_str("\r\n");
        request(self.plain(), &s)
    }

    /// Polls until `f` holds (bounded).
    pub fn wait_for(&self, what: &str, secs: u64, mut f: impl FnMut(&Server) -> bool) {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if f(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}");
    }

    pub fn status(&self) -> serde_json::Value {
        serde_json::from_slice(&self.get("/status").body).unwrap()
    }

    /// SIGTERM and wait (bounded); returns whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

/// Flags of `agent serve` that may be given more than once: [`ServeArgs::with`] adds to them
/// instead of replacing them.
const REPEATABLE: &[&str] = &["--admin-host"];

/// The start-up arguments of `agent serve` in the tests, built in one place:
/// `--source SRC --listen-http 127.0.0.1:0` ([`serve_args`]) and what a test adds. A flag
/// given again replaces the one before (its value too), so a test overrides a default by
/// naming it; [`ServeArgs::without`] drops one. [`Server::start`] adds a private
/// `--state-dir` and an admin listener on a free port unless the arguments name them.
#[derive(Clone, Debug)]
pub struct ServeArgs {
    /// Each flag with its value, as the command line has them (`["--soak", "1s"]`,
    /// `["--require-token"]`, `["--soak=1s"]`).
    flags: Vec<Vec<String>>,
}

/// `--source SRC --listen-http 127.0.0.1:0`: a plain listener on a free port of 127.0.0.1.
pub fn serve_args(src: impl AsRef<std::ffi::OsStr>) -> ServeArgs {
    ServeArgs { flags: Vec::new() }
        .arg("--source", src)
        .arg("--listen-http", "127.0.0.1:0")
}

fn flag_name(f: &[String]) -> &str {
    f[0].split_once('=').map_or(f[0].as_str(), |(k, _)| k)
}

fn text(v: impl AsRef<std::ffi::OsStr>) -> String {
    v.as_ref().to_str().expect("a UTF-8 argument").to_string()
}

impl ServeArgs {
    fn put(mut self, flag: Vec<String>) -> Self {
        let name = flag_name(&flag).to_string();
        if !REPEATABLE.contains(&name.as_str()) {
            self.flags.retain(|f| flag_name(f) != name);
        }
        self.flags.push(flag);
        self
    }

    /// `flag value`, replacing `flag` if it is there.
    pub fn arg(self, flag: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.put(vec![flag.to_string(), text(value)])
    }

    /// A switch (`--require-token`, `--no-access-log`).
    pub fn switch(self, flag: &str) -> Self {
        self.put(vec![flag.to_string()])
    }

    /// `--no-access-log`.
    pub fn quiet(self) -> Self {
        self.switch("--no-access-log")
    }

    /// `--poll-interval 1s`.
    pub fn poll_1s(self) -> Self {
        self.arg("--poll-interval", "1s")
    }

    /// An HTTPS listener on a free port of 127.0.0.1 with `cert` and `key`.
    pub fn tls(self, cert: impl AsRef<std::ffi::OsStr>, key: impl AsRef<std::ffi::OsStr>) -> Self {
        self.arg("--listen", "127.0.0.1:0")
            .arg("--tls-cert", cert)
            .arg("--tls-key", key)
    }

    /// Without `flag` (e.g. `--listen-http`, for a server with only its HTTPS listener).
    pub fn without(mut self, flag: &str) -> Self {
        self.flags.retain(|f| flag_name(f) != flag);
        self
    }

    /// Adds `extra` as written on a command line: `--flag value`, `--flag=value` or a switch
    /// (a flag not followed by a value); each replaces a flag of the same name.
    pub fn with<S: AsRef<str>>(mut self, extra: &[S]) -> Self {
        let mut i = 0;
        while i < extra.len() {
            let f = extra[i].as_ref();
            assert!(
                f.starts_with("--"),
                "not a flag: {f:?} in {:?}",
                self.to_vec()
            );
            let mut flag = vec![f.to_string()];
            if !f.contains('=')
                && let Some(v) = extra.get(i + 1).map(AsRef::as_ref)
                && !v.starts_with("--")
            {
                flag.push(v.to_string());
                i += 1;
            }
            self = self.put(flag);
            i += 1;
        }
        self
    }

    /// Whether `flag` is given.
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| flag_name(f) == flag)
    }

    /// The arguments after `agent serve`.
    pub fn to_vec(&self) -> Vec<String> {
        self.flags.concat()
    }

    /// [`Server::start`] with these arguments.
    pub fn start(&self) -> Server {
        self.start_env(&[])
    }

    /// [`Server::start`] with these arguments and `envs`.
    pub fn start_env(&self, envs: &[(&str, &str)]) -> Server {
        self.start_logged(envs, None)
    }

    /// [`Server::start_logged`] with these arguments.
    pub fn start_logged(&self, envs: &[(&str, &str)], log: Option<&Path>) -> Server {
        let v = self.to_vec();
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        Server::start_logged(&refs, envs, log)
    }

    /// [`Server::start_listening`] with these arguments.
    pub fn start_listening(&self, envs: &[(&str, &str)]) -> Server {
        let v = self.to_vec();
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        Server::start_listening(&refs, envs)
    }

    /// `agent serve` with these arguments, for a test that runs it itself (standard input
    /// null; nothing else set: no private state directory, no admin listener of its own).
    pub fn command(&self) -> Command {
        let mut c = Command::new(AGENT);
        c.arg("serve").args(self.to_vec()).stdin(Stdio::null());
        c
    }
}

/// A child process killed on drop unless taken out.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, n: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends raw bytes, reads to EOF (the request must ask for Connection: close).
pub fn request(addr: SocketAddr, raw: &str) -> Resp {
    request_bytes(addr, raw.as_bytes())
}

pub fn request_bytes(addr: SocketAddr, raw: &[u8]) -> Resp {
    request_on(TcpStream::connect(addr).expect("connecting"), raw)
}

/// One request on a connection made by the caller (from an address of its choice, say).
pub fn request_on(mut s: TcpStream, raw: impl AsRef<[u8]>) -> Resp {
    let raw = raw.as_ref();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    parse_response(&out, raw.starts_with(b"HEAD"))
}

pub fn parse_response(out: &[u8], head: bool) -> Resp {
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(out)));
    let head_s = String::from_utf8_lossy(&out[..end]).into_owned();
    let mut lines = head_s.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let mut body = out[end + 4..].to_vec();
    if !head
        && let Some(cl) = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        let n: usize = cl.1.parse().unwrap();
        assert!(body.len() >= n, "short body: {} < {n}", body.len());
        body.truncate(n);
    }
    Resp {
        status,
        headers,
        body,
    }
}

pub fn worker_config(marker: &str) -> String {
    format!(
        r#"{{"ignition":{{"version":"3.0.0"}},"storage":{{"files":[{{"path":"/etc/marker","contents":{{"source":"data:,{marker}"}},"mode":420}}]}}}}"#
    )
}

/// Connects to `dst` from the local address `src` (any 127.0.0.0/8 address works on
/// loopback), optionally with a small receive buffer (set before connecting, so the window
/// stays small) to make the server's writes block.
pub fn connect_with(
    src: Option<std::net::IpAddr>,
    rcvbuf: Option<usize>,
    dst: SocketAddr,
) -> TcpStream {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, setsockopt, socket, sockopt,
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    if let Some(n) = rcvbuf {
        setsockopt(&fd, sockopt::RcvBuf, &n).expect("SO_RCVBUF");
    }
    if let Some(ip) = src {
        bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &SockaddrIn::from(v4(SocketAddr::new(ip, 0))),
        )
        .expect("bind");
    }
    connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::from(v4(dst)),
    )
    .expect("connect");
    TcpStream::from(fd)
}

fn v4(a: SocketAddr) -> std::net::SocketAddrV4 {
    match a {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => panic!("IPv4 only: {a}"),
    }
}

/// A TLS client configuration trusting `ca` (PEM).
pub fn tls_client(ca: &Path) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    std::sync::Arc::new(cfg)
}

/// How an HTTPS exchange ended.
#[derive(Debug)]
pub enum TlsOutcome {
    /// An HTTP response over TLS.
    Response(Resp),
    /// The server closed the TCP connection (FIN) before answering: a clean close.
    Closed,
    /// The connection was reset.
    Reset,
    /// Not TLS (e.g. plaintext on the TLS port) or another TLS failure.
    TlsError(String),
}

/// Sends `raw` over TLS to `addr` (server name localhost) and reads the answer to EOF.
pub fn tls_request(
    addr: SocketAddr,
    cfg: &std::sync::Arc<rustls::ClientConfig>,
    raw: &str,
) -> TlsOutcome {
    let tcp = TcpStream::connect(addr).expect("connecting");
    tls_request_on(tcp, cfg, raw)
}

/// Like `tls_request`, on an already connected socket.
pub fn tls_request_on(
    tcp: TcpStream,
    cfg: &std::sync::Arc<rustls::ClientConfig>,
    raw: &str,
) -> TlsOutcome {
    use std::io::ErrorKind;
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let conn = rustls::ClientConnection::new(cfg.clone(), "localhost".try_into().unwrap()).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    let classify = |e: std::io::Error| match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            TlsOutcome::Reset
        }
        ErrorKind::UnexpectedEof => TlsOutcome::Closed,
        _ => TlsOutcome::TlsError(format!("{e} ({:?})", e.kind())),
    };
    // Finish the handshake first, then send the request.
    while s.conn.is_handshaking() {
        if let Err(e) = s.conn.complete_io(&mut s.sock) {
            return classify(e);
        }
    }
    if let Err(e) = s.write_all(raw.as_bytes()).and_then(|_| s.flush()) {
        return classify(e);
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // EOF without close_notify after a complete answer still counts as the answer.
            Err(e) if e.kind() == ErrorKind::UnexpectedEof && !out.is_empty() => break,
            Err(e) => return classify(e),
        }
    }
    if out.is_empty() {
        return TlsOutcome::Closed;
    }
    TlsOutcome::Response(parse_response(&out, raw.starts_with("HEAD")))
}

/// Raises this process's open-files limit towards `want` (children inherit it): the hard
/// limit too when it is lower, which only root may do; returns the soft limit now in force.
pub fn raise_nofile(want: u64) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if hard < want {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, want, want);
    }
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let target = want.min(hard);
    if soft < target {
        setrlimit(Resource::RLIMIT_NOFILE, target, hard).unwrap();
    }
    getrlimit(Resource::RLIMIT_NOFILE).unwrap().0
}

/// The token store's token of `pool` (`agent token show --reveal`) of the server `s`.
pub fn token_of(s: &Server, pool: &str) -> String {
    let out = std::process::Command::new(AGENT)
        .args([
            "token",
            "show",
            "--state-dir",
            s.state_dir.to_str().unwrap(),
            "--reveal",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f.len() == 3 && f[0] == pool && f[1] == "token").then(|| f[2].to_string())
        })
        .unwrap_or_else(|| panic!("no token for {pool}"))
}

/// A report body as the agent sends it (docs/reports.md; camelCase).
pub fn agent_report(
    id: &str,
    machine: &str,
    stage: &str,
    outcome: &str,
    last: bool,
    error: Option<&str>,
) -> String {
    serde_json::json!({
        "format": 1,
        "id": id,
        "bootId": format!("boot-{machine}"),
        "sent": "2026-11-27T05:40:12Z",
        "machine": {"id": machine, "uuid": machine, "serial": "SER1", "macs": ["52:54:00:12:34:56"],
                    "platform": "qemu", "instanceId": null, "hostname": format!("host-{machine}")},
        "agent": "0.1.0",
        "config": {"pool": "worker", "name": "worker-abc", "hash": "sha256-00"},
        "stage": stage,
        "outcome": outcome,
        "final": last,
        "durationMs": 1234,
        "changes": {"partitions": {"created": ["/dev/vda4"], "kept": [], "deleted": []},
                    "filesystems": {"made": ["/dev/vda4 (xfs)"], "reused": []},
                    "paths": ["/etc/hostname"]},
        "error": error,
        "logTail": if error.is_some() { vec!["mkfs.xfs: /dev/vdb: device busy", "disks: failed"] } else { vec![] },
    })
    .to_string()
}

/// A plain HTTP/1.1 server on 127.0.0.1 for a test: it answers each request with what
/// `answer` makes of its head (status, content type, body), one connection at a time, and
/// keeps every request's bytes (head and body) for the test to read. Stopped (its port
/// closed) on drop.
pub struct Canned {
    pub addr: SocketAddr,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type Answer = Box<dyn Fn(&str) -> (u16, &'static str, Vec<u8>) + Send>;

impl Canned {
    /// Listens on `addr` (e.g. "127.0.0.1:0").
    pub fn start(
        addr: &str,
        answer: impl Fn(&str) -> (u16, &'static str, Vec<u8>) + Send + 'static,
    ) -> Canned {
        use std::sync::atomic::Ordering;
        let l = std::net::TcpListener::bind(addr).expect("binding the test server");
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let answer: Answer = Box::new(answer);
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match l.accept() {
                        Ok((s, _)) => {
                            let got = Self::exchange(s, &answer);
                            seen.lock().unwrap().push(got);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        Canned {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn exchange(mut s: TcpStream, answer: &Answer) -> Vec<u8> {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if got.len() > 1 << 20 {
                return got;
            }
        };
        let head = String::from_utf8_lossy(&got[..end]).into_owned();
        let want = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0)
            .min(1 << 20);
        while got.len() < end + want {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let (status, ctype, body) = answer(&head);
        let _ = write!(
            s,
            "HTTP/1.1 {status} Canned\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = s.write_all(&body);
        got
    }

    /// Every request received so far, in order.
    pub fn seen(&self) -> Vec<Vec<u8>> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Canned {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
