//! `agent network-generate` against systemd-network-generator (systemd 252) on generated
//! kernel command lines. `tests/network_diff/fixtures.jsonl.gz` holds systemd's answers,
//! recorded by `tests/network_diff/run.py --record` from the command lines of
//! `tests/network_diff/gen.py`: whether it accepted the command line, and the files it wrote.
//! Both must agree on accepting and, when both accept, on the files' meaning (interfaces
//! matched, DHCP, addresses and peers, routes, name servers, MTU, MAC, host name, UseDNS,
//! VLAN/bridge/bond membership, each device's kind, MTU and VLAN id, each rename), formatting
//! and order of sections aside. Our `[Bond]` settings are not compared (systemd drops the bond
//! options). Cases that differ on purpose are listed in `tests/network_diff/known.tsv` under a
//! category whose reason is given there; the test fails on any other difference and on a
//! listed case that now agrees. systemd is never needed here.
//! `NETWORK_DIFF_DUMP=FILE` writes every difference (listed or not) as JSON lines.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::Path;

use serde_json::Value;

/// A file's settings as comparable tokens: `Section.Key=value` for single settings, one
/// token per `[Address]`/`[Route]` section; values normalised (addresses canonical, MACs in
/// lower case); name servers in their order.
fn meaning(name: &str, text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut section = String::new();
    let mut group: Vec<String> = Vec::new();
    let mut dns: Vec<String> = Vec::new();
    let flush = |section: &str, group: &mut Vec<String>, out: &mut BTreeSet<String>| {
        if !group.is_empty() {
            group.sort();
            let mut t = format!("{section}{{{}}}", group.join(","));
            // Several identical addresses or routes stay distinct.
            while out.contains(&t) {
                t.push('+');
            }
            out.insert(t);
            group.clear();
        }
    };
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            flush(&section, &mut group, &mut out);
            section = s.to_string();
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        let v = norm(k, v);
        match section.as_str() {
            "Bond" => {}
            "Address" | "Route" => group.push(format!("{k}={v}")),
            "Network" if k == "DNS" => dns.push(v),
            _ => {
                let mut t = format!("{section}.{k}={v}");
                while out.contains(&t) {
                    t.push('+');
                }
                out.insert(t);
            }
        }
    }
    flush(&section, &mut group, &mut out);
    if !dns.is_empty() {
        out.insert(format!("Network.DNS=[{}]", dns.join(",")));
    }
    out.insert(format!("file={name}"));
    out
}

fn norm(key: &str, v: &str) -> String {
    if key.contains("MACAddress") {
        return v.to_ascii_lowercase();
    }
    let (a, p) = match v.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (v, None),
    };
    match a.parse::<IpAddr>() {
        Ok(ip) => match p {
            Some(p) => format!("{ip}/{p}"),
            None => ip.to_string(),
        },
        Err(_) => v.to_string(),
    }
}

fn all_meaning(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    files
        .iter()
        .map(|(n, t)| (n.clone(), meaning(n, t)))
        .collect()
}

/// Ours: refused (the error), or the files `agent network-generate` writes (none without
/// `ip=`).
fn ours(cmdline: &str) -> Result<BTreeMap<String, String>, String> {
    let plan = agent::network::parse(cmdline).map_err(|e| format!("{e:#}"))?;
    if !plan.has_ip {
        return Ok(BTreeMap::new());
    }
    Ok(agent::network::networkd::render(&plan)
        .into_iter()
        .collect())
}

#[test]
fn agrees_with_systemd_network_generator() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/network_diff");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(dir.join("fixtures.jsonl.gz")).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let known_text = std::fs::read_to_string(dir.join("known.tsv")).unwrap();
    let mut reasons: BTreeMap<String, String> = BTreeMap::new();
    let mut known: BTreeMap<u64, String> = BTreeMap::new();
    for l in known_text.lines() {
        if let Some(c) = l.strip_prefix("#= ") {
            let (cat, why) = c.split_once('\t').expect("#= category<TAB>reason");
            reasons.insert(cat.to_string(), why.to_string());
        } else if !l.starts_with('#') && !l.is_empty() {
            let (id, cat) = l.split_once('\t').expect("id<TAB>category");
            assert!(
                reasons.contains_key(cat),
                "known.tsv: category {cat} has no reason"
            );
            known.insert(id.parse().unwrap(), cat.to_string());
        }
    }
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let mut dump = std::env::var_os("NETWORK_DIFF_DUMP").map(|p| std::fs::File::create(p).unwrap());
    let (mut total, mut agree, mut accepted_both) = (0, 0, 0);
    let mut unexpected = Vec::new();
    let mut now_agree = Vec::new();
    let mut by_cat: BTreeMap<String, usize> = BTreeMap::new();
    for line in lines {
        let case: Value = serde_json::from_str(line).unwrap();
        let id = case["id"].as_u64().unwrap();
        let cmdline = case["cmdline"].as_str().unwrap();
        let theirs: Option<BTreeMap<String, String>> = (case["rc"] == 0).then(|| {
            case["files"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect()
        });
        let mine = ours(cmdline);
        total += 1;
        let why = match (&mine, &theirs) {
            (Err(_), None) => None,
            (Ok(_), None) => Some("we accept, systemd refuses".to_string()),
            (Err(_), Some(_)) => Some("we refuse, systemd accepts".to_string()),
            (Ok(m), Some(t)) => {
                accepted_both += 1;
                let (m, t) = (all_meaning(m), all_meaning(t));
                (m != t).then(|| {
                    let names: BTreeSet<&String> = m.keys().chain(t.keys()).collect();
                    let mut d = Vec::new();
                    for n in names {
                        let empty = BTreeSet::new();
                        let (a, b) = (m.get(n).unwrap_or(&empty), t.get(n).unwrap_or(&empty));
                        for x in a.difference(b) {
                            d.push(format!("+{x}"));
                        }
                        for x in b.difference(a) {
                            d.push(format!("-{x}"));
                        }
                    }
                    format!("files differ: {}", d.join(" "))
                })
            }
        };
        match (&why, known.get(&id)) {
            (None, None) => agree += 1,
            (None, Some(_)) => {
                agree += 1;
                now_agree.push(id);
            }
            (Some(w), None) => {
                unexpected.push(format!("{id}: {cmdline}\n    {w}\n    ours: {mine:?}"))
            }
            (Some(_), Some(c)) => *by_cat.entry(c.clone()).or_default() += 1,
        }
        if let (Some(w), Some(f)) = (&why, dump.as_mut()) {
            let row = serde_json::json!({"id": id, "cmdline": cmdline, "why": w,
                "ours": mine.as_ref().map_err(|e| e.clone()), "theirs": case["files"], "stderr": case["stderr"]});
            writeln!(f, "{row}").unwrap();
        }
    }
    eprintln!(
        "{agree} of {total} command lines agree with {} ({} accepted by both); deliberate differences: {by_cat:?}",
        header["version"], accepted_both
    );
    assert!(total >= 3000, "the fixture has {total} cases");
    assert!(
        unexpected.is_empty(),
        "{} differences not in known.tsv:\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
    assert!(
        now_agree.is_empty(),
        "listed in known.tsv but agree now: {now_agree:?}"
    );
}
