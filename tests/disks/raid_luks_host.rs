//! RAID and LUKS in the disks stage, on the host (root, loop devices). The host kernel has no md
//! and no dm-crypt, so these tests cover what needs neither: the plan (`agent plan` shows
//! reuse/create per array and volume, probing real LUKS2 headers made with cryptsetup) and every
//! refusal, which must fail before anything is written (the images stay byte-for-byte the same),
//! and formatting (wipeVolume, label, uuid, options) through the library, and binding to a
//! software TPM (swtpm on 127.0.0.1, reached through the `swtpm:` TCTI).
//! Creating, assembling and opening for real is tested in the VM (vm-tests/scenarios/07-raid1,
//! 08-luks, 09-luks-tang, 15-luks-tpm2, 16-luks-tpm2-tang).

use std::process::Command;

use crate::support;
use serde_json::{Value, json};
use support::TempDir;
use support::root::{Loop, must_be_root};

fn need(tool: &str) {
    support::need(tool, "raid.apt");
}

fn sh(program: &str, args: &[&str], stdin: Option<&[u8]>) -> String {
    need(program);
    support::sh(program, args, stdin)
}

impl Loop {
    fn mkfs_ext4(&self) {
        sh("mkfs.ext4", &["-q", "-F", "-L", "old", &self.dev], None);
    }
    fn luks(&self, key: &[u8], label: &str) {
        sh(
            "cryptsetup",
            &[
                "luksFormat",
                "--batch-mode",
                "--type",
                "luks2",
                "--pbkdf",
                "pbkdf2",
                "--pbkdf-force-iterations",
                "1000",
                "--label",
                label,
                "--key-file=-",
                &self.dev,
            ],
            Some(key),
        );
    }
}

fn config(storage: Value) -> Value {
    json!({"ignition": {"version": "3.4.0"}, "storage": storage})
}

/// `agent run --stage disks`: (success, stderr).
fn run_disks(storage: Value) -> (bool, String) {
    let dir = TempDir::new("raidluks");
    std::fs::write(dir.0.join("config.json"), config(storage).to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args([
            "run",
            "--stage",
            "disks",
            "--device-timeout",
            "3",
            "--state-dir",
        ])
        .arg(&dir.0)
        .output()
        .unwrap();
    let leftover = dir.0.join("luks");
    assert!(
        !leftover.exists() || std::fs::read_dir(&leftover).unwrap().next().is_none(),
        "a refused run left key records behind"
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `agent plan`: (success, stdout, stderr).
fn plan(storage: Value) -> (bool, String, String) {
    let dir = TempDir::new("raidluks");
    std::fs::write(dir.0.join("c.json"), config(storage).to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["plan", "--device-timeout", "3", "--config-file"])
        .arg(dir.0.join("c.json"))
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
fn plan_shows_luks_reuse_and_create() {
    must_be_root();
    need("cryptsetup");
    let (a, b) = (Loop::new(32), Loop::new(32));
    a.luks(b"right", "vol");
    let (before_a, before_b) = (a.bytes(), b.bytes());
    let (ok, out, err) = plan(json!({
        "luks": [
            {"name": "a", "device": a.dev, "keyFile": {"source": "data:,right"}, "label": "vol"},
            {"name": "b", "device": b.dev, "clevis": {"tang": [{"url": "http://10.0.2.2:1", "thumbprint": "x"}]}}
        ],
        "filesystems": [{"device": "/dev/mapper/b", "format": "ext4"}]
    }));
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!(
            "luks a on {}: reuse (open with the key file)",
            a.dev
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "luks b on {}: create LUKS2 (generated key), clevis sss (tang http://10.0.2.2:1)",
            b.dev
        )),
        "{out}"
    );
    assert!(
        out.contains("filesystem /dev/mapper/b: reuse/create ext4 (decided after"),
        "{out}"
    );
    assert_eq!(a.bytes(), before_a, "plan changed a");
    assert_eq!(b.bytes(), before_b, "plan changed b");
}

#[test]
#[ignore = "needs root: make test-root"]
fn plan_shows_raid_create() {
    must_be_root();
    let (a, b) = (Loop::new(16), Loop::new(16));
    let (ok, out, err) = plan(json!({
        "raid": [{"name": "md0test", "level": "raid1", "devices": [a.dev, b.dev]}],
        "filesystems": [{"device": "/dev/md/md0test", "format": "ext4"}]
    }));
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!(
            "raid /dev/md/md0test: create raid1 on {}, {}",
            a.dev, b.dev
        )),
        "{out}"
    );
    assert!(
        out.contains("filesystem /dev/md/md0test: reuse/create ext4"),
        "{out}"
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn luks_over_data_without_wipe_is_refused() {
    must_be_root();
    need("cryptsetup");
    let l = Loop::new(32);
    l.mkfs_ext4();
    let before = l.bytes();
    let (ok, err) = run_disks(json!({"luks": [{"name": "x", "device": l.dev}]}));
    assert!(!ok);
    assert!(
        err.contains("holds a ext4 signature and wipeVolume is false"),
        "{err}"
    );
    assert_eq!(l.bytes(), before, "the device was modified");
}

#[test]
#[ignore = "needs root: make test-root"]
fn luks_existing_volume_refusals_touch_nothing() {
    must_be_root();
    need("cryptsetup");
    let l = Loop::new(32);
    l.luks(b"right", "vol");
    let before = l.bytes();
    // The wrong key: checked before anything is written.
    let (ok, err) = run_disks(json!({"luks": [{"name": "x", "device": l.dev,
        "keyFile": {"source": "data:,wrong"}}]}));
    assert!(!ok);
    assert!(err.contains("does not open the existing volume"), "{err}");
    // A generated key cannot open it.
    let (ok, err) = run_disks(json!({"luks": [{"name": "x", "device": l.dev}]}));
    assert!(!ok);
    assert!(err.contains("no keyFile to open it with"), "{err}");
    // Another label.
    let (ok, err) = run_disks(json!({"luks": [{"name": "x", "device": l.dev,
        "keyFile": {"source": "data:,right"}, "label": "other"}]}));
    assert!(!ok);
    assert!(err.contains("label \"vol\" != \"other\""), "{err}");
    assert_eq!(l.bytes(), before, "the volume was modified");
}

#[test]
#[ignore = "needs root: make test-root"]
fn raid_over_data_is_refused() {
    must_be_root();
    need("mdadm");
    let (a, b) = (Loop::new(16), Loop::new(16));
    a.mkfs_ext4();
    let (before_a, before_b) = (a.bytes(), b.bytes());
    let (ok, err) = run_disks(json!({"raid": [{"name": "t", "level": "raid1",
        "devices": [b.dev, a.dev]}]}));
    assert!(!ok);
    assert!(
        err.contains(&format!("member {} holds a ext4 signature", a.dev)),
        "{err}"
    );
    assert_eq!(a.bytes(), before_a);
    assert_eq!(b.bytes(), before_b);
}

#[test]
#[ignore = "needs root: make test-root"]
fn raid_spares_refused_for_raid0() {
    must_be_root();
    let (a, b) = (Loop::new(16), Loop::new(16));
    let (ok, _, err) = plan(json!({"raid": [{"name": "t", "level": "raid0", "spares": 1,
        "devices": [a.dev, b.dev]}]}));
    assert!(!ok);
    assert!(err.contains("spares"), "{err}");
}

/// wipeVolume over an ext4: the signatures go, a LUKS2 header with the configured label, UUID
/// and options is written (format only: opening needs dm-crypt, which the host lacks), and the
/// configured key file opens it.
#[test]
#[ignore = "needs root: make test-root"]
fn luks_wipe_volume_formats_with_label_uuid_and_options() {
    must_be_root();
    use agent::blockdev::luks::{self, LuksAction};
    use spec::config::types::{Luks, Resource};
    need("cryptsetup");
    need("wipefs");
    let l = Loop::new(32);
    l.mkfs_ext4();
    let uuid = "6b7f1c2e-1111-4000-8000-00000000abcd";
    let cfg = Luks {
        name: "w".into(),
        device: Some(l.dev.clone()),
        key_file: Resource {
            source: Some("data:,k3y".into()),
            ..Default::default()
        },
        label: Some("wiped".into()),
        uuid: Some(uuid.into()),
        wipe_volume: Some(true),
        options: ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    };
    let action = luks::decide_now(&cfg).unwrap();
    assert_eq!(
        action,
        LuksAction::Create {
            wipe: Some("ext4".into())
        }
    );
    let fetcher = agent::fetch::Fetcher::new(agent::fetch::Options::default());
    let p = luks::prepare(&cfg, action, &fetcher).unwrap();
    luks::format_and_bind(&cfg, &p).unwrap();
    let e = luks::examine(std::path::Path::new(&l.dev))
        .unwrap()
        .unwrap();
    assert_eq!(e.fstype, "crypto_LUKS");
    assert_eq!(e.label.as_deref(), Some("wiped"));
    assert_eq!(e.uuid.as_deref(), Some(uuid));
    let dump = sh("cryptsetup", &["luksDump", &l.dev], None);
    assert!(dump.contains("PBKDF:      pbkdf2"), "{dump}");
    sh(
        "cryptsetup",
        &["open", "--test-passphrase", "--key-file=-", &l.dev],
        Some(b"k3y"),
    );
    // Now the same config without wipeVolume reuses it (the key is checked, nothing written).
    let keep = Luks {
        wipe_volume: Some(false),
        ..cfg
    };
    let before = l.bytes();
    let a = luks::decide_now(&keep).unwrap();
    assert_eq!(a, LuksAction::Reuse { clevis: false });
    luks::prepare(&keep, a, &fetcher).unwrap();
    assert_eq!(l.bytes(), before);
}

/// A volume on a partition the same run creates, named by its by-partlabel link (which does not
/// exist here: no udev): decided after partitioning on the partition's node and formatted there.
/// (Opening needs dm-crypt, which the host kernel lacks: the run stops at `cryptsetup open`.)
#[test]
#[ignore = "needs root: make test-root"]
fn luks_on_a_new_partition_by_partlabel() {
    must_be_root();
    need("cryptsetup");
    let l = Loop::new(48);
    let label = format!("lk{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let (ok, err) = run_disks(json!({
        "disks": [{"device": l.dev, "partitions": [{"number": 1, "label": label, "sizeMiB": 24}]}],
        "luks": [{"name": "pl", "device": format!("/dev/disk/by-partlabel/{label}"), "label": "pll",
            "options": ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"]}]
    }));
    let part = format!("{}p1", l.dev);
    assert!(
        err.contains(&format!(
            "luks pl on /dev/disk/by-partlabel/{label}: reuse/create"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("creating LUKS2 volume pl on {part}")),
        "{err}"
    );
    let t = sh(
        "blkid",
        &["-p", "-c", "/dev/null", "-o", "value", "-s", "LABEL", &part],
        None,
    );
    assert_eq!(t.trim(), "pll");
    if !ok {
        assert!(err.contains(&format!("opening {part} as pl")), "{err}");
    }
}

/// A software TPM (swtpm) on 127.0.0.1 with its state in a directory of its own, reached by
/// tpm2-tools and clevis through the `swtpm:` TCTI (no device, no resource manager): the
/// guest's TPM in the VM scenarios, here on the host. Stopped on drop.
struct Swtpm {
    child: std::process::Child,
    port: u16,
    _state: TempDir,
}

impl Swtpm {
    fn start() -> Swtpm {
        need("swtpm");
        let state = TempDir::new("swtpm");
        // The TCTI reaches the control channel at port + 1: two free neighbouring ports.
        let port = (0..100)
            .find_map(|_| {
                let a = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
                let p = a.local_addr().ok()?.port();
                std::net::TcpListener::bind(("127.0.0.1", p.checked_add(1)?)).ok()?;
                Some(p)
            })
            .expect("two free neighbouring ports");
        let child = Command::new("swtpm")
            .args(["socket", "--tpm2", "--flags", "not-need-init,startup-clear"])
            .arg("--tpmstate")
            .arg(format!("dir={}", state.0.display()))
            .arg("--server")
            .arg(format!("type=tcp,port={port},bindaddr=127.0.0.1"))
            .arg("--ctrl")
            .arg(format!("type=tcp,port={},bindaddr=127.0.0.1", port + 1))
            .spawn()
            .unwrap();
        let t = Swtpm {
            child,
            port,
            _state: state,
        };
        // Ready when it accepts a connection (bounded: 200 tries).
        let up = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(25));
            std::net::TcpStream::connect(("127.0.0.1", port + 1)).is_ok()
        });
        assert!(up, "swtpm did not listen on 127.0.0.1:{}", port + 1);
        t
    }

    fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }

    /// `program args` with this TPM: (success, stdout, stderr).
    fn run(&self, program: &str, args: &[&str], stdin: &[u8]) -> (bool, String, String) {
        use std::io::Write;
        need(program);
        let mut c = Command::new(program)
            .args(args)
            .env("TPM2TOOLS_TCTI", self.tcti())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = c.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A LUKS2 volume bound to a (software) TPM2 with clevis, as boot 1 of
/// vm-tests/scenarios/15-luks-tpm2 leaves it, under the `wipeVolume` rules of a tang binding:
/// `wipeVolume` false plans a reuse through clevis, and a config without clevis is refused
/// touching nothing; `wipeVolume` true recreates it (a new header, bound to the TPM at hand,
/// whose key a TPM with reset state does not release). Opening needs dm-crypt: the VM does it.
#[test]
#[ignore = "needs root: make test-root"]
fn tpm2_bound_volume_follows_the_wipe_volume_rules() {
    must_be_root();
    need("cryptsetup");
    need("clevis");
    let tpm = Swtpm::start();
    let l = Loop::new(32);
    l.luks(b"first-key", "tvol");
    let (ok, _, err) = tpm.run(
        "clevis",
        &[
            "luks",
            "bind",
            "-y",
            "-d",
            &l.dev,
            "-k",
            "-",
            "sss",
            r#"{"t":1,"pins":{"tpm2":[{}]}}"#,
        ],
        b"first-key",
    );
    assert!(ok, "clevis luks bind with tpm2: {err}");
    let (ok, list, err) = tpm.run("clevis", &["luks", "list", "-d", &l.dev], b"");
    assert!(ok && list.contains("tpm2"), "clevis luks list: {list}{err}");
    let first_uuid = sh("cryptsetup", &["luksUUID", &l.dev], None);
    let before = l.bytes();

    // wipeVolume false, the same binding: reused, opened through clevis.
    let tpm2 = json!({"tpm2": true});
    let (ok, out, err) = plan(json!({"luks": [
        {"name": "t", "device": l.dev, "label": "tvol", "clevis": tpm2}]}));
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!(
            "luks t on {}: reuse (open with clevis), clevis sss (tpm2)",
            l.dev
        )),
        "{out}"
    );
    // wipeVolume false without clevis: refused before anything is written.
    let (ok, err) = run_disks(json!({"luks": [{"name": "t", "device": l.dev,
        "keyFile": {"source": "data:,first-key"}}]}));
    assert!(!ok);
    assert!(
        err.contains("the volume is bound to clevis, the config has no clevis binding")
            && err.contains("wipeVolume is false; refusing to touch it"),
        "{err}"
    );
    assert_eq!(l.bytes(), before, "a refused run changed the volume");

    // wipeVolume true: recreated and bound to this TPM. (`agent run --stage disks` formats
    // and binds, then stops at opening: no dm-crypt on the host.)
    let dir = TempDir::new("raidluks");
    let cfg = config(
        json!({"luks": [{"name": "t", "device": l.dev, "clevis": tpm2,
        "wipeVolume": true,
        "options": ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"]}]}),
    );
    std::fs::write(dir.0.join("config.json"), cfg.to_string()).unwrap();
    let (_, _, err) = tpm.run(
        env!("CARGO_BIN_EXE_agent"),
        &[
            "run",
            "--stage",
            "disks",
            "--device-timeout",
            "3",
            "--state-dir",
            dir.0.to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        err.contains(&format!("binding {} to clevis pin sss", l.dev)),
        "{err}"
    );
    let new_uuid = sh("cryptsetup", &["luksUUID", &l.dev], None);
    assert_ne!(new_uuid, first_uuid, "the volume was not recreated");
    let (ok, list, err) = tpm.run("clevis", &["luks", "list", "-d", &l.dev], b"");
    assert!(ok && list.contains("tpm2"), "clevis luks list: {list}{err}");
    // This TPM releases the new key (it opens the volume); a TPM with fresh state does not.
    let slot = list.split(':').next().unwrap().trim().to_string();
    let (ok, key, err) = tpm.run("clevis", &["luks", "pass", "-d", &l.dev, "-s", &slot], b"");
    assert!(ok, "clevis luks pass: {err}");
    sh(
        "cryptsetup",
        &["open", "--test-passphrase", "--key-file=-", &l.dev],
        Some(key.as_bytes()),
    );
    drop(tpm);
    let reset = Swtpm::start();
    let (ok, _, err) = reset.run("clevis", &["luks", "pass", "-d", &l.dev, "-s", &slot], b"");
    assert!(!ok, "a TPM with new state released the key: {err}");
}
