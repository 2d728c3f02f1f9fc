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
