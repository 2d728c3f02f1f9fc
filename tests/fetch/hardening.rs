//! Hardening of everything the agent fetches or reads, against hostile servers of the test's
//! own on 127.0.0.1, through the binary: size limits on what is held in memory (an endless
//! config body, a gzip bomb as a merged config, `validate` on an endless stdin and on
//! /dev/zero), the limit on referenced configs (a wide merge fan-out), peak RSS of the agent
//! measured with wait4(2); SIGTERM/SIGHUP/SIGINT during a download (temporary files removed,
//! target as it was, exit 128+signal); https -> http redirects (warned, refused on request).

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::libc;
use support::TempDir;
use support::faulty_http::{Behavior, Server};
use support::fetch::make_pki;
use support::files::base64;

const MIB: u64 = 1 << 20;
/// How far above a size limit the agent's peak RSS may go beyond what the same binary uses
/// for a small config ([`baseline_rss`]): the buffers around the bounded one.
const RSS_SLACK: u64 = 4 * MIB;
const DEFAULT_LIMIT: u64 = 64 * MIB;

// ---------------------------------------------------------------------------------------
// A hostile HTTP server: one handler for every request, told the path and the base URL.

struct Req<'a> {
    path: &'a str,
    base: &'a str,
    stop: &'a AtomicBool,
}

type Handler = dyn Fn(&Req, &mut TcpStream) -> std::io::Result<()> + Send + Sync;

struct Hostile {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    hits: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Hostile {
    fn start(
        handler: impl Fn(&Req, &mut TcpStream) -> std::io::Result<()> + Send + Sync + 'static,
    ) -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let hits = Arc::new(AtomicUsize::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let (s, h) = (stop.clone(), hits.clone());
        let thread = std::thread::spawn(move || {
            let base = format!("http://{addr}");
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        stream.set_nonblocking(false).unwrap();
                        let (handler, s, h, base) =
                            (handler.clone(), s.clone(), h.clone(), base.clone());
                        std::thread::spawn(move || {
                            let Some(path) = read_head(&mut stream) else {
                                return;
                            };
                            h.fetch_add(1, Ordering::SeqCst);
                            let req = Req {
                                path: &path,
                                base: &base,
                                stop: &s,
                            };
                            let _ = handler(&req, &mut stream);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Hostile {
            addr,
            stop,
            hits,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads a request head; returns its path.
fn read_head(s: &mut TcpStream) -> Option<String> {
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).ok()? == 0 || head.len() > 65536 {
            return None;
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head);
    text.split_whitespace().nth(1).map(str::to_string)
}

fn ok(s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)
}

/// A body without an end: no Content-Length, spaces until the client goes away (bounded at
/// 8 GiB, or when the test ends).
fn endless(s: &mut TcpStream, stop: &AtomicBool) -> std::io::Result<()> {
    s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")?;
    let chunk = vec![b' '; 64 * 1024];
    for _ in 0..(8u64 << 30) / chunk.len() as u64 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        s.write_all(&chunk)?;
    }
    Ok(())
}

/// A 1 GiB body (Content-Length announced): 8 MiB at once, then a trickle of 64 KiB every
/// 50 ms, so a download is still under way whenever the test signals the agent. Ends when
/// the client goes away, the test ends, or after 5 minutes.
fn slow_gib(s: &mut TcpStream, stop: &AtomicBool) -> std::io::Result<()> {
    let total: u64 = 1 << 30;
    write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n"
    )?;
    let chunk = vec![b'x'; 64 * 1024];
    let until = Instant::now() + Duration::from_secs(300);
    let mut sent = 0u64;
    while sent < total && !stop.load(Ordering::Relaxed) && Instant::now() < until {
        s.write_all(&chunk)?;
        sent += chunk.len() as u64;
        if sent >= 8 * MIB {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Running the agent as a child, with its peak RSS from wait4(2).

struct Outcome {
    /// Exit status, or None when killed by a signal.
    code: Option<i32>,
    signal: Option<i32>,
    stderr: String,
    /// Peak resident set size of the child, bytes.
    maxrss: u64,
}

impl Outcome {
    /// The peak RSS stays within `limit` (the bounded buffer) above the binary's own
    /// baseline, plus [`RSS_SLACK`]. (A test build of the agent alone takes some 16 MiB; the
    /// release binary less: what is bounded is what the input adds.)
    fn assert_rss_below(&self, limit: u64, what: &str) {
        let base = baseline_rss();
        eprintln!(
            "{what}: peak RSS {:.1} MiB (limit {} MiB, baseline {:.1} MiB)",
            self.maxrss as f64 / MIB as f64,
            limit / MIB,
            base as f64 / MIB as f64
        );
        assert!(
            self.maxrss < base + limit + RSS_SLACK,
            "{what}: peak RSS {} MiB, not under the baseline {} MiB + the {} MiB limit + {} MiB\n{}",
            self.maxrss / MIB,
            base / MIB,
            limit / MIB,
            RSS_SLACK / MIB,
            self.stderr
        );
    }
}

/// The peak RSS of this agent binary rendering a small config through the fetch stage (the
/// most code any of these tests runs), measured once.
fn baseline_rss() -> u64 {
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        let srv = Hostile::start(|_, s| ok(s, br#"{"ignition":{"version":"3.4.0"}}"#));
        let state = TempDir::new("baseline");
        let o = run(fetch_stage(
            &state,
            &["--config-url", &srv.url("/small.ign")],
        ));
        assert_eq!(o.code, Some(0), "baseline run: {}", o.stderr);
        o.maxrss
    })
}

/// The agent binary with `args`; stdin and stdout null, stderr captured. Started with fork (not vfork: the child's peak RSS would
/// then include the test process's) and with its address space bounded at 4 GiB, so a
/// regression fails the test instead of exhausting the machine.
fn agent(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agent"));
    c.args(args)
        .env_remove("AGENT_SYSTEM_CONFIG_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    limit_address_space(&mut c);
    c
}

/// Bounds the child's address space at 4 GiB, so a regression fails the test instead of
/// exhausting the machine.
fn limit_address_space(c: &mut Command) {
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Waits for `child` with wait4(2): its status, stderr and peak RSS.
fn finish(mut child: Child) -> Outcome {
    let mut err = child.stderr.take().expect("stderr piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data: all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = loop {
        // SAFETY: plain syscall on our own child; `status` and `ru` outlive it.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break r;
    };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let stderr = reader.join().unwrap();
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else {
        (None, Some(libc::WTERMSIG(status)))
    };
    Outcome {
        code,
        signal,
        stderr,
        maxrss: ru.ru_maxrss as u64 * 1024,
    }
}

/// Runs `c` to the end under `/usr/bin/time`, which reports the agent's own peak RSS. (The
/// test process's `wait4` would not: a child's `ru_maxrss` starts at the RSS of the process
/// that forked it, and this one holds other tests' buffers. `time` is small, so the figure is
/// the agent's.)
fn run(mut c: impl std::borrow::BorrowMut<Command>) -> Outcome {
    let c = c.borrow_mut();
    let out = TempDir::new("rss");
    let report = out.join("maxrss");
    let mut timed = Command::new("/usr/bin/time");
    timed
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&report)
        .arg(c.get_program())
        .args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    if let Some(d) = c.get_current_dir() {
        timed.current_dir(d);
    }
    timed
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    limit_address_space(&mut timed);
    let mut o = finish(
        timed
            .spawn()
            .expect("starting /usr/bin/time (apt-get install time)"),
    );
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    // `time` writes "Command exited with non-zero status N" before the figure.
    let kib: u64 = text
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS from /usr/bin/time: {text:?}"));
    o.maxrss = kib * 1024;
    o
}

/// `agent run --stage fetch` with an empty state and system config directory and no kernel
/// command line.
fn fetch_stage(state: &TempDir, args: &[&str]) -> Command {
    fetch_stage_cmdline(state, args, "")
}

/// [`fetch_stage`] with this kernel command line (test builds read it from the file named by
/// the hidden `--test-kernel-cmdline-file`, here in the state directory).
fn fetch_stage_cmdline(state: &TempDir, args: &[&str], cmdline: &str) -> Command {
    let sys = state.join("no-system-config");
    let karg = state.join("kernel-cmdline");
    std::fs::write(&karg, cmdline).unwrap();
    let mut a = vec![
        "run",
        "--stage",
        "fetch",
        "--state-dir",
        state.path().to_str().unwrap(),
        "--system-config-dir",
        sys.to_str().unwrap(),
        "--test-kernel-cmdline-file",
        karg.to_str().unwrap(),
    ];
    a.extend_from_slice(args);
    // `a` borrows `sys` and `karg`, which live until the command is built.
    agent(&a)
}

fn size_error(what: &str, limit: &str) -> String {
    format!("{what}: larger than the {limit} limit (--max-config-size / agent.max_config_size=)")
}

// ---------------------------------------------------------------------------------------
// Size limits.

#[test]
fn endless_config_body_fails_at_the_default_limit_with_bounded_memory() {
    let srv = Hostile::start(|r, s| endless(s, r.stop));
    let url = srv.url("/endless.ign");
    let state = TempDir::new("endless");
    let o = run(fetch_stage(&state, &["--config-url", &url]));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let want = size_error(&format!("config from {url}"), "64 MiB");
    assert!(o.stderr.contains(&want), "want {want:?} in:\n{}", o.stderr);
    o.assert_rss_below(DEFAULT_LIMIT, "endless body, default limit");
    assert!(!state.join("config.json").exists());
}

#[test]
fn endless_config_body_limit_from_flag_and_kernel_argument() {
    let srv = Hostile::start(|r, s| endless(s, r.stop));
    let url = srv.url("/endless.ign");
    // The kernel argument sets the limit...
    let state = TempDir::new("endless-karg");
    let o = run(fetch_stage_cmdline(
        &state,
        &["--config-url", &url],
        "quiet agent.max_config_size=4M",
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let want = size_error(&format!("config from {url}"), "4 MiB");
    assert!(o.stderr.contains(&want), "want {want:?} in:\n{}", o.stderr);
    o.assert_rss_below(4 * MIB, "endless body, kernel argument 4M");
    // ...and the flag wins over it.
    let state = TempDir::new("endless-flag");
    let o = run(fetch_stage_cmdline(
        &state,
        &["--config-url", &url, "--max-config-size", "8MiB"],
        "agent.max_config_size=4M",
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let want = size_error(&format!("config from {url}"), "8 MiB");
    assert!(o.stderr.contains(&want), "want {want:?} in:\n{}", o.stderr);
    o.assert_rss_below(8 * MIB, "endless body, --max-config-size 8MiB");
    // A bad kernel argument is an error that names it.
    let state = TempDir::new("endless-badkarg");
    let o = run(fetch_stage_cmdline(
        &state,
        &["--config-url", &url],
        "agent.max_config_size=lots",
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("agent.max_config_size") && o.stderr.contains("not a size"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_config_just_under_the_limit_is_accepted() {
    // 1 MiB exactly (JSON padded with spaces) passes a 1 MiB limit; one byte more fails.
    let mut body = br#"{"ignition":{"version":"3.4.0"}}"#.to_vec();
    body.resize(MIB as usize, b' ');
    let mut over = body.clone();
    over.push(b' ');
    let srv = Hostile::start(move |r, s| match r.path {
        "/exact.ign" => ok(s, &body),
        _ => ok(s, &over),
    });
    let state = TempDir::new("exact");
    let o = run(fetch_stage(
        &state,
        &[
            "--config-url",
            &srv.url("/exact.ign"),
            "--max-config-size",
            "1M",
        ],
    ));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let state = TempDir::new("over");
    let url = srv.url("/over.ign");
    let o = run(fetch_stage(
        &state,
        &["--config-url", &url, "--max-config-size", "1M"],
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr
            .contains(&size_error(&format!("config from {url}"), "1 MiB")),
        "{}",
        o.stderr
    );
}

/// A gzip stream of `members` members of 1 MiB of zeros each: 4096 members are ~4 MiB
/// compressed and 4 GiB decompressed.
fn gzip_bomb(members: usize) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![0u8; MIB as usize]).unwrap();
    let member = gz.finish().unwrap();
    member.repeat(members)
}

#[test]
fn gzip_bomb_as_merged_config_fails_at_the_limit_counted_after_decompression() {
    let bomb = gzip_bomb(4096);
    assert!(
        bomb.len() < 8 * MIB as usize,
        "bomb is {} bytes",
        bomb.len()
    );
    let srv = Hostile::start(move |r, s| match r.path {
        "/user.ign" => {
            let cfg = format!(
                r#"{{"ignition":{{"version":"3.4.0","config":{{"merge":[{{"source":"{}/bomb","compression":"gzip"}}]}}}}}}"#,
                r.base
            );
            ok(s, cfg.as_bytes())
        }
        "/bomb" => ok(s, &bomb),
        _ => ok(s, b"{}"),
    });
    let state = TempDir::new("bomb");
    let o = run(fetch_stage(
        &state,
        &["--config-url", &srv.url("/user.ign")],
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let want = size_error(&format!("config from {}", srv.url("/bomb")), "64 MiB");
    assert!(o.stderr.contains(&want), "want {want:?} in:\n{}", o.stderr);
    o.assert_rss_below(DEFAULT_LIMIT, "gzip bomb, default limit");
    assert!(!state.join("config.json").exists());
}

/// A server of generated configs: `/fan{W}x{D}` and every child path below it merges `W`
/// children until `D` levels of references; leaves are empty configs.
fn fan_out_server() -> Hostile {
    Hostile::start(|r, s| {
        let mut segs = r.path.trim_start_matches('/').split('/');
        let root = segs.next().unwrap_or("");
        let depth = segs.count();
        let (w, d) = root
            .strip_prefix("fan")
            .and_then(|x| x.split_once('x'))
            .map(|(w, d)| (w.parse::<usize>().unwrap(), d.parse::<usize>().unwrap()))
            .unwrap_or((0, 0));
        let merge: Vec<String> = if depth < d {
            (0..w)
                .map(|i| format!(r#"{{"source":"{}{}/{i}"}}"#, r.base, r.path))
                .collect()
        } else {
            Vec::new()
        };
        let cfg = format!(
            r#"{{"ignition":{{"version":"3.4.0","config":{{"merge":[{}]}}}},"storage":{{"directories":[{{"path":"/fan{}"}}]}}}}"#,
            merge.join(","),
            r.path.replace('/', "-")
        );
        ok(s, cfg.as_bytes())
    })
}

#[test]
fn wide_merge_fan_out_stops_at_the_reference_limit() {
    // Width 10, depth 4: 11,110 references without a limit; 64 are fetched, then it fails.
    let srv = fan_out_server();
    let url = srv.url("/fan10x4");
    let state = TempDir::new("fan");
    let o = run(fetch_stage(&state, &["--config-url", &url]));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let want = format!(
        "{url}: more than the 64 referenced configs allowed in one render (merge and replace, all levels)"
    );
    assert!(o.stderr.contains(&want), "want {want:?} in:\n{}", o.stderr);
    assert!(
        o.stderr
            .contains("(--max-config-refs / agent.max_config_refs=)"),
        "{}",
        o.stderr
    );
    // The user config and exactly 64 references.
    assert_eq!(srv.hits(), 1 + 64);
    o.assert_rss_below(DEFAULT_LIMIT, "fan-out");
    assert!(!state.join("config.json").exists());
}

#[test]
fn reference_limit_is_exact_and_raisable() {
    // Width 10, depth 2: 110 references.
    let srv = fan_out_server();
    let url = srv.url("/fan10x2");
    let state = TempDir::new("fan-ok");
    let o = run(fetch_stage(
        &state,
        &["--config-url", &url, "--max-config-refs", "110"],
    ));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        cfg["storage"]["directories"].as_array().unwrap().len(),
        111,
        "the user config and 110 references"
    );
    let before = srv.hits();
    let state = TempDir::new("fan-karg");
    let o = run(fetch_stage_cmdline(
        &state,
        &["--config-url", &url],
        "agent.max_config_refs=109",
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("more than the 109 referenced configs allowed in one render"),
        "{}",
        o.stderr
    );
    assert_eq!(srv.hits() - before, 1 + 109);
}

#[test]
fn validate_refuses_an_endless_stdin_with_bounded_memory() {
    let mut child = agent(&["validate"]).stdin(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Feed /dev/zero through a pipe until the agent stops reading (at most 1 GiB).
    let feeder = std::thread::spawn(move || {
        let mut zero = std::fs::File::open("/dev/zero").unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut fed = 0u64;
        while fed < 1 << 30 {
            zero.read_exact(&mut buf).unwrap();
            if stdin.write_all(&buf).is_err() {
                break;
            }
            fed += buf.len() as u64;
        }
        fed
    });
    let o = finish(child);
    let fed = feeder.join().unwrap();
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    let want = size_error("config from standard input", "64 MiB");
    assert!(o.stderr.contains(&want), "want {want:?} in:\n{}", o.stderr);
    assert!(fed < 1 << 30, "the agent read the whole GiB");
    o.assert_rss_below(DEFAULT_LIMIT, "validate, endless stdin");
}

#[test]
fn validate_refuses_dev_zero_as_a_file() {
    let o = run(agent(&["validate", "--max-config-size", "2M", "/dev/zero"]));
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    let want = size_error("config file /dev/zero", "2 MiB");
    assert!(o.stderr.contains(&want), "want {want:?} in:\n{}", o.stderr);
    o.assert_rss_below(2 * MIB, "validate /dev/zero");
}

#[test]
fn platform_file_user_data_is_bounded() {
    let d = TempDir::new("platform-file");
    let cfg = d.join("config.ign");
    let f = std::fs::File::create(&cfg).unwrap();
    f.set_len(3 * MIB).unwrap();
    let state = TempDir::new("platform-state");
    let o = run(
        fetch_stage(&state, &["--platform", "file", "--max-config-size", "2M"])
            .env("AGENT_CONFIG_FILE", &cfg),
    );
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let want = size_error(&format!("config from file {}", cfg.display()), "2 MiB");
    assert!(o.stderr.contains(&want), "want {want:?} in:\n{}", o.stderr);
}

// ---------------------------------------------------------------------------------------
// Signals.

/// Temporary files the agent left in `dir`.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("agent-tmp") || n.contains(".tmp"))
        .collect()
}

/// Waits (bounded) until a temporary file in `dir` whose name starts with `prefix` holds at
/// least 4 MiB: the download is under way.
fn wait_for_partial(dir: &Path, prefix: &str, child: &mut Child) {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let big = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| {
                e.file_name().to_string_lossy().starts_with(prefix)
                    && e.metadata().is_ok_and(|m| m.len() >= 4 * MIB)
            });
        if big {
            return;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("the agent ended before the download was under way: {st}");
        }
        assert!(
            Instant::now() < until,
            "no partial download {prefix}* in {} after 120 s",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

/// `agent fetch` of a 1 GiB download, interrupted by `sig` once under way.
fn fetch_interrupted(sig: nix::sys::signal::Signal, existing: Option<&[u8]>) {
    fetch_interrupted_with(sig, existing, &[]);
}

/// [`fetch_interrupted`] with more `agent fetch` arguments (e.g. a hash to verify).
fn fetch_interrupted_with(sig: nix::sys::signal::Signal, existing: Option<&[u8]>, more: &[&str]) {
    let srv = Hostile::start(|r, s| slow_gib(s, r.stop));
    let dir = TempDir::new("sig");
    let target = dir.join("big.img");
    if let Some(old) = existing {
        std::fs::write(&target, old).unwrap();
    }
    let url = srv.url("/big.img");
    let mut args = vec!["fetch", &url, "-o", target.to_str().unwrap()];
    args.extend_from_slice(more);
    let mut child = agent(&args).spawn().unwrap();
    wait_for_partial(dir.path(), ".big.img.agent-tmp", &mut child);
    kill(&child, sig);
    let o = finish(child);
    assert_eq!(
        (o.code, o.signal),
        (Some(128 + sig as i32), None),
        "exit status after {sig}:\n{}",
        o.stderr
    );
    assert!(
        o.stderr.contains(&format!("terminated by {sig}")),
        "{}",
        o.stderr
    );
    assert_eq!(leftovers(dir.path()), Vec::<String>::new(), "after {sig}");
    match existing {
        Some(old) => assert_eq!(std::fs::read(&target).unwrap(), old, "target changed"),
        None => assert!(!target.exists(), "a target appeared after {sig}"),
    }
}

#[test]
fn sigterm_during_fetch_removes_the_partial_download() {
    fetch_interrupted(nix::sys::signal::Signal::SIGTERM, None);
}

#[test]
fn sigterm_during_a_verified_fetch_removes_the_partial_download() {
    // Hashing runs on a thread of its own: interrupted half-way, nothing is left either.
    let hash = format!("sha512-{}", "ab".repeat(64));
    fetch_interrupted_with(
        nix::sys::signal::Signal::SIGTERM,
        Some(b"old contents\n"),
        &["--hash", &hash],
    );
}

#[test]
fn hash_mismatch_on_a_large_streamed_file_leaves_no_target() {
    // 256 MiB streamed (never held in memory), hashed beside the download, then refused.
    let srv = Hostile::start(|_, s| {
        let total: u64 = 256 * MIB;
        write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n"
        )?;
        let chunk = vec![b'y'; 1 << 20];
        for _ in 0..total / MIB {
            s.write_all(&chunk)?;
        }
        Ok(())
    });
    let dir = TempDir::new("bighash");
    let target = dir.join("big.img");
    let want = format!("sha256-{}", "0".repeat(64));
    let child = agent(&[
        "fetch",
        &srv.url("/big.img"),
        "-o",
        target.to_str().unwrap(),
        "--hash",
        &want,
    ])
    .spawn()
    .unwrap();
    let o = finish(child);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("hash mismatch: expected sha256-000"),
        "{}",
        o.stderr
    );
    assert!(!target.exists(), "a target appeared after a hash mismatch");
    assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    // Streamed: memory does not follow the size of the download.
    o.assert_rss_below(16 * MIB, "256 MiB download with a wrong hash");
}

#[test]
fn sighup_during_fetch_leaves_the_old_target() {
    fetch_interrupted(nix::sys::signal::Signal::SIGHUP, Some(b"old contents\n"));
}

#[test]
fn sigint_during_fetch_removes_the_partial_download() {
    fetch_interrupted(nix::sys::signal::Signal::SIGINT, None);
}

#[test]
#[ignore = "needs root: make test-root"]
fn sigterm_during_files_stage_leaves_the_old_file() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the files stage test runs as root (chown of written files)"
    );
    let srv = Hostile::start(|r, s| slow_gib(s, r.stop));
    let root = TempDir::new("sig-root");
    let state = TempDir::new("sig-state");
    let etc = root.join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("big"), b"old\n").unwrap();
    let cfg = format!(
        r#"{{"ignition":{{"version":"3.4.0"}},"storage":{{"files":[{{"path":"/etc/big","overwrite":true,"contents":{{"source":"{}"}}}}]}}}}"#,
        srv.url("/big")
    );
    std::fs::write(state.join("config.json"), cfg).unwrap();
    let mut child = agent(&[
        "run",
        "--stage",
        "files",
        "--root",
        root.path().to_str().unwrap(),
        "--state-dir",
        state.path().to_str().unwrap(),
        // No kernel command line (the host's could carry agent.* arguments).
        "--test-kernel-cmdline-file",
        "/dev/null",
    ])
    .spawn()
    .unwrap();
    wait_for_partial(&etc, ".big.agent-tmp", &mut child);
    kill(&child, nix::sys::signal::Signal::SIGTERM);
    let o = finish(child);
    assert_eq!(o.code, Some(143), "{}", o.stderr);
    assert_eq!(leftovers(&etc), Vec::<String>::new());
    assert_eq!(std::fs::read(etc.join("big")).unwrap(), b"old\n");
}

// ---------------------------------------------------------------------------------------
// https -> http redirects.

#[test]
fn tls_downgrade_redirect_is_warned_about_and_refused_on_request() {
    let pki = make_pki();
    let http = Server::start();
    http.route("/plain", vec![Behavior::Ok(b"plain".to_vec())]);
    let https = Server::start_tls(&pki.chain, &pki.key);
    https.route("/r", vec![Behavior::Redirect(http.url("/plain"))]);
    let d = TempDir::new("downgrade");
    let ca = d.join("ca.pem");
    std::fs::write(&ca, &pki.ca).unwrap();
    let out = d.join("out");
    let url = https.url("/r");
    let args = [
        "fetch",
        &url,
        "-o",
        out.to_str().unwrap(),
        "--ca-file",
        ca.to_str().unwrap(),
    ];
    let o = run(agent(&args));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stderr.contains("warning")
            && o.stderr.contains(&format!(
                "redirected to {}, which drops TLS (https to http)",
                http.url("/plain")
            )),
        "{}",
        o.stderr
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"plain");
    std::fs::remove_file(&out).unwrap();
    assert_eq!(http.requests("/plain").len(), 1);

    let o = run(agent(&args).arg("--refuse-tls-downgrade"));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "refusing the redirect to {}: it drops TLS (https to http)",
            http.url("/plain")
        )),
        "{}",
        o.stderr
    );
    assert!(!out.exists());
    assert_eq!(http.requests("/plain").len(), 1, "the http URL was fetched");
}

#[test]
fn tls_downgrade_refused_by_kernel_argument_in_the_fetch_stage() {
    // The user config (plain http) merges an https reference, trusted through the config's
    // own CA, that redirects to plain http.
    let pki = make_pki();
    let http = Server::start();
    http.route(
        "/child.ign",
        vec![Behavior::Ok(
            br#"{"ignition":{"version":"3.4.0"}}"#.to_vec(),
        )],
    );
    let https = Server::start_tls(&pki.chain, &pki.key);
    https.route(
        "/child.ign",
        vec![Behavior::Redirect(http.url("/child.ign"))],
    );
    let ca_url = format!("data:;base64,{}", base64(&pki.ca));
    let user = format!(
        r#"{{"ignition":{{"version":"3.4.0","config":{{"merge":[{{"source":"{}"}}]}},"security":{{"tls":{{"certificateAuthorities":[{{"source":"{ca_url}"}}]}}}}}}}}"#,
        https.url("/child.ign")
    );
    http.route("/user.ign", vec![Behavior::Ok(user.into_bytes())]);
    let state = TempDir::new("downgrade-stage");
    let o = run(fetch_stage_cmdline(
        &state,
        &["--config-url", &http.url("/user.ign")],
        "agent.refuse_tls_downgrade",
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(o.stderr.contains("refusing the redirect"), "{}", o.stderr);
    assert_eq!(http.requests("/child.ign").len(), 0);
    // Without the kernel argument the same chain renders, with the warning.
    let state = TempDir::new("downgrade-stage-ok");
    let o = run(fetch_stage(
        &state,
        &["--config-url", &http.url("/user.ign")],
    ));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stderr.contains("drops TLS (https to http)"),
        "{}",
        o.stderr
    );
}
