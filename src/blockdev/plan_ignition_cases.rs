//! The partition layouts of Ignition's own blackbox suite (coreos/ignition
//! `tests/positive/partitions/*.go`), run through the config parser and the planner. Each case
//! builds the input disk the way the suite does (`tests/types`: partitions back to back from
//! sector 34, each start aligned up to the disk's alignment; the image as large as the bigger of
//! the input and expected layouts needs), parses the case's config (validation included), plans,
//! and compares the resulting table and the action of every partition with what Ignition
//! produces. The suite itself checks sizes, labels and GUIDs; starts are checked here too (they
//! follow from sgdisk's placement rules).

use super::*;

/// The suite's alignments: `IgnitionAlignment` (1 MiB) and `DefaultAlignment` (2 MiB).
const IGN: u64 = 2048;
const DEF: u64 = 4096;

/// Some of the suite's GUIDs (its `$uuidN` variables get fresh values per run: any will do).
const U0: &str = "316f19f9-9e0f-431e-859e-ae6908dbe8ca";
const U1: &str = "53f2e871-f468-437c-b90d-f3c6409df81a";
const U2: &str = "6050e8fc-1e31-473b-bcc0-714e32fcb09d";
const U3: &str = "f14984bc-6f08-4885-b668-526263469a00";
const U4: &str = "3ed3993f-0016-422b-b134-09fcba6f66ef";
const ROOT_TYPE: &str = "3884dd41-8582-4404-b9a8-e9b84f2df50e";
const EFI_TYPE: &str = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b";

/// One partition of a suite layout; `number` 0 is a blank gap (`TypeCode: "blank"`).
#[derive(Clone, Copy)]
struct P {
    number: u32,
    len: u64,
    label: &'static str,
    type_guid: Option<&'static str>,
    guid: Option<&'static str>,
}

fn p(number: u32, len: u64, label: &'static str) -> P {
    P {
        number,
        len,
        label,
        type_guid: None,
        guid: None,
    }
}

fn blank(len: u64) -> P {
    p(0, len, "")
}

impl P {
    fn ty(mut self, t: &'static str) -> P {
        self.type_guid = Some(t);
        self
    }
    fn id(mut self, g: &'static str) -> P {
        self.guid = Some(g);
        self
    }
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// `Disk.CalculateImageSize` of the suite, in sectors.
fn image_sectors(align: u64, parts: &[P]) -> u64 {
    align_up(63, align) + parts.iter().map(|x| align_up(x.len, align)).sum::<u64>() + 33
}

/// `Disk.SetOffsets` of the suite: the table the case starts from.
fn entries(align: u64, parts: &[P]) -> Vec<Entry> {
    let mut offset = 34;
    let mut out = Vec::new();
    for (i, x) in parts.iter().enumerate() {
        offset = align_up(offset, align);
        if x.number != 0 {
            out.push(Entry {
                number: x.number,
                start: offset,
                end: offset + x.len - 1,
                type_guid: x
                    .type_guid
                    .map(|t| Uuid::parse_str(t).unwrap())
                    .unwrap_or(LINUX_FS_TYPE),
                guid: x
                    .guid
                    .map(|t| Uuid::parse_str(t).unwrap())
                    .unwrap_or(Uuid::from_u128(0xA000 + i as u128)),
                name: x.label.into(),
                attrs: 0,
            });
        }
        offset += x.len;
    }
    out
}

/// `types.GetBaseDisk()`: EFI-SYSTEM (1), OEM (6), ROOT (9), 128 MiB each, 2 MiB aligned.
fn base_disk() -> Vec<P> {
    vec![
        p(1, 262144, "EFI-SYSTEM").ty(EFI_TYPE),
        p(6, 262144, "OEM"),
        p(9, 262144, "ROOT").ty(ROOT_TYPE),
    ]
}

/// What a partition looks like afterwards: (number, start, size, label) and, when given, the
/// GUIDs.
struct Want {
    number: u32,
    start: u64,
    size: u64,
    label: &'static str,
    type_guid: Option<&'static str>,
    guid: Option<&'static str>,
}

fn w(number: u32, start: u64, size: u64, label: &'static str) -> Want {
    Want {
        number,
        start,
        size,
        label,
        type_guid: None,
        guid: None,
    }
}

impl Want {
    fn ty(mut self, t: &'static str) -> Want {
        self.type_guid = Some(t);
        self
    }
    fn id(mut self, g: &'static str) -> Want {
        self.guid = Some(g);
        self
    }
}

struct Case {
    name: &'static str,
    align: u64,
    input: Vec<P>,
    /// The expected layout's partition lengths (the image is sized for the larger one).
    out_lens: Vec<u64>,
    /// `{"device": "$disk", <this>}` for the one disk of the case.
    disk: &'static str,
    want: Vec<Want>,
    actions: Vec<(u32, Action)>,
}

fn run_case(c: &Case) {
    let out_parts: Vec<P> = c.out_lens.iter().map(|&l| p(1, l, "")).collect();
    let sectors = image_sectors(c.align, &c.input).max(image_sectors(c.align, &out_parts));
    let g = Geometry::new(512, sectors * 512).unwrap();
    let es = entries(c.align, &c.input);
    let table = (!c.input.is_empty()).then(|| Table {
        disk_guid: Uuid::from_u128(7),
        entries: es,
    });
    let text = format!(
        r#"{{"ignition": {{"version": "3.2.0"}}, "storage": {{"disks": [{{"device": "/dev/vdb", {}}}]}}}}"#,
        c.disk
    );
    let parsed = spec::config::parse(text.as_bytes())
        .unwrap_or_else(|r| panic!("{}: config rejected: {r:?}", c.name))
        .config;
    let d = &parsed.storage.disks[0];
    let specs: Vec<Spec> = d
        .partitions
        .iter()
        .map(|x| Spec::from_config(x).unwrap_or_else(|e| panic!("{}: {e:#}", c.name)))
        .collect();
    let mut k = 0u128;
    let plan = plan(
        table.as_ref(),
        &g,
        d.wipe_table.unwrap_or(false),
        &specs,
        &mut || {
            k += 1;
            Uuid::from_u128(0xF000 + k)
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e:#}", c.name));
    let got: Vec<(u32, u64, u64, String)> = plan
        .new
        .entries
        .iter()
        .map(|e| (e.number, e.start, e.size(), e.name.clone()))
        .collect();
    let want: Vec<(u32, u64, u64, String)> = c
        .want
        .iter()
        .map(|x| (x.number, x.start, x.size, x.label.to_string()))
        .collect();
    assert_eq!(got, want, "{}: table\n{plan}", c.name);
    for x in &c.want {
        let e = plan.new.get(x.number).unwrap();
        if let Some(t) = x.type_guid {
            assert_eq!(e.type_guid, Uuid::parse_str(t).unwrap(), "{}: type", c.name);
        }
        if let Some(gd) = x.guid {
            assert_eq!(e.guid, Uuid::parse_str(gd).unwrap(), "{}: guid", c.name);
        }
    }
    for (n, a) in &c.actions {
        let got = plan
            .parts
            .iter()
            .find(|x| x.number == *n)
            .map(|x| &x.action);
        assert_eq!(got, Some(a), "{}: action of partition {n}\n{plan}", c.name);
    }
    let unchanged = c
        .actions
        .iter()
        .all(|(_, a)| matches!(a, Action::Keep | Action::Absent | Action::Unlisted));
    assert_eq!(plan.changes(), !unchanged, "{}: changes()", c.name);
}

use Action::*;

#[test]
fn partitions_complex() {
    // complex-mb.go "partitions.complex": 3 and 4 go, 3 comes back in the largest block they
    // leave (with the blank after them), 1 is recreated smaller, 2 and 5 stay.
    run_case(&Case {
        name: "partitions.complex",
        align: IGN,
        input: vec![
            p(1, 131072, "p1").ty(U0).id(U4),
            p(2, 65536, "dont-delete"),
            p(3, 65536, "garbo-town"),
            blank(131072),
            p(4, 65536, "more-junk"),
            p(5, 65536, "dont-delete2"),
            blank(131072),
        ],
        out_lens: vec![65536, 65536, 262144, 65536, 131072],
        disk: r#""wipeTable": false, "partitions": [
            {"label": "p1", "number": 1, "startMiB": 1, "sizeMiB": 32,
             "typeGuid": "316f19f9-9e0f-431e-859e-ae6908dbe8ca",
             "guid": "53f2e871-f468-437c-b90d-f3c6409df81a", "wipePartitionEntry": true},
            {"label": "dont-delete", "number": 2, "sizeMiB": 32},
            {"label": "new-biggest", "number": 3, "sizeMiB": 0, "startMiB": 0,
             "typeGuid": "6050e8fc-1e31-473b-bcc0-714e32fcb09d",
             "guid": "f14984bc-6f08-4885-b668-526263469a00", "wipePartitionEntry": true},
            {"number": 4, "shouldExist": false, "wipePartitionEntry": true},
            {"number": 9, "shouldExist": false}]"#,
        want: vec![
            w(1, 2048, 65536, "p1").ty(U0).id(U1),
            w(2, 133120, 65536, "dont-delete"),
            w(3, 198656, 262144, "new-biggest").ty(U2).id(U3),
            w(5, 460800, 65536, "dont-delete2"),
        ],
        actions: vec![
            (1, Recreate),
            (2, Keep),
            (3, Recreate),
            (4, Delete),
            (5, Unlisted),
            (9, Absent),
        ],
    });
}

#[test]
fn partition_match_recreate_delete_add() {
    // mixed.go: 2 grows into the space of 3, which is deleted later in the list.
    run_case(&Case {
        name: "partition.match.recreate.delete.add",
        align: IGN,
        input: vec![
            p(1, 65536, "important-data").ty(U0).id(U1),
            p(2, 65536, "ephemeral-data").ty(U2).id(U0),
            p(3, 131072, "bunch-of-junk").ty(U2).id(U0),
        ],
        out_lens: vec![65536, 131072, 65536],
        disk: r#""partitions": [
            {"label": "important-data", "number": 1, "startMiB": 1, "sizeMiB": 32},
            {"label": "ephemeral-data", "number": 2, "startMiB": 33, "sizeMiB": 64,
             "wipePartitionEntry": true},
            {"number": 3, "shouldExist": false, "wipePartitionEntry": true},
            {"label": "even-more-data", "number": 4, "startMiB": 97, "sizeMiB": 32}]"#,
        want: vec![
            w(1, 2048, 65536, "important-data").ty(U0).id(U1),
            w(2, 67584, 131072, "ephemeral-data"),
            w(4, 198656, 65536, "even-more-data"),
        ],
        actions: vec![(1, Keep), (2, Recreate), (3, Delete), (4, Create)],
    });
}

#[test]
fn partition_match_recreate() {
    // mixed.go "partition.match.recreate": nothing matches, everything recreated in place.
    run_case(&Case {
        name: "partition.match.recreate",
        align: IGN,
        input: vec![
            p(1, 65536, "important-data").ty(U0),
            p(2, 65536, "ephemeral-data").id(U0),
            p(3, 131072, "bunch-of-junk"),
        ],
        out_lens: vec![65536, 65536, 65536],
        disk: r#""partitions": [
            {"label": "important-data", "number": 1, "startMiB": 1, "sizeMiB": 32,
             "wipePartitionEntry": true, "typeGuid": "53f2e871-f468-437c-b90d-f3c6409df81a"},
            {"label": "ephemeral-data", "number": 2, "startMiB": 33, "sizeMiB": 32,
             "wipePartitionEntry": true, "guid": "53f2e871-f468-437c-b90d-f3c6409df81a"},
            {"label": "even-more-data", "number": 3, "startMiB": 65, "sizeMiB": 32,
             "wipePartitionEntry": true}]"#,
        want: vec![
            w(1, 2048, 65536, "important-data").ty(U1),
            w(2, 67584, 65536, "ephemeral-data").id(U1),
            w(3, 133120, 65536, "even-more-data"),
        ],
        actions: vec![(1, Recreate), (2, Recreate), (3, Recreate)],
    });
}

#[test]
fn partition_no_op_nonexistent() {
    // no-op.go: numbers that do not exist (999 cannot exist at all) with shouldExist false.
    let base = base_disk();
    run_case(&Case {
        name: "partition.no-op.nonexistent disk0",
        align: DEF,
        input: base.clone(),
        out_lens: vec![],
        disk: r#""partitions": [
            {"number": 10, "shouldExist": false},
            {"number": 11, "shouldExist": false},
            {"number": 999, "shouldExist": false}]"#,
        want: vec![
            w(1, 4096, 262144, "EFI-SYSTEM"),
            w(6, 266240, 262144, "OEM"),
            w(9, 528384, 262144, "ROOT"),
        ],
        actions: vec![
            (10, Absent),
            (11, Absent),
            (999, Absent),
            (1, Unlisted),
            (9, Unlisted),
        ],
    });
    run_case(&Case {
        name: "partition.no-op.nonexistent disk1",
        align: IGN,
        input: vec![],
        out_lens: vec![],
        disk: r#""partitions": [
            {"number": 1, "shouldExist": false},
            {"number": 11, "shouldExist": false},
            {"number": 999, "shouldExist": false}]"#,
        want: vec![],
        actions: vec![(1, Absent), (11, Absent), (999, Absent)],
    });
}

#[test]
fn partition_no_op() {
    run_case(&Case {
        name: "partition.no-op",
        align: DEF,
        input: base_disk(),
        out_lens: vec![],
        disk: r#""partitions": []"#,
        want: vec![
            w(1, 4096, 262144, "EFI-SYSTEM"),
            w(6, 266240, 262144, "OEM"),
            w(9, 528384, 262144, "ROOT"),
        ],
        actions: vec![(1, Unlisted), (6, Unlisted), (9, Unlisted)],
    });
}

#[test]
fn partition_create_with_and_without_start() {
    for (name, start) in [
        ("partition.create", ""),
        ("partition.create.withstartmib", r#""startMiB": 1,"#),
    ] {
        let disk = format!(
            r#""partitions": [{{"number": 1, {start} "sizeMiB": 32, "label": "create-partition",
              "typeGuid": "B921B045-1DF0-41C3-AF44-4C6F280D3FAE",
              "guid": "05AE8178-224E-4744-862A-4F4B042662D0"}}]"#
        );
        run_case(&Case {
            name,
            align: IGN,
            input: vec![],
            out_lens: vec![65536],
            disk: Box::leak(disk.into_boxed_str()),
            want: vec![
                w(1, 2048, 65536, "create-partition")
                    .ty("B921B045-1DF0-41C3-AF44-4C6F280D3FAE")
                    .id("05AE8178-224E-4744-862A-4F4B042662D0"),
            ],
            actions: vec![(1, Create)],
        });
    }
}

#[test]
fn partition_create_wipetable() {
    run_case(&Case {
        name: "partition.create.wipetable",
        align: IGN,
        input: vec![
            p(1, 65536, "important-data").id(U0),
            p(2, 131072, "ephemeral-data").id(U0),
        ],
        out_lens: vec![65536, 131072],
        disk: r#""wipeTable": true, "partitions": [
            {"label": "important-data", "number": 1, "sizeMiB": 32,
             "guid": "8A7A6E26-5E8F-4CCA-A654-46215D4696AC"},
            {"label": "ephemeral-data", "number": 2, "sizeMiB": 64,
             "guid": "A51034E6-26B3-48DF-BEED-220562AC7AD1"}]"#,
        want: vec![
            w(1, 2048, 65536, "important-data").id("8A7A6E26-5E8F-4CCA-A654-46215D4696AC"),
            w(2, 67584, 131072, "ephemeral-data").id("A51034E6-26B3-48DF-BEED-220562AC7AD1"),
        ],
        actions: vec![(1, Create), (2, Create)],
    });
}

#[test]
fn partition_append() {
    run_case(&Case {
        name: "partition.append",
        align: IGN,
        input: vec![
            p(1, 65536, "important-data"),
            p(2, 131072, "ephemeral-data"),
        ],
        out_lens: vec![65536, 131072, 65536, 65536],
        disk: r#""wipeTable": false, "partitions": [
            {"label": "additional-partition", "number": 3, "sizeMiB": 32},
            {"label": "additional-partition2", "number": 4, "sizeMiB": 32}]"#,
        want: vec![
            w(1, 2048, 65536, "important-data"),
            w(2, 67584, 131072, "ephemeral-data"),
            w(3, 198656, 65536, "additional-partition"),
            w(4, 264192, 65536, "additional-partition2"),
        ],
        actions: vec![(1, Unlisted), (2, Unlisted), (3, Create), (4, Create)],
    });
}

/// ROOT grown to 6352 MiB (fills the image sized for it): base disk + 12943360 + 65536 sectors.
fn resized_root_case(name: &'static str, disk: &'static str, action: Action) -> Case {
    Case {
        name,
        align: DEF,
        input: base_disk(),
        out_lens: vec![262144, 262144, 12943360 + 65536],
        disk,
        want: vec![
            w(1, 4096, 262144, "EFI-SYSTEM"),
            w(6, 266240, 262144, "OEM"),
            w(9, 528384, 13008896, "ROOT").ty(ROOT_TYPE),
        ],
        actions: vec![(9, action)],
    }
}

#[test]
fn partition_resizeroot_variants() {
    run_case(&resized_root_case(
        "partition.resizeroot",
        r#""partitions": [{"label": "ROOT", "number": 9, "sizeMiB": 6352,
            "typeGuid": "3884DD41-8582-4404-B9A8-E9B84F2DF50E",
            "guid": "3ED3993F-0016-422B-B134-09FCBA6F66EF", "wipePartitionEntry": true}]"#,
        Recreate,
    ));
    run_case(&resized_root_case(
        "partition.resizeExistingPartition",
        r#""wipeTable": false, "partitions": [{"label": "ROOT", "number": 9,
            "sizeMiB": 6352, "resize": true}]"#,
        Resize,
    ));
    run_case(&resized_root_case(
        "partition.resizeroot.withzeros",
        r#""partitions": [{"label": "ROOT", "number": 9, "startMiB": 0, "sizeMiB": 0,
            "typeGuid": "3884DD41-8582-4404-B9A8-E9B84F2DF50E", "wipePartitionEntry": true}]"#,
        Recreate,
    ));
}

#[test]
fn partition_create_startsize0_and_number0() {
    run_case(&Case {
        name: "partition.create.startsize0",
        align: IGN,
        input: vec![],
        out_lens: vec![65536],
        disk: r#""wipeTable": false, "partitions": [{"label": "fills-disk", "number": 1,
            "startMiB": 0, "sizeMiB": 0, "typeGuid": "316f19f9-9e0f-431e-859e-ae6908dbe8ca",
            "guid": "53f2e871-f468-437c-b90d-f3c6409df81a"}]"#,
        want: vec![w(1, 2048, 65536, "fills-disk").ty(U0).id(U1)],
        actions: vec![(1, Create)],
    });
    run_case(&Case {
        name: "partition.create.number0",
        align: IGN,
        input: vec![],
        out_lens: vec![65536, 65536, 65536],
        disk: r#""wipeTable": false, "partitions": [
            {"label": "uno", "sizeMiB": 32}, {"label": "dos", "sizeMiB": 32},
            {"label": "tres", "sizeMiB": 32}]"#,
        want: vec![
            w(1, 2048, 65536, "uno"),
            w(2, 67584, 65536, "dos"),
            w(3, 133120, 65536, "tres"),
        ],
        actions: vec![(1, Create), (2, Create), (3, Create)],
    });
}

#[test]
fn partition_verify_root_and_unspecified() {
    // ROOT already fills the disk: 0/0 matches it as it would be recreated.
    run_case(&Case {
        name: "partition.match.rootfillsdisk",
        align: DEF,
        input: base_disk(),
        out_lens: vec![],
        disk: r#""partitions": [{"label": "ROOT", "number": 9, "startMiB": 0, "sizeMiB": 0,
            "typeGuid": "3884DD41-8582-4404-B9A8-E9B84F2DF50E"}]"#,
        want: vec![
            w(1, 4096, 262144, "EFI-SYSTEM"),
            w(6, 266240, 262144, "OEM"),
            w(9, 528384, 262144, "ROOT"),
        ],
        actions: vec![(9, Keep)],
    });
    // Free space after ROOT, start/size not given: the existing ones count.
    let mut input = base_disk();
    input.push(blank(65536));
    run_case(&Case {
        name: "partition.match.unspecifieddontcare",
        align: DEF,
        input,
        out_lens: vec![],
        disk: r#""partitions": [{"label": "ROOT", "number": 9,
            "typeGuid": "3884DD41-8582-4404-B9A8-E9B84F2DF50E"}]"#,
        want: vec![
            w(1, 4096, 262144, "EFI-SYSTEM"),
            w(6, 266240, 262144, "OEM"),
            w(9, 528384, 262144, "ROOT"),
        ],
        actions: vec![(9, Keep)],
    });
}

#[test]
fn partition_number0_happens_last() {
    run_case(&Case {
        name: "partition.number0.last",
        align: IGN,
        input: vec![p(1, 65536, "foobar").ty(U0).id(U1)],
        out_lens: vec![65536, 65536],
        disk: r#""partitions": [{"label": "newpart", "sizeMiB": 32},
            {"number": 1, "label": "foobar"}]"#,
        want: vec![
            w(1, 2048, 65536, "foobar").ty(U0).id(U1),
            w(2, 67584, 65536, "newpart"),
        ],
        actions: vec![(1, Keep), (2, Create)],
    });
}

#[test]
fn partition_delete_one_and_all() {
    run_case(&Case {
        name: "partition.delete",
        align: IGN,
        input: vec![p(1, 65536, "deleteme")],
        out_lens: vec![],
        disk: r#""partitions": [{"number": 1, "shouldExist": false, "wipePartitionEntry": true}]"#,
        want: vec![],
        actions: vec![(1, Delete)],
    });
    let numbers = [1, 2, 3, 4, 6, 7, 9];
    let list: Vec<String> = numbers
        .iter()
        .map(|n| format!(r#"{{"number": {n}, "shouldExist": false, "wipePartitionEntry": true}}"#))
        .collect();
    let disk = format!(r#""partitions": [{}]"#, list.join(", "));
    run_case(&Case {
        name: "partition.deleteall",
        align: DEF,
        input: base_disk(),
        out_lens: vec![],
        disk: Box::leak(disk.into_boxed_str()),
        want: vec![],
        actions: vec![
            (1, Delete),
            (2, Absent),
            (3, Absent),
            (4, Absent),
            (6, Delete),
            (7, Absent),
            (9, Delete),
        ],
    });
}

#[test]
fn partition_verify_base_disk_with_and_without_wipe() {
    for wipe in [false, true] {
        let disk = format!(
            r#""partitions": [
            {{"label": "EFI-SYSTEM", "number": 1, "startMiB": 2, "sizeMiB": 128,
              "typeGuid": "C12A7328-F81F-11D2-BA4B-00A0C93EC93B", "wipePartitionEntry": {wipe}}},
            {{"label": "OEM", "number": 6, "startMiB": 130, "sizeMiB": 128,
              "typeGuid": "0FC63DAF-8483-4772-8E79-3D69D8477DE4", "wipePartitionEntry": {wipe}}},
            {{"label": "ROOT", "number": 9, "startMiB": 258, "sizeMiB": 128,
              "typeGuid": "3884DD41-8582-4404-B9A8-E9B84F2DF50E", "wipePartitionEntry": {wipe}}}]"#
        );
        run_case(&Case {
            name: if wipe {
                "partition.match.all.wipe"
            } else {
                "partition.match.all"
            },
            align: DEF,
            input: base_disk(),
            out_lens: vec![],
            disk: Box::leak(disk.into_boxed_str()),
            want: vec![
                w(1, 4096, 262144, "EFI-SYSTEM"),
                w(6, 266240, 262144, "OEM"),
                w(9, 528384, 262144, "ROOT"),
            ],
            actions: vec![(1, Keep), (6, Keep), (9, Keep)],
        });
    }
}

#[test]
fn unspecified_start_with_wipe_compares_against_the_pretend_layout() {
    // Ignition resolves an unspecified start/size with wipePartitionEntry like a 0: a partition
    // that is not where the largest free block begins is recreated there.
    run_case(&Case {
        name: "wipe.unspecified.moves",
        align: IGN,
        input: vec![blank(65536), p(1, 65536, "data"), blank(131072)],
        out_lens: vec![],
        disk: r#""partitions": [{"number": 1, "label": "data", "sizeMiB": 32,
            "wipePartitionEntry": true}]"#,
        want: vec![w(1, 2048, 65536, "data")],
        actions: vec![(1, Recreate)],
    });
    // The same without wipePartitionEntry: the existing start counts, kept.
    run_case(&Case {
        name: "nowipe.unspecified.keeps",
        align: IGN,
        input: vec![blank(65536), p(1, 65536, "data"), blank(131072)],
        out_lens: vec![],
        disk: r#""partitions": [{"number": 1, "label": "data", "sizeMiB": 32}]"#,
        want: vec![w(1, 67584, 65536, "data")],
        actions: vec![(1, Keep)],
    });
}

/// The config rules of these areas, as Ignition's validation has them
/// (`config/v3_*/types/{partition,disk,filesystem}.go`).
#[test]
fn ignition_validation_rules_for_partitions_and_filesystems() {
    let check = |storage: &str| {
        let text = format!(r#"{{"ignition": {{"version": "3.4.0"}}, "storage": {storage}}}"#);
        spec::config::parse(text.as_bytes())
            .map(|_| ())
            .map_err(|r| format!("{r:?}"))
    };
    let disk =
        |parts: &str| format!(r#"{{"disks": [{{"device": "/dev/vdb", "partitions": {parts}}}]}}"#);
    let fs = |f: &str| format!(r#"{{"filesystems": [{{"device": "/dev/vdb1", {f}}}]}}"#);
    let accepted = [
        // No range check on numbers: 999 that should not exist is a no-op.
        disk(r#"[{"number": 999, "shouldExist": false}]"#),
        disk(
            r#"[{"number": 3, "shouldExist": false, "wipePartitionEntry": true, "resize": false}]"#,
        ),
        disk(r#"[{"label": "x"}]"#),
        // A path on swap or none is valid; it is never mounted.
        fs(r#""format": "swap", "path": "/tmp0", "wipeFilesystem": true"#),
        fs(r#""format": "none", "path": "/tmp0", "wipeFilesystem": true"#),
        // No format: only wipeFilesystem: true (not false) needs one.
        fs(r#""wipeFilesystem": false"#),
        fs(r#""label": """#),
        // Adjacent, or placed by a 0 start: no overlap to check.
        disk(
            r#"[{"number": 1, "startMiB": 1, "sizeMiB": 4}, {"number": 2, "startMiB": 5, "sizeMiB": 4}]"#,
        ),
        disk(
            r#"[{"number": 1, "startMiB": 1, "sizeMiB": 4}, {"number": 2, "startMiB": 0, "sizeMiB": 4}]"#,
        ),
        fs(r#""format": "ext4", "label": "0123456789abcdef""#),
    ];
    for s in &accepted {
        assert!(check(s).is_ok(), "{s}: {:?}", check(s));
    }
    let rejected = [
        (disk(r#"[{"sizeMiB": 5}]"#), "number >= 1 or a label"),
        (disk(r#"[{"number": 1, "label": "a:b"}]"#), "':'"),
        (
            disk(r#"[{"number": 1, "shouldExist": false, "label": "x"}]"#),
            "may only set number",
        ),
        (
            disk(r#"[{"number": 1, "shouldExist": false}, {"label": "x"}]"#),
            "number 0",
        ),
        (fs(r#""wipeFilesystem": true"#), "format is required"),
        (
            disk(
                r#"[{"number": 1, "startMiB": 1, "sizeMiB": 4}, {"number": 2, "startMiB": 4, "sizeMiB": 4}]"#,
            ),
            "overlap",
        ),
        (
            disk(
                r#"[{"number": 1, "startMiB": 1, "sizeMiB": 8}, {"number": 2, "startMiB": 3, "sizeMiB": 0}]"#,
            ),
            "overlap",
        ),
        // Label limits count bytes, as mkfs does.
        (
            fs(r#""format": "ext4", "label": "ééééééééé""#),
            "16 characters (bytes)",
        ),
        (fs(r#""path": "/var""#), "format is required"),
    ];
    for (s, needle) in &rejected {
        let e = check(s).expect_err(s);
        assert!(e.contains(needle), "{s}: {e}");
    }
}
