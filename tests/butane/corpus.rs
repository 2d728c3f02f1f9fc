//! Butane translations of the shared corpus (`../shared/corpus/`, `butane-translations.tsv`):
//! every Butane input translated for every variant/version Butane was run with. Where Butane
//! accepted, the output must be byte-equal to Butane's compact output (Butane's bytes are
//! deterministic, gzip'd data URLs included: the agent compresses as Go does); a difference is
//! reported as semantic (JSON values differ, gzip'd contents compared decompressed) or
//! bytes-only; and the agent must warn exactly where Butane warned (so `--strict` agrees).
//! Where Butane refused, the agent must refuse. Differences that remain are listed with a reason in
//! `tests/butane-known-differences.tsv`; the test fails on any other difference and on any
//! listed entry that now agrees. The corpus is not part of the repository: the test is ignored
//! unless asked for (`make test` asks, and leaves it out by name where the corpus is absent;
//! see the Makefile), and run without the corpus it fails, naming what is missing.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

const INPUT_DIRS: &[&str] = &[
    "butane",
    "fcos-docs",
    "flatcar-docs",
    "fcos-config",
    "wild-butane",
];

fn corpus() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    let tsv = p.join("butane-translations.tsv");
    assert!(
        tsv.exists(),
        "{} is absent: this check needs the shared corpus beside the repository",
        tsv.display()
    );
    p
}

/// Data URLs of gzip'd contents decoded, so that two gzip encoders compare equal.
fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let gz = m.get("compression").and_then(Value::as_str) == Some("gzip");
            if let Some(Value::String(src)) = m.get("source")
                && src.starts_with("data:")
                && gz
            {
                let raw = spec::encoding::data_url::decode(src).expect("data URL");
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(&raw[..])
                    .read_to_end(&mut out)
                    .expect("gzip");
                let text = format!("decoded:{}", spec::encoding::hex(&out));
                m.insert("source".into(), Value::String(text));
                m.insert("compression".into(), Value::String(String::new()));
            } else if let Some(Value::String(src)) = m.get("source")
                && src.starts_with("data:")
                && m.get("compression").and_then(Value::as_str) == Some("")
            {
                let raw = spec::encoding::data_url::decode(src).expect("data URL");
                let text = format!("decoded:{}", spec::encoding::hex(&raw));
                m.insert("source".into(), Value::String(text));
            }
            for (_, v) in m.iter_mut() {
                normalize(v);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn has_gzip(json: &[u8]) -> bool {
    let s = String::from_utf8_lossy(json);
    s.contains("\"compression\":\"gzip\",\"source\":\"data:")
}

#[test]
#[ignore = "needs ../shared/corpus: make test"]
fn butane_corpus_translations() {
    let root = corpus();
    // (example, variant, version, butane) -> output file.
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(root.join("manifest.json")).unwrap()).unwrap();
    let mut outputs: HashMap<(String, String, String, String), String> = HashMap::new();
    for e in manifest.as_array().unwrap() {
        let Some(list) = e.get("butane").and_then(Value::as_array) else {
            continue;
        };
        for b in list {
            let s = |k: &str| b[k].as_str().unwrap_or("").to_string();
            outputs.insert(
                (s("example"), s("variant"), s("version"), s("butane")),
                e["file"].as_str().unwrap().to_string(),
            );
        }
    }
    let known_text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/butane-known-differences.tsv"),
    )
    .unwrap_or_default();
    let mut known: BTreeMap<String, String> = BTreeMap::new();
    for line in known_text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        assert!(f.len() >= 5, "bad known-differences line: {line}");
        known.insert(f[..4].join("\t"), f[4].to_string());
    }
    let scratch = files_dir_copy(&root.join("butane/files-dir"));
    let files_dir = agent::cli::DirFiles::new(scratch.path());
    let tsv = std::fs::read_to_string(root.join("butane-translations.tsv")).unwrap();
    let (mut total, mut accepted, mut semantic, mut bytes, mut refused) = (0, 0, 0, 0, 0);
    let mut no_reference = 0;
    let (mut positioned, mut same_position) = (0, 0);
    let mut differences: BTreeMap<String, String> = BTreeMap::new();
    for line in tsv.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        let (input, variant, version, release, rc) = (f[0], f[1], f[2], f[3], f[5]);
        let key = format!("{input}\t{variant}\t{version}\t{release}");
        total += 1;
        let path = INPUT_DIRS
            .iter()
            .map(|d| root.join(d).join("inputs").join(format!("{input}.bu")))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("input {input} not found"));
        let text = std::fs::read_to_string(&path).unwrap();
        let text = retarget(&text, variant, version);
        let opts = butane::Options {
            files_dir: Some(&files_dir),
            release: if release == "v0.25.1" {
                butane::Release::V0_25
            } else {
                butane::Release::Newest
            },
            ..Default::default()
        };
        let got = butane::translate(text.as_bytes(), &opts);
        if rc != "0" {
            match got {
                Err(r) => {
                    refused += 1;
                    // Where Butane's first message is an error with a position (v0.25's
                    // format), count whether the agent names the same path, line and column.
                    if let Some(rest) = f[7].strip_prefix("error at ")
                        && let Some((at, _)) = rest.split_once(": ")
                    {
                        positioned += 1;
                        if r.diags.iter().any(|d| {
                            d.error && d.to_string().starts_with(&format!("error at {at}:"))
                        }) {
                            same_position += 1;
                        }
                    }
                }
                Ok(_) => {
                    differences.insert(key, format!("accepted, Butane refused: {}", f[7]));
                }
            }
            continue;
        }
        accepted += 1;
        // `--strict` parity: Butane's first message is a warning exactly when it warned.
        if let Ok(o) = &got {
            let butane_warned = f[7].starts_with("warning");
            if butane_warned != o.report.has_warnings() {
                let ours = o
                    .report
                    .diags
                    .first()
                    .map(|d| d.to_string())
                    .unwrap_or_default();
                differences.insert(
                    key.clone(),
                    format!("warnings differ: Butane: {:?}, agent: {ours:?}", f[7]),
                );
                continue;
            }
        }
        let out = match got {
            Err(r) => {
                let first = r
                    .diags
                    .iter()
                    .find(|d| d.error)
                    .map(|d| d.to_string())
                    .unwrap_or_default();
                differences.insert(key, format!("refused, Butane accepted: {first}"));
                continue;
            }
            Ok(o) => o,
        };
        // The manifest names each distinct output once: the same translation by the other
        // Butane release may be the one named. Some accepted translations have no output
        // kept at all (empty configs, dropped experimental retargets): only the verdict is
        // checked for those.
        let file = outputs
            .get(&(input.into(), variant.into(), version.into(), release.into()))
            .or_else(|| {
                ["v0.25.1", "v0.29.0"].iter().find_map(|r| {
                    outputs.get(&(input.into(), variant.into(), version.into(), r.to_string()))
                })
            });
        let Some(file) = file else {
            no_reference += 1;
            continue;
        };
        let want = std::fs::read(root.join(file)).unwrap();
        if out.json == want {
            semantic += 1;
            bytes += 1;
            continue;
        }
        let mut a: Value = serde_json::from_slice(&out.json).unwrap();
        let mut b: Value = serde_json::from_slice(&want).unwrap();
        normalize(&mut a);
        normalize(&mut b);
        if a == b {
            semantic += 1;
            let what = if has_gzip(&want) || has_gzip(&out.json) {
                "semantically equal, bytes differ (gzip'd contents)"
            } else {
                "semantically equal, bytes differ"
            };
            differences.insert(key, what.into());
        } else {
            differences.insert(
                key,
                format!(
                    "output differs: got {} want {}",
                    String::from_utf8_lossy(&out.json).trim_end(),
                    String::from_utf8_lossy(&want).trim_end()
                ),
            );
        }
    }
    eprintln!(
        "butane corpus: {total} translations; Butane accepted {accepted}: {semantic} semantically equal, {bytes} byte-equal, {no_reference} accepted here too without a kept output; Butane refused {}: {refused} refused here too (of {positioned} with a positioned first error, {same_position} with an error at the same path, line and column here); {} differences ({} listed as known)",
        total - accepted,
        differences.len(),
        known.len()
    );
    let unlisted: Vec<String> = differences
        .iter()
        .filter(|(k, _)| !known.contains_key(*k))
        .map(|(k, v)| format!("{k}\t{}", v.chars().take(600).collect::<String>()))
        .collect();
    let fixed: Vec<&String> = known
        .keys()
        .filter(|k| !differences.contains_key(*k))
        .collect();
    if let Ok(p) = std::env::var("BUTANE_CORPUS_DUMP") {
        std::fs::write(p, unlisted.join("\n")).unwrap();
    }
    assert!(
        unlisted.is_empty() && fixed.is_empty(),
        "{} differences not in tests/butane-known-differences.tsv:\n{}\n{} listed entries now agree (remove them):\n{}",
        unlisted.len(),
        unlisted
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        fixed.len(),
        fixed
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A scratch copy of the corpus's `butane/files-dir`, with the one symlink its README
/// describes (`tree/directory/symlink` -> `../file`) made a symlink again: the shared copy
/// stores it as a 7-byte regular file holding the target.
fn files_dir_copy(src: &Path) -> Scratch {
    fn copy(src: &Path, dst: &Path) {
        std::fs::create_dir_all(dst).unwrap();
        let mut entries: Vec<_> = std::fs::read_dir(src)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let (s, d) = (e.path(), dst.join(e.file_name()));
            if e.file_type().unwrap().is_dir() {
                copy(&s, &d);
            } else {
                std::fs::copy(&s, &d).unwrap();
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&d).unwrap().permissions().mode();
                std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode | 0o200))
                    .unwrap();
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("butane-corpus-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy(src, &dir);
    let link = dir.join("tree/directory/symlink");
    if std::fs::read(&link)
        .map(|b| b == b"../file")
        .unwrap_or(false)
    {
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("../file", &link).unwrap();
    }
    Scratch(dir)
}

/// A directory removed when dropped (also when the test fails).
struct Scratch(PathBuf);
impl Scratch {
    fn path(&self) -> &Path {
        &self.0
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The corpus's "retarget": the input's `variant:` and `version:` lines set to the target.
fn retarget(text: &str, variant: &str, version: &str) -> String {
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with("variant:") {
            out.push_str(&format!("variant: {variant}\n"));
        } else if line.starts_with("version:") {
            out.push_str(&format!("version: {version}\n"));
        } else {
            out.push_str(line);
        }
    }
    out
}
