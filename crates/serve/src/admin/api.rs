//! The admin API's JSON (docs/openapi.json): a machine as `/machines` and `/machines/<id>`
//! answer it, and `/machines/summary`. Made here from the model, not by serializing the
//! stored record: the answers are camelCase with RFC 3339 times and every key always there
//! (`null` when unknown), a machine with no report yet is `"booted"`, and what only the
//! server needs (recent report ids, token keys, the record's format, detail sizes) is left
//! out; the records keep the form they are stored in.

use serde_json::{Value, json};

use crate::fleet::inventory::model::{Boot, Changes, Detail, StageRecord};
use crate::fleet::inventory::{Counts, Machine, State};
use crate::http::time;

/// A machine as the admin API answers it. Its stages carry `detail` when the record was
/// read with them ([`Records::machine`](crate::fleet::inventory::Records::machine)), not in
/// a listing.
pub fn machine(m: &Machine) -> Value {
    let i = &m.identity;
    json!({
        "id": m.id,
        "state": m.current().as_str(),
        "pool": m.pool,
        "identity": {
            "id": i.id,
            "uuid": i.uuid,
            "serial": i.serial,
            "macs": i.macs,
            "platform": i.platform,
            "instanceId": i.instance_id,
            "hostname": i.hostname,
        },
        "config": m.config.as_ref().map(|c| json!({
            "pool": c.pool, "name": c.name, "hash": c.hash,
        })),
        "agent": m.agent,
        "firstSeen": time(m.first_seen),
        "lastSeen": time(m.last_seen),
        "authenticated": m.authenticated,
        "trust": m.trust.as_str(),
        "reports": m.reports,
        "installed": m.install.as_ref().map(|x| json!({
            "at": time(x.at), "bootId": x.boot_id,
        })),
        "reprovision": m.reprovision.map(time),
        "machineFile": m.machine_file,
        "boots": m.boots.iter().map(boot).collect::<Vec<_>>(),
    })
}

fn boot(b: &Boot) -> Value {
    json!({
        "bootId": b.boot_id,
        "firstSeen": time(b.first_seen),
        "lastSeen": time(b.last_seen),
        "kernel": b.kernel,
        "stages": b.stages.iter().map(stage).collect::<Vec<_>>(),
    })
}

fn stage(s: &StageRecord) -> Value {
    let mut v = json!({
        "stage": s.stage.as_str(),
        "outcome": s.outcome.as_str(),
        "final": s.last,
        "durationMs": s.duration_ms,
        "reportId": s.report_id,
        "received": time(s.received),
        "authenticated": s.authenticated,
        "trust": s.trust.as_str(),
        "counts": s.counts,
        "error": s.error,
    });
    if let Some(d) = &s.detail {
        v["detail"] = detail(d);
    }
    v
}

fn detail(d: &Detail) -> Value {
    json!({
        "changes": changes(&d.changes),
        "logTail": d.log_tail,
        "error": d.error,
    })
}

fn changes(c: &Changes) -> Value {
    json!({
        "partitions": {
            "created": c.partitions.created,
            "kept": c.partitions.kept,
            "deleted": c.partitions.deleted,
        },
        "filesystems": {"made": c.filesystems.made, "reused": c.filesystems.reused},
        "paths": c.paths,
        "pathsTruncated": c.paths_truncated,
    })
}

/// A page of `/machines`: `next`, when there are more, is the `?after=` of the next page.
pub fn listing(ms: &[Machine], next: Option<&str>) -> Value {
    json!({
        "machines": ms.iter().map(machine).collect::<Vec<_>>(),
        "next": next,
    })
}

/// `/machines/summary`: how many machines, by state (every state, 0 included) and by pool
/// (each pool's states that have machines; machines of no pool under `""`).
pub fn summary(counts: &Counts) -> Value {
    let mut by_state = serde_json::Map::new();
    for s in State::ALL {
        by_state.insert(s.as_str().into(), json!(0));
    }
    let mut by_pool = serde_json::Map::new();
    let mut total = 0u64;
    for ((state, pool), n) in counts {
        total += n;
        let k = state.as_str();
        by_state[k] = json!(by_state[k].as_u64().unwrap_or(0) + n);
        let p = by_pool.entry(pool.clone()).or_insert_with(|| json!({}));
        p[k] = json!(p[k].as_u64().unwrap_or(0) + n);
    }
    json!({"total": total, "byState": by_state, "byPool": by_pool})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::inventory::model::{Install, TokenKeys, Trust, detail};
    use crate::fleet::inventory::{apply, parse};

    /// The answer is camelCase, its times RFC 3339, a machine without a report `booted`,
    /// and nothing internal in it.
    #[test]
    fn a_machine_as_the_api_answers_it() {
        let mut m = Machine::new("m-1", 1_796_281_200);
        m.last_seen = 1_796_281_260;
        m.recent_ids = vec!["r-1".into()];
        m.tokens = TokenKeys {
            boot: Some("k".into()),
            report: vec!["k2".into()],
        };
        m.install = Some(Install {
            at: 1_796_281_260,
            boot_id: "b1".into(),
            issued: 7,
        });
        m.trust = Trust::Machine;
        let v = machine(&m);
        assert_eq!(v["state"], "booted");
        assert_eq!(v["firstSeen"], "2026-12-03T07:00:00Z");
        assert_eq!(v["lastSeen"], "2026-12-03T07:01:00Z");
        assert_eq!(v["installed"]["at"], "2026-12-03T07:01:00Z");
        assert_eq!(v["trust"], "machine");
        let text = v.to_string();
        for internal in [
            "recent",
            "tokens",
            "format",
            "detail_bytes",
            "detailBytes",
            "_",
        ] {
            assert!(!text.contains(internal), "{internal} in {text}");
        }
        let r = parse(
            br#"{"format":1,"id":"r-2","bootId":"b2","machine":{"id":"m-1"},"stage":"fetch",
                "outcome":"ok","changes":{"paths":["/a"]},"logTail":["x"]}"#,
        )
        .unwrap();
        let (mut m, _) = apply(None, &r, &Default::default());
        m.boots[0].stages[0].detail = Some(detail(&r));
        let v = machine(&m);
        assert_eq!(v["state"], "provisioning");
        let s = &v["boots"][0]["stages"][0];
        assert_eq!(s["durationMs"], 0);
        assert_eq!(s["detail"]["logTail"][0], "x");
        assert_eq!(s["detail"]["changes"]["pathsTruncated"], 0);
        assert_eq!(v["boots"][0]["bootId"], "b2");
    }

    #[test]
    fn the_summary_names_every_state() {
        let counts = vec![
            ((State::Provisioned, "worker".to_string()), 2),
            ((State::Failed, "worker".to_string()), 1),
            ((State::Booted, String::new()), 3),
        ];
        let v = summary(&counts);
        assert_eq!(v["total"], 6);
        assert_eq!(v["byState"].as_object().unwrap().len(), State::ALL.len());
        assert_eq!(v["byState"]["booted"], 3);
        assert_eq!(v["byState"]["fetching"], 0);
        assert_eq!(
            v["byPool"]["worker"],
            json!({"provisioned": 2, "failed": 1})
        );
        assert_eq!(v["byPool"][""], json!({"booted": 3}));
        assert_eq!(summary(&Vec::new())["total"], 0);
    }
}
