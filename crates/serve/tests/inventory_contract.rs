//! The inventory stores' contract: the same cases against every store, the embedded one (a
//! real redb file), etcd (a real 3-member cluster on 127.0.0.1, Debian's `etcd-server`,
//! installed by `.ci/install-packages all`) and the in-memory one. Each case is a function of
//! an [`Inv`]; [`contract!`] makes one test of each case per store (`embedded::…`,
//! `etcd::…`, `memory::…`). What only one store does (the embedded file's crash safety and
//! marker, etcd's failover) is in inventory_embedded.rs and inventory_etcd.rs.

mod inventory_support;

use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};

use inventory_support::etcd::{Cluster, etcd_binary};
use inventory_support::{RecordsExt, report};
use runtime::util::TestDir;
use serve::fleet::inventory::{
    BootToken, Embedded, Etcd, EtcdOptions, Filter, Full, Machine, Memory, Origin, Recorded,
    Rollout, RolloutMachine, RolloutState, Spend, State, Store, limits,
};

/// Which store a case runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Embedded,
    Etcd,
    Memory,
}

/// One inventory of a case, new and empty: its store and how to reach it again.
struct Inv {
    backend: Backend,
    max: u64,
    /// The handles open now: [0] always; for etcd one client per replica asked for.
    stores: Vec<Arc<dyn Store>>,
    /// The embedded store's file.
    path: PathBuf,
    _dir: Option<TestDir>,
    /// The etcd store's key prefix, its own for each case.
    prefix: String,
}

/// The cluster every etcd case shares (each under its own prefix), started by the first
/// and stopped when the test binary exits.
static CLUSTER: Mutex<Option<Cluster>> = Mutex::new(None);

extern "C" fn stop_cluster() {
    if let Ok(mut c) = CLUSTER.lock() {
        drop(c.take());
    }
}

/// The shared cluster's client URLs; None when etcd is not installed (outside CI).
fn cluster() -> Option<Vec<String>> {
    static URLS: OnceLock<Option<Vec<String>>> = OnceLock::new();
    URLS.get_or_init(|| {
        let etcd = etcd_binary()?;
        let c = Cluster::start(&etcd);
        let urls = c.clients.clone();
        *CLUSTER.lock().expect("the cluster") = Some(c);
        // SAFETY: registers a plain function, run once when the process exits.
        unsafe { nix::libc::atexit(stop_cluster) };
        Some(urls)
    })
    .clone()
}

impl Backend {
    /// A new, empty inventory holding `max` machines at most, for case `name`; None when
    /// the store cannot run here (etcd not installed, outside CI).
    fn open(self, name: &str, max: u64) -> Option<Inv> {
        let mut inv = Inv {
            backend: self,
            max,
            stores: Vec::new(),
            path: PathBuf::new(),
            _dir: None,
            prefix: format!("/contract-{}/{name}/", std::process::id()),
        };
        match self {
            Backend::Embedded => {
                let dir = TestDir::new(&format!("inv-contract-{name}"));
                inv.path = dir.0.join("inventory.db");
                inv._dir = Some(dir);
            }
            Backend::Etcd => {
                cluster()?;
            }
            Backend::Memory => {}
        }
        inv.restart();
        Some(inv)
    }
}

impl Inv {
    /// The store (its first handle).
    fn store(&self) -> Arc<dyn Store> {
        self.stores[0].clone()
    }

    /// Replica `i`'s handle: for etcd a client of its own, starting on member `i % 3` (as
    /// replicas of the server are); the embedded and in-memory stores have one owner, the
    /// process: the same store.
    fn replica(&mut self, i: usize) -> Arc<dyn Store> {
        if self.backend != Backend::Etcd {
            return self.store();
        }
        while self.stores.len() <= i {
            let s = self.etcd_client(self.stores.len());
            self.stores.push(s);
        }
        self.stores[i].clone()
    }

    fn etcd_client(&self, first: usize) -> Arc<dyn Store> {
        let mut opts = EtcdOptions::new(cluster().expect("the cluster"));
        opts.prefix = self.prefix.clone();
        opts.max_machines = self.max;
        Arc::new(Etcd::with_first(opts, first).expect("an etcd client"))
    }

    /// The same inventory after a restart of the server: the embedded file opened again,
    /// new etcd clients (nothing kept from before but what the cluster holds). The
    /// in-memory store is lost in a restart: it stays as it is (the same process). Every
    /// handle of the case must be dropped before.
    fn restart(&mut self) {
        let open: Arc<dyn Store> = match self.backend {
            Backend::Embedded => {
                for s in self.stores.drain(..) {
                    assert_eq!(
                        Arc::strong_count(&s),
                        1,
                        "a handle of the store is still held across the restart"
                    );
                }
                Arc::new(Embedded::open_with(&self.path, self.max).expect("opening the store"))
            }
            Backend::Etcd => {
                let n = self.stores.len().max(1);
                self.stores.clear();
                for i in 0..n {
                    let s = self.etcd_client(i);
                    self.stores.push(s);
                }
                return;
            }
            Backend::Memory => match self.stores.first() {
                Some(s) => s.clone(),
                None => Arc::new(Memory::new(self.max)),
            },
        };
        self.stores = vec![open];
    }
}

fn token(pool: &str, at: u64) -> Origin {
    Origin {
        token_pool: Some(pool.into()),
        received: at,
        machine_issued: None,
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// One test per case and store: `embedded::case`, `etcd::case`, `memory::case`.
macro_rules! contract {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            $(#[test] fn $case() { super::run(super::Backend::Embedded, stringify!($case), super::$case) })*
        }
        mod etcd {
            $(#[test] fn $case() { super::run(super::Backend::Etcd, stringify!($case), super::$case) })*
        }
        mod memory {
            $(#[test] fn $case() { super::run(super::Backend::Memory, stringify!($case), super::$case) })*
        }
    };
}

/// Runs `case` against a new inventory of `backend` holding [`MAX`] machines at most (the
/// cases about `--max-machines` open their own).
fn run(backend: Backend, name: &str, case: fn(Backend, Inv)) {
    let Some(inv) = backend.open(name, MAX) else {
        return;
    };
    case(backend, inv);
}

const MAX: u64 = 1000;

contract!(
    states_follow_the_newest_boot,
    pool_comes_from_the_token,
    keeps_the_last_ten_boots,
    a_retried_report_is_stored_once,
    filters_and_counts,
    max_machines,
    max_machines_is_exact_under_concurrent_writers,
    concurrent_reports_each_once,
    rollout_records_change_atomically,
    boot_token_is_spent_once,
    a_token_of_two_uses_is_spent_twice,
    token_records_past_their_time_are_forgotten,
    a_report_without_details_reads_back_empty_details,
    a_change_between_reports_is_kept,
    a_removed_machine_is_forgotten,
);

fn states_follow_the_newest_boot(_: Backend, inv: Inv) {
    let s = inv.store();
    let m = "4c4c4544-0042-3510-8052-b4c04f4e4d32";
    let steps: &[(&str, &str, &str, &str, bool, State)] = &[
        ("r1", "b1", "fetch", "started", false, State::Fetching),
        ("r2", "b1", "fetch", "ok", false, State::Provisioning),
        ("r3", "b1", "disks", "ok", false, State::Provisioning),
        ("r4", "b1", "files", "ok", true, State::Provisioned),
        // A second boot: the state follows it.
        ("r5", "b2", "fetch", "started", false, State::Fetching),
        ("r6", "b2", "fetch", "ok", false, State::Provisioning),
        ("r7", "b2", "disks", "failed", false, State::Failed),
        // A late report of the first boot does not move the second boot's state.
        ("r8", "b1", "files", "ok", true, State::Failed),
        // A third boot moves it on.
        ("r9", "b3", "fetch", "ok", false, State::Provisioning),
    ];
    for (i, (id, boot, stage, outcome, last, want)) in steps.iter().enumerate() {
        let r = report(id, m, boot, stage, outcome, *last);
        assert_eq!(
            s.record(&r, &token("worker", 100 + i as u64))
                .expect("recording"),
            Recorded::New
        );
        let got = s.machine(m).expect("reading").expect("the machine");
        assert_eq!(got.state, Some(*want), "after report {id}");
    }
    let got = s.machine(m).expect("reading").expect("the machine");
    assert_eq!((got.first_seen, got.last_seen), (100, 108));
    assert_eq!(got.reports, 9);
    assert_eq!(got.boots.len(), 3);
    // The fetch of boot 1 was reported twice (started, ok): one entry, the ok one.
    let b1 = &got.boots[0];
    assert_eq!(b1.boot_id, "b1");
    let stages: Vec<_> = b1.stages.iter().map(|s| s.report_id.as_str()).collect();
    assert_eq!(
        stages,
        ["r2", "r3", "r8"],
        "one entry per stage, the later ok wins a tie"
    );
    // The failure keeps its error and log tail.
    let fail = &got.boots[1].stages[1];
    assert_eq!(
        fail.error.as_deref(),
        Some("mkfs.xfs /dev/vda4: exit status 1")
    );
    let d = fail.detail.as_ref().expect("the failure's details");
    assert_eq!(d.log_tail.len(), 2);
    assert_eq!(d.changes.partitions.created, ["/dev/vda4"]);
    assert_eq!(got.identity.hostname.as_deref(), Some("node-1"));
    assert_eq!(
        got.config.as_ref().and_then(|c| c.hash.as_deref()),
        Some("sha256-00")
    );
    assert!(got.authenticated);
    // Listings carry no details.
    let listed = s.machines(&Filter::default()).expect("listing");
    assert_eq!(listed.len(), 1);
    assert!(
        listed[0]
            .boots
            .iter()
            .flat_map(|b| &b.stages)
            .all(|s| s.detail.is_none())
    );
}

fn pool_comes_from_the_token(_: Backend, inv: Inv) {
    let s = inv.store();
    // The body says pool "worker"; the token says "infra": the token wins.
    s.record(
        &report("a1", "m-1", "b", "fetch", "ok", false),
        &token("infra", 1),
    )
    .expect("recording");
    let m = s.machine("m-1").expect("reading").expect("m-1");
    assert_eq!((m.pool.as_deref(), m.authenticated), (Some("infra"), true));
    // Without a token: history only, marked unauthenticated; the record keeps what the
    // token proved (its pool, authenticated) and its state.
    let anon = Origin {
        token_pool: None,
        received: 2,
        machine_issued: None,
    };
    s.record(&report("a2", "m-1", "b", "disks", "failed", false), &anon)
        .expect("recording");
    let m = s.machine("m-1").expect("reading").expect("m-1");
    assert_eq!(
        (m.pool.as_deref(), m.authenticated, m.state),
        (Some("infra"), true, Some(State::Provisioning))
    );
    assert!(m.boots[0].stages[0].authenticated && !m.boots[0].stages[1].authenticated);
}

fn keeps_the_last_ten_boots(_: Backend, inv: Inv) {
    let s = inv.store();
    for b in 0..12 {
        for (stage, last) in [("fetch", false), ("disks", false), ("files", true)] {
            let id = format!("r{b}-{stage}");
            s.record(
                &report(&id, "m-h", &format!("boot-{b}"), stage, "ok", last),
                &token("worker", b),
            )
            .expect("recording");
        }
    }
    let m = s.machine("m-h").expect("reading").expect("m-h");
    assert_eq!(m.boots.len(), limits::BOOTS);
    let boots: Vec<_> = m.boots.iter().map(|b| b.boot_id.clone()).collect();
    let want: Vec<_> = (2..12).map(|b| format!("boot-{b}")).collect();
    assert_eq!(boots, want, "the two oldest boots are dropped");
    assert!(
        m.boots
            .iter()
            .flat_map(|b| &b.stages)
            .all(|s| s.detail.is_some()),
        "every kept stage has its details"
    );
    assert_eq!(m.reports, 36);
    assert_eq!(m.recent_ids.len(), 36.min(limits::RECENT_IDS));
}

fn a_retried_report_is_stored_once(_: Backend, mut inv: Inv) {
    let s = inv.store();
    let r = report("same-id", "m-i", "b", "disks", "ok", false);
    assert_eq!(
        s.record(&r, &token("worker", 1)).expect("recording"),
        Recorded::New
    );
    assert_eq!(
        s.record(&r, &token("worker", 2)).expect("recording"),
        Recorded::Duplicate
    );
    // In one batch with a new one: the retry changes nothing, the new one is recorded.
    let r2 = report("other-id", "m-i", "b", "files", "ok", true);
    let o = token("worker", 2);
    let got: Vec<_> = s
        .record_all(&[(&r, &o), (&r2, &o), (&r2, &o)])
        .into_iter()
        .map(|g| g.expect("recording"))
        .collect();
    assert_eq!(
        got,
        [Recorded::Duplicate, Recorded::New, Recorded::Duplicate],
        "a later report of a batch sees the earlier ones"
    );
    drop(s);
    // Still known after a restart.
    inv.restart();
    let s = inv.store();
    assert_eq!(
        s.record(&r, &token("worker", 3)).expect("recording"),
        Recorded::Duplicate
    );
    let m = s.machine("m-i").expect("reading").expect("m-i");
    assert_eq!(m.reports, 2);
    assert_eq!(m.last_seen, 2, "a duplicate does not touch the record");
}

fn filters_and_counts(_: Backend, inv: Inv) {
    let s = inv.store();
    let cases = [
        ("m-a", "worker", "files", "ok", true),
        ("m-b", "worker", "disks", "failed", false),
        ("m-c", "infra", "files", "ok", true),
        ("m-d", "infra", "fetch", "started", false),
        ("m-e", "worker", "files", "ok", true),
    ];
    for (m, pool, stage, outcome, last) in cases {
        s.record(
            &report(&format!("{m}-r"), m, "b", stage, outcome, last),
            &token(pool, 1),
        )
        .expect("recording");
    }
    let ids = |f: Filter| -> Vec<String> {
        s.machines(&f)
            .expect("listing")
            .into_iter()
            .map(|m| m.id)
            .collect()
    };
    assert_eq!(ids(Filter::default()), ["m-a", "m-b", "m-c", "m-d", "m-e"]);
    let worker = Some("worker".to_string());
    assert_eq!(
        ids(Filter {
            pool: worker.clone(),
            state: None,
            ..Filter::default()
        }),
        ["m-a", "m-b", "m-e"]
    );
    assert_eq!(
        ids(Filter {
            pool: worker,
            state: Some(State::Provisioned),
            ..Filter::default()
        }),
        ["m-a", "m-e"]
    );
    assert_eq!(
        ids(Filter {
            pool: None,
            state: Some(State::Fetching),
            ..Filter::default()
        }),
        ["m-d"]
    );
    assert!(
        ids(Filter {
            pool: Some("none".into()),
            state: None,
            ..Filter::default()
        })
        .is_empty()
    );
    // A page of a filtered listing: after an id, matching ones only.
    let mut page = Vec::new();
    s.each_machine(
        &Filter {
            pool: Some("worker".into()),
            state: None,
            ..Filter::default()
        },
        Some("m-a"),
        &mut |m| {
            page.push(m.id);
            true
        },
    )
    .expect("listing a page");
    assert_eq!(page, ["m-b", "m-e"]);
    let counts = s.counts().expect("counting");
    assert_eq!(
        counts,
        [
            ((State::Fetching, "infra".to_string()), 1),
            ((State::Provisioned, "infra".to_string()), 1),
            ((State::Provisioned, "worker".to_string()), 2),
            ((State::Failed, "worker".to_string()), 1),
        ]
    );
    assert_eq!(s.machine_count().expect("the count"), 5);
}

/// `--max-machines`: at the limit a new machine's report (alone or in a batch) and its
/// registration (`update`) are refused, naming the limit; a known machine's still go
/// through; the count survives a restart.
fn max_machines(backend: Backend, _: Inv) {
    let Some(mut inv) = backend.open("max_machines_3", 3) else {
        return;
    };
    let s = inv.store();
    let full = Recorded::Full(Full { max: 3 });
    for m in 0..3 {
        let r = report(
            &format!("r-{m}"),
            &format!("m-{m}"),
            "b",
            "fetch",
            "ok",
            false,
        );
        assert_eq!(s.record(&r, &Origin::default()).unwrap(), Recorded::New);
    }
    assert_eq!(s.machine_count().unwrap(), 3);
    let r = report("r-3", "m-3", "b", "fetch", "ok", false);
    assert_eq!(s.record(&r, &Origin::default()).unwrap(), full);
    assert!(s.machine("m-3").unwrap().is_none());
    // In one batch: the new machine refused, the known one recorded.
    let (a, b) = (
        report("r-4", "m-4", "b", "fetch", "ok", false),
        report("r-1b", "m-1", "b", "disks", "ok", false),
    );
    let o = Origin::default();
    let got: Vec<_> = s
        .record_all(&[(&a, &o), (&b, &o)])
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got, [full, Recorded::New]);
    assert_eq!(s.machine("m-1").unwrap().unwrap().reports, 2);
    // A registration of a new machine: refused; a change of a known one: done.
    let err = s
        .update("m-5", &mut |_| {
            Some(Machine {
                id: "m-5".into(),
                ..Machine::default()
            })
        })
        .expect_err("full");
    assert_eq!(err.downcast_ref::<Full>(), Some(&Full { max: 3 }));
    assert!(err.to_string().contains("--max-machines"), "{err}");
    assert!(s.machine("m-5").unwrap().is_none());
    let m = s
        .update("m-2", &mut |m| {
            m.map(|m| Machine {
                reprovision: Some(7),
                ..m
            })
        })
        .unwrap();
    assert_eq!(m.unwrap().reprovision, Some(7));
    // `f` leaving the record as it is: the record as stored.
    let same = s.update("m-2", &mut |_| None).unwrap();
    assert_eq!(same.unwrap().reprovision, Some(7));
    assert!(s.update("m-9", &mut |_| None).unwrap().is_none());
    assert_eq!(s.machine_count().unwrap(), 3);
    // A page of the listing: after an id, by id, as many as asked for.
    let mut page = Vec::new();
    s.each_machine(&Filter::default(), Some("m-0"), &mut |m| {
        page.push(m.id);
        page.is_empty()
    })
    .unwrap();
    assert_eq!(page, ["m-1"]);
    // Restarted: the count is the same, a new machine still refused.
    drop(s);
    inv.restart();
    let s = inv.store();
    assert_eq!(s.machine_count().unwrap(), 3);
    let r = report("r-3", "m-3", "b", "fetch", "ok", false);
    assert_eq!(s.record(&r, &Origin::default()).unwrap(), full);
}

/// `--max-machines` under concurrent writers (replicas of the server for etcd, clients
/// starting on different members): 60 new machines raced by 8 threads at a limit of 20, in
/// batches and one by one: exactly 20 recorded, every other refused as full (never an
/// error); a known machine's next report and record change still go through, and a change
/// made through one replica is not written over by another's next reports (alone and in a
/// batch); a registration of a new one is refused.
fn max_machines_is_exact_under_concurrent_writers(backend: Backend, _: Inv) {
    const LIMIT: u64 = 20;
    let Some(mut inv) = backend.open("max_machines_20", LIMIT) else {
        return;
    };
    let clients = [inv.replica(0), inv.replica(1)];
    let barrier = Arc::new(Barrier::new(8));
    let results: Vec<(String, Recorded)> = (0..8)
        .map(|t| {
            let (c, b) = (clients[t % 2].clone(), barrier.clone());
            std::thread::spawn(move || {
                b.wait();
                let reports: Vec<_> = (0..60)
                    .filter(|m| m % 8 == t)
                    .map(|m| {
                        let r = report(
                            &format!("r-{m}"),
                            &format!("m-{m}"),
                            "b",
                            "fetch",
                            "ok",
                            false,
                        );
                        (r.machine.id.clone(), r)
                    })
                    .collect();
                let o = Origin::default();
                let got: Vec<_> = if t < 4 {
                    reports.iter().map(|(_, r)| c.record(r, &o)).collect()
                } else {
                    let batch: Vec<_> = reports.iter().map(|(_, r)| (r, &o)).collect();
                    c.record_all(&batch)
                };
                reports
                    .into_iter()
                    .zip(got)
                    .map(|((id, _), g)| (id, g.expect("recorded or refused, not an error")))
                    .collect::<Vec<_>>()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|h| h.join().expect("a thread"))
        .collect();
    assert_eq!(results.len(), 60);
    let new: Vec<&String> = results
        .iter()
        .filter(|(_, r)| *r == Recorded::New)
        .map(|(id, _)| id)
        .collect();
    assert_eq!(new.len(), LIMIT as usize, "{results:?}");
    assert!(
        results
            .iter()
            .all(|(_, r)| matches!(r, Recorded::New | Recorded::Full(Full { max: LIMIT }))),
        "{results:?}"
    );
    for c in &clients {
        assert_eq!(c.machine_count().unwrap(), LIMIT);
        assert_eq!(
            c.machines(&Filter::default()).unwrap().len(),
            LIMIT as usize
        );
    }
    // A page of the listing: the machines after an id, by id, as many as asked for.
    let all: Vec<String> = clients[0]
        .machines(&Filter::default())
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    let mut page = Vec::new();
    clients[1]
        .each_machine(&Filter::default(), Some(&all[4]), &mut |m| {
            page.push(m.id);
            page.len() < 3
        })
        .unwrap();
    assert_eq!(page, all[5..8]);
    known_machines_still_go_through(&clients, new[0], new[1], LIMIT);
}

/// At the limit: a known machine's next report and a change of its record still go through
/// (`known`, `other`: machines recorded), a new machine through `update` does not.
fn known_machines_still_go_through(
    clients: &[Arc<dyn Store>],
    known: &str,
    other: &str,
    limit: u64,
) {
    let known = known.to_string();
    let r = report("r-again", &known, "b", "disks", "ok", false);
    assert_eq!(
        clients[1].record(&r, &Origin::default()).unwrap(),
        Recorded::New
    );
    let changed = clients[0]
        .update(&known, &mut |m| {
            m.map(|m| Machine {
                reprovision: Some(1),
                ..m
            })
        })
        .unwrap();
    assert_eq!(changed.unwrap().reprovision, Some(1));
    // Client 1 wrote the record last and may keep it (`inventory::recent`); client 0
    // changed it since: client 1's next reports (alone and in a batch) are not written
    // over the change.
    let r = report("r-again-2", &known, "b", "files", "ok", true);
    assert_eq!(
        clients[1].record(&r, &Origin::default()).unwrap(),
        Recorded::New
    );
    clients[0]
        .update(&known, &mut |m| {
            m.map(|m| Machine {
                reprovision: Some(2),
                ..m
            })
        })
        .unwrap();
    let (a, b) = (
        report("r-again-3", &known, "b2", "fetch", "ok", false),
        report("r-other", other, "b2", "fetch", "ok", false),
    );
    let o = Origin::default();
    let got: Vec<_> = clients[1]
        .record_all(&[(&a, &o), (&b, &o)])
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got, [Recorded::New, Recorded::New]);
    let m = clients[1].machine(&known).unwrap().unwrap();
    assert_eq!((m.reprovision, m.reports), (Some(2), 4));
    // A new one through `update` (a network-boot registration): refused, naming the limit.
    let err = clients[1]
        .update("m-new", &mut |_| {
            Some(Machine {
                id: "m-new".into(),
                ..Machine::default()
            })
        })
        .expect_err("full");
    assert_eq!(err.downcast_ref::<Full>(), Some(&Full { max: limit }));
    assert!(err.to_string().contains("--max-machines"), "{err}");
    assert!(clients[0].machine("m-new").unwrap().is_none());
}

/// 8 threads through two handles (two replicas' clients for etcd); every report is sent by
/// two of them (a retry racing its original), one at a time or in batches of 4, so reports
/// of one machine and copies of one report meet in the same batches: each is recorded once.
fn concurrent_reports_each_once(_: Backend, mut inv: Inv) {
    let clients = [inv.replica(0), inv.replica(1)];
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let s = clients[t % 2].clone();
            std::thread::spawn(move || {
                let mut new = 0;
                let reports: Vec<_> = (0..150)
                    .map(|k| {
                        // Thread t sends reports of pair t/2; both threads of a pair send
                        // each, in opposite orders.
                        let n = (t / 2) * 150 + if t % 2 == 0 { k } else { 149 - k };
                        let (m, b, st) =
                            (n % 20, n / 60, ["fetch", "disks", "files"][(n / 20) % 3]);
                        let r = report(
                            &format!("h-{n}"),
                            &format!("m-{m}"),
                            &format!("boot-{b}"),
                            st,
                            "ok",
                            st == "files",
                        );
                        (r, token("worker", n as u64))
                    })
                    .collect();
                let step = if t % 4 < 2 { 1 } else { 4 };
                for chunk in reports.chunks(step) {
                    let batch: Vec<_> = chunk.iter().map(|(r, o)| (r, o)).collect();
                    for got in s.record_all(&batch) {
                        if got.expect("recording") == Recorded::New {
                            new += 1;
                        }
                    }
                }
                new
            })
        })
        .collect();
    let new: usize = threads
        .into_iter()
        .map(|t| t.join().expect("a thread"))
        .sum();
    assert_eq!(new, 600, "each of the 600 reports recorded once");
    let all = clients[1].machines(&Filter::default()).expect("listing");
    assert_eq!(all.len(), 20);
    for m in &all {
        assert_eq!(m.reports, 30, "{}", m.id);
        let stages: usize = m.boots.iter().map(|b| b.stages.len()).sum();
        assert_eq!(stages, 30, "{}: every report has its entry", m.id);
        assert_eq!(m.state, Some(State::Provisioned), "{}", m.id);
    }
    assert_eq!(clients[0].machine_count().unwrap(), 20);
}

fn boot_token(now: u64) -> BootToken {
    BootToken {
        machine: "mac-52:54:00:12:34:01".into(),
        file: Some("node-1".into()),
        pool: "worker".into(),
        expires: now + 600,
        spent: None,
        reports_until: now + 600 + 86_400,
        kind: Default::default(),
        issued: now,
        uses: 1,
        used: 0,
    }
}

/// A one-time boot token (docs/serve.md, "One-time tokens") issued through one handle and
/// spent at once by eight threads through three (three replicas' clients, each starting on
/// a different member, for etcd): exactly one spends it, every other is refused as already
/// used; an expired one is refused, and an unknown one; a forgotten one is gone; the records
/// survive a restart. The clock is the real one (etcd keeps a record under a lease counted
/// from it).
/// A pool's rollout record: none at first, made once by whichever writer comes first, and
/// changed atomically by writers on every replica at once (each of 24 machines admitted
/// once, none lost: a compare-and-swap), the same after a restart; `f` returning None
/// leaves it.
fn rollout_records_change_atomically(_: Backend, mut inv: Inv) {
    let clients = [inv.replica(0), inv.replica(1), inv.replica(2)];
    assert_eq!(clients[0].rollout("worker").unwrap(), None);
    let fresh = Rollout {
        pool: "worker".into(),
        from: "aa".into(),
        to: "bb".into(),
        state: RolloutState::Rolling,
        stage: 0,
        started: 5,
        changed: 5,
        machines: Vec::new(),
        halt: None,
    };
    let barrier = Arc::new(Barrier::new(24));
    let hs: Vec<_> = (0..24)
        .map(|i| {
            let (c, b, fresh) = (clients[i % 3].clone(), barrier.clone(), fresh.clone());
            std::thread::spawn(move || {
                b.wait();
                c.update_rollout("worker", &mut |old| {
                    let mut r = old.unwrap_or_else(|| fresh.clone());
                    r.machines.push(RolloutMachine {
                        id: format!("m{i}"),
                        given: 6,
                        stage: 0,
                    });
                    Some(r)
                })
                .expect("update")
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let r = clients[1].rollout("worker").unwrap().unwrap();
    let mut ids: Vec<_> = r.machines.iter().map(|m| m.id.clone()).collect();
    ids.sort();
    let mut want: Vec<_> = (0..24).map(|i| format!("m{i}")).collect();
    want.sort();
    assert_eq!(ids, want, "each machine once, none lost");
    let kept = clients[2].update_rollout("worker", &mut |_| None).unwrap();
    assert_eq!(kept.as_ref(), Some(&r), "None leaves it");
    drop(clients);
    inv.restart();
    let halted = inv
        .store()
        .update_rollout("worker", &mut |old| {
            old.map(|mut r| {
                r.state = RolloutState::Halted;
                r
            })
        })
        .unwrap()
        .unwrap();
    assert_eq!(halted.machines, r.machines, "kept across a restart");
    assert_eq!(
        inv.replica(1).rollout("worker").unwrap().unwrap().state,
        RolloutState::Halted
    );
    assert_eq!(inv.store().rollout("other").unwrap(), None);
}

fn boot_token_is_spent_once(_: Backend, mut inv: Inv) {
    let now = now_secs();
    let t = boot_token(now);
    let clients = [inv.replica(0), inv.replica(1), inv.replica(2)];
    clients[0].put_boot_token("k1", &t, now).expect("put");
    assert_eq!(clients[2].boot_token("k1").unwrap().as_ref(), Some(&t));
    let barrier = Arc::new(Barrier::new(8));
    let spent: Vec<Spend> = (0..8)
        .map(|i| {
            let c = clients[i % 3].clone();
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                c.spend_boot_token("k1", now + 1).expect("spend")
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
    assert_eq!(
        ok[0],
        &Spend::Spent(BootToken {
            spent: Some(now + 1),
            used: 1,
            ..t.clone()
        })
    );
    assert!(
        spent
            .iter()
            .filter(|s| !matches!(s, Spend::Spent(_)))
            .all(|s| *s == Spend::Refused("token already used")),
        "{spent:?}"
    );
    assert_eq!(
        clients[1].spend_boot_token("k1", now + 2).unwrap(),
        Spend::Refused("token already used")
    );
    assert_eq!(
        clients[1].boot_token("k1").unwrap().unwrap().spent,
        Some(now + 1)
    );
    // Expired before use.
    let late = BootToken {
        expires: now,
        ..t.clone()
    };
    clients[1].put_boot_token("k2", &late, now).unwrap();
    assert_eq!(
        clients[0].spend_boot_token("k2", now).unwrap(),
        Spend::Refused("token expired")
    );
    assert_eq!(
        clients[0].spend_boot_token("nope", now).unwrap(),
        Spend::Refused("unknown token")
    );
    // A report credential is not a boot token: it cannot be spent.
    let cred = BootToken {
        kind: serve::fleet::inventory::TokenKind::Report,
        ..t.clone()
    };
    clients[0].put_boot_token("k3", &cred, now).unwrap();
    assert_eq!(
        clients[1].spend_boot_token("k3", now).unwrap(),
        Spend::Refused("unknown token")
    );
    assert_eq!(clients[2].boot_token("k3").unwrap(), Some(cred));
    // Forgotten: gone for every handle.
    clients[2].forget_boot_token("k2").unwrap();
    assert!(clients[0].boot_token("k2").unwrap().is_none());
    clients[2].forget_boot_token("never-put").unwrap();
    drop(clients);
    inv.restart();
    let s = inv.store();
    assert!(
        s.boot_token("k1")
            .unwrap()
            .is_some_and(|t| t.spent.is_some())
    );
    assert!(s.boot_token("k3").unwrap().is_some(), "durable");
}

/// A boot token of two uses (a boot profile's `tokenUses: 2`: a live boot, then the
/// installed system's first boot) spent at once by eight threads through three handles:
/// exactly two spend it, the others are refused as used; it stays refused after a restart.
fn a_token_of_two_uses_is_spent_twice(_: Backend, mut inv: Inv) {
    let now = now_secs();
    let t = BootToken {
        uses: 2,
        ..boot_token(now)
    };
    let clients = [inv.replica(0), inv.replica(1), inv.replica(2)];
    clients[0].put_boot_token("k2u", &t, now).expect("put");
    let barrier = Arc::new(Barrier::new(8));
    let spent: Vec<Spend> = (0..8)
        .map(|i| {
            let c = clients[i % 3].clone();
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                c.spend_boot_token("k2u", now + 1).expect("spend")
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let mut uses: Vec<u32> = spent
        .iter()
        .filter_map(|s| match s {
            Spend::Spent(t) => Some(t.used),
            _ => None,
        })
        .collect();
    uses.sort();
    assert_eq!(uses, [1, 2], "{spent:?}");
    assert_eq!(
        spent
            .iter()
            .filter(|s| **s == Spend::Refused("token already used"))
            .count(),
        6,
        "{spent:?}"
    );
    drop(clients);
    inv.restart();
    let s = inv.store();
    assert_eq!(s.boot_token("k2u").unwrap().unwrap().used, 2);
    assert_eq!(
        s.spend_boot_token("k2u", now + 2).unwrap(),
        Spend::Refused("token already used")
    );
}

/// A token record past its time ([`BootToken::forget_after`]) is forgotten: by the next put
/// (the embedded and in-memory stores look at most once a minute) or by its lease (etcd,
/// on the real clock: within seconds); a record within its time is kept.
fn token_records_past_their_time_are_forgotten(_: Backend, inv: Inv) {
    let s = inv.store();
    let now = now_secs();
    let short = BootToken {
        expires: now + 1,
        reports_until: now + 2,
        ..boot_token(now)
    };
    s.put_boot_token("short", &short, now).unwrap();
    s.put_boot_token("long", &boot_token(now), now).unwrap();
    assert!(s.boot_token("short").unwrap().is_some());
    // Later than a minute on (for the stores that look at the next put), the real clock
    // past the short one's time (for etcd's lease).
    while now_secs() <= short.forget_after() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let later = now + 61;
    s.put_boot_token("next", &boot_token(later), later).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.boot_token("short").unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "a token record past its time still kept after 20 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(s.boot_token("long").unwrap().is_some(), "within its time");
    assert!(s.boot_token("next").unwrap().is_some());
}

/// A stage that changed nothing and logged nothing reads back with empty details (the
/// embedded store keeps no details record for it: inventory_embedded.rs); one with details
/// reads back with them.
fn a_report_without_details_reads_back_empty_details(_: Backend, inv: Inv) {
    let s = inv.store();
    let mut quiet = report("q1", "m-q", "b", "fetch", "ok", false);
    quiet.changes = Default::default();
    quiet.log_tail.clear();
    let busy = report("q2", "m-q", "b", "files", "ok", true);
    for r in [&quiet, &busy] {
        assert_eq!(
            s.record(r, &token("worker", 1)).expect("recording"),
            Recorded::New
        );
    }
    let m = s.machine("m-q").expect("reading").expect("m-q");
    let stages = &m.boots[0].stages;
    assert_eq!(stages.len(), 2);
    assert_eq!(stages[0].detail.as_ref(), Some(&Default::default()));
    assert_eq!(
        stages[1].detail.as_ref().map(|d| &d.changes),
        Some(&busy.changes)
    );
    assert!(!busy.changes.paths.is_empty());
}

/// A store may keep the records it wrote decoded (`inventory::recent`): a change made
/// between two reports (`update`, as `agent machines reprovision` makes) is not lost by the
/// next report, and a record read back after a restart is the one written. A report's
/// details are stored as they were before (`detail_json` is `detail`'s JSON).
fn a_change_between_reports_is_kept(_: Backend, mut inv: Inv) {
    use serve::fleet::inventory::model::{detail, detail_json};
    let m = "m-recent";
    {
        let s = inv.store();
        let r = report("r1", m, "b1", "fetch", "ok", false);
        assert_eq!(s.record(&r, &token("worker", 1)).unwrap(), Recorded::New);
        s.update(m, &mut |x| {
            x.map(|x| Machine {
                reprovision: Some(5),
                ..x
            })
        })
        .unwrap();
        let r = report("r2", m, "b1", "disks", "failed", false);
        assert_eq!(s.record(&r, &token("worker", 2)).unwrap(), Recorded::New);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&detail_json(&r).unwrap()).unwrap(),
            serde_json::to_value(detail(&r)).unwrap()
        );
        assert_eq!(
            detail_json(&r).unwrap(),
            serde_json::to_vec(&detail(&r)).unwrap()
        );
        let got = s.machine(m).unwrap().unwrap();
        assert_eq!(got.reprovision, Some(5));
        assert_eq!(got.reports, 2);
        // A retry is known from the kept record.
        assert_eq!(
            s.record(&r, &token("worker", 3)).unwrap(),
            Recorded::Duplicate
        );
    }
    inv.restart();
    let s = inv.store();
    let got = s.machine(m).unwrap().unwrap();
    assert_eq!(
        (got.reprovision, got.reports, got.state),
        (Some(5), 2, Some(State::Failed))
    );
    assert_eq!(
        got.boots[0].stages[1]
            .detail
            .as_ref()
            .unwrap()
            .log_tail
            .len(),
        2
    );
}

/// `remove` (a decommissioned machine): the record and its details are gone, it no longer
/// counts against `--max-machines` (a new machine fits again), a second remove finds
/// nothing, and a later report of it makes a fresh record (not a retry of an old one).
/// Gone after a restart too.
fn a_removed_machine_is_forgotten(backend: Backend, _: Inv) {
    let Some(mut inv) = backend.open("removed_2", 2) else {
        return;
    };
    let s = inv.store();
    let o = token("worker", 1);
    for m in ["m-1", "m-2"] {
        for (r, stage, last) in [("f", "fetch", false), ("x", "files", true)] {
            let r = report(&format!("{m}-{r}"), m, "b1", stage, "ok", last);
            assert_eq!(s.record(&r, &o).unwrap(), Recorded::New);
        }
    }
    let full = report("m-3-f", "m-3", "b1", "fetch", "ok", false);
    assert_eq!(
        s.record(&full, &o).unwrap(),
        Recorded::Full(Full { max: 2 })
    );
    let gone = s.remove("m-1").unwrap().expect("m-1 was known");
    assert_eq!((gone.id.as_str(), gone.reports), ("m-1", 2));
    assert!(s.machine("m-1").unwrap().is_none());
    assert!(s.remove("m-1").unwrap().is_none());
    assert!(s.remove("m-never").unwrap().is_none());
    assert_eq!(s.machine_count().unwrap(), 1);
    let ids: Vec<String> = s
        .machines(&Filter::default())
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, ["m-2"]);
    assert_eq!(s.machine("m-2").unwrap().unwrap().reports, 2);
    // Room for one more: the new machine fits.
    assert_eq!(s.record(&full, &o).unwrap(), Recorded::New);
    assert_eq!(s.machine_count().unwrap(), 2);
    assert_eq!(s.remove("m-3").unwrap().map(|m| m.reports), Some(1));
    // The removed machine reports again (its old report id too): a fresh record.
    let again = report("m-1-x", "m-1", "b2", "files", "ok", true);
    assert_eq!(
        s.record(&again, &token("worker", 9)).unwrap(),
        Recorded::New
    );
    let m = s.machine("m-1").unwrap().unwrap();
    assert_eq!((m.reports, m.first_seen, m.boots.len()), (1, 9, 1));
    assert_eq!(m.boots[0].boot_id, "b2");
    assert_eq!(m.boots[0].stages.len(), 1);
    assert_eq!(
        m.boots[0].stages[0].detail.as_ref().map(|d| &d.changes),
        Some(&again.changes)
    );
    assert_eq!(s.remove("m-1").unwrap().map(|m| m.reports), Some(1));
    drop(s);
    inv.restart();
    let s = inv.store();
    assert!(s.machine("m-1").unwrap().is_none());
    assert_eq!(s.machine_count().unwrap(), 1);
}

/// The suite's own check: every case above is in `contract!` (a case written but not
/// listed would run against no store).
#[test]
fn every_case_runs_against_every_store() {
    let src = include_str!("inventory_contract.rs");
    let listed = src
        .split("contract!(")
        .nth(1)
        .and_then(|s| s.split(");").next())
        .expect("the contract! list");
    let listed: Vec<&str> = listed
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let cases: Vec<&str> = src
        .lines()
        .filter_map(|l| l.strip_prefix("fn "))
        .filter(|l| l.contains("Backend, ") && l.contains(": Inv)"))
        .filter_map(|l| l.split('(').next())
        .collect();
    assert_eq!(listed, cases);
}
