//! Helpers for the `agent serve` integration tests: temp dirs, a server child process
//! (killed on drop), a raw HTTP/1.1 client.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
#[path = "../common/mod.rs"]
mod common;
pub use common::TempDir;

pub const AGENT: &str = env!("CARGO_BIN_EXE_agent");

pub fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub scheme: String,
}

impl Server {
    /// Starts `agent serve` with `args` (which must include a listener) and waits for its
    /// first "listening" line.
    pub fn start(args: &[&str], envs: &[(&str, &str)]) -> Server {
        Self::start_logged(args, envs, None)
    }

    /// Like `start`, with the server's stderr (logs) going to `log` when given.
    pub fn start_logged(args: &[&str], envs: &[(&str, &str)], log: Option<&Path>) -> Server {
        let mut cmd = Command::new(AGENT);
        cmd.arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
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
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            // Keep draining so the child never blocks on stdout.
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("agent serve did not report its address");
        let line = line.trim();
        let rest = line
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("unexpected: {line:?}"));
        let (scheme, addr) = rest.split_once("://").unwrap();
        Server {
            child,
            addr: addr.parse().unwrap(),
            scheme: scheme.into(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{}", self.scheme, self.addr, path)
    }

    pub fn get(&self, path: &str) -> Resp {
        request(
            self.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        )
    }

    pub fn get_h(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut s = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        for (k, v) in headers {
            s.push_str(&format!("{k}: {v}\r\n"));
        }
        s.push_str("\r\n");
        request(self.addr, &s)
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
    let mut s = TcpStream::connect(addr).expect("connecting");
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
