//! The server's OCI image (`make image`, packaging/oci-image.py): built without a container
//! daemon from the static binary, checked with `skopeo inspect` (labels, non-root user,
//! entrypoint), its one layer holding nothing but the binary, the user's passwd/group lines,
//! its state directory and /tmp (no shell), and run as a container runtime would run it: with
//! `podman` where the machine lets podman start a container, else unpacked by `umoci unpack`
//! and run from its root filesystem with the process the image's config gives (argv, user,
//! environment, working directory), in a network namespace of the test's own; a pool is
//! fetched from it over its default command's listener.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::netns::Netns;
use support::{TempDir, need, sh};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `make TARGET` in the source tree; fails the test with its output.
fn make(target: &str) -> String {
    let mut cmd = Command::new("make");
    // Without the variables cargo sets for a test (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...):
    // build scripts that track them would make `make static` rebuild on every run.
    for (k, _) in std::env::vars_os() {
        if k.to_str()
            .is_some_and(|k| k.starts_with("CARGO_") && k != "CARGO_HOME")
        {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .args(["--no-print-directory", "-C", ROOT, target])
        .stdin(Stdio::null())
        .output()
        .expect("running make");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "make {target} failed:\n{text}");
    text
}

/// Every path under `root` (relative, sorted) with its type, mode and owner.
fn tree(root: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let kind = if m.is_dir() {
                'd'
            } else if m.file_type().is_symlink() {
                'l'
            } else {
                'f'
            };
            out.push(format!(
                "{kind} {:o} {}:{} {rel}",
                m.mode() & 0o7777,
                m.uid(),
                m.gid()
            ));
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort_by(|a, b| a.rsplit(' ').next().cmp(&b.rsplit(' ').next()));
    out
}

/// GET `url` with curl inside `ns` until it answers 200 (at most `limit`); the body.
fn fetch_in(ns: &Netns, url: &str, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        let out = ns
            .command("curl")
            .args(["-sS", "--max-time", "2", "-w", "\n%{http_code}", url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Some((body, code)) = text.rsplit_once('\n')
            && code == "200"
        {
            return body.to_string();
        }
        assert!(
            start.elapsed() < limit,
            "{url} did not answer 200 within {limit:?}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether podman can start a container from the image here (some sandboxes refuse the
/// runtime's set-up, e.g. its resource limits).
fn podman_runs(image: &str) -> Result<(), String> {
    if !runtime::util::have_program("podman") {
        return Err("podman is not installed".into());
    }
    let out = Command::new("podman")
        .args(["run", "--rm", "--network", "none", image, "--version"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn image_builds_inspects_and_serves_a_pool() {
    support::root::must_be_root();
    for (tool, list) in [
        ("skopeo", "ship.apt"),
        ("umoci", "ship.apt"),
        ("curl", "serve.apt"),
        ("python3", "ship.apt"),
    ] {
        need(tool, list);
    }
    make("image");
    let version = env!("CARGO_PKG_VERSION");
    let layout = Path::new(ROOT).join("target/oci");
    let image = format!("oci:{}:{version}", layout.display());

    // skopeo reads it as an image: the labels, the non-root user, the entrypoint.
    let inspect: Value = serde_json::from_str(&sh("skopeo", &["inspect", &image], None)).unwrap();
    let labels = &inspect["Labels"];
    for (k, want) in [
        ("org.opencontainers.image.title", Some("agent")),
        ("org.opencontainers.image.version", Some(version)),
        ("org.opencontainers.image.licenses", Some("Apache-2.0")),
        ("org.opencontainers.image.revision", None),
        ("org.opencontainers.image.created", None),
        ("org.opencontainers.image.description", None),
    ] {
        let v = labels[k]
            .as_str()
            .unwrap_or_else(|| panic!("label {k}: {labels}"));
        assert!(!v.is_empty(), "label {k}");
        if let Some(w) = want {
            assert_eq!(v, w, "label {k}");
        }
    }
    assert_eq!(inspect["Os"], "linux");
    assert_eq!(inspect["Architecture"], "amd64");
    assert_eq!(inspect["Layers"].as_array().unwrap().len(), 1);
    let config: Value =
        serde_json::from_str(&sh("skopeo", &["inspect", "--config", &image], None)).unwrap();
    let c = &config["config"];
    let user = c["User"].as_str().expect("a User");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric user");
    assert_ne!(uid, 0, "the image runs as root: {user}");
    assert_eq!(c["Entrypoint"], serde_json::json!(["/usr/bin/agent"]));
    assert_eq!(c["Cmd"][0], "serve", "{c}");

    // The same binary gives the same image (fixed times, owners, order, gzip header).
    let digest = inspect["Digest"].as_str().unwrap().to_string();
    make("image");
    let again: Value = serde_json::from_str(&sh("skopeo", &["inspect", &image], None)).unwrap();
    assert_eq!(
        again["Digest"],
        digest.as_str(),
        "the image is not reproducible"
    );

    // Unpacked: the root filesystem holds only what the image is for, and the runtime
    // config (process) comes from the image's config.
    let t = TempDir::new("ship-image");
    let bundle = t.path().join("bundle");
    sh(
        "umoci",
        &[
            "unpack",
            "--image",
            &format!("{}:{version}", layout.display()),
            bundle.to_str().unwrap(),
        ],
        None,
    );
    let rootfs = bundle.join("rootfs");
    let got = tree(&rootfs);
    let want = [
        "d 755 0:0 etc",
        "f 644 0:0 etc/group",
        "f 644 0:0 etc/passwd",
        "d 1777 0:0 tmp",
        "d 755 0:0 usr",
        "d 755 0:0 usr/bin",
        "f 755 0:0 usr/bin/agent",
        "d 755 0:0 var",
        "d 755 0:0 var/lib",
        &format!("d 700 {uid}:{uid} var/lib/agent-serve"),
    ];
    assert_eq!(got, want, "the image's files (no shell, nothing else)");
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with(&format!("agent-serve:x:{uid}:{uid}:"))),
        "{passwd}"
    );
    // The binary in it is the static one, and it runs with nothing else there.
    let file = sh(
        "file",
        &[rootfs.join("usr/bin/agent").to_str().unwrap()],
        None,
    );
    assert!(file.contains("statically linked"), "{file}");
    let runtime: Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("config.json")).unwrap())
            .unwrap();
    let process = &runtime["process"];
    let argv: Vec<String> = process["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(argv[0], "/usr/bin/agent");
    assert_eq!(process["user"]["uid"], uid);
    let listen = argv
        .iter()
        .find_map(|a| a.strip_prefix("--listen-http="))
        .expect("the default command listens (plain HTTP)");
    let port = listen.rsplit(':').next().unwrap().to_string();
    let source = argv
        .iter()
        .find_map(|a| a.strip_prefix("--source="))
        .expect("the default command names its source");

    // A pool where the image expects its source (a volume mounted there in a container).
    let pool = r#"{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/from-the-image","contents":{"source":"data:,ok"}}]}}"#;
    let src = t.path().join("source");
    std::fs::create_dir_all(src.join("pools")).unwrap();
    std::fs::write(src.join("pools/worker.ign"), pool).unwrap();
    sh("chmod", &["-R", "a+rX", src.to_str().unwrap()], None);

    let ns = Netns::new(&[]);
    let url = format!("http://127.0.0.1:{port}/config/worker");
    match podman_runs(&image) {
        Ok(()) => {
            // The container in the test's namespace, the source as a read-only volume.
            let name = format!("agent-ship-{}", std::process::id());
            let out = sh(
                "podman",
                &[
                    "run",
                    "-d",
                    "--rm",
                    "--name",
                    &name,
                    "--network",
                    &format!("ns:/run/netns/{}", ns.name),
                    "-v",
                    &format!("{}:{source}:ro", src.display()),
                    &image,
                ],
                None,
            );
            eprintln!("podman: container {}", out.trim());
            let body = fetch_in(&ns, &url, Duration::from_secs(30));
            let _ = Command::new("podman").args(["rm", "-f", &name]).output();
            assert!(body.contains("/etc/from-the-image"), "{body}");
        }
        Err(why) => {
            eprintln!("podman cannot run a container here ({why}): running the unpacked root");
            let dest = rootfs.join(source.trim_start_matches('/'));
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            sh(
                "cp",
                &["-a", src.to_str().unwrap(), dest.to_str().unwrap()],
                None,
            );
            let mut cmd = ns.command("/usr/sbin/chroot");
            cmd.arg(format!(
                "--userspec={}:{}",
                process["user"]["uid"], process["user"]["gid"]
            ))
            .arg(&rootfs)
            .args(&argv)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
            assert_eq!(process["cwd"], "/", "chroot starts in /");
            for e in process["env"].as_array().unwrap() {
                let (k, v) = e.as_str().unwrap().split_once('=').unwrap();
                cmd.env(k, v);
            }
            let mut child = cmd.spawn().expect("running the image's process");
            let fetched = std::panic::catch_unwind(|| fetch_in(&ns, &url, Duration::from_secs(30)));
            // It runs as the image's user, not root.
            let status =
                std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            let body = fetched.unwrap_or_else(|_| {
                panic!(
                    "the image's process did not serve; its log:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            assert!(body.contains("/etc/from-the-image"), "{body}");
            let uids = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .unwrap_or_default()
                .to_string();
            // `ip netns exec` execs chroot, which execs the agent: the child is the server.
            assert!(
                uids.split_whitespace().all(|u| u == uid.to_string()),
                "the server's uids: {uids}"
            );
            // It wrote its checkpoint into the image's state directory, as its own user.
            let state = rootfs.join("var/lib/agent-serve");
            assert!(
                std::fs::read_dir(&state).unwrap().next().is_some(),
                "nothing in {}",
                state.display()
            );
        }
    }
    drop(ns);
}
