//! The install disk chosen by what it is, over real loop devices (root): sizes unique to this
//! test run (other tests may have loop devices attached at the same time), the transport,
//! rotational and removable flags as the kernel reports them, a property loop devices lack,
//! no match, two matches; `agent plan` shows the choice and `agent install` uses it.

use crate::agent;
use crate::support;
use support::TempDir;
use support::root::Loop;

const MIB: u64 = 1 << 20;

/// A size no other loop device has: `mib` MiB plus a number of 4 KiB blocks from the
/// process id and a counter.
fn unique_size(mib: u64, k: u64) -> u64 {
    mib * MIB + ((std::process::id() as u64 % 997) * 8 + k + 1) * 4096
}

fn sysfs(name: &str, f: &str) -> String {
    std::fs::read_to_string(format!("/sys/block/{name}/{f}"))
        .unwrap()
        .trim()
        .to_string()
}

fn exactly(size: u64) -> [String; 4] {
    [
        "--disk-size-min".into(),
        size.to_string(),
        "--disk-size-max".into(),
        size.to_string(),
    ]
}

fn run(args: &[&str], extra: &[String]) -> (i32, String, String) {
    let mut v: Vec<&str> = args.to_vec();
    v.extend(extra.iter().map(String::as_str));
    agent(&v)
}

#[test]
#[ignore = "needs root: make test-root"]
fn selectors_over_real_loop_devices() {
    let a_size = unique_size(40, 0);
    let b_size = unique_size(41, 0);
    let twin_size = unique_size(42, 0);
    let a = Loop::with(a_size, 512, |_| {});
    let b = Loop::with(b_size, 512, |_| {});
    let t1 = Loop::with(twin_size, 512, |_| {});
    let t2 = Loop::with(twin_size, 512, |_| {});
    let rot = if sysfs(a.name(), "queue/rotational") == "1" {
        "yes"
    } else {
        "no"
    };
    let not_rot = if rot == "yes" { "no" } else { "yes" };
    assert_eq!(sysfs(a.name(), "removable"), "0");

    // One match by size and transport: plan names it, with every candidate.
    let (code, out, err) = run(&["plan", "--disk-transport", "loop"], &exactly(a_size));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("install disk: {} ({})", a.dev(), a.dev())),
        "{out}"
    );
    assert!(
        out.contains(&format!("  {}: size {a_size}", a.name())),
        "{out}"
    );
    assert!(
        out.contains(&format!("  {}: size {b_size}", b.name())),
        "{out}"
    );
    assert!(
        out.contains(&format!("size {}", b_size)) && out.contains("> --disk-size-max"),
        "{out}"
    );
    // Each property as the kernel reports it for a loop device.
    for (flag, value) in [
        ("--disk-rotational", rot),
        ("--disk-removable", "no"),
        ("--disk-transport", "loop"),
    ] {
        let (code, out, err) = run(&["plan", flag, value], &exactly(b_size));
        assert_eq!(code, 0, "{flag} {value}: {err}");
        assert!(out.contains(&format!("install disk: {}", b.dev())), "{out}");
    }
    for (flag, value, why) in [
        (
            "--disk-rotational",
            not_rot,
            format!("rotational {rot} is not --disk-rotational {not_rot}"),
        ),
        (
            "--disk-removable",
            "yes",
            "removable no is not --disk-removable yes".to_string(),
        ),
        (
            "--disk-transport",
            "nvme",
            "transport loop is not --disk-transport nvme".to_string(),
        ),
        (
            "--disk-serial",
            "*",
            "--disk-serial \"*\": the disk has none".to_string(),
        ),
        (
            "--disk-model",
            "QEMU*",
            "--disk-model \"QEMU*\": the disk has none".to_string(),
        ),
        (
            "--disk-wwn",
            "naa.*",
            "--disk-wwn \"naa.*\": the disk has none".to_string(),
        ),
    ] {
        let (code, out, err) = run(&["plan", flag, value], &exactly(b_size));
        assert_eq!(code, 1, "{flag} {value}: {out}");
        assert!(err.contains("no disk matches the selector"), "{err}");
        assert!(out.contains(&why), "{flag}: {out}");
    }
    // No match: every disk listed with why.
    let (code, _, err) = run(&["plan"], &exactly(a_size + 4096 * 997 * 9));
    assert_eq!(code, 1);
    assert!(
        err.contains("no disk matches the selector; the disks:"),
        "{err}"
    );
    assert!(
        err.contains(&format!("  {}: size {a_size}", a.name())),
        "{err}"
    );
    // Two matches: both named.
    let (code, _, err) = run(&["plan", "--disk-transport", "loop"], &exactly(twin_size));
    assert_eq!(code, 1);
    let mut twins = [t1.name(), t2.name()];
    twins.sort();
    assert!(
        err.contains(&format!(
            "2 disks match the selector ({}, {})",
            twins[0], twins[1]
        )),
        "{err}"
    );
    // Bad selector values are refused by name.
    let (code, _, err) = agent(&["plan", "--disk-transport", "floppy"]);
    assert_eq!(code, 2);
    assert!(err.contains("--disk-transport"), "{err}");
    let (code, _, err) = agent(&["plan", "--disk-size-min", "2G", "--disk-size-max", "1G"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--disk-size-min is larger than --disk-size-max"),
        "{err}"
    );

    // install with the selector writes to the one disk, records it, and refuses two.
    let dir = TempDir::new("install-select");
    let img = dir.join("tiny.img");
    std::fs::write(&img, vec![0x5au8; 2 * MIB as usize]).unwrap();
    let state = dir.join("state");
    let (code, out, err) = run(
        &[
            "install",
            "--image-file",
            img.to_str().unwrap(),
            "--insecure",
            "--state-dir",
            state.to_str().unwrap(),
            "--disk-transport",
            "loop",
        ],
        &exactly(a_size),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), a.dev());
    assert_eq!(
        std::fs::read_to_string(state.join("install-disk"))
            .unwrap()
            .trim(),
        a.dev()
    );
    assert!(a.bytes()[..2 * MIB as usize].iter().all(|b| *b == 0x5a));
    assert!(
        b.bytes().iter().all(|b| *b == 0),
        "the other disk was written"
    );
    let (code, _, err) = run(
        &[
            "install",
            "--image-file",
            img.to_str().unwrap(),
            "--insecure",
        ],
        &exactly(twin_size),
    );
    assert_eq!(code, 1);
    assert!(err.contains("2 disks match"), "{err}");
    assert!(t1.bytes().iter().all(|b| *b == 0) && t2.bytes().iter().all(|b| *b == 0));
    // A device and a selector at once: refused.
    let (code, _, err) = run(
        &[
            "install",
            a.dev(),
            "--image-file",
            img.to_str().unwrap(),
            "--insecure",
        ],
        &exactly(a_size),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("either DEST_DEVICE or the --disk-* selector flags"),
        "{err}"
    );
}
