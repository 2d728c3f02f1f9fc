//! What only the etcd inventory store does, against a real 3-member etcd cluster on
//! 127.0.0.1 (Debian's `etcd-server`, installed by `.ci/install-packages all`): three
//! clients, each starting on a different member, record a herd of reports (each sent twice)
//! while one member is killed with SIGKILL; no report is lost or stored twice, and every
//! client sees the same inventory. A cluster that does not answer, and the machine count's
//! keys. What every store does is in inventory_contract.rs.

mod inventory_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inventory_support::etcd::{Cluster, etcd_binary, free_port};
use inventory_support::{RecordsExt, report};
use serve::fleet::inventory::{
    Etcd, EtcdOptions, Filter, Origin, Recorded, Records, Report, State,
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

    let work = herd();
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

    assert_each_report_once(&clients);
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

/// Every report of the herd twice, each copy for a different client (a retry through
/// another replica): (the report, the client's number).
fn herd() -> Vec<(Report, usize)> {
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
    work
}

/// Every client sees the same inventory, and every report is in it exactly once.
fn assert_each_report_once(clients: &[Arc<Etcd>]) {
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
}

/// The machine count (`--max-machines`) of an inventory written before it was kept (its
/// keys deleted): counted again from the records, once, and exact from there on. (What
/// every store does at the limit, across replicas too, is in inventory_contract.rs.)
#[test]
fn inventory_etcd_an_inventory_without_its_count_is_counted_again() {
    use serve::fleet::inventory::Full;
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
    let reports: Vec<_> = (0..MAX)
        .map(|m| {
            report(
                &format!("r-{m}"),
                &format!("m-{m}"),
                "b",
                "fetch",
                "ok",
                false,
            )
        })
        .collect();
    let o = Origin::default();
    let batch: Vec<_> = reports.iter().map(|r| (r, &o)).collect();
    for got in clients[0].record_all(&batch) {
        assert_eq!(got.expect("recording"), Recorded::New);
    }
    assert_eq!(clients[1].machine_count().unwrap(), MAX);

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
