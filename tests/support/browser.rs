//! A real browser for the server's web page: headless Chromium (Debian's `chromium`, installed
//! by `.ci/packages/ui.apt`), run once per call with its own profile directory, bounded in
//! time, and killed with its children when the call returns.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;

/// Where the screenshots go: kept after the run as CI artifacts (`target/artifacts/`).
pub fn artifacts() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/artifacts");
    std::fs::create_dir_all(&d).expect("creating target/artifacts");
    d
}

fn chromium(args: &[String], wait: Duration) -> (String, String) {
    chromium_mapping(args, wait, &[])
}

/// Chromium with `names` resolving to their addresses (every other name but 127.0.0.1 to
/// nothing).
fn chromium_mapping(args: &[String], wait: Duration, names: &[(&str, &str)]) -> (String, String) {
    super::need("chromium", "ui.apt");
    let mut rules: Vec<String> = names.iter().map(|(n, a)| format!("MAP {n} {a}")).collect();
    rules.push("MAP * ~NOTFOUND".into());
    rules.push("EXCLUDE 127.0.0.1".into());
    let profile = TempDir::new("chromium");
    let mut cmd = Command::new("chromium");
    // As root Chromium needs --no-sandbox; no GPU, no first-run work, no network beyond the
    // page's own address (the test server on 127.0.0.1).
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--metrics-recording-only",
    ])
    .arg(format!("--host-resolver-rules={}", rules.join(", ")))
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(args)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let mut child = cmd.spawn().expect("starting chromium");
    let out_pid = child.id() as i32;
    let start = Instant::now();
    loop {
        if child.try_wait().expect("waiting for chromium").is_some() {
            break;
        }
        if start.elapsed() > wait {
            // The whole group: the browser forks renderers and helpers.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            panic!("chromium did not finish within {wait:?}: {args:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("chromium output");
    // Helpers it left behind, if any: the group is the browser's own.
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(out_pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The DOM of `url` after the page has loaded (and run any script), as Chromium serializes it.
pub fn dump_dom(url: &str) -> String {
    let (dom, err) = chromium(&["--dump-dom".into(), url.into()], Duration::from_secs(60));
    assert!(
        dom.contains("<html"),
        "chromium returned no document for {url}: {err}"
    );
    dom
}

/// Opens `url` and lets its scripts run for up to `budget` of the page's time (Chromium's
/// virtual time, which waits for the network), with `names` resolving to the given
/// addresses; the DOM then, as Chromium serializes it.
pub fn run_page(url: &str, budget: Duration, names: &[(&str, &str)]) -> String {
    let (dom, err) = chromium_mapping(
        &[
            format!("--virtual-time-budget={}", budget.as_millis()),
            "--dump-dom".into(),
            url.into(),
        ],
        budget + Duration::from_secs(60),
        names,
    );
    assert!(
        dom.contains("<html"),
        "chromium returned no document for {url}: {err}"
    );
    dom
}

/// A screenshot of `url` at `width`x`height`, saved as `target/artifacts/<name>.png`.
pub fn screenshot(url: &str, name: &str, width: u32, height: u32) -> PathBuf {
    let path = artifacts().join(format!("{name}.png"));
    let _ = std::fs::remove_file(&path);
    let (_, err) = chromium(
        &[
            format!("--screenshot={}", path.display()),
            format!("--window-size={width},{height}"),
            url.into(),
        ],
        Duration::from_secs(60),
    );
    let png = std::fs::read(&path).unwrap_or_else(|e| panic!("no screenshot of {url}: {e}: {err}"));
    assert!(
        png.starts_with(b"\x89PNG"),
        "{} is not a PNG",
        path.display()
    );
    path
}

/// A headless Chromium driven over the DevTools protocol on a pipe
/// (`--remote-debugging-pipe`: commands in on fd 3, answers and events out on fd 4, each a
/// JSON message ending in NUL), for what `--dump-dom` cannot tell: where elements are laid
/// out at a given window size, and what a script run in the page (axe-core, injected with
/// the page's CSP bypassed) finds. One page (target) per browser; killed with its children
/// on drop, and by a watchdog if a call hangs.
pub struct Devtools {
    child: std::process::Child,
    to: std::fs::File,
    from: std::io::BufReader<std::fs::File>,
    next: u64,
    session: String,
    events: Vec<serde_json::Value>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    _profile: TempDir,
}

impl Devtools {
    /// A browser whose page is `width`x`height` CSS pixels (a phone's when narrower than
    /// 600: mobile viewport rules apply).
    pub fn open(width: u32, height: u32) -> Devtools {
        use std::os::fd::{AsRawFd, IntoRawFd};
        super::need("chromium", "ui.apt");
        let profile = TempDir::new("chromium-cdp");
        let flags = nix::fcntl::OFlag::O_CLOEXEC;
        let (in_read, in_write) = nix::unistd::pipe2(flags).expect("pipe");
        let (out_read, out_write) = nix::unistd::pipe2(flags).expect("pipe");
        let (a, b) = (in_read.as_raw_fd(), out_write.as_raw_fd());
        let mut cmd = Command::new("chromium");
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
        // SAFETY: only async-signal-safe calls between fork and exec: fcntl and dup2 on fds
        // this process owns, moving the pipe ends to 3 and 4 (dup2 clears close-on-exec).
        unsafe {
            cmd.pre_exec(move || {
                let a = nix::libc::fcntl(a, nix::libc::F_DUPFD_CLOEXEC, 10);
                let b = nix::libc::fcntl(b, nix::libc::F_DUPFD_CLOEXEC, 10);
                if a < 0 || b < 0 || nix::libc::dup2(a, 3) < 0 || nix::libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("starting chromium");
        drop((in_read, out_write));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (pid, flag) = (child.id() as i32, done.clone());
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(240);
            while Instant::now() < end {
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            eprintln!("chromium (devtools) still running after 240 s: killed");
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        });
        // SAFETY: the fds were just made by pipe2 and are owned here alone.
        let (to, from) = unsafe {
            use std::os::fd::FromRawFd;
            (
                std::fs::File::from_raw_fd(in_write.into_raw_fd()),
                std::fs::File::from_raw_fd(out_read.into_raw_fd()),
            )
        };
        let mut d = Devtools {
            child,
            to,
            from: std::io::BufReader::new(from),
            next: 0,
            session: String::new(),
            events: Vec::new(),
            done,
            _profile: profile,
        };
        let target = d.browser(
            "Target.createTarget",
            serde_json::json!({"url": "about:blank"}),
        );
        let target = target["targetId"].as_str().expect("a target").to_string();
        let s = d.browser(
            "Target.attachToTarget",
            serde_json::json!({"targetId": target, "flatten": true}),
        );
        d.session = s["sessionId"].as_str().expect("a session").to_string();
        d.call("Page.enable", serde_json::json!({}));
        d.call(
            "Emulation.setDeviceMetricsOverride",
            serde_json::json!({"width": width, "height": height, "deviceScaleFactor": 1,
                               "mobile": width < 600}),
        );
        d.call("Page.setBypassCSP", serde_json::json!({"enabled": true}));
        d
    }

    fn send(
        &mut self,
        session: bool,
        method: &str,
        params: serde_json::Value,
    ) -> serde_json::Value {
        use std::io::{BufRead, Write};
        self.next += 1;
        let id = self.next;
        let mut msg = serde_json::json!({"id": id, "method": method, "params": params});
        if session {
            msg["sessionId"] = self.session.clone().into();
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).expect("writing to chromium");
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).expect("reading chromium");
            assert!(n > 0, "chromium closed its pipe during {method}");
            buf.pop();
            let v: serde_json::Value = serde_json::from_slice(&buf).expect("a JSON message");
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {}", v["error"]);
                return v["result"].clone();
            }
            self.events.push(v);
        }
    }

    fn browser(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.send(false, method, params)
    }

    /// A command to the page.
    pub fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.send(true, method, params)
    }

    /// Loads `url` and waits for its load event.
    pub fn navigate(&mut self, url: &str) {
        self.events.clear();
        let r = self.call("Page.navigate", serde_json::json!({"url": url}));
        assert!(r.get("errorText").is_none(), "{url}: {r}");
        let end = Instant::now() + Duration::from_secs(60);
        while !self
            .events
            .iter()
            .any(|e| e["method"] == "Page.loadEventFired")
        {
            assert!(Instant::now() < end, "{url} did not load");
            // Any command's answer brings the events queued before it.
            self.call("Runtime.evaluate", serde_json::json!({"expression": "1"}));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The value of `expression` in the page (a promise is waited for).
    pub fn eval(&mut self, expression: &str) -> serde_json::Value {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": expression, "returnByValue": true,
                               "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// A screenshot of the page as it is laid out, saved as `target/artifacts/<name>.png`.
    pub fn screenshot(&mut self, name: &str) -> PathBuf {
        let r = self.call(
            "Page.captureScreenshot",
            serde_json::json!({"format": "png"}),
        );
        let png = spec::encoding::data_url::base64_decode(
            r["data"].as_str().expect("screenshot data").as_bytes(),
        )
        .expect("base64");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let path = artifacts().join(format!("{name}.png"));
        std::fs::write(&path, png).expect("writing the screenshot");
        path
    }
}

impl Drop for Devtools {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.wait();
    }
}

/// axe-core (`.ci/packages/ui.npm`, installed into target/npm by `.ci/install-packages`).
pub fn axe_source() -> String {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/npm/node_modules/axe-core/axe.min.js");
    std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: axe-core is installed by .ci/install-packages (from .ci/packages/ui.npm)",
            p.display()
        )
    })
}
