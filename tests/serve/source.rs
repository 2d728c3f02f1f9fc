//! `agent serve`'s source side under hostile or broken files, over real HTTP on 127.0.0.1:
//! FIFOs, devices and links out of the source are refused with an error naming the file (and
//! never quoting what a file holds) while the watcher goes on; a FIFO as a checkpoint record
//! does not stop the server; the server listens and serves its checkpoint before it loads a
//! source that is slow to load, and SIGTERM ends it whatever the watcher is doing; an
//! unchanged `.bu` pool is translated once however often the source is polled; `/status`
//! under `--require-token` names no pool.

use crate::support;

use std::path::Path;

use support::serve::*;

const SECRET: &str = "root:$6$secretsalt$hashhashhash:19000:0:99999:7:::";

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

fn start(src: &Path, extra: &[&str]) -> Server {
    serve_args(src).poll_1s().quiet().with(extra).start()
}

fn error(s: &Server) -> String {
    s.status()["sources"][0]["error"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// A FIFO, a device and a link to a device named like pool files: each makes the generation
/// invalid with an error naming the file and what it is, the last good generation stays
/// served, the watcher goes on (the error clears once the file is gone), and SIGTERM ends the
/// server. Before: the FIFO and the device were silently skipped (nothing in /status) and a
/// link to a file anywhere on the host was served.
#[test]
fn fifos_devices_and_links_out_are_refused_and_named() {
    let t = TempDir::new("src-fifo");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("w1"));
    let mut s = start(&src, &[]);
    assert_eq!(s.get("/config/worker").status, 200);
    let gen0 = s.status()["sources"][0]["active"]["generation"].clone();

    type Make = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Make, &str)> = vec![
        ("fifo.ign", Box::new(mkfifo), "FIFO"),
        ("pool/frag.ign", Box::new(mkfifo), "FIFO"),
        (
            "zero.ign",
            Box::new(|p| {
                nix::sys::stat::mknod(
                    p,
                    nix::sys::stat::SFlag::S_IFCHR,
                    nix::sys::stat::Mode::from_bits_truncate(0o600),
                    nix::sys::stat::makedev(1, 5),
                )
                .unwrap()
            }),
            "character device",
        ),
        (
            "devzero.bu",
            Box::new(|p| std::os::unix::fs::symlink("/dev/zero", p).unwrap()),
            "outside the source",
        ),
    ];
    for (name, make, what) in &cases {
        let p = src.join("pools").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        if name.contains('/') {
            write(&p.with_file_name("ok.ign"), &worker_config("frag"));
        }
        make(&p);
        s.wait_for(&format!("an error naming {name}"), 20, |s| {
            let e = error(s);
            e.contains(name) && e.contains(what)
        });
        assert_eq!(s.get("/config/worker").status, 200, "{name}: still served");
        assert_eq!(s.get("/readyz").status, 200);
        assert_eq!(
            s.status()["sources"][0]["active"]["generation"],
            gen0,
            "{name}"
        );
        // Gone again: the watcher goes on and the error clears.
        if name.contains('/') {
            std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
        s.wait_for(&format!("the error about {name} to clear"), 20, |s| {
            s.status()["sources"][0]["error"].is_null()
        });
    }
    assert!(s.terminate(), "SIGTERM ends the server");
}

/// A pool file that is a link out of the source (to a file holding a secret) is refused with
/// an error that names it and quotes nothing of the file; a file inside that does not parse
/// is reported without its contents either. Before: the link was followed and its first
/// bytes quoted in /status.
#[test]
fn links_out_of_the_source_are_refused_and_contents_never_quoted() {
    let t = TempDir::new("src-leak");
    let src = t.path().join("src");
    let secret = t.path().join("shadow");
    write(&secret, SECRET);
    write(&src.join("pools/worker.ign"), &worker_config("w1"));
    std::os::unix::fs::symlink(&secret, src.join("pools/leak.ign")).unwrap();
    let s = start(&src, &[]);
    let e = error(&s);
    assert!(
        e.contains("leak.ign") && e.contains("outside the source"),
        "{e}"
    );
    assert_eq!(s.get("/config/leak").status, 503, "nothing valid loaded");
    assert_eq!(s.get("/readyz").status, 503);
    let body = s.get("/status").text();
    assert!(
        !body.contains("secretsalt") && !body.contains("root:"),
        "{body}"
    );

    // The same bytes inside the source: an error at line 1 col 1, without the bytes.
    std::fs::remove_file(src.join("pools/leak.ign")).unwrap();
    write(&src.join("pools/leak.ign"), SECRET);
    s.wait_for("the parse error", 20, |s| error(s).contains("line 1 col 1"));
    let body = s.get("/status").text();
    assert!(
        !body.contains("secretsalt") && !body.contains("root:"),
        "{body}"
    );
    // JSON with a secret as a key and as a value.
    write(
        &src.join("pools/leak.ign"),
        r#"{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"rel/secretsalt","contents":{"source":"secretsalt://x"}}]}}"#,
    );
    s.wait_for("the validation error", 20, |s| {
        error(s).contains("path not absolute")
    });
    let body = s.get("/status").text();
    assert!(!body.contains("secretsalt"), "{body}");
    // A Butane file that is not YAML.
    std::fs::remove_file(src.join("pools/leak.ign")).unwrap();
    write(
        &src.join("pools/leak.bu"),
        &format!("{SECRET}\n'secretsalt: [x\n"),
    );
    s.wait_for("the Butane error", 20, |s| error(s).contains("leak.bu"));
    let body = s.get("/status").text();
    assert!(!body.contains("secretsalt"), "{body}");
}

/// Links that stay inside the source are followed: a Kubernetes AtomicWriter volume (the
/// ConfigMap's `..data` link and the user-visible links into it), a git-sync link as
/// `--source`, and a pool file that links to another file of the same tree.
#[test]
fn atomic_writer_and_git_sync_links_still_work() {
    let t = TempDir::new("src-links");
    // AtomicWriter.
    let v = t.path().join("volume");
    write(
        &v.join("..2024_01/pools/worker.ign"),
        &worker_config("atomic"),
    );
    write(
        &v.join("..2024_01/shared/infra.ign"),
        &worker_config("shared"),
    );
    std::os::unix::fs::symlink("../shared/infra.ign", v.join("..2024_01/pools/infra.ign")).unwrap();
    std::os::unix::fs::symlink("..2024_01", v.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/pools", v.join("pools")).unwrap();
    let s = start(&v, &[]);
    assert!(s.status()["sources"][0]["error"].is_null(), "{}", error(&s));
    assert!(s.get("/config/worker").text().contains("data:,atomic"));
    assert!(s.get("/config/infra").text().contains("data:,shared"));
    drop(s);
    // git-sync (v4 layout): --source is the link git-sync swaps.
    let g = t.path().join("git");
    write(
        &g.join(".worktrees/abc123/pools/master.ign"),
        &worker_config("gitsync"),
    );
    std::os::unix::fs::symlink(".worktrees/abc123", g.join("current")).unwrap();
    let s = start(&g.join("current"), &[]);
    assert!(s.status()["sources"][0]["error"].is_null(), "{}", error(&s));
    assert!(s.get("/config/master").text().contains("data:,gitsync"));
}

/// A FIFO as the checkpoint's active.json: the server starts, listens, loads its source and
/// names the file in /status. Before: it hung opening the FIFO and never listened.
#[test]
fn a_fifo_in_the_checkpoint_is_refused() {
    let t = TempDir::new("src-ckpt-fifo");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("w1"));
    let state = t.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    mkfifo(&state.join("active.json"));
    let mut s = start(&src, &["--state-dir", state.to_str().unwrap()]);
    assert_eq!(s.get("/config/worker").status, 200);
    let errs = s.status()["checkpoint"]["errors"].to_string();
    assert!(
        errs.contains("active.json") && errs.contains("FIFO"),
        "{errs}"
    );
    assert!(s.terminate());
}

/// The server listens before it loads the source: with a source that takes (here: forever)
/// to load — a Butane pool whose local file is a FIFO with no writer — a restarted server
/// serves its checkpoint at once (`/readyz` 200), a server without one answers `/readyz` 503,
/// and SIGTERM ends either within the grace period plus the watcher margin. Before: the
/// first load ran before listening, so the server never listened.
#[test]
fn a_slow_source_does_not_keep_the_server_from_listening() {
    let t = TempDir::new("src-slow");
    let src = t.path().join("src");
    let state = t.path().join("state");
    write(&src.join("pools/worker.ign"), &worker_config("w1"));
    let args = |state: &Path| {
        serve_args(&src)
            .arg("--state-dir", state)
            .arg("--shutdown-grace", "1s")
            .quiet()
    };
    let mut s = args(&state).start();
    assert_eq!(s.get("/config/worker").status, 200);
    assert!(s.terminate());

    // A pool that blocks whoever reads it without care.
    write(
        &src.join("pools/slow/slow.bu"),
        "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/x\n      contents:\n        local: pipe\n",
    );
    mkfifo(&src.join("pools/slow/pipe"));
    for (with_checkpoint, ready) in [(true, 200), (false, 503)] {
        let other = t.path().join("empty-state");
        let a = args(if with_checkpoint { &state } else { &other });
        let mut s = a.start_listening(&[]);
        assert_eq!(
            s.get("/readyz").status,
            ready,
            "checkpoint: {with_checkpoint}"
        );
        assert_eq!(s.get("/healthz").status, 200);
        if with_checkpoint {
            let r = s.get("/config/worker");
            assert_eq!(r.status, 200);
            assert!(r.text().contains("data:,w1"));
        }
        assert!(s.terminate(), "SIGTERM ends the server");
    }
}

/// An unchanged `.bu` pool is translated once, however often the source is read; a change
/// to it or to a local file it embeds is translated (once) and served. Counted with
/// `agent_serve_butane_translations_total` against `agent_serve_source_reads_total`.
/// Before: every poll translated every `.bu` file again (and there was no counter).
#[test]
fn an_unchanged_butane_pool_is_translated_once() {
    let t = TempDir::new("src-bu-once");
    let src = t.path().join("src");
    let bu = |n: u32| {
        format!(
            "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/motd\n      contents:\n        local: motd.txt\n    - path: /etc/n\n      contents:\n        inline: \"{n}\"\n"
        )
    };
    write(&src.join("pools/worker/a.bu"), &bu(1));
    write(&src.join("pools/worker/motd.txt"), "hello");
    write(&src.join("pools/infra.ign"), &worker_config("infra"));
    let s = start(&src, &[]);
    assert_eq!(s.metric("agent_serve_butane_translations_total"), 1);
    let reads0 = s.metric("agent_serve_source_reads_total");
    s.wait_for("ten more reads of the source", 60, |s| {
        s.metric("agent_serve_source_reads_total") >= reads0 + 10
    });
    assert_eq!(
        s.metric("agent_serve_butane_translations_total"),
        1,
        "an unchanged .bu is not translated again"
    );
    // A local file it embeds changes: one translation, served.
    write(&src.join("pools/worker/motd.txt"), "changed");
    s.wait_for("the new local file served", 20, |s| {
        s.get("/config/worker").text().contains("data:,changed")
    });
    let n = s.metric("agent_serve_butane_translations_total");
    assert_eq!(n, 2);
    // The .bu itself changes.
    write(&src.join("pools/worker/a.bu"), &bu(2));
    s.wait_for("the new .bu served", 20, |s| {
        s.get("/config/worker").text().contains("data:,2")
    });
    let reads1 = s.metric("agent_serve_source_reads_total");
    s.wait_for("five more reads", 60, |s| {
        s.metric("agent_serve_source_reads_total") >= reads1 + 5
    });
    assert_eq!(s.metric("agent_serve_butane_translations_total"), 3);
}

/// Under `--require-token`, `/status` tells anyone only whether the server is ready, which
/// generation it serves and whether there is an error: no pool names, config hashes or
/// paths. Before: it listed every pool and config.
#[test]
fn status_under_require_token_names_no_pool() {
    let t = TempDir::new("src-status-auth");
    let src = t.path().join("src");
    write(&src.join("pools/secretpool.ign"), &worker_config("w1"));
    write(
        &t.path().join("token.key"),
        "a-key-of-at-least-32-bytes-for-the-test\n",
    );
    let key = t.path().join("token.key");
    let s = start(
        &src,
        &["--require-token", "--token-key", key.to_str().unwrap()],
    );
    let r = s.get("/status");
    assert_eq!(r.status, 200);
    let body = r.text();
    assert!(!body.contains("secretpool"), "{body}");
    assert!(!body.contains(src.to_str().unwrap()), "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ready"], true, "{body}");
    assert_eq!(v["error"], false, "{body}");
    assert!(v["generation"].is_string(), "{body}");
    assert_eq!(v["inventoryError"], false, "{body}");
    // Without --require-token the full status as before.
    drop(s);
    let s = start(&src, &[]);
    assert!(s.get("/status").text().contains("secretpool"));
}

/// A FIFO as the token key: the server refuses to start and names it. Before: it hung
/// opening the FIFO (and a key replaced by a FIFO later hung the watcher).
#[test]
fn a_fifo_as_the_token_key_is_refused() {
    let t = TempDir::new("src-key-fifo");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("w1"));
    let key = t.path().join("token.key");
    mkfifo(&key);
    let mut child = serve_args(&src)
        .arg("--token-key", &key)
        .arg("--state-dir", t.path().join("state"))
        .command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("agent serve hung on a FIFO token key");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("token.key") && err.contains("FIFO"), "{err}");
}

/// A checkpoint directory beside the source (in the directory the watcher watches as the
/// source's parent): saving a checkpoint does not wake the watcher into another read. With a
/// poll interval of an hour, the source is read once at start and once per SIGHUP, however
/// long the server runs. Before: every save changed the directory's mode (an inotify event),
/// which read the source again, which saved again: hundreds of reads a minute.
#[test]
fn checkpoints_beside_the_source_do_not_wake_the_watcher() {
    let t = TempDir::new("src-beside");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("w1"));
    let state = t.path().join("state");
    // Derived tokens: the legacy token store (SOURCE/tokens) would write beside the pools.
    let key = t.path().join("token.key");
    write(&key, "a-key-of-at-least-32-bytes-for-the-test\n");
    let s = serve_args(&src)
        .arg("--poll-interval", "1h")
        .arg("--state-dir", &state)
        .arg("--token-key", &key)
        .quiet()
        .start();
    let pid = nix::unistd::Pid::from_raw(s.child.id() as i32);
    for n in 2..=4 {
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
        s.wait_for("the SIGHUP reload", 20, |s| {
            s.metric("agent_serve_source_reads_total") >= n
        });
        // Time for a save to wake the watcher, if it did.
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert_eq!(s.metric("agent_serve_source_reads_total"), n);
    }
}
