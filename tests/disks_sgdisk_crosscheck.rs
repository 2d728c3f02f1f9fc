//! Cross-check of the partition planner's placement rules (start/size 0, alignment, largest free
//! block) against sgdisk, the tool Ignition drives, on image files (no root-only devices needed).

use std::process::Command;

use agent::blockdev::gpt::{self, Geometry, OnDisk};
use agent::blockdev::plan::{Spec, plan};

fn need(tool: &str) {
    assert!(
        agent::util::have_program(tool),
        "{tool} is missing: install the packages in .ci/packages/disks.apt"
    );
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
