//! `agent serve` over HTTPS (rustls): a CA-signed leaf generated with openssl, TLS 1.2+,
//! certificate reload when the files change.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::serve::*;

fn served_serial(addr: std::net::SocketAddr, dir: &Path) -> String {
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            "localhost",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("openssl s_client");
    let pem = out.stdout;
    let p = dir.join("served.pem");
    std::fs::write(&p, &pem).unwrap();
    let s = support::pki::openssl_in(dir, &["x509", "-in", "served.pem", "-noout", "-serial"]);
    String::from_utf8(s).unwrap().trim().to_string()
}

fn curl(args: &[&str]) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("curl is required for this test (apt-get install curl)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn https_with_certificate_reload() {
    let t = TempDir::new("tls");
    let d = t.path();
    make_ca(d);
    let serial1 = make_leaf(d, "leaf1");
    std::fs::copy(d.join("leaf1.pem"), d.join("tls.pem")).unwrap();
    std::fs::copy(d.join("leaf1.key"), d.join("tls.key")).unwrap();
    let src = d.join("src");
    write(&src.join("pools/worker.ign"), &worker_config("tls"));
    let s = serve_args(&src)
        .without("--listen-http")
        .tls(d.join("tls.pem"), d.join("tls.key"))
        .poll_1s()
        .start();
    assert_eq!(s.scheme, "https");
    let ca = d.join("ca.pem");
    let url = format!("https://{}/config/worker", s.addr);
    let (ok, out) = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{http_version}",
        &url,
    ]);
    assert!(ok, "{out}");
    assert_eq!(out, "200 1.1");
    let (ok, out) = curl(&["--cacert", ca.to_str().unwrap(), &url]);
    assert!(ok && out.contains("data:,tls"), "{out}");
    // TLS 1.2 works, older versions do not.
    let (ok, out) = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        "--tlsv1.2",
        "--tls-max",
        "1.2",
        "-o",
        "/dev/null",
        &url,
    ]);
    assert!(ok, "TLS 1.2: {out}");
    let (ok, _) = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        "--tls-max",
        "1.1",
        "-o",
        "/dev/null",
        &url,
    ]);
    assert!(!ok, "TLS 1.1 must be refused");
    // Plain HTTP on the TLS port is not served.
    let (ok, _) = curl(&["-o", "/dev/null", &format!("http://{}/healthz", s.addr)]);
    assert!(!ok);
    assert_eq!(served_serial(s.addr, d), serial1);

    // Replace the certificate: the server picks it up without a restart.
    let serial2 = make_leaf(d, "leaf2");
    assert_ne!(serial1, serial2);
    std::fs::copy(d.join("leaf2.key"), d.join("tls.key.tmp")).unwrap();
    std::fs::rename(d.join("tls.key.tmp"), d.join("tls.key")).unwrap();
    std::fs::copy(d.join("leaf2.pem"), d.join("tls.pem.tmp")).unwrap();
    std::fs::rename(d.join("tls.pem.tmp"), d.join("tls.pem")).unwrap();
    let mut ok2 = false;
    for _ in 0..50 {
        if served_serial(s.addr, d) == serial2 {
            ok2 = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(ok2, "certificate reloaded");
    let (ok, out) = curl(&["--cacert", ca.to_str().unwrap(), "-o", "/dev/null", &url]);
    assert!(ok, "{out}");
}
