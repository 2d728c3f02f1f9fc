//! The inventory's report model and its embedded store (a real redb file): states, the boot
//! history bound, retried reports, filters, counts, the report limits, and a writer killed
//! with SIGKILL mid-loop that loses no acknowledged report.

mod inventory_support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inventory_support::{RecordsExt, report};
use runtime::util::TestDir;
use serve::inventory::{
    BootTokens, Embedded, Filter, Origin, Recorded, Records, Refused, State, limits, parse,
};

fn token(pool: &str, at: u64) -> Origin {
    Origin {
        token_pool: Some(pool.into()),
        received: at,
        machine_issued: None,
    }
}

fn open(dir: &TestDir) -> Embedded {
    Embedded::open(&dir.0.join("inventory.db")).expect("opening the store")
}

#[test]
fn inventory_embedded_states_follow_the_newest_boot() {
    let dir = TestDir::new("inv-states");
    let s = open(&dir);
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

#[test]
fn inventory_embedded_pool_comes_from_the_token() {
    let dir = TestDir::new("inv-auth");
    let s = open(&dir);
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

#[test]
fn inventory_embedded_keeps_the_last_ten_boots() {
    let dir = TestDir::new("inv-history");
    let s = open(&dir);
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

#[test]
fn inventory_embedded_a_retried_report_is_stored_once() {
    let dir = TestDir::new("inv-idem");
    let s = open(&dir);
    let r = report("same-id", "m-i", "b", "disks", "ok", false);
    assert_eq!(
        s.record(&r, &token("worker", 1)).expect("recording"),
        Recorded::New
    );
    assert_eq!(
        s.record(&r, &token("worker", 2)).expect("recording"),
        Recorded::Duplicate
    );
    drop(s);
    // Still known after the store is reopened.
    let s = open(&dir);
    assert_eq!(
        s.record(&r, &token("worker", 3)).expect("recording"),
        Recorded::Duplicate
    );
    let m = s.machine("m-i").expect("reading").expect("m-i");
    assert_eq!(m.reports, 1);
    assert_eq!(m.last_seen, 1, "a duplicate does not touch the record");
}

#[test]
fn inventory_embedded_filters_and_counts() {
    let dir = TestDir::new("inv-filter");
    let s = open(&dir);
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
            state: None
        }),
        ["m-a", "m-b", "m-e"]
    );
    assert_eq!(
        ids(Filter {
            pool: worker,
            state: Some(State::Provisioned)
        }),
        ["m-a", "m-e"]
    );
    assert_eq!(
        ids(Filter {
            pool: None,
            state: Some(State::Fetching)
        }),
        ["m-d"]
    );
    assert!(
        ids(Filter {
            pool: Some("none".into()),
            state: None
        })
        .is_empty()
    );
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
}

/// A valid body to break one field of at a time.
fn body() -> serde_json::Value {
    let r = report("lim", "m-l", "b", "disks", "failed", false);
    serde_json::to_value(&r).expect("a report as JSON")
}

#[test]
fn inventory_report_limits_are_named() {
    type Edit = fn(&mut serde_json::Value);
    let cases: &[(&str, Edit, &str)] = &[
        ("format", |v| v["format"] = 2.into(), "format 2"),
        ("empty id", |v| v["id"] = "".into(), "id must have 1 to 128"),
        (
            "id with /",
            |v| v["machine"]["id"] = "a/b".into(),
            "machine.id may hold only",
        ),
        (
            "paths",
            |v| v["changes"]["paths"] = vec!["/p"; 1001].into(),
            "the path limit of 1000",
        ),
        (
            "path",
            |v| v["changes"]["paths"] = vec!["p".repeat(4097)].into(),
            "the path length limit of 4096",
        ),
        (
            "log lines",
            |v| v["log_tail"] = vec!["l"; 51].into(),
            "the log line limit of 50",
        ),
        (
            "log line",
            |v| v["log_tail"] = vec!["l".repeat(1025)].into(),
            "the log line length limit of 1024",
        ),
        (
            "macs",
            |v| v["machine"]["macs"] = vec!["52:54:00:00:00:00"; 65].into(),
            "the MAC limit of 64",
        ),
        (
            "hostname",
            |v| v["machine"]["hostname"] = "h".repeat(257).into(),
            "the string limit of 256",
        ),
        (
            "error",
            |v| v["error"] = "e".repeat(4097).into(),
            "the error limit of 4096",
        ),
        (
            "devices",
            |v| v["changes"]["partitions"]["created"] = vec!["/dev/x"; 129].into(),
            "the device limit of 128",
        ),
        (
            "started",
            |v| v["outcome"] = "started".into(),
            "only for the fetch stage",
        ),
        ("stage", |v| v["stage"] = "kargs".into(), "unknown variant"),
    ];
    for (name, edit, want) in cases {
        let mut v = body();
        edit(&mut v);
        let err = parse(&serde_json::to_vec(&v).expect("JSON")).expect_err(name);
        assert!(matches!(err, Refused::Invalid(_)), "{name}: {err:?}");
        assert!(err.to_string().contains(want), "{name}: {err}");
    }
    // The body limit: 413.
    let mut v = body();
    v["padding"] = "x".repeat(limits::BODY_BYTES).into();
    let err = parse(&serde_json::to_vec(&v).expect("JSON")).expect_err("too large");
    assert!(matches!(err, Refused::TooLarge(_)), "{err:?}");
    assert!(err.to_string().contains("--max-body-bytes"), "{err}");
    // Undocumented fields are dropped, never stored.
    let mut v = body();
    v["contents"] = "c2VjcmV0".into();
    v["machine"]["token"] = "s3cret".into();
    let r = parse(&serde_json::to_vec(&v).expect("JSON")).expect("valid");
    let stored = serde_json::to_string(&r).expect("JSON");
    assert!(
        !stored.contains("c2VjcmV0") && !stored.contains("s3cret"),
        "{stored}"
    );
    // At the limits: accepted.
    let mut v = body();
    v["changes"]["paths"] = vec!["p".repeat(100); limits::PATHS].into();
    v["error"] = "e".repeat(limits::ERROR_BYTES).into();
    v["log_tail"] = vec!["l".repeat(limits::LOG_LINE_BYTES); limits::LOG_LINES].into();
    v["machine"]["macs"] = vec!["52:54:00:00:00:00"; limits::MACS].into();
    let bytes = serde_json::to_vec(&v).expect("JSON");
    assert!(bytes.len() > limits::BODY_BYTES / 2);
    parse(&bytes).expect("a report at the limits");
}

/// `--max-machines`: at the limit a new machine's report (alone or in a batch) and its
/// registration (`update`) are refused, naming the limit; a known machine's still go
/// through; the count survives a restart, a larger limit makes room, and a file written
/// before the count was kept is counted when opened.
#[test]
fn inventory_embedded_max_machines() {
    use serve::inventory::{Full, Machine};
    let dir = TestDir::new("inv-max");
    let path = dir.0.join("inventory.db");
    let full = Recorded::Full(Full { max: 3 });
    {
        let s = Embedded::open_with(&path, 3).expect("opening the store");
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
        let m = s
            .update("m-2", &mut |m| {
                m.map(|m| Machine {
                    reprovision: Some(7),
                    ..m
                })
            })
            .unwrap();
        assert_eq!(m.unwrap().reprovision, Some(7));
        assert_eq!(s.machine_count().unwrap(), 3);
        // A page of the listing: after an id, by id, as many as asked for.
        let mut page = Vec::new();
        s.each_machine(&Filter::default(), Some("m-0"), &mut |m| {
            page.push(m.id);
            page.is_empty()
        })
        .unwrap();
        assert_eq!(page, ["m-1"]);
    }
    // Restarted: the count is the same; with a limit of 4 one more machine fits.
    {
        let s = Embedded::open_with(&path, 3).expect("opening the store again");
        assert_eq!(s.machine_count().unwrap(), 3);
        let r = report("r-3", "m-3", "b", "fetch", "ok", false);
        assert_eq!(s.record(&r, &Origin::default()).unwrap(), full);
    }
    {
        let s = Embedded::open_with(&path, 4).expect("opening the store again");
        let r = report("r-3", "m-3", "b", "fetch", "ok", false);
        assert_eq!(s.record(&r, &Origin::default()).unwrap(), Recorded::New);
        let u = s.update("m-6", &mut |_| {
            Some(Machine {
                id: "m-6".into(),
                ..Machine::default()
            })
        });
        assert!(u.is_err());
        assert_eq!(s.machine_count().unwrap(), 4);
    }
    // A file written before the count was kept (its machines table only): counted on open.
    let old = dir.0.join("old.db");
    {
        let db = redb::Database::create(&old).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("machines");
            let mut t = tx.open_table(def).unwrap();
            for id in ["old-1", "old-2"] {
                let m = Machine {
                    id: id.into(),
                    ..Machine::default()
                };
                t.insert(id, serde_json::to_vec(&m).unwrap().as_slice())
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let s = Embedded::open_with(&old, 3).expect("opening an old file");
    assert_eq!(s.machine_count().unwrap(), 2);
    assert_eq!(s.machines(&Filter::default()).unwrap().len(), 2);
    let r = report("r-n", "new-1", "b", "fetch", "ok", false);
    assert_eq!(s.record(&r, &Origin::default()).unwrap(), Recorded::New);
    let r = report("r-m", "new-2", "b", "fetch", "ok", false);
    assert_eq!(s.record(&r, &Origin::default()).unwrap(), full);
}

const CRASH_ENV: &str = "INVENTORY_CRASH_CHILD_DIR";

/// The writer of `inventory_embedded_survives_sigkill_mid_write`: run as a child process of
/// the test binary, it records reports in a loop and appends each acknowledged report's id
/// to `acked` (after `record` returned Ok), until it is killed.
#[test]
fn inventory_embedded_crash_child() {
    let Some(dir) = std::env::var_os(CRASH_ENV) else {
        return; // only as the child of the crash test
    };
    let dir = Path::new(&dir);
    let s = Embedded::open(&dir.join("inventory.db")).expect("opening the store");
    let mut acked = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("acked"))
        .expect("opening acked");
    for n in 0u64.. {
        // Machines in turn, so records both grow and are created.
        let m = format!("m-{}", n % 50);
        let id = format!("crash-{n}");
        let stage = ["fetch", "disks", "files"][(n % 3) as usize];
        let r = report(
            &id,
            &m,
            &format!("boot-{}", n / 150),
            stage,
            "ok",
            stage == "files",
        );
        s.record(&r, &token("worker", n)).expect("recording");
        acked
            .write_all(format!("{m} {id}\n").as_bytes())
            .expect("writing acked");
    }
}

#[test]
fn inventory_embedded_survives_sigkill_mid_write() {
    let dir = TestDir::new("inv-crash");
    let acked = dir.0.join("acked");
    let lines = || std::fs::read_to_string(&acked).unwrap_or_default();
    // Three rounds: each kills the writer at a different point of its loop.
    for (round, wait_for) in [150usize, 400, 700].into_iter().enumerate() {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "inventory_embedded_crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_ENV, &dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the writer");
        let deadline = Instant::now() + Duration::from_secs(120);
        while lines().lines().count() < wait_for {
            if let Some(st) = child.try_wait().expect("waiting") {
                panic!("round {round}: the writer ended on its own: {st}");
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: the writer made no progress"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().expect("SIGKILL to the writer");
        let st = child.wait().expect("waiting for the writer");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&st),
            Some(9),
            "round {round}: killed by SIGKILL"
        );
        // Every acknowledged report is in the reopened store.
        let s = open(&dir);
        let text = lines();
        let mut n = 0;
        for line in text.lines() {
            let (m, id) = line.split_once(' ').expect("a line of acked");
            let rec = s
                .machine(m)
                .expect("reading")
                .unwrap_or_else(|| panic!("{m} lost"));
            let stored = rec
                .boots
                .iter()
                .flat_map(|b| &b.stages)
                .any(|s| s.report_id == id);
            assert!(
                stored,
                "round {round}: acknowledged report {id} of {m} lost"
            );
            n += 1;
        }
        assert!(n >= wait_for);
        // The next round's writer numbers its reports afresh: start from a new file (its
        // marker removed with it: a new inventory, not a lost one).
        std::fs::remove_file(&acked).expect("removing acked");
        drop(s);
        std::fs::remove_file(dir.0.join("inventory.db")).expect("removing the store");
        std::fs::remove_file(dir.0.join("inventory.id")).expect("removing its marker");
    }
}

#[test]
fn inventory_embedded_concurrent_reports_each_once() {
    // 8 threads; every report is sent by two of them (a retry racing its original), so
    // reports of one machine and copies of one report meet in the same commit batches.
    let dir = TestDir::new("inv-herd");
    let s = std::sync::Arc::new(open(&dir));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut new = 0;
                for k in 0..150 {
                    // Thread t sends reports of pair t/2; both threads of a pair send each.
                    let n = (t / 2) * 150 + if t % 2 == 0 { k } else { 149 - k };
                    let (m, b, st) = (n % 20, n / 60, ["fetch", "disks", "files"][(n / 20) % 3]);
                    let r = report(
                        &format!("h-{n}"),
                        &format!("m-{m}"),
                        &format!("boot-{b}"),
                        st,
                        "ok",
                        st == "files",
                    );
                    if s.record(&r, &token("worker", n as u64)).expect("recording") == Recorded::New
                    {
                        new += 1;
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
    let all = s.machines(&Filter::default()).expect("listing");
    assert_eq!(all.len(), 20);
    for m in &all {
        assert_eq!(m.reports, 30, "{}", m.id);
        let stages: usize = m.boots.iter().map(|b| b.stages.len()).sum();
        assert_eq!(stages, 30, "{}: every report has its entry", m.id);
        assert_eq!(m.state, Some(State::Provisioned), "{}", m.id);
    }
}

#[test]
fn inventory_open_by_flag() {
    use serve::inventory::{StoreKind, open as open_store};
    assert_eq!("embedded".parse(), Ok(StoreKind::Embedded));
    assert_eq!("etcd".parse(), Ok(StoreKind::Etcd));
    assert!("sqlite".parse::<StoreKind>().is_err());
    let dir = TestDir::new("inv-open");
    let state = dir.0.join("state");
    let s = open_store(StoreKind::Embedded, Some(&state), &[], 10).expect("the embedded store");
    s.record(
        &report("o1", "m-o", "b", "fetch", "ok", false),
        &token("worker", 1),
    )
    .expect("recording");
    assert!(state.join("inventory.db").is_file());
    // One process, one owner: a second open of the same file is refused while it is open.
    let err = open_store(StoreKind::Embedded, Some(&state), &[], 10)
        .err()
        .expect("the file is in use");
    assert!(format!("{err:#}").contains("inventory.db"), "{err:#}");
    drop(s);
    let err = open_store(StoreKind::Embedded, None, &[], 10)
        .err()
        .expect("no state dir");
    assert!(err.to_string().contains("--state-dir"), "{err}");
    let err = open_store(StoreKind::Etcd, None, &[], 10)
        .err()
        .expect("no endpoints");
    assert!(err.to_string().contains("--etcd-endpoints"), "{err}");
}

/// A one-time boot token spent by eight threads at once: one redb write transaction wins,
/// the others find it spent; an expired one is refused; records past their time are
/// forgotten when the next token is put; it survives a reopen.
#[test]
fn inventory_embedded_boot_token_is_spent_once() {
    use serve::inventory::{BootToken, Spend};
    let dir = TestDir::new("inv-boot-token");
    let s = std::sync::Arc::new(open(&dir));
    let t = BootToken {
        machine: "mac-52:54:00:12:34:01".into(),
        file: Some("node-1".into()),
        pool: "worker".into(),
        expires: 1_000,
        spent: None,
        reports_until: 2_000,
        kind: Default::default(),
        issued: 900,
    };
    s.put_boot_token("k1", &t, 900).unwrap();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let spent: Vec<Spend> = (0..8)
        .map(|_| {
            let s = s.clone();
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                s.spend_boot_token("k1", 950).unwrap()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(
        spent
            .iter()
            .filter(|x| matches!(x, Spend::Spent(_)))
            .count(),
        1,
        "{spent:?}"
    );
    assert_eq!(s.boot_token("k1").unwrap().unwrap().spent, Some(950));
    s.put_boot_token("k2", &t, 950).unwrap();
    assert_eq!(
        s.spend_boot_token("k2", 1_000).unwrap(),
        Spend::Refused("token expired")
    );
    // Past reports_until: forgotten when the next token is put.
    s.put_boot_token("k3", &t, 2_001).unwrap();
    assert!(s.boot_token("k1").unwrap().is_none());
    assert!(s.boot_token("k3").unwrap().is_some());
    drop(s);
    let s = open(&dir);
    assert!(s.boot_token("k3").unwrap().is_some(), "durable");
}

/// A stage that changed nothing and logged nothing gets no details record (one redb key fewer
/// per such report, most fetch and disks stages); the machine still shows its details, empty.
#[test]
fn inventory_embedded_writes_no_details_record_for_a_report_without_details() {
    use redb::{ReadableDatabase, ReadableTable, TableDefinition};
    let dir = TestDir::new("inv-nodetail");
    let s = open(&dir);
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
    drop(s);
    {
        let db = redb::Database::open(dir.0.join("inventory.db")).expect("opening the file");
        let tx = db.begin_read().expect("reading");
        let details = tx
            .open_table(TableDefinition::<&str, &[u8]>::new("details"))
            .expect("the details table");
        let keys: Vec<String> = details
            .iter()
            .expect("listing")
            .map(|e| e.expect("an entry").0.value().to_string())
            .collect();
        assert_eq!(
            keys,
            ["m-q/q2"],
            "only the report with details has a record"
        );
    }
    let s = open(&dir);
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

/// The writer keeps the records it wrote decoded (`inventory::recent`): a change made
/// between two reports (`update`, as `agent machines reprovision` makes) is not lost by the
/// next report, and a record read back after a restart is the one written. A report's
/// details are stored as they were before (`detail_json` is `detail`'s JSON).
#[test]
fn inventory_embedded_a_change_between_reports_is_kept() {
    use serve::inventory::Machine;
    use serve::inventory::model::{detail, detail_json};
    let dir = TestDir::new("inv-recent");
    let m = "m-recent";
    {
        let s = open(&dir);
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
    let s = open(&dir);
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

/// A store file that is missing or empty (0 bytes) where its marker (`inventory.id`) says an
/// inventory was is refused, naming the marker and `--inventory-reset`, and not made into a
/// new, empty inventory (the file stays as it was found); so is a file holding another
/// inventory. `--inventory-reset` begins a new one (or takes the other), after which the store
/// opens as ever; a new directory (no marker, no file) gets a new inventory, and a marker
/// that is not one is refused, naming it.
#[test]
fn inventory_embedded_a_lost_file_is_not_a_new_inventory() {
    use serve::inventory::Embedded as E;
    let dir = TestDir::new("inv-lost");
    let path = dir.0.join("inventory.db");
    let marker = dir.0.join("inventory.id");
    let o = Origin::default();
    {
        let s = E::open(&path).expect("a new inventory in a new directory");
        for m in ["m-1", "m-2"] {
            let r = report(&format!("r-{m}"), m, "b", "files", "ok", true);
            assert_eq!(s.record(&r, &o).unwrap(), Recorded::New);
        }
    }
    assert!(marker.is_file(), "the marker is written beside the file");
    let reopened = E::open(&path).expect("the same inventory again");
    assert_eq!(reopened.machine_count().unwrap(), 2);
    drop(reopened);

    let refused = |want: &str| {
        let e = E::open(&path).err().expect("refused");
        let e = format!("{e:#}");
        for w in [
            want,
            "inventory.id",
            "--inventory-reset",
            "every machine it knew would install again",
        ] {
            assert!(e.contains(w), "{w:?} in {e}");
        }
    };
    // Truncated to 0 bytes: refused, and still 0 bytes (no empty inventory written into it).
    let saved = std::fs::read(&path).unwrap();
    std::fs::File::create(&path).unwrap();
    refused("inventory.db is empty (0 bytes)");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    // Deleted: refused, and not created.
    std::fs::remove_file(&path).unwrap();
    refused("inventory.db is missing");
    assert!(!path.exists());
    // Put back: the inventory is there again.
    std::fs::write(&path, &saved).unwrap();
    assert_eq!(E::open(&path).unwrap().machine_count().unwrap(), 2);

    // Another inventory's file in its place: refused, naming both ids.
    let other_dir = TestDir::new("inv-lost-other");
    let other = other_dir.0.join("inventory.db");
    drop(E::open(&other).unwrap());
    std::fs::copy(&other, &path).unwrap();
    let e = format!("{:#}", E::open(&path).err().expect("another inventory"));
    assert!(
        e.contains("the file was replaced by another inventory's") && e.contains(RESET),
        "{e}"
    );
    // --inventory-reset takes it; then it opens as ever.
    drop(E::open_checked(&path, 10, true).expect("taken with the reset"));
    assert_eq!(E::open(&path).unwrap().machine_count().unwrap(), 0);

    // --inventory-reset on an emptied file: a new, empty inventory; then it opens as ever.
    std::fs::write(&path, &saved).unwrap();
    std::fs::File::create(&path).unwrap();
    let s = E::open_checked(&path, 10, true).expect("a new inventory with the reset");
    assert_eq!(s.machine_count().unwrap(), 0);
    let r = report("r-3", "m-3", "b", "fetch", "ok", false);
    assert_eq!(s.record(&r, &o).unwrap(), Recorded::New);
    drop(s);
    assert_eq!(E::open(&path).unwrap().machine_count().unwrap(), 1);

    // A marker that is not one: refused, naming it (deleting it takes the file as it is).
    std::fs::write(&marker, "not json").unwrap();
    let e = format!("{:#}", E::open(&path).err().expect("a bad marker"));
    assert!(
        e.contains("inventory.id is not an inventory marker") && e.contains(RESET),
        "{e}"
    );
    std::fs::remove_file(&marker).unwrap();
    assert_eq!(E::open(&path).unwrap().machine_count().unwrap(), 1);
    assert!(marker.is_file(), "written again");
}

const RESET: &str = "--inventory-reset";
