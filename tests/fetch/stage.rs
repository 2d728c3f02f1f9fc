//! The fetch stage through the binary: config sources in order (flags, kernel command line,
//! platform), merge/replace chains across http, data and tftp (with an older-spec child),
//! loops and depth, base configs, fetch.json, and offline mode.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use support::TempDir;
use support::faulty_http::{Behavior, Server};
use support::fetch::tftpd;

struct Run {
    out: Output,
    state: RunState,
}

/// The state directory of a run: its own, or one it shares with other passes.
struct RunState {
    path: std::path::PathBuf,
    _own: Option<TempDir>,
}

impl RunState {
    fn path(&self) -> &Path {
        &self.path
    }
    fn join(&self, p: &str) -> std::path::PathBuf {
        self.path.join(p)
    }
}

impl Run {
    fn ok(&self) -> &Self {
        assert!(
            self.out.status.success(),
            "agent failed:\n{}",
            self.stderr()
        );
        self
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    fn config(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.state.join("config.json")).unwrap()).unwrap()
    }
    fn record(&self) -> agent::stages::fetch::Record {
        agent::state::StateDir::new(self.state.path())
            .read_fetch_record()
            .unwrap()
    }
    fn paths(&self) -> Vec<String> {
        let c = self.config();
        c["storage"]["files"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|f| f["path"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `agent run --stage fetch ARGS` with the kernel command line "quiet".
fn agent_fetch(args: &[&str], env: &[(&str, &str)], sysdir: Option<&Path>) -> Run {
    agent_fetch_cmdline("quiet", args, env, sysdir)
}

/// `agent run --stage fetch ARGS` with this kernel command line (test builds read it from the
/// file named by the hidden `--test-kernel-cmdline-file`).
fn agent_fetch_cmdline(
    cmdline: &str,
    args: &[&str],
    env: &[(&str, &str)],
    sysdir: Option<&Path>,
) -> Run {
    let state = TempDir::new("state");
    let out = agent_fetch_in(state.path(), cmdline, args, env, sysdir);
    Run {
        out,
        state: RunState {
            path: state.path().to_path_buf(),
            _own: Some(state),
        },
    }
}

/// [`agent_fetch_cmdline`] with the state directory `state` (a later pass of the same boot).
fn agent_fetch_in(
    state: &Path,
    cmdline: &str,
    args: &[&str],
    env: &[(&str, &str)],
    sysdir: Option<&Path>,
) -> Output {
    let empty = TempDir::new("sysdir");
    let karg = TempDir::new("cmdline");
    std::fs::write(karg.join("cmdline"), cmdline).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agent"));
    cmd.args(["run", "--stage", "fetch", "--state-dir"])
        .arg(state)
        .arg("--system-config-dir")
        .arg(sysdir.unwrap_or(empty.path()))
        .arg("--test-kernel-cmdline-file")
        .arg(karg.join("cmdline"))
        .args(args)
        .env_remove("AGENT_SYSTEM_CONFIG_DIR")
        .env_remove(agent::platform::test_dummy::CALLS_ENV);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn file_cfg(version: &str, path: &str, extra_ignition: &str) -> String {
    format!(
        r#"{{"ignition":{{"version":"{version}"{extra_ignition}}},"storage":{{"files":[{{"path":"{path}"}}]}}}}"#
    )
}

fn merge_refs(urls: &[String]) -> String {
    let list: Vec<String> = urls
        .iter()
        .map(|u| format!(r#"{{"source":"{u}"}}"#))
        .collect();
    format!(r#","config":{{"merge":[{}]}}"#, list.join(","))
}

fn data_url(s: &str) -> String {
    let mut out = String::from("data:,");
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[test]
#[ignore = "needs root: make test-root"]
fn merge_and_replace_chains_across_http_data_and_tftp() {
    let t = tftpd();
    let http = Server::start();
    // tftp child written in spec 3.0.0 (older), merging nothing.
    std::fs::write(t.root.join("c.ign"), file_cfg("3.0.0", "/c-tftp", "")).unwrap();
    let tftp_url = format!("tftp://127.0.0.1:{}/c.ign", t.port);
    // http child b (3.2.0) merges the tftp child, then a data child.
    let d = data_url(&file_cfg("3.3.0", "/d-data", ""));
    http.route(
        "/b.ign",
        vec![Behavior::Ok(
            file_cfg("3.2.0", "/b-http", &merge_refs(&[tftp_url.clone(), d])).into_bytes(),
        )],
    );
    // http r is a replace target whose config merges b.
    http.route(
        "/r.ign",
        vec![Behavior::Ok(
            file_cfg("3.4.0", "/r-http", &merge_refs(&[http.url("/b.ign")])).into_bytes(),
        )],
    );
    let user = format!(
        r#"{{"ignition":{{"version":"3.5.0","config":{{"replace":{{"source":"{}"}}}}}},"storage":{{"files":[{{"path":"/replaced-away"}}]}}}}"#,
        http.url("/r.ign")
    );
    let dir = TempDir::new("chain");
    std::fs::write(dir.join("user.ign"), &user).unwrap();
    let r = agent_fetch(
        &["--config-file", dir.join("user.ign").to_str().unwrap()],
        &[],
        None,
    );
    r.ok();
    assert_eq!(r.paths(), ["/r-http", "/b-http", "/c-tftp", "/d-data"]);
    let rec = r.record();
    assert!(rec.user_config_provided);
    let kinds: Vec<&str> = rec.configs.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["user", "replace", "merge", "merge", "merge"]);
    assert!(rec.configs.iter().all(|c| c.sha512.len() == 128));
    // Every fetched config is logged with its source and SHA-512.
    let err = r.stderr();
    assert!(
        err.contains(&format!("fetched config from {tftp_url} (sha512 ")),
        "{err}"
    );
}

#[test]
fn loops_and_depth_are_errors() {
    let http = Server::start();
    http.route(
        "/a.ign",
        vec![Behavior::Ok(
            file_cfg("3.4.0", "/a", &merge_refs(&[http.url("/b.ign")])).into_bytes(),
        )],
    );
    http.route(
        "/b.ign",
        vec![Behavior::Ok(
            file_cfg("3.4.0", "/b", &merge_refs(&[http.url("/a.ign")])).into_bytes(),
        )],
    );
    let r = agent_fetch(&["--config-url", &http.url("/a.ign")], &[], None);
    assert!(!r.out.status.success());
    assert!(r.stderr().contains("loop"), "{}", r.stderr());
    // A chain of 12 distinct configs is too deep.
    for i in 0..12 {
        let next = http.url(&format!("/d{}.ign", i + 1));
        http.route(
            &format!("/d{i}.ign"),
            vec![Behavior::Ok(
                file_cfg("3.4.0", &format!("/d{i}"), &merge_refs(&[next])).into_bytes(),
            )],
        );
    }
    http.route(
        "/d12.ign",
        vec![Behavior::Ok(file_cfg("3.4.0", "/end", "").into_bytes())],
    );
    let r = agent_fetch(&["--config-url", &http.url("/d0.ign")], &[], None);
    assert!(!r.out.status.success());
    assert!(r.stderr().contains("deeper"), "{}", r.stderr());
    // An invalid child is reported with its source.
    http.route(
        "/bad.ign",
        vec![Behavior::Ok(b"{\"ignition\":{}}".to_vec())],
    );
    http.route(
        "/p.ign",
        vec![Behavior::Ok(
            file_cfg("3.4.0", "/p", &merge_refs(&[http.url("/bad.ign")])).into_bytes(),
        )],
    );
    let r = agent_fetch(&["--config-url", &http.url("/p.ign")], &[], None);
    assert!(!r.out.status.success());
    assert!(r.stderr().contains("/bad.ign"), "{}", r.stderr());
}

#[test]
fn kernel_cmdline_then_platform_then_nothing() {
    let http = Server::start();
    http.route(
        "/k.ign",
        vec![Behavior::Ok(
            file_cfg("3.4.0", "/from-cmdline", "").into_bytes(),
        )],
    );
    http.route(
        "/i.ign",
        vec![Behavior::Ok(
            file_cfg("3.4.0", "/from-legacy", "").into_bytes(),
        )],
    );
    let fw = TempDir::new("fwcfg");
    let entry = fw.join("by_name/opt/com.coreos/config");
    std::fs::create_dir_all(&entry).unwrap();
    std::fs::write(entry.join("raw"), file_cfg("3.4.0", "/from-qemu", "")).unwrap();
    let fwdir = fw.path().to_str().unwrap();
    let both = format!(
        "quiet ignition.config.url={} agent.config.url={}",
        http.url("/i.ign"),
        http.url("/k.ign")
    );
    let r = agent_fetch_cmdline(
        &both,
        &["--platform", "qemu", "--test-qemu-fw-cfg-dir", fwdir],
        &[],
        None,
    );
    assert_eq!(r.ok().paths(), ["/from-cmdline"]);
    let legacy = format!("ignition.config.url={}", http.url("/i.ign"));
    let r = agent_fetch_cmdline(&legacy, &["--platform", "metal"], &[], None);
    assert_eq!(r.ok().paths(), ["/from-legacy"]);
    let r = agent_fetch(
        &["--platform", "qemu", "--test-qemu-fw-cfg-dir", fwdir],
        &[],
        None,
    );
    assert_eq!(r.ok().paths(), ["/from-qemu"]);
    assert_eq!(r.record().source, "qemu fw_cfg opt/com.coreos/config");
    let f = TempDir::new("fileplat");
    std::fs::write(f.join("c.ign"), file_cfg("3.4.0", "/from-file", "")).unwrap();
    let r = agent_fetch(
        &["--platform", "file"],
        &[("AGENT_CONFIG_FILE", f.join("c.ign").to_str().unwrap())],
        None,
    );
    assert_eq!(r.ok().paths(), ["/from-file"]);
    // --config-url beats the command line.
    let r = agent_fetch_cmdline(&both, &["--config-url", &http.url("/i.ign")], &[], None);
    assert_eq!(r.ok().paths(), ["/from-legacy"]);
    // Nothing anywhere: an empty config, recorded as such.
    let r = agent_fetch(&["--platform", "metal"], &[], None);
    r.ok();
    assert!(r.paths().is_empty());
    let rec = r.record();
    assert!(!rec.user_config_provided);
    assert_eq!(rec.source, "no user config provided");
    assert!(r.stderr().contains("no user config provided"));
}

#[test]
fn base_configs_merge_under_the_user_config() {
    let sys = TempDir::new("sys");
    std::fs::create_dir_all(sys.join("base.d")).unwrap();
    std::fs::create_dir_all(sys.join("base.platform.d/qemu")).unwrap();
    std::fs::create_dir_all(sys.join("base.platform.d/metal")).unwrap();
    std::fs::write(
        sys.join("base.d/20-b.ign"),
        file_cfg("3.4.0", "/base-20", ""),
    )
    .unwrap();
    std::fs::write(
        sys.join("base.d/10-a.ign"),
        file_cfg("3.0.0", "/base-10", ""),
    )
    .unwrap();
    std::fs::write(sys.join("base.d/README"), "not a config").unwrap();
    std::fs::write(
        sys.join("base.platform.d/qemu/x.ign"),
        file_cfg("3.4.0", "/plat-qemu", ""),
    )
    .unwrap();
    std::fs::write(
        sys.join("base.platform.d/metal/x.ign"),
        file_cfg("3.4.0", "/plat-metal", ""),
    )
    .unwrap();
    let dir = TempDir::new("baseuser");
    std::fs::write(dir.join("u.ign"), file_cfg("3.4.0", "/user", "")).unwrap();
    let fw = TempDir::new("nofw");
    let r = agent_fetch(
        &[
            "--platform",
            "qemu",
            "--config-file",
            dir.join("u.ign").to_str().unwrap(),
            "--test-qemu-fw-cfg-dir",
            fw.path().to_str().unwrap(),
        ],
        &[],
        Some(sys.path()),
    );
    assert_eq!(
        r.ok().paths(),
        ["/base-10", "/base-20", "/plat-qemu", "/user"]
    );
}

#[test]
fn offline_mode_marks_configs_that_need_the_network() {
    let http = Server::start();
    http.route(
        "/n.ign",
        vec![Behavior::Ok(file_cfg("3.4.0", "/net", "").into_bytes())],
    );
    let dir = TempDir::new("offline");
    let needs = file_cfg("3.4.0", "/u", &merge_refs(&[http.url("/n.ign")]));
    std::fs::write(dir.join("net.ign"), needs).unwrap();
    let local = file_cfg(
        "3.4.0",
        "/u",
        &merge_refs(&[data_url(&file_cfg("3.4.0", "/d", ""))]),
    );
    std::fs::write(dir.join("local.ign"), local).unwrap();
    let r = agent_fetch(
        &[
            "--offline",
            "--config-file",
            dir.join("net.ign").to_str().unwrap(),
        ],
        &[],
        None,
    );
    assert_eq!(
        r.out.status.code(),
        Some(agent::stages::fetch::EXIT_NEEDS_NETWORK),
        "{}",
        r.stderr()
    );
    assert!(r.state.join("neednet").exists());
    assert!(!r.state.join("config.json").exists());
    assert!(
        http.requests("/n.ign").is_empty(),
        "offline mode used the network"
    );
    // A cmdline URL needs the network too.
    let cmd = format!("agent.config.url={}", http.url("/n.ign"));
    let r = agent_fetch_cmdline(&cmd, &["--offline"], &[], None);
    assert_eq!(r.out.status.code(), Some(3));
    // A config that only uses data URLs works offline.
    let r = agent_fetch(
        &[
            "--offline",
            "--config-file",
            dir.join("local.ign").to_str().unwrap(),
        ],
        &[],
        None,
    );
    assert_eq!(r.ok().paths(), ["/u", "/d"]);
    assert!(!r.state.join("neednet").exists());
    // The config itself is local, but the files stage will fetch contents over HTTP, or a
    // LUKS volume is bound to tang: the offline pass asks for the network all the same.
    let later = [
        r#"{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/f","contents":{"source":"http://10.0.2.2/f"}}]}}"#,
        r#"{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/f","append":[{"source":"tftp://10.0.2.2/f"}]}]}}"#,
        r#"{"ignition":{"version":"3.4.0"},"storage":{"luks":[{"name":"v","device":"/dev/vdb","clevis":{"tang":[{"url":"http://10.0.2.2","thumbprint":"x"}]}}]}}"#,
    ];
    for (i, cfg) in later.iter().enumerate() {
        let f = dir.join(&format!("later-{i}.ign"));
        std::fs::write(&f, cfg).unwrap();
        let r = agent_fetch(
            &["--offline", "--config-file", f.to_str().unwrap()],
            &[],
            None,
        );
        assert_eq!(r.out.status.code(), Some(3), "{cfg}: {}", r.stderr());
        assert!(r.state.join("neednet").exists(), "{cfg}");
        assert!(!r.state.join("config.json").exists(), "{cfg}");
    }
}

#[test]
fn platform_hooks_through_the_binary_with_the_test_dummy() {
    // test-dummy (test builds only) prepares the fetcher with an S3 region and returns a
    // config naming the region its fetcher had: the provider was asked after preparing.
    let r = agent_fetch(&["--platform", "test-dummy"], &[], None);
    assert_eq!(
        r.ok().paths(),
        [format!(
            "/test-dummy/{}",
            agent::platform::test_dummy::REGION
        )]
    );
    assert_eq!(r.record().source, "test-dummy provider");
    // The file it leaves for the target root is in the state directory for the files stage.
    let files = agent::state::StateDir::new(r.state.path())
        .provider_files()
        .unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(
        (files[0].path.as_str(), files[0].mode),
        (agent::platform::test_dummy::OUTPUT_FILE, 0o600)
    );
    assert_eq!(
        files[0].contents,
        agent::platform::test_dummy::REGION.as_bytes()
    );
    // It needs the network: offline, the stage asks for it instead of calling the provider.
    let r = agent_fetch(&["--platform", "test-dummy", "--offline"], &[], None);
    assert_eq!(r.out.status.code(), Some(3), "{}", r.stderr());
    assert!(r.state.join("neednet").exists());
    assert!(
        r.stderr().contains("the config of platform test-dummy"),
        "{}",
        r.stderr()
    );
}

#[test]
fn a_platform_yields_to_the_kernel_command_line_and_unknown_ones_are_refused() {
    let http = Server::start();
    http.route(
        "/k.ign",
        vec![Behavior::Ok(
            file_cfg("3.4.0", "/from-cmdline", "").into_bytes(),
        )],
    );
    // A config named on the kernel command line wins over the platform's own (gcp: its
    // metadata service is not asked).
    let cmd = format!("agent.config.url={}", http.url("/k.ign"));
    let r = agent_fetch_cmdline(&cmd, &["--platform", "gcp"], &[], None);
    assert_eq!(r.ok().paths(), ["/from-cmdline"]);
    assert_eq!(r.record().platform.as_deref(), Some("gcp"));
    // Unknown names are refused while parsing the command line, listing the table.
    let r = agent_fetch(&["--platform", "bogus"], &[], None);
    assert_eq!(r.out.status.code(), Some(2));
    let want = format!(
        "invalid value for --platform <NAME>: unsupported platform \"bogus\" ({})",
        agent::platform::summary()
    );
    assert!(r.stderr().contains(&want), "{}", r.stderr());
}

#[test]
fn s3_endpoint_from_the_kernel_command_line_and_the_flag() {
    // A path-style S3-compatible store (anonymous GET /bucket/key); no metadata service, so
    // no credentials.
    let s3 = Server::start();
    s3.route(
        "/bkt/cfg/u.ign",
        vec![Behavior::Ok(file_cfg("3.4.0", "/from-s3", "").into_bytes())],
    );
    let dead = format!("http://127.0.0.1:{}", support::fetch::free_tcp_port());
    let imds = ["--test-aws-imds-url", &dead];
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["--config-url", "s3://bkt/cfg/u.ign"]
            .iter()
            .chain(&imds)
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let karg = format!("quiet agent.s3_endpoint={}", s3.url(""));
    let a = args(&[]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let r = agent_fetch_cmdline(&karg, &a, &[], None);
    assert_eq!(r.ok().paths(), ["/from-s3"]);
    assert_eq!(s3.requests("/bkt/cfg/u.ign").len(), 1);
    // The flag wins over the kernel argument.
    let wrong = format!("agent.s3_endpoint={dead}");
    let url = s3.url("");
    let a = args(&["--s3-endpoint", &url]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let r = agent_fetch_cmdline(&wrong, &a, &[], None);
    assert_eq!(r.ok().paths(), ["/from-s3"]);
    assert_eq!(s3.requests("/bkt/cfg/u.ign").len(), 2);
    // A bad value is an error that names it.
    let r = agent_fetch_cmdline("agent.s3_endpoint=minio:9000", &a, &[], None);
    assert_eq!(r.out.status.code(), Some(1));
    assert!(
        r.stderr()
            .contains("kernel argument agent.s3_endpoint: \"minio:9000\": not an endpoint URL"),
        "{}",
        r.stderr()
    );
    let r = agent_fetch(&["--s3-endpoint", "minio:9000"], &[], None);
    assert_eq!(r.out.status.code(), Some(2), "{}", r.stderr());
    assert!(r.stderr().contains("not an endpoint URL"), "{}", r.stderr());
}

/// Ignition: a zero-length user config is no user config; base configs still apply and the
/// rendered config is the same as with no config at all (blackbox `general.empty`,
/// `preemption.no.config`).
#[test]
fn empty_user_config_is_no_user_config() {
    let sys = TempDir::new("emptysys");
    std::fs::create_dir_all(sys.join("base.d")).unwrap();
    std::fs::write(
        sys.join("base.d/base.ign"),
        file_cfg("3.0.0", "/ignition/base", ""),
    )
    .unwrap();
    let dir = TempDir::new("emptyuser");
    let empty = dir.join("empty.ign");
    std::fs::write(&empty, b"").unwrap();
    let empty_arg = empty.to_str().unwrap();

    let r = agent_fetch(&["--config-file", empty_arg], &[], Some(sys.path()));
    assert_eq!(r.ok().paths(), ["/ignition/base"]);
    let rec = r.record();
    assert!(!rec.user_config_provided);
    assert_eq!(rec.source, "no user config provided");
    assert!(r.stderr().contains("is empty"), "{}", r.stderr());

    // No base: the same rendered config as when there is no config anywhere.
    let r = agent_fetch(&["--config-file", empty_arg], &[], None);
    let none = agent_fetch(&["--platform", "metal"], &[], None);
    assert_eq!(r.ok().config(), none.ok().config());
    assert!(!r.record().user_config_provided);

    // Empty from the platform and from an HTTP 200 with no body: the same.
    let r = agent_fetch(
        &["--platform", "file"],
        &[("AGENT_CONFIG_FILE", empty_arg)],
        Some(sys.path()),
    );
    assert_eq!(r.ok().paths(), ["/ignition/base"]);
    assert!(!r.record().user_config_provided);
    let http = Server::start();
    http.route("/empty.ign", vec![Behavior::Ok(Vec::new())]);
    let r = agent_fetch(
        &["--config-url", &http.url("/empty.ign")],
        &[],
        Some(sys.path()),
    );
    assert_eq!(r.ok().paths(), ["/ignition/base"]);
    assert!(!r.record().user_config_provided);

    // Whitespace is not empty: it is an invalid config, as in Ignition.
    std::fs::write(dir.join("blank.ign"), b" \n").unwrap();
    let r = agent_fetch(
        &["--config-file", dir.join("blank.ign").to_str().unwrap()],
        &[],
        None,
    );
    assert!(!r.out.status.success());
}

/// `<system-config-dir>/user.ign` preempts the platform's config; base configs apply under
/// it (blackbox `preemption.base.user.provider.config`); the kernel command line still wins.
#[test]
fn system_user_config_preempts_the_platform() {
    let sys = TempDir::new("usersys");
    std::fs::create_dir_all(sys.join("base.d")).unwrap();
    std::fs::write(
        sys.join("base.d/base.ign"),
        file_cfg("3.0.0", "/ignition/base", ""),
    )
    .unwrap();
    std::fs::write(
        sys.join("user.ign"),
        file_cfg("3.0.0", "/ignition/user", ""),
    )
    .unwrap();
    let dir = TempDir::new("provider");
    std::fs::write(
        dir.join("p.ign"),
        file_cfg("3.0.0", "/ignition/provider", ""),
    )
    .unwrap();
    let p_ign = dir.join("p.ign");
    let provider = [("AGENT_CONFIG_FILE", p_ign.to_str().unwrap())];
    let r = agent_fetch(&["--platform", "file"], &provider, Some(sys.path()));
    assert_eq!(r.ok().paths(), ["/ignition/base", "/ignition/user"]);
    let rec = r.record();
    assert!(rec.user_config_provided);
    assert!(rec.source.ends_with("user.ign"), "{}", rec.source);

    // Without user.ign the provider's config applies.
    std::fs::remove_file(sys.join("user.ign")).unwrap();
    let r = agent_fetch(&["--platform", "file"], &provider, Some(sys.path()));
    assert_eq!(r.ok().paths(), ["/ignition/base", "/ignition/provider"]);

    // The kernel command line comes before user.ign.
    std::fs::write(
        sys.join("user.ign"),
        file_cfg("3.0.0", "/ignition/user", ""),
    )
    .unwrap();
    let http = Server::start();
    http.route(
        "/k.ign",
        vec![Behavior::Ok(
            file_cfg("3.0.0", "/ignition/cmdline", "").into_bytes(),
        )],
    );
    let cmdline = format!("ignition.config.url={}", http.url("/k.ign"));
    let r = agent_fetch_cmdline(
        &cmdline,
        &["--platform", "file"],
        &provider,
        Some(sys.path()),
    );
    assert_eq!(r.ok().paths(), ["/ignition/base", "/ignition/cmdline"]);
}

/// A pass of the fetch stage in `state`, as the initramfs runs it: `Run` for its checks.
fn pass(state: &TempDir, args: &[&str], env: &[(&str, &str)], sysdir: Option<&Path>) -> Run {
    let out = agent_fetch_in(state.path(), "quiet", args, env, sysdir);
    Run {
        out,
        state: RunState {
            path: state.path().to_path_buf(),
            _own: None,
        },
    }
}

#[test]
fn a_platform_read_once_still_renders_in_the_online_pass() {
    // The platform hands its config over once (as Hyper-V KVP and the z/VM reader do: here
    // qemu's fw_cfg entry, deleted after the first read); the config merges an http URL, so
    // the offline pass exits 3 and the online pass renders it from the kept answer.
    let http = Server::start();
    http.route(
        "/n.ign",
        vec![Behavior::Ok(file_cfg("3.4.0", "/net", "").into_bytes())],
    );
    let fw = TempDir::new("fwonce");
    let entry = fw.join("by_name/opt/com.coreos/config");
    std::fs::create_dir_all(&entry).unwrap();
    let user = file_cfg("3.4.0", "/u", &merge_refs(&[http.url("/n.ign")]));
    std::fs::write(entry.join("raw"), &user).unwrap();
    let fwdir = fw.path().to_str().unwrap();
    let args = ["--platform", "qemu", "--test-qemu-fw-cfg-dir", fwdir];
    let state = TempDir::new("state-once");
    let offline: Vec<&str> = args.iter().copied().chain(["--offline"]).collect();
    let r = pass(&state, &offline, &[], None);
    assert_eq!(r.out.status.code(), Some(3), "{}", r.stderr());
    assert!(http.requests("/n.ign").is_empty());
    let kept = state.join("provider-answer.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o600, "it may hold secrets");
    std::fs::remove_file(entry.join("raw")).unwrap();
    let r = pass(&state, &args, &[], None);
    assert_eq!(r.ok().paths(), ["/u", "/net"]);
    assert_eq!(r.record().source, "qemu fw_cfg opt/com.coreos/config");
    assert!(r.record().user_config_provided);
    assert!(
        r.stderr()
            .contains("platform qemu: taking the answer an earlier pass of this boot kept"),
        "{}",
        r.stderr()
    );
    assert!(!state.join("neednet").exists());
    // Without the kept answer the entry is gone: no config (the check can fail).
    std::fs::remove_file(&kept).unwrap();
    let r = pass(&state, &args, &[], None);
    assert!(r.ok().paths().is_empty());
    assert!(!r.record().user_config_provided);

    // "No config" is an answer too: a base config needs the network, the platform had no
    // config in the offline pass; one that appears before the online pass is not taken.
    let sys = TempDir::new("sys-once");
    std::fs::create_dir_all(sys.join("base.d")).unwrap();
    std::fs::write(
        sys.join("base.d/b.ign"),
        file_cfg("3.4.0", "/base", &merge_refs(&[http.url("/n.ign")])),
    )
    .unwrap();
    let state = TempDir::new("state-none");
    let r = pass(&state, &offline, &[], Some(sys.path()));
    assert_eq!(r.out.status.code(), Some(3), "{}", r.stderr());
    std::fs::write(entry.join("raw"), &user).unwrap();
    let r = pass(&state, &args, &[], Some(sys.path()));
    assert_eq!(r.ok().paths(), ["/base", "/net"]);
    assert!(!r.record().user_config_provided);
    assert!(r.stderr().contains("(no config)"), "{}", r.stderr());
}

#[test]
fn the_platform_is_asked_once_per_boot_and_its_files_survive() {
    let calls = TempDir::new("calls");
    let count = calls.join("n");
    let env = [(
        agent::platform::test_dummy::CALLS_ENV,
        count.to_str().unwrap(),
    )];
    let asked = || {
        std::fs::read_to_string(&count)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let state = TempDir::new("state-dummy");
    let want = [format!(
        "/test-dummy/{}",
        agent::platform::test_dummy::REGION
    )];
    let r = pass(&state, &["--platform", "test-dummy"], &env, None);
    assert_eq!(r.ok().paths(), want);
    assert_eq!(asked(), 1);
    // The same stage again (a restarted unit): the kept answer, its files too.
    std::fs::remove_file(state.join("provider-files.json")).unwrap();
    let r = pass(&state, &["--platform", "test-dummy"], &env, None);
    assert_eq!(r.ok().paths(), want);
    assert_eq!(asked(), 1, "asked once");
    let files = agent::state::StateDir::new(state.path())
        .provider_files()
        .unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].path, agent::platform::test_dummy::OUTPUT_FILE);
    // Another boot's answer is not taken.
    let kept = state.join("provider-answer.json");
    let mut a: serde_json::Value = serde_json::from_slice(&std::fs::read(&kept).unwrap()).unwrap();
    a["bootId"] = "another-boot".into();
    std::fs::write(&kept, serde_json::to_vec(&a).unwrap()).unwrap();
    let r = pass(&state, &["--platform", "test-dummy"], &env, None);
    assert_eq!(r.ok().paths(), want);
    assert_eq!(asked(), 2);
    assert!(
        r.stderr().contains("kept in another boot"),
        "{}",
        r.stderr()
    );
    // Nor another platform's: qemu without an entry has no config.
    let fw = TempDir::new("nofw-dummy");
    let r = pass(
        &state,
        &[
            "--platform",
            "qemu",
            "--test-qemu-fw-cfg-dir",
            fw.path().to_str().unwrap(),
        ],
        &env,
        None,
    );
    assert!(r.ok().paths().is_empty());
    assert!(
        !state.join("provider-files.json").exists(),
        "qemu leaves no files"
    );
}
