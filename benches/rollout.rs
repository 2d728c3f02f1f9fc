//! Benchmark: what a rollout costs on the boot path. MACHINES (2,000) machines network-boot
//! in-process through the server's own boot handler (`/ipxe`, then `/machine-config`, the
//! request that chooses the machine's config), once for a pool without a policy (the plain
//! fetch: today's path, no rollout read) and once for the same pool in a rollout (a 50 %
//! step: every machine's config chosen from the store's rollout record and its own record,
//! and what it was given written), then every machine fetches again (the sticky answer), in
//! the same run against the in-memory and the embedded store (a real redb file, fsynced).
//! Prints the time per `/machine-config` of each and the ratio to the plain fetch.
//! Run with `cargo bench --bench rollout` (env MACHINES).

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serve::fleet::boot::{self, Ctx, Discovery, Recent, Settings};
use serve::fleet::inventory::{Embedded, Memory, Store};
use serve::http::{Response, parse_head};
use serve::source::Generation;
use serve::source::render::Pool;

fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

/// A source with pool `worker` (`marker` in its config), a boot profile and its assets, and
/// the rollout policy when given.
fn generation(dir: &Path, marker: &str, policy: Option<&str>) -> Arc<Generation> {
    write(
        &dir.join("pools/worker.ign"),
        &format!(
            r#"{{"ignition":{{"version":"3.3.0"}},"storage":{{"files":[{{"path":"/etc/motd","contents":{{"source":"data:,{marker}"}}}}]}}}}"#
        ),
    );
    write(
        &dir.join("boot/default.json"),
        r#"{"kernel": "vmlinuz", "initrd": ["initramfs.img"], "args": ["console=ttyS0"]}"#,
    );
    write(&dir.join("boot/assets/vmlinuz"), "kernel");
    write(&dir.join("boot/assets/initramfs.img"), "initramfs");
    if let Some(p) = policy {
        write(&dir.join("pools/worker.rollout.json"), p);
    }
    Arc::new(serve::source::load(dir).unwrap_or_else(|e| panic!("{e}")))
}

fn request(path: &str) -> serve::http::Request {
    parse_head(format!("GET {path} HTTP/1.1\r\nHost: bench").as_bytes(), 64).unwrap()
}

fn serve_pool(_: &serve::http::Request, p: &Pool, out: &mut Response) {
    *out = Response::new(200);
    out.body = p.rendered(p.min_version.minor).unwrap().http_body();
}

/// Boots `n` machines (`/ipxe`, then `/machine-config`, then the config again through a new
/// `/ipxe`) against `store` serving `active` with lastKnownGood `lkg`: the time of each
/// first and second `/machine-config`, and how many got the new config.
fn herd(
    store: &dyn Store,
    active: &Arc<Generation>,
    lkg: &Arc<Generation>,
    n: usize,
    tag: &str,
) -> (Duration, Duration, usize) {
    let settings = Settings {
        public_url: Some("http://bench".into()),
        discovery: Discovery::Pool("worker".into()),
        token_ttl: 3600,
        running_deadline: None,
    };
    let recent = Recent::default();
    let ctx = Ctx {
        settings: &settings,
        recent: &recent,
        generation: Some(active),
        last_known_good: Some(lkg),
        store: Some(store),
        serve: &serve_pool,
    };
    let mut times = [Duration::ZERO; 2];
    for time in &mut times {
        for i in 0..n {
            let mac = format!("52-54-00-{tag}-{:02x}-{:02x}", i >> 8, i & 255);
            let mut out = Response::new(200);
            boot::handle(&ctx, &request(&format!("/ipxe?mac={mac}")), &mut out);
            let script = match &out.body {
                serve::http::Body::Owned(b) => String::from_utf8_lossy(b).into_owned(),
                _ => panic!("a boot script"),
            };
            let url = script
                .split_whitespace()
                .find_map(|w| w.strip_prefix("agent.config.url=http://bench"))
                .unwrap_or_else(|| panic!("{script}"))
                .to_string();
            let req = request(&url);
            let t = Instant::now();
            let mut out = Response::new(200);
            boot::handle(&ctx, &req, &mut out);
            *time += t.elapsed();
            assert_eq!(out.status, 200);
            black_box(out);
        }
    }
    let on_new = store
        .rollout("worker")
        .unwrap()
        .map_or(0, |r| r.machines.len());
    (times[0] / n as u32, times[1] / n as u32, on_new)
}

fn main() {
    let n: usize = std::env::var("MACHINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let tmp = std::env::temp_dir().join(format!("agent-bench-rollout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let lkg = generation(&tmp.join("v1"), "v1", None);
    let plain = generation(&tmp.join("v2"), "v2", None);
    let rolling = generation(
        &tmp.join("v2-rollout"),
        "v2",
        Some(r#"{"steps": ["50%"], "haltAfter": "50%"}"#),
    );
    println!("{n} machines, each /ipxe then /machine-config, twice; time per /machine-config:");
    type Open<'a> = Box<dyn Fn(&str) -> Box<dyn Store> + 'a>;
    let stores: Vec<(&str, Open)> = vec![
        ("memory", Box::new(|_| Box::new(Memory::new(1_000_000)))),
        (
            "embedded",
            Box::new(|name: &str| {
                Box::new(Embedded::open_with(&tmp.join(format!("{name}.db")), 1_000_000).unwrap())
            }),
        ),
    ];
    for (kind, open) in &stores {
        let s = open(&format!("{kind}-plain"));
        let (p1, p2, _) = herd(&*s, &plain, &lkg, n, "aa");
        let s = open(&format!("{kind}-rollout"));
        let (r1, r2, on_new) = herd(&*s, &rolling, &lkg, n, "bb");
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "  {kind:8} plain fetch {:8.1} µs   choosing in a rollout {:8.1} µs ({:.2}×; {on_new} of {n} on the new config)",
            us(p1),
            us(r1),
            us(r1) / us(p1)
        );
        println!(
            "  {kind:8} again       {:8.1} µs   again, sticky          {:8.1} µs ({:.2}×)",
            us(p2),
            us(r2),
            us(r2) / us(p2)
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
