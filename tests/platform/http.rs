//! The platforms whose config comes from an HTTP metadata service, through the binary
//! (`agent run --stage fetch --platform NAME`), each against a server of the test's own that
//! speaks the platform's protocol on the platform's real address (169.254.169.254,
//! 100.100.100.200) inside a network namespace the test creates (`support::netns`); the
//! agent runs in it through `ip netns exec`. Covers success, no user data, the retry schedule
//! on 5xx (and Oracle's 429), the token handshakes (AWS IMDSv2 with its IMDSv1 fallback,
//! Akamai), base64 and gzip user data, a hanging service, a malformed token and the offline
//! pass. Packet's service is a DNS name over TLS: its test server is on 127.0.0.1, named by
//! the hidden `--test-metadata-url`.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::TempDir;
use support::faulty_http::{Behavior, Request, Server};
use support::netns::Netns;

const LINK_LOCAL: &str = "169.254.169.254";
const SERVICE: &str = "169.254.169.254:80";

struct Run {
    out: Output,
    state: TempDir,
}

impl Run {
    fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    #[track_caller]
    fn ok(&self) -> &Self {
        assert_eq!(self.code(), 0, "agent failed:\n{}", self.stderr());
        self
    }
    #[track_caller]
    fn failed(&self) -> &Self {
        assert_eq!(self.code(), 1, "agent did not fail:\n{}", self.stderr());
        assert!(
            !self.state.join("config.json").exists(),
            "a failed fetch wrote a config"
        );
        self
    }
    /// The `path`s of `storage.files` of the rendered config.
    fn paths(&self) -> Vec<String> {
        let c: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.state.join("config.json")).unwrap())
                .unwrap();
        c["storage"]["files"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|f| f["path"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
    fn source(&self) -> String {
        agent::state::StateDir::new(self.state.path())
            .read_fetch_record()
            .unwrap()
            .source
    }
}

/// The arguments of `agent run --stage fetch` with fresh state and system config
/// directories and an empty kernel command line (kept alive by the returned guards).
fn fetch_args(platform: &str, extra: &[&str]) -> (Vec<String>, TempDir, TempDir) {
    let state = TempDir::new("state");
    let sys = TempDir::new("sysdir");
    std::fs::write(sys.join("cmdline"), "quiet").unwrap();
    let mut args: Vec<String> = ["run", "--stage", "fetch", "--platform", platform]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend([
        "--state-dir".into(),
        state.path().display().to_string(),
        "--system-config-dir".into(),
        sys.path().display().to_string(),
        "--test-kernel-cmdline-file".into(),
        sys.join("cmdline").display().to_string(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    (args, state, sys)
}

/// `agent run --stage fetch --platform PLATFORM EXTRA…` inside `ns`.
fn fetch_in(ns: &Netns, platform: &str, extra: &[&str]) -> Run {
    let (args, state, _sys) = fetch_args(platform, extra);
    let out = ns
        .command(env!("CARGO_BIN_EXE_agent"))
        .args(&args)
        .env_remove("AGENT_SYSTEM_CONFIG_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("running agent");
    Run { out, state }
}

/// A config writing the file `path`.
fn cfg(path: &str) -> Vec<u8> {
    format!(r#"{{"ignition":{{"version":"3.4.0"}},"storage":{{"files":[{{"path":"{path}"}}]}}}}"#)
        .into_bytes()
}

fn ok(body: impl Into<Vec<u8>>) -> Vec<Behavior> {
    vec![Behavior::Ok(body.into())]
}

fn b64(data: &[u8]) -> String {
    spec::encoding::data_url::base64_encode(data)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

/// The one request made to `path`.
#[track_caller]
fn only(s: &Server, path: &str) -> Request {
    let r = s.requests(path);
    assert_eq!(r.len(), 1, "requests to {path}: {r:?}");
    r.into_iter().next().unwrap()
}

/// A namespace with the link-local address and a server on port 80 of it.
fn link_local() -> (Netns, Server) {
    let ns = Netns::new(&[LINK_LOCAL]);
    let s = ns.serve(SERVICE);
    (ns, s)
}

#[test]
#[ignore = "needs root: make test-root"]
fn aws_imdsv2_token_then_user_data() {
    let (ns, s) = link_local();
    s.route("/latest/api/token", ok("AQAEAtok-1==\n"));
    s.route("/2019-10-01/user-data", ok(cfg("/from-aws")));
    s.route("/latest/meta-data/placement/region", ok("eu-west-3"));
    let r = fetch_in(&ns, "aws", &[]);
    assert_eq!(r.ok().paths(), ["/from-aws"]);
    assert_eq!(
        r.source(),
        "aws metadata service http://169.254.169.254/2019-10-01/user-data"
    );
    // The region for S3, from the same service.
    assert!(
        r.stderr().contains("aws: region eu-west-3"),
        "{}",
        r.stderr()
    );
    let get = only(&s, "/2019-10-01/user-data");
    assert_eq!(get.method, "GET");
    assert_eq!(get.header("X-aws-ec2-metadata-token"), Some("AQAEAtok-1=="));
    assert!(
        get.header("User-Agent").unwrap().starts_with("Ignition/"),
        "{get:?}"
    );
    // One token for the user data (the region's client asks its own).
    let puts = s.requests("/latest/api/token");
    assert_eq!(puts.len(), 2, "{puts:?}");
    for p in &puts {
        assert_eq!(p.method, "PUT");
        assert_eq!(
            p.header("X-aws-ec2-metadata-token-ttl-seconds"),
            Some("21600")
        );
        assert_eq!(p.header("Content-Length"), Some("0"));
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn aws_imdsv1_fallback_and_no_user_data() {
    // No token service (404, as IMDSv1-only services answer): the user data without a token.
    let (ns, s) = link_local();
    s.route("/latest/api/token", vec![Behavior::Status(404)]);
    s.route("/2019-10-01/user-data", ok(cfg("/imdsv1")));
    let r = fetch_in(&ns, "aws", &[]);
    assert_eq!(r.ok().paths(), ["/imdsv1"]);
    assert_eq!(
        only(&s, "/2019-10-01/user-data").header("X-aws-ec2-metadata-token"),
        None
    );
    assert!(
        r.stderr()
            .contains("aws metadata service: no session token"),
        "{}",
        r.stderr()
    );
    // No user data: 404, an empty config, asked once (no retry loop).
    let (ns, s) = link_local();
    s.route("/latest/api/token", ok("tok"));
    let r = fetch_in(&ns, "aws", &[]);
    assert_eq!(r.ok().paths(), Vec::<String>::new());
    assert_eq!(r.source(), "no user config provided");
    assert_eq!(s.requests("/2019-10-01/user-data").len(), 1);
    assert!(
        r.stderr().contains("aws: HTTP 404: no user data"),
        "{}",
        r.stderr()
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_malformed_or_refused_token_is_a_clear_error() {
    for (answer, why) in [
        (
            Behavior::Ok(b"bad\x01token".to_vec()),
            "the service answered a malformed token (9 bytes; byte 3 is 0x01",
        ),
        (
            Behavior::Ok(b"  \n".to_vec()),
            "the service answered an empty token",
        ),
        (
            Behavior::Status(401),
            "http://169.254.169.254/latest/api/token: HTTP 401 Unauthorized",
        ),
        // As Ignition: only a 404 means IMDSv1; 403 (IMDS turned off) and 405 fail.
        (
            Behavior::Status(403),
            "http://169.254.169.254/latest/api/token: HTTP 403 Forbidden",
        ),
        (
            Behavior::Status(405),
            "http://169.254.169.254/latest/api/token: HTTP 405 Method Not Allowed",
        ),
    ] {
        let (ns, s) = link_local();
        s.route("/latest/api/token", vec![answer]);
        s.route("/2019-10-01/user-data", ok(cfg("/never")));
        let r = fetch_in(&ns, "aws", &[]);
        let e = r.failed().stderr();
        assert!(
            e.contains("fetching config from platform aws: aws metadata service: session token (PUT http://169.254.169.254/latest/api/token): ")
                && e.contains(why),
            "{e}"
        );
        assert!(s.requests("/2019-10-01/user-data").is_empty());
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn gcp_header_and_the_retry_schedule() {
    const PATH: &str = "/computeMetadata/v1/instance/attributes/user-data";
    let (ns, s) = link_local();
    s.route(
        PATH,
        vec![
            Behavior::Status(503),
            Behavior::Status(500),
            Behavior::Ok(cfg("/from-gcp")),
        ],
    );
    let r = fetch_in(&ns, "gcp", &[]);
    assert_eq!(r.ok().paths(), ["/from-gcp"]);
    let e = r.stderr();
    assert!(
        e.contains(&format!("http://169.254.169.254{PATH}: attempt 1 failed: http://169.254.169.254{PATH}: HTTP 503 Service Unavailable; retrying in 100ms")),
        "{e}"
    );
    assert!(
        e.contains("attempt 2 failed: ")
            && e.contains("HTTP 500 Internal Server Error; retrying in 200ms"),
        "{e}"
    );
    let reqs = s.requests(PATH);
    assert_eq!(reqs.len(), 3);
    assert!(
        reqs.iter()
            .all(|q| q.header("Metadata-Flavor") == Some("Google"))
    );
    // 404: no user data.
    let (ns, s) = link_local();
    let r = fetch_in(&ns, "gcp", &[]);
    assert_eq!(r.ok().source(), "no user config provided");
    assert_eq!(s.requests(PATH).len(), 1);
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_hanging_service_is_retried_attempt_by_attempt_and_logged() {
    const PATH: &str = "/computeMetadata/v1/instance/attributes/user-data";
    let (ns, s) = link_local();
    s.route(PATH, vec![Behavior::NoHeaders]);
    let (args, state, _sys) = fetch_args("gcp", &[]);
    let mut child = ns
        .command(env!("CARGO_BIN_EXE_agent"))
        .args(&args)
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
    // Each attempt ends at the header time-out (10 s) and is logged; wait for two retries
    // (bounded: a line at least every 60 s, 200 lines at most), then stop the agent.
    let mut retries = Vec::new();
    let mut seen = Vec::new();
    while retries.len() < 2 && seen.len() < 200 {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            break;
        };
        if line.contains("retrying in") {
            retries.push(line.clone());
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(retries.len(), 2, "log:\n{}", seen.join("\n"));
    assert!(
        retries[0].contains("attempt 1 failed") && retries[0].contains("retrying in 100ms"),
        "{}",
        retries[0]
    );
    assert!(
        retries[0].to_lowercase().contains("timeout"),
        "{}",
        retries[0]
    );
    assert!(retries[1].contains("retrying in 200ms"), "{}", retries[1]);
    assert!(s.requests(PATH).len() >= 2);
    assert!(!state.join("config.json").exists());
}

#[test]
#[ignore = "needs root: make test-root"]
fn akamai_token_then_base64_and_gzip_user_data() {
    let (ns, s) = link_local();
    s.route("/v1/token", ok("0123abcd\n"));
    // gzip inside base64 without its padding.
    let z = gzip(&cfg("/from-akamai"));
    let enc = b64(&z);
    s.route("/v1/user-data", ok(enc.trim_end_matches('=')));
    let r = fetch_in(&ns, "akamai", &[]);
    assert_eq!(r.ok().paths(), ["/from-akamai"]);
    let t = only(&s, "/v1/token");
    assert_eq!(t.method, "PUT");
    assert_eq!(t.header("Metadata-Token-Expiry-Seconds"), Some("300"));
    assert_eq!(t.header("Accept"), Some("text/plain"));
    assert_eq!(
        t.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("accept"))
            .count(),
        1,
        "{t:?}"
    );
    let g = only(&s, "/v1/user-data");
    assert_eq!(g.header("Metadata-Token"), Some("0123abcd"));
    assert_eq!(g.header("Accept"), Some("*/*"));
    // Padded base64 of a plain config.
    let (ns, s) = link_local();
    s.route("/v1/token", ok("t"));
    s.route("/v1/user-data", ok(b64(&cfg("/padded"))));
    assert_eq!(fetch_in(&ns, "akamai", &[]).ok().paths(), ["/padded"]);
    // Empty: no user data.
    s.route("/v1/user-data", ok(""));
    let r = fetch_in(&ns, "akamai", &[]);
    assert_eq!(r.ok().source(), "no user config provided");
    // No token: an error, the user data is not asked for.
    let (ns, s) = link_local();
    s.route("/v1/user-data", ok(b64(&cfg("/never"))));
    let r = fetch_in(&ns, "akamai", &[]);
    let e = r.failed().stderr();
    assert!(
        e.contains(
            "akamai metadata service: session token (PUT http://169.254.169.254/v1/token): "
        ) && e.contains("HTTP 404"),
        "{e}"
    );
    assert!(s.requests("/v1/user-data").is_empty());
    // Not base64: an error naming the service.
    let (ns, s) = link_local();
    s.route("/v1/token", ok("t"));
    s.route("/v1/user-data", ok(cfg("/raw")));
    let e = fetch_in(&ns, "akamai", &[]).failed().stderr();
    assert!(
        e.contains("akamai metadata service: user data from http://169.254.169.254/v1/user-data: decoding base64"),
        "{e}"
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn oraclecloud_bearer_base64_and_429() {
    const PATH: &str = "/opc/v2/instance/metadata/user_data";
    let (ns, s) = link_local();
    s.route(
        PATH,
        vec![
            Behavior::Status(429),
            Behavior::Ok(b64(&cfg("/from-oci")).into_bytes()),
        ],
    );
    let r = fetch_in(&ns, "oraclecloud", &[]);
    assert_eq!(r.ok().paths(), ["/from-oci"]);
    assert!(
        r.stderr()
            .contains("HTTP 429 Too Many Requests; retrying in 100ms"),
        "{}",
        r.stderr()
    );
    let reqs = s.requests(PATH);
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs.iter()
            .all(|q| q.header("Authorization") == Some("Bearer Oracle"))
    );
    let (ns, _s) = link_local();
    assert_eq!(
        fetch_in(&ns, "oraclecloud", &[]).ok().source(),
        "no user config provided"
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn aliyun_on_its_own_address() {
    let ns = Netns::new(&["100.100.100.200"]);
    let s = ns.serve("100.100.100.200:80");
    s.route("/latest/user-data", ok(cfg("/from-aliyun")));
    let r = fetch_in(&ns, "aliyun", &[]);
    assert_eq!(r.ok().paths(), ["/from-aliyun"]);
    assert_eq!(
        r.source(),
        "aliyun metadata service http://100.100.100.200/latest/user-data"
    );
    s.route("/latest/user-data", vec![Behavior::Status(404)]);
    assert_eq!(
        fetch_in(&ns, "aliyun", &[]).ok().source(),
        "no user config provided"
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn plain_link_local_services() {
    // (platform, path, whether a 404 is "no user data" (else an error, as in Ignition)).
    for (platform, path, absent_404) in [
        ("digitalocean", "/metadata/v1/user-data", false),
        ("exoscale", "/1.0/user-data", true),
        ("hetzner", "/hetzner/v1/userdata", true),
        ("upcloud", "/metadata/v1/user_data", true),
        ("vultr", "/user-data/user-data", true),
    ] {
        let (ns, s) = link_local();
        let want = format!("/from-{platform}");
        s.route(path, vec![Behavior::Status(502), Behavior::Ok(cfg(&want))]);
        let r = fetch_in(&ns, platform, &[]);
        assert_eq!(r.ok().paths(), std::slice::from_ref(&want), "{platform}");
        assert_eq!(
            r.source(),
            format!("{platform} metadata service http://169.254.169.254{path}")
        );
        assert!(r.stderr().contains("retrying in 100ms"), "{platform}");
        // An empty answer: no user data.
        s.route(path, ok(""));
        assert_eq!(
            fetch_in(&ns, platform, &[]).ok().source(),
            "no user config provided",
            "{platform}"
        );
        s.route(path, vec![Behavior::Status(404)]);
        let r = fetch_in(&ns, platform, &[]);
        if absent_404 {
            assert_eq!(r.ok().source(), "no user config provided", "{platform}");
        } else {
            let e = r.failed().stderr();
            assert!(
                e.contains(&format!(
                    "fetching config from platform {platform}: {platform} metadata service: user data: http://169.254.169.254{path}: HTTP 404 Not Found"
                )),
                "{e}"
            );
        }
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn scaleway_from_a_privileged_port_on_either_address() {
    const PATH: &str = "/user_data/cloud-init";
    // IPv4 only.
    let ns = Netns::new(&["169.254.42.42"]);
    let s = ns.serve("169.254.42.42:80");
    s.route(PATH, ok(cfg("/from-scaleway")));
    let r = fetch_in(&ns, "scaleway", &[]);
    assert_eq!(r.ok().paths(), ["/from-scaleway"]);
    let q = only(&s, PATH);
    assert!(q.peer.port() < 1024, "source port {}", q.peer);
    // IPv6 only: the IPv4 address is unreachable (retried) while the IPv6 one answers.
    let ns = Netns::new(&["fd00:42::42"]);
    let s = ns.serve("[fd00:42::42]:80");
    s.route(PATH, ok(cfg("/over-ipv6")));
    let r = fetch_in(&ns, "scaleway", &[]);
    assert_eq!(r.ok().paths(), ["/over-ipv6"]);
    assert!(only(&s, PATH).peer.port() < 1024);
    assert!(
        r.stderr()
            .contains("scaleway: answer from http://[fd00:42::42]"),
        "{}",
        r.stderr()
    );
    // 404: no user data.
    s.route(PATH, vec![Behavior::Status(404)]);
    assert_eq!(
        fetch_in(&ns, "scaleway", &[]).ok().source(),
        "no user config provided"
    );
}

#[test]
fn packet_through_a_local_server() {
    // https://metadata.packet.net is a DNS name over TLS: the test names a local server.
    let s = Server::start();
    s.route("/userdata", ok(cfg("/from-packet")));
    let flag = format!("packet={}", s.url(""));
    let (args, state, _sys) = fetch_args("packet", &["--test-metadata-url", &flag]);
    let run = |args: &[String], state: TempDir| Run {
        out: std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
            .args(args)
            .env_remove("AGENT_SYSTEM_CONFIG_DIR")
            .output()
            .unwrap(),
        state,
    };
    let r = run(&args, state);
    assert_eq!(r.ok().paths(), ["/from-packet"]);
    assert_eq!(only(&s, "/userdata").header("Accept"), Some("*/*"));
    s.route("/userdata", vec![Behavior::Status(404)]);
    let (args, state, _sys) = fetch_args("packet", &["--test-metadata-url", &flag]);
    let e = run(&args, state).failed().stderr();
    assert!(e.contains("/userdata: HTTP 404 Not Found"), "{e}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn the_offline_pass_asks_for_the_network() {
    let ns = Netns::new(&[LINK_LOCAL, "100.100.100.200", "169.254.42.42"]);
    let s = ns.serve(SERVICE);
    let s2 = ns.serve("100.100.100.200:80");
    let s3 = ns.serve("169.254.42.42:80");
    for p in agent::platform::PLATFORMS
        .iter()
        .filter(|p| p.support == agent::platform::Support::Implemented && p.needs_network())
    {
        let r = fetch_in(&ns, p.name, &["--offline"]);
        assert_eq!(r.code(), 3, "{}: {}", p.name, r.stderr());
        assert!(r.state.join("neednet").exists(), "{}", p.name);
        assert!(
            r.stderr()
                .contains(&format!("the config of platform {}", p.name)),
            "{}",
            r.stderr()
        );
    }
    for name in ["aws", "gcp", "akamai", "aliyun", "oraclecloud", "vultr"] {
        assert!(agent::platform::lookup(name).unwrap().needs_network());
    }
    for s in [s, s2, s3] {
        assert!(s.all_requests().is_empty(), "{:?}", s.all_requests());
    }
}

/// Runs `agent ARGS` in `ns`, reading its stderr line by line until `enough` says so (or 400
/// lines, or 60 s without a line), then stops it: the lines seen.
fn watch(ns: &Netns, args: &[String], enough: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut child = ns
        .command(env!("CARGO_BIN_EXE_agent"))
        .args(args)
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
    let mut seen = Vec::new();
    while !enough(&seen) && seen.len() < 400 {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            break;
        };
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    seen
}

/// The seconds of "(waiting for Ns so far)" in a retry line.
fn waited(line: &str) -> Option<u64> {
    let rest = &line[line.find("(waiting for ")? + "(waiting for ".len()..];
    rest[..rest.find("s so far)")?].parse().ok()
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_503_only_service_is_waited_for_and_every_wait_is_reported() {
    // As Ignition, without timeouts.httpTotal a service that only answers 503 is retried
    // without end; every retry (at most 5 s apart) says what is waited for and since when.
    const PATH: &str = "/computeMetadata/v1/instance/attributes/user-data";
    let (ns, s) = link_local();
    s.route(PATH, vec![Behavior::Status(503)]);
    let (args, state, _sys) = fetch_args("gcp", &[]);
    // Until two retries at the 5 s cap (about 11 s in).
    let seen = watch(&ns, &args, |lines| {
        lines
            .iter()
            .filter(|l| l.contains("retrying in 5000ms"))
            .count()
            >= 2
    });
    let log = seen.join("\n");
    let retries: Vec<&String> = seen.iter().filter(|l| l.contains("retrying in")).collect();
    assert!(retries.len() >= 8, "{log}");
    for l in &retries {
        assert!(
            l.contains(&format!("http://169.254.169.254{PATH}: attempt "))
                && l.contains("HTTP 503 Service Unavailable"),
            "{l}"
        );
    }
    let secs: Vec<u64> = retries
        .iter()
        .map(|l| waited(l).unwrap_or_else(|| panic!("{l}")))
        .collect();
    assert!(secs.windows(2).all(|w| w[0] <= w[1]), "{secs:?}");
    assert!(*secs.last().unwrap() >= 10, "{log}");
    assert!(s.requests(PATH).len() >= 8);
    assert!(!state.join("config.json").exists());
}

#[test]
#[ignore = "needs root: make test-root"]
fn openstack_asks_the_ipv6_link_local_address_out_of_each_interface() {
    // An IPv6-only cloud: the agent's namespace has no route to 169.254.169.254, only a veth
    // with an IPv6 link-local address; the metadata service is fe80::a9fe:a9fe on the other
    // end of the veth, in a namespace of its own.
    const PATH: &str = "/openstack/latest/user_data";
    let vm = Netns::new(&[]);
    let cloud = Netns::new(&[]);
    support::sh(
        "ip",
        &[
            "-n",
            &vm.name,
            "link",
            "add",
            "eth7",
            "type",
            "veth",
            "peer",
            "name",
            "md0",
            "netns",
            &cloud.name,
        ],
        None,
    );
    for (ns, dev, addr) in [
        (&vm, "eth7", "fe80::7/64"),
        (&cloud, "md0", "fe80::a9fe:a9fe/64"),
    ] {
        support::sh(
            "ip",
            &["-n", &ns.name, "addr", "add", addr, "dev", dev, "nodad"],
            None,
        );
        support::sh("ip", &["-n", &ns.name, "link", "set", dev, "up"], None);
    }
    // md0's index inside its namespace (`ip -o link show md0`: "N: md0@…").
    let out = cloud
        .command("ip")
        .args(["-o", "link", "show", "md0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let md0: u32 = text
        .split(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{text}"));
    let s = cloud.serve(&format!("[fe80::a9fe:a9fe%{md0}]:80"));
    s.route(PATH, ok(cfg("/over-link-local")));
    // Bounded: the config drive and 169.254.169.254 are waited for without end.
    let (mut args, state, _sys) = fetch_args("openstack", &[]);
    args.insert(0, env!("CARGO_BIN_EXE_agent").to_string());
    args.insert(0, "120".to_string());
    let out = vm
        .command("timeout")
        .args(&args)
        .env_remove("AGENT_SYSTEM_CONFIG_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("running agent");
    let r = Run { out, state };
    assert_eq!(r.ok().paths(), ["/over-link-local"]);
    // (The record keeps the first 80 characters of the source.)
    assert!(
        r.source()
            .starts_with("openstack metadata service http://[fe80::a9fe:a9fe%eth7]/openstack/"),
        "{}",
        r.source()
    );
    assert!(
        r.stderr()
            .contains("openstack: answer from http://[fe80::a9fe:a9fe%eth7]"),
        "{}",
        r.stderr()
    );
    let q = only(&s, PATH);
    assert_eq!(q.peer.ip().to_string(), "fe80::7");
}

/// A request the event sink got: its request line, `Content-Type` and body.
type Event = (String, Option<String>, Vec<u8>);

/// A listener on 127.0.0.1 that answers every request 200 and sends each request to the
/// returned channel (the instance timeline of Packet).
fn event_sink() -> (String, mpsc::Receiver<Event>) {
    use std::io::Read;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { break };
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut first = String::new();
            let _ = r.read_line(&mut first);
            let (mut len, mut ctype) = (0usize, None);
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
                let (k, v) = h.split_once(':').unwrap_or((&h, ""));
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                } else if k.eq_ignore_ascii_case("content-type") {
                    ctype = Some(v.trim().to_string());
                }
            }
            let mut body = vec![0; len.min(1 << 20)];
            let _ = r.read_exact(&mut body);
            let _ =
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            if tx.send((first.trim().to_string(), ctype, body)).is_err() {
                break;
            }
        }
    });
    (url, rx)
}

#[test]
fn packet_posts_each_stage_status_to_the_timeline() {
    // As Ignition's Status hook: after the stage, the metadata's phone_home_url (without
    // /phone-home) + /events gets the stage's outcome.
    let (sink, events) = event_sink();
    let s = Server::start();
    s.route("/userdata", ok(cfg("/from-packet")));
    let meta = format!(r#"{{"id":"x","phone_home_url":"{sink}/phone-home"}}"#);
    s.route("/metadata", ok(meta.clone()));
    let flag = format!("packet={}", s.url(""));
    let run = |route_404: bool| {
        if route_404 {
            s.route("/userdata", vec![Behavior::Status(404)]);
        }
        let (args, state, _sys) = fetch_args("packet", &["--test-metadata-url", &flag]);
        Run {
            out: std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
                .args(&args)
                .env_remove("AGENT_SYSTEM_CONFIG_DIR")
                .output()
                .unwrap(),
            state,
        }
    };
    let r = run(false);
    r.ok();
    let (line, ctype, body) = events
        .recv_timeout(Duration::from_secs(60))
        .expect("an event");
    assert_eq!(line, "POST /events HTTP/1.1");
    assert_eq!(ctype.as_deref(), Some("application/json"));
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"state":"running","message":"[fetch] Ignition status: finished successfully"}"#
    );
    assert_eq!(only(&s, "/metadata").header("Accept"), Some("*/*"));
    // A failed stage: its error.
    let r = run(true);
    r.failed();
    let (_, _, body) = events
        .recv_timeout(Duration::from_secs(60))
        .expect("an event");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["state"], "failed");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.starts_with("[fetch] Ignition error: ")
            && msg.contains("/userdata: HTTP 404 Not Found"),
        "{msg}"
    );
    assert!(events.try_recv().is_err(), "one event per stage");
}
