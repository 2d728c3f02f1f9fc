//! The etcd inventory store against a real 3-member etcd cluster on 127.0.0.1 (Debian's
//! `etcd-server`, installed by `.ci/install-packages all`): three clients, each starting on a
//! different member, record a herd of reports (each sent twice) while one member is killed
//! with SIGKILL; no report is lost or stored twice, and every client sees the same inventory.

mod inventory_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inventory_support::etcd::{Cluster, etcd_binary, free_port};
use inventory_support::{RecordsExt, report};
use serve::inventory::{
    BootTokens, Etcd, EtcdOptions, Filter, Machine, Origin, Recorded, Records, State,
};

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
                // Half the threads record one report at a time, half in batches of 4
                // (`record_all`: one read and one transaction for reports of distinct
                // machines, one by one after a conflict).
                let step = if t % 2 == 0 { 1 } else { 4 };
                loop {
                    let i = next.fetch_add(step, Ordering::Relaxed);
                    if i >= work.len() {
                        return;
                    }
                    let items: Vec<_> = (i..(i + step).min(work.len()))
                        .map(|k| {
                            (
                                &work[order[k]],
                                Origin {
                                    token_pool: Some("worker".into()),
                                    received: k as u64,
                                    machine_issued: None,
                                },
                            )
                        })
                        .collect();
                    let client = &clients[items[0].0.1];
                    let got = if step == 1 {
                        vec![client.record(&items[0].0.0, &items[0].1)]
                    } else {
                        let batch: Vec<_> = items.iter().map(|((r, _), o)| (r, o)).collect();
                        client.record_all(&batch)
                    };
                    assert_eq!(got.len(), items.len(), "one result per report");
                    let mut res = results.lock().expect("results");
                    for (((r, _), _), got) in items.iter().zip(got) {
                        res.push((t, r.id.clone(), got.map_err(|e| format!("{e:#}"))));
                    }
                    drop(res);
                    done.fetch_add(items.len(), Ordering::Relaxed);
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
    // The machine count (`--max-machines`) is exact after the herd and the kill.
    for c in &clients {
        assert_eq!(c.machine_count().expect("the count"), MACHINES as u64);
    }
}

/// `--max-machines` across replicas: two replicas (clients starting on different members)
/// race 60 new machines at a limit of 20, in batches and one by one: exactly 20 are
/// recorded, every other is refused as full (never an error), a known machine's next
/// report and record change still go through, a registration of a new one is refused, and
/// an inventory written without the count (its keys deleted) is counted again.
#[test]
fn inventory_etcd_max_machines_is_exact_across_replicas() {
    use serve::inventory::Full;
    let Some(etcd) = etcd_binary() else { return };
    let cluster = Cluster::start(&etcd);
    const MAX: u64 = 20;
    let prefix = format!("/test-{}/capped/", std::process::id());
    let clients: Vec<Arc<Etcd>> = (0..2)
        .map(|i| {
            let mut opts = EtcdOptions::new(cluster.clients.clone());
            opts.prefix = prefix.clone();
            opts.max_machines = MAX;
            Arc::new(Etcd::with_first(opts, i).expect("a client"))
        })
        .collect();
    let barrier = Arc::new(std::sync::Barrier::new(8));
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
    assert_eq!(new.len(), MAX as usize, "{results:?}");
    assert!(
        results
            .iter()
            .all(|(_, r)| matches!(r, Recorded::New | Recorded::Full(Full { max: MAX }))),
        "{results:?}"
    );
    for c in &clients {
        assert_eq!(c.machine_count().unwrap(), MAX);
        assert_eq!(c.machines(&Filter::default()).unwrap().len(), MAX as usize);
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
    // A known machine: its next report and a change of its record still go through.
    let known = new[0].clone();
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
    // Client 1 wrote the record last and keeps it (`inventory::recent`); client 0 changed
    // it since: client 1's next reports (alone and in a batch) are not written over the
    // change.
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
        report("r-other", new[1], "b2", "fetch", "ok", false),
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
    assert_eq!(err.downcast_ref::<Full>(), Some(&Full { max: MAX }));
    assert!(err.to_string().contains("--max-machines"), "{err}");
    assert!(clients[0].machine("m-new").unwrap().is_none());

    // The count's keys gone (an inventory written before it was kept): counted again from
    // the records, once.
    let count = format!("{prefix}count/");
    let mut end = count.clone().into_bytes();
    *end.last_mut().unwrap() += 1;
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let b64 = |b: &[u8]| spec::encoding::data_url::base64_encode(b);
    agent
        .post(format!("{}/v3/kv/deleterange", cluster.clients[0]))
        .send(
            serde_json::to_vec(
                &serde_json::json!({"key": b64(count.as_bytes()), "range_end": b64(&end)}),
            )
            .unwrap()
            .as_slice(),
        )
        .expect("deleting the count");
    let fresh = {
        let mut opts = EtcdOptions::new(cluster.clients.clone());
        opts.prefix = prefix.clone();
        opts.max_machines = MAX + 1;
        Etcd::new(opts).unwrap()
    };
    assert_eq!(fresh.machine_count().unwrap(), MAX);
    let r = report("r-last", "m-last", "b", "fetch", "ok", false);
    assert_eq!(fresh.record(&r, &Origin::default()).unwrap(), Recorded::New);
    let r = report("r-over", "m-over", "b", "fetch", "ok", false);
    assert_eq!(
        fresh.record(&r, &Origin::default()).unwrap(),
        Recorded::Full(Full { max: MAX + 1 })
    );
    assert_eq!(clients[0].machine_count().unwrap(), MAX + 1);
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
        kind: Default::default(),
        issued: now,
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
