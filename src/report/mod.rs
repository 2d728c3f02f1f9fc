//! The agent's provisioning reports (docs/reports.md): after each stage, and when one fails,
//! a JSON report of who the machine is (`identity`), which config it applied, what the stage
//! changed and, on failure, the error and the last log lines with secrets removed (`redact`),
//! POSTed to the report URL the config server named (or `agent.report.url=`) with the token
//! the config was fetched with (`send`: bounded, never in the way); what cannot be sent waits
//! in the state directory (`queue`) for the next stage, or for `agent report drain` from the
//! new root. `summary` prints a failure's short summary on the console.

pub mod identity;
pub mod model;
pub mod queue;
pub mod redact;
pub mod running;
pub mod send;
pub mod summary;

use std::path::PathBuf;
use std::time::Duration;

use crate::endpoints::Endpoints;
use crate::state::StateDir;
use runtime::limits::Limits;

pub use identity::Machine;
pub use model::{
    AppliedConfig, Changes, Filesystems, MAX_PATHS, Partitions, Report, ReportStage, StageOutcome,
    Target,
};

/// Kernel argument naming the report URL (it wins over the server's header).
pub const KARG_REPORT_URL: &str = "agent.report.url";
/// Lines of log in a failure report.
pub const LOG_TAIL: usize = runtime::logging::RING_LINES;
/// The format of a report.
pub const FORMAT: u32 = 1;

/// The report target of this boot: `agent.report.url=` on `cmdline` wins over the URL the
/// config server named (kept by the fetch stage in the state directory); None: no reports.
///
/// The token (the `Authorization` header the config was fetched with) goes with the
/// reports to `agent.report.url=` (the operator named it) or to a report URL on the origin
/// the header was sent to (the config URL first asked); to any other origin the reports go
/// without it.
pub fn target(
    state: &StateDir,
    cmdline: &str,
    endpoints: &Endpoints,
    limits: Limits,
) -> Option<Target> {
    let served = state.read_fetch_record().ok().and_then(|r| r.served);
    let karg = runtime::cmdline::value(cmdline, KARG_REPORT_URL).filter(|u| !u.is_empty());
    let url = match karg {
        Some(u) => u.to_string(),
        None => {
            served.as_ref()?.report_url.as_ref()?;
            state.report_url()?
        }
    };
    let served = served.unwrap_or_default();
    let auth = state.report_auth().filter(|_| {
        karg.is_some()
            || served
                .auth_origin
                .as_ref()
                .is_some_and(|o| crate::fetch::http::origin(&url).as_ref() == Some(o))
    });
    Some(Target {
        url,
        auth,
        cas: served.cas.iter().map(|c| c.clone().into_bytes()).collect(),
        config: AppliedConfig {
            pool: served.pool,
            name: served.config,
            hash: served.hash,
        },
        endpoints: endpoints.clone(),
        limits,
        hostname: state.read_rendered().ok().and_then(|c| config_hostname(&c)),
    })
}

/// The hostname a config writes to `/etc/hostname` (an uncompressed data URL; its first
/// line), when it is a plausible hostname (at most 253 characters of letters, digits, `-`
/// and `.`).
pub fn config_hostname(c: &spec::config::Config) -> Option<String> {
    let f = c.storage.files.iter().find(|f| f.path == "/etc/hostname")?;
    if f.contents
        .compression
        .as_deref()
        .is_some_and(|z| !z.is_empty())
    {
        return None;
    }
    let src = f.contents.source.as_deref()?;
    if !src.starts_with("data:") {
        return None;
    }
    let bytes = spec::encoding::data_url::decode(src).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let name = text.lines().next()?.trim();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '.');
    ok.then(|| name.to_string())
}

/// What a report is about: the stage, its outcome and time, what it changed, its error.
#[derive(Debug)]
pub struct Outcome<'a> {
    pub stage: ReportStage,
    pub outcome: StageOutcome,
    pub final_: bool,
    pub duration: Duration,
    pub changes: Changes,
    pub error: Option<&'a anyhow::Error>,
    pub platform: Option<&'a str>,
}

/// Builds the report of `o` for `t`, secrets removed.
pub fn build(t: &Target, o: Outcome) -> Report {
    let known: Vec<&str> = t
        .auth
        .iter()
        .flat_map(|a| [a.as_str(), bearer(a)])
        .collect();
    let (error, log_tail) = match o.error {
        Some(e) => (
            Some(redact::text_with(&one_line(&format!("{e:#}")), &known)),
            runtime::logging::recent()
                .iter()
                .rev()
                .take(LOG_TAIL)
                .rev()
                .map(|l| redact::text_with(l, &known))
                .collect(),
        ),
        None => (None, Vec::new()),
    };
    let mut changes = o.changes;
    for p in &mut changes.paths {
        *p = redact::text_with(p, &known);
    }
    Report {
        format: FORMAT,
        id: uuid::Uuid::new_v4().simple().to_string(),
        boot_id: crate::state::boot_id(),
        sent: Some(now_rfc3339()),
        machine: {
            let mut m = identity::machine(&t.endpoints, o.platform);
            if m.hostname.is_none() {
                m.hostname = t.hostname.clone();
            }
            m
        },
        agent: Some(env!("CARGO_PKG_VERSION").to_string()),
        config: Some(t.config.clone()),
        stage: o.stage,
        outcome: o.outcome,
        last: o.final_,
        duration_ms: o.duration.as_millis() as u64,
        changes,
        error,
        log_tail,
        kernel: None,
    }
}

/// The credential of an `Authorization` header value (`Bearer x` → `x`).
fn bearer(a: &str) -> &str {
    a.split_once(' ').map_or(a, |(_, v)| v.trim())
}

/// An error on one line (a config's diagnostics come on several), at most 2,000 characters.
fn one_line(s: &str) -> String {
    let mut l: String = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if l.len() > 2000 {
        l.truncate(l.floor_char_boundary(2000));
        l.push('…');
    }
    l
}

fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    runtime::util::rfc3339(secs)
}

/// What became of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    Sent,
    /// Queued in this directory (the server could not be reached).
    Queued(PathBuf),
    /// The server refused it for good (a 4xx): dropped, with a log line.
    Refused,
}

/// Sends `r`: the reports queued in `state`'s queue first, then `r`; what cannot be sent is
/// queued. All of it within one [`send::BUDGET`]: once the server does not answer, or the
/// time is up, the rest is queued without trying (in order: `r` goes behind the queue).
pub fn deliver(t: &Target, state: &StateDir, r: &Report) -> Delivered {
    let dir = state.reports_dir();
    let deadline = std::time::Instant::now() + send::BUDGET;
    let reachable = match queue::drain(&dir, t, Some(deadline)) {
        Ok(_) => queue::list(&dir).map(|l| l.is_empty()).unwrap_or(false),
        Err(e) => {
            log::warn!("queued reports not sent yet: {e:#}");
            false
        }
    };
    if reachable {
        match send::send(t, r, deadline) {
            Ok(()) => {
                log::info!("{} report sent to {}", r.stage, redact::url(&t.url));
                return Delivered::Sent;
            }
            Err(send::Error::Refused(e)) => {
                log::warn!("{} report refused by the server, dropped: {e:#}", r.stage);
                return Delivered::Refused;
            }
            Err(send::Error::Unreachable(e)) => {
                log::warn!("{} report not sent: {e:#}", r.stage);
            }
        }
    }
    match queue::push(&dir, t, r) {
        Ok(p) => {
            log::info!("{} report queued in {}", r.stage, p.display());
            Delivered::Queued(dir)
        }
        Err(e) => {
            log::warn!("{} report lost: queueing it failed: {e:#}", r.stage);
            Delivered::Refused
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configs_hostname_is_taken_when_plausible() {
        let cfg = |files: &str| {
            spec::config::parse(
                format!(
                    r#"{{"ignition": {{"version": "3.4.0"}}, "storage": {{"files": [{files}]}}}}"#
                )
                .as_bytes(),
            )
            .unwrap()
            .config
        };
        let file = |src: &str| {
            format!(r#"{{"path": "/etc/hostname", "contents": {{"source": "{src}"}}}}"#)
        };
        assert_eq!(
            config_hostname(&cfg(&file("data:,node-1.example%0A"))).as_deref(),
            Some("node-1.example")
        );
        assert_eq!(
            config_hostname(&cfg(&file("data:;base64,bm9kZS0y"))).as_deref(),
            Some("node-2")
        );
        assert_eq!(config_hostname(&cfg(&file("data:,bad%20name"))), None);
        assert_eq!(config_hostname(&cfg(&file("https://h/hostname"))), None);
        assert_eq!(config_hostname(&cfg("")), None);
    }

    #[test]
    fn the_token_goes_only_to_its_origin_or_the_kernels_url() {
        let d =
            std::env::temp_dir().join(format!("agent-target-{}", uuid::Uuid::new_v4().simple()));
        let state = StateDir::new(&d);
        state.create().unwrap();
        state.write_report_auth(Some("Bearer tok_t")).unwrap();
        let target = |report_url: &str, cmdline: &str| {
            let rec = crate::state::FetchRecord {
                served: Some(crate::state::Served {
                    report_url: Some(report_url.into()),
                    auth_origin: Some("http://a:8080".into()),
                    ..Default::default()
                }),
                ..Default::default()
            };
            state.write_fetch_record(&rec).unwrap();
            let t =
                super::target(&state, cmdline, &Endpoints::builtin(), Limits::default()).unwrap();
            (t.url, t.auth)
        };
        let tok = Some("Bearer tok_t".to_string());
        assert_eq!(
            target("http://A:8080/report?token=x", ""),
            ("http://A:8080/report?token=x".into(), tok.clone())
        );
        assert_eq!(target("http://b:8080/report", "").1, None);
        assert_eq!(target("https://a:8080/report", "").1, None);
        assert_eq!(target("http://a/report", "").1, None);
        // The operator's URL gets it, whatever its origin.
        assert_eq!(
            target("http://b/report", "agent.report.url=http://c/r"),
            ("http://c/r".into(), tok)
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn paths_are_bounded_and_errors_one_line() {
        let c = Changes::of_paths((0..MAX_PATHS + 5).map(|i| format!("/p{i}")).collect());
        assert_eq!(c.paths.len(), MAX_PATHS);
        assert_eq!(c.paths_truncated, 5);
        assert_eq!(Changes::of_paths(vec!["/a".into()]).paths_truncated, 0);
        let v = serde_json::to_value(Changes::of_paths(vec!["/a".into()])).unwrap();
        assert!(v.get("paths_truncated").is_none(), "{v}");
        assert_eq!(
            one_line("config is invalid:\n  error at $.x\n\n"),
            "config is invalid:; error at $.x"
        );
    }
}
