//! The etcd inventory store against a real 3-member etcd cluster on 127.0.0.1 (Debian's
//! `etcd-server`, installed by `.ci/install-packages all`): three clients, each starting on a
//! different member, record a herd of reports (each sent twice) while one member is killed
//! with SIGKILL; no report is lost or stored twice, and every client sees the same inventory.

mod inventory_support;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inventory_support::report;
use runtime::util::TestDir;
use serve::inventory::{Etcd, EtcdOptions, Filter, Origin, Recorded, State, Store};

/// Three etcd members on free 127.0.0.1 ports, their data in a temporary directory; killed
/// and removed on drop, also when the test fails.
struct Cluster {
    members: Vec<Option<Child>>,
    clients: Vec<String>,
    dir: TestDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Cluster {
    fn start(etcd: &str) -> Cluster {
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
        c.wait_healthy();
        c
    }

    /// Waits until every member says it is healthy (has a leader), at most a minute.
    fn wait_healthy(&self) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .http_status_as_error(false)
            .build()
            .into();
        let deadline = Instant::now() + Duration::from_secs(60);
        for url in &self.clients {
            loop {
                let ok = agent
                    .get(format!("{url}/health"))
                    .call()
                    .ok()
                    .and_then(|mut r| r.body_mut().read_to_string().ok())
                    .is_some_and(|b| b.contains("\"health\":\"true\""));
                if ok {
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
    fn leader(&self) -> usize {
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

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            c.kill().expect("SIGKILL to an etcd member");
            c.wait().expect("waiting for the etcd member");
        }
    }
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
fn etcd_binary() -> Option<String> {
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

const MACHINES: usize = 40;
const BOOTS: usize = 3;
const STAGES: [(&str, bool); 3] = [("fetch", false), ("disks", false), ("files", true)];

#[test]
fn inventory_etcd_three_members_one_killed_mid_herd_loses_nothing() {
    let Some(etcd) = etcd_binary() else { return };
    let mut cluster = Cluster::start(&etcd);
    let clients: Vec<Arc<Etcd>> = (0..3)
        .map(|i| {
            let mut opts = EtcdOptions::new(cluster.clients.clone());
            opts.prefix = format!("/test-{}/inventory/", std::process::id());
            Arc::new(Etcd::with_first(opts, i).expect("a client"))
        })
        .collect();

    // Every report twice, through two different clients (a retry through another replica).
    let mut work = Vec::new();
    for m in 0..MACHINES {
        for b in 0..BOOTS {
            for (s, (stage, last)) in STAGES.into_iter().enumerate() {
                let id = format!("r-{m}-{b}-{s}");
                let r = report(
                    &id,
                    &format!("m-{m}"),
                    &format!("boot-{b}"),
                    stage,
                    "ok",
                    last,
                );
                let first = (m + b + s) % 3;
                work.push((r.clone(), first));
                work.push((r, (first + 1) % 3));
            }
        }
    }
    // Interleave deterministically, so the two copies of a report are not neighbours.
    let n = work.len();
    let order: Vec<usize> = (0..n).map(|i| (i * 7919) % n).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "a permutation");

    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let results = Arc::new(Mutex::new(Vec::new()));
    let work = Arc::new(work);
    let order = Arc::new(order);
    let threads: Vec<_> = (0..12)
        .map(|t| {
            let (next, done, results) = (next.clone(), done.clone(), results.clone());
            let (work, order, clients) = (work.clone(), order.clone(), clients.clone());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= work.len() {
                        return;
                    }
                    let (r, client) = &work[order[i]];
                    let origin = Origin {
                        token_pool: Some("worker".into()),
                        received: i as u64,
                    };
                    let got = clients[*client].record(r, &origin);
                    results.lock().expect("results").push((
                        t,
                        r.id.clone(),
                        got.map_err(|e| format!("{e:#}")),
                    ));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Kill the leader (the first member of one of the clients) a third of the way in: the
    // others elect a new one while the herd goes on.
    while done.load(Ordering::Relaxed) < n / 3 {
        std::thread::sleep(Duration::from_millis(2));
    }
    let leader = cluster.leader();
    cluster.kill(leader);
    let at_kill = done.load(Ordering::Relaxed);
    eprintln!("killed etcd member m{leader} (the leader) after {at_kill} of {n} reports");
    for t in threads {
        t.join().expect("a reporting thread");
    }

    assert!(at_kill < n, "the herd was over before the kill");
    let results = results.lock().expect("results");
    assert_eq!(results.len(), n);
    let failed: Vec<_> = results.iter().filter(|(_, _, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{} reports refused, the first: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    let new = results
        .iter()
        .filter(|(_, _, r)| matches!(r, Ok(Recorded::New)))
        .count();
    assert!(
        new <= n / 2,
        "{new} reports recorded as new, of {} distinct",
        n / 2
    );

    // Every client sees the same inventory, and every report is in it exactly once.
    let seen: Vec<Vec<_>> = clients
        .iter()
        .map(|c| c.machines(&Filter::default()).expect("listing"))
        .collect();
    assert_eq!(seen[0].len(), MACHINES);
    assert!(
        seen.iter().all(|s| *s == seen[0]),
        "the clients' inventories differ"
    );
    for m in &seen[0] {
        assert_eq!(
            m.reports as usize,
            BOOTS * STAGES.len(),
            "{}: reports recorded",
            m.id
        );
        assert_eq!(m.state, Some(State::Provisioned), "{}", m.id);
        let mut ids: Vec<_> = m
            .boots
            .iter()
            .flat_map(|b| b.stages.iter().map(|s| s.report_id.clone()))
            .collect();
        ids.sort();
        let n: usize = m.id["m-".len()..].parse().expect("a machine number");
        let mut want: Vec<_> = (0..BOOTS)
            .flat_map(|b| (0..STAGES.len()).map(move |s| format!("r-{n}-{b}-{s}")))
            .collect();
        want.sort();
        assert_eq!(ids, want, "{}: each report once", m.id);
        let full: Vec<_> = clients
            .iter()
            .map(|c| c.machine(&m.id).expect("reading").expect("the machine"))
            .collect();
        assert!(
            full.iter().all(|f| *f == full[0]),
            "{}: the clients differ",
            m.id
        );
        assert!(
            full[0]
                .boots
                .iter()
                .flat_map(|b| &b.stages)
                .all(|s| s.detail.is_some()),
            "{}: a stage without its details",
            m.id
        );
    }
    let counts = clients[2].counts().expect("counting");
    assert_eq!(
        counts,
        [((State::Provisioned, "worker".to_string()), MACHINES as u64)]
    );
}

#[test]
fn inventory_etcd_no_member_answers() {
    // Nothing listens on these ports (bound, then closed): every request fails over to the
    // next member, round after round, then fails naming the endpoints.
    let eps = vec![
        format!("http://127.0.0.1:{}", free_port()),
        format!("http://127.0.0.1:{}", free_port()),
    ];
    let s = Etcd::new(EtcdOptions::new(eps.clone())).expect("a client");
    let err = s
        .machines(&Filter::default())
        .expect_err("no member")
        .to_string();
    assert!(err.contains(&eps.join(",")), "{err}");
    assert!(Etcd::new(EtcdOptions::new(vec![])).is_err());
    assert!(Etcd::new(EtcdOptions::new(vec!["127.0.0.1:2379".into()])).is_err());
}

/// A one-time boot token (docs/serve.md, "One-time tokens") issued through one replica's
/// client and spent at once by eight threads through three clients, each starting on a
/// different member: exactly one spends it (etcd's transaction on the key's mod_revision),
/// every other is refused as already used; an expired one is refused; the record is kept
/// under a lease (etcd forgets it by itself).
#[test]
fn inventory_etcd_boot_token_is_spent_once_across_replicas() {
    use serve::inventory::{BootToken, Spend};
    let Some(etcd) = etcd_binary() else { return };
    let cluster = Cluster::start(&etcd);
    let clients: Vec<Arc<Etcd>> = (0..3)
        .map(|i| {
            let mut opts = EtcdOptions::new(cluster.clients.clone());
            opts.prefix = format!("/test-{}/tokens/", std::process::id());
            Arc::new(Etcd::with_first(opts, i).expect("a client"))
        })
        .collect();
    let now = 1_800_000_000;
    let t = BootToken {
        machine: "mac-52:54:00:12:34:01".into(),
        file: Some("node-1".into()),
        pool: "worker".into(),
        expires: now + 600,
        spent: None,
        reports_until: now + 600 + 86_400,
    };
    // The store's clock is the caller's: the lease is counted from the real clock, so the
    // token is issued relative to it.
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let shift = |x: u64| x - now + real;
    let t = BootToken {
        expires: shift(t.expires),
        reports_until: shift(t.reports_until),
        ..t
    };
    clients[0].put_boot_token("k1", &t, real).expect("put");
    assert_eq!(clients[2].boot_token("k1").unwrap().as_ref(), Some(&t));
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let spent: Vec<Spend> = (0..8)
        .map(|i| {
            let c = clients[i % 3].clone();
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                c.spend_boot_token("k1", real).expect("spend")
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let ok: Vec<&Spend> = spent
        .iter()
        .filter(|s| matches!(s, Spend::Spent(_)))
        .collect();
    assert_eq!(ok.len(), 1, "{spent:?}");
    assert!(
        spent
            .iter()
            .filter(|s| !matches!(s, Spend::Spent(_)))
            .all(|s| *s == Spend::Refused("token already used")),
        "{spent:?}"
    );
    assert_eq!(
        clients[1].spend_boot_token("k1", real).unwrap(),
        Spend::Refused("token already used")
    );
    assert!(
        clients[1]
            .boot_token("k1")
            .unwrap()
            .unwrap()
            .spent
            .is_some()
    );
    // Expired before use.
    let late = BootToken {
        expires: real,
        ..t.clone()
    };
    clients[1].put_boot_token("k2", &late, real).unwrap();
    assert_eq!(
        clients[0].spend_boot_token("k2", real).unwrap(),
        Spend::Refused("token expired")
    );
    assert_eq!(
        clients[0].spend_boot_token("nope", real).unwrap(),
        Spend::Refused("unknown token")
    );
    drop(cluster);
}
