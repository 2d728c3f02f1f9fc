//! The operators' web page (`/ui/` on the admin listener): the pools with their generations,
//! a table of machines, and one machine's page with its boots, stages and failure. Rendered
//! on the server as plain HTML with a little CSS (no script, no build chain), refreshing
//! itself; readable on a laptop and a phone. Every value is escaped where it lands.

use std::fmt::Write;

/// A pool as the page shows it.
#[derive(Debug, Clone, Default)]
pub struct PoolView {
    pub name: String,
    /// Generation ids (or "—").
    pub assigned: String,
    pub active: String,
    pub last_known_good: String,
    /// Machines in the inventory for this pool.
    pub machines: usize,
}

/// One stage of one boot.
#[derive(Debug, Clone, Default)]
pub struct StageView {
    pub stage: String,
    pub outcome: String,
    pub duration_ms: Option<u64>,
    /// What it changed, one line each (partitions, filesystems, paths).
    pub changes: Vec<String>,
    pub error: Option<String>,
    pub log_tail: Vec<String>,
}

/// One boot of a machine.
#[derive(Debug, Clone, Default)]
pub struct BootView {
    pub boot_id: String,
    pub started: String,
    pub stages: Vec<StageView>,
}

/// A machine as the page shows it.
#[derive(Debug, Clone, Default)]
pub struct MachineView {
    pub id: String,
    pub hostname: Option<String>,
    pub state: String,
    pub pool: Option<String>,
    pub config: Option<String>,
    pub config_hash: Option<String>,
    pub first_seen: String,
    pub last_seen: String,
    pub authenticated: bool,
    pub platform: Option<String>,
    pub serial: Option<String>,
    pub macs: Vec<String>,
    pub agent: Option<String>,
    /// Network boot: the machine file that selected it, and a reprovision asked for (when).
    pub machine_file: Option<String>,
    pub reprovision: Option<String>,
    /// Newest first.
    pub boots: Vec<BootView>,
}

impl MachineView {
    /// The latest boot's failed stage, if any.
    fn failure(&self) -> Option<&StageView> {
        self.boots
            .first()
            .and_then(|b| b.stages.iter().find(|s| s.outcome == "failed"))
    }
}

/// Seconds between the page's own reloads.
pub const REFRESH_SECONDS: u32 = 10;

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A machine id in a URL path segment: percent-encoded outside [A-Za-z0-9._~-].
pub fn path_segment(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-') {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

const STYLE: &str = "\
:root{color-scheme:light dark;--bad:#c62828;--ok:#2e7d32;--run:#1565c0;--mute:#777}\
body{font:15px/1.4 system-ui,sans-serif;margin:0 auto;max-width:72rem;padding:.75rem}\
h1{font-size:1.3rem;margin:.2rem 0 .8rem}h2{font-size:1.1rem;margin:1.2rem 0 .4rem}\
.wrap{overflow-x:auto}table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #8884;vertical-align:top}\
th{font-weight:600;white-space:nowrap}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.state{font-weight:600;white-space:nowrap}.failed{color:var(--bad)}.provisioned{color:var(--ok)}\
.provisioning,.fetching{color:var(--run)}.mute{color:var(--mute)}\
pre{white-space:pre-wrap;word-break:break-word;background:#8881;padding:.5rem;border-radius:4px;font-size:13px}\
.error{color:var(--bad);font-weight:600}a{color:inherit}\
@media (max-width:40rem){th.wide,td.wide{display:none}body{font-size:14px}}";

fn head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>{}</title><style>{STYLE}</style></head><body>",
        esc(title)
    );
}

fn opt(s: &Option<String>) -> String {
    s.as_deref().map_or_else(|| "—".to_string(), esc)
}

fn duration(ms: Option<u64>) -> String {
    match ms {
        None => "—".into(),
        Some(ms) if ms < 10_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => format!("{} s", ms / 1000),
    }
}

/// The overview: pools, then machines (newest seen first, as given): `total` machines, of
/// which those given are shown.
pub fn index(pools: &[PoolView], machines: &[MachineView], total: usize, now: &str) -> String {
    let mut o = String::new();
    head(&mut o, "agent serve: machines");
    let shown = if total > machines.len() {
        format!(
            " (the {} seen last shown; <code>?pool=</code>, <code>?state=</code> narrow it)",
            machines.len()
        )
    } else {
        String::new()
    };
    let _ = write!(
        o,
        "<h1>Machines</h1><p class=\"mute\">{total} machines{shown} · updated {} · reloads every {REFRESH_SECONDS} s</p>",
        esc(now)
    );
    o.push_str(
        "<h2>Pools</h2><div class=\"wrap\"><table id=\"pools\"><thead><tr><th>pool</th>\
         <th>assigned</th><th>active</th><th class=\"wide\">lastKnownGood</th>\
         <th>machines</th></tr></thead><tbody>",
    );
    for p in pools {
        let _ = write!(
            o,
            "<tr data-pool=\"{n}\"><td>{n}</td><td>{}</td><td>{}</td><td class=\"wide\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&p.assigned),
            esc(&p.active),
            esc(&p.last_known_good),
            p.machines,
            n = esc(&p.name),
        );
    }
    o.push_str("</tbody></table></div>");
    o.push_str(
        "<h2>Machines</h2><div class=\"wrap\"><table id=\"machines\"><thead><tr><th>machine</th>\
         <th>state</th><th>pool</th><th class=\"wide\">config</th><th>last seen</th>\
         <th class=\"wide\">stages</th></tr></thead><tbody>",
    );
    for m in machines {
        let name = m.hostname.clone().unwrap_or_else(|| m.id.clone());
        let stages: Vec<String> = m
            .boots
            .first()
            .map(|b| {
                b.stages
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {} {}",
                            esc(&s.stage),
                            esc(&s.outcome),
                            duration(s.duration_ms)
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let _ = write!(
            o,
            "<tr data-machine=\"{id}\" data-state=\"{st}\"><td><a href=\"/ui/machines/{href}\">{name}</a>{auth}</td>\
             <td class=\"state {st}\">{st}</td><td>{pool}</td><td class=\"wide\">{config}</td>\
             <td>{seen}</td><td class=\"wide\">{stages}</td></tr>",
            id = esc(&m.id),
            href = esc(&path_segment(&m.id)),
            name = esc(&name),
            auth = if m.authenticated {
                ""
            } else {
                " <span class=\"mute\" title=\"reports without a token\">(unauthenticated)</span>"
            },
            st = esc(&m.state),
            pool = opt(&m.pool),
            config = opt(&m.config),
            seen = esc(&m.last_seen),
            stages = stages.join("<br>"),
        );
        if let Some(f) = m.failure()
            && let Some(e) = &f.error
        {
            let _ = write!(
                o,
                "<tr class=\"failure\" data-failure=\"{id}\"><td colspan=\"6\" class=\"error\">{} failed: {}</td></tr>",
                esc(&f.stage),
                esc(e),
                id = esc(&m.id),
            );
        }
    }
    o.push_str("</tbody></table></div></body></html>");
    o
}

/// One machine: identity, then each boot (newest first) with its stages.
pub fn machine(m: &MachineView, now: &str) -> String {
    let mut o = String::new();
    let name = m.hostname.clone().unwrap_or_else(|| m.id.clone());
    head(&mut o, &format!("{name}: {}", m.state));
    let _ = write!(
        o,
        "<p><a href=\"/ui/\">← machines</a></p><h1 id=\"machine\" data-state=\"{st}\">{}</h1>\
         <p class=\"mute\">updated {}</p><div class=\"wrap\"><table id=\"identity\"><tbody>",
        esc(&name),
        esc(now),
        st = esc(&m.state),
    );
    let rows: [(&str, String); 14] = [
        (
            "state",
            format!("<span class=\"state {0}\">{0}</span>", esc(&m.state)),
        ),
        ("id", esc(&m.id)),
        ("pool", opt(&m.pool)),
        ("config", opt(&m.config)),
        ("config hash", opt(&m.config_hash)),
        ("platform", opt(&m.platform)),
        ("serial", opt(&m.serial)),
        ("MAC addresses", esc(&m.macs.join(", "))),
        ("agent", opt(&m.agent)),
        ("machine file", opt(&m.machine_file)),
        (
            "network boot",
            m.reprovision.as_ref().map_or_else(
                || "installs once (then the local disk)".into(),
                |t| {
                    format!(
                        "reprovision asked for at {}: installs at its next boot",
                        esc(t)
                    )
                },
            ),
        ),
        ("first seen", esc(&m.first_seen)),
        ("last seen", esc(&m.last_seen)),
        (
            "reports",
            if m.authenticated {
                "authenticated (machine token)".into()
            } else {
                "unauthenticated (no token)".into()
            },
        ),
    ];
    for (k, v) in rows {
        let _ = write!(o, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    o.push_str("</tbody></table></div>");
    for (i, b) in m.boots.iter().enumerate() {
        let _ = write!(
            o,
            "<h2>{} boot <span class=\"mute\">{} · {}</span></h2><div class=\"wrap\"><table class=\"boot\"><thead><tr><th>stage</th><th>outcome</th><th>duration</th><th>changes</th></tr></thead><tbody>",
            if i == 0 { "Latest" } else { "Earlier" },
            esc(&b.started),
            esc(&b.boot_id),
        );
        for s in &b.stages {
            let _ = write!(
                o,
                "<tr data-stage=\"{st}\"><td>{st}</td><td class=\"state {oc}\">{oc}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                duration(s.duration_ms),
                s.changes
                    .iter()
                    .map(|c| esc(c))
                    .collect::<Vec<_>>()
                    .join("<br>"),
                st = esc(&s.stage),
                oc = esc(&s.outcome),
            );
        }
        o.push_str("</tbody></table></div>");
        for s in b.stages.iter().filter(|s| s.error.is_some()) {
            let _ = write!(
                o,
                "<p class=\"error\" data-error=\"{st}\">{st} failed: {}</p>",
                esc(s.error.as_deref().unwrap_or_default()),
                st = esc(&s.stage),
            );
            if !s.log_tail.is_empty() {
                let _ = write!(
                    o,
                    "<pre class=\"log\">{}</pre>",
                    s.log_tail
                        .iter()
                        .map(|l| esc(l))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
        }
    }
    o.push_str("</body></html>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> MachineView {
        MachineView {
            id: "4c4c4544-0001".into(),
            hostname: Some("<b>node</b>".into()),
            state: "failed".into(),
            pool: Some("worker".into()),
            boots: vec![BootView {
                boot_id: "b1".into(),
                started: "2026-11-27T05:00:00Z".into(),
                stages: vec![StageView {
                    stage: "disks".into(),
                    outcome: "failed".into(),
                    duration_ms: Some(1234),
                    error: Some("mkfs.xfs \"/dev/vdb\" failed & <stopped>".into()),
                    log_tail: vec!["line <1>".into()],
                    ..Default::default()
                }],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn values_are_escaped_where_they_land() {
        let m = failed();
        let page = index(&[], std::slice::from_ref(&m), 1, "now");
        assert!(page.contains("&lt;b&gt;node&lt;/b&gt;"));
        assert!(page.contains("1 machines ·"), "{page}");
        // More machines than rows: the page says how many are shown.
        let page = index(&[], std::slice::from_ref(&m), 600, "now");
        assert!(
            page.contains("600 machines (the 1 seen last shown;"),
            "{page}"
        );
        assert!(!page.contains("<b>node"));
        assert!(page.contains("mkfs.xfs &quot;/dev/vdb&quot; failed &amp; &lt;stopped&gt;"));
        let one = machine(&m, "now");
        assert!(one.contains("line &lt;1&gt;"));
        assert!(one.contains("data-error=\"disks\""));
    }

    #[test]
    fn machine_ids_are_path_segments() {
        assert_eq!(
            path_segment("mac-52:54:00:12:34:56"),
            "mac-52%3A54%3A00%3A12%3A34%3A56"
        );
        assert_eq!(path_segment("a/../b"), "a%2F..%2Fb");
    }
}
