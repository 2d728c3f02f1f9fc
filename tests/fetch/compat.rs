//! Fetching as Ignition does it (issue 16), against real servers on 127.0.0.1:
//! - a self-signed `CA:TRUE` server certificate that is itself the configured CA is trusted
//!   (config `certificateAuthorities` and `agent fetch --ca-file`), name and dates still
//!   checked; certificate errors are final and say what to change;
//! - the request headers Ignition sends, and `httpHeaders` replacing them;
//! - plain http through an HTTP proxy in absolute form (a proxy written here that refuses
//!   CONNECT), https through it in a CONNECT tunnel, `noProxy` bypassing it.

use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent::fetch::{Fetcher, Options};
use spec::config::types::{HttpHeader, Proxy};
use support::TempDir;
use support::faulty_http::{Behavior, Request, Server};
use support::fetch::{data_url, resource, self_signed};

/// The Accept header Ignition (spec 3.6.0 stable) sends, written out.
const IGNITION_ACCEPT: &str = "application/vnd.coreos.ignition+json;version=3.6.0, */*;q=0.1";

fn child_cfg(path: &str) -> Vec<u8> {
    format!(r#"{{"ignition":{{"version":"3.4.0"}},"storage":{{"files":[{{"path":"{path}"}}]}}}}"#)
        .into_bytes()
}

/// `agent run --stage fetch --config-file CFG` with an empty system config dir. The configs
/// given set `timeouts.httpTotal`, so a fetcher that retries what it should not still ends.
fn fetch_stage(cfg: &[u8]) -> (Output, serde_json::Value) {
    let dir = TempDir::new("compat-stage");
    let state = dir.join("state");
    let sys = dir.join("sys");
    std::fs::create_dir_all(&sys).unwrap();
    std::fs::write(dir.join("user.ign"), cfg).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["run", "--stage", "fetch", "--state-dir"])
        .arg(&state)
        .arg("--system-config-dir")
        .arg(&sys)
        .arg("--config-file")
        .arg(dir.join("user.ign"))
        .arg("--test-kernel-cmdline-file")
        .arg({
            let k = dir.join("cmdline");
            std::fs::write(&k, "quiet").unwrap();
            k
        })
        .env_remove("AGENT_SYSTEM_CONFIG_DIR")
        .output()
        .unwrap();
    let rendered = std::fs::read(state.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null);
    (out, rendered)
}

fn file_paths(cfg: &serde_json::Value) -> Vec<String> {
    cfg["storage"]["files"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["path"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `agent fetch URL --output OUT --ca-file CA --http-total 60`.
fn agent_fetch_cli(url: &str, out: &Path, ca: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["fetch", url, "--output"])
        .arg(out)
        .arg("--ca-file")
        .arg(ca)
        .args(["--http-total", "60"])
        .output()
        .unwrap()
}

#[test]
fn self_signed_ca_certificate_served_directly_is_trusted() {
    let d = TempDir::new("selfsigned");
    let ss = self_signed(d.path(), "server", "IP:127.0.0.1,DNS:localhost", false);
    let s = Server::start_tls(&ss.cert, &ss.key);
    s.route("/x", vec![Behavior::Ok(b"trusted".to_vec())]);
    s.route("/child.ign", vec![Behavior::Ok(child_cfg("/etc/over-tls"))]);

    // The library, as the files stage uses it.
    let f = Fetcher::new(Options {
        ca_pems: vec![ss.cert.clone()],
        http_total: Some(60),
        ..Default::default()
    });
    assert_eq!(f.fetch_bytes(&resource(&s.url("/x"))).unwrap(), b"trusted");

    // A config naming the certificate as its CA, merging a child over https.
    let cfg = format!(
        r#"{{"ignition":{{"version":"3.4.0","timeouts":{{"httpTotal":60}},"security":{{"tls":{{"certificateAuthorities":[{{"source":"{}"}}]}}}},
            "config":{{"merge":[{{"source":"{}"}}]}}}}}}"#,
        data_url(&ss.cert),
        s.url("/child.ign")
    );
    let (out, rendered) = fetch_stage(cfg.as_bytes());
    assert!(
        out.status.success(),
        "fetch stage failed:\n{}",
        stderr(&out)
    );
    assert_eq!(file_paths(&rendered), ["/etc/over-tls"]);

    // agent fetch --ca-file.
    let dest = d.join("out");
    let o = agent_fetch_cli(&s.url("/x"), &dest, &d.join("server.pem"));
    assert!(o.status.success(), "agent fetch failed:\n{}", stderr(&o));
    assert_eq!(std::fs::read(&dest).unwrap(), b"trusted");
}

#[test]
fn certificate_errors_are_final_and_say_what_to_change() {
    let d = TempDir::new("badcerts");
    let good = self_signed(d.path(), "good", "IP:127.0.0.1", false);
    let other_name = self_signed(
        d.path(),
        "othername",
        "IP:127.0.0.2,DNS:other.example",
        false,
    );
    self_signed(d.path(), "unrelated", "IP:127.0.0.1", false);
    let expired = self_signed(d.path(), "expired", "IP:127.0.0.1", true);
    // (what, served certificate, configured CA file, a word the rustls verdict contains)
    let cases = [
        ("wrong name", &other_name, "othername.pem", "name"),
        ("unrelated CA", &good, "unrelated.pem", "issuer"),
        ("expired", &expired, "expired.pem", "expired"),
    ];
    for (what, served, ca_file, word) in cases {
        let s = Server::start_tls(&served.cert, &served.key);
        s.route("/x", vec![Behavior::Ok(b"must not arrive".to_vec())]);
        let ca = std::fs::read(d.join(ca_file)).unwrap();
        let f = Fetcher::new(Options {
            ca_pems: vec![ca],
            http_total: Some(60),
            ..Default::default()
        });
        let e = format!("{:#}", f.fetch_bytes(&resource(&s.url("/x"))).unwrap_err());
        assert!(
            e.contains("TLS certificate of 127.0.0.1 rejected")
                && e.contains("certificateAuthorities")
                && e.to_lowercase().contains(word),
            "{what}: {e}"
        );
        // Final: no retries until httpTotal ran out.
        assert!(!e.contains("giving up"), "{what} was retried: {e}");
        assert!(s.requests("/x").is_empty(), "{what}: a request got through");
        // The same through agent fetch --ca-file.
        let dest = d.join("never");
        let o = agent_fetch_cli(&s.url("/x"), &dest, &d.join(ca_file));
        let err = stderr(&o);
        assert!(!o.status.success(), "{what}: agent fetch succeeded");
        assert!(
            err.contains("rejected") && err.contains("--ca-file") && !err.contains("giving up"),
            "{what}: {err}"
        );
        assert!(!dest.exists());
    }
    // Sanity: the good certificate with its own CA works against the same kind of server.
    let s = Server::start_tls(&good.cert, &good.key);
    s.route("/x", vec![Behavior::Ok(b"ok".to_vec())]);
    let f = Fetcher::new(Options {
        ca_pems: vec![good.cert.clone()],
        http_total: Some(60),
        ..Default::default()
    });
    assert_eq!(f.fetch_bytes(&resource(&s.url("/x"))).unwrap(), b"ok");
}

/// Asserts `r` carries `name: value` exactly once.
fn once(r: &Request, name: &str, value: &str) {
    let found: Vec<&str> = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(found, [value], "{name} of {}: {:?}", r.path, r.headers);
}

#[test]
fn requests_carry_the_headers_ignition_sends() {
    let s = Server::start();
    s.route("/child.ign", vec![Behavior::Ok(child_cfg("/etc/child"))]);
    s.route("/contents", vec![Behavior::Ok(b"asdf\nfdsa".to_vec())]);
    s.route("/overridden", vec![Behavior::Ok(b"x".to_vec())]);
    let cfg = format!(
        r#"{{"ignition":{{"version":"3.4.0","timeouts":{{"httpTotal":60}},"config":{{"merge":[{{"source":"{}"}}]}}}}}}"#,
        s.url("/child.ign")
    );
    // A config merge fetched by the fetch stage.
    let (out, rendered) = fetch_stage(cfg.as_bytes());
    assert!(
        out.status.success(),
        "fetch stage failed:\n{}",
        stderr(&out)
    );
    assert_eq!(file_paths(&rendered), ["/etc/child"]);
    // File contents, fetched as the files stage does.
    let dir = TempDir::new("hdr");
    Fetcher::new(Options::default())
        .fetch_to_file(&resource(&s.url("/contents")), &dir.join("f"), 0o644)
        .unwrap();
    for path in ["/child.ign", "/contents"] {
        let reqs = s.requests(path);
        assert_eq!(reqs.len(), 1, "{path}");
        let r = &reqs[0];
        once(r, "Accept", IGNITION_ACCEPT);
        once(r, "Accept-Encoding", "identity");
        let ua = r.header("User-Agent").unwrap();
        assert!(
            ua.starts_with("Ignition/") && ua.contains("agent/"),
            "User-Agent of {path}: {ua}"
        );
    }
    // httpHeaders replace the defaults (no second value) and add their own.
    let mut r = resource(&s.url("/overridden"));
    for (n, v) in [
        ("Accept", "application/json"),
        ("Accept-Encoding", "identity, compress"),
        ("User-Agent", "MyUA"),
        ("Keep-Alive", "1000"),
    ] {
        r.http_headers.push(HttpHeader {
            name: n.into(),
            value: Some(v.into()),
        });
    }
    Fetcher::new(Options::default()).fetch_bytes(&r).unwrap();
    let req = &s.requests("/overridden")[0];
    once(req, "Accept", "application/json");
    once(req, "Accept-Encoding", "identity, compress");
    once(req, "User-Agent", "MyUA");
    once(req, "Keep-Alive", "1000");
}

/// Request lines a proxy saw, each with its `Proxy-Authorization`.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A forward HTTP proxy on 127.0.0.1 that takes only absolute-form requests (and CONNECT
/// when allowed), recording each request line and its `Proxy-Authorization`.
struct TestProxy {
    port: u16,
    seen: Seen,
    stop: Arc<AtomicBool>,
}

impl TestProxy {
    fn start(allow_connect: bool) -> TestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Seen = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (sn, st) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((c, _)) => {
                        c.set_nonblocking(false).unwrap();
                        let sn = sn.clone();
                        std::thread::spawn(move || {
                            let _ = serve_proxy(c, &sn, allow_connect);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        TestProxy { port, seen, stop }
    }

    fn url(&self, userinfo: &str) -> String {
        format!("http://{userinfo}127.0.0.1:{}", self.port)
    }

    fn seen(&self) -> Vec<(String, Option<String>)> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve_proxy(
    mut c: TcpStream,
    seen: &Mutex<Vec<(String, Option<String>)>>,
    allow_connect: bool,
) -> std::io::Result<()> {
    c.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if c.read(&mut b)? == 0 || head.len() > 65536 {
            return Ok(());
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let auth = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("proxy-authorization"))
        .map(|(_, v)| v.clone());
    seen.lock().unwrap().push((line.clone(), auth));
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let refuse = |c: &mut TcpStream, code: &str| {
        c.write_all(
            format!("HTTP/1.1 {code}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    };
    if method == "CONNECT" {
        if !allow_connect {
            return refuse(&mut c, "405 Method Not Allowed");
        }
        let up = TcpStream::connect(target)?;
        c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
        let (mut c2, mut up2) = (c.try_clone()?, up.try_clone()?);
        let t = std::thread::spawn(move || {
            let _ = std::io::copy(&mut c2, &mut up2);
            let _ = up2.shutdown(Shutdown::Write);
        });
        let (mut up, mut c) = (up, c);
        let _ = std::io::copy(&mut up, &mut c);
        let _ = c.shutdown(Shutdown::Write);
        let _ = t.join();
        return Ok(());
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return refuse(&mut c, "400 Origin Form Sent To A Proxy");
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut up = TcpStream::connect(authority)?;
    let mut req = format!(
        "{method} {} HTTP/1.1\r\n",
        if path.is_empty() { "/" } else { path }
    );
    for (k, v) in &headers {
        let k_l = k.to_ascii_lowercase();
        if !k_l.starts_with("proxy-") && k_l != "connection" {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    req.push_str("Connection: close\r\n\r\n");
    up.write_all(req.as_bytes())?;
    std::io::copy(&mut up, &mut c)?;
    Ok(())
}

fn via(http: Option<String>, https: Option<String>, no_proxy: &[&str], cas: &[&[u8]]) -> Fetcher {
    via_within(http, https, no_proxy, cas, 60)
}

fn via_within(
    http: Option<String>,
    https: Option<String>,
    no_proxy: &[&str],
    cas: &[&[u8]],
    total: i64,
) -> Fetcher {
    Fetcher::new(Options {
        proxy: Proxy {
            http_proxy: http,
            https_proxy: https,
            no_proxy: no_proxy.iter().map(|s| s.to_string()).collect(),
        },
        ca_pems: cas.iter().map(|c| c.to_vec()).collect(),
        http_total: Some(total),
        ..Default::default()
    })
}

#[test]
fn plain_http_goes_to_the_proxy_in_absolute_form() {
    let s = Server::start();
    s.route("/p", vec![Behavior::Ok(b"via proxy".to_vec())]);
    s.route("/r", vec![Behavior::Redirect("/p".into())]);
    s.route("/child.ign", vec![Behavior::Ok(child_cfg("/etc/proxied"))]);
    let origin = format!("127.0.0.1:{}", s.addr.port());
    let proxy = TestProxy::start(false);

    // Credentials in the proxy URL become Proxy-Authorization; the origin never sees them.
    let f = via(Some(proxy.url("user:pass@")), None, &[], &[]);
    assert_eq!(
        f.fetch_bytes(&resource(&s.url("/p"))).unwrap(),
        b"via proxy"
    );
    assert_eq!(
        proxy.seen(),
        [(
            format!("GET http://{origin}/p HTTP/1.1"),
            Some("Basic dXNlcjpwYXNz".to_string())
        )]
    );
    let at_origin = &s.requests("/p")[0];
    assert_eq!(at_origin.header("Host"), Some(origin.as_str()));
    assert_eq!(at_origin.header("Proxy-Authorization"), None);

    // A redirect: every hop goes through the proxy in absolute form.
    let f = via(Some(proxy.url("")), None, &[], &[]);
    assert_eq!(
        f.fetch_bytes(&resource(&s.url("/r"))).unwrap(),
        b"via proxy"
    );
    let lines: Vec<String> = proxy.seen().into_iter().skip(1).map(|(l, _)| l).collect();
    assert_eq!(
        lines,
        [
            format!("GET http://{origin}/r HTTP/1.1"),
            format!("GET http://{origin}/p HTTP/1.1")
        ]
    );

    // noProxy bypasses the proxy.
    let before = proxy.seen().len();
    for np in ["127.0.0.1", "127.0.0.0/8", "*"] {
        let f = via(Some(proxy.url("")), None, &[np], &[]);
        assert_eq!(
            f.fetch_bytes(&resource(&s.url("/p"))).unwrap(),
            b"via proxy"
        );
    }
    assert_eq!(
        proxy.seen().len(),
        before,
        "noProxy requests reached the proxy"
    );

    // ignition.proxy.httpProxy of a config applies to its references.
    let cfg = format!(
        r#"{{"ignition":{{"version":"3.4.0","timeouts":{{"httpTotal":60}},"proxy":{{"httpProxy":"{}"}},
            "config":{{"merge":[{{"source":"{}"}}]}}}}}}"#,
        proxy.url(""),
        s.url("/child.ign")
    );
    let (out, rendered) = fetch_stage(cfg.as_bytes());
    assert!(
        out.status.success(),
        "fetch stage failed:\n{}",
        stderr(&out)
    );
    assert_eq!(file_paths(&rendered), ["/etc/proxied"]);
    assert_eq!(
        proxy.seen().last().unwrap().0,
        format!("GET http://{origin}/child.ign HTTP/1.1")
    );
}

#[test]
fn https_goes_through_the_proxy_in_a_connect_tunnel() {
    let d = TempDir::new("tunnel");
    let ss = self_signed(d.path(), "tunnel", "IP:127.0.0.1", false);
    let s = Server::start_tls(&ss.cert, &ss.key);
    s.route("/t", vec![Behavior::Ok(b"tunnelled".to_vec())]);
    let proxy = TestProxy::start(true);
    let f = via(None, Some(proxy.url("")), &[], &[&ss.cert]);
    assert_eq!(
        f.fetch_bytes(&resource(&s.url("/t"))).unwrap(),
        b"tunnelled"
    );
    let port = s.addr.port();
    assert_eq!(
        proxy.seen()[0].0,
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1")
    );
    // The proxy that refuses CONNECT: the https fetch fails (retried within httpTotal, as a
    // proxy error may pass), and http-only proxy settings leave https direct.
    let refusing = TestProxy::start(false);
    let f = via_within(None, Some(refusing.url("")), &[], &[&ss.cert], 1);
    assert!(f.fetch_bytes(&resource(&s.url("/t"))).is_err());
    assert!(refusing.seen()[0].0.starts_with("CONNECT "));
    let f = via(Some(refusing.url("")), None, &[], &[&ss.cert]);
    assert_eq!(
        f.fetch_bytes(&resource(&s.url("/t"))).unwrap(),
        b"tunnelled"
    );
}
