//! The run loop of `agent serve`: checks the options, puts back the checkpoint, binds the
//! listeners, starts the event loops ([`crate::http::Server`]) and the source watcher
//! ([`crate::generations::watch`], which loads the source first), then waits for signals: SIGHUP forces
//! a reload, SIGTERM/SIGINT shut down gracefully, within `--shutdown-grace` plus
//! [`WATCHER_MARGIN`] whatever the watcher is doing.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::app::App;
use crate::generations::Generations;
use crate::generations::watch::{Nudges, watch_loop};
use crate::http::{self, tls};
use crate::options::Options;

/// Runs the server until SIGTERM or SIGINT: binds the listeners (printing `listening
/// SCHEME://ADDR` on stdout for each), starts the event loops and the source watcher, turns
/// SIGHUP into a forced reload, and on shutdown gives in-flight requests
/// [`Options::shutdown_grace`] to finish.
pub fn run(opts: &Options) -> Result<()> {
    runtime::logging::set_stage("serve");
    check(opts)?;
    crate::source::openshift::start(&crate::source::openshift::Asked {
        openshift: opts.openshift,
        kubeconfig: opts.kubeconfig.as_deref(),
        config_names: &opts.openshift_config_names,
    })?;
    // Signals go to a dedicated thread: block them before any other thread starts.
    use nix::sys::signal::{SigSet, Signal};
    let mut sigs = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        sigs.add(s);
    }
    sigs.thread_block().context("blocking signals")?;

    let token_dir = token_watch_dir(opts);
    let limits = limits(opts);
    let threads = match opts.threads {
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    raise_open_files_limit(&limits, threads);
    let conns = Arc::new(http::ConnStats::default());
    if let Some(old) = opts.legacy_token_dir() {
        crate::tokens::migrate(&old, &crate::tokens::Store::new(opts.token_dir()))?;
    }
    let app = Arc::new(App::new(opts, conns.clone(), &limits)?);
    App::set_shared(&app);
    // What the checkpoint kept is served from the start; the source is loaded by the
    // watcher once the listeners are up, so a slow or broken source never keeps the server
    // from answering (`/readyz` is 503 until there is something to serve).
    app.generations.restore();

    let resolver = match (&opts.tls_cert, &opts.tls_key) {
        (Some(c), Some(k)) => Some(Arc::new(tls::CertResolver::new(c.clone(), k.clone())?)),
        _ => None,
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    let server = http::Server::new(limits.clone(), app.clone(), conns.clone(), shutdown.clone());
    let mut out = std::io::stdout().lock();
    let listeners = bind_listeners(opts, resolver.as_ref(), &mut out)?;
    let admin = start_admin(opts, &app, &limits, &shutdown, &mut out)?;
    out.flush().ok();
    drop(out);
    let loops = server.start(&listeners, threads)?;

    let nudges = Arc::new(Nudges::new(shutdown.clone())?);
    let watcher = {
        let (generations, nudges, resolver) =
            (app.generations.clone(), nudges.clone(), resolver.clone());
        let poll = opts.poll_interval;
        let td = token_dir.clone();
        std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || {
                watch_loop(
                    &generations,
                    poll,
                    resolver.as_deref(),
                    Some(&td),
                    &nudges,
                    report_first_load,
                )
            })
            .context("starting watcher thread")?
    };

    start_rollout_tick(&app, &shutdown)?;

    loop {
        match sigs.wait() {
            Ok(Signal::SIGHUP) => nudges.hup(),
            Ok(s) => {
                log::info!("{s}: shutting down gracefully");
                break;
            }
            Err(e) => bail!("waiting for signals: {e}"),
        }
    }
    let stopping = Stopping {
        shutdown: &shutdown,
        nudges: &nudges,
        listeners: &listeners,
        admin: admin.as_deref(),
        loops,
        conns: &conns,
        watcher,
    };
    stopping.finish(opts.shutdown_grace);
    log::info!("stopped");
    Ok(())
}

/// How often the rollouts are evaluated (halts, deadlines, the next stage).
const ROLLOUT_TICK: Duration = Duration::from_secs(1);

/// The thread that evaluates the rollouts ([`crate::fleet::rollout::tick`]) until shutdown;
/// it reads the store only while a pool with a policy is in a rollout.
fn start_rollout_tick(app: &Arc<App>, shutdown: &Arc<AtomicBool>) -> Result<()> {
    let (app, shutdown) = (app.clone(), shutdown.clone());
    std::thread::Builder::new()
        .name("rollouts".into())
        .spawn(move || {
            while !shutdown.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some(store) = &app.fleet.store {
                    crate::fleet::rollout::tick(
                        &**store,
                        &app.generations,
                        &app.fleet.rollouts,
                        crate::fleet::now_secs(),
                    );
                }
                let end = std::time::Instant::now() + ROLLOUT_TICK;
                while std::time::Instant::now() < end
                    && !shutdown.load(std::sync::atomic::Ordering::SeqCst)
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        })
        .context("starting the rollout thread")?;
    Ok(())
}

/// The options no server can run with.
fn check(opts: &Options) -> Result<()> {
    if let (Some(addr), None) = (opts.listen, &opts.tls_cert) {
        bail!(
            "--listen {addr} serves HTTPS and needs --tls-cert and --tls-key; for plain HTTP use --listen-http {addr}"
        );
    }
    if opts.tls_cert.is_none() && opts.listen_http.is_none() {
        bail!("nothing to listen on: give --tls-cert and --tls-key (HTTPS) and/or --listen-http");
    }
    if opts.token_ttl.as_secs() < 2 {
        bail!("--token-ttl must be at least 2s");
    }
    Ok(())
}

/// Watched for changes: the token store, or the directory of the key file (a Secret volume
/// swaps it by rename).
fn token_watch_dir(opts: &Options) -> std::path::PathBuf {
    match &opts.token_key {
        Some(k) => k
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| std::path::PathBuf::from("."), |p| p.to_path_buf()),
        None => opts.token_dir(),
    }
}

/// The machine-facing listeners' limits.
fn limits(opts: &Options) -> http::Limits {
    http::Limits {
        max_header_bytes: opts.max_header_bytes,
        max_body_bytes: opts.max_body_bytes,
        max_body_total: opts.max_body_total,
        header_timeout: opts.header_timeout,
        idle_timeout: opts.idle_timeout,
        min_send_rate: opts.min_send_rate,
        send_window: opts.send_rate_window,
        max_connections: opts.max_connections,
        max_connections_per_address: opts.max_connections_per_address,
        ..Default::default()
    }
}

/// Binds the machine-facing listeners (HTTPS with a certificate, plain HTTP when asked),
/// printing `listening SCHEME://ADDR` for each.
fn bind_listeners(
    opts: &Options,
    resolver: Option<&Arc<tls::CertResolver>>,
    out: &mut impl Write,
) -> Result<Vec<http::Listener>> {
    let mut plan: Vec<(SocketAddr, Option<Arc<rustls::ServerConfig>>, &str)> = Vec::new();
    if let Some(r) = resolver {
        let addr = opts
            .listen
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 22623)));
        plan.push((addr, Some(tls::server_config(r.clone())?), "https"));
    }
    if let Some(a) = opts.listen_http {
        plan.push((a, None, "http"));
    }
    let mut listeners = Vec::new();
    for (addr, cfg, scheme) in plan {
        let l = http::bind(addr, opts.defer_accept_secs)?;
        let local = l.local_addr().context("reading the bound address")?;
        writeln!(out, "listening {scheme}://{local}").context("writing to stdout")?;
        log::info!("listening on {scheme}://{local}");
        listeners.push(http::Listener { sock: l, tls: cfg });
    }
    Ok(listeners)
}

/// Starts the admin listener when asked for: the inventory, its API and its page, never on
/// the machine-facing listeners (crate::fleet). Its address taken (another agent serve, or
/// any local user holding the port) does not stop the machine listeners: logged, shown in
/// /status, and tried again every ADMIN_RETRY.
fn start_admin(
    opts: &Options,
    app: &Arc<App>,
    limits: &http::Limits,
    shutdown: &Arc<AtomicBool>,
    out: &mut impl Write,
) -> Result<Option<Arc<AdminListener>>> {
    Ok(match opts.admin_listen {
        None => None,
        Some(addr) => {
            let token = match &opts.admin_token_file {
                Some(f) => Some(admin_token(f)?),
                None if addr.ip().is_loopback() => None,
                None => bail!(
                    "--admin-listen {addr} is not a loopback address: give --admin-token-file (the inventory is never served to an unauthenticated client)"
                ),
            };
            let a = Arc::new(AdminListener {
                addr,
                defer_secs: opts.defer_accept_secs,
                app: app.clone(),
                token,
                hosts: opts.admin_hosts.clone(),
                limits: http::Limits {
                    max_connections: 256,
                    ..limits.clone()
                },
                shutdown: shutdown.clone(),
                running: Default::default(),
            });
            match a.start() {
                Ok(local) => {
                    writeln!(out, "listening admin http://{local}").context("writing to stdout")?;
                }
                Err(e) => {
                    log::error!(
                        "{e:#}: serving without the admin listener (the inventory, /ui/) for now, trying again every {}s",
                        ADMIN_RETRY.as_secs()
                    );
                    let again = a.clone();
                    std::thread::Builder::new()
                        .name("admin-bind".into())
                        .spawn(move || again.retry())
                        .context("starting the admin listener's retry thread")?;
                }
            }
            Some(a)
        }
    })
}

/// What shutting down waits for.
struct Stopping<'a> {
    shutdown: &'a AtomicBool,
    nudges: &'a Nudges,
    listeners: &'a [http::Listener],
    admin: Option<&'a AdminListener>,
    loops: Vec<std::thread::JoinHandle<()>>,
    conns: &'a http::ConnStats,
    watcher: std::thread::JoinHandle<()>,
}

impl Stopping<'_> {
    /// Stops taking connections, gives in-flight requests `grace` to finish, and the watcher
    /// [`WATCHER_MARGIN`] more.
    fn finish(self, grace: Duration) {
        let Stopping {
            shutdown,
            nudges,
            listeners,
            admin,
            loops,
            conns,
            watcher,
        } = self;
        shutdown.store(true, Ordering::SeqCst);
        nudges.nudge();
        for l in listeners {
            http::stop_listener(&l.sock);
        }
        let admin_loops = admin.as_ref().map_or_else(Vec::new, |a| a.stop());
        // The event loops finish in-flight requests, then return.
        let deadline = Instant::now() + grace;
        while loops.iter().chain(&admin_loops).any(|t| !t.is_finished())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = conns.open.load(Ordering::SeqCst);
        if loops.iter().any(|t| !t.is_finished()) {
            log::warn!("{left} connections still open after the grace period");
        }
        // The watcher was nudged and stops between two steps; one busy with a long read or
        // translation is not waited for past the grace period plus WATCHER_MARGIN.
        let end = deadline.max(Instant::now()) + WATCHER_MARGIN;
        while !watcher.is_finished() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        if watcher.is_finished() {
            let _ = watcher.join();
        } else {
            log::warn!(
                "the source watcher is still busy (reading or translating the source): exiting without it"
            );
        }
    }
}

/// How often an admin listener that could not bind tries again.
pub const ADMIN_RETRY: Duration = Duration::from_secs(5);

/// The admin listener: bound at start, or (its address taken) tried again every
/// [`ADMIN_RETRY`] until it is, the machine listeners serving meanwhile.
struct AdminListener {
    addr: SocketAddr,
    defer_secs: u32,
    app: Arc<App>,
    token: Option<String>,
    hosts: Vec<String>,
    limits: http::Limits,
    shutdown: Arc<AtomicBool>,
    /// Once bound: its socket and its event loop.
    running: std::sync::Mutex<Option<Running>>,
}

/// A bound admin listener: its socket (kept open until the process ends) and event loop.
type Running = (Vec<http::Listener>, Vec<std::thread::JoinHandle<()>>);

impl AdminListener {
    /// Binds and starts serving; the bound address. Either way /status says so.
    fn start(&self) -> Result<SocketAddr> {
        let r = self.try_start();
        self.app
            .admin_status
            .set(self.addr, r.as_ref().err().map(|e| format!("{e:#}")));
        r
    }

    fn try_start(&self) -> Result<SocketAddr> {
        let addr = self.addr;
        let l = http::bind(addr, self.defer_secs).with_context(|| {
            format!(
                "--admin-listen {addr} (taken by another agent serve, or another program on this host? give each its own --admin-listen, or off)"
            )
        })?;
        let local = l.local_addr().context("reading the bound address")?;
        let admin = Arc::new(crate::admin::Admin::new(
            self.app.fleet.clone(),
            self.app.generations.clone(),
            self.token.clone(),
            crate::admin::auth::Hosts::new(local, &self.hosts),
        )?);
        let ls = vec![http::Listener { sock: l, tls: None }];
        let server = http::Server::new(
            self.limits.clone(),
            admin,
            Arc::new(http::ConnStats::default()),
            self.shutdown.clone(),
        );
        let loops = server.start(&ls, 1)?;
        log::info!("admin (inventory, /ui/) on http://{local}");
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some((ls, loops));
        Ok(local)
    }

    /// Tries [`start`](Self::start) every [`ADMIN_RETRY`] until it binds or the server
    /// shuts down.
    fn retry(&self) {
        loop {
            let until = Instant::now() + ADMIN_RETRY;
            while Instant::now() < until {
                if self.shutdown.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            match self.start() {
                Ok(local) => {
                    let mut out = std::io::stdout().lock();
                    let _ =
                        writeln!(out, "listening admin http://{local}").and_then(|_| out.flush());
                    return;
                }
                Err(e) => log::debug!("{e:#}"),
            }
        }
    }

    /// Stops taking connections (the socket stays open until the process ends); the event
    /// loop to wait for (none when never bound).
    fn stop(&self) -> Vec<std::thread::JoinHandle<()>> {
        match &mut *self.running.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((ls, loops)) => {
                for l in ls.iter() {
                    http::stop_listener(&l.sock);
                }
                std::mem::take(loops)
            }
            None => Vec::new(),
        }
    }
}

/// The admin token from `path`: a regular file, at most 4 KiB, its first line, at least 16
/// bytes (a guessable token would open the inventory).
fn admin_token(path: &std::path::Path) -> Result<String> {
    use std::io::Read;
    let (f, _) = runtime::util::open_regular(path, true).map_err(|e| {
        let why = match e {
            runtime::util::OpenRegularError::Io(e) => e.to_string(),
            runtime::util::OpenRegularError::NotRegular(k) => format!("not a regular file ({k})"),
        };
        anyhow::anyhow!("--admin-token-file {}: {why}", path.display())
    })?;
    let mut b = Vec::new();
    f.take(4096)
        .read_to_end(&mut b)
        .with_context(|| format!("reading --admin-token-file {}", path.display()))?;
    let t = String::from_utf8_lossy(&b)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    if t.len() < 16 {
        bail!(
            "--admin-token-file {}: the token is shorter than 16 bytes",
            path.display()
        );
    }
    Ok(t)
}

/// How long after the grace period shutdown waits for the source watcher.
pub const WATCHER_MARGIN: Duration = Duration::from_secs(1);

/// After the first load of the source: one line on stdout (after the `listening` lines)
/// saying whether it loaded and what is served, for scripts and tests that wait for it.
fn report_first_load(generations: &Generations) {
    let line = generations.first_load_line();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
}

/// Raises the soft open-files limit to the hard one (every connection is a descriptor) and
/// warns when even that is too low for --max-connections.
fn raise_open_files_limit(l: &http::Limits, threads: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_err() {
        log::warn!("could not raise the open-files limit from {soft} to {hard}");
    }
    let have = getrlimit(Resource::RLIMIT_NOFILE).map_or(soft, |(s, _)| s);
    let need = (l.max_connections + l.reject_budget() + 64 + threads * http::LOOP_FDS) as u64;
    if have < need {
        log::warn!(
            "the open-files limit ({have}) is below --max-connections plus headroom ({need}): raise it (LimitNOFILE= in the unit) or lower --max-connections"
        );
    }
}
