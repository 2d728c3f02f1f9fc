//! A pool's rollout policy (docs/serve.md, "Rollouts"): `pools/<pool>/rollout.json` beside a
//! pool directory's fragments, or `pools/<pool>.rollout.json` beside a one-file pool. Read
//! with the generation (its bytes count in the id). A pool without one has none: a new
//! config is served to every machine at once, as it always was.
//!
//! ```json
//! {"steps": [1, "25%", "100%"], "haltAfter": 1, "reportWithinSeconds": 1800}
//! ```
//!
//! `steps`: how far the new config goes at each stage, a number of machines (all stages
//! together) or a percentage of the machines that boot (chosen by a stable hash of the
//! machine id); a last step short of `"100%"` is followed by `"100%"`. `haltAfter`: the
//! failures among machines on the new config that halt the rollout, a number or a
//! percentage of them. `reportWithinSeconds`: a machine given the new config that has not
//! reported provisioned by then counts as failed. `holdSeconds`: how long a stage lasts at
//! least before the next begins.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The file name of a pool directory's policy.
pub const IN_DIR: &str = "rollout.json";
/// The suffix of a one-file pool's policy (`pools/<pool>.rollout.json`).
pub const SUFFIX: &str = ".rollout.json";
/// Largest policy file read.
pub const MAX_BYTES: u64 = 64 << 10;
/// `reportWithinSeconds` when the policy gives none.
pub const DEFAULT_REPORT_WITHIN: u64 = 1800;

/// A count of machines or a percentage (`"25%"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    Machines(u64),
    /// Hundredths of a percent (`"2.5%"` is 250): 10,000 is all.
    Percent(u32),
}

impl Amount {
    pub const ALL: Amount = Amount::Percent(10_000);

    /// As written in a policy: a number, or a string ending in `%`.
    pub fn parse(v: &serde_json::Value) -> Result<Amount, String> {
        match v {
            serde_json::Value::Number(n) => n
                .as_u64()
                .filter(|n| *n > 0)
                .map(Amount::Machines)
                .ok_or_else(|| format!("{n} is not a number of machines (1 or more)")),
            serde_json::Value::String(s) => {
                let bad = || format!("{s:?} is not a percentage (\"25%\", 0 to 100)");
                let p = s.trim().strip_suffix('%').ok_or_else(bad)?;
                let f: f64 = p.trim().parse().map_err(|_| bad())?;
                if !(0.0..=100.0).contains(&f) || f.is_nan() || f == 0.0 {
                    return Err(bad());
                }
                Ok(Amount::Percent((f * 100.0).round() as u32))
            }
            _ => Err(format!("{v} is neither a number of machines nor \"N%\"")),
        }
    }

    /// How many of `n` machines this amount is (a percentage rounded up).
    pub fn of(self, n: u64) -> u64 {
        match self {
            Amount::Machines(m) => m,
            Amount::Percent(p) => (n * u64::from(p)).div_ceil(10_000),
        }
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Machines(1) => write!(f, "1 machine"),
            Amount::Machines(n) => write!(f, "{n} machines"),
            Amount::Percent(p) if p % 100 == 0 => write!(f, "{}%", p / 100),
            Amount::Percent(p) => write!(f, "{}.{:02}%", p / 100, p % 100),
        }
    }
}

impl Serialize for Amount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Amount::Machines(n) => s.serialize_u64(*n),
            Amount::Percent(_) => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Amount::parse(&v).map_err(serde::de::Error::custom)
    }
}

/// A pool's rollout policy (module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// The stages, the last one always `100%`.
    pub steps: Vec<Amount>,
    pub halt_after: Amount,
    #[serde(default = "default_report_within")]
    pub report_within_seconds: u64,
    /// How long each stage lasts at least before the next (0: as soon as its machines
    /// provisioned).
    #[serde(default)]
    pub hold_seconds: u64,
}

fn default_report_within() -> u64 {
    DEFAULT_REPORT_WITHIN
}

impl Policy {
    /// A policy file's bytes; Err says why it is refused (never quoting the file).
    pub fn parse(bytes: &[u8]) -> Result<Policy, String> {
        let mut p: Policy = serde_json::from_slice(bytes).map_err(|e| {
            format!(
                "not a rollout policy (line {}, column {}): {}",
                e.line(),
                e.column(),
                crate::source::redact(&e.to_string())
            )
        })?;
        if p.steps.is_empty() {
            return Err("steps: at least one step (the canary)".into());
        }
        for w in p.steps.windows(2) {
            if let (Amount::Machines(a), Amount::Machines(b)) = (w[0], w[1])
                && b <= a
            {
                return Err(format!(
                    "steps: {b} after {a}: each step counts all machines so far, so it must be larger"
                ));
            }
            if let (Amount::Percent(a), Amount::Percent(b)) = (w[0], w[1])
                && b <= a
            {
                return Err(format!("steps: {} after {}: must grow", w[1], w[0]));
            }
        }
        if p.steps.last() != Some(&Amount::ALL) {
            p.steps.push(Amount::ALL);
        }
        if p.report_within_seconds == 0 {
            return Err("reportWithinSeconds: 1 or more".into());
        }
        Ok(p)
    }
}

/// A machine's place in `[0, 10000)` for a rollout to config `to`: the same on every
/// replica, and different from rollout to rollout (the same machines are not always first).
pub fn bucket(machine: &str, to: &str) -> u32 {
    let d = Sha256::new()
        .chain_update(to.as_bytes())
        .chain_update([0])
        .chain_update(machine.as_bytes())
        .finalize();
    (u32::from_be_bytes([d[0], d[1], d[2], d[3]])) % 10_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_or_say_why() {
        let p = Policy::parse(br#"{"steps": [1, "25%"], "haltAfter": "5%"}"#).unwrap();
        assert_eq!(
            p.steps,
            [Amount::Machines(1), Amount::Percent(2500), Amount::ALL]
        );
        assert_eq!(p.halt_after, Amount::Percent(500));
        assert_eq!(p.report_within_seconds, DEFAULT_REPORT_WITHIN);
        let p = Policy::parse(br#"{"steps": ["100%"], "haltAfter": 2, "reportWithinSeconds": 5}"#)
            .unwrap();
        assert_eq!(p.steps, [Amount::ALL]);
        for (bad, why) in [
            (r#"{"steps": [], "haltAfter": 1}"#, "at least one step"),
            (r#"{"steps": [3, 2], "haltAfter": 1}"#, "must be larger"),
            (r#"{"steps": ["50%", "10%"], "haltAfter": 1}"#, "must grow"),
            (
                r#"{"steps": [0], "haltAfter": 1}"#,
                "not a number of machines",
            ),
            (r#"{"steps": ["120%"], "haltAfter": 1}"#, "not a percentage"),
            (r#"{"steps": [1], "haltAfter": 1, "x": 1}"#, "unknown field"),
            (r#"{"steps": [1]}"#, "missing field"),
        ] {
            let e = Policy::parse(bad.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn amounts_and_buckets() {
        assert_eq!(Amount::Percent(2500).of(200), 50);
        assert_eq!(Amount::Percent(500).of(3), 1);
        assert_eq!(Amount::Machines(3).of(200), 3);
        assert_eq!(Amount::Percent(250).to_string(), "2.50%");
        let b: Vec<u32> = (0..1000).map(|i| bucket(&format!("m{i}"), "h1")).collect();
        assert_eq!(b[7], bucket("m7", "h1"), "stable");
        let under = b.iter().filter(|x| **x < 2500).count();
        assert!((180..320).contains(&under), "about a quarter: {under}");
        assert_ne!(bucket("m1", "h1"), bucket("m1", "h2"));
    }
}
