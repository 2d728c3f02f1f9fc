//! Benchmark: translating the corpus's largest Butane input (`../shared/corpus/*/inputs/*.bu`,
//! the largest one that translates) to Ignition JSON, as a ratio against parsing the same YAML
//! into a generic value with saphyr-parser (the YAML parser the translator uses) in the same
//! run. Run with `make bench-butane` (or `cargo bench --bench butane`); skips when the corpus
//! is absent.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use saphyr_parser::{Event, Parser};

/// A generic YAML value, the reference's output.
#[allow(dead_code)]
enum Value {
    Scalar(String),
    Seq(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Alias(usize),
}

fn generic(text: &str) -> Value {
    let mut stack: Vec<(Value, Option<Value>)> = Vec::new();
    let mut root = None;
    for ev in Parser::new_from_str(text) {
        let (ev, _) = ev.expect("valid YAML");
        let done = match ev {
            Event::Scalar(v, ..) => Some(Value::Scalar(v.into_owned())),
            Event::Alias(a) => Some(Value::Alias(a)),
            Event::SequenceStart(..) => {
                stack.push((Value::Seq(Vec::new()), None));
                None
            }
            Event::MappingStart(..) => {
                stack.push((Value::Map(Vec::new()), None));
                None
            }
            Event::SequenceEnd | Event::MappingEnd => stack.pop().map(|(v, _)| v),
            _ => None,
        };
        if let Some(v) = done {
            match stack.last_mut() {
                None => root = Some(v),
                Some((Value::Seq(items), _)) => items.push(v),
                Some((Value::Map(entries), key)) => match key.take() {
                    None => *key = Some(v),
                    Some(k) => entries.push((k, v)),
                },
                Some(_) => unreachable!(),
            }
        }
    }
    root.unwrap_or(Value::Scalar(String::new()))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<F: FnMut()>(rounds: usize, mut f: F) -> Duration {
    f();
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
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    if !corpus.join("butane-translations.tsv").exists() {
        eprintln!("skipped: {} is absent", corpus.display());
        return;
    }
    let files = agent::cli::DirFiles::new(corpus.join("butane/files-dir"));
    let mut inputs: Vec<(u64, PathBuf)> = Vec::new();
    for d in [
        "butane",
        "fcos-docs",
        "flatcar-docs",
        "fcos-config",
        "wild-butane",
    ] {
        for e in std::fs::read_dir(corpus.join(d).join("inputs")).unwrap() {
            let p = e.unwrap().path();
            inputs.push((std::fs::metadata(&p).unwrap().len(), p));
        }
    }
    inputs.sort();
    let opts = butane::Options {
        files_dir: Some(&files),
        ..Default::default()
    };
    let (path, text) = inputs
        .iter()
        .rev()
        .map(|(_, p)| (p, std::fs::read_to_string(p).unwrap()))
        .find(|(_, t)| butane::translate(t.as_bytes(), &opts).is_ok())
        .expect("an input that translates");
    let rounds = 201;
    let reference = time(rounds, || {
        black_box(generic(black_box(&text)));
    });
    let ours = time(rounds, || {
        black_box(butane::translate(black_box(text.as_bytes()), &opts).unwrap());
    });
    println!(
        "butane: {} ({} bytes): translate {:?}, saphyr-parser generic parse {:?}, ratio {:.2}x",
        path.file_name().unwrap().to_string_lossy(),
        text.len(),
        ours,
        reference,
        ours.as_secs_f64() / reference.as_secs_f64()
    );
}
