//! A generation's machines: the machine files (`machines/*.json`, [`crate::source::selectors`]), the
//! boot profiles (`boot/*.json`), the boot assets (`boot/assets/`) and each machine's config,
//! its pool's with the machine's values filled in ([`crate::source::placeholders`]), checked when
//! the generation loads (docs/serve.md, "Machines and network boot").
//!
//! The rule for values: **every machine selected into a pool has a value for every
//! placeholder the pool's config uses**; a pool no machine file selects is served as it is
//! (its placeholders unfilled, as `/config/<pool>` always did). Errors name the file, the JSON
//! path and the machine; a machine's filled config is validated like any pool's.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use anyhow::{Result, anyhow, bail};
use sha2::{Digest, Sha256};

use crate::source::placeholders;
use crate::source::reading::{Fragment, redact_diag};
use crate::source::render::Pool;
use crate::source::selectors::{self, BootProfile, Facts, MachineSpec, Match};
use spec::config::{self, Config, Version};

/// Largest boot asset (kernel, initramfs); each is held in memory while served.
pub const MAX_ASSET_BYTES: u64 = 1 << 30;
/// Largest sum of a generation's boot assets (all of them are held in memory).
pub const MAX_ASSETS_TOTAL_BYTES: u64 = 4 << 30;

/// A file of `boot/assets/`: its bytes and strong ETag (as a config's: SHA-256, 128 bits).
#[derive(Debug)]
pub struct Asset {
    pub bytes: Arc<[u8]>,
    pub etag: String,
    /// Hex SHA-256 of the bytes (the generation id and the checkpoint use it).
    pub sha256: String,
}

impl Asset {
    pub fn new(bytes: Vec<u8>) -> Asset {
        let d = Sha256::digest(&bytes);
        Asset {
            etag: format!("\"{}\"", spec::encoding::hex(&d[..16])),
            sha256: spec::encoding::hex(&d),
            bytes: bytes.into(),
        }
    }
}

/// Assets kept from one read of the source to the next, by the file's identity (device,
/// inode, size, modification and change times): an unchanged kernel is not read again at
/// every poll. Entries the latest read did not use are dropped after it.
#[derive(Default)]
pub struct AssetCache {
    entries: HashMap<FileStamp, (Arc<Asset>, bool)>,
}

/// A file's identity and version: device, inode, size, modification and change times (s, ns).
type FileStamp = (u64, u64, u64, i64, i64, i64, i64);

impl AssetCache {
    pub fn begin(&mut self) {
        for e in self.entries.values_mut() {
            e.1 = false;
        }
    }

    pub fn end(&mut self) {
        self.entries.retain(|_, e| e.1);
    }

    /// The asset at `path` (a regular file, checked as every source file is).
    pub fn read(&mut self, path: &Path) -> Result<Arc<Asset>> {
        use std::os::unix::fs::MetadataExt;
        let f = crate::source::reading::open_regular(path)?;
        let m = f
            .metadata()
            .map_err(|e| anyhow!("reading {}: {e}", path.display()))?;
        let key = (
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        );
        if let Some(e) = self.entries.get_mut(&key) {
            e.1 = true;
            return Ok(e.0.clone());
        }
        drop(f);
        let bytes = crate::source::reading::read_regular(path, MAX_ASSET_BYTES)?
            .ok_or_else(|| anyhow!("{} vanished while being read", path.display()))?;
        let a = Arc::new(Asset::new(bytes));
        self.entries.insert(key, (a.clone(), true));
        Ok(a)
    }
}

/// What the source holds for machines, as read: file names and bytes.
#[derive(Debug, Default)]
pub struct RawMachines {
    /// `machines/<name>.json`: (name, bytes), by name.
    pub machines: Vec<(String, Vec<u8>)>,
    /// `boot/<pool>.json` and `boot/default.json`: (pool or `default`, bytes).
    pub profiles: Vec<(String, Vec<u8>)>,
    pub assets: BTreeMap<String, Arc<Asset>>,
}

/// A machine's config: its pool's with its values filled in, checked.
#[derive(Debug)]
pub struct MachineConfig {
    pub pool: String,
    pub config: Config,
    /// Its boot profile's kernel arguments with its values filled in.
    pub args: Vec<String>,
    /// Its documents, rendered when first asked for.
    served: OnceLock<Result<Arc<Pool>, String>>,
}

impl MachineConfig {
    /// The machine's documents (one per spec version, like a pool's), made once. (What
    /// could fail was checked when the generation loaded.)
    pub fn served(&self) -> Result<Arc<Pool>, String> {
        self.served
            .get_or_init(|| {
                Pool::new(&self.pool, self.config.clone())
                    .map(Arc::new)
                    .map_err(|e| format!("{e:#}"))
            })
            .clone()
    }
}

/// A generation's machines, ready to match and serve.
#[derive(Debug, Default)]
pub struct MachineSet {
    /// By name.
    pub specs: Vec<MachineSpec>,
    /// By pool (`default` for pools without their own).
    pub profiles: BTreeMap<String, BootProfile>,
    pub assets: BTreeMap<String, Arc<Asset>>,
    /// By machine name.
    pub configs: BTreeMap<String, MachineConfig>,
    /// [`MachineSet::record`], made once.
    record: OnceLock<(String, Vec<u8>)>,
}

/// What the checkpoint keeps of a machine set: the machine files and profiles as checked
/// (normalized), and the assets' hashes (the assets themselves are read back from the
/// generation's directory when it is still there).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    pub machines: BTreeMap<String, serde_json::Value>,
    pub profiles: BTreeMap<String, serde_json::Value>,
    pub assets: BTreeMap<String, String>,
}

impl MachineSet {
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty() && self.profiles.is_empty() && self.assets.is_empty()
    }

    /// The machine file that takes `f` (the most specific one).
    pub fn select(&self, f: &Facts) -> Match<'_> {
        selectors::select(&self.specs, f)
    }

    /// The boot profile of `pool`: its own, else `default`.
    pub fn profile(&self, pool: &str) -> Option<&BootProfile> {
        self.profiles
            .get(pool)
            .or_else(|| self.profiles.get("default"))
    }

    /// The machine file called `name`.
    pub fn spec(&self, name: &str) -> Option<&MachineSpec> {
        self.specs
            .binary_search_by(|s| s.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.specs[i])
    }

    /// What the checkpoint keeps, as the bytes of its file and their SHA-256 (hex), made
    /// once per set (a checkpoint is saved at every tick of the watcher).
    pub fn record(&self) -> &(String, Vec<u8>) {
        self.record.get_or_init(|| {
            let mut b = serde_json::to_vec_pretty(&self.saved()).unwrap_or_default();
            b.push(b'\n');
            (spec::encoding::hex(&Sha256::digest(&b)), b)
        })
    }

    /// What the checkpoint keeps (see [`Saved`]).
    pub fn saved(&self) -> Saved {
        Saved {
            machines: self
                .specs
                .iter()
                .map(|m| {
                    (
                        m.name.clone(),
                        serde_json::json!({"selector": m.selector, "pool": m.pool, "values": m.values}),
                    )
                })
                .collect(),
            profiles: self
                .profiles
                .iter()
                .map(|(k, p)| (k.clone(), serde_json::to_value(p).unwrap_or_default()))
                .collect(),
            assets: self
                .assets
                .iter()
                .map(|(k, a)| (k.clone(), a.sha256.clone()))
                .collect(),
        }
    }

    /// A machine set from what the checkpoint kept, with the assets of `assets_dir` that
    /// still hash as they did (the others are left out and named in the second value).
    pub fn restore(
        s: &Saved,
        pools: &BTreeMap<String, Arc<Pool>>,
        assets_dir: &Path,
    ) -> Result<(MachineSet, Vec<String>)> {
        let mut missing = Vec::new();
        let mut raw = RawMachines::default();
        let mut cache = AssetCache::default();
        for (name, sha) in &s.assets {
            if !crate::source::reading::valid_asset_name(name) {
                bail!("invalid asset name {name:?}");
            }
            match cache.read(&assets_dir.join(name)) {
                Ok(a) if &a.sha256 == sha => {
                    raw.assets.insert(name.clone(), a);
                }
                _ => missing.push(name.clone()),
            }
        }
        let have = |n: &str| s.assets.contains_key(n);
        for (name, v) in &s.machines {
            raw.machines.push((name.clone(), serde_json::to_vec(v)?));
        }
        for (name, v) in &s.profiles {
            raw.profiles.push((name.clone(), serde_json::to_vec(v)?));
        }
        let set = build_with(&raw, pools, None, &have).map_err(|e| anyhow!(e))?;
        Ok((set, missing))
    }
}

/// Machine `m`'s kernel arguments: its pool's boot profile's, each placeholder filled from
/// its values (every one needed, like the config's); a filled argument must still be one
/// argument (printable ASCII, no space), and hold nothing from a value that iPXE reads on
/// the `kernel` line ([`ipxe_meaning`]), or the generation is invalid.
fn machine_args(
    m: &MachineSpec,
    profiles: &BTreeMap<String, BootProfile>,
) -> Result<Vec<String>, String> {
    let (name, p) = match profiles.get_key_value(&m.pool) {
        Some(x) => x,
        None => profiles
            .get_key_value("default")
            .ok_or_else(|| format!("{}: pool {} has no boot profile", m.file(), m.pool))?,
    };
    let mut out = Vec::with_capacity(p.args.len());
    for (i, a) in p.args.iter().enumerate() {
        let at = || format!("boot/{name}.json: $.args.{i}");
        // The filled argument, and where each of its parts came from: (start, the value's
        // key, None for the profile's own text).
        let mut filled = String::with_capacity(a.len());
        let mut parts: Vec<(usize, Option<&str>)> = Vec::new();
        let mut last = 0;
        for (start, end, key) in placeholders::find(a) {
            // The config URL is the server's to fill at `/ipxe`: the profile's own text.
            if key == selectors::CONFIG_URL {
                continue;
            }
            let v = m.values.get(key).ok_or_else(|| {
                format!(
                    "{}: placeholder {{{{.{key}}}}}: machine {} ({}) has no value {key:?}",
                    at(),
                    m.name,
                    m.file()
                )
            })?;
            if last < start {
                parts.push((filled.len(), None));
                filled.push_str(&a[last..start]);
            }
            parts.push((filled.len(), Some(key)));
            filled.push_str(v);
            last = end;
        }
        if last < a.len() {
            parts.push((filled.len(), None));
            filled.push_str(&a[last..]);
        }
        if !filled.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "{} filled for machine {} ({}) is not one kernel argument (printable ASCII without spaces)",
                at(),
                m.name,
                m.file()
            ));
        }
        if let Some((key, what)) = ipxe_meaning(&filled, &parts) {
            let v = &m.values[key];
            let shown: String = v.chars().take(64).collect();
            return Err(format!(
                "{} filled for machine {} ({}): value {key:?} ({shown:?}{}) {what}: a value may not \
                 bring iPXE syntax into a kernel argument (iPXE has no escape for it)",
                at(),
                m.name,
                m.file(),
                if shown.len() < v.len() { "…" } else { "" }
            ));
        }
        out.push(filled);
    }
    Ok(out)
}

/// What iPXE would make of the value-filled parts of the argument `filled` on the script's
/// `kernel` line, if anything: (the value's key, what). `parts`: where each part of it came
/// from (start, the value's key; None: the profile's own text). iPXE splits the line at
/// spaces, ends the command at a word `||`, `&&` or `;`, ignores the rest of the line from a
/// word starting with `#`, and expands `${name}` (a setting: `${serial}` is what the machine
/// says its serial is, spaces and all) in each word before the kernel gets it. The profile's
/// own text may use all of that; a value may not: refused, never escaped (iPXE has none).
fn ipxe_meaning<'a>(filled: &str, parts: &[(usize, Option<&'a str>)]) -> Option<(&'a str, String)> {
    // The part holding byte `at` (the last of those starting there: an empty value holds
    // no byte).
    let part = |at: usize| parts.partition_point(|(start, _)| *start <= at) - 1;
    // A value among parts i..=j (the parts from byte to byte, empty values between included).
    let value_in = |i: usize, j: usize| parts[i..=j].iter().find_map(|(_, k)| *k);
    let b = filled.as_bytes();
    for at in 0..b.len().saturating_sub(1) {
        if b[at] == b'$'
            && b[at + 1] == b'{'
            && let Some(k) = value_in(part(at), part(at + 1))
        {
            return Some((
                k,
                "puts \"${\" in it, which iPXE expands (a setting such as ${serial}, which \
                 the machine says) before the kernel gets the argument"
                    .into(),
            ));
        }
    }
    if filled.starts_with('#')
        && let Some(k) = value_in(0, part(0))
    {
        return Some((
            k,
            "starts the argument with \"#\": iPXE ignores the rest of the kernel line from it \
             (the config URL included)"
                .into(),
        ));
    }
    let value_key = || parts.iter().find_map(|(_, k)| *k);
    if matches!(filled, "||" | "&&" | ";") {
        return value_key().map(|k| {
            (
                k,
                format!("makes the argument {filled:?}, which ends the iPXE command there"),
            )
        });
    }
    None
}

/// The file a pool's fragment came from, as errors name it.
fn fragment_file(pool: &str, frags: &[Fragment], name: &str) -> String {
    if frags.len() == 1 && name.strip_suffix(".ign").or(name.strip_suffix(".bu")) == Some(pool) {
        format!("pools/{name}")
    } else {
        format!("pools/{pool}/{name}")
    }
}

/// Checks and builds a generation's machine set from what was read (module docs). `fragments`
/// are the pools' files as read (for errors naming the file a placeholder is in).
pub fn build(
    raw: &RawMachines,
    pools: &BTreeMap<String, Arc<Pool>>,
    fragments: &BTreeMap<String, Vec<Fragment>>,
) -> Result<MachineSet, String> {
    let have = |n: &str| raw.assets.contains_key(n);
    build_with(raw, pools, Some(fragments), &have)
}

/// The placeholders pool `m.pool` uses: (key, file, path), the first use of each, found in
/// its fragments as read (`fragments`) or, restored from a checkpoint, in its merged `doc`.
fn pool_uses(
    m: &MachineSpec,
    doc: &serde_json::Value,
    fragments: Option<&BTreeMap<String, Vec<Fragment>>>,
) -> Result<Vec<(String, String, String)>, String> {
    let mut found: Vec<(String, String, String)> = Vec::new();
    match fragments.and_then(|f| f.get(&m.pool)) {
        Some(frags) => {
            for (fname, bytes) in frags {
                let file = fragment_file(&m.pool, frags, fname);
                let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|err| {
                    format!(
                        "{file}: {}",
                        crate::source::reading::redact(&err.to_string())
                    )
                })?;
                let us = placeholders::scan(&v).map_err(|err| {
                    format!(
                        "{file}: {}: {} (machine {}, {})",
                        err.path,
                        err.message,
                        m.name,
                        m.file()
                    )
                })?;
                found.extend(us.into_iter().map(|u| (u.key, file.clone(), u.path)));
            }
        }
        // Restored from a checkpoint: the merged config is all there is.
        None => {
            let us = placeholders::scan(doc)
                .map_err(|err| format!("pool {}: {}: {}", m.pool, err.path, err.message))?;
            let file = format!("pool {}", m.pool);
            found.extend(us.into_iter().map(|u| (u.key, file.clone(), u.path)));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    found.retain(|(k, _, _)| seen.insert(k.clone()));
    Ok(found)
}

/// The boot profiles of `raw`, parsed (their assets checked with `have_asset`).
fn parse_profiles(
    raw: &RawMachines,
    have_asset: &dyn Fn(&str) -> bool,
) -> Result<BTreeMap<String, BootProfile>, String> {
    let e = |e: anyhow::Error| format!("{e:#}");
    let mut profiles = BTreeMap::new();
    for (name, bytes) in &raw.profiles {
        let file = format!("boot/{name}.json");
        profiles.insert(
            name.clone(),
            selectors::parse_profile(&file, bytes, have_asset).map_err(e)?,
        );
    }
    Ok(profiles)
}

fn build_with(
    raw: &RawMachines,
    pools: &BTreeMap<String, Arc<Pool>>,
    fragments: Option<&BTreeMap<String, Vec<Fragment>>>,
    have_asset: &dyn Fn(&str) -> bool,
) -> Result<MachineSet, String> {
    let e = |e: anyhow::Error| format!("{e:#}");
    if raw.machines.len() > selectors::MAX_MACHINES {
        return Err(format!(
            "machines/ holds {} files, more than the limit of {}",
            raw.machines.len(),
            selectors::MAX_MACHINES
        ));
    }
    let mut specs = Vec::with_capacity(raw.machines.len());
    for (name, bytes) in &raw.machines {
        specs.push(selectors::parse_machine(name, bytes).map_err(e)?);
    }
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    let profiles = parse_profiles(raw, have_asset)?;
    selectors::check_conflicts(&specs).map_err(e)?;
    // Placeholders each pool with machines uses: (key, file, path), the first use of each.
    let mut uses: BTreeMap<&str, Vec<(String, String, String)>> = BTreeMap::new();
    let mut canon: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
    for m in &specs {
        let Some(pool) = pools.get(&m.pool) else {
            return Err(format!(
                "{}: pool {:?} is not in the source (pools/)",
                m.file(),
                m.pool
            ));
        };
        if !profiles.contains_key(&m.pool) && !profiles.contains_key("default") {
            return Err(format!(
                "{}: pool {} has no boot profile (boot/{}.json or boot/default.json)",
                m.file(),
                m.pool,
                m.pool
            ));
        }
        if canon.contains_key(m.pool.as_str()) {
            continue;
        }
        let doc = pool
            .canonical()
            .and_then(|b| Ok(serde_json::from_slice::<serde_json::Value>(&b)?))
            .map_err(|err| format!("pool {}: {err:#}", m.pool))?;
        let found = pool_uses(m, &doc, fragments)?;
        uses.insert(&m.pool, found);
        canon.insert(&m.pool, doc);
    }
    let mut configs = BTreeMap::new();
    for m in &specs {
        for (key, file, path) in &uses[m.pool.as_str()] {
            if !m.values.contains_key(key) {
                return Err(format!(
                    "{file}: {path}: placeholder {{{{.{key}}}}}: machine {} ({}) has no value {key:?} (every machine of pool {} needs every value the pool uses)",
                    m.name,
                    m.file(),
                    m.pool
                ));
            }
        }
        let mut doc = canon[m.pool.as_str()].clone();
        placeholders::fill(&mut doc, &m.values).map_err(|err| {
            format!(
                "pool {}: {}: {} (machine {}, {})",
                m.pool,
                err.path,
                err.message,
                m.name,
                m.file()
            )
        })?;
        let bytes = serde_json::to_vec(&doc).map_err(|err| err.to_string())?;
        let bad = |what: String| {
            format!(
                "pool {} filled for machine {} ({}) is invalid: {what}",
                m.pool,
                m.name,
                m.file()
            )
        };
        let parsed = config::parse(&bytes)
            .map_err(|r| bad(r.errors().map(redact_diag).collect::<Vec<_>>().join("; ")))?;
        let report = config::check(&parsed.config);
        if report.has_errors() {
            return Err(bad(report
                .errors()
                .map(redact_diag)
                .collect::<Vec<_>>()
                .join("; ")));
        }
        // It must render like a pool's (every version that can express it).
        config::to_json(&parsed.config, Version::NEWEST).map_err(bad)?;
        let args = machine_args(m, &profiles)?;
        configs.insert(
            m.name.clone(),
            MachineConfig {
                pool: m.pool.clone(),
                config: parsed.config,
                args,
                served: OnceLock::new(),
            },
        );
    }
    Ok(MachineSet {
        specs,
        profiles,
        assets: raw.assets.clone(),
        configs,
        record: OnceLock::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, json: &str) -> (String, Arc<Pool>) {
        let c = config::parse(json.as_bytes()).unwrap().config;
        (name.to_string(), Arc::new(Pool::new(name, c).unwrap()))
    }

    fn raw(machines: &[(&str, &str)]) -> RawMachines {
        let mut r = RawMachines {
            machines: machines
                .iter()
                .map(|(n, j)| (n.to_string(), j.as_bytes().to_vec()))
                .collect(),
            profiles: vec![(
                "default".into(),
                br#"{"kernel":"k","args":["x={{.etcd_index}}"]}"#.to_vec(),
            )],
            ..Default::default()
        };
        r.assets
            .insert("k".into(), Arc::new(Asset::new(b"kernel".to_vec())));
        r
    }

    /// `etcd_index` is one value like any other: a machine file's fills it everywhere in
    /// the machine's config (and its kernel arguments), not only in units as `?etcd_index=`.
    #[test]
    fn etcd_index_is_a_value() {
        let master = r#"{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/etc/idx",
            "contents":{"source":"data:,%7B%7B.etcd_index%7D%7D"}}]},"systemd":{"units":[
            {"name":"etcd.service","contents":"[Service]\nExecStart=/bin/etcd --name etcd-{{.etcd_index}}\n"}]}}"#;
        let pools: BTreeMap<_, _> = [pool("master", master)].into_iter().collect();
        let set = build(
            &raw(&[(
                "m2",
                r#"{"selector":{"serial":"S2"},"pool":"master","values":{"etcd_index":2}}"#,
            )]),
            &pools,
            &BTreeMap::new(),
        )
        .unwrap();
        let m = &set.configs["m2"];
        assert_eq!(m.args, ["x=2"]);
        let doc = m.served().unwrap().render(0, None).unwrap();
        let text = String::from_utf8(doc.body.to_vec()).unwrap();
        assert!(text.contains("--name etcd-2"), "{text}");
        assert!(
            text.contains("data:;base64,Mg=="),
            "the file holds 2: {text}"
        );
        // The pool itself, served as /config/master?etcd_index=5, is unchanged.
        let five = pools["master"].render(0, Some(5)).unwrap();
        let five = String::from_utf8(five.body.to_vec()).unwrap();
        assert!(five.contains("--name etcd-5") && five.contains("%7B%7B.etcd_index%7D%7D"));
        // A machine without the value: refused, naming the pool, path and machine.
        let e = build(
            &raw(&[("m3", r#"{"selector":{"serial":"S3"},"pool":"master"}"#)]),
            &pools,
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert!(
            e.contains("$.storage.files.0.contents.source: placeholder {{.etcd_index}}")
                && e.contains("machine m3 (machines/m3.json)"),
            "{e}"
        );
    }

    /// A value never brings iPXE syntax into a kernel argument: `${` (which iPXE expands
    /// before the kernel gets the argument), a leading `#` (the rest of the line ignored),
    /// a whole `||`, `&&` or `;` (the command ends): refused, naming the machine file, the
    /// value and the profile's argument. The profile's own text may hold them; a value may
    /// hold `$` or `{` alone.
    #[test]
    fn values_bring_no_ipxe_syntax() {
        let profile = |args: &[&str]| -> BTreeMap<String, BootProfile> {
            [(
                "default".to_string(),
                BootProfile {
                    kernel: "k".into(),
                    initrd: vec![],
                    args: args.iter().map(|a| a.to_string()).collect(),
                    token_uses: 1,
                    install: None,
                },
            )]
            .into_iter()
            .collect()
        };
        let spec = |v: &str| {
            selectors::parse_machine(
                "n1",
                serde_json::json!({"selector": {"serial": "S"}, "pool": "w",
                    "values": {"v": v, "e": ""}})
                .to_string()
                .as_bytes(),
            )
            .unwrap()
        };
        for (arg, value, refused) in [
            ("x={{.v}}", "${serial}", Some("\"${\"")),
            ("x={{.v}}", "a${net0/ip}b", Some("\"${\"")),
            ("x={{.v}}{a}", "$", Some("\"${\"")),
            ("x=${{.v}}", "{a}", Some("\"${\"")),
            ("x=${{.e}}{a}", "1", Some("\"${\"")),
            ("{{.v}}", "#", Some("\"#\"")),
            ("{{.e}}#x", "1", Some("\"#\"")),
            ("{{.v}}", "||", Some("ends the iPXE command")),
            ("{{.v}}", ";", Some("ends the iPXE command")),
            ("{{.v}}&", "&", Some("ends the iPXE command")),
            // The profile's own text, and values without iPXE syntax: as they are.
            ("ip=${net0/ip}:{{.v}}", "10.0.0.5", None),
            ("x={{.v}}", "$5{", None),
            ("x={{.v}}", "a#b;c||d", None),
            ("#{{.v}}", "x", None),
            ("x=$", "y", None),
        ] {
            let got = machine_args(&spec(value), &profile(&["console=ttyS0", arg]));
            match refused {
                None => assert_eq!(
                    got,
                    Ok(vec![
                        "console=ttyS0".to_string(),
                        arg.replace("{{.v}}", value).replace("{{.e}}", "")
                    ]),
                    "{arg} {value}"
                ),
                Some(want) => {
                    let e = got.expect_err(arg);
                    for w in [
                        want,
                        "boot/default.json: $.args.1 filled for machine n1 (machines/n1.json)",
                        "a value may not bring iPXE syntax",
                    ] {
                        assert!(e.contains(w), "{arg} {value}: {w:?} in {e}");
                    }
                    let key = if arg.contains("{{.e}}") { "e" } else { "v" };
                    assert!(e.contains(&format!("value {key:?}")), "{e}");
                }
            }
        }
    }

    /// What the checkpoint keeps gives the same machine set back.
    #[test]
    fn saved_and_restored() {
        let pools: BTreeMap<_, _> = [pool(
            "w",
            r#"{"ignition":{"version":"3.0.0"},"systemd":{"units":[{"name":"a.service","contents":"{{.etcd_index}}"}]}}"#,
        )]
        .into_iter()
        .collect();
        let set = build(
            &raw(&[(
                "a",
                r#"{"selector":{"mac":"52-54-00-00-00-0A"},"pool":"w","values":{"etcd_index":"7"}}"#,
            )]),
            &pools,
            &BTreeMap::new(),
        )
        .unwrap();
        let dir = runtime::util::TestDir::new("machines-restore");
        std::fs::write(dir.0.join("k"), b"kernel").unwrap();
        let (back, missing) = MachineSet::restore(&set.saved(), &pools, &dir.0).unwrap();
        assert!(missing.is_empty());
        assert_eq!(back.specs, set.specs);
        assert_eq!(back.saved(), set.saved());
        assert_eq!(
            back.configs["a"]
                .served()
                .unwrap()
                .render(3, None)
                .unwrap()
                .body,
            set.configs["a"]
                .served()
                .unwrap()
                .render(3, None)
                .unwrap()
                .body
        );
        std::fs::write(dir.0.join("k"), b"changed").unwrap();
        let (back, missing) = MachineSet::restore(&set.saved(), &pools, &dir.0).unwrap();
        assert_eq!(missing, ["k"]);
        assert!(back.assets.is_empty());
    }
}
