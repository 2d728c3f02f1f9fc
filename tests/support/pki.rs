//! The test certificates, all made by `openssl` in one way: a CA ([`make_ca`]) and leaves it
//! signs for localhost and 127.0.0.1 ([`make_leaf`]), the two as bytes ([`make_pki`]), and a
//! self-signed certificate made as `openssl req -x509` makes them ([`self_signed`]). Keys
//! are EC P-256, certificates valid for two days.

pub use super::TempDir;
use std::path::Path;

/// Runs `openssl args` in `dir` (which must succeed); returns its stdout.
pub fn openssl_in(dir: &Path, args: &[&str]) -> Vec<u8> {
    super::need("openssl", "fetch.apt");
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running openssl: {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A test CA in `dir`/ca.pem + ca.key (rustls refuses a self-signed server certificate),
/// and the extensions of the leaves it signs in `dir`/ext.cnf.
pub fn make_ca(dir: &Path) {
    openssl_in(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=agent test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
}

/// Issues a leaf for localhost/127.0.0.1, signed by the CA [`make_ca`] made in `dir`, into
/// `dir`/`name`.key + `name`.pem; returns its serial (`serial=…`).
pub fn make_leaf(dir: &Path, name: &str) -> String {
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    openssl_in(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            "/CN=localhost",
        ],
    );
    openssl_in(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    let s = openssl_in(dir, &["x509", "-in", &pem, "-noout", "-serial"]);
    String::from_utf8(s).unwrap().trim().to_string()
}

/// A CA and a leaf signed by it ([`make_ca`], [`make_leaf`]), as PEM bytes.
pub struct Pki {
    _dir: TempDir,
    pub ca: Vec<u8>,
    pub chain: Vec<u8>,
    pub key: Vec<u8>,
}

pub fn make_pki() -> Pki {
    let d = TempDir::new("pki");
    make_ca(d.path());
    make_leaf(d.path(), "leaf");
    Pki {
        ca: std::fs::read(d.join("ca.pem")).unwrap(),
        chain: std::fs::read(d.join("leaf.pem")).unwrap(),
        key: std::fs::read(d.join("leaf.key")).unwrap(),
        _dir: d,
    }
}

/// A self-signed certificate made the way `openssl req -x509` makes them (CA:TRUE), for
/// `san` (e.g. "IP:127.0.0.1"), and its key, as PEM.
pub struct SelfSigned {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

/// Makes a [`SelfSigned`] in `dir` under `name`; `expired` makes one whose notAfter is a
/// day before its notBefore (expired at any time after its creation).
pub fn self_signed(dir: &Path, name: &str, san: &str, expired: bool) -> SelfSigned {
    let (key, pem, old) = (
        format!("{name}.key"),
        format!("{name}.pem"),
        format!("{name}.old.pem"),
    );
    openssl_in(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            &format!("subjectAltName={san}"),
        ],
    );
    if expired {
        // Re-sign with notAfter = notBefore - 1 day; the extensions stay.
        openssl_in(
            dir,
            &[
                "x509", "-in", &pem, "-key", &key, "-days", "-1", "-out", &old,
            ],
        );
        std::fs::rename(dir.join(&old), dir.join(&pem)).unwrap();
    }
    SelfSigned {
        cert: std::fs::read(dir.join(&pem)).unwrap(),
        key: std::fs::read(dir.join(&key)).unwrap(),
    }
}
