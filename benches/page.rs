//! Benchmark: the fleet page (`/ui/`), rendered in-process as the admin listener renders it
//! (one pass over the records: the summary, one page of the table, the templates): its
//! weight and the server CPU per answer, for 500 machines (8 failed in 3 ways) and for
//! 100,000 (the first page, a page deep in the list, a search), with the records the pass
//! holds at most. Prints figures, asserts only the page weight for 500 machines (150 KB).
//! Run with `cargo bench --bench page`.

use std::hint::black_box;
use std::time::Instant;

use serve::admin::page::summary::{Query, ROWS, Scan};
use serve::admin::page::{Index, MachineView, PoolView};
use serve::fleet::inventory::model::{Boot, StageRecord, Trust};
use serve::fleet::inventory::{Machine, State};

fn stage(
    s: report_format::Stage,
    o: report_format::Outcome,
    ms: u64,
    e: Option<String>,
) -> StageRecord {
    serde_json::from_value(serde_json::json!({
        "stage": s, "outcome": o, "final": false, "duration_ms": ms, "report_id": format!("r{ms}"),
        "received": 0, "authenticated": false, "trust": Trust::None, "error": e,
    }))
    .unwrap()
}

fn fleet(n: usize) -> Vec<Machine> {
    use report_format::{Outcome, Stage};
    (0..n)
        .map(|i| {
            let id = format!("4c4c4544-0000-0000-0000-{i:012}");
            let mut m = Machine::new(&id, 1_800_000_000 + i as u64);
            m.identity.hostname = Some(format!("node-{i}.rack{}.example", i % 40));
            m.identity.serial = Some(format!("SN{i:08}"));
            m.identity.macs = vec![format!(
                "52:54:00:{:02x}:{:02x}:{:02x}",
                i >> 16 & 255,
                i >> 8 & 255,
                i & 255
            )];
            m.pool = Some(if i % 3 == 0 { "infra" } else { "worker" }.into());
            let ms = 1000 + (i as u64 * 37) % 800;
            let failed = i % 62 == 7;
            let mut stages = vec![stage(Stage::Fetch, Outcome::Ok, ms / 3, None)];
            if failed {
                let e = match i % 3 {
                    0 => format!(
                        "partition 2 does not fit on /dev/sda: needs {} sectors",
                        200_000_000 + i
                    ),
                    1 => "writing /etc/app.conf failed: permission denied".into(),
                    _ => "GET http://10.0.0.9:8080/config: timed out".into(),
                };
                stages.push(stage(Stage::Disks, Outcome::Failed, ms, Some(e)));
                m.state = Some(State::Failed);
            } else {
                stages.push(stage(Stage::Disks, Outcome::Ok, ms, None));
                stages.push(stage(Stage::Files, Outcome::Ok, ms / 5, None));
                m.state = Some(State::Provisioned);
            }
            m.boots = vec![Boot {
                boot_id: format!("b{i}"),
                first_seen: 0,
                last_seen: 0,
                stages,
                ..Boot::default()
            }];
            m
        })
        .collect()
}

/// One answer: (bytes, the pass's and the templates' time).
fn render(records: &[Machine], q: &Query, pools: &[PoolView]) -> (String, f64, f64) {
    let t = Instant::now();
    let mut scan = Scan::new(q, pools, ROWS);
    // The store hands the pass owned records, as it reads them.
    for m in records {
        scan.add(m.clone());
    }
    let (summary, window) = scan.finish();
    let pass = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let rows: Vec<MachineView> = window.machines.iter().map(serve::admin::view).collect();
    let page = serve::admin::page::index(&Index {
        pools,
        rejected: None,
        halts: &[],
        summary: &summary,
        window: &window,
        rows: &rows,
        query: q,
        now: "now",
    });
    (black_box(page), pass, t.elapsed().as_secs_f64() * 1000.0)
}

fn main() {
    let pools: Vec<PoolView> = ["infra", "worker"]
        .iter()
        .map(|n| PoolView {
            name: n.to_string(),
            assigned: "g1".into(),
            active: "g1".into(),
            last_known_good: "g0".into(),
            ..Default::default()
        })
        .collect();
    for n in [500usize, 100_000] {
        let records = fleet(n);
        let t = Instant::now();
        let cloned: Vec<Machine> = records.iter().map(|m| black_box(m.clone())).collect();
        let clone_ms = t.elapsed().as_secs_f64() * 1000.0;
        drop(cloned);
        let first = Query::default();
        // Warmed up: the fifth of five runs.
        for _ in 0..4 {
            black_box(render(&records, &first, &pools));
        }
        let (page, pass, tpl) = render(&records, &first, &pools);
        println!(
            "{n} machines, first page: {} bytes ({:.1} KB), pass {pass:.2} ms (of which cloning the records {clone_ms:.2} ms), templates {tpl:.2} ms",
            page.len(),
            page.len() as f64 / 1024.0
        );
        if n == 500 {
            assert!(page.len() <= 150 * 1024, "{} bytes", page.len());
        }
        // A page deep in the list: the cursor of the middle machine.
        let mid = &records[n / 2];
        let cursor = format!("5.{}.{}", mid.last_seen, mid.id);
        let deep = Query::parse(|k| (k == "after").then_some(cursor.as_str())).unwrap();
        let (page, pass, tpl) = render(&records, &deep, &pools);
        println!(
            "{n} machines, a page in the middle: {} bytes, pass {pass:.2} ms, templates {tpl:.2} ms",
            page.len()
        );
        let search = Query {
            q: Some("rack7.".into()),
            ..Query::default()
        };
        let (page, pass, tpl) = render(&records, &search, &pools);
        println!(
            "{n} machines, ?q=rack7.: {} bytes, pass {pass:.2} ms, templates {tpl:.2} ms",
            page.len()
        );
    }
    println!(
        "records held by a pass: at most {} (one page) + {} failed + one duration per stage and machine",
        ROWS + 1,
        serve::admin::page::summary::FAILED_SHOWN
    );
}
