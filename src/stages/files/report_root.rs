//! The files stage's part in reporting (docs/reports.md): its own report is sent while the new
//! root is mounted (the stage's [`crate::stages::Reporter`]); when reports are still queued
//! after it, the queue, the agent binary and
//! `agent-report.service` written into the root (through the root-confined writer) to send
//! them from the booted system; what sends the installed system's `running` report once it is
//! up (`agent-report-running.service`); and the log copied to `/var/log/agent/agent.log`.

use anyhow::{Context as _, Result};

use crate::files::Writer;
use crate::files::nodes::{Attrs, Contents};
use crate::report;
use crate::stages::context::Context;

/// Where the queue goes in the root.
pub const ROOT_QUEUE: &str = "/var/lib/agent/reports";
/// Where the agent binary goes in the root.
pub const ROOT_AGENT: &str = "/var/lib/agent/agent";
/// The unit that sends the queue from the booted system.
pub const UNIT: &str = "agent-report.service";
/// The log's copy in the root.
pub const ROOT_LOG: &str = "/var/log/agent/agent.log";
/// Where the installed system's `running` report goes (`report::running::Pending`).
pub const RUNNING_STATE: &str = "/var/lib/agent/running.json";
/// The unit that sends it once the system is up.
pub const RUNNING_UNIT: &str = "agent-report-running.service";

/// The running unit: once the system is up (multi-user, the network online, the queued
/// reports sent first), `agent report-running` sends the `running` report; then the state
/// file is gone (removed by it) and the unit removes itself, and the binary unless the
/// queue still needs it.
pub fn running_unit_text() -> String {
    format!(
        "# Written by the agent's files stage: tells the config server that the installed system
# came up, once, then removes itself.
[Unit]
Description=Report to the config server that the system came up
Wants=network-online.target
After=network-online.target multi-user.target {UNIT}
ConditionPathExists={RUNNING_STATE}

[Service]
Type=oneshot
ExecStart={ROOT_AGENT} report-running --state {RUNNING_STATE}
ExecStartPost=/bin/sh -c 'test -d {ROOT_QUEUE} || rm -f {ROOT_AGENT}'
ExecStartPost=/bin/rm -f /etc/systemd/system/{RUNNING_UNIT} /etc/systemd/system/multi-user.target.wants/{RUNNING_UNIT}

[Install]
WantedBy=multi-user.target
"
    )
}

/// Writes what sends the `running` report into the root: [`RUNNING_STATE`] (0600: where
/// the provisioning reports went, with their credential), the agent binary and
/// [`RUNNING_UNIT`], enabled.
pub fn install_running(w: &Writer, t: &report::Target) -> Result<()> {
    w.put_dir("/var/lib/agent", root_only(0o700), false)?;
    let state = serde_json::to_vec_pretty(&report::running::Pending::of(t))
        .context("encoding the running report's target")?;
    w.put_file(
        RUNNING_STATE,
        Contents::Bytes(&state),
        root_only(0o600),
        true,
    )?;
    put_agent(w)?;
    let unit = format!("/etc/systemd/system/{RUNNING_UNIT}");
    w.put_file(
        &unit,
        Contents::Bytes(running_unit_text().as_bytes()),
        root_only(0o644),
        true,
    )?;
    w.put_symlink(
        &format!("/etc/systemd/system/multi-user.target.wants/{RUNNING_UNIT}"),
        &unit,
        Attrs::default(),
        true,
    )?;
    log::info!(
        "the running report goes to {} once the system is up ({RUNNING_UNIT})",
        report::redact::url(&t.url)
    );
    Ok(())
}

/// The running binary at [`ROOT_AGENT`] (0755).
fn put_agent(w: &Writer) -> Result<()> {
    let exe = std::fs::read("/proc/self/exe").context("reading the agent binary /proc/self/exe")?;
    w.put_file(ROOT_AGENT, Contents::Bytes(&exe), root_only(0o755), true)
}

/// The unit: sends the queue once the network is up, again every 30 s while it fails, then
/// removes itself, and the binary unless [`RUNNING_UNIT`] still needs it (the queue
/// directory is removed by `agent report drain`
/// once it is empty; `ConditionDirectoryNotEmpty` keeps the unit quiet after that).
pub fn unit_text() -> String {
    format!(
        "# Written by the agent's files stage: sends the provisioning reports that could not be
# sent from the initramfs, then removes itself.
[Unit]
Description=Send the agent's queued provisioning reports
Wants=network-online.target
After=network-online.target
ConditionDirectoryNotEmpty={ROOT_QUEUE}
StartLimitIntervalSec=0

[Service]
Type=oneshot
ExecStart={ROOT_AGENT} report drain --dir {ROOT_QUEUE}
ExecStartPost=/bin/sh -c 'test -e {RUNNING_STATE} || rm -f {ROOT_AGENT}'
ExecStartPost=/bin/rm -f /etc/systemd/system/{UNIT} /etc/systemd/system/multi-user.target.wants/{UNIT}
Restart=on-failure
RestartSec=30

[Install]
WantedBy=multi-user.target
"
    )
}

fn root_only(mode: u32) -> Attrs {
    Attrs {
        uid: Some(0),
        gid: Some(0),
        mode: Some(mode),
    }
}

/// Copies `<state-dir>/agent.log` to [`ROOT_LOG`] (0600), with the stage's `error` last
/// (secrets removed, as the logger removes them from every line).
pub fn keep_log(w: &Writer, ctx: &Context, error: Option<&anyhow::Error>) -> Result<()> {
    let src = ctx.state().log_path();
    let Ok(mut bytes) = std::fs::read(&src) else {
        return Ok(());
    };
    if let Some(e) = error {
        let line = report::redact::text(&format!("agent[files] error: {e:#}\n"));
        bytes.extend_from_slice(line.as_bytes());
    }
    w.put_dir("/var/log/agent", root_only(0o700), false)
        .and_then(|()| w.put_file(ROOT_LOG, Contents::Bytes(&bytes), root_only(0o600), true))
        .with_context(|| {
            format!(
                "copying the log {} to {ROOT_LOG} in the root",
                src.display()
            )
        })
}

/// Writes the queue in `dir` (what stayed queued after the stage's report), the running
/// binary and the unit into the root.
pub fn install(w: &Writer, dir: &std::path::Path) -> Result<()> {
    w.put_dir("/var/lib/agent", root_only(0o700), false)?;
    w.put_dir(ROOT_QUEUE, root_only(0o700), false)?;
    let mut n = 0;
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let p = e?.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        use report::queue::{self, MAX_CA_BYTES, MAX_REPORT_BYTES, MAX_SMALL_BYTES};
        let limit = match name {
            n if n.ends_with(".json") => MAX_REPORT_BYTES,
            "ca.pem" => MAX_CA_BYTES,
            _ => MAX_SMALL_BYTES,
        };
        // As `agent report drain` reads it: regular files within bounds only.
        let bytes = match queue::read_entry(&p, limit, "queue file") {
            Ok(b) => b,
            Err(e) => {
                log::warn!("not copying a queue file into the root: {e:#}");
                continue;
            }
        };
        w.put_file(
            &format!("{ROOT_QUEUE}/{name}"),
            Contents::Bytes(&bytes),
            root_only(0o600),
            true,
        )?;
        n += name.ends_with(".json") as usize;
    }
    put_agent(w)?;
    let unit = format!("/etc/systemd/system/{UNIT}");
    w.put_file(
        &unit,
        Contents::Bytes(unit_text().as_bytes()),
        root_only(0o644),
        true,
    )?;
    w.put_symlink(
        &format!("/etc/systemd/system/multi-user.target.wants/{UNIT}"),
        &unit,
        Attrs::default(),
        true,
    )?;
    log::info!(
        "{n} reports not sent yet: queued in the root's {ROOT_QUEUE}, sent by {UNIT} once the system is up"
    );
    Ok(())
}
