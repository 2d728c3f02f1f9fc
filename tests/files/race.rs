//! The files stage cannot be raced out of its root: while the stage writes, another thread
//! keeps swapping a directory of the target root for a symbolic link to a directory outside
//! the root (and back). Nothing may ever be written outside: every run either succeeds with
//! everything inside the root or fails with an error saying what changed. Run with the
//! kernel's `openat2` and with the per-element `O_NOFOLLOW` walk that replaces it on kernels
//! without it (forced by a test-only option).

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use support::files::*;

/// Swaps `<root>/<dir>` for a symlink to `outside` and back until `stop`; counts the swaps.
fn swapper(
    root: &Path,
    dir: &str,
    outside: &Path,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    let d = root.join(dir);
    let moved = root.join(format!("{dir}.moved"));
    let outside = outside.to_path_buf();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if std::fs::rename(&d, &moved).is_ok() {
                if std::os::unix::fs::symlink(&outside, &d).is_ok() {
                    swaps.fetch_add(1, Ordering::Relaxed);
                    for _ in 0..200 {
                        std::hint::spin_loop();
                    }
                    let _ = std::fs::remove_file(&d);
                }
                let _ = std::fs::rename(&moved, &d);
            }
            std::thread::yield_now();
        }
    })
}

/// Files in the outside directory (recursively), as paths.
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            out.push(e.path().display().to_string());
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    out
}

/// Names of the entries anywhere under `dir` for which `pick` holds, each once.
fn names_under(dir: &Path, pick: &dyn Fn(&str) -> bool) -> std::collections::BTreeSet<String> {
    listing(dir)
        .iter()
        .filter_map(|p| Path::new(p).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| pick(n))
        .collect()
}

/// What an error of a raced run may say: the root changed, or (for a hard link whose target
/// was resolved through the swapped link, inside the root) its target is not there.
const CLEAR_ERRORS: [&str; 2] = [
    "the target root changed while the stage was writing",
    "does not exist",
];

/// Runs the stage `runs` times on fresh roots with `<root>/<dir>` created first, while the
/// swapper works; a successful run must have written the `expected` names (`pick`) inside
/// the root, a failed one must say why clearly; returns (successes, errors seen).
fn race(
    tag: &str,
    dir: &str,
    cfg: &spec::config::Config,
    opts: &agent::stages::files::Options,
    runs: usize,
    expected: usize,
    pick: &dyn Fn(&str) -> bool,
) -> (usize, Vec<String>) {
    let outside = TempDir::new(&format!("race-outside-{tag}"));
    let mut ok = 0;
    let mut errors = Vec::new();
    let mut swaps_total = 0;
    for i in 0..runs {
        let root = TempDir::new(&format!("race-{tag}-{i}"));
        std::fs::create_dir_all(root.join(&format!("/{dir}"))).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let h = swapper(
            root.path(),
            dir,
            outside.path(),
            stop.clone(),
            swaps.clone(),
        );
        let r = run_opts(cfg, root.path(), opts);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        swaps_total += swaps.load(Ordering::Relaxed);
        let escaped = listing(outside.path());
        assert!(
            escaped.is_empty(),
            "run {i} ({tag}) wrote outside the root: {escaped:?} (result: {r:?})"
        );
        match r {
            Ok(()) => {
                // Everything landed inside the root (where the swaps left it).
                let written = names_under(root.path(), pick);
                assert_eq!(written.len(), expected, "run {i} ({tag}): {written:?}");
                ok += 1;
            }
            Err(e) => {
                let e = format!("{e:#}");
                assert!(
                    CLEAR_ERRORS.iter().any(|c| e.contains(c)),
                    "run {i} ({tag}): unclear error: {e}"
                );
                errors.push(e);
            }
        }
    }
    assert!(swaps_total > 0, "the swapper never swapped");
    eprintln!(
        "{tag}: {runs} runs, {ok} succeeded, {swaps_total} swaps; errors: {:?}",
        errors.iter().take(5).collect::<Vec<_>>()
    );
    (ok, errors)
}

/// `n` files in `/d` (and, when `mixed`, files in a subdirectory, directories, symbolic
/// and hard links).
fn storage_config(n: usize, mixed: bool) -> spec::config::Config {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let mut links = Vec::new();
    for i in 0..n {
        files.push(format!(
            r#"{{"path":"/d/f{i}","mode":420,"user":{{"id":{i}}},"contents":{{"source":"data:,file{i}"}}}}"#
        ));
        if !mixed {
            continue;
        }
        files.push(format!(
            r#"{{"path":"/d/sub/g{i}","contents":{{"source":"data:,g{i}"}}}}"#
        ));
        if i % 4 == 0 {
            dirs.push(format!(r#"{{"path":"/d/dir{i}","mode":448}}"#));
            links.push(format!(r#"{{"path":"/d/l{i}","target":"f{i}"}}"#));
            links.push(format!(
                r#"{{"path":"/d/h{i}","target":"/d/f{i}","hard":true}}"#
            ));
        }
    }
    config(&format!(
        r#"{{"ignition":{{"version":"3.6.0"}},"storage":{{"files":[{}],"directories":[{}],"links":[{}]}}}}"#,
        files.join(","),
        dirs.join(","),
        links.join(",")
    ))
}

fn units_config(n: usize) -> spec::config::Config {
    let units: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"name":"u{i}.service","enabled":{},"contents":"[Service]\nExecStart=/bin/true\n","dropins":[{}]}}"#,
                i % 2 == 0,
                // Drop-ins (a directory each) only for the last units.
                if i + 5 >= n { r#"{"name":"x.conf","contents":"[Unit]\n"}"# } else { "" }
            )
        })
        .collect();
    config(&format!(
        r#"{{"ignition":{{"version":"3.6.0"}},"systemd":{{"units":[{}]}}}}"#,
        units.join(",")
    ))
}

fn options(openat2: bool) -> agent::stages::files::Options {
    agent::stages::files::Options {
        no_openat2: !openat2,
        ..Default::default()
    }
}

fn storage_race(openat2: bool) {
    must_be_root();
    for mixed in [false, true] {
        let tag = format!(
            "{}-{}",
            if openat2 { "openat2" } else { "fallback" },
            if mixed { "mixed" } else { "files" }
        );
        let (ok, errors) = race(
            &tag,
            "d",
            &storage_config(200, mixed),
            &options(openat2),
            30,
            200,
            &|n| {
                n.strip_prefix('f')
                    .is_some_and(|d| d.parse::<u32>().is_ok())
            },
        );
        assert_eq!(ok + errors.len(), 30);
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn swapping_a_directory_for_a_link_never_writes_outside_the_root_openat2() {
    storage_race(true);
}

#[test]
#[ignore = "needs root: make test-root"]
fn swapping_a_directory_for_a_link_never_writes_outside_the_root_fallback() {
    storage_race(false);
}

#[test]
#[ignore = "needs root: make test-root"]
fn swapping_the_unit_directory_never_writes_outside_the_root() {
    must_be_root();
    for openat2 in [true, false] {
        let tag = if openat2 {
            "units-openat2"
        } else {
            "units-fallback"
        };
        race(
            tag,
            "etc/systemd/system",
            &units_config(60),
            &options(openat2),
            20,
            60,
            &|n| n.starts_with('u') && n.ends_with(".service"),
        );
    }
}
