//! Butane's local files (`local`, `contents_local`, `storage.trees`) read through the real
//! files-dir reader (`agent::cli::DirFiles`) from real directories: only regular files, each
//! within `max-local-file`, all of one translation within `max-local-total`, each path read
//! and compressed once; trees in linear time; YAML anchors shared, not copied (the real
//! binary's peak RSS on a big anchored file); and `agent validate` naming a YAML limit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use agent::cli::DirFiles;

const AGENT: &str = env!("CARGO_BIN_EXE_agent");
const HEAD: &str = "variant: fcos\nversion: 1.5.0\n";

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn tmp(tag: &str) -> Tmp {
    let p = std::env::temp_dir().join(format!("butane-local-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    Tmp(p)
}

fn translate(dir: &Path, cfg: &str, opts: butane::Options<'_>) -> Result<String, String> {
    let files = DirFiles::new(dir);
    let opts = butane::Options {
        files_dir: Some(&files),
        ..opts
    };
    butane::translate(cfg.as_bytes(), &opts)
        .map(|o| String::from_utf8(o.json).unwrap())
        .map_err(|r| r.to_string())
}

/// Runs `f` on another thread; a read that blocks (the bug) fails the test instead of
/// hanging it.
fn without_hanging<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the translation blocked on a local file")
}

fn file_cfg(local: &str) -> String {
    format!(
        "{HEAD}storage:\n  files:\n    - path: /etc/x\n      contents:\n        local: {local}\n"
    )
}

#[test]
fn a_fifo_is_refused_not_read() {
    let t = tmp("fifo");
    nix::unistd::mkfifo(
        &t.0.join("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let dir = t.0.clone();
    let e = without_hanging(move || translate(&dir, &file_cfg("pipe"), Default::default()))
        .unwrap_err();
    assert!(
        e.contains("a FIFO") && e.contains("only regular files"),
        "{e}"
    );
    // In a tree too.
    std::fs::create_dir(t.0.join("tree")).unwrap();
    std::fs::rename(t.0.join("pipe"), t.0.join("tree/pipe")).unwrap();
    let dir = t.0.clone();
    let cfg = format!("{HEAD}storage:\n  trees:\n    - local: tree\n");
    let e = without_hanging(move || translate(&dir, &cfg, Default::default())).unwrap_err();
    assert!(e.contains("not supported"), "{e}");
}

#[test]
fn a_device_through_a_symlink_is_refused_not_read() {
    let t = tmp("dev");
    std::os::unix::fs::symlink("/dev/zero", t.0.join("zero")).unwrap();
    let dir = t.0.clone();
    let e = without_hanging(move || translate(&dir, &file_cfg("zero"), Default::default()))
        .unwrap_err();
    assert!(
        e.contains("a character device") && e.contains("only regular files"),
        "{e}"
    );
}

#[test]
fn each_file_and_the_total_are_bounded() {
    let t = tmp("bounds");
    std::fs::write(t.0.join("big"), vec![b'x'; 2000]).unwrap();
    for i in 0..3 {
        std::fs::write(t.0.join(format!("f{i}")), vec![b'a' + i; 1500]).unwrap();
    }
    let small_file = butane::Options {
        max_local_file: 1000,
        ..Default::default()
    };
    let e = translate(&t.0, &file_cfg("big"), small_file).unwrap_err();
    assert!(
        e.contains("max-local-file") && e.contains("1000 bytes"),
        "{e}"
    );

    // Three distinct files of 1500 bytes: more than 4000 read in all.
    let mut cfg = format!("{HEAD}storage:\n  files:\n");
    for i in 0..3 {
        cfg += &format!("    - path: /f{i}\n      contents:\n        local: f{i}\n");
    }
    let small_total = || butane::Options {
        max_local_total: 4000,
        ..Default::default()
    };
    let e = translate(&t.0, &cfg, small_total()).unwrap_err();
    assert!(
        e.contains("max-local-total") && e.contains("4000 bytes"),
        "{e}"
    );

    // A tree is bounded by the same total.
    std::fs::create_dir(t.0.join("tree")).unwrap();
    for i in 0..3 {
        std::fs::copy(t.0.join(format!("f{i}")), t.0.join(format!("tree/f{i}"))).unwrap();
    }
    let tree = format!("{HEAD}storage:\n  trees:\n    - local: tree\n");
    let e = translate(&t.0, &tree, small_total()).unwrap_err();
    assert!(e.contains("max-local-total") && e.contains("tree"), "{e}");
    assert!(translate(&t.0, &tree, Default::default()).is_ok());
}

#[test]
fn one_file_used_ten_times_is_read_and_compressed_once() {
    let t = tmp("cache");
    // 1 MiB of text that compresses (so the gzip'd data URL is chosen and small).
    let data: String = (0..40_000).map(|i| format!("line {i:08}\n")).collect();
    std::fs::write(t.0.join("f"), &data).unwrap();
    let cfg = |uses: usize| {
        let mut s = format!("{HEAD}storage:\n  files:\n");
        for i in 0..uses {
            s += &format!("    - path: /f{i}\n      contents:\n        local: f\n");
        }
        s
    };
    let (one, w1) = spec::work::measure(|| translate(&t.0, &cfg(1), Default::default()));
    let (ten, w10) = spec::work::measure(|| translate(&t.0, &cfg(10), Default::default()));
    let (one, ten) = (one.unwrap(), ten.unwrap());
    assert!(one.contains("\"compression\":\"gzip\""), "{one:.200}");
    assert_eq!(ten.matches("\"compression\":\"gzip\"").count(), 10);
    assert!(w1 > 0, "work is counted");
    // Compressing ten times would be ~10x the work.
    assert!(
        w10 < 2 * w1,
        "ten uses of one file cost {w10} units of work, one use {w1}"
    );
    // Each use still counts toward the embedded total.
    let url_len = one.len();
    let opts = butane::Options {
        max_local_total: (url_len * 5) as u64,
        ..Default::default()
    };
    let e = translate(&t.0, &cfg(10), opts).unwrap_err();
    assert!(
        e.contains("embedded") && e.contains("max-local-total"),
        "{e}"
    );
}

#[test]
fn trees_translate_in_linear_time() {
    let t = tmp("tree-linear");
    let run = |n: usize| {
        let dir = t.0.join(format!("t{n}"));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for i in 0..n {
            std::fs::write(dir.join(format!("sub/f{i}")), format!("{i}\n")).unwrap();
            std::os::unix::fs::symlink("f0", dir.join(format!("sub/l{i}"))).unwrap();
        }
        let cfg = format!("{HEAD}storage:\n  trees:\n    - local: t{n}\n      path: /srv\n");
        let (r, w) = spec::work::measure(|| translate(&t.0, &cfg, Default::default()));
        assert_eq!(r.unwrap().matches("/srv/sub/f").count(), n);
        w
    };
    let (small, big) = (run(1000), run(2000));
    let ratio = big as f64 / small as f64;
    eprintln!("trees: work {small} -> {big} ({ratio:.2}x)");
    assert!(ratio < 2.5, "work grew {ratio:.2}x when the tree doubled");
}

/// Exit code and peak RSS (KiB) of the real binary run with `args`, as `/usr/bin/time`
/// reports it. (This test process's own `wait4` would not: a child's `ru_maxrss` starts at
/// the RSS of the process that spawned it, and this one holds the other tests' inputs. `time`
/// is small, so the figure is the agent's.)
fn peak_rss_kib(args: &[&str]) -> (i32, i64) {
    let t = tmp("rss");
    let report = t.0.join("maxrss");
    let status = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&report)
        .arg(AGENT)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("running /usr/bin/time: install the packages in .ci/packages/fetch.apt");
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    // `time` writes "Command exited with non-zero status N" before the figure.
    let kib = text
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS from /usr/bin/time: {text:?}"));
    (status.code().unwrap_or(-1), kib)
}

#[test]
fn anchors_are_shared_not_copied() {
    // 60 nested anchored mappings around a list of 100,000 items, no alias: 13 MB of YAML.
    // Copying each anchored subtree held 60 copies of the list (about 600 MiB).
    let t = tmp("anchors");
    let mut s = format!("{HEAD}x:\n");
    let mut ind = String::from("  ");
    for d in 0..60 {
        s += &format!("{ind}a{d}: &a{d}\n");
        ind += "  ";
    }
    s += &format!("{ind}l:\n");
    for i in 0..100_000 {
        s += &format!("{ind}  - v{i:07}\n");
    }
    let f = t.0.join("anchors.bu");
    std::fs::write(&f, &s).unwrap();
    let (code, rss) = peak_rss_kib(&["butane", f.to_str().unwrap()]);
    assert_eq!(code, 0, "translates (with an unused-key warning)");
    let input_kib = (s.len() / 1024) as i64;
    eprintln!("input {input_kib} KiB, peak RSS {rss} KiB");
    // The documented bound (docs/butane.md): a translation's memory is a small multiple of
    // its input; 10x leaves room for the tree, the text and the allocator.
    assert!(
        rss < 10 * input_kib + 16 * 1024,
        "peak RSS {rss} KiB for {input_kib} KiB of YAML"
    );
}

#[test]
fn validate_names_a_yaml_limit_not_invalid_json() {
    let t = tmp("validate-limit");
    let deep = t.0.join("deep.bu");
    std::fs::write(
        &deep,
        format!("{HEAD}x: {}{}", "[".repeat(10_000), "]".repeat(10_000)),
    )
    .unwrap();
    let many = t.0.join("many.bu");
    let mut s = format!("{HEAD}x: [");
    s += &"1,".repeat(2_100_000);
    s += "1]\n";
    std::fs::write(&many, s).unwrap();
    for (f, limit) in [(&deep, "max-depth"), (&many, "max-nodes")] {
        let o = Command::new(AGENT)
            .args(["validate", f.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(limit) && !err.contains("invalid JSON"),
            "{err}"
        );
    }
}

#[test]
fn a_large_honest_config_passes() {
    // 78,000 files and no alias (Butane accepts it): no limit about aliases applies.
    let mut s = format!("{HEAD}storage:\n  files:\n");
    for i in 0..78_000 {
        s += &format!("    - path: /etc/f{i:06}\n");
    }
    let r = butane::translate(s.as_bytes(), &Default::default());
    assert!(r.is_ok(), "{}", r.err().unwrap());
}
