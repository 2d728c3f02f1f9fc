//! A real etcd cluster on 127.0.0.1 for the tests (Debian's `etcd-server`): three members on
//! free ports, their data in a temporary directory, killed and removed on drop. Used by the
//! serve crate's inventory tests and, by path, by the agent's tests/serve/fleet.rs.

#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use runtime::util::TestDir;

/// Three etcd members on free 127.0.0.1 ports, their data in a temporary directory; killed
/// and removed on drop, also when the test fails.
pub struct Cluster {
    members: Vec<Option<Child>>,
    pub clients: Vec<String>,
    pub dir: TestDir,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Cluster {
    /// Starts the three members and waits until each is healthy. A member that exits while
    /// starting (a port taken meanwhile by another test: the free ports are only free when
    /// picked) makes a new cluster on new ports, three times at most.
    pub fn start(etcd: &str) -> Cluster {
        for attempt in 1.. {
            let c = Cluster::spawn(etcd);
            match c.exited() {
                None => {
                    c.wait_healthy();
                    return c;
                }
                Some(why) if attempt < 4 => {
                    eprintln!("etcd cluster start {attempt}: {why}; again on new ports");
                }
                Some(why) => panic!(
                    "etcd cluster start {attempt}: {why}; logs in {}",
                    c.dir.0.display()
                ),
            }
        }
        unreachable!()
    }

    /// Whether a member exited while starting (why, from its log), or None once every
    /// member is healthy (or after a minute: `wait_healthy` then names the one that is not).
    fn exited(&self) -> Option<String> {
        let agent = health_agent();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            for (i, m) in self.members.iter().enumerate() {
                let Some(m) = m else { continue };
                // try_wait needs &mut self: the state from /proc (an exited child stays a
                // zombie, `Z`, until it is waited for on drop).
                let alive =
                    std::fs::read_to_string(format!("/proc/{}/stat", m.id())).is_ok_and(|st| {
                        st.rsplit_once(')')
                            .and_then(|(_, rest)| rest.split_whitespace().next())
                            .is_some_and(|state| state != "Z")
                    });
                if !alive {
                    let log = std::fs::read_to_string(self.dir.0.join(format!("m{i}.log")))
                        .unwrap_or_default();
                    let last = log.lines().last().unwrap_or("").to_string();
                    return Some(format!("member m{i} exited: {last}"));
                }
            }
            if self.clients.iter().all(|url| healthy(&agent, url)) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    fn spawn(etcd: &str) -> Cluster {
        let dir = TestDir::new("inv-etcd");
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster {
            members: Vec::new(),
            clients: ports
                .iter()
                .map(|(client, _)| format!("http://127.0.0.1:{client}"))
                .collect(),
            dir,
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let log = std::fs::File::create(c.dir.0.join(format!("m{i}.log"))).expect("a log file");
            let child = Command::new(etcd)
                .args([
                    format!("--name=m{i}"),
                    format!("--data-dir={}", c.dir.0.join(format!("m{i}")).display()),
                    format!("--listen-client-urls=http://127.0.0.1:{client}"),
                    format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                    format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                    format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                    format!("--initial-cluster={initial}"),
                    "--initial-cluster-state=new".into(),
                    format!("--initial-cluster-token=inv-test-{}", std::process::id()),
                    "--logger=zap".into(),
                ])
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("the log file"))
                .stderr(log)
                .spawn()
                .expect("starting etcd");
            c.members.push(Some(child));
        }
        c
    }

    /// Waits until every member says it is healthy (has a leader), at most a minute.
    pub fn wait_healthy(&self) {
        let agent = health_agent();
        let deadline = Instant::now() + Duration::from_secs(60);
        for url in &self.clients {
            loop {
                if healthy(&agent, url) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "etcd member {url} not healthy after a minute; logs in {}",
                    self.dir.0.display()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// The index of the member that leads the cluster now (from `/v3/maintenance/status`).
    pub fn leader(&self) -> usize {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let status = |url: &String| -> serde_json::Value {
            let mut r = agent
                .post(format!("{url}/v3/maintenance/status"))
                .send(&b"{}"[..])
                .expect("etcd status");
            serde_json::from_slice(&r.body_mut().read_to_vec().expect("etcd status body"))
                .expect("etcd status JSON")
        };
        let all: Vec<_> = self.clients.iter().map(status).collect();
        let leader = all[0]["leader"].clone();
        all.iter()
            .position(|s| s["header"]["member_id"] == leader)
            .expect("a member that leads")
    }

    /// Stops member `i` (SIGSTOP): it holds its connections and answers nothing until
    /// [`Cluster::resume`].
    pub fn stop(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGSTOP);
    }

    /// Lets a stopped member go on (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGCONT);
    }

    fn signal(&self, i: usize, s: nix::sys::signal::Signal) {
        if let Some(c) = &self.members[i] {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), s)
                .unwrap_or_else(|e| panic!("{s} to etcd member m{i}: {e}"));
        }
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            c.kill().expect("SIGKILL to an etcd member");
            c.wait().expect("waiting for the etcd member");
        }
    }
}

fn health_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        .http_status_as_error(false)
        .build()
        .into()
}

/// Whether the member at `url` says it is healthy (has a leader).
fn healthy(agent: &ureq::Agent, url: &str) -> bool {
    agent
        .get(format!("{url}/health"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .is_some_and(|b| b.contains("\"health\":\"true\""))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        if std::thread::panicking() {
            for i in 0..3 {
                let log = std::fs::read_to_string(self.dir.0.join(format!("m{i}.log")))
                    .unwrap_or_default();
                let tail: Vec<_> = log.lines().rev().take(15).collect();
                eprintln!(
                    "--- etcd m{i} log (last lines, newest first):\n{}",
                    tail.join("\n")
                );
            }
        }
    }
}

/// The etcd binary, or None (with a message) when it is missing outside CI. In CI (`CI` set,
/// as .ci/run does) a missing etcd fails the test: CI installs it.
pub fn etcd_binary() -> Option<String> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("etcd"))
            .find(|f| f.is_file())
    });
    match found {
        Some(f) => Some(f.display().to_string()),
        None if std::env::var_os("CI").is_some() => {
            panic!("etcd is not installed; CI installs it (.ci/packages/serve.apt: etcd-server)")
        }
        None => {
            eprintln!(
                "SKIPPED: etcd is not installed (apt-get install etcd-server, or `.ci/install-packages all`)"
            );
            None
        }
    }
}
