//! Cloud object stores. `s3://bucket/key` and `arn:aws:s3:…` are signed (AWS SigV4) with the
//! EC2 instance role's credentials from the metadata service, or fetched anonymously when
//! there are none. `gs://bucket/object` is an anonymous GET from Google Cloud Storage.
//! Endpoints come from [`super::Options::endpoints`] (an S3-compatible store:
//! `--s3-endpoint` / `agent.s3_endpoint=`); the metadata service is asked through
//! [`super::metadata_client`].

use std::io::Read;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};

use super::fetcher::{Fetcher, Scheme};
use super::metadata_client::Credentials;
use super::metadata_client::{AWS_IMDSV2, Client};
use super::retry::Failure;
use spec::config::types::Resource;
use spec::encoding::hex;

const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

pub struct S3;

impl Scheme for S3 {
    fn open(
        &self,
        f: &Fetcher,
        url: &str,
        _: &Resource,
        left: Option<Duration>,
    ) -> Result<Box<dyn Read>, Failure> {
        let (bucket, key, ap) = parse_s3(url).map_err(Failure::Fatal)?;
        let creds = f.aws_creds.get_or_init(|| match instance_credentials(f) {
            Ok(c) => {
                log::info!("using EC2 instance role credentials for S3");
                Some(c)
            }
            Err(e) => {
                log::info!(
                    "no EC2 instance role credentials ({e:#}); fetching from S3 anonymously"
                );
                None
            }
        });
        let region = creds
            .as_ref()
            .map_or_else(|| default_region(f), |c| c.region.clone());
        let (base, path) = match &f.opts.endpoints.s3 {
            Some(e) => (
                e.trim_end_matches('/').to_string(),
                format!("/{}/{}", uri_encode(&bucket, true), uri_encode(&key, false)),
            ),
            None => {
                let host = match &ap {
                    Some((reg, account)) => {
                        format!("{bucket}-{account}.s3-accesspoint.{reg}.amazonaws.com")
                    }
                    None if region == "us-east-1" => format!("{bucket}.s3.amazonaws.com"),
                    None => format!("{bucket}.s3.{region}.amazonaws.com"),
                };
                (
                    format!("https://{host}"),
                    format!("/{}", uri_encode(&key, false)),
                )
            }
        };
        let full = format!("{base}{path}");
        let mut extra = Vec::new();
        if let Some(c) = creds {
            let host = super::proxy::scheme_host(&full)
                .map(|_| authority(&full))
                .unwrap_or_default();
            extra = sign_get(c, &host, &path, SystemTime::now());
        }
        // httpHeaders apply to http(s) sources only.
        super::http::get(f, &full, &[], &extra, left)
    }
}

pub struct Gs;

impl Scheme for Gs {
    fn open(
        &self,
        f: &Fetcher,
        url: &str,
        _: &Resource,
        left: Option<Duration>,
    ) -> Result<Box<dyn Read>, Failure> {
        let rest = url
            .strip_prefix("gs://")
            .ok_or_else(|| Failure::fatal(anyhow!("not a gs URL: {url}")))?;
        let (bucket, object) = rest
            .split_once('/')
            .filter(|(b, o)| !b.is_empty() && !o.is_empty())
            .ok_or_else(|| Failure::fatal(anyhow!("gs URL needs a bucket and object: {url}")))?;
        let base = &f.opts.endpoints.gs;
        let full = format!(
            "{}/{}/{}",
            base.trim_end_matches('/'),
            uri_encode(bucket, true),
            uri_encode(object, false)
        );
        super::http::get(f, &full, &[], &[], left)
    }
}

/// Bucket, key and (for access point ARNs) region and account.
#[allow(clippy::type_complexity)]
fn parse_s3(url: &str) -> Result<(String, String, Option<(String, String)>)> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (b, k) = rest
            .split_once('/')
            .filter(|(b, k)| !b.is_empty() && !k.is_empty())
            .with_context(|| format!("s3 URL needs a bucket and key: {url}"))?;
        return Ok((b.into(), k.into(), None));
    }
    // arn:partition:s3:region:account:resource
    let parts: Vec<&str> = url.splitn(6, ':').collect();
    if parts.len() != 6 || parts[0] != "arn" || parts[2] != "s3" {
        bail!("unsupported ARN {url} (want arn:aws:s3:::bucket/key)");
    }
    let (region, account, res) = (parts[3], parts[4], parts[5]);
    if let Some(ap) = res.strip_prefix("accesspoint/") {
        let (name, key) = ap
            .split_once("/object/")
            .with_context(|| format!("access point ARN without /object/: {url}"))?;
        return Ok((
            name.into(),
            key.into(),
            Some((region.into(), account.into())),
        ));
    }
    let (b, k) = res
        .split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .with_context(|| format!("S3 ARN needs a bucket and key: {url}"))?;
    Ok((b.into(), k.into(), None))
}

/// The S3 region when the instance role gives none: the platform's hint, `$AWS_REGION`,
/// `$AWS_DEFAULT_REGION` (the AWS tools' variables), else us-east-1.
fn default_region(f: &Fetcher) -> String {
    if let Some(r) = &f.opts.endpoints.s3_region {
        return r.clone();
    }
    std::env::var("AWS_REGION")
        .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|_| "us-east-1".into())
}

fn authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or("").to_string()
}

/// Credentials of the EC2 instance role, from the metadata service (IMDSv2 token handshake,
/// IMDSv1 without a token).
fn instance_credentials(f: &Fetcher) -> Result<Credentials> {
    let imds = Client::new(&f.opts.endpoints.aws_imds).with_token_handshake(AWS_IMDSV2);
    let get = |path: &str| imds.get(path);
    let roles = get("/latest/meta-data/iam/security-credentials/")?;
    let role = roles
        .lines()
        .next()
        .filter(|l| !l.trim().is_empty())
        .context("no instance role")?
        .trim()
        .to_string();
    let json = get(&format!(
        "/latest/meta-data/iam/security-credentials/{role}"
    ))?;
    let v: serde_json::Value = serde_json::from_str(&json).context("parsing credentials")?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    let region = get("/latest/meta-data/placement/region")
        .ok()
        .filter(|r| !r.is_empty() && r.len() < 40)
        .unwrap_or_else(|| default_region(f));
    Ok(Credentials {
        access_key: s("AccessKeyId").context("credentials without AccessKeyId")?,
        secret_key: s("SecretAccessKey").context("credentials without SecretAccessKey")?,
        token: s("Token"),
        region,
    })
}

/// The headers that sign a GET of `path` on `host` (AWS Signature Version 4, service s3).
pub fn sign_get(c: &Credentials, host: &str, path: &str, now: SystemTime) -> Vec<(String, String)> {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let amz_date = amz_date(secs);
    let mut headers = vec![
        ("host".to_string(), host.to_string()),
        ("x-amz-content-sha256".into(), EMPTY_SHA256.into()),
        ("x-amz-date".into(), amz_date.clone()),
    ];
    if let Some(t) = &c.token {
        headers.push(("x-amz-security-token".into(), t.clone()));
    }
    let auth = authorization(c, "GET", path, "", &headers, EMPTY_SHA256, &amz_date);
    headers.retain(|(k, _)| k != "host");
    headers.push(("authorization".into(), auth));
    headers
}

/// The SigV4 Authorization header value. `headers` are lower-case name/value pairs.
fn authorization(
    c: &Credentials,
    method: &str,
    path: &str,
    query: &str,
    headers: &[(String, String)],
    payload_hash: &str,
    amz_date: &str,
) -> String {
    let mut hs: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    hs.sort();
    let canonical_headers: String = hs.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed: Vec<&str> = hs.iter().map(|(k, _)| k.as_str()).collect();
    let signed = signed.join(";");
    let canonical =
        format!("{method}\n{path}\n{query}\n{canonical_headers}\n{signed}\n{payload_hash}");
    let date = &amz_date[..8];
    let scope = format!("{date}/{}/s3/aws4_request", c.region);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let k = hmac(format!("AWS4{}", c.secret_key).as_bytes(), date.as_bytes());
    let k = hmac(&k, c.region.as_bytes());
    let k = hmac(&k, b"s3");
    let k = hmac(&k, b"aws4_request");
    let sig = hex(&hmac(&k, to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={sig}",
        c.access_key
    )
}

/// HMAC-SHA256 (RFC 2104).
fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().to_vec()
}

/// `YYYYMMDDTHHMMSSZ` for a Unix time.
fn amz_date(secs: u64) -> String {
    let t = runtime::util::utc(secs);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

/// URI-encodes per SigV4: unreserved characters kept, '/' kept unless `slash`.
fn uri_encode(s: &str, slash: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if !slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigv4_matches_aws_documented_example() {
        // "Example: GET Object" from the AWS SigV4 documentation for S3.
        let c = Credentials {
            access_key: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            token: None,
            region: "us-east-1".into(),
        };
        let h = |k: &str, v: &str| (k.to_string(), v.to_string());
        let headers = [
            h("host", "examplebucket.s3.amazonaws.com"),
            h("range", "bytes=0-9"),
            h("x-amz-content-sha256", EMPTY_SHA256),
            h("x-amz-date", "20130524T000000Z"),
        ];
        let auth = authorization(
            &c,
            "GET",
            "/test.txt",
            "",
            &headers,
            EMPTY_SHA256,
            "20130524T000000Z",
        );
        assert!(
            auth.ends_with(
                "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
            ),
            "{auth}"
        );
        assert!(auth.contains("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"));
    }

    #[test]
    fn dates_and_urls() {
        assert_eq!(amz_date(1369353600), "20130524T000000Z");
        assert_eq!(amz_date(951782400 + 3661), "20000229T010101Z");
        let (b, k, ap) = parse_s3("s3://bkt/a/b.ign").unwrap();
        assert_eq!((b.as_str(), k.as_str(), ap), ("bkt", "a/b.ign", None));
        let (b, k, _) = parse_s3("arn:aws:s3:::bkt/x/y").unwrap();
        assert_eq!((b.as_str(), k.as_str()), ("bkt", "x/y"));
        let (b, k, ap) =
            parse_s3("arn:aws:s3:us-west-2:123456789012:accesspoint/ap/object/k").unwrap();
        assert_eq!((b.as_str(), k.as_str()), ("ap", "k"));
        assert_eq!(ap, Some(("us-west-2".into(), "123456789012".into())));
        assert!(parse_s3("s3://bkt").is_err());
        assert_eq!(uri_encode("a b/c", false), "a%20b/c");
    }
}
