//! The inventory's report limits, and what only the embedded store does (a real redb file):
//! a writer killed with SIGKILL mid-loop loses no acknowledged report, the count kept in the
//! file, no details record for a report without details, the marker that refuses a lost
//! file, and opening by flag. What every store does is in inventory_contract.rs; recovering
//! from a full disk is in tests/serve/fleet.rs.

mod inventory_support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inventory_support::{RecordsExt, report};
use runtime::util::TestDir;
use serve::fleet::inventory::{
    Embedded, Filter, Origin, Recorded, Records, Refused, limits, parse,
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
            |v| v["logTail"] = vec!["l"; 51].into(),
            "the log line limit of 50",
        ),
        (
            "log line",
            |v| v["logTail"] = vec!["l".repeat(1025)].into(),
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
    v["logTail"] = vec!["l".repeat(limits::LOG_LINE_BYTES); limits::LOG_LINES].into();
    v["machine"]["macs"] = vec!["52:54:00:00:00:00"; limits::MACS].into();
    let bytes = serde_json::to_vec(&v).expect("JSON");
    assert!(bytes.len() > limits::BODY_BYTES / 2);
    parse(&bytes).expect("a report at the limits");
}

/// `--max-machines` in the embedded file (what every store does at the limit is in
/// inventory_contract.rs): the count survives a restart, a larger limit makes room, and a
/// file written before the count was kept is counted when opened.
#[test]
fn inventory_embedded_max_machines() {
    use serve::fleet::inventory::{Full, Machine};
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
fn inventory_open_by_flag() {
    use serve::fleet::inventory::{StoreKind, open as open_store};
    assert_eq!("embedded".parse(), Ok(StoreKind::Embedded));
    assert_eq!("etcd".parse(), Ok(StoreKind::Etcd));
    assert_eq!("memory".parse(), Ok(StoreKind::Memory));
    let err = "sqlite".parse::<StoreKind>().expect_err("unknown");
    assert!(err.contains("embedded, etcd, memory"), "{err}");
    // In memory: no state directory needed, and nothing kept from one open to the next.
    let m = open_store(StoreKind::Memory, None, &[], 10).expect("the in-memory store");
    m.record(
        &report("o0", "m-o", "b", "fetch", "ok", false),
        &token("worker", 1),
    )
    .expect("recording");
    assert_eq!(m.machine_count().unwrap(), 1);
    let again = open_store(StoreKind::Memory, None, &[], 10).expect("the in-memory store");
    assert_eq!(again.machine_count().unwrap(), 0);
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

/// A store file that is missing or empty (0 bytes) where its marker (`inventory.id`) says an
/// inventory was is refused, naming the marker and `--inventory-reset`, and not made into a
/// new, empty inventory (the file stays as it was found); so is a file holding another
/// inventory. `--inventory-reset` begins a new one (or takes the other), after which the store
/// opens as ever; a new directory (no marker, no file) gets a new inventory, and a marker
/// that is not one is refused, naming it.
#[test]
fn inventory_embedded_a_lost_file_is_not_a_new_inventory() {
    use serve::fleet::inventory::Embedded as E;
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
