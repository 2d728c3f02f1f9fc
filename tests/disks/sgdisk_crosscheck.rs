//! Cross-check of the partition planner's placement rules (start/size 0, alignment, largest free
//! block) against sgdisk, the tool Ignition drives, on image files (no root-only devices needed).

use crate::support;

use std::process::Command;

use agent::blockdev::gpt::{self, Geometry, OnDisk};
use agent::blockdev::plan::{Action, Spec, plan};

fn need(tool: &str) {
    support::need(tool, "disks.apt");
}

/// (first, last) sector of partition 3 as sgdisk would create it with `-n 3:START:END`.
fn sgdisk_places(img: &std::path::Path, start: &str, end: &str) -> (u64, u64) {
    let out = Command::new("sgdisk")
        .arg("--pretend")
        .arg(format!("-n=3:{start}:{end}"))
        .args(["-i", "3"])
        .arg(img)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let num = |key: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("sgdisk gave no {key:?}:\n{text}"));
        line[key.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (num("First sector:"), num("Last sector:"))
}

#[test]
fn placement_matches_sgdisk() {
    need("sgdisk");
    need("sfdisk");
    let layouts = [
        // Two gaps, the second larger.
        "start=2048, size=20480\nstart=40960, size=20480\n",
        // The first gap is the largest; an unaligned end before it.
        "start=2048, size=3000\nstart=100000, size=20480\n",
        // One partition in the middle.
        "start=65536, size=2048\n",
    ];
    for (i, layout) in layouts.iter().enumerate() {
        let dir = std::env::temp_dir().join(format!("agent-xcheck-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join("d.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let mut c = Command::new("sfdisk")
            .arg("-q")
            .arg(&img)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        c.stdin
            .take()
            .unwrap()
            .write_all(format!("label: gpt\n{layout}").as_bytes())
            .unwrap();
        assert!(c.wait().unwrap().success());

        let f = std::fs::File::open(&img).unwrap();
        let g = Geometry::new(512, 64 << 20).unwrap();
        let OnDisk::Gpt(table) = gpt::read(&f, &g).unwrap() else {
            panic!("no table")
        };
        let ours = |start: Option<u64>, size: Option<u64>| {
            let spec = Spec {
                number: 3,
                start_mib: start,
                size_mib: size,
                should_exist: true,
                ..Default::default()
            };
            let p = plan(Some(&table), &g, false, &[spec], &mut uuid::Uuid::new_v4).unwrap();
            let e = p.new.get(3).unwrap();
            (e.start, e.end)
        };
        let (s0, e0) = sgdisk_places(&img, "0", "0");
        assert_eq!(ours(Some(0), Some(0)), (s0, e0), "layout {i}: 0/0");
        assert_eq!(ours(None, None), (s0, e0), "layout {i}: unspecified");
        assert_eq!(
            ours(Some(0), Some(5)),
            sgdisk_places(&img, "0", "+5M"),
            "layout {i}: 0/5 MiB"
        );
        // An explicit start inside the largest block, size 0.
        let mib = s0.div_ceil(2048) + 1;
        assert_eq!(
            ours(Some(mib), Some(0)),
            sgdisk_places(&img, &format!("{mib}M"), "0"),
            "layout {i}: {mib} MiB/0"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Writes a GPT with `parts` ((start, size, name) in sectors, numbered 1.. in order) on a new
/// image of `sectors` 512-byte sectors.
fn image(dir: &std::path::Path, sectors: u64, parts: &[(u64, u64, &str)]) -> std::path::PathBuf {
    let img = dir.join("d.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(sectors * 512)
        .unwrap();
    let mut script = String::from("label: gpt\n");
    for (start, size, name) in parts {
        script.push_str(&format!("start={start}, size={size}, name={name}\n"));
    }
    let mut c = Command::new("sfdisk")
        .arg("-q")
        .arg(&img)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(c.wait().unwrap().success());
    img
}

fn sgdisk(img: &std::path::Path, args: &[String]) -> String {
    let out = Command::new("sgdisk").args(args).arg(img).output().unwrap();
    assert!(
        out.status.success(),
        "sgdisk {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Ignition's two sgdisk runs (`internal/exec/stages/disks/partitions.go`) replayed with sgdisk
/// itself on the blackbox layouts. The pretend run (every listed partition that exists deleted
/// first, then every one that should exist created with its explicit, inherited or 0 start and
/// size) must place each partition where the plan does; the commit (every deletion first, then
/// the creations with the planned values) must be accepted by sgdisk and give the planned table.
#[test]
fn ignition_order_replayed_with_sgdisk_gives_the_plan() {
    need("sgdisk");
    need("sfdisk");
    type Case = (
        &'static str,
        u64,
        Vec<(u64, u64, &'static str)>,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "partitions.complex",
            657441,
            vec![
                (2048, 131072, "p1"),
                (133120, 65536, "dont-delete"),
                (198656, 65536, "garbo-town"),
                (395264, 65536, "more-junk"),
                (460800, 65536, "dont-delete2"),
            ],
            r#"[{"label": "p1", "number": 1, "startMiB": 1, "sizeMiB": 32,
                 "guid": "53f2e871-f468-437c-b90d-f3c6409df81a", "wipePartitionEntry": true},
                {"label": "dont-delete", "number": 2, "sizeMiB": 32},
                {"label": "new-biggest", "number": 3, "sizeMiB": 0, "startMiB": 0,
                 "typeGuid": "6050e8fc-1e31-473b-bcc0-714e32fcb09d", "wipePartitionEntry": true},
                {"number": 4, "shouldExist": false, "wipePartitionEntry": true},
                {"number": 9, "shouldExist": false}]"#,
        ),
        (
            "partition.match.recreate.delete.add",
            264225,
            vec![
                (2048, 65536, "important-data"),
                (67584, 65536, "ephemeral-data"),
                (133120, 131072, "bunch-of-junk"),
            ],
            r#"[{"label": "important-data", "number": 1, "startMiB": 1, "sizeMiB": 32},
                {"label": "ephemeral-data", "number": 2, "startMiB": 33, "sizeMiB": 64,
                 "wipePartitionEntry": true},
                {"number": 3, "shouldExist": false, "wipePartitionEntry": true},
                {"label": "even-more-data", "number": 4, "startMiB": 97, "sizeMiB": 32}]"#,
        ),
        (
            "number 0 last, unspecified start with wipe",
            264225,
            vec![
                (2048, 65536, "a"),
                (133120, 65536, "b"),
                (198656, 32768, "c"),
            ],
            r#"[{"label": "new", "sizeMiB": 8},
                {"number": 1, "label": "a"},
                {"number": 2, "label": "b2", "sizeMiB": 16, "wipePartitionEntry": true},
                {"number": 3, "label": "c", "sizeMiB": 24, "resize": true}]"#,
        ),
    ];
    for (name, sectors, parts, partitions) in cases {
        let dir = std::env::temp_dir().join(format!("agent-xcheck-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let img = image(&dir, sectors, &parts);
        let f = std::fs::File::open(&img).unwrap();
        let g = Geometry::new(512, sectors * 512).unwrap();
        let OnDisk::Gpt(table) = gpt::read(&f, &g).unwrap() else {
            panic!("{name}: no table")
        };
        let text = format!(
            r#"{{"ignition": {{"version": "3.2.0"}}, "storage": {{"disks": [{{"device": "/dev/vdb", "partitions": {partitions}}}]}}}}"#
        );
        let cfg = spec::config::parse(text.as_bytes())
            .unwrap_or_else(|r| panic!("{name}: {r:?}"))
            .config;
        let mut specs: Vec<Spec> = cfg.storage.disks[0]
            .partitions
            .iter()
            .map(|p| Spec::from_config(p).unwrap())
            .collect();
        let p = plan(Some(&table), &g, false, &specs, &mut uuid::Uuid::new_v4)
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        specs.sort_by_key(|s| s.number == 0);

        // The pretend run, as Ignition builds it. Number-0 partitions get the numbers the plan
        // gave them, in order (sgdisk picks the lowest free one).
        let mut zero_numbers = p
            .parts
            .iter()
            .filter(|x| x.action == Action::Create && !specs.iter().any(|s| s.number == x.number))
            .map(|x| x.number);
        let mut args = vec!["--pretend".to_string()];
        for s in &specs {
            if table.get(s.number).is_some() {
                args.push(format!("--delete={}", s.number));
            }
        }
        let mut inspect = Vec::new();
        for s in specs.iter().filter(|s| s.should_exist) {
            let cur = table.get(s.number).filter(|_| !s.wipe);
            let start = match (s.start_mib, cur) {
                (Some(m), _) => (m * 2048).to_string(),
                (None, Some(e)) => e.start.to_string(),
                (None, None) => "0".into(),
            };
            let size = match (s.size_mib, cur) {
                (Some(m), _) => (m * 2048).to_string(),
                (None, Some(e)) => e.size().to_string(),
                (None, None) => "0".into(),
            };
            args.push(format!("--new={}:{start}:+{size}", s.number));
            let n = if s.number == 0 {
                zero_numbers.next().unwrap()
            } else {
                s.number
            };
            inspect.push(n);
        }
        args.extend(inspect.iter().map(|n| format!("--info={n}")));
        let out = sgdisk(&img, &args);
        let firsts = out.lines().filter_map(|l| l.strip_prefix("First sector: "));
        let lasts = out.lines().filter_map(|l| l.strip_prefix("Last sector: "));
        let num = |s: &str| -> u64 { s.split_whitespace().next().unwrap().parse().unwrap() };
        let placed: Vec<(u64, u64)> = firsts.zip(lasts).map(|(a, b)| (num(a), num(b))).collect();
        assert_eq!(placed.len(), inspect.len(), "{name}: sgdisk said\n{out}");
        for (n, (a, b)) in inspect.iter().zip(placed) {
            let e = p.new.get(*n).unwrap();
            assert_eq!((e.start, e.end), (a, b), "{name}: partition {n}\n{p}");
        }

        // The commit: deletions first, then creations in order, with the planned values.
        let mut args = Vec::new();
        for x in &p.parts {
            if matches!(x.action, Action::Delete | Action::Recreate | Action::Resize) {
                args.push(format!("--delete={}", x.number));
            }
        }
        for s in &specs {
            let Some(x) = p.parts.iter().find(|x| {
                matches!(x.action, Action::Create | Action::Recreate | Action::Resize)
                    && (x.number == s.number
                        || (s.number == 0
                            && x.new.as_ref().map(|e| e.name.as_str()) == s.label.as_deref()))
            }) else {
                continue;
            };
            let e = x.new.as_ref().unwrap();
            let n = e.number;
            args.push(format!("--new={n}:{}:+{}", e.start, e.size()));
            args.push(format!("--change-name={n}:{}", e.name));
            args.push(format!("--typecode={n}:{}", e.type_guid));
            args.push(format!("--partition-guid={n}:{}", e.guid));
        }
        sgdisk(&img, &args);
        let OnDisk::Gpt(after) = gpt::read(&f, &g).unwrap() else {
            panic!("{name}: no table after the commit")
        };
        assert_eq!(
            after.entries, p.new.entries,
            "{name}: sgdisk's result vs the plan"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
