//! Rendering a pool's config for one request: etcd index templating, the node-agent file, and
//! the spec version. Renders without an etcd index are computed once per generation, so every
//! replica serves byte-identical output for the same generation.

use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Result;
use sha2::{Digest, Sha256};

use crate::http::{Body, FileBody, Request, Response};
use spec::config::types::{File, Resource};
use spec::config::{self, Config, Version, version};
use spec::encoding::data_url::base64_encode;
use spec::encoding::hex;

/// Where the node agent finds the name of the config it was provisioned from.
pub const NODE_CONFIG_PATH: &str = "/etc/agent/node-config.json";

/// The template variable replaced by `etcd_index` for `master` pools.
pub const ETCD_INDEX_VAR: &str = "{{.etcd_index}}";

/// A rendered document: body and its strong ETag.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub body: Arc<[u8]>,
    pub etag: String,
    pub version: Version,
    /// Its response header lines (Content-Type, ETag, Vary), made once.
    header_lines: String,
    /// Pre-rendered documents: the body in a sealed memfd for sendfile, made when first
    /// served (None inside: no memfd could be made).
    file: Option<Arc<OnceLock<Option<Arc<FileBody>>>>>,
}

impl Rendered {
    fn new(body: Vec<u8>, version: Version) -> Self {
        let etag = etag_of(&Sha256::digest(&body));
        let header_lines = header_lines(version, &etag);
        Rendered {
            body: body.into(),
            etag,
            version,
            header_lines,
            file: None,
        }
    }

    /// Its response header lines: Content-Type, ETag and Vary (on Accept), each with CRLF.
    pub fn header_lines(&self) -> &str {
        &self.header_lines
    }

    /// Served many times: keep it ready for sendfile.
    fn shared(mut self) -> Self {
        self.file = Some(Arc::default());
        self
    }

    /// The body for a response.
    pub fn http_body(&self) -> Body {
        let file = self.file.as_ref().and_then(|cell| {
            cell.get_or_init(|| FileBody::new(self.body.clone()).map(Arc::new))
                .clone()
        });
        match file {
            Some(f) => Body::File(f),
            None => Body::Shared(self.body.clone()),
        }
    }
}

#[derive(Debug)]
pub struct Pool {
    pub name: String,
    /// The merged config as read (templates not yet filled in).
    pub config: Config,
    /// `<pool>-<content hash>`: the name the node agent records as current/desired config.
    pub config_name: String,
    /// Hex SHA-256 of the canonical config (newest spec version, templates not filled in):
    /// what derived tokens are bound to and the checkpoint's name for the config.
    pub config_hash: String,
    /// The oldest spec version that can express the served config.
    pub min_version: Version,
    /// Pre-rendered documents by minor version; Err says why the version cannot express it.
    pub by_minor: Vec<Result<Rendered, String>>,
    /// `master` pools: per minor version, the document split at each etcd index, made when
    /// first asked for (see [`Pool::render_etcd`]).
    etcd: Vec<OnceLock<Option<Arc<EtcdTemplate>>>>,
    /// The header lines that tell a machine which config it got and where to report
    /// (docs/reports.md): part of every document's header lines.
    report_lines: String,
}

/// A document split where each etcd index goes: every response for any index shares the
/// segments, so a response in progress holds only its index (docs/serve.md, "Connections
/// and limits").
#[derive(Debug)]
struct EtcdTemplate {
    segs: Arc<[Box<[u8]>]>,
    version: Version,
    /// The SHA-256 state after the first segment (most of the document: `systemd` comes
    /// last), so that an index's ETag hashes only the rest.
    prefix: Sha256,
    /// ETags of the indexes asked for last (computing one reads the whole document).
    etags: Mutex<Vec<(u32, String)>>,
}

/// ETags an [`EtcdTemplate`] keeps.
const ETCD_ETAGS: usize = 64;

/// A document with the etcd index filled in, for one response.
#[derive(Debug)]
pub struct Filled {
    pub etag: String,
    /// Content-Type, ETag and Vary, each with CRLF.
    pub header_lines: String,
    pub body: Body,
}

/// The strong ETag of a body from its SHA-256: the first 16 bytes in hex, quoted.
fn etag_of(digest: &[u8]) -> String {
    format!("\"{}\"", hex(&digest[..16]))
}

/// `If-None-Match` against our (strong) ETag, with the weak comparison RFC 9110 §13.1.2
/// prescribes for it: `W/"x"` matches `"x"`; `*` matches any current representation.
pub fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').any(|t| {
        let t = t.trim();
        t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag
    })
}

/// A served document's answer: 304 when `If-None-Match` names its ETag, else 200 with the
/// body; its header lines (Content-Type, ETag, Vary) either way.
pub fn answer(
    req: &Request,
    out: &mut Response,
    etag: &str,
    lines: &str,
    body: impl FnOnce() -> Body,
) {
    let hit = req
        .header("if-none-match")
        .is_some_and(|v| etag_matches(&v, etag));
    out.reset(if hit { 304 } else { 200 });
    if !hit {
        out.body = body();
    }
    out.add_lines(lines);
}

/// Where machines send their reports (docs/reports.md), on the same origin.
pub const REPORT_PATH: &str = "/report";

/// `X-Agent-Pool`, `X-Agent-Config`, `X-Agent-Config-Hash` and `X-Agent-Report-URL`, each with
/// CRLF; a pool name outside `[A-Za-z0-9._-]` is percent-encoded (a file name may hold a
/// line break, a header value may not).
fn report_lines(pool: &str, config_name: &str, config_hash: &str) -> String {
    let token = |s: &str| {
        let mut o = String::with_capacity(s.len());
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
                o.push(b as char);
            } else {
                o.push_str(&format!("%{b:02X}"));
            }
        }
        o
    };
    format!(
        "X-Agent-Pool: {}\r\nX-Agent-Config: {}\r\nX-Agent-Config-Hash: sha256-{config_hash}\r\nX-Agent-Report-URL: {REPORT_PATH}\r\n",
        token(pool),
        token(config_name)
    )
}

fn header_lines(version: Version, etag: &str) -> String {
    format!(
        "Content-Type: application/vnd.coreos.ignition+json;version={version}\r\n\
         ETag: {etag}\r\nVary: Accept\r\n"
    )
}

impl Pool {
    pub fn new(name: &str, config: Config) -> Result<Self> {
        let canonical =
            config::to_json(&config, Version::NEWEST).map_err(|e| anyhow::anyhow!("{e}"))?;
        let digest = Sha256::digest(&canonical);
        let config_name = format!("{name}-{}", hex(&digest[..8]));
        let config_hash = hex(&digest);
        let served = with_node_file(&config, name, &config_name);
        let min_version = version::minimum(&served);
        let report_lines = report_lines(name, &config_name, &config_hash);
        let by_minor: Vec<_> = (0..=version::NEWEST_MINOR)
            .map(|m| {
                let v = Version::new(m);
                config::to_json(&served, v).map(|b| {
                    let mut r = Rendered::new(b, v).shared();
                    r.header_lines.push_str(&report_lines);
                    r
                })
            })
            .collect();
        Ok(Pool {
            report_lines,
            name: name.to_string(),
            config,
            config_name,
            config_hash,
            min_version,
            etcd: by_minor.iter().map(|_| OnceLock::new()).collect(),
            by_minor,
        })
    }

    /// The pre-rendered document for spec minor `minor` (borrowed: every request for it
    /// shares it without touching its reference counts).
    pub fn rendered(&self, minor: u8) -> Result<&Rendered, String> {
        match self.by_minor.get(minor as usize) {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("unsupported spec version 3.{minor}.0")),
        }
    }

    /// The canonical config (newest spec version, templates not filled in): the bytes
    /// [`Pool::config_hash`] is the SHA-256 of.
    pub fn canonical(&self) -> Result<Vec<u8>> {
        config::to_json(&self.config, Version::NEWEST).map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The document for spec minor `minor`, with `etcd_index` filled in when given.
    pub fn render(&self, minor: u8, etcd_index: Option<u32>) -> Result<Rendered, String> {
        let Some(idx) = etcd_index else {
            return self.rendered(minor).cloned();
        };
        let mut c = self.config.clone();
        fill_etcd_index(&mut c, idx);
        let served = with_node_file(&c, &self.name, &self.config_name);
        let v = Version::new(minor);
        config::to_json(&served, v).map(|b| {
            let mut r = Rendered::new(b, v);
            r.header_lines.push_str(&self.report_lines);
            r
        })
    }
}

impl Pool {
    /// The document for spec minor `minor` with etcd index `idx`: the same bytes as
    /// [`Pool::render`], but sharing the document with every other response for any index
    /// (the body holds only the index).
    pub fn render_etcd(&self, minor: u8, idx: u32) -> Result<Filled, String> {
        let plain = self.rendered(minor)?;
        let template = self.etcd[minor as usize]
            .get_or_init(|| self.etcd_template(minor, plain).map(Arc::new))
            .clone();
        let Some(t) = template else {
            // Not split (see `etcd_template`): rendered for this response alone.
            let r = self.render(minor, Some(idx))?;
            return Ok(Filled {
                header_lines: r.header_lines.clone(),
                etag: r.etag,
                body: Body::Shared(r.body),
            });
        };
        let body = Body::Spliced {
            segs: t.segs.clone(),
            fill: idx.to_string().into_bytes().into(),
        };
        let etag = {
            let mut etags = t.etags.lock().unwrap_or_else(|e| e.into_inner());
            match etags.iter().position(|(i, _)| *i == idx) {
                Some(at) => etags[at].1.clone(),
                None => {
                    let mut h = t.prefix.clone();
                    let fill = idx.to_string();
                    for seg in &t.segs[1..] {
                        h.update(fill.as_bytes());
                        h.update(seg);
                    }
                    let e = etag_of(&h.finalize());
                    if etags.len() >= ETCD_ETAGS {
                        etags.remove(0);
                    }
                    etags.push((idx, e.clone()));
                    e
                }
            }
        };
        Ok(Filled {
            header_lines: header_lines(t.version, &etag) + &self.report_lines,
            etag,
            body,
        })
    }

    /// The document for `minor` split where each etcd index goes: rendered with a marker in
    /// place of the index (one that the document without indexes does not contain), and
    /// cut at the markers. Checked: the segments joined with the template variable give the
    /// document without indexes back exactly. None if no marker passes (then every
    /// response renders its own document).
    fn etcd_template(&self, minor: u8, plain: &Rendered) -> Option<EtcdTemplate> {
        let v = Version::new(minor);
        for n in 0..4 {
            let marker = format!("@@agent-etcd-index-{n}@@");
            if contains(&plain.body, marker.as_bytes()) {
                continue;
            }
            let mut c = self.config.clone();
            fill_etcd_index_with(&mut c, &marker);
            let served = with_node_file(&c, &self.name, &self.config_name);
            let doc = config::to_json(&served, v).ok()?;
            let segs: Vec<Box<[u8]>> = split(&doc, marker.as_bytes())
                .into_iter()
                .map(Box::from)
                .collect();
            let joined = segs.join(ETCD_INDEX_VAR.as_bytes());
            if joined == *plain.body {
                let mut prefix = Sha256::new();
                prefix.update(&segs[0]);
                return Some(EtcdTemplate {
                    prefix,
                    segs: segs.into(),
                    version: v,
                    etags: Mutex::new(Vec::new()),
                });
            }
        }
        log::warn!(
            "pool {}: the document for spec {v} could not be split at its etcd indexes: each request with etcd_index renders its own",
            self.name
        );
        None
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// `hay` cut at each occurrence of `sep` (left to right, not overlapping).
fn split<'a>(hay: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i + sep.len() <= hay.len() {
        if &hay[i..i + sep.len()] == sep {
            out.push(&hay[start..i]);
            i += sep.len();
            start = i;
        } else {
            i += 1;
        }
    }
    out.push(&hay[start..]);
    out
}

/// Replaces `{{.etcd_index}}` in unit and drop-in contents.
pub fn fill_etcd_index(c: &mut Config, idx: u32) {
    fill_etcd_index_with(c, &idx.to_string());
}

/// Replaces `{{.etcd_index}}` in unit and drop-in contents with `n`: the placeholder
/// `etcd_index` ([`crate::source::placeholders`]) filled where `?etcd_index=` always filled it, every
/// other placeholder left as it is. (A machine file's `values.etcd_index` fills it everywhere
/// in the machine's config, like any value.)
fn fill_etcd_index_with(c: &mut Config, n: &str) {
    let value = |k: &str| (k == "etcd_index").then_some(n);
    let fill = |s: &mut String| {
        if let Ok(f) = crate::source::placeholders::fill_text(s, &value, false) {
            *s = f;
        }
    };
    for u in &mut c.systemd.units {
        if let Some(s) = &mut u.contents {
            fill(s);
        }
        for d in &mut u.dropins {
            if let Some(s) = &mut d.contents {
                fill(s);
            }
        }
    }
}

/// The JSON the node agent reads to seed its current/desired config.
pub fn node_file_json(config_name: &str) -> String {
    serde_json::json!({ "currentConfig": config_name, "desiredConfig": config_name }).to_string()
}

/// `c` with the node-agent file added (replacing any file of the same path); in OpenShift
/// mode the Machine Config Server's files instead ([`crate::source::openshift`]).
pub fn with_node_file(c: &Config, pool: &str, config_name: &str) -> Config {
    if let Some(o) = crate::source::openshift::mode() {
        return crate::source::openshift::with_files(c, o, pool, config_name);
    }
    let mut out = c.clone();
    let body = node_file_json(config_name);
    out.storage.files.retain(|f| f.path != NODE_CONFIG_PATH);
    out.storage
        .directories
        .retain(|d| d.path != NODE_CONFIG_PATH);
    out.storage.links.retain(|l| l.path != NODE_CONFIG_PATH);
    out.storage.files.push(File {
        path: NODE_CONFIG_PATH.to_string(),
        mode: Some(0o644),
        overwrite: Some(true),
        contents: Resource {
            source: Some(format!(
                "data:application/json;base64,{}",
                base64_encode(body.as_bytes())
            )),
            ..Default::default()
        },
        ..Default::default()
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(s: &str) -> Config {
        config::parse(s.as_bytes()).unwrap().config
    }

    #[test]
    fn etcd_index_in_units_and_dropins() {
        let c = cfg(r#"{"ignition":{"version":"3.0.0"},"systemd":{"units":[
            {"name":"etcd.service","contents":"[Service]\nExecStart=/bin/etcd --name etcd-{{.etcd_index}}\n",
             "dropins":[{"name":"x.conf","contents":"Environment=IDX={{.etcd_index}}"}]}]}}"#);
        let p = Pool::new("master", c).unwrap();
        let r = p.render(0, Some(3)).unwrap();
        let s = String::from_utf8(r.body.to_vec()).unwrap();
        assert!(s.contains("--name etcd-3"), "{s}");
        assert!(s.contains("IDX=3"), "{s}");
        assert!(!s.contains("etcd_index"), "{s}");
        let plain = p.render(0, None).unwrap();
        assert!(
            String::from_utf8(plain.body.to_vec())
                .unwrap()
                .contains("{{.etcd_index}}")
        );
    }

    /// The shared, split document gives every index the same bytes and ETag as a render of
    /// its own, in every version; the template variable elsewhere (a file) stays as it is.
    #[test]
    fn etcd_renders_share_one_split_document() {
        let c = cfg(
            r#"{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/etc/{{.etcd_index}}",
            "contents":{"source":"data:,x"}}]},"systemd":{"units":[
            {"name":"etcd.service","contents":"a{{.etcd_index}}{{.etcd_index}}\n\"q\" @@agent-etcd-index-0@",
             "dropins":[{"name":"x.conf","contents":"{{.etcd_index}}"}]}]}}"#,
        );
        let p = Pool::new("master", c).unwrap();
        for minor in 0..=version::NEWEST_MINOR {
            for idx in [0, 7, 42, 999_999] {
                let own = p.render(minor, Some(idx)).unwrap();
                let filled = p.render_etcd(minor, idx).unwrap();
                assert_eq!(filled.body.to_vec(), own.body.to_vec(), "3.{minor} {idx}");
                assert_eq!(filled.etag, own.etag);
                assert_eq!(filled.header_lines, own.header_lines);
                assert!(matches!(filled.body, Body::Spliced { .. }));
            }
        }
        let a = p.render_etcd(3, 1).unwrap().body;
        let b = p.render_etcd(3, 2).unwrap().body;
        match (a, b) {
            (Body::Spliced { segs: x, .. }, Body::Spliced { segs: y, .. }) => {
                assert!(Arc::ptr_eq(&x, &y), "one document for every index");
                // Two in the unit, one in the drop-in: four segments.
                assert_eq!(x.len(), 4);
            }
            _ => unreachable!(),
        }
        assert_eq!(split(b"xAByAB", b"AB"), [&b"x"[..], b"y", b""]);
    }

    #[test]
    fn node_file_and_versions() {
        let c = cfg(r#"{"ignition":{"version":"3.3.0"},"kernelArguments":{"shouldExist":["x"]}}"#);
        let p = Pool::new("worker", c).unwrap();
        assert_eq!(p.min_version, Version::new(3));
        assert!(
            p.by_minor[2]
                .as_ref()
                .unwrap_err()
                .contains("kernelArguments")
        );
        let r = p.render(3, None).unwrap();
        let parsed = config::parse(&r.body).unwrap();
        assert_eq!(parsed.version, Version::new(3));
        let f = parsed
            .config
            .storage
            .files
            .iter()
            .find(|f| f.path == NODE_CONFIG_PATH)
            .unwrap();
        let data = spec::encoding::data_url::decode(f.contents.source.as_deref().unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&data).unwrap();
        assert_eq!(v["currentConfig"], p.config_name.as_str());
        assert_eq!(v["desiredConfig"], p.config_name.as_str());
        assert!(p.config_name.starts_with("worker-"));
        // Deterministic: the same input renders the same bytes.
        let p2 = Pool::new("worker", p.config.clone()).unwrap();
        let r2 = p2.render(3, None).unwrap();
        assert_eq!(r2.body, r.body);
        assert_eq!(r2.etag, r.etag);
        assert_ne!(p2.render(6, None).unwrap().etag, r.etag);
    }
}
