//! `agent fetch`: its flags, turned into the resource and fetch options of
//! [`crate::fetch::command::run`].

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::fetch::Options;
use spec::config::types::{HttpHeader, Resource};

#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    /// URL to fetch (http, https, tftp, s3, arn, gs, data).
    pub url: String,
    /// File to write; "-" writes to standard output.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Mode of the written file (octal).
    #[arg(long, default_value = "644")]
    pub mode: String,
    /// Expected hash of the (decompressed) contents, e.g. sha512-<hex>.
    #[arg(long)]
    pub hash: Option<String>,
    /// Compression of the source ("gzip").
    #[arg(long)]
    pub compression: Option<String>,
    /// Extra HTTP header NAME:VALUE (repeatable).
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// Extra trusted CA bundle (PEM file, repeatable).
    #[arg(long = "ca-file")]
    pub ca_files: Vec<PathBuf>,
    /// Seconds to wait for response headers per try (default 10).
    #[arg(long)]
    pub http_response_headers: Option<i64>,
    /// Seconds the whole fetch may take, retries included (default: no limit).
    #[arg(long)]
    pub http_total: Option<i64>,
    /// Largest CA bundle read into memory (bytes, or with K/M/G: 64M); the fetched file
    /// itself streams to disk and has no limit. Default 64 MiB.
    #[arg(long, value_name = "BYTES", value_parser = super::run::parse_size_arg)]
    pub max_config_size: Option<u64>,
    /// Fail on a redirect from https to http (by default it is followed with a warning).
    #[arg(long)]
    pub refuse_tls_downgrade: bool,
    /// An S3-compatible store for s3:// URLs (path-style: URL/bucket/key) instead of AWS S3.
    #[arg(long, value_name = "URL", value_parser = super::run::parse_url_arg)]
    pub s3_endpoint: Option<String>,
}

pub fn run(a: FetchArgs) -> Result<()> {
    let mode = u32::from_str_radix(&a.mode, 8).with_context(|| format!("mode {:?}", a.mode))?;
    let mut headers = Vec::new();
    for h in &a.headers {
        let Some((n, v)) = h.split_once(':') else {
            bail!("header {h:?} is not NAME:VALUE");
        };
        headers.push(HttpHeader {
            name: n.trim().into(),
            value: Some(v.trim().into()),
        });
    }
    let mut opts = Options {
        http_response_headers: a.http_response_headers,
        http_total: a.http_total,
        ..Default::default()
    };
    if let Some(n) = a.max_config_size {
        opts.limits.max_config_size = n;
    }
    opts.limits.refuse_tls_downgrade |= a.refuse_tls_downgrade;
    if let Some(u) = &a.s3_endpoint {
        opts.endpoints.s3 = Some(u.clone());
    }
    let mut r = Resource {
        source: Some(a.url.clone()),
        compression: a.compression.clone(),
        http_headers: headers,
        ..Default::default()
    };
    r.verification.hash = a.hash.clone();
    crate::fetch::command::run(&r, opts, &a.ca_files, &a.output, mode)
}
