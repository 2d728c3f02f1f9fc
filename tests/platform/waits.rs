//! The waits Ignition makes without end, made without end here too, and never silently: the
//! drive-only platforms whose drive is always attached (nutanix, powervs, kubevirt) and
//! Azure's provisioning CD. Each runs the binary in a network namespace of the test's own
//! (nothing answers there: Azure's metadata service is unreachable) and in a mount namespace
//! where `/sys/class/block` is an empty tmpfs (no block device is seen, none of the host's is
//! probed), reads its log until the wait has said twice that it is still waiting, and stops
//! it. (The metadata services' retries say so too: tests/platform/http.rs.)

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use support::TempDir;
use support::netns::Netns;

/// `agent run --stage fetch --platform PLATFORM` in `ns`, seeing no block device: its stderr
/// lines until each of `waits` has been reported still waited for twice (or 400 lines, or
/// 60 s without a line); then it is stopped.
fn watch(ns: &Netns, platform: &str, waits: &[&str]) -> Vec<String> {
    let state = TempDir::new("waits-state");
    let sys = TempDir::new("waits-sysdir");
    std::fs::write(sys.join("cmdline"), "quiet").unwrap();
    let script = "mount -t tmpfs none /sys/class/block && exec \"$0\" \"$@\"";
    let mut child = ns
        .command("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_agent"))
        .args(["run", "--stage", "fetch", "--platform", platform])
        .arg("--state-dir")
        .arg(state.path())
        .arg("--system-config-dir")
        .arg(sys.path())
        .arg("--test-kernel-cmdline-file")
        .arg(sys.join("cmdline"))
        .env_remove("AGENT_SYSTEM_CONFIG_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running agent");
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let still = |seen: &[String], what: &str| {
        seen.iter()
            .filter(|l| l.contains(&format!("still waiting for a {what} (since ")))
            .count()
    };
    let mut seen: Vec<String> = Vec::new();
    while waits.iter().any(|w| still(&seen, w) < 2) && seen.len() < 400 {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            break;
        };
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !state.join("config.json").exists(),
        "{platform}: a config without a drive"
    );
    seen
}

#[test]
#[ignore = "needs root: make test-root"]
fn drives_ignition_waits_for_without_end_are_waited_for_and_reported() {
    let cases: &[(&str, &[&str])] = &[
        ("nutanix", &["config drive labelled config-2"]),
        ("powervs", &["config drive labelled config-2"]),
        (
            "kubevirt",
            &[
                "NoCloud seed labelled cidata or CIDATA",
                "config drive labelled config-2",
            ],
        ),
        ("azure", &["OVF provisioning CD (udf)"]),
    ];
    let ns = Netns::new(&[]);
    std::thread::scope(|s| {
        for &(platform, waits) in cases {
            let ns = &ns;
            s.spawn(move || {
                let seen = watch(ns, platform, waits);
                let log = seen.join("\n");
                for what in waits {
                    assert!(
                        log.contains(&format!("{platform}: waiting without end for a {what}")),
                        "{platform}:\n{log}"
                    );
                    let since: Vec<u64> = seen
                        .iter()
                        .filter_map(|l| {
                            let rest = l
                                .split(&format!("still waiting for a {what} (since "))
                                .nth(1)?;
                            rest.split("s;").next()?.parse().ok()
                        })
                        .collect();
                    assert!(since.len() >= 2, "{platform}: {what}:\n{log}");
                    assert!(
                        since.windows(2).all(|w| w[0] < w[1]),
                        "{platform}: {since:?}"
                    );
                }
                if platform == "azure" {
                    // The service never answered: passed over (after 20 s) for the CD.
                    assert!(
                        log.contains("azure: the instance metadata service did not answer"),
                        "{log}"
                    );
                }
            });
        }
    });
}
