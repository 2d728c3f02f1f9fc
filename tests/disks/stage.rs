//! The disks stage against real loop devices (root): the partition action table, the match and
//! `0` rules, number 0 ordering, resize, wipeTable, filesystems, refusals, failure injection.
//! The result is read back with `sfdisk --json` and `blkid -p`.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;
use serde_json::Value;
use support::TempDir;
use support::root::{Loop, must_be_root};

// ---------- fixtures ----------

fn need(tool: &str) {
    support::need(tool, "disks.apt");
}

fn sh(program: &str, args: &[&str]) -> String {
    need(program);
    support::sh(program, args, None)
}

impl Loop {
    /// A blank image of `size_mib` MiB with `sector`-byte sectors; `setup` (an sfdisk script)
    /// is written to the image before it is attached.
    fn disk(size_mib: u64, sector: u32, setup: Option<&str>) -> Loop {
        Loop::with_bytes(size_mib << 20, sector, setup)
    }
    fn with_bytes(bytes: u64, sector: u32, setup: Option<&str>) -> Loop {
        Loop::with(bytes, sector, |img| {
            if let Some(script) = setup {
                need("sfdisk");
                assert_eq!(sector, 512, "sfdisk fixtures are for 512-byte sectors");
                support::sh(
                    "sfdisk",
                    &["-q", img.to_str().unwrap()],
                    Some(script.as_bytes()),
                );
            }
        })
    }
    fn part(&self, n: u32) -> String {
        format!("{}p{n}", self.dev())
    }
    /// Partitions as sfdisk reads them: (number, start, size, name, uuid, type).
    fn table(&self) -> Vec<Part> {
        // Read the image file: the kernel does not parse tables here anyway.
        sync_dev(Path::new(&self.dev));
        let out = Command::new("sfdisk")
            .arg("--json")
            .arg(&self.img)
            .output()
            .unwrap();
        if !out.status.success() {
            return Vec::new();
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let img = self.img.to_str().unwrap();
        v["partitiontable"]["partitions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|p| Part {
                number: p["node"].as_str().unwrap()[img.len()..].parse().unwrap(),
                start: p["start"].as_u64().unwrap(),
                size: p["size"].as_u64().unwrap(),
                name: p["name"].as_str().unwrap_or("").to_string(),
                uuid: p["uuid"].as_str().unwrap_or("").to_string(),
                type_guid: p["type"].as_str().unwrap_or("").to_string(),
            })
            .collect()
    }
    fn kernel_nodes(&self) -> Vec<u32> {
        agent::blockdev::kernel::kernel_partitions(self.name())
            .into_iter()
            .map(|x| x.0)
            .collect()
    }
}

fn sync_dev(dev: &Path) {
    if let Ok(f) = File::open(dev) {
        let _ = f.sync_all();
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Part {
    number: u32,
    start: u64,
    size: u64,
    name: String,
    uuid: String,
    type_guid: String,
}

const MIB: u64 = 2048;

/// Runs `agent run --stage disks` on `storage`; returns (success, stderr).
fn agent(storage: Value, env: &[(&str, &str)]) -> (bool, String) {
    agent_timeout(storage, env, "5")
}

/// [`agent`] waiting at most `secs` for a device node.
fn agent_timeout(storage: Value, env: &[(&str, &str)], secs: &str) -> (bool, String) {
    let dir = TempDir::new("disks");
    let cfg = serde_json::json!({"ignition": {"version": "3.4.0"}, "storage": storage});
    std::fs::write(dir.0.join("config.json"), cfg.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args([
            "run",
            "--stage",
            "disks",
            "--device-timeout",
            secs,
            "--state-dir",
        ])
        .arg(&dir.0)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(storage: Value) -> String {
    let (s, err) = agent(storage, &[]);
    assert!(s, "agent failed:\n{err}");
    err
}

fn fails(storage: Value, needle: &str) {
    let (s, err) = agent(storage, &[]);
    assert!(!s, "agent should have failed:\n{err}");
    assert!(
        err.contains(needle),
        "error should mention {needle:?}:\n{err}"
    );
}

fn disk(l: &Loop, parts: Value) -> Value {
    serde_json::json!({"disks": [{"device": l.dev(), "partitions": parts}]})
}

fn blkid(dev: &str) -> std::collections::HashMap<String, String> {
    need("blkid");
    let out = Command::new("blkid")
        .args(["-p", "-c", "/dev/null", "-o", "export", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Two partitions: 1 "one" at 1 MiB (10 MiB), 2 "two" at 20 MiB (10 MiB), on a 64 MiB disk.
const TWO: &str = "label: gpt\nstart=2048, size=20480, name=one, uuid=11111111-1111-1111-1111-111111111111\nstart=40960, size=20480, name=two\n";

// ---------- the action table ----------

#[test]
#[ignore = "needs root: make test-root"]
fn row_absent_should_not_exist_does_nothing() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    let before = l.table();
    ok(disk(
        &l,
        serde_json::json!([{"number": 3, "shouldExist": false}]),
    ));
    assert_eq!(l.table(), before);
}

#[test]
#[ignore = "needs root: make test-root"]
fn row_absent_should_exist_creates() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    ok(disk(
        &l,
        serde_json::json!([{"number": 3, "label": "three", "sizeMiB": 5, "typeGuid": "C12A7328-F81F-11D2-BA4B-00A0C93EC93B", "guid": "33333333-3333-4333-8333-333333333333"}]),
    ));
    let t = l.table();
    let p = t.iter().find(|p| p.number == 3).unwrap();
    // Largest free block: after partition 2 (30 MiB .. end).
    assert_eq!((p.start, p.size), (30 * MIB, 5 * MIB));
    assert_eq!(p.name, "three");
    assert_eq!(p.type_guid, "C12A7328-F81F-11D2-BA4B-00A0C93EC93B");
    assert_eq!(p.uuid, "33333333-3333-4333-8333-333333333333");
    assert_eq!(l.kernel_nodes(), vec![1, 2, 3]);
    assert!(Path::new(&l.part(3)).exists());
}

#[test]
#[ignore = "needs root: make test-root"]
fn row_present_should_not_exist_no_wipe_fails() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    let before = l.table();
    fails(
        disk(&l, serde_json::json!([{"number": 2, "shouldExist": false}])),
        "wipePartitionEntry is false",
    );
    assert_eq!(l.table(), before);
}

#[test]
#[ignore = "needs root: make test-root"]
fn row_present_should_not_exist_wipe_deletes() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    ok(disk(
        &l,
        serde_json::json!([{"number": 2, "shouldExist": false, "wipePartitionEntry": true}]),
    ));
    let t = l.table();
    assert_eq!(t.iter().map(|p| p.number).collect::<Vec<_>>(), vec![1]);
    assert_eq!(l.kernel_nodes(), vec![1]);
}

#[test]
#[ignore = "needs root: make test-root"]
fn row_present_matching_is_kept_with_and_without_wipe() {
    must_be_root();
    for wipe in [false, true] {
        let l = Loop::disk(64, 512, Some(TWO));
        let before = l.table();
        ok(disk(
            &l,
            serde_json::json!([{"number": 1, "label": "one", "startMiB": 1, "sizeMiB": 10, "guid": "11111111-1111-1111-1111-111111111111", "wipePartitionEntry": wipe}]),
        ));
        assert_eq!(l.table(), before, "wipe={wipe}");
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn row_present_mismatch_without_wipe_fails() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    let before = l.table();
    fails(
        disk(&l, serde_json::json!([{"number": 1, "label": "other"}])),
        "does not match",
    );
    assert_eq!(l.table(), before);
}

#[test]
#[ignore = "needs root: make test-root"]
fn row_present_mismatch_with_wipe_recreates() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    ok(disk(
        &l,
        serde_json::json!([{"number": 1, "label": "other", "startMiB": 1, "sizeMiB": 15, "wipePartitionEntry": true}]),
    ));
    let t = l.table();
    let p = &t[0];
    assert_eq!(
        (p.number, p.start, p.size, p.name.as_str()),
        (1, MIB, 15 * MIB, "other")
    );
    assert_ne!(p.uuid, "11111111-1111-1111-1111-111111111111");
    assert_eq!(t[1].name, "two");
}

// ---------- matching on each attribute ----------

#[test]
#[ignore = "needs root: make test-root"]
fn each_mismatching_attribute_fails() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    let before = l.table();
    for (attr, val) in [
        ("startMiB", serde_json::json!(2)),
        ("sizeMiB", serde_json::json!(11)),
        ("label", serde_json::json!("nope")),
        (
            "guid",
            serde_json::json!("22222222-2222-4222-8222-222222222222"),
        ),
        (
            "typeGuid",
            serde_json::json!("C12A7328-F81F-11D2-BA4B-00A0C93EC93B"),
        ),
    ] {
        let mut p = serde_json::json!({"number": 1});
        p[attr] = val;
        fails(disk(&l, serde_json::json!([p])), "does not match");
        assert_eq!(l.table(), before, "{attr}");
    }
    // Matching values, GUIDs in lower case and an empty guid string: kept.
    ok(disk(
        &l,
        serde_json::json!([{"number": 1, "startMiB": 1, "sizeMiB": 10, "label": "one", "guid": "", "typeGuid": "0fc63daf-8483-4772-8e79-3d69d8477de4"}]),
    ));
    assert_eq!(l.table(), before);
}

// ---------- the 0 rules, number 0, resize, wipeTable ----------

#[test]
#[ignore = "needs root: make test-root"]
fn zero_start_and_size_use_largest_free_block() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    ok(disk(
        &l,
        serde_json::json!([{"number": 3, "startMiB": 0, "sizeMiB": 0}]),
    ));
    let t = l.table();
    let last = 64 * MIB - 33; // one past the last usable sector
    assert_eq!((t[2].start, t[2].start + t[2].size), (30 * MIB, last));
}

#[test]
#[ignore = "needs root: make test-root"]
fn zero_size_with_start_outside_largest_block_fails() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    let before = l.table();
    fails(
        disk(
            &l,
            serde_json::json!([{"number": 3, "startMiB": 12, "sizeMiB": 0}]),
        ),
        "largest free block",
    );
    assert_eq!(l.table(), before);
}

#[test]
#[ignore = "needs root: make test-root"]
fn zero_values_compare_against_layout_after_deletion() {
    must_be_root();
    // One partition filling the disk matches 0/0 (as if deleted and recreated).
    let l = Loop::disk(
        32,
        512,
        Some("label: gpt\nstart=2048, size=63455, name=all\n"),
    );
    let before = l.table();
    ok(disk(
        &l,
        serde_json::json!([{"number": 1, "startMiB": 0, "sizeMiB": 0}]),
    ));
    assert_eq!(l.table(), before);
}

#[test]
#[ignore = "needs root: make test-root"]
fn number_zero_goes_after_numbered_partitions() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    ok(disk(
        &l,
        serde_json::json!([{"label": "a", "sizeMiB": 4}, {"number": 5, "label": "five", "sizeMiB": 4}, {"label": "b", "sizeMiB": 4}]),
    ));
    let t = l.table();
    let by = |n: &str| t.iter().find(|p| p.name == n).unwrap().clone();
    assert_eq!((by("five").number, by("five").start), (5, 30 * MIB));
    assert_eq!((by("a").number, by("a").start), (3, 34 * MIB));
    assert_eq!((by("b").number, by("b").start), (4, 38 * MIB));
    assert_eq!(l.kernel_nodes(), vec![1, 2, 3, 4, 5]);
    gpt_is_valid(l.dev());
}

#[test]
#[ignore = "needs root: make test-root"]
fn resize_grows_in_place_and_keeps_data() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    // Data inside partition 2 (kernel node created by a first, no-op run).
    ok(disk(&l, serde_json::json!([{"number": 2}])));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(l.part(2))
        .unwrap();
    f.write_all_at(b"keep me", 4096).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let before = l.table();
    fails(
        disk(&l, serde_json::json!([{"number": 2, "sizeMiB": 20}])),
        "does not match",
    );
    ok(disk(
        &l,
        serde_json::json!([{"number": 2, "sizeMiB": 20, "resize": true}]),
    ));
    let t = l.table();
    assert_eq!((t[1].start, t[1].size), (before[1].start, 20 * MIB));
    assert_eq!(t[1].uuid, before[1].uuid);
    let size: u64 = std::fs::read_to_string(format!("/sys/class/block/{}p2/size", l.name()))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(size, 20 * MIB);
    let mut buf = [0u8; 7];
    File::open(l.part(2))
        .unwrap()
        .read_exact_at(&mut buf, 4096)
        .unwrap();
    assert_eq!(&buf, b"keep me");
}

#[test]
#[ignore = "needs root: make test-root"]
fn wipe_table_over_garbage() {
    must_be_root();
    let l = Loop::disk(32, 512, Some(TWO.replace("20480", "2048").as_str()));
    // Corrupt both headers: not a missing table, a broken one.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&l.img)
        .unwrap();
    f.write_all_at(&[0xA5; 64], 512 + 20).unwrap();
    f.write_all_at(&[0xA5; 64], (32 << 20) - 512 + 20).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let parts = serde_json::json!([{"number": 1, "label": "new", "sizeMiB": 8}]);
    fails(disk(&l, parts.clone()), "corrupt");
    ok(serde_json::json!({"disks": [{"device": l.dev(), "wipeTable": true, "partitions": parts}]}));
    let t = l.table();
    assert_eq!(t.len(), 1);
    assert_eq!(
        (t[0].start, t[0].size, t[0].name.as_str()),
        (MIB, 8 * MIB, "new")
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn sector_size_4096() {
    must_be_root();
    let l = Loop::disk(64, 4096, None);
    ok(disk(
        &l,
        serde_json::json!([{"number": 1, "label": "a", "sizeMiB": 8}, {"label": "b"}]),
    ));
    let out = sh("sfdisk", &["--json", l.dev()]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["partitiontable"]["sectorsize"], 4096);
    let ps = v["partitiontable"]["partitions"].as_array().unwrap();
    assert_eq!(
        (ps[0]["start"].as_u64(), ps[0]["size"].as_u64()),
        (Some(256), Some(2048))
    );
    assert_eq!(ps[1]["start"].as_u64(), Some(9 * 256));
    assert_eq!(l.kernel_nodes(), vec![1, 2]);
    gpt_is_valid(l.dev());
}

/// Cross-check of our GPT writer: sgdisk's verifier finds no problem.
fn gpt_is_valid(dev: &str) {
    let out = sh("sgdisk", &["-v", dev]);
    assert!(out.contains("No problems found"), "sgdisk -v {dev}:\n{out}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn by_id_symlink_device_names() {
    must_be_root();
    let l = Loop::disk(32, 512, None);
    std::fs::create_dir_all("/dev/disk/by-id").unwrap();
    let link = PathBuf::from(format!(
        "/dev/disk/by-id/agent-test-{}",
        uuid::Uuid::new_v4()
    ));
    std::os::unix::fs::symlink(&l.dev, &link).unwrap();
    struct Rm(PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _rm = Rm(link.clone());
    ok(
        serde_json::json!({"disks": [{"device": link, "partitions": [{"number": 1, "sizeMiB": 8}]}],
        "filesystems": [{"device": l.part(1), "format": "ext4", "label": "byid"}]}),
    );
    assert_eq!(blkid(&l.part(1))["LABEL"], "byid");
}

#[test]
fn missing_device_times_out_naming_it() {
    let storage = serde_json::json!({"disks": [{"device": "/dev/disk/by-id/agent-test-never-there", "partitions": [{"number": 1}]}]});
    let (s, err) = agent_timeout(storage.clone(), &[], "0.3");
    assert!(!s);
    assert!(err.contains("agent-test-never-there"), "{err}");
    assert!(err.contains("within 300ms"), "{err}");
    // The kernel argument agent.device_timeout= sets it too (test builds read the kernel
    // command line from the file named by the hidden --test-kernel-cmdline-file).
    let dir = TempDir::new("disks-karg");
    std::fs::write(dir.0.join("cmdline"), "quiet agent.device_timeout=0.25").unwrap();
    let cfg = serde_json::json!({"ignition": {"version": "3.4.0"}, "storage": storage});
    std::fs::write(dir.0.join("config.json"), cfg.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["run", "--stage", "disks", "--state-dir"])
        .arg(&dir.0)
        .arg("--test-kernel-cmdline-file")
        .arg(dir.0.join("cmdline"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("within 250ms"), "{err}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn plan_prints_and_touches_nothing() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    let before = std::fs::read(&l.img).unwrap();
    let dir = TempDir::new("disks");
    let cfg = serde_json::json!({"ignition": {"version": "3.4.0"}, "storage": {"disks": [{"device": l.dev(), "partitions": [
        {"number": 1, "label": "one"}, {"number": 2, "shouldExist": false, "wipePartitionEntry": true}, {"number": 3, "sizeMiB": 4}]}]}});
    std::fs::write(dir.0.join("c.json"), cfg.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["plan", "--config-file"])
        .arg(dir.0.join("c.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("partition 1: keep"), "{text}");
    assert!(text.contains("partition 2: delete"), "{text}");
    assert!(text.contains("partition 3: create"), "{text}");
    assert_eq!(std::fs::read(&l.img).unwrap(), before);
    assert!(l.kernel_nodes().is_empty());
}

#[test]
fn raid_and_luks_on_non_block_devices_are_refused_clearly() {
    fails(
        serde_json::json!({"raid": [{"name": "md0", "level": "raid1", "devices": ["/dev/null"]}]}),
        "/dev/null is not a block device",
    );
    fails(
        serde_json::json!({"luks": [{"name": "v", "device": "/dev/null"}]}),
        "/dev/null is not a block device",
    );
}

// ---------- filesystems ----------

fn fs_disk(l: &Loop, fss: Value) -> Value {
    serde_json::json!({"disks": [{"device": l.dev(), "partitions": [{"number": 1, "sizeMiB": 40}]}], "filesystems": fss})
}

#[test]
#[ignore = "needs root: make test-root"]
fn filesystem_create_reuse_keeps_data_and_mismatch_fails() {
    must_be_root();
    need("mount");
    let l = Loop::disk(64, 512, None);
    let p1 = l.part(1);
    ok(fs_disk(
        &l,
        serde_json::json!([{"device": p1, "format": "ext4", "label": "data"}]),
    ));
    let first = blkid(&p1);
    assert_eq!(
        (first["TYPE"].as_str(), first["LABEL"].as_str()),
        ("ext4", "data")
    );
    // Write a file, checksum it.
    let mnt = TempDir::new("disks");
    sh("mount", &[&p1, mnt.0.to_str().unwrap()]);
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(mnt.0.join("f"), &payload).unwrap();
    sh("umount", &[mnt.0.to_str().unwrap()]);
    // Reuse: same type, matching label and uuid (upper case).
    ok(fs_disk(
        &l,
        serde_json::json!([{"device": p1, "format": "ext4", "label": "data", "uuid": first["UUID"].to_uppercase()}]),
    ));
    assert_eq!(blkid(&p1)["UUID"], first["UUID"]);
    // Mismatches fail and touch nothing.
    fails(
        fs_disk(&l, serde_json::json!([{"device": p1, "format": "btrfs"}])),
        "does not match",
    );
    fails(
        fs_disk(
            &l,
            serde_json::json!([{"device": p1, "format": "ext4", "label": "other"}]),
        ),
        "does not match",
    );
    fails(
        fs_disk(
            &l,
            serde_json::json!([{"device": p1, "format": "ext4", "uuid": "6b7f1c2e-0000-4000-8000-000000000001"}]),
        ),
        "does not match",
    );
    fails(
        fs_disk(&l, serde_json::json!([{"device": p1, "format": "none"}])),
        "does not match",
    );
    assert_eq!(blkid(&p1)["UUID"], first["UUID"]);
    sh("mount", &[&p1, mnt.0.to_str().unwrap()]);
    let back = std::fs::read(mnt.0.join("f"));
    sh("umount", &[mnt.0.to_str().unwrap()]);
    assert!(back.unwrap() == payload, "data changed after reuse");
}

#[test]
#[ignore = "needs root: make test-root"]
fn filesystem_wipe_recreates_with_label_uuid_options() {
    must_be_root();
    let l = Loop::disk(64, 512, None);
    let p1 = l.part(1);
    ok(fs_disk(
        &l,
        serde_json::json!([{"device": p1, "format": "ext4"}]),
    ));
    let uuid = "7c4b1a2e-1111-4222-8333-444455556666";
    ok(fs_disk(
        &l,
        serde_json::json!([{"device": p1, "format": "swap", "label": "sw", "uuid": uuid, "wipeFilesystem": true}]),
    ));
    let b = blkid(&p1);
    assert_eq!(
        (b["TYPE"].as_str(), b["LABEL"].as_str(), b["UUID"].as_str()),
        ("swap", "sw", uuid)
    );
    // Options are passed to mkfs.
    ok(fs_disk(
        &l,
        serde_json::json!([{"device": p1, "format": "ext4", "wipeFilesystem": true, "options": ["-b", "1024"]}]),
    ));
    let out = sh("dumpe2fs", &["-h", &p1]);
    assert!(
        out.lines()
            .any(|x| x.starts_with("Block size:") && x.ends_with(" 1024")),
        "{out}"
    );
    // format none + wipe: signatures gone.
    ok(fs_disk(
        &l,
        serde_json::json!([{"device": p1, "format": "none", "wipeFilesystem": true}]),
    ));
    assert!(!blkid(&p1).contains_key("TYPE"));
}

#[test]
#[ignore = "needs root: make test-root"]
fn filesystems_xfs_btrfs_vfat_in_parallel() {
    must_be_root();
    let l = Loop::disk(700, 512, None);
    ok(
        serde_json::json!({"disks": [{"device": l.dev(), "partitions": [
        {"number": 1, "sizeMiB": 64}, {"number": 2, "sizeMiB": 130}, {"number": 3, "sizeMiB": 330}]}],
        "filesystems": [
            {"device": l.part(1), "format": "vfat", "label": "EFI", "uuid": "ABCD-1234"},
            {"device": l.part(2), "format": "btrfs", "label": "b"},
            {"device": l.part(3), "format": "xfs", "label": "x", "uuid": "5a5a5a5a-1111-4222-8333-444455556666"}]}),
    );
    let (a, b, c) = (blkid(&l.part(1)), blkid(&l.part(2)), blkid(&l.part(3)));
    assert_eq!(
        (a["TYPE"].as_str(), a["UUID"].as_str()),
        ("vfat", "ABCD-1234")
    );
    assert_eq!(b["TYPE"], "btrfs");
    assert_eq!(
        (c["TYPE"].as_str(), c["UUID"].as_str()),
        ("xfs", "5a5a5a5a-1111-4222-8333-444455556666")
    );
    // vfat uuid compared without the dash, case-insensitively: reuse.
    ok(
        serde_json::json!({"filesystems": [{"device": l.part(1), "format": "vfat", "uuid": "abcd1234"}]}),
    );
}

// ---------- refusals ----------

#[test]
#[ignore = "needs root: make test-root"]
fn refuses_to_delete_a_mounted_partition() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    ok(
        serde_json::json!({"disks": [{"device": l.dev(), "partitions": [{"number": 1}]}],
        "filesystems": [{"device": l.part(1), "format": "ext4"}]}),
    );
    let mnt = TempDir::new("disks");
    sh("mount", &[&l.part(1), mnt.0.to_str().unwrap()]);
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let um = Umount(mnt.0.clone());
    let before = l.table();
    fails(
        disk(
            &l,
            serde_json::json!([{"number": 1, "shouldExist": false, "wipePartitionEntry": true}]),
        ),
        "is mounted",
    );
    fails(
        serde_json::json!({"filesystems": [{"device": l.part(1), "format": "xfs", "wipeFilesystem": true}]}),
        "is mounted",
    );
    // wipeTable with a partition in use is refused even when the new table would put the
    // same extent back (like Ignition: "refusing to wipe active disk").
    fails(
        serde_json::json!({"disks": [{"device": l.dev(), "wipeTable": true, "partitions": [
            {"number": 1, "startMiB": 1, "sizeMiB": 10}, {"number": 2, "startMiB": 20, "sizeMiB": 10}]}]}),
        "wipe the partition table",
    );
    assert_eq!(l.table(), before);
    drop(um);
}

#[test]
#[ignore = "needs root: make test-root"]
fn refuses_to_change_an_active_swap() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    ok(disk(&l, serde_json::json!([{"number": 2}])));
    sh("mkswap", &[&l.part(2)]);
    sh("swapon", &[&l.part(2)]);
    struct Swapoff(String);
    impl Drop for Swapoff {
        fn drop(&mut self) {
            let _ = Command::new("swapoff").arg(&self.0).status();
        }
    }
    let so = Swapoff(l.part(2));
    let before = l.table();
    fails(
        disk(
            &l,
            serde_json::json!([{"number": 2, "sizeMiB": 12, "resize": true}]),
        ),
        "active swap",
    );
    assert_eq!(l.table(), before);
    drop(so);
}

// ---------- failure injection ----------

#[test]
#[ignore = "needs root: make test-root"]
fn failpoints_leave_the_disk_as_before_or_as_planned() {
    must_be_root();
    let storage = |l: &Loop| {
        serde_json::json!({"disks": [{"device": l.dev(), "partitions": [
            {"number": 1, "label": "one", "wipePartitionEntry": true, "sizeMiB": 8},
            {"number": 2, "shouldExist": false, "wipePartitionEntry": true},
            {"number": 3, "label": "three", "sizeMiB": 6}]}],
            "filesystems": [{"device": l.part(3), "format": "ext4"}]})
    };
    let shape = |t: &[Part]| -> Vec<(u32, u64, u64, String)> {
        t.iter()
            .map(|p| (p.number, p.start, p.size, p.name.clone()))
            .collect()
    };
    // The planned layout, from an undisturbed run.
    let reference = Loop::disk(64, 512, Some(TWO));
    ok(storage(&reference));
    let planned = shape(&reference.table());
    drop(reference);
    for fp in [
        "after-table-write",
        "after-partition-nodes",
        "after-partitioning",
        "after-wipe",
        "after-mkfs",
    ] {
        let l = Loop::disk(64, 512, Some(TWO));
        let before = shape(&l.table());
        let (s, err) = agent(storage(&l), &[("AGENT_FAILPOINTS", fp)]);
        let now = shape(&l.table());
        if fp != "after-wipe" {
            // after-wipe is not reached here (nothing to wipe): the run succeeds.
            assert!(!s && err.contains(fp), "{fp}: {err}");
        }
        assert!(
            now == before || now == planned,
            "{fp}: half-way table {now:?}"
        );
        if fp.ends_with("write") || fp.contains("partition") {
            // A failure while partitioning puts the old table back.
            assert_eq!(now, before, "{fp}: not rolled back");
        }
        // The kernel's nodes agree with what is on disk.
        let nums: Vec<u32> = now.iter().map(|p| p.0).collect();
        assert!(
            l.kernel_nodes().is_empty() || l.kernel_nodes() == nums,
            "{fp}"
        );
        if now == planned {
            assert_eq!(l.kernel_nodes(), nums, "{fp}");
        }
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn failpoints_in_the_filesystem_phase_keep_the_table_as_planned() {
    must_be_root();
    for fp in ["after-wipe", "after-mkfs"] {
        let l = Loop::disk(64, 512, Some(TWO));
        ok(
            serde_json::json!({"disks": [{"device": l.dev(), "partitions": [{"number": 1}]}],
            "filesystems": [{"device": l.part(1), "format": "swap", "label": "old"}]}),
        );
        let before = l.table();
        let (s, err) = agent(
            serde_json::json!({"disks": [{"device": l.dev(), "partitions": [{"number": 1}, {"number": 3, "sizeMiB": 4}]}],
                "filesystems": [{"device": l.part(1), "format": "ext4", "wipeFilesystem": true}]}),
            &[("AGENT_FAILPOINTS", fp)],
        );
        assert!(!s && err.contains(fp), "{fp}: {err}");
        let t = l.table();
        assert_eq!(&t[..2], &before[..], "{fp}");
        assert_eq!((t[2].number, t[2].size), (3, 4 * MIB), "{fp}");
        let b = blkid(&l.part(1));
        match fp {
            "after-wipe" => assert!(!b.contains_key("TYPE"), "{fp}: {b:?}"),
            _ => assert_eq!(b["TYPE"], "ext4"),
        }
    }
}

struct RmLink(PathBuf);
impl Drop for RmLink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn late_device_is_waited_for() {
    must_be_root();
    let l = Loop::disk(32, 512, None);
    std::fs::create_dir_all("/dev/disk/by-id").unwrap();
    let link = PathBuf::from(format!(
        "/dev/disk/by-id/agent-test-late-{}",
        uuid::Uuid::new_v4()
    ));
    let _rm = RmLink(link.clone());
    let (target, l2) = (l.dev.clone(), link.clone());
    let t = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(400));
        std::os::unix::fs::symlink(target, l2).unwrap();
    });
    ok(
        serde_json::json!({"disks": [{"device": link, "partitions": [{"number": 1, "sizeMiB": 8}]}]}),
    );
    t.join().unwrap();
    assert_eq!(l.table().len(), 1);
}

#[test]
#[ignore = "needs root: make test-root"]
fn by_partlabel_and_partuuid_resolve_without_udev() {
    must_be_root();
    let l = Loop::disk(64, 512, None);
    let pu = "44444444-4444-4444-8444-444444444444";
    ok(
        serde_json::json!({"disks": [{"device": l.dev(), "partitions": [
            {"number": 1, "label": "my root", "sizeMiB": 20},
            {"number": 2, "guid": pu, "sizeMiB": 20}]}],
        "filesystems": [
            {"device": "/dev/disk/by-partlabel/my\\x20root", "format": "ext4", "label": "r"},
            {"device": format!("/dev/disk/by-partuuid/{}", pu.to_uppercase()), "format": "swap"}]}),
    );
    assert_eq!(blkid(&l.part(1))["LABEL"], "r");
    assert_eq!(blkid(&l.part(2))["TYPE"], "swap");
}

#[test]
#[ignore = "needs root: make test-root"]
fn mbr_table_is_not_overwritten_without_wipe_table() {
    must_be_root();
    let l = Loop::disk(
        32,
        512,
        Some("label: dos\nstart=2048, size=4096, type=83\n"),
    );
    let before = std::fs::read(&l.img).unwrap();
    let parts = serde_json::json!([{"number": 1, "sizeMiB": 4}]);
    fails(disk(&l, parts.clone()), "MBR");
    assert!(std::fs::read(&l.img).unwrap() == before);
    ok(serde_json::json!({"disks": [{"device": l.dev(), "wipeTable": true, "partitions": parts}]}));
    assert_eq!(l.table().len(), 1);
}

fn agent_plan(storage: Value) -> (bool, String, String) {
    let dir = TempDir::new("disks");
    let cfg = serde_json::json!({"ignition": {"version": "3.4.0"}, "storage": storage});
    std::fs::write(dir.0.join("config.json"), cfg.to_string()).unwrap();
    // The rendered config in the state directory is the default input.
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["plan", "--device-timeout", "2", "--state-dir"])
        .arg(&dir.0)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs root: make test-root"]
fn plan_shows_filesystem_reuse_wipe_and_mismatch() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    ok(
        serde_json::json!({"disks": [{"device": l.dev(), "partitions": [{"number": 1}]}],
        "filesystems": [{"device": l.part(1), "format": "ext4", "label": "L"}]}),
    );
    let before = std::fs::read(&l.img).unwrap();
    let (s, out, err) =
        agent_plan(serde_json::json!({"filesystems": [{"device": l.part(1), "format": "ext4"}]}));
    assert!(s && out.contains("reuse ext4"), "{out}{err}");
    let (s, out, err) = agent_plan(
        serde_json::json!({"filesystems": [{"device": l.part(1), "format": "btrfs", "wipeFilesystem": true}]}),
    );
    assert!(
        s && out.contains("wipe ext4 and create btrfs"),
        "{out}{err}"
    );
    let (s, _, err) =
        agent_plan(serde_json::json!({"filesystems": [{"device": l.part(1), "format": "xfs"}]}));
    assert!(!s && err.contains("does not match"), "{err}");
    assert!(std::fs::read(&l.img).unwrap() == before);
}

#[test]
#[ignore = "needs root: make test-root"]
fn unspecified_start_size_keep_existing_unless_wipe() {
    must_be_root();
    let l = Loop::disk(64, 512, Some(TWO));
    let before = l.table();
    // Not specified, no wipe: the existing extent counts as matching.
    ok(disk(&l, serde_json::json!([{"number": 2, "label": "two"}])));
    assert_eq!(l.table(), before);
    // Label differs and wipe is set: recreated where start/size 0 would put it, i.e. in the
    // largest free block once partition 2 is gone (11 MiB .. end of disk).
    ok(disk(
        &l,
        serde_json::json!([{"number": 2, "label": "new", "wipePartitionEntry": true}]),
    ));
    let t = l.table();
    assert_eq!(
        (t[1].number, t[1].start, t[1].name.as_str()),
        (2, 11 * MIB, "new")
    );
    assert_eq!(t[1].start + t[1].size, 64 * MIB - 33);
    assert_eq!(t[0], before[0]);
    gpt_is_valid(l.dev());
}

#[test]
#[ignore = "needs root: make test-root"]
fn two_names_for_one_filesystem_device_are_refused() {
    must_be_root();
    let l = Loop::disk(32, 512, None);
    std::fs::create_dir_all("/dev/disk/by-id").unwrap();
    let link = PathBuf::from(format!(
        "/dev/disk/by-id/agent-test-{}",
        uuid::Uuid::new_v4()
    ));
    let _rm = RmLink(link.clone());
    std::os::unix::fs::symlink(&l.dev, &link).unwrap();
    fails(
        serde_json::json!({"filesystems": [
            {"device": l.dev(), "format": "ext4"},
            {"device": link, "format": "swap"}]}),
        "same device",
    );
    assert!(!blkid(l.dev()).contains_key("TYPE"));
}

// ---------- Ignition's blackbox layouts (coreos/ignition tests/positive/partitions) ----------

/// A disk laid out like the blackbox suite does (see `plan_ignition_cases.rs`): `parts` are
/// (start, size, name, type, uuid) in sectors, numbered 1.. in order; `sectors` is the image size.
/// With `booted`, the kernel has a node for each partition before the agent runs
/// ([`Loop::booted`]), as on Ignition's blackbox machines.
fn ignition_disk(sectors: u64, parts: &[(u64, u64, &str, &str, &str)], booted: bool) -> Loop {
    let mut script = String::from("label: gpt\n");
    for (start, size, name, ty, uuid) in parts {
        script.push_str(&format!(
            "start={start}, size={size}, name={name}, type={ty}, uuid={uuid}\n"
        ));
    }
    if booted {
        Loop::booted_bytes(sectors * 512, &script)
    } else {
        Loop::with_bytes(sectors * 512, 512, Some(&script))
    }
}

const LINUX: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";

fn part(t: &[Part], n: u32) -> Part {
    t.iter()
        .find(|p| p.number == n)
        .unwrap_or_else(|| panic!("no partition {n} in {t:#?}"))
        .clone()
}

#[test]
#[ignore = "needs root: make test-root"]
fn ignition_partitions_complex() {
    must_be_root();
    // Fresh (the kernel knows no partition yet), then booted.
    for booted in [false, true] {
        // "partitions.complex": 1 recreated smaller, 2 kept, 3 and 4 deleted and 3 recreated
        // in the largest block they leave, 5 untouched. 3 is placed over where 4 was, and 4
        // comes later in the list: Ignition deletes everything first, then creates. Booted,
        // the kernel must drop 4 before 3 grows into its space.
        let t0 = "316F19F9-9E0F-431E-859E-AE6908DBE8CA";
        let l = ignition_disk(
            657441,
            &[
                (
                    2048,
                    131072,
                    "p1",
                    t0,
                    "3ED3993F-0016-422B-B134-09FCBA6F66EF",
                ),
                (
                    133120,
                    65536,
                    "dont-delete",
                    "F39C522B-9966-4429-A8F8-417CD5D83E5E",
                    "26CC1E6A-39A2-4502-A957-28F8E0AC00E7",
                ),
                (
                    198656,
                    65536,
                    "garbo-town",
                    "9DFDE6DB-A308-497B-9F8C-55DB12D4D9A1",
                    "115EE54B-00BD-4AFE-BE9B-BF1912DEC92D",
                ),
                (
                    395264,
                    65536,
                    "more-junk",
                    "EE378F79-6B7A-4F7A-8029-7A5736D12BBF",
                    "5E89FA40-183C-4346-B2E1-2F10FA2190E1",
                ),
                (
                    460800,
                    65536,
                    "dont-delete2",
                    "9DD1A91A-A39A-4594-B431-60A7FB630BCB",
                    "39BAF7EF-CB3E-4343-8BFC-C2391B8B5607",
                ),
            ],
            booted,
        );
        let before = l.table();
        // On a booted disk an untouched partition is in use throughout.
        let busy = booted.then(|| Busy::new(l.part(5), Use::Mounted));
        ok(
            serde_json::json!({"disks": [{"device": l.dev(), "wipeTable": false, "partitions": [
        {"label": "p1", "number": 1, "startMiB": 1, "sizeMiB": 32,
         "typeGuid": "316f19f9-9e0f-431e-859e-ae6908dbe8ca",
         "guid": "53f2e871-f468-437c-b90d-f3c6409df81a", "wipePartitionEntry": true},
        {"label": "dont-delete", "number": 2, "sizeMiB": 32},
        {"label": "new-biggest", "number": 3, "sizeMiB": 0, "startMiB": 0,
         "typeGuid": "6050e8fc-1e31-473b-bcc0-714e32fcb09d",
         "guid": "f14984bc-6f08-4885-b668-526263469a00", "wipePartitionEntry": true},
        {"number": 4, "shouldExist": false, "wipePartitionEntry": true},
        {"number": 9, "shouldExist": false}]}]}),
        );
        let t = l.table();
        assert_eq!(
            t.iter().map(|p| p.number).collect::<Vec<_>>(),
            vec![1, 2, 3, 5]
        );
        let p1 = part(&t, 1);
        assert_eq!(
            (
                p1.start,
                p1.size,
                p1.name.as_str(),
                p1.type_guid.as_str(),
                p1.uuid.as_str()
            ),
            (
                2048,
                65536,
                "p1",
                t0,
                "53F2E871-F468-437C-B90D-F3C6409DF81A"
            )
        );
        assert_eq!(part(&t, 2), part(&before, 2));
        let p3 = part(&t, 3);
        assert_eq!(
            (
                p3.start,
                p3.size,
                p3.name.as_str(),
                p3.type_guid.as_str(),
                p3.uuid.as_str()
            ),
            (
                198656,
                262144,
                "new-biggest",
                "6050E8FC-1E31-473B-BCC0-714E32FCB09D",
                "F14984BC-6F08-4885-B668-526263469A00"
            )
        );
        assert_eq!(part(&t, 5), part(&before, 5));
        assert_eq!(l.kernel_nodes(), vec![1, 2, 3, 5]);
        gpt_is_valid(l.dev());
        if let Some(b) = &busy {
            b.check("booted");
        }
        assert_eq!(l.kernel_layout(), l.layout());
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn ignition_partition_match_recreate_delete_add() {
    must_be_root();
    // Fresh (the kernel knows no partition yet), then booted.
    for booted in [false, true] {
        // "partition.match.recreate.delete.add": 1 kept, 2 recreated twice as large over 3,
        // which is deleted further down the list, 4 added.
        let l = ignition_disk(
            264225,
            &[
                (
                    2048,
                    65536,
                    "important-data",
                    LINUX,
                    "11111111-1111-4111-8111-111111111111",
                ),
                (
                    67584,
                    65536,
                    "ephemeral-data",
                    LINUX,
                    "22222222-2222-4222-8222-222222222222",
                ),
                (
                    133120,
                    131072,
                    "bunch-of-junk",
                    LINUX,
                    "33333333-3333-4333-8333-333333333333",
                ),
            ],
            booted,
        );
        let before = l.table();
        // On a booted disk an untouched partition is in use throughout.
        let busy = booted.then(|| Busy::new(l.part(1), Use::Mounted));
        ok(disk(
            &l,
            serde_json::json!([
            {"label": "important-data", "number": 1, "startMiB": 1, "sizeMiB": 32},
            {"label": "ephemeral-data", "number": 2, "startMiB": 33, "sizeMiB": 64,
             "wipePartitionEntry": true},
            {"number": 3, "shouldExist": false, "wipePartitionEntry": true},
            {"label": "even-more-data", "number": 4, "startMiB": 97, "sizeMiB": 32}]),
        ));
        let t = l.table();
        assert_eq!(part(&t, 1), part(&before, 1));
        let p2 = part(&t, 2);
        assert_eq!(
            (p2.start, p2.size, p2.name.as_str()),
            (67584, 131072, "ephemeral-data")
        );
        assert_ne!(p2.uuid, "22222222-2222-4222-8222-222222222222");
        let p4 = part(&t, 4);
        assert_eq!(
            (p4.start, p4.size, p4.name.as_str()),
            (198656, 65536, "even-more-data")
        );
        assert_eq!(t.len(), 3);
        assert_eq!(l.kernel_nodes(), vec![1, 2, 4]);
        gpt_is_valid(l.dev());
        if let Some(b) = &busy {
            b.check("booted");
        }
        assert_eq!(l.kernel_layout(), l.layout());
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn ignition_partition_no_op_nonexistent() {
    must_be_root();
    // "partition.no-op.nonexistent": numbers that are not there, 999 beyond any table.
    let l = Loop::disk(64, 512, Some(TWO));
    let before = std::fs::read(&l.img).unwrap();
    // And a blank 1 MiB disk, as small as the suite's: no table is written on it.
    let tiny = Loop::disk(1, 512, None);
    ok(serde_json::json!({"disks": [
        {"device": l.dev(), "partitions": [
            {"number": 10, "shouldExist": false}, {"number": 11, "shouldExist": false},
            {"number": 999, "shouldExist": false}]},
        {"device": tiny.dev(), "partitions": [
            {"number": 1, "shouldExist": false}, {"number": 11, "shouldExist": false},
            {"number": 999, "shouldExist": false}]}]}));
    assert!(std::fs::read(&l.img).unwrap() == before);
    assert!(std::fs::read(&tiny.img).unwrap().iter().all(|&b| b == 0));
    // 999 that should exist cannot be made: a clear error, nothing written.
    fails(
        disk(&l, serde_json::json!([{"number": 999, "sizeMiB": 1}])),
        "partition number 999 is outside 1..=128",
    );
    assert!(std::fs::read(&l.img).unwrap() == before);
}

// ---------- filesystems: Ignition's reuse and path rules ----------

/// Writes stale ZFS uberblocks into the two labels at the end of `dev` (L2 and L3, 256 KiB each;
/// uberblock ring at 128 KiB into a label, 1 KiB slots), as an old pool leaves them behind when
/// mkfs.ext4 only rewrites the start of the device. libblkid wants 4 uberblocks for zfs_member.
fn stale_zfs_labels(dev: &str) {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::OpenOptions::new().write(true).open(dev).unwrap();
    let size = f.seek(SeekFrom::End(0)).unwrap();
    let align = size % (256 << 10);
    for label in [size - (512 << 10) - align, size - (256 << 10) - align] {
        for slot in 0..4u64 {
            let mut ub = [0u8; 16];
            ub[..8].copy_from_slice(&0x00ba_b10cu64.to_le_bytes()); // ub_magic
            ub[8..].copy_from_slice(&5000u64.to_le_bytes()); // ub_version
            f.write_all_at(&ub, label + (128 << 10) + slot * 1024)
                .unwrap();
        }
    }
    f.sync_all().unwrap();
}

#[test]
#[ignore = "needs root: make test-root"]
fn ambivalent_ext4_with_stale_zfs_labels_is_reused_like_ignition() {
    must_be_root();
    // "filesystem.reuse.ambivalent": ext4 plus stale ZFS labels; the config keeps that ext4.
    need("mount");
    let l = Loop::disk(96, 512, None);
    let p1 = l.part(1);
    let (label, uuid) = ("some-label", "f63bf118-f6d7-40a3-b64c-a92b05a7f9ee");
    let fs = serde_json::json!({"device": p1, "format": "ext4", "label": label, "uuid": uuid});
    ok(
        serde_json::json!({"disks": [{"device": l.dev(), "partitions": [{"number": 1, "sizeMiB": 64}]}],
        "filesystems": [fs.clone()]}),
    );
    let mnt = TempDir::new("disks");
    sh("mount", &[&p1, mnt.0.to_str().unwrap()]);
    std::fs::create_dir(mnt.0.join("foo")).unwrap();
    std::fs::write(mnt.0.join("foo/bar"), "example file\n").unwrap();
    sh("umount", &[mnt.0.to_str().unwrap()]);
    stale_zfs_labels(&p1);
    // Another tool sees both signatures and will not pick one.
    let out = Command::new("blkid")
        .args(["-p", "-c", "/dev/null", &p1])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("ambivalent"), "blkid -p: {text}");
    let wipefs = sh("wipefs", &["--no-act", "-O", "TYPE", "-n", &p1]);
    assert!(
        wipefs.contains("zfs_member") && wipefs.contains("ext4"),
        "{wipefs}"
    );
    let before = std::fs::read(&l.img).unwrap();

    // A config that asks for something else is refused (Ignition too), naming the ambiguity.
    for other in [
        serde_json::json!({"device": p1, "format": "xfs"}),
        serde_json::json!({"device": p1, "format": "ext4", "label": "other"}),
        serde_json::json!({"device": p1, "format": "none"}),
    ] {
        fails(
            serde_json::json!({"filesystems": [other]}),
            "more than one signature",
        );
    }
    // The matching one is reused: nothing written, the data still there.
    let err = ok(serde_json::json!({"filesystems": [fs.clone()]}));
    assert!(err.contains("ambivalent"), "a warning is logged:\n{err}");
    assert!(
        std::fs::read(&l.img).unwrap() == before,
        "reuse wrote to the disk"
    );
    sh("mount", &["-t", "ext4", &p1, mnt.0.to_str().unwrap()]);
    let back = std::fs::read_to_string(mnt.0.join("foo/bar"));
    sh("umount", &[mnt.0.to_str().unwrap()]);
    assert_eq!(back.unwrap(), "example file\n");

    // wipeFilesystem clears every signature: a clean ext4 afterwards.
    let mut wipe = fs.clone();
    wipe["wipeFilesystem"] = true.into();
    ok(serde_json::json!({"filesystems": [wipe]}));
    let b = blkid(&p1);
    assert_eq!(
        (b["TYPE"].as_str(), b["LABEL"].as_str(), b["UUID"].as_str()),
        ("ext4", label, uuid)
    );
    assert!(!sh("wipefs", &["--no-act", "-n", &p1]).contains("zfs_member"));
}

#[test]
#[ignore = "needs root: make test-root"]
fn swap_and_none_with_a_path_are_made_and_never_mounted() {
    must_be_root();
    // "filesystem.create.swap.wipe" and the erase-a-block-device cases: a path on a swap or
    // none filesystem is valid and ignored when mounting.
    let l = Loop::disk(64, 512, None);
    let (p1, p2) = (l.part(1), l.part(2));
    let state = TempDir::new("disks");
    let root = TempDir::new("disks");
    let cfg = serde_json::json!({"ignition": {"version": "3.4.0"}, "storage": {
        "disks": [{"device": l.dev(), "partitions": [{"number": 1, "sizeMiB": 16}, {"number": 2, "sizeMiB": 16}]}],
        "filesystems": [
            {"device": p1, "format": "swap", "path": "/tmp0", "label": "OEM",
             "uuid": "7c4b1a2e-1111-4222-8333-444455556666", "wipeFilesystem": true},
            {"device": p2, "format": "none", "path": "/tmp1", "wipeFilesystem": true}],
        "files": [{"path": "/etc/marker", "contents": {"source": "data:,x"}}]}});
    std::fs::write(state.0.join("config.json"), cfg.to_string()).unwrap();
    // Something to erase on partition 2 first.
    ok(
        serde_json::json!({"disks": [{"device": l.dev(), "partitions": [{"number": 1, "sizeMiB": 16}, {"number": 2, "sizeMiB": 16}]}],
        "filesystems": [{"device": p2, "format": "ext4"}]}),
    );
    assert_eq!(blkid(&p2)["TYPE"], "ext4");
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["run", "--stage", "disks", "--stage", "files", "--state-dir"])
        .arg(&state.0)
        .arg("--root")
        .arg(&root.0)
        .args(["--device-timeout", "5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b = blkid(&p1);
    assert_eq!(
        (b["TYPE"].as_str(), b["LABEL"].as_str(), b["UUID"].as_str()),
        ("swap", "OEM", "7c4b1a2e-1111-4222-8333-444455556666")
    );
    assert!(!blkid(&p2).contains_key("TYPE"), "partition 2 erased");
    assert!(root.0.join("etc/marker").exists());
    assert!(!root.0.join("tmp0").exists() && !root.0.join("tmp1").exists());
    assert!(!support::mounted_under(&root.0));
}

// ---------- kernel partition updates on a disk whose partitions the kernel knows ----------
//
// At boot, a kernel that parses partition tables has a node for every partition of the disk
// (Ignition's blackbox suite attaches its images with `losetup -P`). This kernel parses none:
// the tests attach with partscan on and add the nodes with `partx -a`, as that kernel would
// have them. The agent must then delete, resize and add nodes in that order (a partition that
// grows into the space of one deleted further down the list is refused with EBUSY while that
// one is still there), and never re-read the whole table while a partition is in use.

impl Loop {
    /// A disk of `size_mib` MiB laid out by `script` (sfdisk), attached with partscan on, with
    /// a kernel node for each partition (`partx -a`), as a kernel that parses tables has them.
    fn booted(size_mib: u64, script: &str) -> Loop {
        Loop::booted_bytes(size_mib << 20, script)
    }
    fn booted_bytes(bytes: u64, script: &str) -> Loop {
        need("partx");
        let l = Loop::with_partscan(bytes, 512, |img| {
            need("sfdisk");
            support::sh(
                "sfdisk",
                &["-q", img.to_str().unwrap()],
                Some(script.as_bytes()),
            );
        });
        sh("partx", &["-a", l.dev()]);
        assert_eq!(l.kernel_layout(), l.layout(), "partx -a");
        l
    }
    /// (number, start, size) in sectors, from the table on disk.
    fn layout(&self) -> Vec<(u32, u64, u64)> {
        self.table()
            .iter()
            .map(|p| (p.number, p.start, p.size))
            .collect()
    }
    /// (number, start, size) in sectors, as the kernel has the partitions (/sys/block).
    fn kernel_layout(&self) -> Vec<(u32, u64, u64)> {
        agent::blockdev::kernel::kernel_partitions(self.name())
            .into_iter()
            .map(|(n, s, l)| (n, s / 512, l / 512))
            .collect()
    }
}

/// Device number of a node.
fn rdev(node: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(node)
        .unwrap_or_else(|e| panic!("{node}: {e}"))
        .rdev()
}

#[derive(Clone, Copy, Debug)]
enum Use {
    /// ext4 with a file, mounted.
    Mounted,
    /// Held open by the test, a marker written in it.
    Open,
}

/// A partition the test keeps in use while the agent runs; unmounted/closed on drop (before
/// the loop device goes: declare it after the [`Loop`]).
struct Busy {
    node: String,
    rdev: u64,
    how: Use,
    open: Option<File>,
    mnt: Option<PathBuf>,
    _dir: TempDir,
}

const MARKER: &[u8] = b"this partition was in use";

impl Busy {
    fn new(node: String, how: Use) -> Busy {
        let dir = TempDir::new("busy");
        let (mut open, mut mnt) = (None, None);
        match how {
            Use::Mounted => {
                sh("mkfs.ext4", &["-q", "-F", &node]);
                sh("mount", &[&node, dir.0.to_str().unwrap()]);
                mnt = Some(dir.0.clone());
            }
            Use::Open => {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&node)
                    .unwrap();
                f.write_all_at(MARKER, 8192).unwrap();
                f.sync_all().unwrap();
                open = Some(f);
            }
        }
        let b = Busy {
            rdev: rdev(&node),
            node,
            how,
            open,
            mnt,
            _dir: dir,
        };
        if let Some(m) = &b.mnt {
            std::fs::write(m.join("marker"), MARKER).unwrap();
        }
        b
    }

    /// The partition is still what it was: the same node (device number), still mounted with
    /// its file, or its open handle still reading the marker.
    #[track_caller]
    fn check(&self, case: &str) {
        assert_eq!(rdev(&self.node), self.rdev, "{case}: node {}", self.node);
        match self.how {
            Use::Mounted => {
                let m = self.mnt.as_ref().unwrap();
                assert!(support::mounted_under(m), "{case}: {} unmounted", self.node);
                assert_eq!(std::fs::read(m.join("marker")).unwrap(), MARKER, "{case}");
            }
            Use::Open => {
                let mut buf = vec![0u8; MARKER.len()];
                self.open
                    .as_ref()
                    .unwrap()
                    .read_exact_at(&mut buf, 8192)
                    .unwrap();
                assert_eq!(buf, MARKER, "{case}");
            }
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.open = None;
        if let Some(m) = &self.mnt {
            let _ = Command::new("umount").arg(m).status();
        }
    }
}

/// Four partitions a, b, c, d of 16 MiB from 1 MiB on, on a 128 MiB disk.
const FOUR: &str = "label: gpt\nstart=2048, size=32768, name=a\nstart=34816, size=32768, name=b\nstart=67584, size=32768, name=c\nstart=100352, size=32768, name=d\n";

/// (number, start MiB, size MiB) in sectors.
fn mib(parts: &[(u32, u64, u64)]) -> Vec<(u32, u64, u64)> {
    parts
        .iter()
        .map(|&(n, s, l)| (n, s * MIB, l * MIB))
        .collect()
}

/// The layouts of Ignition's blackbox partition cases that change partitions the kernel
/// knows, each with another partition mounted or open (or none: a whole-table re-read would
/// then drop every node): the disk and the kernel end with the planned layout, and the
/// partitions the config did not change keep their entries and nodes.
#[test]
#[ignore = "needs root: make test-root"]
fn kernel_updates_delete_then_resize_then_add() {
    must_be_root();
    // (what, the partition kept in use, the disk's config, the layout expected).
    type Case = (
        &'static str,
        Option<(u32, Use)>,
        Value,
        Vec<(u32, u64, u64)>,
    );
    let cases: Vec<Case> = vec![
        (
            "delete 3, grow 2 into its space",
            Some((1, Use::Mounted)),
            serde_json::json!({"partitions": [
                {"number": 2, "resize": true, "sizeMiB": 32},
                {"number": 3, "shouldExist": false, "wipePartitionEntry": true}]}),
            mib(&[(1, 1, 16), (2, 17, 32), (4, 49, 16)]),
        ),
        (
            "delete 2, grow 1 into its space (nothing in use)",
            None,
            serde_json::json!({"partitions": [
                {"number": 1, "resize": true, "sizeMiB": 32},
                {"number": 2, "shouldExist": false, "wipePartitionEntry": true}]}),
            mib(&[(1, 1, 32), (3, 33, 16), (4, 49, 16)]),
        ),
        (
            // partition.match.recreate.delete.add
            "recreate 2 twice as large over 3, delete 3, add 5",
            Some((1, Use::Open)),
            serde_json::json!({"partitions": [
                {"number": 1, "label": "a", "startMiB": 1, "sizeMiB": 16},
                {"number": 2, "label": "b2", "startMiB": 17, "sizeMiB": 32, "wipePartitionEntry": true},
                {"number": 3, "shouldExist": false, "wipePartitionEntry": true},
                {"number": 5, "label": "e", "startMiB": 65, "sizeMiB": 16}]}),
            mib(&[(1, 1, 16), (2, 17, 32), (4, 49, 16), (5, 65, 16)]),
        ),
        (
            "move 2 to the end, grow 1 into its place",
            Some((4, Use::Mounted)),
            serde_json::json!({"partitions": [
                {"number": 1, "resize": true, "sizeMiB": 24},
                {"number": 2, "label": "b", "startMiB": 97, "sizeMiB": 16, "wipePartitionEntry": true}]}),
            mib(&[(1, 1, 24), (2, 97, 16), (3, 33, 16), (4, 49, 16)]),
        ),
        (
            "delete 2, add 6 and 7 in its space",
            Some((4, Use::Mounted)),
            serde_json::json!({"partitions": [
                {"number": 2, "shouldExist": false, "wipePartitionEntry": true},
                {"number": 6, "label": "f", "startMiB": 17, "sizeMiB": 8},
                {"number": 7, "label": "g", "startMiB": 25, "sizeMiB": 8}]}),
            mib(&[(1, 1, 16), (3, 33, 16), (4, 49, 16), (6, 17, 8), (7, 25, 8)]),
        ),
        (
            "grow 4, add 5 after it",
            Some((1, Use::Mounted)),
            serde_json::json!({"partitions": [
                {"number": 4, "resize": true, "sizeMiB": 32},
                {"number": 5, "label": "e", "startMiB": 81, "sizeMiB": 16}]}),
            mib(&[
                (1, 1, 16),
                (2, 17, 16),
                (3, 33, 16),
                (4, 49, 32),
                (5, 81, 16),
            ]),
        ),
        (
            // partition.create.wipetable
            "wipeTable: 1 grows over 2 and 3, 2 moves (nothing in use)",
            None,
            serde_json::json!({"wipeTable": true, "partitions": [
                {"number": 1, "label": "one", "startMiB": 1, "sizeMiB": 40},
                {"number": 2, "label": "two", "sizeMiB": 16}]}),
            mib(&[(1, 1, 40), (2, 41, 16)]),
        ),
    ];
    for (case, busy, disk, expected) in cases {
        let l = Loop::booted(128, FOUR);
        let before = l.table();
        let busy = busy.map(|(n, how)| Busy::new(l.part(n), how));
        let mut d = disk;
        d["device"] = l.dev().into();
        let (s, err) = agent(serde_json::json!({"disks": [d]}), &[]);
        assert!(s, "{case}: agent failed:\n{err}");
        assert!(
            !err.contains("BLKRRPART"),
            "{case}: re-read the table:\n{err}"
        );
        assert_eq!(l.layout(), expected, "{case}: table");
        assert_eq!(l.kernel_layout(), expected, "{case}: kernel");
        for &(n, _, _) in &expected {
            assert!(Path::new(&l.part(n)).exists(), "{case}: no node {n}");
        }
        // What the config left alone is as it was.
        let after = l.table();
        for p in &before {
            if let Some(q) = after.iter().find(|q| q.number == p.number)
                && (q.start, q.size) == (p.start, p.size)
                && !case.starts_with("wipeTable")
            {
                assert_eq!(q, p, "{case}: partition {} changed", p.number);
            }
        }
        if let Some(b) = &busy {
            b.check(case);
        }
        gpt_is_valid(l.dev());
    }
}

/// When the kernel refuses a partition update (the test failpoint `blkpg` refuses the first
/// one), the whole table is re-read only if no partition of the disk is in use: with one
/// mounted, the stage fails, the table is put back and every node stays; with none, the
/// re-read happens and the nodes it dropped are added again.
#[test]
#[ignore = "needs root: make test-root"]
fn a_refused_update_never_rereads_a_disk_in_use() {
    must_be_root();
    let grow = serde_json::json!([
        {"number": 2, "resize": true, "sizeMiB": 32},
        {"number": 3, "shouldExist": false, "wipePartitionEntry": true}]);
    let expected = mib(&[(1, 1, 16), (2, 17, 32), (4, 49, 16)]);

    let l = Loop::booted(128, FOUR);
    let before = l.layout();
    let busy = Busy::new(l.part(1), Use::Mounted);
    let (s, err) = agent(disk(&l, grow.clone()), &[("AGENT_FAILPOINTS", "blkpg")]);
    assert!(!s, "should have failed:\n{err}");
    assert!(
        err.contains("failpoint blkpg triggered") && err.contains("not re-reading"),
        "{err}"
    );
    assert!(err.contains("is mounted on"), "{err}");
    assert_eq!(l.layout(), before, "the table is put back");
    assert_eq!(l.kernel_layout(), before, "every node stays");
    busy.check("in use");
    drop(busy);
    drop(l);

    let l = Loop::booted(128, FOUR);
    let (s, err) = agent(disk(&l, grow), &[("AGENT_FAILPOINTS", "blkpg")]);
    assert!(s, "agent failed:\n{err}");
    assert!(err.contains("BLKRRPART"), "{err}");
    assert_eq!(l.layout(), expected);
    assert_eq!(l.kernel_layout(), expected);
}
