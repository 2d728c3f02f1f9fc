//! The installed system's last report (docs/reports.md, "running"): the files stage leaves
//! where it goes in the new root (`/var/lib/agent/running.json`, 0600: the report URL and
//! credential the provisioning reports had); once the system is up, `agent report-running`
//! (`agent-report-running.service`) sends `{stage: running, boot_id, kernel}` and removes the
//! file, so it is sent once per install.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};

use super::model::{AppliedConfig, Target};
use super::{Outcome, build, send};
use crate::endpoints::Endpoints;

/// Where the report goes, as kept in the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// PEM bundles the report URL is checked against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cas: Vec<String>,
    #[serde(default)]
    pub config: AppliedConfig,
}

impl Pending {
    pub fn of(t: &Target) -> Pending {
        Pending {
            url: t.url.clone(),
            auth: t.auth.clone(),
            cas: t
                .cas
                .iter()
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect(),
            config: t.config.clone(),
        }
    }

    fn target(self, endpoints: Endpoints) -> Target {
        Target {
            url: self.url,
            auth: self.auth,
            cas: self.cas.into_iter().map(String::into_bytes).collect(),
            config: self.config,
            endpoints,
            ..Target::default()
        }
    }
}

/// How often, and how long between tries, the report is sent before giving up (the unit is
/// not restarted: the file stays, and the next boot tries again).
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub tries: u32,
    /// The first pause; each next one doubles, at most [`MAX_PAUSE`].
    pub pause: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            tries: 10,
            pause: Duration::from_secs(2),
        }
    }
}

/// The longest pause between tries.
pub const MAX_PAUSE: Duration = Duration::from_secs(60);

/// The running kernel's release (`uname -r`, from `/proc/sys/kernel/osrelease`).
pub fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `agent report-running`: sends the `running` report to where `state` says and removes
/// `state` once the server took it (or refused it for good: sending again cannot help). No
/// `state` file: nothing to do (sent already).
pub fn send_pending(state: &Path, endpoints: Endpoints, retry: Retry) -> Result<()> {
    let bytes = match std::fs::read(state) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            log::info!("{}: no running report to send", state.display());
            return Ok(());
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", state.display())),
    };
    let p: Pending =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", state.display()))?;
    let t = p.target(endpoints);
    let mut r = build(
        &t,
        Outcome {
            stage: super::ReportStage::Running,
            outcome: super::StageOutcome::Ok,
            final_: true,
            duration: Duration::ZERO,
            changes: super::Changes::default(),
            error: None,
            platform: None,
        },
    );
    r.kernel = kernel_release();
    let url = super::redact::url(&t.url);
    let mut pause = retry.pause;
    for n in 1..=retry.tries.max(1) {
        match send::send(&t, &r, Instant::now() + send::BUDGET) {
            Ok(()) => {
                log::info!(
                    "running report sent to {url} (boot {}, kernel {})",
                    r.boot_id,
                    r.kernel.as_deref().unwrap_or("-")
                );
                return remove(state);
            }
            Err(send::Error::Refused(e)) => {
                remove(state)?;
                return Err(e.context(format!("the running report was refused by {url}")));
            }
            Err(send::Error::Unreachable(e)) if n < retry.tries => {
                log::warn!("running report not sent (try {n}), again in {pause:?}: {e:#}");
                std::thread::sleep(pause);
                pause = (pause * 2).min(MAX_PAUSE);
            }
            Err(send::Error::Unreachable(e)) => {
                return Err(e.context(format!(
                    "the running report was not sent in {} tries: {} stays for the next boot",
                    retry.tries,
                    state.display()
                )));
            }
        }
    }
    bail!("the running report was not sent")
}

fn remove(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", p.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_round_trips_without_the_endpoints() {
        let t = Target {
            url: "http://h/report?token=c".into(),
            auth: Some("Bearer x".into()),
            cas: vec![b"PEM".to_vec()],
            ..Target::default()
        };
        let p = Pending::of(&t);
        let json = serde_json::to_string(&p).unwrap();
        assert!(
            json.contains("\"url\":\"http://h/report?token=c\""),
            "{json}"
        );
        let back: Pending = serde_json::from_str(&json).unwrap();
        let t2 = back.target(Endpoints::builtin());
        assert_eq!((t2.url, t2.auth, t2.cas), (t.url, t.auth, t.cas));
        assert!(kernel_release().is_some_and(|k| !k.is_empty()));
    }
}
