//! Reports for the inventory tests, written as the agent sends them (docs/reports.md).

#![allow(dead_code)]

pub mod etcd;

use serve::fleet::inventory::{Counts, Filter, Machine, Origin, Recorded, Records, Report, parse};

/// The library's helpers over [`Records`] as methods, for the tests: `s.record(&r, &o)`.
pub trait RecordsExt {
    /// One report: a batch of one (`serve::fleet::inventory::record`).
    fn record(&self, r: &Report, o: &Origin) -> anyhow::Result<Recorded>;
    /// `Records::record_batch`.
    fn record_all(&self, batch: &[(&Report, &Origin)]) -> Vec<anyhow::Result<Recorded>>;
    fn machines(&self, f: &Filter) -> anyhow::Result<Vec<Machine>>;
    fn counts(&self) -> anyhow::Result<Counts>;
}

impl<T: Records + ?Sized> RecordsExt for T {
    fn record(&self, r: &Report, o: &Origin) -> anyhow::Result<Recorded> {
        serve::fleet::inventory::record(self, r, o)
    }
    fn record_all(&self, batch: &[(&Report, &Origin)]) -> Vec<anyhow::Result<Recorded>> {
        self.record_batch(batch)
    }
    fn machines(&self, f: &Filter) -> anyhow::Result<Vec<Machine>> {
        serve::fleet::inventory::machines(self, f)
    }
    fn counts(&self) -> anyhow::Result<Counts> {
        serve::fleet::inventory::counts(self)
    }
}

/// A report of `stage` (`fetch`, `disks`, `files`) with `outcome` for `machine`'s boot `boot`;
/// `id` names the report.
pub fn report(
    id: &str,
    machine: &str,
    boot: &str,
    stage: &str,
    outcome: &str,
    last: bool,
) -> Report {
    let failed = outcome == "failed";
    let body = serde_json::json!({
        "format": 1,
        "id": id,
        "boot_id": boot,
        "sent": "2026-11-27T05:40:12Z",
        "machine": {
            "id": machine,
            "uuid": null,
            "serial": "SER-1",
            "macs": ["52:54:00:12:34:56"],
            "platform": "qemu",
            "instance_id": null,
            "hostname": "node-1"
        },
        "agent": "0.1.0",
        "config": {"pool": "worker", "name": "worker", "hash": "sha256-00"},
        "stage": stage,
        "outcome": outcome,
        "final": last,
        "duration_ms": 1200,
        "changes": {
            "partitions": {"created": ["/dev/vda4"], "kept": ["/dev/vda1"], "deleted": []},
            "filesystems": {"made": ["/dev/vda4 (xfs)"], "reused": []},
            "paths": [format!("/etc/{id}")]
        },
        "error": if failed { serde_json::json!("mkfs.xfs /dev/vda4: exit status 1") } else { serde_json::Value::Null },
        "log_tail": if failed { vec!["[disks] mkfs.xfs /dev/vda4", "[disks] failed"] } else { vec![] }
    });
    parse(&serde_json::to_vec(&body).expect("a JSON body")).expect("a valid report")
}
