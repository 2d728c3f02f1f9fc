//! Tests that parsing, decoding, validating, locating diagnostics and merging cost time
//! linear (or n log n) in the input: the work count (`crate::work`) of an input twice as big
//! must be about twice as big (a quadratic step makes it four times).

use crate::work;

/// See [`work::assert_linear`].
fn assert_linear(what: &str, n: usize, run: impl Fn(usize)) {
    const { assert!(work::ENABLED, "the work count is compiled into tests") };
    work::assert_linear(what, n, run);
}

fn doc(body: &str) -> Vec<u8> {
    format!("{{\"ignition\":{{\"version\":\"3.4.0\"}}{body}}}").into_bytes()
}

#[test]
fn many_unknown_keys() {
    // Each key is a diagnostic located in the text (its line and column), and each key is
    // checked against the object's others for duplicates.
    assert_linear("unknown keys", 4000, |n| {
        let body: String = (0..n).map(|i| format!(",\n\"k{i}\": {i}")).collect();
        let r = super::parse(&doc(&body)).unwrap();
        assert_eq!(r.warnings.diagnostics.len(), n);
        assert!(r.warnings.diagnostics[n - 1].line_col.is_some());
    });
}

#[test]
fn many_invalid_files() {
    // Per file: a decode error (mode is a string) and a validation error (relative path),
    // both located; the validator's errors are checked against the decoder's.
    assert_linear("invalid files", 2000, |n| {
        let files: Vec<String> = (0..n)
            .map(|i| format!("\n{{\"path\": \"rel/{i}\", \"mode\": \"x\"}}"))
            .collect();
        let body = format!(",\"storage\": {{\"files\": [{}]}}", files.join(","));
        let r = super::parse(&doc(&body)).unwrap_err();
        assert_eq!(r.errors().count(), 2 * n);
    });
}

#[test]
fn many_valid_entries() {
    // Files, directories, links, users and units: validation checks duplicates by hashing.
    assert_linear("valid entries", 2000, |n| {
        let list = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join(",");
        let body = format!(
            ",\"storage\": {{\"files\": [{}], \"directories\": [{}], \"links\": [{}]}},\
             \"passwd\": {{\"users\": [{}]}}, \"systemd\": {{\"units\": [{}]}}",
            list(&|i| format!("{{\"path\": \"/f/{i}\"}}")),
            list(&|i| format!("{{\"path\": \"/d/{i}\"}}")),
            list(&|i| format!("{{\"path\": \"/l/{i}\", \"target\": \"/t\"}}")),
            list(&|i| format!("{{\"name\": \"u{i}\"}}")),
            list(&|i| format!("{{\"name\": \"s@{i}.service\", \"enabled\": true}}")),
        );
        let body = body.replace(
            "\"units\": [",
            "\"units\": [{\"name\": \"s@.service\", \"contents\": \"[Unit]\\nA=b\\n\"},",
        );
        super::parse(&doc(&body)).unwrap();
    });
}

#[test]
fn many_placed_partitions() {
    assert_linear("partitions", 2000, |n| {
        let parts: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    "{{\"number\": {}, \"startMiB\": {}, \"sizeMiB\": 1}}",
                    i + 1,
                    2 + 2 * i
                )
            })
            .collect();
        let body = format!(
            ",\"storage\": {{\"disks\": [{{\"device\": \"/dev/vda\", \"partitions\": [{}]}}]}}",
            parts.join(",")
        );
        super::parse(&doc(&body)).unwrap();
    });
}

#[test]
fn merging_many_entries() {
    assert_linear("merge", 2000, |n| {
        let cfg = |off: usize| {
            let users: Vec<String> = (0..n)
                .map(|i| format!("{{\"name\": \"u{}\"}}", i + off))
                .collect();
            let keys: Vec<String> = (0..n).map(|i| format!("\"k{}\"", i + off)).collect();
            let body = format!(
                ",\"passwd\": {{\"users\": [{}]}}, \"kernelArguments\": {{\"shouldExist\": [{}]}}",
                users.join(","),
                keys.join(",")
            );
            super::parse(&doc(&body)).unwrap().config
        };
        let (a, b) = (cfg(0), cfg(n / 2));
        let m = super::merge(&a, &b);
        assert_eq!(m.passwd.users.len(), n + n / 2);
        assert_eq!(m.kernel_arguments.should_exist.len(), n + n / 2);
    });
}

#[test]
fn merging_kernel_arguments_both_ways() {
    // A child's shouldNotExist cancels the parent's shouldExist of the same argument, and
    // the other way round.
    assert_linear("kernel arguments", 2000, |n| {
        let cfg = |exist: &str, not: &str| {
            let list = |p: &str| {
                (0..n)
                    .map(|i| format!("\"{p}{i}\""))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let body = format!(
                ",\"kernelArguments\": {{\"shouldExist\": [{}], \"shouldNotExist\": [{}]}}",
                list(exist),
                list(not)
            );
            super::parse(&doc(&body)).unwrap().config
        };
        let m = super::merge(&cfg("a", "b"), &cfg("b", "a"));
        assert_eq!(m.kernel_arguments.should_exist.len(), n);
        assert_eq!(m.kernel_arguments.should_not_exist.len(), n);
    });
}

#[test]
fn deep_duplicate_free_objects() {
    // Many small objects (the common shape) and one big one: no per-object overhead that
    // grows with the document.
    assert_linear("objects", 4000, |n| {
        let body: String = (0..n)
            .map(|i| format!(",\"o{i}\": {{\"a\": 1, \"b\": [1, 2]}}"))
            .collect();
        let _ = super::parse(&doc(&body));
    });
}
