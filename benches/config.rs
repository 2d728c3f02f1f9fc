//! Benchmark: parse + validate + merge of a generated config with 10,000 files and 1,000
//! units, as a ratio against parsing the same bytes into `serde_json::Value` in the same run
//! (target: at most 3x). Run with `make bench-config` (or `cargo bench --bench config`).

use std::hint::black_box;
use std::time::{Duration, Instant};

fn generate(files: usize, units: usize) -> String {
    let mut s = String::from(r#"{"ignition":{"version":"3.4.0"},"storage":{"files":["#);
    for i in 0..files {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"path":"/etc/app/conf-{i}.d/file-{i}.conf","mode":420,"overwrite":true,"contents":{{"source":"data:,value%20{i}","verification":{{"hash":"sha512-{h}"}}}},"user":{{"name":"core"}},"group":{{"id":1000}}}}"#,
            h = "0".repeat(128)
        ));
    }
    s.push_str(r#"]},"systemd":{"units":["#);
    for i in 0..units {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"name":"app-{i}.service","enabled":true,"contents":"[Unit]\nDescription=App {i}\n\n[Service]\nExecStart=/usr/bin/app --instance {i}\n\n[Install]\nWantedBy=multi-user.target\n","dropins":[{{"name":"10-env.conf","contents":"[Service]\nEnvironment=N={i}\n"}}]}}"#
        ));
    }
    s.push_str("]}}");
    s
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<F: FnMut()>(rounds: usize, mut f: F) -> Duration {
    f(); // warm up
    median(
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let text = generate(10_000, 1_000);
    let bytes = text.as_bytes();
    let base = spec::config::Config::default();
    let rounds = 21;
    let reference = time(rounds, || {
        let v: serde_json::Value = serde_json::from_slice(black_box(bytes)).unwrap();
        black_box(v);
    });
    let ours = time(rounds, || {
        let parsed = spec::config::parse(black_box(bytes)).unwrap();
        let merged = spec::config::merge(&base, &parsed.config);
        black_box(merged);
    });
    // The same config merged onto itself: 10,000 keyed file matches.
    let parsed = spec::config::parse(bytes).unwrap().config;
    let self_merge = time(rounds, || {
        black_box(spec::config::merge(&parsed, &parsed));
    });
    println!(
        "config bench: {} bytes, 10000 files, 1000 units, median of {rounds}",
        bytes.len()
    );
    println!(
        "  serde_json::Value parse (reference): {:>8.2} ms",
        reference.as_secs_f64() * 1e3
    );
    println!(
        "  agent parse+validate+merge:          {:>8.2} ms",
        ours.as_secs_f64() * 1e3
    );
    println!(
        "  agent merge of 10000 matching files: {:>8.2} ms",
        self_merge.as_secs_f64() * 1e3
    );
    println!(
        "  ratio agent/reference: {:.2}x (target <= 3x)",
        ours.as_secs_f64() / reference.as_secs_f64()
    );
}
