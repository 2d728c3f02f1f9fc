//! Tests that translation costs time linear (or n log n) in the input: YAML parsing, decoding
//! with duplicate checks, `<<` merges, aliases, the sugar (and its merge into the user's
//! config), Go's JSON and gzip, and Ignition's validation of the result. The work count
//! (`spec::work`, on in this crate's tests) of an input twice as big must be about twice as
//! big; a quadratic step makes it four times.

use crate::{Options, translate};
use spec::work;

/// Work for inputs of `n` and `2n` entries; fails unless it grows less than 2.5x.
fn assert_linear(what: &str, n: usize, make: impl Fn(usize) -> String, ok: bool) {
    const {
        assert!(
            work::ENABLED,
            "the work count is compiled into butane's tests"
        )
    };
    work::assert_linear(what, n, |n| {
        let text = make(n);
        let r = translate(text.as_bytes(), &Options::default());
        assert_eq!(
            r.is_ok(),
            ok,
            "{what} at {n}: {:?}",
            r.err().map(|r| r.to_string())
        );
    });
}

const HEAD: &str = "variant: fcos\nversion: 1.5.0\n";

#[test]
fn many_unknown_keys() {
    assert_linear(
        "unused keys",
        4000,
        |n| HEAD.to_string() + &(0..n).map(|i| format!("k{i}: {i}\n")).collect::<String>(),
        true,
    );
}

#[test]
fn many_duplicate_keys() {
    assert_linear(
        "duplicate keys",
        4000,
        |n| {
            HEAD.to_string()
                + &(0..n)
                    .map(|i| format!("k{i}: 1\nk{i}: 2\n"))
                    .collect::<String>()
        },
        false,
    );
}

#[test]
fn many_files_directories_and_links() {
    assert_linear(
        "files",
        2000,
        |n| {
            let mut s = HEAD.to_string() + "storage:\n  files:\n";
            for i in 0..n {
                s +=
                    &format!("    - path: /f/{i}\n      contents:\n        inline: \"file {i}\"\n");
            }
            s += "  directories:\n";
            for i in 0..n {
                s += &format!("    - path: /d/{i}\n");
            }
            s += "  links:\n";
            for i in 0..n {
                s += &format!("    - path: /l/{i}\n      target: /t\n");
            }
            s
        },
        true,
    );
}

#[test]
fn many_mount_units_merged_into_many_units() {
    // The sugar renders a unit per filesystem and merges them into the user's units (keyed
    // by name); the network-unlocked LUKS volumes are looked up per filesystem.
    assert_linear(
        "mount units",
        1000,
        |n| {
            let mut s = HEAD.to_string() + "storage:\n  luks:\n";
            for i in 0..n {
                s += &format!(
                    "    - name: v{i}\n      device: /dev/vd{i}\n      clevis:\n        tang:\n          - url: http://t\n            thumbprint: x\n"
                );
            }
            s += "  filesystems:\n";
            for i in 0..n {
                s += &format!(
                    "    - device: /dev/mapper/v{i}\n      path: /m/x{i}\n      format: ext4\n      with_mount_unit: true\n"
                );
            }
            s += "systemd:\n  units:\n";
            for i in 0..n {
                s += &format!("    - name: u{i}.service\n      mask: true\n");
            }
            s
        },
        true,
    );
}

#[test]
fn many_merge_keys_and_aliases() {
    assert_linear(
        "anchors, aliases and << merges",
        2000,
        |n| {
            let mut s = HEAD.to_string() + "storage:\n  files:\n";
            for i in 0..n {
                s += &format!("    - &f{i}\n      path: /a/{i}\n      mode: 0644\n");
            }
            for i in 0..n {
                s += &format!("    - <<: *f{i}\n      path: /b/{i}\n");
            }
            s
        },
        true,
    );
}

#[test]
fn big_contents_compress_linearly() {
    // Go's gzip and the data URL of one big inline file.
    assert_linear(
        "compression",
        50_000,
        |n| {
            let body: String = (0..n)
                .map(|i| format!("line {} {}\\n", i, i * 7919 % 1000))
                .collect();
            HEAD.to_string()
                + &format!(
                    "storage:\n  files:\n    - path: /big\n      contents:\n        inline: \"{body}\"\n"
                )
        },
        true,
    );
}
