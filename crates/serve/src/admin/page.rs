//! The operators' web page (`/ui/` on the admin listener), made for triage: the fleet's
//! counts by state as one bar of links, the failures grouped by cause, the failed machines,
//! a rejected source generation, the pools and the generations their machines run, the
//! stage durations across the fleet; then the machines, failed first, searchable and paged;
//! and one machine's page with its boots as a timeline, its stages, error and log tail.
//! Rendered on the server as plain HTML with inline SVG and CSS (no script, no build
//! chain): cards on a phone, a dense table on a laptop, dark when the system is.
//!
//! - [`summary`] (`page_summary.rs`): what one pass over the inventory gathers, and the
//!   query (filters, search, page);
//! - `page_templates.rs`: the maud templates, which escape every value they interpolate.

#[path = "page_summary.rs"]
pub mod summary;
#[path = "page_templates.rs"]
mod templates;

use crate::generations::Roles;

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
    /// The pool's config name in the active and the lastKnownGood generation: a machine
    /// that reports it runs that generation's config.
    pub active_config: Option<String>,
    pub lkg_config: Option<String>,
}

/// A source generation the server rejected (what `/status` shows as `error`).
#[derive(Debug, Clone, Default)]
pub struct Rejected {
    pub generation: String,
    /// Its directory.
    pub path: String,
    /// The file the error names, when it names one (`pool NAME: FILE: …`).
    pub file: Option<String>,
    pub error: String,
    pub since: String,
    /// The generation served instead, if any.
    pub serving: Option<String>,
}

/// A pool's rollout that halted itself (what `/status` shows under `rollouts`).
#[derive(Debug, Clone, Default)]
pub struct HaltView {
    pub pool: String,
    pub stage: usize,
    /// The stage's step (`3 machines`, `25%`).
    pub step: String,
    pub reason: String,
    pub at: String,
    /// The machines that failed, each with its error.
    pub machines: Vec<(String, String)>,
}

/// The halted rollouts among `views`.
pub fn halts(views: &[crate::fleet::rollout::View], ts: impl Fn(u64) -> String) -> Vec<HaltView> {
    views
        .iter()
        .filter(|v| v.rollout.state == crate::fleet::inventory::RolloutState::Halted)
        .filter_map(|v| {
            let h = v.rollout.halt.as_ref()?;
            Some(HaltView {
                pool: v.rollout.pool.clone(),
                stage: h.stage,
                step: v.step.to_string(),
                reason: h.reason.clone(),
                at: ts(h.at),
                machines: h
                    .machines
                    .iter()
                    .map(|m| (m.id.clone(), m.error.clone()))
                    .collect(),
            })
        })
        .collect()
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
    pub fn failure(&self) -> Option<&StageView> {
        self.boots
            .first()
            .and_then(|b| b.stages.iter().find(|s| s.outcome == "failed"))
    }
}

/// Seconds between the page's own reloads, when asked for (`?refresh=1`): by default it
/// does not reload while it is read.
pub const REFRESH_SECONDS: u32 = 10;

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

/// The pools of the active generation with the source's generations, and the config each
/// pool has in the active and the lastKnownGood generation.
pub fn pools(t: &Roles) -> Vec<PoolView> {
    let generation = |g: Option<&str>| g.map_or_else(|| "—".to_string(), str::to_string);
    let assigned = generation(t.assigned.as_deref());
    let active = generation(t.active.as_deref());
    let lkg = generation(t.last_known_good.as_deref());
    let Some(g) = t.generation.as_ref() else {
        return Vec::new();
    };
    g.pools
        .values()
        .map(|p| PoolView {
            name: p.name.clone(),
            assigned: assigned.clone(),
            active: active.clone(),
            last_known_good: lkg.clone(),
            machines: 0,
            active_config: Some(p.config_name.clone()),
            lkg_config: t
                .lkg_generation
                .as_ref()
                .and_then(|l| l.pools.get(&p.name))
                .map(|l| l.config_name.clone()),
        })
        .collect()
}

/// The source generation the server rejected, while it is the newest one seen.
pub fn rejected(t: &Roles, ts: impl Fn(u64) -> String) -> Option<Rejected> {
    let error = t.error.clone()?;
    let assigned = t.assigned_ref.clone();
    // "pool NAME: FILE: …" names the file.
    let file = error
        .strip_prefix("pool ")
        .and_then(|r| r.split(": ").nth(1))
        .filter(|f| f.ends_with(".ign") || f.ends_with(".bu"))
        .map(str::to_string);
    Some(Rejected {
        generation: assigned
            .as_ref()
            .map_or("unreadable".into(), |a| a.generation.clone()),
        path: assigned
            .as_ref()
            .map(|a| a.path.clone())
            .unwrap_or_default(),
        file,
        since: assigned.map(|a| ts(a.since)).unwrap_or_default(),
        serving: t.generation.as_ref().map(|g| g.id.clone()),
        error,
    })
}

/// A time as the page writes it (the server's clock, UTC).
pub fn ts(secs: u64) -> String {
    let u = runtime::util::utc(secs);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        u.year, u.month, u.day, u.hour, u.minute, u.second
    )
}

/// What the overview shows, gathered by one [`summary::Scan`].
pub struct Index<'a> {
    pub pools: &'a [PoolView],
    pub rejected: Option<&'a Rejected>,
    /// Rollouts that halted themselves.
    pub halts: &'a [HaltView],
    pub summary: &'a summary::Summary,
    pub window: &'a summary::Window,
    /// The window's machines as the page shows them.
    pub rows: &'a [MachineView],
    pub query: &'a summary::Query,
    pub now: &'a str,
}

/// The overview page.
pub fn index(i: &Index) -> String {
    templates::index(i).into_string()
}

/// One machine: identity, its boots as a timeline, then each boot (newest first) with its
/// stages, error and log tail.
pub fn machine(m: &MachineView, now: &str, refresh: bool) -> String {
    templates::machine(m, now, refresh).into_string()
}

#[cfg(test)]
mod tests {
    use super::summary::{Query, Scan, cause, cause_key};
    use super::*;
    use crate::fleet::inventory::model::{Boot, StageRecord, Trust};
    use crate::fleet::inventory::{Machine, State};
    use report_format::{Outcome, Stage};

    /// Markup, CSS, `javascript:` URLs and SVG in every reported field.
    const HOSTILE: &str = "<script>alert(1)</script><img src=x onerror=alert(2)>\
        <svg onload=alert(3)><a href=\"javascript:alert(4)\">x</a>\"' onmouseover=\"alert(5)\" \
        </style><style>body{display:none}</style>javascript:alert(6)";

    fn stage(stage: Stage, outcome: Outcome, ms: u64, error: Option<&str>) -> StageRecord {
        StageRecord {
            stage,
            outcome,
            last: false,
            duration_ms: ms,
            report_id: format!("r-{ms}"),
            received: 0,
            authenticated: false,
            trust: Trust::None,
            counts: true,
            error: error.map(str::to_string),
            detail_bytes: 0,
            detail: None,
        }
    }

    fn machine_record(id: &str, seen: u64, error: Option<&str>) -> Machine {
        let mut m = Machine::new(id, seen);
        m.last_seen = seen;
        m.identity.hostname = Some(format!("host-{id}"));
        m.identity.macs = vec!["52:54:00:12:34:56".into()];
        m.identity.serial = Some(format!("SER-{id}"));
        m.pool = Some("worker".into());
        let mut stages = vec![stage(Stage::Fetch, Outcome::Ok, 800, None)];
        match error {
            Some(e) => {
                m.state = Some(State::Failed);
                stages.push(stage(Stage::Disks, Outcome::Failed, 2000, Some(e)));
            }
            None => {
                m.state = Some(State::Provisioned);
                stages.push(stage(Stage::Disks, Outcome::Ok, 1500, None));
                stages.push(stage(Stage::Files, Outcome::Ok, 300, None));
            }
        }
        m.boots = vec![Boot {
            boot_id: format!("boot-{id}"),
            first_seen: seen,
            last_seen: seen,
            stages,
            ..Boot::default()
        }];
        m
    }

    /// Every tag of `html` with its attributes, as a browser would read them: maud quotes
    /// every attribute value, and text never holds a `<` (it is escaped), so this is exact.
    fn tags(html: &str) -> Vec<(String, Vec<(String, String)>)> {
        let mut out = Vec::new();
        let mut rest = html;
        while let Some(i) = rest.find('<') {
            rest = &rest[i + 1..];
            let end = rest.find('>').expect("a tag ends");
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if tag.starts_with('!') || tag.starts_with('/') {
                continue;
            }
            let (name, mut attrs) = tag.split_once(' ').unwrap_or((tag, ""));
            let mut list = Vec::new();
            while !attrs.trim().is_empty() {
                attrs = attrs.trim_start();
                let (k, v) = match attrs.find(['=', ' ']) {
                    Some(j) if attrs.as_bytes()[j] == b'=' => {
                        let k = &attrs[..j];
                        assert_eq!(&attrs[j + 1..j + 2], "\"", "unquoted value in <{tag}>");
                        let close = attrs[j + 2..].find('"').expect("closed value") + j + 2;
                        let v = &attrs[j + 2..close];
                        attrs = &attrs[close + 1..];
                        (k, v)
                    }
                    Some(j) => {
                        let k = &attrs[..j];
                        attrs = &attrs[j..];
                        (k, "")
                    }
                    None => {
                        let k = attrs;
                        attrs = "";
                        (k, "")
                    }
                };
                list.push((k.to_string(), v.to_string()));
            }
            out.push((name.to_string(), list));
        }
        out
    }

    /// No element, attribute or URL came from the payload: only the page's own tags, no
    /// event handler, links only to the page's own paths.
    fn only_the_pages_markup(html: &str) {
        const OWN: &[&str] = &[
            "html", "head", "meta", "title", "style", "body", "main", "header", "h1", "h2", "p",
            "span", "strong", "a", "br", "code", "section", "div", "ul", "li", "table", "thead",
            "tbody", "tr", "th", "td", "svg", "rect", "form", "label", "input", "select", "option",
            "button", "nav", "pre",
        ];
        assert_eq!(html.matches("<style>").count(), 1, "one style sheet");
        for (name, attrs) in tags(html) {
            assert!(OWN.contains(&name.as_str()), "<{name}> in the page");
            for (k, v) in attrs {
                assert!(!k.starts_with("on"), "<{name} {k}=…>");
                if k == "href" || k == "action" {
                    assert!(v.starts_with("/ui/"), "<{name} {k}={v:?}>");
                }
                if k == "style" {
                    assert!(
                        v.starts_with("flex:") && !v.contains(['<', ';', '(']),
                        "style={v:?}"
                    );
                }
            }
        }
    }

    fn render(records: Vec<Machine>, query: &Query) -> String {
        let pools = vec![PoolView {
            name: "worker".into(),
            assigned: "g1".into(),
            active: "g1".into(),
            last_known_good: "g0".into(),
            active_config: Some("worker-abc".into()),
            ..Default::default()
        }];
        let mut scan = Scan::new(query, &pools, summary::ROWS);
        for m in records {
            scan.add(m);
        }
        let (summary, window) = scan.finish();
        let rows: Vec<MachineView> = window.machines.iter().map(crate::admin::view).collect();
        let rejected = Rejected {
            generation: HOSTILE.into(),
            path: HOSTILE.into(),
            file: Some(HOSTILE.into()),
            error: HOSTILE.into(),
            since: "t".into(),
            serving: Some(HOSTILE.into()),
        };
        let halts = [HaltView {
            pool: HOSTILE.into(),
            stage: 0,
            step: HOSTILE.into(),
            reason: HOSTILE.into(),
            at: HOSTILE.into(),
            machines: vec![(HOSTILE.into(), HOSTILE.into())],
        }];
        index(&Index {
            pools: &pools,
            rejected: Some(&rejected),
            halts: &halts,
            summary: &summary,
            window: &window,
            rows: &rows,
            query,
            now: "now",
        })
    }

    #[test]
    fn hostile_reports_render_as_text() {
        let mut m = machine_record("m-1", 100, Some(HOSTILE));
        m.identity.hostname = Some(HOSTILE.into());
        m.identity.serial = Some(HOSTILE.into());
        m.identity.platform = Some(HOSTILE.into());
        m.identity.macs = vec![HOSTILE.into()];
        m.pool = Some(HOSTILE.into());
        m.agent = Some(HOSTILE.into());
        let q = Query {
            q: Some(HOSTILE.into()),
            pool: Some(HOSTILE.into()),
            ..Default::default()
        };
        for query in [Query::default(), q] {
            let page = render(vec![m.clone(), machine_record("m-2", 50, None)], &query);
            only_the_pages_markup(&page);
            assert!(
                page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
                "{page}"
            );
        }
        // One machine's page: every field of the view, stage names and log lines too.
        let mut v = crate::admin::view(&m);
        for s in &mut v.boots[0].stages {
            s.stage = HOSTILE.into();
            s.outcome = HOSTILE.into();
            s.changes = vec![HOSTILE.into()];
            s.log_tail = vec![HOSTILE.into(), HOSTILE.into()];
        }
        v.id = HOSTILE.into();
        v.config = Some(HOSTILE.into());
        v.config_hash = Some(HOSTILE.into());
        v.machine_file = Some(HOSTILE.into());
        v.reprovision = Some(HOSTILE.into());
        v.first_seen = HOSTILE.into();
        let page = machine(&v, HOSTILE, false);
        only_the_pages_markup(&page);
        assert!(page.contains("alert(6)"), "{page}");
    }

    #[test]
    fn the_old_escaping_is_kept_for_the_known_fields() {
        let m = machine_record("m-1", 100, Some("mkfs.xfs \"/dev/vdb\" failed & <stopped>"));
        let page = render(vec![m.clone()], &Query::default());
        assert!(page.contains("mkfs.xfs &quot;/dev/vdb&quot; failed &amp; &lt;stopped&gt;"));
        assert!(
            page.contains("data-machine=\"m-1\" data-state=\"failed\""),
            "{page}"
        );
        let one = machine(&crate::admin::view(&m), "now", false);
        assert!(one.contains("data-error=\"disks\""), "{one}");
        assert!(!one.contains("http-equiv"), "no reload unless asked for");
        assert!(machine(&crate::admin::view(&m), "now", true).contains("http-equiv=\"refresh\""));
    }

    #[test]
    fn failures_group_by_cause_whatever_differs_per_machine() {
        let a = machine_record("m-1", 1, None);
        let b = machine_record("m-22", 1, None);
        let e = |m: &Machine, n: u64| {
            format!(
                "partition 2 does not fit on /dev/sda: needs {n} sectors, {} has {}; disk 4c4c4544-0042-3010-8052-b4c04f{n:06} at 10.0.{}.7:8080",
                m.identity.hostname.as_deref().unwrap(),
                n / 2,
                n % 250
            )
        };
        let (ca, cb) = (cause(&e(&a, 104857600), &a), cause(&e(&b, 2097152), &b));
        assert_eq!(ca, cb);
        assert!(
            ca.starts_with("partition 2 does not fit on /dev/sda: needs # sectors, … has #"),
            "{ca}"
        );
        assert_ne!(
            ca,
            cause(&e(&a, 104857600).replace("partition 2", "partition 3"), &a),
            "a partition number tells causes apart"
        );
        assert_eq!(cause_key("disks", &ca).len(), 12);
        assert_ne!(cause_key("disks", &ca), cause_key("files", &ca));
    }

    /// 250 machines, 8 failed in 3 ways: failed first, causes counted, pages of 100 that
    /// go forward and back, filters and the search that combine.
    #[test]
    fn one_pass_summarises_and_pages() {
        let errors = [
            "partition 2 does not fit on /dev/sda",
            "files: writing /etc/app.conf failed: permission denied",
            "fetch: GET http://10.0.0.1:8080/config: timed out",
        ];
        let mut all = Vec::new();
        for i in 0..250u64 {
            let err = (i % 31 == 0 && i < 248).then(|| errors[(i as usize / 31) % 3]);
            all.push(machine_record(&format!("m-{i:03}"), 1000 + i, err));
        }
        let run = |q: &Query| {
            let mut s = Scan::new(q, &[], summary::ROWS);
            for m in all.clone() {
                s.add(m);
            }
            s.finish()
        };
        let (sum, w) = run(&Query::default());
        assert_eq!(sum.total, 250);
        assert_eq!(sum.states[0], 8);
        assert_eq!(sum.causes.len(), 3);
        assert_eq!(sum.causes.iter().map(|c| c.count).sum::<usize>(), 8);
        assert_eq!(sum.failed.len(), 8);
        assert_eq!(w.matched, 250);
        assert_eq!(w.machines.len(), 100);
        assert!(
            w.machines[..8]
                .iter()
                .all(|m| m.state == Some(State::Failed))
        );
        assert!(
            w.machines[8..]
                .iter()
                .all(|m| m.state != Some(State::Failed))
        );
        assert_eq!(w.machines[8].id, "m-249", "then seen last first");
        assert!(w.prev.is_none());
        let next = w.next.clone().unwrap();
        let (_, w2) = run(&Query {
            after: Some(next),
            ..Default::default()
        });
        assert_eq!((w2.offset, w2.machines.len()), (100, 100));
        let (_, w3) = run(&Query {
            after: w2.next.clone(),
            ..Default::default()
        });
        assert_eq!((w3.offset, w3.machines.len()), (200, 50));
        assert!(w3.next.is_none());
        let (_, back) = run(&Query {
            before: w2.prev.clone(),
            ..Default::default()
        });
        assert_eq!(back.offset, 0);
        let ids = |w: &summary::Window| w.machines.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&back), ids(&w));
        assert!(back.prev.is_none() && back.next.is_some());
        // Filters combine; a cause's key finds its machines.
        let key = sum.causes[0].key.clone();
        let (_, by_cause) = run(&Query {
            cause: Some(key),
            state: Some(State::Failed),
            ..Default::default()
        });
        assert_eq!(by_cause.matched, sum.causes[0].count);
        let (_, none) = run(&Query {
            state: Some(State::Provisioned),
            pool: Some("infra".into()),
            ..Default::default()
        });
        assert_eq!(none.matched, 0);
        for q in [
            "HOST-M-007",
            "525400123456",
            "52-54-00-12-34-56",
            "ser-m-007",
        ] {
            let (_, f) = run(&Query {
                q: Some(q.into()),
                ..Default::default()
            });
            assert!(f.matched >= 1, "{q}");
        }
        let (_, one) = run(&Query {
            q: Some("host-m-007".into()),
            ..Default::default()
        });
        assert_eq!(ids(&one), ["m-007"]);
    }

    #[test]
    fn queries_are_decoded_and_bounded() {
        let q = Query::parse(|n| match n {
            "q" => Some("52%3A54+00"),
            "state" => Some("failed"),
            "pool" => Some(""),
            _ => None,
        })
        .unwrap();
        assert_eq!(q.q.as_deref(), Some("52:54 00"));
        assert_eq!(q.state, Some(State::Failed));
        assert_eq!(q.pool, None);
        assert_eq!(q.href(), "/ui/?state=failed&q=52%3A54%2000");
        let long = "x".repeat(summary::QUERY_BYTES + 1);
        let e = Query::parse(|n| (n == "q").then_some(long.as_str())).unwrap_err();
        assert!(e.contains("200 bytes"), "{e}");
        assert!(Query::parse(|n| (n == "cause").then_some("zz")).is_err());
        assert!(Query::parse(|n| (n == "after").then_some("x")).is_err());
        assert!(Query::parse(|n| (n == "state").then_some("bogus")).is_err());
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
