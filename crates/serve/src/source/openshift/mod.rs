//! `agent serve --openshift`: the files the OpenShift Machine Config Server puts into every
//! config it serves, and spec 2.2.0 for old boot images (docs/serve.md, "OpenShift mode").
//!
//! As the MCS's `appendNodeAnnotations` and `appendKubeConfig` write them, after the config's
//! own files: `/etc/machine-config-daemon/node-annotations.json` (the Machine Config Daemon
//! seeds the node's annotations from it) and, when given, `/etc/kubernetes/kubeconfig`; each
//! mode 0644, `overwrite: true`, its contents a `data:,` URL percent-encoded as
//! `dataurl.Escape` does. The annotations are Go's `json.Marshal` of a map: keys sorted, no
//! spaces, no trailing newline.

/// Spec 2.2 answers of OpenShift mode.
pub mod spec2;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use spec::config::types::{File, Resource};
use spec::config::{Config, v22};

/// Where the Machine Config Daemon finds the annotations to set on its node at first boot.
pub const NODE_ANNOTATIONS_PATH: &str = "/etc/machine-config-daemon/node-annotations.json";

/// Where a new node's kubelet finds the kubeconfig it joins the cluster with.
pub const KUBECONFIG_PATH: &str = "/etc/kubernetes/kubeconfig";

/// What OpenShift mode is told.
#[derive(Debug, Clone, Default)]
pub struct OpenShift {
    /// The kubeconfig written to [`KUBECONFIG_PATH`] (none: no such file).
    pub kubeconfig: Option<Vec<u8>>,
    /// The rendered MachineConfig name per pool (default: the pool's config name).
    pub config_names: BTreeMap<String, String>,
}

static MODE: OnceLock<OpenShift> = OnceLock::new();

/// What `agent serve` asks of OpenShift mode: `--openshift`, `--kubeconfig`,
/// `--openshift-config-name`.
pub struct Asked<'a> {
    pub openshift: bool,
    pub kubeconfig: Option<&'a std::path::Path>,
    pub config_names: &'a [(String, String)],
}

/// Turns OpenShift mode on for this process when `opts` asks for it (once, before any
/// config is loaded): reads the kubeconfig.
pub fn start(opts: &Asked<'_>) -> anyhow::Result<()> {
    use anyhow::{Context, bail};
    if !opts.openshift {
        if opts.kubeconfig.is_some() || !opts.config_names.is_empty() {
            bail!("--kubeconfig and --openshift-config-name need --openshift");
        }
        return Ok(());
    }
    let kubeconfig = match opts.kubeconfig {
        Some(p) => {
            // A regular file (a Secret volume's symlink followed), never a FIFO or a
            // device, read at most one byte past the limit.
            use std::io::Read;
            let (f, _) = runtime::util::open_regular(p, true).map_err(|e| match e {
                runtime::util::OpenRegularError::Io(e) => {
                    anyhow::anyhow!("reading --kubeconfig {}: {e}", p.display())
                }
                runtime::util::OpenRegularError::NotRegular(kind) => {
                    anyhow::anyhow!("--kubeconfig {} is {kind}, not a regular file", p.display())
                }
            })?;
            let mut b = Vec::new();
            f.take(MAX_KUBECONFIG as u64 + 1)
                .read_to_end(&mut b)
                .with_context(|| format!("reading --kubeconfig {}", p.display()))?;
            if b.len() > MAX_KUBECONFIG {
                bail!(
                    "--kubeconfig {}: more than the {MAX_KUBECONFIG} bytes a served file may have",
                    p.display()
                );
            }
            Some(b)
        }
        None => None,
    };
    let _ = MODE.set(OpenShift {
        kubeconfig,
        config_names: opts.config_names.iter().cloned().collect(),
    });
    Ok(())
}

/// The largest `--kubeconfig` (read once; served in every config).
pub const MAX_KUBECONFIG: usize = 1 << 20;

/// OpenShift mode's settings, when it is on.
pub fn mode() -> Option<&'static OpenShift> {
    MODE.get()
}

/// `--openshift-config-name POOL=NAME`: NAME a Kubernetes object name (lowercase
/// alphanumerics, `-` and `.`, at most 253).
pub fn parse_config_name(s: &str) -> Result<(String, String), String> {
    let Some((pool, name)) = s.split_once('=') else {
        return Err(format!("{s:?}: expected POOL=NAME"));
    };
    if !crate::source::reading::valid_pool_name(pool) {
        return Err(format!("{s:?}: invalid pool name {pool:?}"));
    }
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 253
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric();
    if !ok {
        return Err(format!(
            "{s:?}: {name:?} is not a Kubernetes object name (lowercase letters, digits, '-' and '.', at most 253)"
        ));
    }
    Ok((pool.to_string(), name.to_string()))
}

/// The node-annotations JSON for config `name`, byte for byte as the MCS's
/// `getNodeAnnotation` writes it (no image).
pub fn annotations_json(name: &str) -> String {
    let n = v22::go_string(name);
    format!(
        "{{\"machineconfiguration.openshift.io/currentConfig\":{n},\
         \"machineconfiguration.openshift.io/desiredConfig\":{n},\
         \"machineconfiguration.openshift.io/firstPivotConfig\":{n},\
         \"machineconfiguration.openshift.io/state\":\"Done\"}}"
    )
}

/// `data:,` and `data` percent-encoded as `dataurl.Escape` does: everything but
/// `A-Za-z0-9-_.!~*'()` as `%XX` (uppercase).
pub fn data_url(data: &[u8]) -> String {
    let mut s = String::with_capacity(6 + data.len() * 3);
    s.push_str("data:,");
    for &b in data {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// A file as the MCS's `appendFileToIgnition` makes it.
fn mcs_file(path: &str, contents: &[u8]) -> File {
    File {
        path: path.to_string(),
        mode: Some(0o644),
        overwrite: Some(true),
        contents: Resource {
            source: Some(data_url(contents)),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The files OpenShift mode adds for `pool`, whose config is named `config_name`.
pub fn files(o: &OpenShift, pool: &str, config_name: &str) -> Vec<File> {
    let name = o.config_names.get(pool).map_or(config_name, String::as_str);
    let mut v = vec![mcs_file(
        NODE_ANNOTATIONS_PATH,
        annotations_json(name).as_bytes(),
    )];
    if let Some(k) = &o.kubeconfig {
        v.push(mcs_file(KUBECONFIG_PATH, k));
    }
    v
}

/// `c` with OpenShift mode's files added at the end (replacing any node of the same path).
pub fn with_files(c: &Config, o: &OpenShift, pool: &str, config_name: &str) -> Config {
    let mut out = c.clone();
    for f in files(o, pool, config_name) {
        out.storage.files.retain(|x| x.path != f.path);
        out.storage.directories.retain(|x| x.path != f.path);
        out.storage.links.retain(|x| x.path != f.path);
        out.storage.files.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from the MCO's code (tests/mcs_fixtures/README.md): the annotations, the
    /// appended files as it writes them, and the 2.2 document of the config with them.
    #[test]
    fn same_files_as_the_machine_config_server() {
        let fixtures = include_str!("../../../../../tests/mcs_fixtures/node_files.jsonl");
        let mut n = 0;
        for line in fixtures.lines() {
            let rec: serde_json::Value = serde_json::from_str(line).unwrap();
            let name = rec["name"].as_str().unwrap();
            let o = OpenShift {
                kubeconfig: rec["kubeconfig"].as_str().map(|k| k.as_bytes().to_vec()),
                config_names: BTreeMap::new(),
            };
            assert_eq!(annotations_json(name), rec["annotations"].as_str().unwrap());
            let ours = files(&o, "worker", name);
            let theirs = rec["files"].as_array().unwrap();
            assert_eq!(ours.len(), theirs.len(), "{line}");
            for (f, t) in ours.iter().zip(theirs) {
                // The MCS's File as it marshals it: path, overwrite, mode, contents.source.
                assert_eq!(f.path, t["path"].as_str().unwrap());
                assert_eq!(f.overwrite, t["overwrite"].as_bool());
                assert_eq!(f.mode, t["mode"].as_i64());
                assert_eq!(
                    f.contents.source.as_deref(),
                    t["contents"]["source"].as_str()
                );
                let mut keys: Vec<&String> = t.as_object().unwrap().keys().collect();
                keys.sort();
                assert_eq!(keys, ["contents", "mode", "overwrite", "path"]);
            }
            let text = serde_json::to_vec(&rec["config"]).unwrap();
            let c = spec::config::parse(&text).unwrap().config;
            let got = v22::to_json(&with_files(&c, &o, "worker", name));
            match (rec["v22"].as_str(), got) {
                (Some(want), Ok(got)) => assert_eq!(String::from_utf8(got).unwrap(), want),
                (None, Err(_)) => {}
                (Some(_), Err(e)) => assert!(
                    [
                        "files without contents",
                        "partitions to delete",
                        "wiping partition"
                    ]
                    .iter()
                    .any(|d| e.contains(d)),
                    "{e}"
                ),
                (None, Ok(_)) => panic!("the converter refuses {line}"),
            }
            n += 1;
        }
        assert!(n >= 50, "{n}");
    }

    #[test]
    fn percent_encoding_and_names() {
        assert_eq!(data_url(b"a b/\n%~*'()!"), "data:,a%20b%2F%0A%25~*'()!");
        assert_eq!(data_url("é".as_bytes()), "data:,%C3%A9");
        assert_eq!(
            parse_config_name("worker=rendered-worker-1a2b"),
            Ok(("worker".into(), "rendered-worker-1a2b".into()))
        );
        for bad in [
            "worker",
            "=x",
            "worker=Rendered",
            "worker=-x",
            "worker=a_b",
            "worker=",
        ] {
            assert!(parse_config_name(bad).is_err(), "{bad}");
        }
        let o = OpenShift {
            kubeconfig: None,
            config_names: [("worker".to_string(), "rendered-worker-9".to_string())].into(),
        };
        let f = &files(&o, "worker", "worker-0011")[0];
        assert!(
            f.contents
                .source
                .as_deref()
                .unwrap()
                .contains("rendered-worker-9")
        );
        assert!(
            files(&o, "infra", "infra-0011")[0]
                .contents
                .source
                .as_deref()
                .unwrap()
                .contains("infra-0011")
        );
    }
}
