//! A LUKS2 volume bound to a real tang server (Debian's tangd, served on 127.0.0.1 on a free
//! port) through the agent's LUKS code: format + `clevis luks bind` (neither needs
//! device-mapper, which the host kernel lacks), then the binding is proved by asking tang for the
//! volume's passphrase (`clevis luks pass`) and checking that it opens the header; the planner
//! then reuses the bound volume only when the config asks for clevis.

use crate::support;

use std::io::Write;
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent::blockdev::luks::{self, LuksAction};
use agent::fetch::{self, Fetcher};
use spec::config::types::{Luks, Resource, Tang};
use support::root::{Loop, must_be_root};

const TANGD: &str = "/usr/libexec/tangd";
const TANGD_KEYGEN: &str = "/usr/libexec/tangd-keygen";

fn need(tool: &str) {
    support::need(tool, "raid.apt (tang, clevis-luks)");
}

/// tangd (an inetd-style program: one HTTP exchange on stdin/stdout) behind a listener on a
/// free port; stopped on drop.
struct TangServer {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: PathBuf,
}

impl TangServer {
    fn start() -> TangServer {
        need(TANGD);
        need(TANGD_KEYGEN);
        let dir = std::env::temp_dir().join(format!("agent-tang-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let st = Command::new(TANGD_KEYGEN).arg(&dir).status().unwrap();
        assert!(st.success(), "tangd-keygen failed");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, d2) = (stop.clone(), dir.clone());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((sock, _)) => {
                        sock.set_nonblocking(false).unwrap();
                        let fd: OwnedFd = sock.into();
                        let out = fd.try_clone().unwrap();
                        if let Ok(mut c) = Command::new(TANGD)
                            .arg(&d2)
                            .stdin(Stdio::from(fd))
                            .stdout(Stdio::from(out))
                            .stderr(Stdio::null())
                            .spawn()
                        {
                            let _ = c.wait();
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        TangServer {
            port,
            stop,
            thread: Some(thread),
            dir,
        }
    }
}

impl Drop for TangServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fast() -> Vec<String> {
    ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"]
        .map(String::from)
        .to_vec()
}

#[test]
#[ignore = "needs root: make test-root"]
fn tang_binding_against_a_real_tang_server() {
    must_be_root();
    need("clevis");
    need("cryptsetup");
    let tang = TangServer::start();
    let l = Loop::new(32);
    let mut cfg = Luks {
        name: "tangvol".into(),
        device: Some(l.dev.clone()),
        options: fast(),
        ..Default::default()
    };
    cfg.clevis.tang.push(Tang {
        url: format!("http://127.0.0.1:{}", tang.port),
        ..Default::default()
    });
    let fetcher = Fetcher::new(fetch::Options::default());
    let action = luks::decide_now(&cfg).unwrap();
    assert_eq!(action, LuksAction::Create { wipe: None });
    let p = luks::prepare(&cfg, action, &fetcher).unwrap();
    luks::format_and_bind(&cfg, &p).unwrap();

    // The header carries a clevis token, and tang gives back a passphrase that opens it.
    let e = luks::examine(Path::new(&l.dev)).unwrap().unwrap();
    assert_eq!(e.fstype, "crypto_LUKS");
    assert!(e.clevis, "no clevis token after binding");
    let pass = Command::new("clevis")
        .args(["luks", "pass", "-d", &l.dev, "-s", "1"])
        .output()
        .unwrap();
    assert!(
        pass.status.success(),
        "clevis luks pass: {}",
        String::from_utf8_lossy(&pass.stderr)
    );
    let mut t = Command::new("cryptsetup")
        .args(["open", "--test-passphrase", "--key-file=-", &l.dev])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    t.stdin.take().unwrap().write_all(&pass.stdout).unwrap();
    assert!(
        t.wait().unwrap().success(),
        "tang's passphrase does not open the volume"
    );

    // Reused only with clevis in the config; a key-file config is refused.
    assert_eq!(
        luks::decide_now(&cfg).unwrap(),
        LuksAction::Reuse { clevis: true }
    );
    let plain = Luks {
        name: "tangvol".into(),
        device: Some(l.dev.clone()),
        key_file: Resource {
            source: Some("data:,x".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let err = luks::decide_now(&plain).unwrap_err().to_string();
    assert!(err.contains("bound to clevis"), "{err}");
    // The record for crypttab: no key file, _netdev.
    let state = std::env::temp_dir().join(format!("agent-tang-state-{}", uuid::Uuid::new_v4()));
    let r = agent::state::LuksRecord {
        name: cfg.name.clone(),
        uuid: luks::luks_uuid(Path::new(&l.dev)).unwrap(),
        key_file: false,
        discard: false,
        netdev: luks::needs_network(&cfg),
    };
    assert!(agent::files::luks::crypttab_line(&r).ends_with(" none luks,_netdev"));
    let _ = std::fs::remove_dir_all(&state);
}
