//! The fetch stage: find the config, render its merge/replace references, validate, and
//! write the rendered config atomically to `<state-dir>/config.json`.

use anyhow::{Context as _, Result, bail};
use log::{info, warn};

use super::Context;
use crate::config::{self, Config, Version};
use crate::fetch::{self, Fetcher};

/// References deeper than this are refused (a chain this long is a mistake or a loop).
pub const MAX_DEPTH: usize = 10;

pub fn run(ctx: &Context) -> Result<()> {
    let (config, source) = acquire(ctx)?;
    let rendered = render(config, &source)?;
    let bytes = config::to_json_pretty(&rendered, Version::NEWEST).map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(&ctx.state_dir)
        .with_context(|| format!("creating state directory {}", ctx.state_dir.display()))?;
    crate::util::write_atomic(&ctx.rendered_config(), &bytes, 0o600)?;
    info!(
        "rendered config written to {}",
        ctx.rendered_config().display()
    );
    Ok(())
}

/// Finds the user config. No config at all is an empty config.
pub fn acquire(ctx: &Context) -> Result<(Config, String)> {
    if let Some(path) = &ctx.config_file {
        let bytes = if path.as_os_str() == "-" {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
                .context("reading config from stdin")?;
            b
        } else {
            std::fs::read(path)
                .with_context(|| format!("reading config file {}", path.display()))?
        };
        let source = format!("file {}", path.display());
        return Ok((parse_logged(&bytes, &source)?, source));
    }
    if let Some(url) = &ctx.config_url {
        let res = config::types::Resource {
            source: Some(url.clone()),
            ..Default::default()
        };
        let bytes = Fetcher::new(fetch::Options::default()).fetch_bytes(&res)?;
        return Ok((parse_logged(&bytes, url)?, url.clone()));
    }
    info!("no user config provided");
    Ok((Config::default(), "no user config provided".into()))
}

/// Parses a fetched config, logging its source and SHA-512 and any warnings.
pub fn parse_logged(bytes: &[u8], source: &str) -> Result<Config> {
    info!(
        "fetched config from {source} (sha512 {})",
        fetch::sha512_hex(bytes)
    );
    match config::parse(bytes) {
        Ok(p) => {
            for w in p.warnings.warnings() {
                warn!("{source}: {w}");
            }
            Ok(p.config)
        }
        Err(report) => bail!("config from {source} is invalid:\n{report}"),
    }
}

/// Resolves `ignition.config.replace` and `merge` references depth-first, in order.
pub fn render(config: Config, source: &str) -> Result<Config> {
    let mut chain = vec![source.to_string()];
    render_inner(config, &mut chain)
}

fn render_inner(mut cfg: Config, chain: &mut Vec<String>) -> Result<Config> {
    if chain.len() > MAX_DEPTH {
        bail!(
            "config references nested deeper than {MAX_DEPTH} levels: {}",
            chain.join(" -> ")
        );
    }
    let refs = std::mem::take(&mut cfg.ignition.config);
    if let Some(src) = refs.replace.source.clone() {
        let child = fetch_child(&cfg, &refs.replace, &src, chain)?;
        chain.push(src);
        let r = render_inner(child, chain);
        chain.pop();
        return r;
    }
    for r in &refs.merge {
        let src = r.source.clone().unwrap_or_default();
        let child = fetch_child(&cfg, r, &src, chain)?;
        chain.push(src);
        let child = render_inner(child, chain);
        chain.pop();
        cfg = config::merge(&cfg, &child?);
    }
    Ok(cfg)
}

fn fetch_child(
    parent: &Config,
    r: &config::types::Resource,
    src: &str,
    chain: &[String],
) -> Result<Config> {
    if chain.iter().any(|s| s == src) {
        bail!("config reference loop: {} -> {src}", chain.join(" -> "));
    }
    let fetcher = Fetcher::new(fetch::Options::from_config(parent));
    let bytes = fetcher
        .fetch_bytes(r)
        .with_context(|| format!("fetching config {}", short(src)))?;
    parse_logged(&bytes, &short(src))
}

/// Data URLs can be long: logs show their start only.
fn short(src: &str) -> String {
    if src.len() > 80 {
        format!("{}…", &src[..src.floor_char_boundary(77)])
    } else {
        src.to_string()
    }
}
