//! The fetch stage: find the config, render its merge/replace references, merge it over the
//! system base configs, and write the rendered config atomically to `<state-dir>/config.json`
//! with a record of what was fetched in `<state-dir>/fetch.json`.
//!
//! Where the user config comes from, first match wins: `--config-file`/`--config-url`; the
//! kernel command line (`agent.config.url=`, then `ignition.config.url=`, `flatcar.config.url=`,
//! `coreos.config.url=`; `/proc/cmdline`, see
//! [`crate::platform::Endpoints::kernel_cmdline`]); `<system-config-dir>/user.ign`; the
//! `--platform` provider (which also prepares the fetcher). No config at all, or a zero-length
//! one, is an empty config ("no user config provided"); the base configs still apply.
//!
//! Offline mode (`--offline`): any fetch that needs the network is refused, the marker
//! `<state-dir>/neednet` is written, the stage ends with [`Outcome::NeedsNetwork`] and the
//! process exits with [`EXIT_NEEDS_NETWORK`], so
//! the initramfs brings the network up and runs the stage again only when needed. What the
//! platform's provider answered is kept in `<state-dir>/provider-answer.json` and taken by
//! the later passes of the same boot instead of asking the provider again.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use log::{info, warn};

use super::context::{Context, Outcome, Reporter};
use crate::fetch::{self, Fetcher, short};
use crate::report::Changes;
use runtime::limits::{self, REFS_HINT};
use spec::config::{self, Config};

/// References deeper than this are refused (a chain this long is a mistake or a loop).
pub const MAX_DEPTH: usize = 10;
/// Exit code of `agent run --stage fetch --offline` when the config needs the network.
pub const EXIT_NEEDS_NETWORK: i32 = 3;
/// The user config installed in the system config directory (preempts the platform's).
pub const USER_CONFIG_FILE: &str = "user.ign";
/// Beside [`USER_CONFIG_FILE`]: where the installed config's reports go
/// ([`crate::state::Served`] as JSON; `agent install` leaves it on the boot partition).
pub const USER_SERVED_FILE: &str = "user.served.json";
/// Kernel command line keys naming the config URL, in order of preference: the agent's,
/// Ignition's, then the names Flatcar's Ignition still reads (`flatcar.config.url`, Container
/// Linux's `coreos.config.url`).
pub const CMDLINE_KEYS: &[&str] = &[
    "agent.config.url",
    "ignition.config.url",
    "flatcar.config.url",
    "coreos.config.url",
];

/// The record of what was fetched (its format belongs to the state directory).
pub use crate::state::{FetchRecord as Record, Fetched};

/// Where the user config and the base configs are (command-line settings; the kernel
/// command line and the platform are asked too, see the module's text).
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub config_file: Option<PathBuf>,
    pub config_url: Option<String>,
    /// System base configs (`base.d/`, `base.platform.d/<platform>/`).
    pub system_config_dir: PathBuf,
}

/// Runs the stage: the rendered config and the record of what was fetched are left in the
/// state directory. Offline, a config that needs the network is [`Outcome::NeedsNetwork`].
pub fn run(sources: &Sources, ctx: &Context, reporter: &mut dyn Reporter) -> Result<Outcome> {
    let state = ctx.state();
    state.create()?;
    // Every fetch of the stage refuses the network offline, and records it here.
    let refused = fetch::Refused::default();
    match run_inner(sources, ctx, &refused) {
        Ok(()) => {
            state.clear_neednet()?;
            reporter.done(Changes::default());
            Ok(Outcome::Done)
        }
        Err(e) if refused.first().is_some() => {
            let marker = state.set_neednet()?;
            info!("config needs the network: wrote {}", marker.display());
            Ok(Outcome::NeedsNetwork(format!("{e:#}")))
        }
        Err(e) => Err(e),
    }
}

fn run_inner(sources: &Sources, ctx: &Context, refused: &fetch::Refused) -> Result<()> {
    let ctx = &ctx.prepared()?;
    let base_opts = fetch::Options {
        offline: ctx.offline,
        refused: refused.clone(),
        limits: ctx.limits,
        endpoints: ctx.endpoints.clone(),
        ..Default::default()
    };
    let mut record = Record {
        platform: ctx.platform.clone(),
        ..Default::default()
    };
    let mut provider_files = Vec::new();
    let (user, source) = acquire(sources, ctx, &base_opts, &mut record, &mut provider_files)?;
    let user = render_with(user, &source, &base_opts, &mut record)?;
    let mut merged = Config::default();
    for (path, bytes) in base_configs(sources, ctx, base_opts.limits.max_config_size)? {
        let src = format!("base config {}", path.display());
        let cfg = parse_logged(&bytes, &src)?;
        record.configs.push(fetched("base", &src, &bytes));
        let cfg = render_with(cfg, &src, &base_opts, &mut record)?;
        merged = config::merge(&merged, &cfg);
    }
    let mut rendered = config::merge(&merged, &user);
    if ctx.offline
        && let Some(why) = later_stages_need_network(&rendered)
    {
        return Err(base_opts.needs_network(why));
    }
    // The CAs are fetched once, here, with the rendered config's timeouts and proxy, and
    // kept in it as data URLs: the later stages trust them for every fetch without fetching
    // them again (as Ignition's cached config does). One that cannot be had fails the stage
    // before the rendered config exists.
    let ca_opts = fetch::Options::from_config(&rendered).with_base(&base_opts);
    fetch::inline_cas(&mut rendered, &ca_opts)?;
    let n = rendered.ignition.security.tls.certificate_authorities.len();
    if n > 0 {
        info!("{n} certificate authorities kept in the rendered config for the later stages");
    }
    if let Some(served) = &mut record.served {
        // An https report URL is trusted as the config's own fetches are.
        served.cas = fetch::fetch_cas(&rendered, &ca_opts)?
            .into_iter()
            .map(|p| String::from_utf8_lossy(&p).into_owned())
            .collect();
    }
    let path = ctx.state().write_rendered(&rendered)?;
    ctx.state()
        .write_report_auth(record.served.as_ref().and_then(|s| s.auth.as_deref()))?;
    ctx.state().write_fetch_record(&record)?;
    ctx.state().write_provider_files(&provider_files)?;
    info!("rendered config written to {}", path.display());
    Ok(())
}

/// Whether the disks or files stage will need the network for this config: a resource they
/// fetch (CAs, file contents and appends, LUKS key files) from a network URL, or a LUKS volume
/// bound to tang (or a custom clevis pin that says it needs the network). The offline pass
/// must ask for the network then, or first boot would fail later without it.
pub fn later_stages_need_network(c: &Config) -> Option<String> {
    let st = &c.storage;
    let resources = c
        .ignition
        .security
        .tls
        .certificate_authorities
        .iter()
        .chain(
            st.files
                .iter()
                .flat_map(|f| std::iter::once(&f.contents).chain(&f.append)),
        )
        .chain(st.luks.iter().map(|l| &l.key_file));
    for r in resources {
        if let Some(src) = r.url()
            && fetch::needs_network(src)
        {
            return Some(format!("the config fetches {} later", short(src)));
        }
    }
    for l in &st.luks {
        // A tang entry that carries its advertisement binds without asking the server.
        if l.clevis.tang.iter().any(|t| t.advertisement.is_none()) {
            return Some(format!(
                "LUKS volume {} is bound to a tang server without an advertisement",
                l.name
            ));
        }
        if l.clevis.custom.needs_network == Some(true) {
            return Some(format!(
                "LUKS volume {}: its clevis pin needs the network",
                l.name
            ));
        }
    }
    None
}

fn fetched(kind: &str, source: &str, bytes: &[u8]) -> Fetched {
    Fetched {
        kind: kind.into(),
        source: shown(source),
        sha512: fetch::sha512_hex(bytes),
    }
}

/// A config's source as `fetch.json` keeps it: a URL without its userinfo and query
/// (`report::redact::url`), shortened ([`short`]; a data URL without its payload).
fn shown(source: &str) -> String {
    if source.contains("://") && !source.starts_with("data:") {
        short(&crate::report::redact::url(source))
    } else {
        short(source)
    }
}

/// Finds and parses the user config (unrendered). No config at all is an empty config. The
/// files the platform's provider leaves for the target root go to `provider_files`.
fn acquire(
    sources: &Sources,
    ctx: &Context,
    opts: &fetch::Options,
    rec: &mut Record,
    provider_files: &mut Vec<crate::state::ProviderFile>,
) -> Result<(Config, String)> {
    let limit = opts.limits.max_config_size;
    let found: Option<(Vec<u8>, String)> = if let Some(path) = &sources.config_file {
        let bytes = if path.as_os_str() == "-" {
            limits::read_bounded(std::io::stdin().lock(), limit, "config from standard input")?
        } else {
            limits::read_file_bounded(path, limit, &format!("config file {}", path.display()))?
        };
        // A Butane config is translated to Ignition first (as `agent validate` reads it).
        let bytes = config_file_as_ignition(bytes, path, limit).map_err(anyhow::Error::msg)?;
        Some((bytes, format!("file {}", path.display())))
    } else if let Some(url) = &sources.config_url {
        Some((fetch_url(url, opts, rec)?, url.clone()))
    } else if let Some(url) = cmdline_url(&runtime::cmdline::read(&opts.endpoints.kernel_cmdline)?)
    {
        info!("config URL from the kernel command line: {}", short(&url));
        Some((fetch_url(&url, opts, rec)?, url))
    } else if let Some(found) = system_user_config(sources, limit, rec)? {
        Some(found)
    } else if let Some(p) = &ctx.platform {
        let answer = ask_platform(ctx, p, opts)?;
        *provider_files = answer.files;
        answer.config.map(|c| (c.bytes, c.source))
    } else {
        None
    };
    match found {
        // Like Ignition: a zero-length config is no config (base configs still apply).
        Some((bytes, source)) if bytes.is_empty() => {
            info!(
                "user config from {} is empty: no user config provided",
                short(&source)
            );
            rec.source = "no user config provided".into();
            rec.configs.push(fetched("user", &source, &bytes));
            Ok((Config::default(), "no user config provided".into()))
        }
        Some((bytes, source)) => {
            rec.user_config_provided = true;
            rec.source = shown(&source);
            rec.configs.push(fetched("user", &source, &bytes));
            Ok((parse_logged(&bytes, &short(&source))?, source))
        }
        None => {
            info!("no user config provided");
            rec.source = "no user config provided".into();
            Ok((Config::default(), "no user config provided".into()))
        }
    }
}

/// A config file read by hand (`agent plan --config-file`, `agent run --config-file`): a
/// Butane config (told by its content, as `agent validate` does) is translated to Ignition
/// (openshift as `butane --raw`), with the file's directory as its files dir; anything else
/// is returned as it is, for the Ignition parser. `limit`: `--max-config-size`.
pub fn config_file_as_ignition(
    bytes: Vec<u8>,
    path: &std::path::Path,
    limit: u64,
) -> Result<Vec<u8>, String> {
    if !butane::looks_like_butane(&bytes) {
        return Ok(bytes);
    }
    let dir = (path.as_os_str() != "-")
        .then(|| {
            path.parent().map(|d| {
                if d.as_os_str().is_empty() {
                    std::path::Path::new(".")
                } else {
                    d
                }
            })
        })
        .flatten()
        .map(runtime::butane_files::DirFiles::new);
    let opts = butane::Options {
        files_dir: dir.as_ref().map(|f| f as &dyn butane::FilesDir),
        max_size: usize::try_from(limit).unwrap_or(usize::MAX),
        ..Default::default()
    };
    match butane::translate(&bytes, &opts) {
        Ok(out) => {
            for d in &out.report.diags {
                log::warn!("{}: {d}", path.display());
            }
            Ok(out.json)
        }
        Err(r) => Err(format!(
            "Butane config {} does not translate:\n{r}",
            path.display()
        )),
    }
}

/// The platform's config and files: the answer an earlier pass of this boot kept in the
/// state directory, else the provider's, which is then kept (config, "no config" and files
/// alike) so that the online pass after an offline one that needed the network does not ask
/// again. Some channels answer only once (Hyper-V KVP, the z/VM reader), and a metadata
/// service is spared a second request.
fn ask_platform(
    ctx: &Context,
    p: &str,
    opts: &fetch::Options,
) -> Result<crate::state::ProviderAnswer> {
    let state = ctx.state();
    if let Some(kept) = state.provider_answer(p)? {
        info!(
            "platform {p}: taking the answer an earlier pass of this boot kept in {} ({}) instead of asking again",
            state.provider_answer_path().display(),
            match &kept.config {
                Some(c) => format!("config from {}", short(&c.source)),
                None => "no config".into(),
            }
        );
        return Ok(kept);
    }
    let provider = crate::platform::provider(p)?;
    if opts.offline && provider.needs_network() && !provider.tries_offline() {
        return Err(opts.needs_network(format!("the config of platform {p}")));
    }
    let (found, files) = provider
        .fetch_config_with_files(&Fetcher::new(opts.clone()))
        .with_context(|| format!("fetching config from platform {p}"))?;
    let answer = crate::state::ProviderAnswer {
        platform: p.to_string(),
        boot_id: crate::state::boot_id(),
        config: found.map(|f| crate::state::AnsweredConfig {
            source: f.source,
            bytes: f.bytes,
        }),
        files,
    };
    let path = state.write_provider_answer(&answer)?;
    info!(
        "platform {p}: its answer is kept in {} for a later pass",
        path.display()
    );
    Ok(answer)
}

/// `<system-config-dir>/user.ign`: a user config installed with the system, which preempts
/// the platform's (as in Ignition). Beside it, `user.served.json`: what the config server
/// said when `agent install` fetched it (where reports go, with the machine's credential),
/// which the first boot's reports go by.
fn system_user_config(
    sources: &Sources,
    limit: u64,
    rec: &mut Record,
) -> Result<Option<(Vec<u8>, String)>> {
    let path = sources.system_config_dir.join(USER_CONFIG_FILE);
    let source = format!("file {}", path.display());
    let found = limits::read_optional_file_bounded(&path, limit, &format!("config {source}"))?;
    if found.is_some() {
        info!("user config from {}", path.display());
        let sp = sources.system_config_dir.join(USER_SERVED_FILE);
        let what = format!("report target {}", sp.display());
        match limits::read_optional_file_bounded(&sp, 64 << 10, &what) {
            Ok(Some(b)) => match serde_json::from_slice::<crate::state::Served>(&b) {
                Ok(s) => {
                    info!(
                        "reports go where the installer's config server said ({})",
                        s.report_url
                            .as_deref()
                            .map_or("-".into(), crate::report::redact::url)
                    );
                    rec.served = Some(s);
                }
                Err(e) => warn!("{what}: not used: {e}"),
            },
            Ok(None) => {}
            Err(e) => warn!("{e:#}"),
        }
    }
    Ok(found.map(|b| (b, source)))
}

fn fetch_url(url: &str, opts: &fetch::Options, rec: &mut Record) -> Result<Vec<u8>> {
    let res = config::types::Resource {
        source: Some(url.to_string()),
        ..Default::default()
    };
    let f = Fetcher::new(opts.clone());
    let bytes = f.fetch_bytes_as(&res, "config")?;
    note_served(&f, &res, rec);
    Ok(bytes)
}

/// Keeps what `agent serve` said of a config it served (its `X-Agent-*` headers) and the
/// `Authorization` header the config was fetched with, for the reports (docs/reports.md).
/// The last config fetched with such headers wins (a pointer config's merged `/ignition`).
///
/// The header went to the URL first asked only (redirects do not carry it), so that is
/// where reports go: a relative report URL is resolved against it (without its userinfo),
/// not against the URL that answered after a redirect, and a report URL on another origin
/// gets no token (`report::target`).
fn note_served(f: &Fetcher, r: &config::types::Resource, rec: &mut Record) {
    if let Some(served) = served(f, r) {
        rec.served = Some(served);
    }
}

/// What `agent serve` said of the config `f` fetched last for `r` (its `X-Agent-*`
/// headers, [`note_served`]), logged; None when no server said anything.
pub fn served(f: &Fetcher, r: &config::types::Resource) -> Option<crate::state::Served> {
    let h = f.take_agent_headers()?;
    let asked = r.source.as_deref().unwrap_or(&h.url);
    let auth = r
        .http_headers
        .iter()
        .find(|x| x.name.eq_ignore_ascii_case("authorization"))
        .and_then(|x| x.value.clone());
    let served = crate::state::Served {
        pool: h.get("x-agent-pool").map(str::to_string),
        config: h.get("x-agent-config").map(str::to_string),
        hash: h.get("x-agent-config-hash").map(str::to_string),
        report_url: h
            .get("x-agent-report-url")
            .map(|u| fetch::http::resolve(&fetch::http::without_userinfo(asked), u)),
        cas: Vec::new(),
        auth_origin: auth.as_ref().and_then(|_| fetch::http::origin(asked)),
        auth,
    };
    if let (Some(_), Some(u)) = (&served.auth, &served.report_url)
        && fetch::http::origin(u) != served.auth_origin
    {
        warn!(
            "reports to {} go without the token (another origin than {}, where the config's Authorization header was sent)",
            crate::report::redact::url(u),
            served.auth_origin.as_deref().unwrap_or("the config URL's")
        );
    }
    info!(
        "the config server served pool {}, config {}{}",
        served.pool.as_deref().unwrap_or("-"),
        served.config.as_deref().unwrap_or("-"),
        match &served.report_url {
            Some(u) => format!("; reports go to {}", crate::report::redact::url(u)),
            None => String::new(),
        }
    );
    Some(served)
}

/// The config URL named on a kernel command line (`agent.config.url` wins).
pub fn cmdline_url(cmdline: &str) -> Option<String> {
    CMDLINE_KEYS
        .iter()
        .filter_map(|key| runtime::cmdline::value(cmdline, key))
        .find(|v| !v.is_empty())
        .map(str::to_string)
}

/// System base configs: `base.d/*.ign` in name order, then
/// `base.platform.d/<platform>/*.ign`; each at most `limit` bytes.
fn base_configs(sources: &Sources, ctx: &Context, limit: u64) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    let dir = &sources.system_config_dir;
    let mut dirs = vec![dir.join("base.d")];
    if let Some(p) = &ctx.platform {
        dirs.push(dir.join("base.platform.d").join(p));
    }
    let mut out = Vec::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "ign"))
            .collect();
        files.sort();
        for f in files {
            let b = limits::read_file_bounded(&f, limit, &format!("base config {}", f.display()))?;
            out.push((f, b));
        }
    }
    Ok(out)
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
    render_with(
        config,
        source,
        &fetch::Options::default(),
        &mut Record::default(),
    )
}

/// [`render`] with base fetch options (offline, endpoints, limits) and a record of every
/// fetch (and of what a config server said of the configs it served). At most `base.limits.max_config_refs` referenced configs are fetched in all (merge
/// and replace, every level); references nest at most [`MAX_DEPTH`] deep.
pub fn render_with(
    config: Config,
    source: &str,
    base: &fetch::Options,
    rec: &mut Record,
) -> Result<Config> {
    let mut chain = vec![source.to_string()];
    render_inner(config, &mut chain, base, rec, &mut 0)
}

fn render_inner(
    mut cfg: Config,
    chain: &mut Vec<String>,
    base: &fetch::Options,
    rec: &mut Record,
    count: &mut usize,
) -> Result<Config> {
    if chain.len() > MAX_DEPTH {
        bail!(
            "config references nested deeper than {MAX_DEPTH} levels: {}",
            chain.join(" -> ")
        );
    }
    if cfg.ignition.config.replace.source.is_none() && cfg.ignition.config.merge.is_empty() {
        return Ok(cfg);
    }
    // The parent's timeouts, proxy and CAs apply to fetching its references.
    let opts = fetch::Options::from_config_with_cas(&cfg, base)?;
    let fetcher = Fetcher::new(opts);
    let refs = std::mem::take(&mut cfg.ignition.config);
    if let Some(src) = refs.replace.source.clone() {
        let child = fetch_child(&fetcher, &refs.replace, &src, chain, "replace", rec, count)?;
        chain.push(src);
        let r = render_inner(child, chain, base, rec, count);
        chain.pop();
        return r;
    }
    for r in &refs.merge {
        let src = r.source.clone().unwrap_or_default();
        let child = fetch_child(&fetcher, r, &src, chain, "merge", rec, count)?;
        chain.push(src);
        let child = render_inner(child, chain, base, rec, count);
        chain.pop();
        cfg = config::merge(&cfg, &child?);
    }
    Ok(cfg)
}

/// Fetches and parses one referenced config; `count` counts them against
/// `limits.max_config_refs` for the whole render (`chain[0]` is the config being rendered).
fn fetch_child(
    fetcher: &Fetcher,
    r: &config::types::Resource,
    src: &str,
    chain: &[String],
    kind: &str,
    rec: &mut Record,
    count: &mut usize,
) -> Result<Config> {
    if chain.iter().any(|s| s == src) {
        bail!("config reference loop: {} -> {src}", chain.join(" -> "));
    }
    let max = fetcher.opts.limits.max_config_refs;
    if *count >= max {
        bail!(
            "{}: more than the {max} referenced configs allowed in one render (merge and replace, all levels): not fetching {} ({REFS_HINT})",
            short(&chain[0]),
            short(src)
        );
    }
    *count += 1;
    let bytes = fetcher.fetch_bytes_as(r, "config").map_err(|e| {
        limits::context_unless_too_large(e, || format!("fetching config {}", short(src)))
    })?;
    note_served(fetcher, r, rec);
    rec.configs.push(fetched(kind, src, &bytes));
    parse_logged(&bytes, &short(src))
}

#[cfg(test)]
mod tests {
    use super::{Outcome, Sources, cmdline_url, run};
    use crate::report::{Changes, Delivered};
    use crate::stages::{Context, Reporter};

    /// Counts the reports a stage makes.
    #[derive(Default)]
    struct Count(usize);

    impl Reporter for Count {
        fn done(&mut self, changes: Changes) -> Option<Delivered> {
            assert_eq!(changes, Changes::default());
            self.0 += 1;
            None
        }
    }

    #[test]
    fn needing_the_network_offline_is_an_outcome_not_a_failure() {
        let dir = std::env::temp_dir().join(format!("agent-fetch-outcome-{}", std::process::id()));
        let ctx = Context {
            root: dir.join("root"),
            state_dir: dir.join("state"),
            platform: None,
            offline: true,
            limits: Default::default(),
            endpoints: Default::default(),
            files: Default::default(),
        };
        let sources = |url: &str| Sources {
            config_url: Some(url.into()),
            system_config_dir: dir.join("none"),
            ..Default::default()
        };
        let mut reports = Count::default();
        let o = run(&sources("http://127.0.0.1:9/c.ign"), &ctx, &mut reports).unwrap();
        assert_eq!(
            o,
            Outcome::NeedsNetwork(
                "fetching http://127.0.0.1:9/c.ign needs the network (offline mode)".into()
            )
        );
        assert_eq!(reports.0, 0, "no report of a pass that needs the network");
        assert!(ctx.state().neednet_path().exists());
        // A config of data URLs only needs no network: done, reported once, marker gone.
        let o = run(&sources("data:,"), &ctx, &mut reports).unwrap();
        assert_eq!(o, Outcome::Done);
        assert_eq!(reports.0, 1);
        assert!(!ctx.state().neednet_path().exists());
        // Any other failure stays an error.
        let e = run(&sources("data:,%7B"), &ctx, &mut reports).unwrap_err();
        assert!(format!("{e:#}").contains("is invalid"), "{e:#}");
        assert!(!ctx.state().neednet_path().exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cmdline_keys() {
        assert_eq!(cmdline_url("quiet root=/dev/sda"), None);
        assert_eq!(
            cmdline_url("ignition.config.url=http://a/x agent.config.url=http://b/y").as_deref(),
            Some("http://b/y")
        );
        assert_eq!(
            cmdline_url("ignition.config.url=tftp://a/x quiet").as_deref(),
            Some("tftp://a/x")
        );
        assert_eq!(cmdline_url("agent.config.url= x").as_deref(), None);
        assert_eq!(
            cmdline_url("flatcar.config.url=http://f/c coreos.config.url=http://c/c").as_deref(),
            Some("http://f/c")
        );
        assert_eq!(
            cmdline_url("coreos.config.url=http://c/c").as_deref(),
            Some("http://c/c")
        );
        assert_eq!(
            cmdline_url("flatcar.config.url=http://f/c ignition.config.url=http://i/c").as_deref(),
            Some("http://i/c")
        );
    }
}
