//! Spec version negotiation from the `Accept` header (docs/serve.md, "Endpoints").
//!
//! Entries are sorted by q-value (stable, so equal q keeps header order; q=0 entries are
//! dropped). The first `application/vnd.coreos.ignition+json` entry carrying a `version`
//! parameter decides:
//! - `3.x.y` with a supported minor → that minor; a newer 3.x minor → the newest we support;
//! - `2.x` → `Negotiated::Spec2` (2.2.0 for 2.2 and later in OpenShift mode, else 400);
//! - any other major → `Negotiated::BadMajor` (the server answers 400);
//! - a version that is not `N.N.N`/`N.N`/`N` is not usable and the entry is skipped.
//!
//! With no usable entry the server picks its documented default: the oldest spec version that
//! can express the config (every 3.x Ignition newer than that can read it too).

use spec::config::version::NEWEST_MINOR;

const IGNITION_TYPE: &str = "application/vnd.coreos.ignition+json";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiated {
    /// A 3.x minor (already capped at the newest supported).
    Minor(u8),
    /// No usable Ignition entry: the server's default applies.
    Default,
    /// The client asked for a major version other than 2 and 3.
    BadMajor(u64),
    /// The client asked for spec 2.x (this minor): served as 2.2.0 in OpenShift mode.
    Spec2(u64),
}

/// Parses an `Accept` header value (or its absence).
pub fn negotiate(accept: Option<&str>) -> Negotiated {
    let Some(accept) = accept else {
        return Negotiated::Default;
    };
    let mut entries: Vec<(u16, Option<&str>)> = Vec::new();
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim();
        if !media.eq_ignore_ascii_case(IGNITION_TYPE) {
            continue;
        }
        let mut q = 1000u16;
        let mut version = None;
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let k = k.trim();
            let v = v.trim().trim_matches('"');
            if k.eq_ignore_ascii_case("q") {
                q = parse_q(v).unwrap_or(0);
            } else if k.eq_ignore_ascii_case("version") {
                version = Some(v);
            }
        }
        if q > 0 {
            entries.push((q, version));
        }
    }
    entries.sort_by_key(|e| std::cmp::Reverse(e.0));
    for (_, v) in entries {
        let Some(v) = v else { continue };
        let Some((major, minor)) = parse_version(v) else {
            continue;
        };
        if major == 2 {
            return Negotiated::Spec2(minor);
        }
        if major != 3 {
            return Negotiated::BadMajor(major);
        }
        return Negotiated::Minor(minor.min(NEWEST_MINOR as u64) as u8);
    }
    Negotiated::Default
}

/// q-value in thousandths; None when malformed.
fn parse_q(v: &str) -> Option<u16> {
    if v.is_empty() || v.len() > 5 {
        return None;
    }
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let int: u16 = match int {
        "0" => 0,
        "1" => 1,
        _ => return None,
    };
    let mut f: u16 = 0;
    for (i, b) in frac.bytes().enumerate() {
        f += (b - b'0') as u16 * [100, 10, 1][i];
    }
    let q = int * 1000 + f;
    (q <= 1000).then_some(q)
}

/// `MAJOR[.MINOR[.PATCH]]` with plain decimal numbers.
fn parse_version(v: &str) -> Option<(u64, u64)> {
    let parts: Vec<&str> = v.split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let mut nums = [0u64; 3];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || p.len() > 9 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        nums[i] = p.parse().ok()?;
    }
    Some((nums[0], nums[1]))
}

#[cfg(test)]
mod tests {
    use super::Negotiated::*;
    use super::*;

    #[test]
    fn table() {
        let t = "application/vnd.coreos.ignition+json";
        let cases: Vec<(Option<String>, Negotiated)> = vec![
            (None, Default),
            (Some("".into()), Default),
            (Some("*/*".into()), Default),
            (Some("application/json".into()), Default),
            (Some(t.to_string()), Default),
            (Some(format!("{t};version=3.0.0")), Minor(0)),
            (Some(format!("{t}; version=3.4.0")), Minor(4)),
            (Some(format!("{t};version=3.6.0")), Minor(6)),
            (Some(format!("{t};version=3.2")), Minor(2)),
            (Some(format!("{t};version=\"3.3.0\"")), Minor(3)),
            (Some(format!("{t};version=3.9.0")), Minor(6)),
            (Some(format!("{t};version=3.99999.0")), Minor(6)),
            (Some(format!("{t};version=2.2.0")), Spec2(2)),
            (Some(format!("{t};version=2.4.0")), Spec2(4)),
            (Some(format!("{t};version=2.1.0")), Spec2(1)),
            (Some(format!("{t};version=4.0.0")), BadMajor(4)),
            (Some(format!("{t};version=abc")), Default),
            (Some(format!("{t};version=3.x.0")), Default),
            (Some(format!("{t};version=")), Default),
            (Some(format!("{t};version=3.1.0.0")), Default),
            // q-values sorted, first Ignition entry with a version wins.
            (
                Some(format!("{t};version=2.2.0;q=0.1, {t};version=3.1.0;q=0.9")),
                Minor(1),
            ),
            (
                Some(format!("{t};version=3.1.0;q=0.5, {t};version=3.3.0")),
                Minor(3),
            ),
            (
                Some(format!("{t};version=3.1.0, {t};version=3.3.0")),
                Minor(1),
            ),
            (
                Some(format!("{t};version=3.2.0;q=0, {t};version=3.0.0;q=0.2")),
                Minor(0),
            ),
            (
                Some(format!("{t};q=1, {t};version=3.5.0;q=0.3, */*;q=0.1")),
                Minor(5),
            ),
            (
                Some(format!(
                    "{t};version=3.1.0;q=bogus, {t};version=3.2.0;q=0.5"
                )),
                Minor(2),
            ),
            (
                Some(format!("application/json;version=3.1.0, {t};version=3.4.0")),
                Minor(4),
            ),
            (
                Some("APPLICATION/VND.COREOS.IGNITION+JSON;VERSION=3.2.0".to_string()),
                Minor(2),
            ),
            (Some(";;;,,,;=;=,".into()), Default),
            (Some("\u{7f}\u{1}garbage".into()), Default),
        ];
        for (h, want) in cases {
            assert_eq!(negotiate(h.as_deref()), want, "Accept: {h:?}");
        }
    }

    #[test]
    fn q_values() {
        assert_eq!(parse_q("1"), Some(1000));
        assert_eq!(parse_q("1.000"), Some(1000));
        assert_eq!(parse_q("0.25"), Some(250));
        assert_eq!(parse_q("1.5"), None);
        assert_eq!(parse_q("2"), None);
        assert_eq!(parse_q("0.1234"), None);
    }
}
