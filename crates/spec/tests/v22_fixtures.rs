//! Spec 2.2.0 output against the OpenShift Machine Config Server's converter, on the configs
//! of `tests/mcs_fixtures/v22.jsonl` (how they were recorded: tests/mcs_fixtures/README.md).
//!
//! Where the converter writes a 2.2 config, ours is byte for byte the same. Where it
//! refuses, ours refuses too, naming the field its message names.

use spec::config::{self, v22};

const FIXTURES: &str = include_str!("../../../tests/mcs_fixtures/v22.jsonl");

/// The converter's message → what ours names.
const NAMED: &[(&str, &str)] = &[
    ("KernelArguments is not supported", "$.kernelArguments"),
    ("SizeMiB and StartMiB", "MiB at $.storage.disks."),
    ("HTTP proxies in Ignition.Proxy", "$.ignition.proxy"),
    ("MountOptions in Storage.Filesystems", ".mountOptions"),
    ("LUKS is not supported", "$.storage.luks"),
    (
        "HTTPHeaders in Storage.Files.Contents",
        ".contents.httpHeaders",
    ),
    ("HTTPHeaders in Storage.Files.Append", ".httpHeaders"),
    (
        "HTTPHeaders in Ignition.Config.Merge",
        "$.ignition.config.merge.",
    ),
    (
        "HTTPHeaders in Ignition.Config.Replace",
        "$.ignition.config.replace.httpHeaders",
    ),
    (
        "HTTPHeaders in Ignition.Security.TLS",
        "$.ignition.security.tls.certificateAuthorities.",
    ),
    (
        "Compression in Ignition.Config.Merge",
        "$.ignition.config.merge.",
    ),
    (
        "Compression in Ignition.Config.Replace",
        "$.ignition.config.replace.compression",
    ),
    (
        "Compression in Ignition.Security.TLS",
        "$.ignition.security.tls.certificateAuthorities.",
    ),
    ("ShouldExist in Passwd.Users", ".shouldExist"),
    ("ShouldExist in Passwd.Groups", ".shouldExist"),
    ("Resize in Storage.Disks.Partitions", ".resize"),
    ("invalid url scheme", "gs:// URLs at "),
];

#[test]
fn same_as_the_machine_config_servers_converter() {
    let (mut same, mut refused_both) = (0, 0);
    for (n, line) in FIXTURES.lines().enumerate() {
        let rec: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = serde_json::to_vec(&rec["config"]).unwrap();
        let parsed = config::parse(&text)
            .unwrap_or_else(|r| panic!("line {}: the agent rejects the config: {r}", n + 1));
        let ours = v22::to_json(&parsed.config);
        match (rec["v22"].as_str(), rec["error"].as_str(), ours) {
            (Some(want), _, Ok(got)) => {
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    want,
                    "line {}: {}",
                    n + 1,
                    rec["config"]
                );
                same += 1;
            }
            (Some(_), _, Err(e)) => {
                panic!("line {}: the converter writes it, we refuse: {e}", n + 1)
            }
            (None, Some(theirs), Err(e)) => {
                let (_, field) = NAMED
                    .iter()
                    .find(|(m, _)| theirs.contains(m))
                    .unwrap_or_else(|| panic!("line {}: unlisted message {theirs:?}", n + 1));
                assert!(
                    e.contains(field),
                    "line {}: converter: {theirs:?}; ours: {e}",
                    n + 1
                );
                refused_both += 1;
            }
            (None, Some(theirs), Ok(got)) => panic!(
                "line {}: the converter refuses ({theirs:?}), we wrote {}",
                n + 1,
                String::from_utf8_lossy(&got)
            ),
            _ => panic!("line {}: malformed fixture", n + 1),
        }
    }
    eprintln!("{same} the same, {refused_both} refused by both");
    assert!(same >= 350 && refused_both >= 200, "{same} {refused_both}");
}
