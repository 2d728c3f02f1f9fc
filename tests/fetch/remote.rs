//! Fetching against real servers on 127.0.0.1: HTTPS with a test CA, TFTP (tftpd-hpa),
//! S3 (moto server) with instance-role credentials and the anonymous fallback, and an HTTP
//! proxy (tinyproxy) with noProxy.

use crate::support;

use std::time::Duration;

use agent::fetch::{Fetcher, Options};
use agent::platform::Endpoints;
use spec::config::types::Proxy;
use support::TempDir;
use support::faulty_http::{Behavior, Server, generated};
use support::fetch::{free_tcp_port, make_pki, require, resource, spawn, tftpd, wait_tcp};

#[test]
fn https_needs_the_config_ca() {
    let pki = make_pki();
    let s = Server::start_tls(&pki.chain, &pki.key);
    s.route("/x", vec![Behavior::Ok(b"secure".to_vec())]);
    let r = resource(&s.url("/x"));
    let without = Fetcher::new(Options {
        http_total: Some(1),
        ..Default::default()
    });
    let e = without.fetch_bytes(&r).unwrap_err();
    assert!(
        format!("{e:#}").to_lowercase().contains("certificate"),
        "{e:#}"
    );
    let with = Fetcher::new(Options {
        ca_pems: vec![pki.ca.clone()],
        http_total: Some(5),
        ..Default::default()
    });
    assert_eq!(with.fetch_bytes(&r).unwrap(), b"secure");
}

/// A CA given as a config resource (fetched itself) lets the config's references use https.
#[test]
fn config_ca_resource_is_fetched_and_used_for_references() {
    let pki = make_pki();
    let https = Server::start_tls(&pki.chain, &pki.key);
    https.route(
        "/child.ign",
        vec![Behavior::Ok(
            br#"{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/tls-child"}]}}"#
                .to_vec(),
        )],
    );
    let http = Server::start();
    http.route("/ca.pem", vec![Behavior::Ok(pki.ca.clone())]);
    let cfg = format!(
        r#"{{"ignition":{{"version":"3.4.0","security":{{"tls":{{"certificateAuthorities":[{{"source":"{}"}}]}}}},
            "config":{{"merge":[{{"source":"{}"}}]}}}}}}"#,
        http.url("/ca.pem"),
        https.url("/child.ign")
    );
    let parsed = spec::config::parse(cfg.as_bytes()).unwrap().config;
    let out = agent::stages::fetch::render(parsed, "test").unwrap();
    assert_eq!(out.storage.files[0].path, "/etc/tls-child");
}

#[test]
#[ignore = "needs root: make test-root"]
fn tftp_fetches_from_tftpd_hpa() {
    let t = tftpd();
    let body = generated(700_001);
    std::fs::create_dir_all(t.root.join("dir")).unwrap();
    std::fs::write(t.root.join("dir/big.bin"), &body).unwrap();
    let f = Fetcher::new(Options::default());
    let url = format!("tftp://127.0.0.1:{}/dir/big.bin", t.port);
    let dest = TempDir::new("tftp-out");
    let mut r = resource(&url);
    r.verification.hash = Some(format!("sha512-{}", agent::fetch::sha512_hex(&body)));
    f.fetch_to_file(&r, &dest.join("big"), 0o644).unwrap();
    assert!(std::fs::read(dest.join("big")).unwrap() == body);
    // Exactly one block's worth and an empty file.
    std::fs::write(t.root.join("empty"), b"").unwrap();
    let url = format!("tftp://127.0.0.1:{}/empty", t.port);
    assert_eq!(f.fetch_bytes(&resource(&url)).unwrap(), b"");
    // A missing file is final, not retried forever.
    let url = format!("tftp://127.0.0.1:{}/missing", t.port);
    let e = f.fetch_bytes(&resource(&url)).unwrap_err();
    assert!(format!("{e:#}").contains("server error"), "{e:#}");
}

/// moto's S3 server on a free port.
fn moto() -> (support::fetch::Daemon, String, TempDir) {
    require("moto_server", "moto[server] (pip)");
    let port = free_tcp_port();
    let logdir = TempDir::new("moto");
    let d = spawn(
        "moto_server",
        &["-H", "127.0.0.1", "-p", &port.to_string()],
        &logdir.join("moto.log"),
    );
    wait_tcp(port, Duration::from_secs(30));
    (d, format!("http://127.0.0.1:{port}"), logdir)
}

fn s3_put(endpoint: &str, bucket: &str, key: &str, body: &[u8], acl: &str) {
    let agent = ureq::Agent::new_with_defaults();
    let _ = agent.put(format!("{endpoint}/{bucket}")).send_empty();
    agent
        .put(format!("{endpoint}/{bucket}/{key}"))
        .header("x-amz-acl", acl)
        .send(body)
        .expect("putting object into moto");
}

#[test]
fn s3_with_instance_role_and_anonymous_fallback() {
    let (_moto, endpoint, _logs) = moto();
    s3_put(&endpoint, "bkt", "cfg/a.ign", b"s3 object", "public-read");
    s3_put(&endpoint, "bkt", "private.ign", b"private", "private");
    // No metadata service: anonymous request.
    let dead = format!("http://127.0.0.1:{}", free_tcp_port());
    let anon = Fetcher::new(Options {
        endpoints: Endpoints {
            s3: Some(endpoint.clone()),
            aws_imds: dead,
            ..Endpoints::builtin()
        },
        http_total: Some(10),
        ..Default::default()
    });
    assert_eq!(
        anon.fetch_bytes(&resource("s3://bkt/cfg/a.ign")).unwrap(),
        b"s3 object"
    );
    assert_eq!(
        anon.fetch_bytes(&resource("arn:aws:s3:::bkt/cfg/a.ign"))
            .unwrap(),
        b"s3 object"
    );
    // moto refuses unsigned requests for private objects (as S3 does).
    let e = anon
        .fetch_bytes(&resource("s3://bkt/private.ign"))
        .unwrap_err();
    assert!(format!("{e:#}").contains("403"), "{e:#}");
    // A metadata service with an instance role: the request is signed.
    let imds = Server::start();
    imds.route("/latest/api/token", vec![Behavior::Ok(b"tok".to_vec())]);
    imds.route(
        "/latest/meta-data/iam/security-credentials/",
        vec![Behavior::Ok(b"role1\n".to_vec())],
    );
    imds.route(
        "/latest/meta-data/iam/security-credentials/role1",
        vec![Behavior::Ok(
            br#"{"Code":"Success","AccessKeyId":"AKIDTEST","SecretAccessKey":"secret","Token":"sess"}"#
                .to_vec(),
        )],
    );
    imds.route(
        "/latest/meta-data/placement/region",
        vec![Behavior::Ok(b"eu-west-1".to_vec())],
    );
    let signed = Fetcher::new(Options {
        endpoints: Endpoints {
            s3: Some(endpoint.clone()),
            aws_imds: imds.url(""),
            ..Endpoints::builtin()
        },
        http_total: Some(10),
        ..Default::default()
    });
    assert_eq!(
        signed.fetch_bytes(&resource("s3://bkt/cfg/a.ign")).unwrap(),
        b"s3 object"
    );
    let role = &imds.requests("/latest/meta-data/iam/security-credentials/role1");
    assert_eq!(role.len(), 1);
    assert_eq!(role[0].header("x-aws-ec2-metadata-token"), Some("tok"));
    // Missing key: 404 is final.
    assert!(signed.fetch_bytes(&resource("s3://bkt/nope")).is_err());
}

#[test]
fn gs_is_an_anonymous_get() {
    let s = Server::start();
    s.route(
        "/bucket/dir/obj.ign",
        vec![Behavior::Ok(b"gs object".to_vec())],
    );
    let f = Fetcher::new(Options {
        endpoints: Endpoints {
            gs: s.url(""),
            ..Endpoints::builtin()
        },
        ..Default::default()
    });
    assert_eq!(
        f.fetch_bytes(&resource("gs://bucket/dir/obj.ign")).unwrap(),
        b"gs object"
    );
}

#[test]
fn http_proxy_and_no_proxy() {
    require("tinyproxy", "tinyproxy");
    let dir = TempDir::new("tinyproxy");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let port = free_tcp_port();
    let log = dir.join("tinyproxy.log");
    std::fs::write(
        dir.join("tinyproxy.conf"),
        format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 30\nAllow 127.0.0.1\nLogLevel Info\nMaxClients 20\n"
        ),
    )
    .unwrap();
    let _d = spawn(
        "tinyproxy",
        &["-d", "-c", dir.join("tinyproxy.conf").to_str().unwrap()],
        &log,
    );
    wait_tcp(port, Duration::from_secs(10));
    let s = Server::start();
    s.route("/p", vec![Behavior::Ok(b"via proxy".to_vec())]);
    let proxied = |no_proxy: Vec<String>, proxy_port: u16| {
        Fetcher::new(Options {
            proxy: Proxy {
                http_proxy: Some(format!("http://127.0.0.1:{proxy_port}")),
                https_proxy: None,
                no_proxy,
            },
            http_total: Some(2),
            ..Default::default()
        })
    };
    let target = format!("127.0.0.1:{}", s.addr.port());
    assert_eq!(
        proxied(vec![], port)
            .fetch_bytes(&resource(&s.url("/p")))
            .unwrap(),
        b"via proxy"
    );
    let proxy_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        proxy_log.contains(&target) || proxy_log.contains("CONNECT"),
        "tinyproxy did not see the request:\n{proxy_log}"
    );
    // A dead proxy: fails unless noProxy exempts the host (IP, CIDR, *).
    let dead = free_tcp_port();
    assert!(
        proxied(vec![], dead)
            .fetch_bytes(&resource(&s.url("/p")))
            .is_err()
    );
    for np in ["127.0.0.1", "127.0.0.0/8", "*"] {
        assert_eq!(
            proxied(vec![np.into()], dead)
                .fetch_bytes(&resource(&s.url("/p")))
                .unwrap(),
            b"via proxy",
            "noProxy {np}"
        );
    }
    assert!(
        proxied(vec!["10.0.0.0/8".into()], dead)
            .fetch_bytes(&resource(&s.url("/p")))
            .is_err()
    );
}
