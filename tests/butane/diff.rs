//! `agent butane` against real Butane v0.29.0 on generated inputs.
//! `tests/butane_diff/fixtures.jsonl.gz` holds Butane's verdicts, recorded by
//! `tests/butane_diff/run.py --record` from inputs of `tests/butane_diff/gen.py` (every variant
//! and version; openshift as `butane --raw`, or as a MachineConfig for the cases marked `mc`;
//! `--files-dir tests/butane_diff/files`): the exit status, the output, the set of paths
//! Butane warned at (which decides `--strict`) and, where it refused, the set of paths it
//! reported errors at. The translation must agree on all four, a MachineConfig byte for byte
//! (error wording and positions are not compared).
//! Cases that still differ are listed in `tests/butane_diff/known.tsv`; the test fails on any
//! other difference and on a listed case that now agrees. Go is never needed here.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

use serde_json::Value;

fn b64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("base64"),
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').collect();
    let mut out = Vec::new();
    for ch in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in ch.iter().enumerate() {
            n |= u32::from(val(*c)) << (18 - 6 * i);
        }
        let n = n.to_be_bytes();
        out.extend_from_slice(&n[1..ch.len()]);
    }
    out
}

#[test]
fn agrees_with_butane_v0_29() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/butane_diff");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(dir.join("fixtures.jsonl.gz")).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let known: BTreeMap<u64, String> = std::fs::read_to_string(dir.join("known.tsv"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let mut f = l.split('\t');
            let id = f.next().unwrap().parse().unwrap();
            (id, f.next().unwrap().to_string())
        })
        .collect();
    let files = runtime::butane_files::DirFiles::new(dir.join("files"));
    let raw = butane::Options {
        files_dir: Some(&files),
        ..Default::default()
    };
    let mc = butane::Options {
        files_dir: Some(&files),
        machine_config: true,
        ..Default::default()
    };
    let mut mc_cases = 0;
    let (mut n, mut agree, mut refused) = (0, 0, 0);
    let mut unexpected = Vec::new();
    let mut fixed = Vec::new();
    for line in text.lines() {
        let c: Value = serde_json::from_str(line).unwrap();
        let id = c["id"].as_u64().unwrap();
        let input = match c.get("b64") {
            Some(b) => b64(b.as_str().unwrap()),
            None => c["input"].as_str().unwrap().as_bytes().to_vec(),
        };
        let want_exit = c["exit"].as_i64().unwrap();
        let as_mc = c["mc"].as_bool() == Some(true);
        // A MachineConfig is compared as text, byte for byte.
        let want_out: Option<Value> = c["output"].as_str().map(|s| {
            if as_mc {
                Value::String(s.to_string())
            } else {
                serde_json::from_str(s).unwrap()
            }
        });
        let want_warn: BTreeSet<String> = c["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect();
        let want_err: BTreeSet<String> = c["errors"]
            .as_array()
            .expect("fixture without error paths: record it again with run.py --record")
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect();
        mc_cases += usize::from(as_mc && want_exit == 0);
        let (exit, out, report) = match butane::translate(&input, if as_mc { &mc } else { &raw }) {
            Ok(o) if as_mc => (
                0,
                Some(Value::String(String::from_utf8(o.json).unwrap())),
                o.report,
            ),
            Ok(o) => (
                0,
                Some(serde_json::from_slice::<Value>(&o.json).unwrap()),
                o.report,
            ),
            Err(r) => (1, None, r),
        };
        let warn: BTreeSet<String> = report
            .diags
            .iter()
            .filter(|d| !d.error)
            .map(|d| d.path.clone())
            .collect();
        // The paths Butane prints errors at (`error at $...`); an error without a path
        // (go-yaml's, or one about the whole input) prints none.
        let err: BTreeSet<String> = report
            .diags
            .iter()
            .filter(|d| d.error && d.path.starts_with('$'))
            .map(|d| d.path.clone())
            .collect();
        n += 1;
        refused += usize::from(exit != 0 && want_exit != 0);
        let kind = if exit != want_exit || out != want_out {
            Some("exit/json")
        } else if warn != want_warn {
            Some("warnings")
        } else if exit != 0 && err != want_err {
            Some("errors")
        } else {
            None
        };
        match (kind, known.get(&id)) {
            (None, None) => agree += 1,
            (None, Some(_)) => fixed.push(id),
            (Some(k), Some(listed)) if listed == k => {}
            (Some(k), _) => unexpected.push(format!(
                "case {id} ({k}): butane exit {want_exit} warnings {want_warn:?} errors {want_err:?}, agent exit {exit} warnings {warn:?} errors {err:?}\n{}\n{report}",
                String::from_utf8_lossy(&input)
            )),
        }
    }
    eprintln!(
        "{n} cases ({refused} refused by both): {agree} agree, {} listed in known.tsv",
        known.len()
    );
    assert!(n > 1000, "fixtures missing: {n} cases");
    assert!(mc_cases > 100, "MachineConfig outputs missing: {mc_cases}");
    assert!(
        unexpected.is_empty(),
        "{} unexpected differences:\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
    assert!(
        fixed.is_empty(),
        "cases listed in known.tsv now agree (remove them): {fixed:?}"
    );
}
