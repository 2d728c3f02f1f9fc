//! `agent serve` with Butane pool sources (`pools/<pool>.bu`, `.bu` fragments mixed with
//! `.ign` ones), over real HTTP on 127.0.0.1: served byte-identical to serving `agent butane`'s
//! translation as `.ign`; local files confined to the pool directory; a broken `.bu` pushed
//! with the AtomicWriter protocol keeps the last good generation.

use crate::support;

use std::path::Path;
use std::process::Command;

use support::serve::*;

const WORKER_BU: &str = "variant: fcos
version: 1.5.0
passwd:
  users:
    - name: core
      ssh_authorized_keys_local:
        - core.pub
storage:
  files:
    - path: /etc/motd
      mode: 0644
      contents:
        local: motd.txt
    - path: /etc/big
      contents:
        inline: |
          aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
          aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
systemd:
  units:
    - name: hello.service
      enabled: true
      contents: |
        [Service]
        ExecStart=/bin/echo hello
        [Install]
        WantedBy=multi-user.target
";

const INFRA_BU: &str = "variant: fcos
version: 1.4.0
kernel_arguments:
  should_exist:
    - quiet
storage:
  files:
    - path: /etc/a
      overwrite: true
      contents:
        local: a.txt
";

const INFRA_BASE: &str = r#"{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/etc/a","contents":{"source":"data:,base"}},{"path":"/etc/b","contents":{"source":"data:,b"}}]}}"#;

fn butane(file: &Path, files_dir: &Path) -> String {
    let out = Command::new(AGENT)
        .args(["butane", "-d"])
        .arg(files_dir)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn start(src: &Path) -> Server {
    serve_args(src).poll_1s().start()
}

#[test]
fn butane_pools_are_served_as_their_translation() {
    let t = TempDir::new("serve-butane");
    // Source A: Butane.
    let a = t.path().join("a");
    write(&a.join("pools/worker.bu"), WORKER_BU);
    write(&a.join("pools/motd.txt"), "welcome\n");
    write(&a.join("pools/core.pub"), "ssh-ed25519 AAAA core@a\n");
    write(&a.join("pools/infra/10-base.ign"), INFRA_BASE);
    write(&a.join("pools/infra/20-extra.bu"), INFRA_BU);
    write(&a.join("pools/infra/a.txt"), "from butane\n");
    // Source B: the same pools translated by `agent butane` and served as .ign.
    let b = t.path().join("b");
    write(
        &b.join("pools/worker.ign"),
        &butane(&a.join("pools/worker.bu"), &a.join("pools")),
    );
    write(&b.join("pools/infra/10-base.ign"), INFRA_BASE);
    write(
        &b.join("pools/infra/20-extra.ign"),
        &butane(&a.join("pools/infra/20-extra.bu"), &a.join("pools/infra")),
    );
    let sa = start(&a);
    let sb = start(&b);
    for pool in ["worker", "infra"] {
        let ra = sa.get(&format!("/config/{pool}"));
        let rb = sb.get(&format!("/config/{pool}"));
        assert_eq!(ra.status, 200, "{pool}: {}", ra.text());
        assert_eq!(rb.status, 200, "{pool}: {}", rb.text());
        assert_eq!(
            ra.body, rb.body,
            "{pool}: a .bu pool is served as its translation"
        );
        let parsed = spec::config::parse(&ra.body)
            .unwrap_or_else(|r| panic!("{pool}: served config does not validate: {r:?}"));
        if pool == "worker" {
            let c = &parsed.config;
            assert_eq!(
                c.passwd.users[0].ssh_authorized_keys,
                ["ssh-ed25519 AAAA core@a"]
            );
            assert!(ra.text().contains("data:,welcome%0A"), "{}", ra.text());
            assert_eq!(c.systemd.units[0].name, "hello.service");
        } else {
            // Fragments merged in file-name order: the .bu's /etc/a overrides the base.
            assert!(ra.text().contains("from%20butane"), "{}", ra.text());
            assert!(ra.text().contains("data:,b"), "{}", ra.text());
            assert_eq!(parsed.config.kernel_arguments.should_exist, ["quiet"]);
        }
    }
}

#[test]
fn butane_local_files_stay_inside_the_pool_directory() {
    let t = TempDir::new("serve-butane-confined");
    let src = t.path().join("src");
    write(&t.path().join("secret"), "do not serve\n");
    write(
        &src.join("pools/worker.bu"),
        "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/x\n      contents:\n        local: ../../secret\n",
    );
    write(&src.join("pools/ok.ign"), &worker_config("ok"));
    let s = start(&src);
    s.wait_for("the error in /status", 10, |s| {
        !s.status()["sources"][0]["error"].is_null()
    });
    let st = s.status();
    let err = st["sources"][0]["error"].as_str().unwrap();
    assert!(
        err.contains("worker.bu") && err.contains("outside the files directory"),
        "{st}"
    );
    assert_ne!(s.get("/config/worker").status, 200);

    // A symlink out of the pool directory is refused too.
    std::fs::remove_file(src.join("pools/worker.bu")).unwrap();
    std::os::unix::fs::symlink(t.path().join("secret"), src.join("pools/link.txt")).unwrap();
    write(
        &src.join("pools/worker.bu"),
        "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/x\n      contents:\n        local: link.txt\n",
    );
    s.wait_for("the symlink refused", 10, |s| {
        s.status()["sources"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("link.txt") || e.contains("outside the files directory"))
    });
    let body = s.get("/config/worker");
    assert!(!body.text().contains("do%20not%20serve"), "{}", body.text());
}

/// Writes generation `n` of an AtomicWriter volume (`..data` swapped by rename(2), the old
/// generation removed, as the kubelet does) holding `pools/worker.bu` and a local file.
fn atomic_write_bu(vol: &Path, n: usize, bu: &str) {
    let gen_name = format!("..gen_{n:05}");
    let gen_dir = vol.join(&gen_name);
    write(&gen_dir.join("pools/worker.bu"), bu);
    write(&gen_dir.join("pools/marker.txt"), &format!("gen-{n}\n"));
    let old = std::fs::read_link(vol.join("..data")).ok();
    let tmp = vol.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&gen_name, &tmp).unwrap();
    std::fs::rename(&tmp, vol.join("..data")).unwrap();
    if std::fs::symlink_metadata(vol.join("pools")).is_err() {
        std::os::unix::fs::symlink("..data/pools", vol.join("pools")).unwrap();
    }
    if let Some(o) = old {
        let _ = std::fs::remove_dir_all(vol.join(o));
    }
}

const GOOD_BU: &str = "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/marker\n      contents:\n        local: marker.txt\n";

#[test]
fn broken_butane_generation_keeps_last_good() {
    let t = TempDir::new("serve-butane-broken");
    let vol = t.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    atomic_write_bu(&vol, 1, GOOD_BU);
    let s = serve_args(&vol).poll_1s().arg("--soak", "1s").start();
    let good = s.get("/config/worker");
    assert_eq!(good.status, 200, "{}", good.text());
    assert!(good.text().contains("gen-1"), "{}", good.text());
    s.wait_for("lastKnownGood", 10, |s| {
        !s.status()["sources"][0]["lastKnownGood"].is_null()
    });

    // Generation 2: a Butane error (a file without a path).
    atomic_write_bu(
        &vol,
        2,
        "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - contents:\n        inline: x\n",
    );
    s.wait_for("the error in /status", 10, |s| {
        !s.status()["sources"][0]["error"].is_null()
    });
    let st = s.status();
    let src = &st["sources"][0];
    assert!(src["error"].as_str().unwrap().contains("worker.bu"), "{st}");
    assert_eq!(
        src["active"]["generation"], src["lastKnownGood"]["generation"],
        "{st}"
    );
    assert_eq!(
        s.get("/config/worker").body,
        good.body,
        "the last good generation is served"
    );

    // Generation 3: not even YAML.
    atomic_write_bu(&vol, 3, "variant: fcos\nversion: [1.5.0\n");
    s.wait_for("generation 3 rejected", 10, |s| {
        s.status()["sources"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("yaml"))
    });
    assert_eq!(s.get("/config/worker").body, good.body);

    // Generation 4: fixed, served, error cleared.
    atomic_write_bu(&vol, 4, GOOD_BU);
    s.wait_for("generation 4", 10, |s| {
        s.get("/config/worker").text().contains("gen-4")
    });
    assert!(s.status()["sources"][0]["error"].is_null());
}
