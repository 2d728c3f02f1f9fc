//! Butane (YAML) to Ignition (JSON), translated as Butane does. Pure: the only I/O is through
//! [`FilesDir`] (Butane's `--files-dir` reads), so the crate can be tested and fuzzed alone.
//!
//! The output is byte-equal to Butane's: compact JSON in the field order of Ignition's Go
//! structs, with Go's `omitempty` rules and string escapes, and gzip'd data URLs compressed as
//! Go's `compress/flate` does (`gozip`).

mod api;
mod decode;
mod gozip;
#[cfg(test)]
mod linear;
mod machine_config;
mod schema;
mod sugar;
mod translate;
mod value;
pub mod yaml;

pub use api::{
    Diag, FilesDir, LocalError, MAX_LOCAL_FILE, MAX_LOCAL_TOTAL, Options, Output, Release, Report,
    TreeEntry,
};
pub use gozip::{gunzip, gzip_best};
pub use translate::{Target, target};
pub use yaml::{Limits, Pos};

/// Translates a Butane config. On failure the report holds every error (and warning).
pub fn translate(input: &[u8], opts: &Options<'_>) -> Result<Output, Report> {
    translate::run(input, opts)
}

/// Whether `input` looks like a Butane config rather than Ignition JSON: a YAML mapping
/// with a string `variant` and `version`, and not a JSON object.
pub fn looks_like_butane(input: &[u8]) -> bool {
    let trimmed = input
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map(|i| &input[i..])
        .unwrap_or(&[]);
    // A JSON object (a config) or array (not one, but JSON's error says so): never Butane,
    // which is a mapping.
    if matches!(trimmed.first(), Some(b'{' | b'[')) {
        return false;
    }
    // UTF-16 with a byte order mark (Butane decodes it, as go-yaml does): never JSON, so
    // Butane, and the translation says what is wrong with it if anything is.
    let text: std::borrow::Cow<'_, str> =
        if input.starts_with(b"\xff\xfe") || input.starts_with(b"\xfe\xff") {
            match yaml::decode_text(input) {
                Ok(t) => t,
                Err(_) => return true,
            }
        } else {
            match std::str::from_utf8(input) {
                Ok(t) => t.into(),
                Err(_) => return false,
            }
        };
    match yaml::parse(&text, &Limits::default()) {
        Ok(n) => {
            n.get("variant").and_then(|v| v.scalar()).is_some()
                && n.get("version").and_then(|v| v.scalar()).is_some()
        }
        // YAML too big for a limit: not JSON (no `{`), so it is meant as Butane, and the
        // translation names the limit (rather than "invalid JSON").
        Err(e) => e.limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(s: &str) -> Result<Output, Report> {
        translate(s.as_bytes(), &Options::default())
    }

    #[test]
    fn utf16_with_bom_looks_like_butane() {
        let yaml = "variant: fcos\nversion: 1.5.0\n";
        let le: Vec<u8> = [0xff, 0xfe]
            .into_iter()
            .chain(yaml.encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        let be: Vec<u8> = [0xfe, 0xff]
            .into_iter()
            .chain(yaml.encode_utf16().flat_map(u16::to_be_bytes))
            .collect();
        assert!(looks_like_butane(&le));
        assert!(looks_like_butane(&be));
        assert!(translate(&le, &Options::default()).is_ok());
        assert!(!looks_like_butane(b"{\"ignition\":{}}"));
    }

    #[test]
    fn go_yaml_forms_and_go_json() {
        let out = tr("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /a\n      mode: 0644\n      overwrite: yes\n      contents:\n        inline: \"<b>&\"\n")
            .unwrap();
        assert_eq!(
            String::from_utf8(out.json).unwrap(),
            "{\"ignition\":{\"version\":\"3.4.0\"},\"storage\":{\"files\":[{\"overwrite\":true,\"path\":\"/a\",\"contents\":{\"compression\":\"\",\"source\":\"data:,%3Cb%3E%26\"},\"mode\":420}]}}\n"
        );
    }

    #[test]
    fn errors_carry_yaml_positions() {
        let r = tr("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /a\n      mode: \"0644\"\n").unwrap_err();
        let d = &r.diags[0];
        assert!(d.error);
        // go-yaml's unmarshal error: a position, no path (as Butane prints it).
        assert_eq!(d.path, "");
        assert_eq!(d.pos, Some(Pos { line: 6, col: 13 }));
        let r = tr("variant: fcos\nversion: 9.9.9\n").unwrap_err();
        assert!(r.to_string().contains("no translator exists"), "{r}");
        let r = tr("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: relative\n")
            .unwrap_err();
        assert_eq!(r.diags[0].path, "$.storage.files.0.path", "{r}");
        assert_eq!(r.diags[0].pos.map(|p| p.line), Some(5), "{r}");
    }

    #[test]
    fn strict_fails_on_warnings() {
        let cfg = "variant: fcos\nversion: 1.3.0\nkernel_arguments:\n  should_exist: [quiet]\n";
        let out = tr(cfg).unwrap();
        assert_eq!(out.report.diags[0].message, "unused key kernel_arguments");
        assert_eq!(out.report.diags[0].pos, Some(Pos { line: 3, col: 1 }));
        let opts = Options {
            strict: true,
            ..Default::default()
        };
        assert!(translate(cfg.as_bytes(), &opts).is_err());
    }

    #[test]
    fn aliases_and_duplicates() {
        let out = tr("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - &f\n      path: /a\n    - <<: *f\n      path: /b\n").unwrap();
        let s = String::from_utf8(out.json).unwrap();
        assert!(s.contains("\"/a\"") && s.contains("\"/b\""), "{s}");
        let r = tr("variant: fcos\nversion: 1.5.0\nversion: 1.4.0\n").unwrap_err();
        assert!(r.to_string().contains("already defined"), "{r}");
    }

    #[test]
    fn size_limit() {
        let opts = Options {
            max_size: 10,
            ..Default::default()
        };
        let r = translate(b"variant: fcos\nversion: 1.5.0\n", &opts).unwrap_err();
        assert!(r.to_string().contains("--max-config-size"), "{r}");
    }

    #[test]
    fn butane_is_told_by_content() {
        assert!(looks_like_butane(b"variant: fcos\nversion: 1.5.0\n"));
        assert!(!looks_like_butane(
            b"{\"ignition\":{\"version\":\"3.4.0\"}}"
        ));
        assert!(!looks_like_butane(b"just: yaml\n"));
        // YAML over a limit is Butane (its error names the limit), unless it is JSON.
        let deep = format!("a: {}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(looks_like_butane(deep.as_bytes()));
        assert!(!looks_like_butane(&deep.as_bytes()[3..]));
    }

    /// Issue 26 §1, one input per class, with what Butane v0.29.0 answered (the full set is
    /// tests/butane_diff.rs).
    #[test]
    fn as_butane_v0_29_answers() {
        let os = "variant: openshift\nversion: 4.14.0\nmetadata:\n  name: x\n  labels:\n    machineconfiguration.openshift.io/role: worker\n";
        // Raw output: no MachineConfig field filters.
        let out = tr(&format!("{os}storage:\n  links:\n    - path: /etc/l\n      target: /x\n  directories:\n    - path: /etc/d\n")).unwrap();
        assert!(String::from_utf8(out.json).unwrap().contains("\"links\""));
        // The role label is required; a bad kernel_type is an error; fips: false warns.
        assert!(tr("variant: openshift\nversion: 4.14.0\nmetadata:\n  name: x\n").is_err());
        assert!(tr(&format!("{os}openshift:\n  kernel_type: bogus\n")).is_err());
        let out = tr(&format!("{os}openshift:\n  fips: false\n")).unwrap();
        assert_eq!(out.report.diags[0].path, "$.openshift.fips");
        // `<<` warns as an unused key; `systemd: ~` warns.
        let out = tr("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - <<: {mode: 0600}\n      path: /a\n").unwrap();
        assert_eq!(out.report.diags[0].path, "$.storage.files.0.<<");
        let out = tr("variant: fcos\nversion: 1.5.0\nsystemd: ~\n").unwrap();
        assert_eq!(out.report.diags[0].path, "$.systemd");
        // UTF-16 with a BOM is read; a C1 control character is refused.
        let mut u16 = vec![0xff, 0xfe];
        for c in "variant: fcos\nversion: 1.5.0\n".encode_utf16() {
            u16.extend_from_slice(&c.to_le_bytes());
        }
        assert!(translate(&u16, &Options::default()).is_ok());
        assert!(tr("variant: fcos\nversion: 1.5.0\nx: \u{9b}\n").is_err());
        // A float into an int truncates; !!str is not an int; go-semver versions.
        let out = tr("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /a\n      mode: 420.9\n").unwrap();
        assert!(
            String::from_utf8(out.json)
                .unwrap()
                .contains("\"mode\":420")
        );
        assert!(tr("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /a\n      mode: !!str 420\n").is_err());
        assert!(tr("variant: fcos\nversion: 01.5.0\n").is_ok());
        // Merge inline that is not JSON is an error; an unparsable URL is an error.
        assert!(tr("variant: fcos\nversion: 1.5.0\nignition:\n  config:\n    merge:\n      - inline: not json\n").is_err());
        assert!(tr("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /a\n      contents:\n        source: 'http://a b/'\n").is_err());
        // The agent's own checks stay out (a uid Ignition takes), duplicates are refused.
        assert!(tr("variant: fcos\nversion: 1.5.0\npasswd:\n  users:\n    - name: a\n      uid: 4294967295\n").is_ok());
        assert!(tr("variant: fcos\nversion: 1.5.0\nkernel_arguments:\n  should_exist: [x]\n  should_not_exist: [x]\n").is_err());
        // Rootless quadlets and swap mount units before spec 3.3.
        let out = tr("variant: fcos\nversion: 1.8.0-experimental\nsystemd:\n  quadlets:\n    - name: w.container\n      contents: x\n").unwrap();
        assert!(
            String::from_utf8(out.json)
                .unwrap()
                .contains("/etc/containers/systemd/users/w.container")
        );
        let out = tr("variant: fcos\nversion: 1.2.0\nstorage:\n  filesystems:\n    - device: /dev/vdb\n      format: swap\n      path: /var/s\n      with_mount_unit: true\n").unwrap();
        assert!(String::from_utf8(out.json).unwrap().contains("var-s.mount"));
        // Root partition warnings (v0.28+).
        let out = tr("variant: fcos\nversion: 1.5.0\nstorage:\n  disks:\n    - device: /dev/vda\n      partitions:\n        - label: root\n          number: 4\n          size_mib: 4000\n").unwrap();
        assert_eq!(
            out.report.diags[0].path,
            "$.storage.disks.0.partitions.0.size_mib"
        );
    }

    /// The cases tests/butane_diff/known.tsv listed, with Butane v0.29.0's answers.
    #[test]
    fn as_butane_v0_29_answers_known() {
        // flatcar 1.2.0-experimental's field filter refuses CEX.
        assert!(tr("variant: flatcar\nversion: 1.2.0-experimental\nstorage:\n  luks:\n    - name: data\n      device: /dev/vdb\n      cex:\n        enabled: true\n").is_err());
        // A duplicate unit stays a duplicate when mount units are merged in (Ignition's
        // merge appends every child entry the parent lacks).
        assert!(tr("variant: flatcar\nversion: 1.1.0\nsystemd:\n  units:\n    - name: a.service\n    - name: a.service\nstorage:\n  filesystems:\n    - device: /dev/disk/by-label/x\n      format: ext4\n      path: /boot\n      with_mount_unit: true\n").is_err());
        // A warning on an entry the boot_device merge moved is at the path the user wrote.
        let os = "variant: openshift\nversion: 4.23.0-experimental\nmetadata:\n  name: x\n  labels:\n    machineconfiguration.openshift.io/role: worker\n";
        let out = tr(&format!("{os}boot_device:\n  layout: ppc64le\n  mirror:\n    devices: [/dev/vda, /dev/vdb]\nstorage:\n  disks:\n    - device: /dev/vda\n      partitions:\n        - label: root\n          number: 4\n          size_mib: 0\n")).unwrap();
        let paths: Vec<&str> = out.report.diags.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["$.storage.disks.0.partitions.0.label"]);
        let os = os.replace("4.23.0-experimental", "4.14.0");
        let out = tr(&format!("{os}storage:\n  filesystems:\n    - device: /dev/vdb\n      format: xfs\n      label: boot\n      wipe_filesystem: true\nboot_device:\n  layout: null\n  mirror:\n    devices: [/dev/vda, /dev/vdb]\n")).unwrap();
        let mut paths: Vec<&str> = out.report.diags.iter().map(|d| d.path.as_str()).collect();
        paths.sort();
        assert_eq!(
            paths,
            ["$.boot_device.mirror", "$.storage.filesystems.0.device"]
        );
        // A URL Go cannot parse fails the output's validation: the translation's warnings
        // (special bits before spec 3.6) are still reported.
        let err = tr("variant: fiot\nversion: 1.0.0\nstorage:\n  files:\n    - path: /etc/a\n      mode: 01777\n      contents:\n        inline: hi\nignition:\n  config:\n    merge:\n      - source: 'http://[::1'\n").unwrap_err();
        assert!(
            err.diags
                .iter()
                .any(|d| !d.error && d.path == "$.storage.files.0.mode")
        );
        // Reserved partition labels warn in fcos 1.0-1.2 too.
        let out = tr("variant: fcos\nversion: 1.1.0\nstorage:\n  disks:\n    - device: /dev/vda\n      partitions:\n        - label: boot\n          number: 1\n").unwrap();
        assert_eq!(
            out.report.diags[0].path,
            "$.storage.disks.0.partitions.0.label"
        );
    }

    /// The paths of a refused config's errors, as Butane prints them (`error at $...`).
    fn error_paths(s: &str) -> Vec<String> {
        let r = tr(s).unwrap_err();
        let mut p: Vec<String> = r
            .diags
            .iter()
            .filter(|d| d.error && !d.path.is_empty())
            .map(|d| d.path.clone())
            .collect();
        p.sort();
        p.dedup();
        p
    }

    /// Errors at the paths Butane v0.29.0 reports them (tests/butane_diff.rs has the rest).
    #[test]
    fn error_paths_as_butane_v0_29() {
        let fcos = "variant: fcos\nversion: 1.5.0\n";
        // go-yaml's unmarshal errors name a line, no path.
        let none: [&str; 0] = [];
        assert_eq!(
            error_paths(&format!(
                "{fcos}storage:\n  files:\n    - path: /a\n      mode: 0644\n      mode: 0600\n"
            )),
            none
        );
        assert_eq!(
            error_paths(&format!(
                "{fcos}storage:\n  files:\n    - path: /a\n      mode: !!str 0644\n"
            )),
            none
        );
        assert_eq!(
            error_paths(&format!("{fcos}passwd: {{}}\npasswd: {{}}\n")),
            none
        );
        // A duplicate is Ignition's "duplicate entry defined" at the later entry only.
        assert_eq!(
            error_paths(&format!(
                "{fcos}storage:\n  files:\n    - path: /a\n    - path: /a\n"
            )),
            ["$.storage.files.1"]
        );
        assert_eq!(
            error_paths(&format!(
                "{fcos}systemd:\n  units:\n    - name: a.service\n    - name: a.service\n"
            )),
            ["$.systemd.units.1"]
        );
        assert_eq!(
            error_paths(&format!(
                "{fcos}storage:\n  disks:\n    - device: /dev/vda\n      partitions:\n        - label: a\n        - label: a\n"
            )),
            ["$.storage.disks.0.partitions.1"]
        );
        // A merge's source is checked at the entry (3.1+) and at `source`.
        let merge = |src: &str| {
            error_paths(&format!(
                "{fcos}ignition:\n  config:\n    merge:\n      - source: {src}\n"
            ))
        };
        assert_eq!(merge("\"\""), ["$.ignition.config.merge.0"]);
        assert_eq!(
            merge("'http://a b/'"),
            [
                "$.ignition.config.merge.0",
                "$.ignition.config.merge.0.source"
            ]
        );
        // A child config's own validation reports at its own paths.
        assert_eq!(
            error_paths(&format!(
                "{fcos}ignition:\n  config:\n    replace:\n      inline: '{{}}'\n"
            )),
            ["$.ignition.version"]
        );
        // openshift's RHCOS/MCO checks: at `$.spec.config` + the output path with --raw,
        // at the user's path in a MachineConfig.
        let os = "variant: openshift\nversion: 4.14.0\nmetadata:\n  name: x\n  labels:\n    machineconfiguration.openshift.io/role: worker\npasswd:\n  users:\n    - name: core\n    - name: u\n";
        assert_eq!(error_paths(os), ["$.spec.config.passwd.users.1.name"]);
        let mc = Options {
            machine_config: true,
            ..Default::default()
        };
        let r = translate(os.as_bytes(), &mc).unwrap_err();
        assert_eq!(r.diags[0].path, "$.passwd.users.1.name", "{r}");
        // A source Go cannot parse is Ignition's error only (not the MCO's data-URL one).
        let os_file = os.replace("passwd:\n  users:\n    - name: core\n    - name: u\n", "storage:\n  files:\n    - path: /etc/s\n      contents:\n        source: 'http://[::1'\n");
        assert_eq!(error_paths(&os_file), ["$.storage.files.0.contents.source"]);
        // Before spec 3.3 a mount unit's path and format are checked apart.
        assert_eq!(
            error_paths(
                "variant: fcos\nversion: 1.2.0\nstorage:\n  filesystems:\n    - device: /dev/vdb\n      format: \"\"\n      with_mount_unit: true\n"
            ),
            [
                "$.storage.filesystems.0.format",
                "$.storage.filesystems.0.path"
            ]
        );
    }

    /// A files dir of one tree `t`: a file and a symlink to it.
    struct OneTree;

    impl FilesDir for OneTree {
        fn read(&self, rel: &str, _max: u64) -> Result<Vec<u8>, LocalError> {
            Err(LocalError::Other(format!("no file {rel}")))
        }
        fn walk(&self, rel: &str, _: u64, _: u64) -> Result<Vec<TreeEntry>, LocalError> {
            if rel != "t" {
                return Err(LocalError::Other(format!("no tree {rel}")));
            }
            Ok(vec![
                TreeEntry::Dir { rel: String::new() },
                TreeEntry::Symlink {
                    rel: "link".into(),
                    target: "run.sh".into(),
                },
                TreeEntry::File {
                    rel: "run.sh".into(),
                    contents: b"x".to_vec(),
                    executable: true,
                },
            ])
        }
    }

    /// Errors on what a sugar made are at the sugar (Butane's translation set), in a
    /// MachineConfig: a tree's links, a list a tree started, GRUB's `user.cfg` append.
    #[test]
    fn error_paths_of_sugar_as_butane_v0_29() {
        let os = "variant: openshift\nversion: 4.22.0\nmetadata:\n  name: x\n  labels:\n    machineconfiguration.openshift.io/role: worker\n";
        let opts = Options {
            files_dir: Some(&OneTree),
            machine_config: true,
            ..Default::default()
        };
        let paths = |s: String| {
            let r = translate(s.as_bytes(), &opts).unwrap_err();
            let mut p: Vec<String> = r
                .diags
                .iter()
                .filter(|d| d.error)
                .map(|d| d.path.clone())
                .collect();
            p.sort();
            p
        };
        assert_eq!(
            paths(format!("{os}storage:\n  trees:\n    - local: t\n")),
            ["$.storage.trees.0"]
        );
        // The user's links started the list: the error is theirs.
        assert_eq!(
            paths(format!(
                "{os}storage:\n  links:\n    - path: /etc/l\n      target: /x\n  trees:\n    - local: t\n"
            )),
            ["$.storage.links"]
        );
        assert_eq!(
            paths(format!(
                "{os}grub:\n  users:\n    - name: root\n      password_hash: h\n"
            )),
            ["$.grub.users"]
        );
    }

    /// LS and PS (U+2028, U+2029) as go-yaml reads them: line breaks outside quotes, kept in
    /// quoted scalars (blanks around them dropped, an escaped one joins the lines).
    #[test]
    fn ls_ps_as_go_yaml() {
        let name = |users: &str| {
            let out = tr(&format!(
                "variant: fcos\nversion: 1.5.0\npasswd:\n  users:\n    - name: {users}\n"
            ))
            .unwrap();
            let json = String::from_utf8(out.json).unwrap();
            json.split("\"name\":\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(name("a\u{2028}"), "a");
        assert_eq!(name("\"a\u{2028}b\""), "a\\u2028b");
        assert_eq!(name("'a \u{2029}  b'"), "a\\u2029b");
        assert_eq!(name("\"a\\\u{2028}  b\""), "ab");
        let out =
            tr("variant: fcos\nversion: 1.5.0\npasswd:\u{2029}  users:\n    - name: a\n").unwrap();
        assert!(
            String::from_utf8(out.json)
                .unwrap()
                .contains("\"name\":\"a\"")
        );
        assert!(
            tr("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/a\u{2028}b\n")
                .is_err()
        );
    }
}
