//! TLS for fetching: rustls (ring) trusting the system bundle (Mozilla's list if there is
//! none) plus the configured CAs (`ignition.security.tls.certificateAuthorities`, `agent
//! fetch --ca-file`), plugged into ureq as a connector.
//!
//! A server certificate that *is* one of the configured CAs is accepted, as Go, curl and
//! OpenSSL accept it: `openssl req -x509` makes self-signed certificates with
//! `basicConstraints CA:TRUE`, and people serve those directly and list them as the CA.
//! webpki alone rejects them (`CaUsedAsEndEntity`). For such a certificate the name (SAN)
//! and validity dates are still checked here; the handshake signature is checked by the
//! normal webpki algorithms. Every other certificate goes through the standard verifier.

use std::fmt;
use std::io::{Read, Write};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_name};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
    TransportAdapter,
};

/// System CA bundle (Debian, Fedora layouts).
pub const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates in a PEM bundle (other PEM items are skipped).
pub fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let mut out = Vec::new();
    for c in CertificateDer::pem_slice_iter(pem) {
        out.push(c.map_err(|e| anyhow::anyhow!("{e}"))?);
    }
    Ok(out)
}

/// The rustls client configuration for fetching: the system roots (Mozilla's if there is no
/// system bundle and no `extra`) plus the `extra` PEM bundles, which are also accepted as
/// the server certificate itself.
pub fn client_config(extra: &[Vec<u8>]) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for path in SYSTEM_BUNDLES {
        if let Ok(pem) = std::fs::read(path) {
            let certs = parse_certs(&pem).with_context(|| format!("reading {path}"))?;
            roots.add_parsable_certificates(certs);
            break;
        }
    }
    if roots.is_empty() && extra.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    let mut configured = Vec::new();
    for pem in extra {
        let certs = parse_certs(pem).context("parsing certificate authority")?;
        if certs.is_empty() {
            bail!("certificate authority contains no PEM certificate");
        }
        for c in certs {
            roots
                .add(c.clone())
                .context("certificate authority is not a usable X.509 certificate")?;
            configured.push(c);
        }
    }
    let provider = provider();
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .context("building the certificate verifier")?;
    let verifier = Verifier { inner, configured };
    let cfg = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("TLS protocol versions")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// The standard webpki verifier, plus: a server certificate equal to a configured CA is
/// trusted as such (name and dates still checked).
#[derive(Debug)]
struct Verifier {
    inner: Arc<WebPkiServerVerifier>,
    configured: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .configured
            .iter()
            .any(|c| c.as_ref() == end_entity.as_ref())
        {
            let parsed = ParsedCertificate::try_from(end_entity)?;
            verify_server_name(&parsed, server_name)?;
            check_validity(end_entity.as_ref(), now)?;
            return Ok(ServerCertVerified::assertion());
        }
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Checks `now` against the certificate's notBefore/notAfter.
fn check_validity(der: &[u8], now: UnixTime) -> Result<(), rustls::Error> {
    let (not_before, not_after) = validity(der).ok_or(rustls::Error::InvalidCertificate(
        CertificateError::BadEncoding,
    ))?;
    let t = now.as_secs();
    if t < not_before {
        return Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidYetContext {
                time: now,
                not_before: UnixTime::since_unix_epoch(std::time::Duration::from_secs(not_before)),
            },
        ));
    }
    if t > not_after {
        return Err(rustls::Error::InvalidCertificate(
            CertificateError::ExpiredContext {
                time: now,
                not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(not_after)),
            },
        ));
    }
    Ok(())
}

/// One DER element: (tag, contents, rest). Definite lengths only (DER).
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let mut len = 0usize;
        for &b in &rest[..n] {
            len = len << 8 | b as usize;
        }
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// notBefore and notAfter of an X.509 certificate, as Unix seconds.
pub fn validity(der: &[u8]) -> Option<(u64, u64)> {
    const SEQUENCE: u8 = 0x30;
    let (SEQUENCE, cert, _) = der_element(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = der_element(cert)? else {
        return None;
    };
    let mut rest = tbs;
    // [0] version (optional), serialNumber, signature, issuer, then validity.
    if rest.first() == Some(&0xa0) {
        rest = der_element(rest)?.2;
    }
    for _ in 0..3 {
        rest = der_element(rest)?.2;
    }
    let (SEQUENCE, validity, _) = der_element(rest)? else {
        return None;
    };
    let (t1, nb, after) = der_element(validity)?;
    let (t2, na, _) = der_element(after)?;
    Some((asn1_time(t1, nb)?, asn1_time(t2, na)?))
}

/// UTCTime (YYMMDDHHMMSSZ) or GeneralizedTime (YYYYMMDDHHMMSSZ) as Unix seconds.
fn asn1_time(tag: u8, v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?;
    let digits = s.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, digits.len()) {
        (0x17, 12) => {
            let yy: i64 = digits[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (0x18, 14) => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let n = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (mon, day, h, m, sec) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    if !(1..=12).contains(&mon) || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let secs = days_from_civil(year, mon, day) * 86400 + h * 3600 + m * 60 + sec;
    u64::try_from(secs).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// Whether a rustls error is a certificate verdict (final: retrying cannot change it).
pub fn is_certificate_error(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
    )
}

/// A certificate verdict in words, for the error a user reads.
pub fn describe(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "it is not signed by a trusted CA (unknown issuer)".into()
        }
        rustls::Error::InvalidCertificate(CertificateError::Other(o))
            if format!("{o:?}").contains("CaUsedAsEndEntity") =>
        {
            "it is a CA certificate (basicConstraints CA:TRUE) that is not one of the \
             configured CAs (unknown issuer)"
                .into()
        }
        other => other.to_string(),
    }
}

/// The ureq connector wrapping https connections in TLS with [`client_config`].
pub struct TlsConnector {
    config: Arc<ClientConfig>,
}

impl TlsConnector {
    pub fn new(config: Arc<ClientConfig>) -> Self {
        TlsConnector { config }
    }
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsConnector")
    }
}

impl<In: Transport> Connector<In> for TlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details
            .uri
            .host()
            .ok_or_else(|| ureq::Error::BadUri(format!("{}: no host", details.uri)))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| ureq::Error::BadUri(format!("{host:?} is not a valid TLS server name")))?;
        let mut conn = ClientConnection::new(self.config.clone(), name)?;
        let mut sock = TransportAdapter::new(
            Box::new(transport) as Box<dyn Transport>,
            details.current_time.clone(),
        );
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock).map_err(handshake_error)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(TlsTransport {
            buffers,
            stream: StreamOwned { conn, sock },
        })))
    }
}

/// Keeps rustls' verdict as a [`ureq::Error::Rustls`] so that certificate errors can be told
/// apart from network errors.
fn handshake_error(e: std::io::Error) -> ureq::Error {
    if let Some(r) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return ureq::Error::Rustls(r.clone());
    }
    ureq::Error::from(e)
}

/// A TLS connection over another transport.
pub struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport").finish()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let n = self.stream.read(input)?;
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asn1_times() {
        assert_eq!(asn1_time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(asn1_time(0x17, b"491231235959Z"), Some(2524607999));
        assert_eq!(asn1_time(0x18, b"20000301000000Z"), Some(951868800));
        assert_eq!(asn1_time(0x18, b"21060207062815Z"), Some(4294967295));
        assert_eq!(asn1_time(0x17, b"20000301000000Z"), None);
        assert_eq!(asn1_time(0x17, b"001301000000Z"), None);
        assert_eq!(asn1_time(0x17, b"0001010000+0100"), None);
    }

    #[test]
    fn der_lengths() {
        assert_eq!(
            der_element(&[0x30, 0x01, 0xaa, 0xbb]),
            Some((0x30, &[0xaa][..], &[0xbb][..]))
        );
        let long = [&[0x04, 0x81, 0x80][..], &[7u8; 0x80]].concat();
        assert_eq!(der_element(&long).map(|(_, c, _)| c.len()), Some(0x80));
        assert_eq!(der_element(&[0x30, 0x05, 0x00]), None);
        assert_eq!(der_element(&[0x30, 0x80]), None);
        assert_eq!(validity(b"\x30\x00"), None);
    }
}
