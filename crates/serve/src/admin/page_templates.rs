//! The page's templates (maud): every `(value)` they interpolate is escaped, text and
//! attribute alike; only the style sheet below is inserted as it is. Links carry reported
//! values only percent-encoded, after a fixed `/ui/` path, so no value can become a URL of
//! its own (`javascript:`) or markup.

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::summary::{Durations, Query, STATES};
use super::{Index, MachineView, REFRESH_SECONDS, path_segment};

const STYLE: &str = "\
:root{color-scheme:light dark;--fg:#1b1b1b;--bg:#fff;--mute:#595959;--line:#d4d4d4;--card:#f4f4f4;\
--bad:#b71c1c;--ok:#1b5e20;--run:#0d47a1;\
--s-failed:#c62828;--s-provisioning:#1565c0;--s-fetching:#64b5f6;--s-unassigned:#f9a825;--s-booted:#9e9e9e;--s-provisioned:#2e7d32;\
--s-installed:#81c784;--s-running:#1b5e20;--s-unresponsive:#6a1b9a}\
@media (prefers-color-scheme:dark){:root{--fg:#e6e6e6;--bg:#121212;--mute:#ababab;--line:#3c3c3c;--card:#1f1f1f;\
--bad:#ff8a80;--ok:#a5d6a7;--run:#90caf9}}\
*{box-sizing:border-box}\
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:96rem;padding:.4rem .75rem;color:var(--fg);background:var(--bg);overflow-wrap:anywhere}\
a{color:inherit}h1{font-size:1.25rem;margin:.2rem 0}h2{font-size:1.05rem;margin:.8rem 0 .3rem}\
header{display:flex;flex-wrap:wrap;gap:.2rem 1rem;align-items:baseline}\
.mute{color:var(--mute)}.error,.failed{color:var(--bad)}.error{font-weight:600}\
.provisioned{color:var(--ok)}.provisioning,.fetching{color:var(--run)}.state{font-weight:600}\
.bar{display:flex;height:1.1rem;border-radius:3px;overflow:hidden;background:var(--line);margin:.3rem 0}\
.bar a{display:block;min-width:4px}.bar.small{height:.6rem;min-width:5rem}\
.s-failed{background:var(--s-failed)}.s-provisioning{background:var(--s-provisioning)}.s-fetching{background:var(--s-fetching)}\
.s-unassigned{background:var(--s-unassigned)}.s-booted{background:var(--s-booted)}.s-provisioned{background:var(--s-provisioned)}\
.s-installed{background:var(--s-installed)}.s-running{background:var(--s-running)}.s-unresponsive{background:var(--s-unresponsive)}\
ul.legend,ul.causes{list-style:none;padding:0;margin:.2rem 0}\
ul.legend{display:flex;flex-wrap:wrap;gap:.2rem 1rem}\
.dot{display:inline-block;width:.7rem;height:.7rem;border-radius:2px;margin-right:.3rem;vertical-align:-1px}\
ul.causes li{padding:.15rem 0;border-bottom:1px solid var(--line)}\
.count{font-weight:700;font-variant-numeric:tabular-nums}.stage{font-family:ui-monospace,monospace}\
.banner{border:2px solid var(--bad);border-radius:4px;padding:.4rem .6rem;margin:.4rem 0}\
table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:.2rem .45rem;border-bottom:1px solid var(--line);vertical-align:top}\
th{font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
td.nowrap{white-space:nowrap}\
svg{display:block;width:100%}\
.box{fill:var(--s-provisioning)}.whisker{fill:var(--mute)}.median{fill:var(--fg)}.slow{fill:var(--s-failed)}\
.seg-ok{fill:var(--s-provisioned)}.seg-failed{fill:var(--s-failed)}.seg-started{fill:var(--s-fetching)}\
form.find{display:flex;flex-wrap:wrap;gap:.4rem;align-items:end;margin:.3rem 0}\
form.find label{display:flex;flex-direction:column;font-size:.85rem}\
input,select,button{font:inherit;color:inherit;background:var(--bg);border:1px solid var(--mute);border-radius:3px;padding:.15rem .3rem;max-width:100%}\
nav.pages{display:flex;flex-wrap:wrap;gap:1rem;margin:.3rem 0}\
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:var(--card);padding:.5rem;border-radius:4px;font-size:13px}\
@media (max-width:600px){\
table.cards thead{display:none}\
table.cards,table.cards tbody,table.cards tr,table.cards td,table.cards th{display:block;width:100%}\
table.cards tr{border:1px solid var(--line);border-radius:6px;margin:.4rem 0;padding:.25rem .5rem;background:var(--card)}\
table.cards td,table.cards th{border:0;padding:.1rem 0}\
table.cards td[data-label]::before{content:attr(data-label) \": \";color:var(--mute)}\
td.nowrap,td.num{white-space:normal;text-align:left}}";

fn page(title: &str, refresh: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width,initial-scale=1";
                @if refresh {
                    meta http-equiv="refresh" content=(REFRESH_SECONDS);
                }
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body { main { (body) } }
        }
    }
}

/// A duration as the page writes it.
pub fn duration(ms: u64) -> String {
    match ms {
        ms if ms < 10_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms if ms < 600_000 => format!("{} s", ms / 1000),
        ms => format!("{} min", ms / 60_000),
    }
}

fn machine_href(id: &str) -> String {
    format!("/ui/machines/{}", path_segment(id))
}

fn state_class(s: &str) -> &'static str {
    match s {
        "failed" => "s-failed",
        "provisioning" => "s-provisioning",
        "fetching" => "s-fetching",
        "unassigned" => "s-unassigned",
        "provisioned" => "s-provisioned",
        "installed" => "s-installed",
        "running" => "s-running",
        "unresponsive" => "s-unresponsive",
        _ => "s-booted",
    }
}

/// Counts by state as one bar of links (and a legend of the same links with the numbers).
fn state_bar(
    counts: &[usize; STATES.len()],
    link: impl Fn(&str) -> String,
    small: bool,
    what: &str,
) -> Markup {
    let total: usize = counts.iter().sum();
    html! {
        div.bar.small[small] {
            @for (i, s) in STATES.iter().enumerate() {
                @if counts[i] > 0 {
                    a class=(state_class(s)) style=(format!("flex:{} 0 0", counts[i]))
                        href=(link(s)) aria-label=(format!("{what}: {} {s}", counts[i]))
                        title=(format!("{} {s}", counts[i])) {}
                }
            }
        }
        @if !small {
            ul.legend #states aria-label="machines by state" {
                @for (i, s) in STATES.iter().enumerate() {
                    @if counts[i] > 0 {
                        li data-state=(s) {
                            a href=(link(s)) {
                                span class=(format!("dot {}", state_class(s))) {}
                                (s) " " span.count { (counts[i]) }
                            }
                        }
                    }
                }
                li.mute { (total) " in all" }
            }
        }
    }
}

/// A stage's durations: p5–p95 whisker, p25–p75 box, the median, slow outliers in red; on
/// a log scale from `lo` to `hi` (ms) shared by every stage.
fn duration_plot(stage: &str, d: &Durations, lo: u64, hi: u64) -> Markup {
    let (l, h) = ((lo.max(1) as f64).ln(), (hi.max(2) as f64).ln());
    let x = |ms: u64| -> f64 {
        let v = ((ms.max(1) as f64).ln() - l) / (h - l).max(1e-9) * 100.0;
        (v.clamp(0.0, 100.0) * 10.0).round() / 10.0
    };
    let (p5, p25, p50, p75, p95) = (
        d.percentile(5),
        d.percentile(25),
        d.percentile(50),
        d.percentile(75),
        d.percentile(95),
    );
    let label = format!(
        "{stage}: median {}, middle half {} to {}, {} slow outliers",
        duration(p50),
        duration(p25),
        duration(p75),
        d.outliers().count()
    );
    html! {
        svg viewBox="0 0 100 10" preserveAspectRatio="none" height="18" role="img" aria-label=(label) {
            rect.whisker x=(x(p5)) y="4.5" width=((x(p95) - x(p5)).max(0.3)) height="1" {}
            rect.box x=(x(p25)) y="2" width=((x(p75) - x(p25)).max(0.5)) height="6" {}
            rect.median x=(x(p50) - 0.3) y="1" width="0.6" height="8" {}
            @for (ms, _) in d.outliers() {
                rect.slow x=(x(*ms) - 0.4) y="0" width="0.8" height="10" {}
            }
        }
    }
}

/// The overview.
pub fn index(i: &Index) -> Markup {
    let q = i.query;
    let s = i.summary;
    let front = !q.narrowed() && q.after.is_none() && q.before.is_none();
    let title = if s.states[0] > 0 {
        format!("{} failed of {} machines", s.states[0], s.total)
    } else {
        format!("{} machines", s.total)
    };
    let body = html! {
        header {
            h1 { "Fleet" }
            span.mute {
                "updated " (i.now) " · "
                @if q.refresh {
                    a href=(q.link(|n| { n.after = q.after.clone(); n.before = q.before.clone(); n.refresh = false; })) { "stop reloading" }
                } @else {
                    a href=(q.link(|n| { n.after = q.after.clone(); n.before = q.before.clone(); n.refresh = true; })) { "reload every " (REFRESH_SECONDS) " s" }
                }
            }
        }
        @if let Some(r) = i.rejected {
            section.banner #rejected role="alert" {
                strong.error { "Source generation " (r.generation) " rejected" }
                " (" (r.since) "); "
                @match &r.serving {
                    Some(g) => { "still serving generation " (g) "." }
                    None => { "nothing is served." }
                }
                br;
                @if let Some(f) = &r.file { "File: " code { (f) } " · " }
                "Directory: " code { (r.path) }
                br;
                span.error { (r.error) }
            }
        }
        @for h in i.halts {
            section.banner.halted role="alert" data-pool=(h.pool) {
                strong.error { "Rollout of pool " (h.pool) " halted" }
                " at stage " (h.stage) " (" (h.step) "), " (h.at) ": "
                (h.reason) "; the next machines get the previous config."
                ul {
                    @for (id, error) in &h.machines {
                        li { a href=(machine_href(id)) { (id) } ": " span.error { (error) } }
                    }
                }
            }
        }
        section #summary aria-label="machines by state" {
            (state_bar(&s.states, |st| q.link(|n| n.state = st.parse().ok()), false, "machines"))
        }
        @if !s.causes.is_empty() {
            section #causes {
                h2 { "Failures by cause" }
                ul.causes {
                    @for c in &s.causes {
                        li data-cause=(c.key) {
                            a.count href=(Query { cause: Some(c.key.clone()), refresh: q.refresh, ..Query::default() }.href()) {
                                (c.count) " ×"
                            }
                            " " span.stage { (c.stage) } " "
                            span.error { (c.text) }
                            span.mute {
                                " — "
                                @for (n, (id, name)) in c.machines.iter().enumerate() {
                                    @if n > 0 { ", " }
                                    a href=(machine_href(id)) { (name) }
                                }
                                @if c.count > c.machines.len() { ", …" }
                            }
                        }
                    }
                    @if s.other_causes > 0 {
                        li.mute { (s.other_causes) " × other causes (" a href="/ui/?state=failed" { "all failed machines" } ")" }
                    }
                }
            }
        }
        @if front && !s.failed.is_empty() {
            section #failed {
                h2 {
                    "Failed machines "
                    span.mute { "(" a href=(q.link(|n| n.state = Some(crate::fleet::inventory::State::Failed))) { "all " (s.states[0]) } ")" }
                }
                table.cards {
                    thead { tr { th { "machine" } th { "pool" } th { "failed stage" } th { "error" } th { "last seen" } } }
                    tbody {
                        @for f in &s.failed {
                            tr data-failed=(f.id) {
                                td data-label="machine" { a href=(machine_href(&f.id)) { (f.name) } }
                                td data-label="pool" { (f.pool.as_deref().unwrap_or("—")) }
                                td.stage.error data-label="failed stage" { (f.stage) }
                                td.error data-label="error" { (f.error) }
                                td.nowrap data-label="last seen" { (super::ts(f.last_seen)) }
                            }
                        }
                    }
                }
            }
        }
        (pools(i))
        (durations(i))
        (machines(i))
    };
    page(&format!("Fleet: {title}"), q.refresh, body)
}

fn pools(i: &Index) -> Markup {
    let s = i.summary;
    let q = i.query;
    let generation = i.pools.first();
    html! {
        section #pools {
            h2 { "Pools" }
            @if let Some(g) = generation {
                p.mute #generations {
                    "Generations: assigned " code { (g.assigned) }
                    " · active " code { (g.active) }
                    " · lastKnownGood " code { (g.last_known_good) }
                }
            }
            table.cards {
                thead { tr { th { "pool" } th { "states" } th.num { "machines" } th.num { "on active" } th.num { "on lastKnownGood" } th.num { "on another config" } } }
                tbody {
                    @for (name, c) in &s.pools {
                        tr data-pool=(name.as_deref().unwrap_or("(other)")) {
                            td data-label="pool" {
                                @match name {
                                    Some(n) => { a href=(q.link(|x| x.pool = Some(n.clone()))) { (n) } }
                                    None => { span.mute { "other or no pool" } }
                                }
                            }
                            td data-label="states" {
                                @match name {
                                    Some(n) => { (state_bar(&c.states, |st| q.link(|x| { x.pool = Some(n.clone()); x.state = st.parse().ok(); }), true, &format!("pool {n}"))) }
                                    None => { (state_bar(&c.states, |st| q.link(|x| x.state = st.parse().ok()), true, "other pools")) }
                                }
                                span.mute {
                                    @for (k, st) in STATES.iter().enumerate() {
                                        @if c.states[k] > 0 { (c.states[k]) " " (st) " " }
                                    }
                                }
                            }
                            td.num data-label="machines" { (c.total()) }
                            td.num data-label="on active" { @if name.is_some() { (c.on_active) } @else { "—" } }
                            td.num data-label="on lastKnownGood" { @if name.is_some() { (c.on_lkg) } @else { "—" } }
                            td.num data-label="on another config" { (c.on_other) }
                        }
                    }
                }
            }
        }
    }
}

fn durations(i: &Index) -> Markup {
    let stages = &i.summary.stages;
    if stages.is_empty() {
        return html! {};
    }
    let lo = stages.values().map(|d| d.percentile(0)).min().unwrap_or(1);
    let hi = stages
        .values()
        .map(|d| d.percentile(100))
        .max()
        .unwrap_or(2);
    html! {
        section #durations {
            h2 { "Stage durations " span.mute { "(latest boot of each machine; box: middle half, line: median, red: " (super::summary::OUTLIER_FACTOR) "× the median or slower)" } }
            table.cards {
                thead { tr { th { "stage" } th { "distribution " span.mute { (duration(lo)) " to " (duration(hi)) ", log scale" } } th.num { "median" } th.num { "p95" } th { "slowest" } } }
                tbody {
                    @for (stage, d) in stages {
                        tr data-stage=(stage) {
                            th scope="row" data-label="stage" { span.stage { (stage) } " " span.mute { (d.ms.len()) } }
                            td data-label="distribution" { (duration_plot(stage, d, lo, hi)) }
                            td.num data-label="median" { (duration(d.percentile(50))) }
                            td.num data-label="p95" { (duration(d.percentile(95))) }
                            td data-label="slowest" {
                                @for (n, (ms, id)) in d.outliers().enumerate() {
                                    @if n > 0 { ", " }
                                    a.error data-slow=(id) href=(machine_href(id)) { (id) } " " (duration(*ms))
                                }
                                @if d.outliers().next().is_none() { span.mute { "no outlier" } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn machines(i: &Index) -> Markup {
    let q = i.query;
    let w = i.window;
    let pools: Vec<&str> = i
        .summary
        .pools
        .keys()
        .flatten()
        .map(String::as_str)
        .collect();
    html! {
        section #machines-list {
            h2 { "Machines" }
            form.find method="get" action="/ui/" role="search" {
                label { "Search (id, hostname, MAC, serial)" input type="search" name="q" value=[q.q.as_deref()]; }
                label { "State"
                    select name="state" {
                        option value="" { "any" }
                        @for st in STATES.iter() {
                            option value=(st) selected[q.state.is_some_and(|x| x.as_str() == *st)] { (st) }
                        }
                    }
                }
                label { "Pool"
                    select name="pool" {
                        option value="" { "any" }
                        @for p in &pools {
                            option value=(p) selected[q.pool.as_deref() == Some(*p)] { (p) }
                        }
                        @if let Some(p) = q.pool.as_deref().filter(|p| !pools.contains(p)) {
                            option value=(p) selected { (p) }
                        }
                    }
                }
                @if let Some(c) = &q.cause { input type="hidden" name="cause" value=(c); }
                @if q.refresh { input type="hidden" name="refresh" value="1"; }
                button type="submit" { "Find" }
                @if q.narrowed() { a href=(Query { refresh: q.refresh, ..Query::default() }.href()) { "clear" } }
            }
            p #shown .mute {
                @if w.matched == 0 {
                    "No machine matches."
                } @else {
                    "Machines " (w.offset + 1) "–" (w.offset + w.machines.len()) " of " (w.matched)
                    @if q.narrowed() { " matching (" (i.summary.total) " in all)" }
                    ", failed first, then seen last first."
                }
            }
            (paging(i))
            table.cards #machines {
                thead { tr { th { "machine" } th { "state" } th { "pool" } th { "config" } th { "last seen" } th { "latest boot" } } }
                tbody {
                    @for m in i.rows {
                        tr data-machine=(m.id) data-state=(m.state) {
                            td data-label="machine" {
                                a href=(machine_href(&m.id)) { (m.hostname.as_deref().unwrap_or(&m.id)) }
                                @if m.hostname.is_some() { br; span.mute { (m.id) } }
                                @if !m.authenticated { " " span.mute title="reports without a token" { "(unauthenticated)" } }
                            }
                            td.state data-label="state" class=(m.state) { (m.state) }
                            td data-label="pool" { (m.pool.as_deref().unwrap_or("—")) }
                            td data-label="config" { (m.config.as_deref().unwrap_or("—")) }
                            td.nowrap data-label="last seen" { (m.last_seen) }
                            td data-label="latest boot" {
                                @if let Some(f) = m.failure() {
                                    span.error data-failure=(m.id) { (f.stage) " failed: " (f.error.as_deref().unwrap_or("")) }
                                } @else if let Some(b) = m.boots.first() {
                                    @for (n, s) in b.stages.iter().enumerate() {
                                        @if n > 0 { " · " }
                                        span.stage { (s.stage) } " " (s.outcome) " " (s.duration_ms.map(duration).unwrap_or_default())
                                    }
                                }
                            }
                        }
                    }
                }
            }
            (paging(i))
        }
    }
}

fn paging(i: &Index) -> Markup {
    let q = i.query;
    let w = i.window;
    html! {
        @if w.prev.is_some() || w.next.is_some() {
            nav.pages aria-label="pages" {
                @if let Some(p) = &w.prev {
                    a rel="prev" href=(q.link(|n| n.before = Some(p.clone()))) { "← previous " (super::summary::ROWS) }
                }
                @if let Some(n) = &w.next {
                    a rel="next" href=(q.link(|x| x.after = Some(n.clone()))) { "next " (super::summary::ROWS) " →" }
                }
            }
        }
    }
}

/// A machine's boots as a timeline: one bar per boot, its stages in order, each as long as
/// it took (on the scale of the longest boot), coloured by outcome.
fn timeline(m: &MachineView) -> Markup {
    let total =
        |b: &super::BootView| -> u64 { b.stages.iter().map(|s| s.duration_ms.unwrap_or(0)).sum() };
    let longest = m.boots.iter().map(total).max().unwrap_or(0).max(1);
    html! {
        @if !m.boots.is_empty() {
            section #timeline {
                h2 { "Boots " span.mute { "(newest first; each bar as long as the boot took, scale: " (duration(longest)) ")" } }
                table.cards {
                    tbody {
                        @for b in &m.boots {
                            tr data-boot=(b.boot_id) {
                                th scope="row" data-label="boot" { (b.started) br; span.mute { (b.boot_id) } }
                                td data-label="stages" {
                                    @let label = b.stages.iter().map(|s| format!("{} {} {}", s.stage, s.outcome, s.duration_ms.map(duration).unwrap_or_default())).collect::<Vec<_>>().join(", ");
                                    svg viewBox="0 0 100 10" preserveAspectRatio="none" height="20" role="img" aria-label=(format!("boot {}: {label}", b.boot_id)) {
                                        @for (x, w, class) in segments(b, longest) {
                                            rect class=(class) x=(format!("{x:.2}")) y="0" width=(format!("{w:.2}")) height="10" {}
                                        }
                                    }
                                    span.mute {
                                        @for (n, s) in b.stages.iter().enumerate() {
                                            @if n > 0 { " · " }
                                            span.stage class=[(s.outcome == "failed").then_some("error")] { (s.stage) } " " (s.outcome) " " (s.duration_ms.map(duration).unwrap_or_default())
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Where each stage of a boot sits on its bar: (x, width, class), in 0–100.
fn segments(b: &super::BootView, longest: u64) -> Vec<(f64, f64, &'static str)> {
    let mut at = 0.0;
    b.stages
        .iter()
        .map(|s| {
            let w = s.duration_ms.unwrap_or(0) as f64 / longest as f64 * 100.0;
            let class = match s.outcome.as_str() {
                "ok" => "seg-ok",
                "failed" => "seg-failed",
                _ => "seg-started",
            };
            let seg = (at, (w - 0.4).max(0.4), class);
            at += w;
            seg
        })
        .collect()
}

/// One machine's page.
pub fn machine(m: &MachineView, now: &str, refresh: bool) -> Markup {
    let name = m.hostname.as_deref().unwrap_or(&m.id);
    let rows: Vec<(&str, Markup)> = vec![
        ("state", html! { span.state class=(m.state) { (m.state) } }),
        ("id", html! { (m.id) }),
        ("pool", html! { (m.pool.as_deref().unwrap_or("—")) }),
        ("config", html! { (m.config.as_deref().unwrap_or("—")) }),
        (
            "config hash",
            html! { (m.config_hash.as_deref().unwrap_or("—")) },
        ),
        ("platform", html! { (m.platform.as_deref().unwrap_or("—")) }),
        ("serial", html! { (m.serial.as_deref().unwrap_or("—")) }),
        ("MAC addresses", html! { (m.macs.join(", ")) }),
        ("agent", html! { (m.agent.as_deref().unwrap_or("—")) }),
        (
            "machine file",
            html! { (m.machine_file.as_deref().unwrap_or("—")) },
        ),
        (
            "network boot",
            html! {
                @match &m.reprovision {
                    Some(t) => { "reprovision asked for at " (t) ": installs at its next boot" }
                    None => { "installs once (then the local disk)" }
                }
            },
        ),
        ("first seen", html! { (m.first_seen) }),
        ("last seen", html! { (m.last_seen) }),
        (
            "reports",
            html! { @if m.authenticated { "authenticated (machine token)" } @else { "unauthenticated (no token)" } },
        ),
    ];
    let body = html! {
        header {
            a href="/ui/" { "← fleet" }
            span.mute { "updated " (now) }
        }
        h1 #machine data-state=(m.state) { (name) " " span.state class=(m.state) { (m.state) } }
        @if let Some(f) = m.failure() {
            p.error #failure { (f.stage) " failed: " (f.error.as_deref().unwrap_or("")) }
        }
        (timeline(m))
        h2 { "Identity" }
        table.cards #identity {
            tbody {
                @for (k, v) in rows {
                    tr { th scope="row" { (k) } td { (v) } }
                }
            }
        }
        @for (n, b) in m.boots.iter().enumerate() {
            h2 { @if n == 0 { "Latest boot" } @else { "Earlier boot" } " " span.mute { (b.started) " · " (b.boot_id) } }
            table.cards.boot {
                thead { tr { th { "stage" } th { "outcome" } th.num { "duration" } th { "changes" } } }
                tbody {
                    @for s in &b.stages {
                        tr data-stage=(s.stage) {
                            td.stage data-label="stage" { (s.stage) }
                            td.state data-label="outcome" class=(s.outcome) { (s.outcome) }
                            td.num data-label="duration" { (s.duration_ms.map(duration).unwrap_or_else(|| "—".into())) }
                            td data-label="changes" {
                                @for (k, c) in s.changes.iter().enumerate() {
                                    @if k > 0 { br; }
                                    (c)
                                }
                            }
                        }
                    }
                }
            }
            @for s in b.stages.iter().filter(|s| s.error.is_some()) {
                p.error data-error=(s.stage) { (s.stage) " failed: " (s.error.as_deref().unwrap_or_default()) }
                @if !s.log_tail.is_empty() {
                    pre.log { (s.log_tail.join("\n")) }
                }
            }
        }
    };
    page(&format!("{name}: {}", m.state), refresh, body)
}
