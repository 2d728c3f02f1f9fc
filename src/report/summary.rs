//! The short summary of a failed stage on the console (stderr, and /dev/kmsg when the logger
//! writes there): at most [`MAX_LINES`] lines saying which stage failed, what it was doing
//! (the devices, paths and URLs, queries removed, the error names), why, what to check, and
//! where the full log is.

use std::io::Write;
use std::path::Path;

use super::redact;

/// Lines of a summary at most.
pub const MAX_LINES: usize = 20;
/// Characters of a line at most.
const LINE: usize = 200;

/// The summary of `stage` failing with `e` (secrets removed); `log` is the full log's path,
/// `report` says what became of the failure's report.
pub fn lines(stage: &str, e: &anyhow::Error, log: &Path, report: &str) -> Vec<String> {
    let chain: Vec<String> = e
        .chain()
        .map(|c| redact::text(c.to_string().lines().next().unwrap_or("")))
        .collect();
    let mut out = vec![format!("agent: the {stage} stage FAILED")];
    let objects = objects(&chain);
    if !objects.is_empty() {
        out.push(format!("  on:    {}", objects.join(", ")));
    }
    // One message: it says why; several: the outermost says what the stage was doing.
    if chain.len() > 1 {
        out.push(format!("  doing: {}", chain[0]));
    }
    // The middle of the chain, as much as fits, then the root cause.
    let room = MAX_LINES.saturating_sub(out.len() + 4 + check(stage).len());
    if chain.len() > 2 {
        for c in chain[1..chain.len() - 1].iter().take(room) {
            out.push(format!("         {c}"));
        }
    }
    if let Some(why) = chain.last() {
        out.push(format!("  why:   {why}"));
    }
    for (i, c) in check(stage).iter().enumerate() {
        out.push(format!(
            "  {} {c}",
            if i == 0 { "check:" } else { "      " }
        ));
    }
    out.push(format!("  log:   {} (the full log)", log.display()));
    out.push(format!("  report: {report}"));
    out.truncate(MAX_LINES);
    for l in &mut out {
        if l.len() > LINE {
            l.truncate(l.floor_char_boundary(LINE - 1));
            l.push('…');
        }
    }
    out
}

/// The devices, paths and URLs the error chain names, once each, in order.
fn objects(chain: &[String]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for c in chain {
        for w in c.split_whitespace() {
            let w = w.trim_matches(|c: char| "\"'`()[]{},;:".contains(c));
            let w = w.trim_end_matches('.');
            if (w.starts_with('/') && w.len() > 1) || w.contains("://") {
                let w = redact::url(w);
                if !v.contains(&w) && v.len() < 6 {
                    v.push(w);
                }
            }
        }
    }
    v
}

/// What to check after a failure of `stage`.
fn check(stage: &str) -> &'static [&'static str] {
    match stage {
        "fetch" => &[
            "the config URL (agent.config.url=, ignition.config.url=) and that its server",
            "answers from this machine (network, DNS, proxy, CA); the config (agent validate)",
        ],
        "disks" => &[
            "that the devices the config names exist (lsblk), are not in use (mounted, swap,",
            "RAID/LVM holders) and that the partitions fit; agent plan prints the plan",
        ],
        "files" => &[
            "the config's paths (a parent that is a file, a link out of the root), the",
            "filesystems' mount paths, the users and groups named as owners, remote contents",
        ],
        _ => &["the log below"],
    }
}

/// Prints `lines` on stderr, and on /dev/kmsg when `kmsg` (as errors).
pub fn print(lines: &[String], kmsg: bool) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let _ = std::io::stderr().write_all(text.as_bytes());
    if kmsg && let Ok(mut f) = std::fs::OpenOptions::new().write(true).open("/dev/kmsg") {
        for l in lines {
            let _ = f.write_all(format!("<3>{l}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_short_and_names_the_objects() {
        let mut e = anyhow::anyhow!("No such file or directory (os error 2)");
        for i in 0..40 {
            e = e.context(format!("step {i}"));
        }
        let e = e.context("fetching https://h/c.ign?token=x for /etc/app.conf");
        let l = lines("files", &e, Path::new("/run/agent/agent.log"), "queued");
        assert!(l.len() <= MAX_LINES, "{l:#?}");
        let all = l.join("\n");
        assert!(all.contains("files stage FAILED"), "{all}");
        assert!(
            all.contains("https://h/c.ign?…") && all.contains("/etc/app.conf"),
            "{all}"
        );
        assert!(!all.contains("token=x"), "{all}");
        assert!(all.contains("why:   No such file"), "{all}");
        assert!(all.contains("/run/agent/agent.log"), "{all}");
    }
}
