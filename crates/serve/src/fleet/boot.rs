//! Network boot (docs/serve.md, "Machines and network boot"): `GET /boot.ipxe` (the script
//! that chains to `/ipxe` with what the machine says of itself), `GET /ipxe` (the matched
//! machine's kernel, initramfs and arguments with a one-time token, or "boot from the local
//! disk" once it is installed), `GET|HEAD /assets/<file>` (with `Range`) and
//! `GET /machine-config?token=` (the machine's config, once per token).
//!
//! Tokens are 32 random bytes (base64url, 43 characters); the inventory store keeps only
//! their SHA-256 with the machine, pool, expiry and whether they were spent, so replicas that
//! share a store (etcd) agree, and spending is one atomic step of the store. A token is
//! never logged (the access log has no query strings; log lines carry the first 8 hex digits
//! of its hash) and never in a report.

use std::sync::Arc;

use super::jobs::{self, Jobs};
use crate::fleet::inventory::model::limits::REPORT_CREDENTIALS;
use crate::fleet::inventory::{
    BootToken, Machine, Spend, State, Store, TokenKind, token_key, well_formed_token as well_formed,
};
use crate::fleet::now_secs;
use crate::http::{Body, Request, Response};
use crate::source::Generation;
use crate::source::machines::Asset;
use crate::source::render::{Pool, etag_matches};
use crate::source::selectors::{BootProfile, Facts, Match, normalize_mac, normalize_uuid};

/// `--discovery`: what a network-booted machine that no machine file selects gets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Discovery {
    /// `register` (default): recorded as `unassigned` in the inventory; its script waits and
    /// asks again.
    #[default]
    Register,
    /// `pool:<name>`: boots and installs that pool's config (no per-machine values).
    Pool(String),
}

impl std::str::FromStr for Discovery {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.strip_prefix("pool:") {
            _ if s == "register" => Ok(Discovery::Register),
            Some(p) if crate::source::reading::valid_pool_name(p) => {
                Ok(Discovery::Pool(p.to_string()))
            }
            _ => Err(format!("invalid discovery {s:?}: register or pool:<name>")),
        }
    }
}

/// Network boot's state: its settings, the jobs that answer the requests that wait on the
/// store, and the scripts answered last.
pub struct Boot {
    pub settings: Settings,
    /// Where network boot's store-bound requests are answered, off the event loop.
    pub jobs: Arc<Jobs>,
    /// The boot scripts answered last ([`Recent`]).
    pub recent: Recent,
}

impl Boot {
    pub fn new(settings: Settings) -> Boot {
        Boot {
            settings,
            jobs: Jobs::new("boot", jobs::BOOT_THREADS, jobs::BOOT_QUEUE),
            recent: Recent::default(),
        }
    }

    /// Network boot's lines of `/metrics` (Prometheus text).
    pub fn metrics(&self) -> String {
        format!(
            "# HELP agent_serve_boot_requests_waiting Network-boot requests waiting for the inventory store (queued or being answered).\n# TYPE agent_serve_boot_requests_waiting gauge\nagent_serve_boot_requests_waiting {}\n",
            self.jobs.waiting()
        )
    }

    /// The answer when [`jobs::BOOT_QUEUE`] network-boot requests already wait.
    pub fn queue_full() -> Response {
        Response::text(
            503,
            format!(
                "the boot queue is full ({} network-boot requests, or {} of this client's, are waiting for the inventory store: the boot queue limit); retry",
                jobs::BOOT_QUEUE,
                jobs::PER_CLIENT
            ),
        )
        .header("Retry-After", "1")
    }
}

/// `--public-url`, `--discovery`, `--boot-token-ttl` (seconds), `--running-deadline`
/// (seconds; None: off).
#[derive(Debug, Clone)]
pub struct Settings {
    pub public_url: Option<String>,
    pub discovery: Discovery,
    pub token_ttl: u64,
    /// A machine installed or provisioned this long without a `running` report is shown
    /// `unresponsive`.
    pub running_deadline: Option<u64>,
}

/// What a request of ours is answered from: the settings, the served generation, the
/// inventory store, and how a config is answered (the app's version negotiation).
pub struct Ctx<'a> {
    pub settings: &'a Settings,
    /// The boot scripts answered last (shared by a machine's repeated requests).
    pub recent: &'a Recent,
    pub generation: Option<&'a Arc<Generation>>,
    /// lastKnownGood: what machines a rollout holds back get (`crate::fleet::rollout`).
    pub last_known_good: Option<&'a Arc<Generation>>,
    pub store: Option<&'a dyn Store>,
    pub serve: &'a dyn Fn(&Request, &Pool, &mut Response),
}

/// Whether `path` is one of ours.
pub fn ours(path: &str) -> bool {
    matches!(path, "/boot.ipxe" | "/ipxe" | "/machine-config") || path.starts_with("/assets/")
}

/// Whether answering `req` reads or writes the inventory store (`/ipxe`: the machine's
/// record, a token written; `/machine-config`: the token spent): such a request is answered
/// off the event loop (`crate::fleet::jobs`).
pub fn waits_on_store(req: &Request) -> bool {
    req.method() == "GET" && matches!(req.path(), "/ipxe" | "/machine-config")
}

/// How long a spent boot token still authenticates its machine's reports.
pub const REPORTS_FOR: u64 = 24 * 3600;
/// How long an unassigned machine's script waits before it asks again.
const RETRY_SECONDS: u32 = 30;

/// Answers a request for one of our paths ([`ours`]).
pub fn handle(ctx: &Ctx<'_>, req: &Request, out: &mut Response) {
    let path = req.path();
    match path {
        "/boot.ipxe" => {
            if get_only(req, out) {
                *out = boot_ipxe(ctx, req);
            }
        }
        "/ipxe" => {
            if get_only(req, out) {
                *out = ipxe(ctx, req);
            }
        }
        "/machine-config" => {
            if req.method() != "GET" {
                *out = Response::new(405).header("Allow", "GET");
            } else {
                machine_config(ctx, req, out);
            }
        }
        _ => {
            let name = path.strip_prefix("/assets/").unwrap_or_default();
            if get_only(req, out) {
                asset(ctx, req, name, out);
            }
        }
    }
}

fn get_only(req: &Request, out: &mut Response) -> bool {
    if matches!(req.method(), "GET" | "HEAD") {
        true
    } else {
        *out = Response::new(405).header("Allow", "GET, HEAD");
        false
    }
}

/// The base of the URLs in scripts: `--public-url`, else `http://` and the Host header
/// (only host and port characters; None for anything else).
fn base(ctx: &Ctx<'_>, req: &Request) -> Option<String> {
    if let Some(u) = &ctx.settings.public_url {
        return Some(u.clone());
    }
    let host = req.header_one("host")?.trim();
    let ok = !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    ok.then(|| format!("http://{host}"))
}

fn script(text: String) -> Response {
    let mut r = Response::new(200);
    r.body = Body::Owned(text.into_bytes());
    r.header("Content-Type", "text/plain; charset=utf-8")
        .header("Cache-Control", "no-store")
}

fn no_base() -> Response {
    Response::text(
        400,
        "no usable Host header: send one, or run the server with --public-url",
    )
}

/// `GET /boot.ipxe`: chains to `/ipxe` with the machine's UUID, MAC, serial and hostname
/// (serial and hostname URI-encoded by iPXE). `${uuid}` stays plain: a type given to a
/// setting reinterprets its raw bytes, so `${uuid:uristring}` would send the UUID's 16 raw
/// bytes percent-encoded (`%00` cuts the URL there: seen with Debian's ipxe-qemu in
/// vm-tests/scenarios/18-netboot-install-once); its text form is hex digits and hyphens.
fn boot_ipxe(ctx: &Ctx<'_>, req: &Request) -> Response {
    let Some(base) = base(ctx, req) else {
        return no_base();
    };
    script(format!(
        "#!ipxe\nchain {base}/ipxe?uuid=${{uuid}}&mac=${{mac:hexhyp}}&serial=${{serial:uristring}}&hostname=${{hostname:uristring}}\n"
    ))
}

/// The machine's facts from `/ipxe`'s query: `mac`, `uuid`, `serial`, `hostname`,
/// `label.K=V`; empty values count as not given. Err names a malformed one.
fn facts(req: &Request) -> Result<Facts, String> {
    let mut f = Facts::default();
    for kv in req
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|s| !s.is_empty())
    {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = spec::encoding::data_url::percent_decode(v)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| format!("query parameter {k}: invalid percent-encoding or UTF-8"))?;
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        if v.len() > crate::source::selectors::MAX_SELECTOR_BYTES || v.chars().any(char::is_control)
        {
            return Err(format!(
                "query parameter {k}: at most {} bytes without control characters",
                crate::source::selectors::MAX_SELECTOR_BYTES
            ));
        }
        match k {
            "mac" => f.mac = Some(normalize_mac(v).ok_or("mac: not a MAC address")?),
            "uuid" => f.uuid = Some(normalize_uuid(v).ok_or("uuid: not an SMBIOS UUID")?),
            "serial" => f.serial = Some(v.to_string()),
            "hostname" => f.hostname = Some(v.to_ascii_lowercase()),
            _ => {
                if let Some(l) = k.strip_prefix("label.") {
                    f.labels.insert(l.to_string(), v.to_string());
                }
            }
        }
    }
    Ok(f)
}

/// A script that says why and asks again after a while (through `/boot.ipxe`, which
/// gathers the machine's facts again).
fn wait_script(base: &str, why: &str) -> Response {
    script(format!(
        "#!ipxe\necho agent serve: {why}\necho asking again in {RETRY_SECONDS} s\nsleep {RETRY_SECONDS}\nchain --replace {base}/boot.ipxe\n"
    ))
}

fn new_token() -> Option<String> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut b).ok()?;
    let s = spec::encoding::data_url::base64_encode(&b);
    Some(s.trim_end_matches('=').replace('+', "-").replace('/', "_"))
}

/// `GET /ipxe`: the machine's boot script (module docs).
fn ipxe(ctx: &Ctx<'_>, req: &Request) -> Response {
    let Some(base) = base(ctx, req) else {
        return no_base();
    };
    let f = match facts(req) {
        Ok(f) => f,
        Err(e) => return Response::text(400, e),
    };
    let Some(id) = f.machine_id() else {
        return Response::text(400, "/ipxe needs the machine's mac or uuid");
    };
    let Some(g) = ctx.generation else {
        return wait_script(&base, "no config generation loaded yet");
    };
    let Some(store) = ctx.store else {
        return wait_script(&base, "the server has no inventory store (see its log)");
    };
    let (file, pool) = match g.machines.select(&f) {
        Match::One(m) => (Some(m.name.clone()), m.pool.clone()),
        Match::Ambiguous(a, b) => {
            log::error!(
                "machine {id}: {} and {} select it equally: refused (make one more specific)",
                a.file(),
                b.file()
            );
            return wait_script(
                &base,
                &format!("{} and {} select this machine equally", a.file(), b.file()),
            );
        }
        Match::None => match &ctx.settings.discovery {
            Discovery::Pool(p) => (None, p.clone()),
            Discovery::Register => {
                register(store, &f, &id);
                return wait_script(
                    &base,
                    &format!("machine {id} is not assigned to a pool (add a machine file)"),
                );
            }
        },
    };
    // Installed (on the server's evidence: a final report made with the credential of
    // its own config fetch), and no reprovision asked for since: the local disk.
    match store.machine(&id) {
        Ok(Some(m)) if m.installed() && m.reprovision.is_none() => {
            let s = script(format!(
                "#!ipxe\necho agent serve: machine {id} is installed: booting from the local disk\nexit\n"
            ));
            ctx.recent.keep(req, &id, &s);
            return s;
        }
        Ok(_) => {}
        Err(e) => {
            log::error!("reading machine {id} from the inventory: {e:#}");
            return wait_script(&base, "the inventory cannot be read now");
        }
    }
    let profile = match g.machines.profile(&pool) {
        Some(p) if g.pools.contains_key(&pool) => p.clone(),
        _ => {
            log::error!("machine {id}: pool {pool} is not served or has no boot profile");
            return wait_script(&base, &format!("pool {pool} cannot be booted now"));
        }
    };
    let token = match hand_out(ctx, store, &f, &id, file.as_deref(), &pool, &profile) {
        Ok(t) => t,
        Err(why) => return wait_script(&base, why),
    };
    // A machine file's arguments are filled with its values; the discovery pool's are the
    // profile's as they are.
    let args = file
        .as_ref()
        .and_then(|f| g.machines.configs.get(f))
        .map_or(&profile.args, |c| &c.args);
    let mut s = format!("#!ipxe\nkernel {base}/assets/{}", profile.kernel);
    for a in kernel_args(&profile, args, &base, &token) {
        s.push(' ');
        s.push_str(&a);
    }
    s.push('\n');
    for i in &profile.initrd {
        s.push_str(&format!("initrd {base}/assets/{i}\n"));
    }
    s.push_str("boot\n");
    let s = script(s);
    ctx.recent.keep(req, &id, &s);
    s
}

/// The kernel arguments of a boot of `profile` with (filled) arguments `args`: the
/// machine's config URL (with `token`) where the profile's `{{.config_url}}` places it,
/// else last (`agent.config.url=`, or `coreos.inst.ignition_url=` with an install section);
/// an install section's arguments after the profile's.
pub fn kernel_args(profile: &BootProfile, args: &[String], base: &str, token: &str) -> Vec<String> {
    let url = format!("{base}/machine-config?token={token}");
    let mark = format!("{{{{.{}}}}}", crate::source::selectors::CONFIG_URL);
    let placed = args.iter().any(|a| a.contains(&mark));
    let mut out: Vec<String> = args.iter().map(|a| a.replace(&mark, &url)).collect();
    let last = (!placed).then_some(url.as_str());
    match &profile.install {
        Some(i) => out.extend(i.kargs(base, last)),
        None => out.extend(last.map(|u| format!("agent.config.url={u}"))),
    }
    out
}

/// Records a machine no machine file selects as `unassigned` (unless its reports made it
/// known otherwise).
fn register(store: &dyn Store, f: &Facts, id: &str) {
    let now = now_secs();
    let ident = identity(f, id);
    let r = store.update(id, &mut |m: Option<Machine>| match m {
        // Known from its reports: leave it as it is.
        Some(m) if m.state.is_some_and(|s| s != State::Unassigned) => None,
        m => {
            let mut m = m.unwrap_or_else(|| Machine::new(id, now));
            m.identity = ident.clone();
            m.last_seen = now;
            m.state = Some(State::Unassigned);
            m.machine_file = None;
            Some(m)
        }
    });
    if let Err(e) = r {
        log::error!("registering machine {id}: {e:#}");
    }
}

/// A one-time boot token for machine `id` (selected by machine file `file`, or discovery)
/// of `pool`, kept in the store with the machine (replacing the one given before); Err: why
/// none is handed out now.
fn hand_out(
    ctx: &Ctx<'_>,
    store: &dyn Store,
    f: &Facts,
    id: &str,
    file: Option<&str>,
    pool: &str,
    profile: &BootProfile,
) -> Result<String, &'static str> {
    let Some(token) = new_token() else {
        return Err("no random token could be made");
    };
    let now = now_secs();
    let ttl = ctx.settings.token_ttl.max(1);
    let t = BootToken {
        machine: id.to_string(),
        file: file.map(str::to_string),
        pool: pool.to_string(),
        expires: now + ttl,
        spent: None,
        // A boot token authenticates no report: the credential its config fetch issues does.
        reports_until: now + ttl,
        kind: TokenKind::Boot,
        issued: now,
        uses: profile.token_uses,
        used: 0,
    };
    let key = token_key(&token);
    if let Err(e) = store.put_boot_token(&key, &t, now) {
        log::error!("keeping a boot token for machine {id}: {e:#}");
        return Err("the inventory cannot take a token now");
    }
    // Remember which file selected it (shown with the machine), and the token, which
    // replaces the one given before: a machine has one boot token at a time.
    let ident = identity(f, id);
    let mut replaced = None;
    let remembered = store.update(id, &mut |m: Option<Machine>| {
        let mut m = m.unwrap_or_else(|| Machine::new(id, now));
        if m.boots.is_empty() {
            m.identity = ident.clone();
            m.state = None;
        }
        m.last_seen = now;
        m.pool = Some(pool.to_string());
        m.machine_file = file.map(str::to_string);
        replaced = m.tokens.boot.replace(key.clone()).filter(|k| *k != key);
        Some(m)
    });
    match remembered {
        Ok(_) => {
            if let Some(old) = replaced
                && let Err(e) = store.forget_boot_token(&old)
            {
                log::warn!(
                    "forgetting machine {id}'s earlier boot token {}…: {e:#}",
                    &old[..8]
                );
            }
        }
        Err(e) => {
            // Not remembered, it could not replace a later one: not handed out.
            log::warn!("remembering machine {id} in the inventory: {e:#}");
            if let Err(e) = store.forget_boot_token(&key) {
                log::warn!("forgetting an unused boot token: {e:#}");
            }
            return Err("the inventory cannot take this machine now");
        }
    }
    log::info!(
        "machine {id} ({}) boots pool {pool}: token {}…",
        file.map_or("discovery".to_string(), |f| format!("machines/{f}.json")),
        &key[..8]
    );
    Ok(token)
}

/// What the inventory shows of a machine known only from `/ipxe`.
fn identity(f: &Facts, id: &str) -> crate::fleet::inventory::model::Identity {
    crate::fleet::inventory::model::Identity {
        id: id.to_string(),
        uuid: f.uuid.clone(),
        serial: f.serial.clone(),
        macs: f.mac.iter().cloned().collect(),
        hostname: f.hostname.clone(),
        ..Default::default()
    }
}

/// `GET /machine-config?token=T`: spends the token (atomically, in the store) and serves
/// its machine's config; refused (403) when unknown, expired or spent.
fn machine_config(ctx: &Ctx<'_>, req: &Request, out: &mut Response) {
    let Some(token) = req.query_param("token").filter(|t| well_formed(t)) else {
        *out = Response::text(401, "missing or malformed token (?token=)");
        return;
    };
    let Some(store) = ctx.store else {
        *out = Response::text(503, "no inventory store").header("Retry-After", "30");
        return;
    };
    let key = token_key(token);
    // The report credential this fetch hands out, kept before the token is spent (a
    // credential of a spend that failed is never given to anyone, and expires).
    let Some(credential) = new_token() else {
        *out = Response::text(503, "no random token could be made").header("Retry-After", "5");
        return;
    };
    let ckey = token_key(&credential);
    let now = now_secs();
    let t = match store.boot_token(&key) {
        Ok(Some(t)) if t.kind == TokenKind::Boot => t,
        Ok(_) => {
            log::warn!(
                "machine config refused for token {}…: unknown token",
                &key[..8]
            );
            *out = Response::text(403, "unknown token: boot the machine again for a new one");
            return;
        }
        Err(e) => {
            log::error!("reading a boot token: {e:#}");
            *out = Response::text(503, "the inventory store cannot answer now; retry")
                .header("Retry-After", "5");
            return;
        }
    };
    let cred = BootToken {
        kind: TokenKind::Report,
        expires: 0,
        spent: Some(now),
        reports_until: now + REPORTS_FOR,
        ..t
    };
    if let Err(e) = store.put_boot_token(&ckey, &cred, now) {
        log::error!("keeping a report credential: {e:#}");
        *out = Response::text(503, "the inventory store cannot answer now; retry")
            .header("Retry-After", "5");
        return;
    }
    let t = match store.spend_boot_token(&key, now) {
        Ok(Spend::Spent(t)) => t,
        Ok(Spend::Refused(why)) => {
            log::warn!("machine config refused for token {}…: {why}", &key[..8]);
            let _ = store.forget_boot_token(&ckey);
            *out = Response::text(403, format!("{why}: boot the machine again for a new one"));
            return;
        }
        Err(e) => {
            let _ = store.forget_boot_token(&ckey);
            log::error!("spending a boot token: {e:#}");
            *out = Response::text(503, "the inventory store cannot answer now; retry")
                .header("Retry-After", "5");
            return;
        }
    };
    let Some(active) = ctx.generation else {
        *out = Response::text(503, "no valid config generation loaded").header("Retry-After", "5");
        return;
    };
    // A pool in a rollout: the new config or the previous one, as its rollout says.
    let previous = match rolled_out(ctx, store, active, &t, now) {
        Ok(p) => p,
        Err(r) => return *out = r,
    };
    let g = previous.as_ref().unwrap_or(active);
    let pool = match &t.file {
        Some(name) => match g.machines.configs.get(name).map(|c| c.served()) {
            Some(Err(e)) => {
                log::error!("machine {}: rendering its config: {e}", t.machine);
                *out = Response::text(500, "the machine's config could not be rendered");
                return;
            }
            found => found.and_then(Result::ok),
        },
        None => g.pools.get(&t.pool).cloned(),
    };
    let Some(pool) = pool else {
        *out = Response::text(
            404,
            "the machine file or pool of this token is no longer in the source",
        );
        return;
    };
    ctx.recent.forget(&t.machine);
    keep_credential(store, &t.machine, &ckey);
    log::info!(
        "machine {} fetched its config ({}), token {}… spent",
        t.machine,
        pool.config_name,
        &key[..8]
    );
    (ctx.serve)(req, &pool, out);
    // Its reports are authenticated by the credential this fetch issued.
    out.replace_line(
        "X-Agent-Report-URL: /report\r\n",
        &format!("X-Agent-Report-URL: /report?token={credential}\r\n"),
    );
}

/// The previous generation when the rollout of token `t`'s pool holds its machine back
/// (`crate::fleet::rollout`); None: the active one. Err: the answer (the store failed).
fn rolled_out(
    ctx: &Ctx<'_>,
    store: &dyn Store,
    active: &Arc<Generation>,
    t: &BootToken,
    now: u64,
) -> Result<Option<Arc<Generation>>, Response> {
    use crate::fleet::rollout::{self, Choice};
    let Some(c) = rollout::current(active, ctx.last_known_good, &t.pool) else {
        return Ok(None);
    };
    match rollout::choose(store, &c, &t.machine, now) {
        Ok(Choice::Active) => Ok(None),
        Ok(Choice::Previous(p)) => Ok(Some(p)),
        Err(e) => {
            log::error!(
                "machine {}: the rollout of pool {}: {e:#}",
                t.machine,
                t.pool
            );
            Err(
                Response::text(503, "the inventory store cannot answer now; retry")
                    .header("Retry-After", "5"),
            )
        }
    }
}

/// Remembers report credential `ckey` with `machine`, which keeps its last
/// REPORT_CREDENTIALS; an older one is forgotten.
fn keep_credential(store: &dyn Store, machine: &str, ckey: &str) {
    let mut gone = Vec::new();
    let kept = store.update(machine, &mut |m: Option<Machine>| {
        let mut m = m?;
        m.tokens.report.retain(|k| k != ckey);
        m.tokens.report.push(ckey.to_string());
        let extra = m.tokens.report.len().saturating_sub(REPORT_CREDENTIALS);
        gone = m.tokens.report.drain(..extra).collect();
        Some(m)
    });
    match kept {
        Ok(_) => {
            for old in gone {
                if let Err(e) = store.forget_boot_token(&old) {
                    log::warn!(
                        "forgetting machine {}'s old report credential: {e:#}",
                        machine
                    );
                }
            }
        }
        Err(e) => log::warn!("remembering machine {}'s report credential: {e:#}", machine),
    }
}

/// How long a boot script is answered again to the same request (a machine asking again,
/// or a client looping on one machine's `/ipxe`) without the store: one answer, one token.
pub const RECENT_FOR: std::time::Duration = std::time::Duration::from_secs(5);
/// Boot scripts kept at most.
const RECENT_KEPT: usize = 4096;

/// The boot scripts answered last, by request query (the machine's facts as it sent them)
/// and Host (the scripts' URLs are made from it without `--public-url`):
/// a repeated `/ipxe` within [`RECENT_FOR`] is answered on the event loop from here, so a
/// client looping on one machine neither fills the boot queue nor mints tokens. A
/// machine's entries are forgotten when its config is fetched and when a reprovision is
/// asked for here (another replica's answer may be [`RECENT_FOR`] older).
#[derive(Default)]
pub struct Recent(std::sync::Mutex<std::collections::VecDeque<Kept>>);

/// What a kept script is found by: the request's Host and query.
fn recent_key(req: &Request) -> String {
    format!(
        "{}\n{}",
        req.header_one("host").unwrap_or(""),
        req.query().unwrap_or("")
    )
}

struct Kept {
    query: String,
    machine: String,
    made: std::time::Instant,
    script: Response,
}

impl Recent {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Kept>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The script answered to this request within [`RECENT_FOR`], if any.
    pub fn get(&self, req: &Request) -> Option<Response> {
        if req.method() != "GET" || req.path() != "/ipxe" {
            return None;
        }
        let q = recent_key(req);
        let mut kept = self.lock();
        let now = std::time::Instant::now();
        while kept
            .front()
            .is_some_and(|k| now.duration_since(k.made) >= RECENT_FOR)
        {
            kept.pop_front();
        }
        kept.iter()
            .rev()
            .find(|k| k.query == q)
            .map(|k| k.script.clone())
    }

    fn keep(&self, req: &Request, machine: &str, script: &Response) {
        let mut kept = self.lock();
        let q = recent_key(req);
        kept.retain(|k| k.query != q);
        if kept.len() >= RECENT_KEPT {
            kept.pop_front();
        }
        kept.push_back(Kept {
            query: q,
            machine: machine.to_string(),
            made: std::time::Instant::now(),
            script: script.clone(),
        });
    }

    /// Forgets machine `id`'s scripts (its token was spent, or a reprovision asked for).
    pub fn forget(&self, id: &str) {
        self.lock().retain(|k| k.machine != id);
    }
}

/// A range no byte of the asset is in (answered 416).
#[derive(Debug, PartialEq, Eq)]
pub struct Unsatisfiable;

/// A `Range` header's one range over `len` bytes: Ok(Some((start, end))) to serve
/// `start..end`, Ok(None) to serve the whole (no header, several ranges, or one we do not
/// parse, as RFC 9110 allows), Err for an unsatisfiable one (416).
pub fn range(h: Option<&str>, len: usize) -> Result<Option<(usize, usize)>, Unsatisfiable> {
    let Some(spec) = h.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Ok(None);
    };
    let num = |s: &str| -> Option<usize> {
        (!s.is_empty() && s.len() <= 19 && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (a.is_empty(), b.is_empty()) {
        // bytes=-N: the last N bytes.
        (true, false) => {
            let Some(n) = num(b) else { return Ok(None) };
            if n == 0 || len == 0 {
                return Err(Unsatisfiable);
            }
            Ok(Some((len - n.min(len), len)))
        }
        (false, _) => {
            let Some(s) = num(a) else { return Ok(None) };
            let e = if b.is_empty() {
                len.saturating_sub(1)
            } else {
                let Some(e) = num(b) else { return Ok(None) };
                if e < s {
                    return Ok(None);
                }
                e.min(len.saturating_sub(1))
            };
            if s >= len {
                return Err(Unsatisfiable);
            }
            Ok(Some((s, e + 1)))
        }
        _ => Ok(None),
    }
}

/// `GET|HEAD /assets/<file>`: a boot asset of the active generation, with `Range` (one
/// range; several get the whole file), `If-Range`, `If-None-Match`.
fn asset(ctx: &Ctx<'_>, req: &Request, name: &str, out: &mut Response) {
    let Some(g) = ctx.generation else {
        *out = Response::text(503, "no valid config generation loaded").header("Retry-After", "5");
        return;
    };
    let Some(a): Option<&Arc<Asset>> = g.machines.assets.get(name) else {
        return out.reset(404);
    };
    if req
        .header("if-none-match")
        .is_some_and(|v| etag_matches(&v, &a.etag))
    {
        out.reset(304);
        out.add_header("ETag", &a.etag);
        out.add_header("Accept-Ranges", "bytes");
        return;
    }
    let len = a.bytes.len();
    // If-Range with another validator: the whole file.
    let ranged = req.header("if-range").is_none_or(|v| v.trim() == a.etag);
    let r = if ranged {
        range(req.header("range").as_deref(), len)
    } else {
        Ok(None)
    };
    match r {
        Err(Unsatisfiable) => {
            out.reset(416);
            out.add_header("Content-Range", &format!("bytes */{len}"));
            out.add_header("Accept-Ranges", "bytes");
        }
        Ok(None) => {
            out.reset(200);
            out.body = Body::Shared(a.bytes.clone());
        }
        Ok(Some((s, e))) => {
            out.reset(206);
            out.add_header("Content-Range", &format!("bytes {s}-{}/{len}", e - 1));
            out.body = Body::Slice {
                bytes: a.bytes.clone(),
                start: s,
                end: e,
            };
        }
    }
    if out.status != 416 {
        out.add_header("Content-Type", "application/octet-stream");
        out.add_header("ETag", &a.etag);
        out.add_header("Accept-Ranges", "bytes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        for (h, len, want) in [
            (None, 10, Ok(None)),
            (Some("bytes=0-3"), 10, Ok(Some((0, 4)))),
            (Some("bytes=5-"), 10, Ok(Some((5, 10)))),
            (Some("bytes=-3"), 10, Ok(Some((7, 10)))),
            (Some("bytes=-30"), 10, Ok(Some((0, 10)))),
            (Some("bytes=8-100"), 10, Ok(Some((8, 10)))),
            (Some("bytes=10-"), 10, Err(Unsatisfiable)),
            (Some("bytes=-0"), 10, Err(Unsatisfiable)),
            (Some("bytes=0-1,3-4"), 10, Ok(None)),
            (Some("bytes=4-2"), 10, Ok(None)),
            (Some("items=0-1"), 10, Ok(None)),
            (Some("bytes=x-1"), 10, Ok(None)),
        ] {
            assert_eq!(range(h, len), want, "{h:?}");
        }
    }

    #[test]
    fn tokens_are_fresh_and_well_formed() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert!(well_formed(&a));
        assert!(!well_formed("short"));
        assert!(!well_formed(&format!("{a}%0A")));
    }
}
