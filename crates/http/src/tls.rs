//! TLS with rustls (TLS 1.2 and 1.3): the certificate and key are reloaded when their files
//! change (checked on every source poll and on SIGHUP) without dropping connections.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use anyhow::{Context, Result, anyhow};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

#[derive(Debug)]
pub struct CertResolver {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<(Arc<CertifiedKey>, Option<SystemTime>, Option<SystemTime>)>,
}

fn mtime(p: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load(cert: &std::path::Path, key: &std::path::Path) -> Result<Arc<CertifiedKey>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("opening {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing certificates in {}", cert.display()))?;
    if certs.is_empty() {
        return Err(anyhow!("{} holds no certificate", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("parsing private key {}", key.display()))?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| anyhow!("loading private key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

impl CertResolver {
    pub fn new(cert_path: PathBuf, key_path: PathBuf) -> Result<Self> {
        let ck = load(&cert_path, &key_path)?;
        let (cm, km) = (mtime(&cert_path), mtime(&key_path));
        Ok(CertResolver {
            cert_path,
            key_path,
            current: RwLock::new((ck, cm, km)),
        })
    }

    /// Reloads when either file changed (or `force`). Returns whether it reloaded; a broken
    /// pair is reported and the previous certificate stays in use.
    pub fn maybe_reload(&self, force: bool) -> Result<bool> {
        let (cm, km) = (mtime(&self.cert_path), mtime(&self.key_path));
        {
            let cur = self.current.read().map_err(|_| anyhow!("lock poisoned"))?;
            if !force && cur.1 == cm && cur.2 == km {
                return Ok(false);
            }
        }
        let ck = load(&self.cert_path, &self.key_path)?;
        let mut cur = self.current.write().map_err(|_| anyhow!("lock poisoned"))?;
        *cur = (ck, cm, km);
        Ok(true)
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.0.clone())
    }
}

/// A server config using `resolver`, TLS 1.2 and 1.3, HTTP/1.1 via ALPN.
pub fn server_config(resolver: Arc<CertResolver>) -> Result<Arc<rustls::ServerConfig>> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("choosing TLS versions")?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}
