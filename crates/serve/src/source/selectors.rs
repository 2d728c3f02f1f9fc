//! Machines of the source (`machines/<name>.json`) and their boot profiles
//! (`boot/<pool>.json`, `boot/default.json`): parsed, checked and matched (docs/serve.md,
//! "Machines and network boot").
//!
//! A machine file is one selector, the pool it puts the machines it matches in, and the
//! values that fill that pool's placeholders for them:
//!
//! ```json
//! {"selector": {"mac": "52:54:00:12:34:01"}, "pool": "worker",
//!  "values": {"hostname": "node-1", "ip": "10.0.0.5"}}
//! ```
//!
//! Selector keys: `mac`, `uuid`, `serial`, `hostname`, `labels` (an object). A machine
//! matches when every key given matches; the match with the most keys wins (each label is a
//! key). Two selectors with the same keys that one machine could match both (the same values
//! where both have a key) are refused when the generation loads, naming both files: the
//! server never guesses at boot. Selectors with different keys but as many of them (a `mac`
//! one and a `uuid` one) can only be told apart by a machine that matches both: that machine
//! is refused at boot (`/ipxe` says so, the log names both files), never given either.
//!
//! These files say which machine is which; they prove nothing (a MAC or SMBIOS UUID is
//! whatever the machine says it is): see docs/serve.md, "What a selector proves".

use std::collections::BTreeMap;

use anyhow::{Result, anyhow, bail};
use serde_json::Value;

/// Machine files read at most (more is an error naming the limit).
pub const MAX_MACHINES: usize = 10_000;
/// Largest machine or boot profile file.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Longest value of a machine's `values`, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Longest selector string (serial, hostname, a label key or value).
pub const MAX_SELECTOR_BYTES: usize = 256;

/// What a selector asks of a machine (normalized: MAC as `aa:bb:..`, UUID lower case).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Selector {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// What a booting machine says of itself (`/ipxe`'s query), normalized like a [`Selector`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    pub mac: Option<String>,
    pub uuid: Option<String>,
    pub serial: Option<String>,
    pub hostname: Option<String>,
    pub labels: BTreeMap<String, String>,
}

impl Facts {
    /// The machine's id in the inventory, the way the agent computes it for its reports
    /// (docs/reports.md): the SMBIOS UUID unless it is unset, all zeros or all `f`, else
    /// `mac-` and the MAC.
    pub fn machine_id(&self) -> Option<String> {
        if let Some(u) = &self.uuid {
            let hex: String = u.chars().filter(|c| *c != '-').collect();
            if !hex.is_empty() && !hex.chars().all(|c| c == '0') && !hex.chars().all(|c| c == 'f') {
                return Some(u.clone());
            }
        }
        self.mac.as_ref().map(|m| format!("mac-{m}"))
    }
}

/// One machine file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSpec {
    /// The file's stem (`machines/<name>.json`).
    pub name: String,
    pub selector: Selector,
    pub pool: String,
    /// The values its pool's placeholders take (numbers and booleans as their JSON text).
    pub values: BTreeMap<String, String>,
}

impl MachineSpec {
    /// The file, as errors name it.
    pub fn file(&self) -> String {
        format!("machines/{}.json", self.name)
    }

    /// How specific the selector is: its keys, each label one.
    pub fn specificity(&self) -> usize {
        let s = &self.selector;
        [&s.mac, &s.uuid, &s.serial, &s.hostname]
            .iter()
            .filter(|k| k.is_some())
            .count()
            + s.labels.len()
    }

    fn key_set(&self) -> (bool, bool, bool, bool, Vec<&String>) {
        let s = &self.selector;
        (
            s.mac.is_some(),
            s.uuid.is_some(),
            s.serial.is_some(),
            s.hostname.is_some(),
            s.labels.keys().collect(),
        )
    }

    /// Whether `f` is a machine this selector takes.
    pub fn matches(&self, f: &Facts) -> bool {
        let s = &self.selector;
        let one = |want: &Option<String>, got: &Option<String>| match want {
            None => true,
            Some(w) => got.as_ref() == Some(w),
        };
        one(&s.mac, &f.mac)
            && one(&s.uuid, &f.uuid)
            && one(&s.serial, &f.serial)
            && one(&s.hostname, &f.hostname)
            && s.labels.iter().all(|(k, v)| f.labels.get(k) == Some(v))
    }

    /// Whether one machine could match both (the same value wherever both have a key).
    fn compatible(&self, o: &MachineSpec) -> bool {
        let (a, b) = (&self.selector, &o.selector);
        let one = |x: &Option<String>, y: &Option<String>| match (x, y) {
            (Some(x), Some(y)) => x == y,
            _ => true,
        };
        one(&a.mac, &b.mac)
            && one(&a.uuid, &b.uuid)
            && one(&a.serial, &b.serial)
            && one(&a.hostname, &b.hostname)
            && a.labels
                .iter()
                .all(|(k, v)| b.labels.get(k).is_none_or(|w| w == v))
    }
}

/// A pool's boot profile: the kernel, the initramfs images, the kernel arguments, how many
/// config fetches a boot token allows (`tokenUses`), and the install the live system makes
/// (`install`, [`crate::source::install`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BootProfile {
    pub kernel: String,
    pub initrd: Vec<String>,
    pub args: Vec<String>,
    #[serde(rename = "tokenUses", skip_serializing_if = "is_one")]
    pub token_uses: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install: Option<crate::source::install::Install>,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// The placeholder of a profile's `args` that the machine's config URL (with its boot
/// token) fills at `/ipxe`; without it the URL goes last, as `agent.config.url=` (or
/// `coreos.inst.ignition_url=` with an `install` section).
pub const CONFIG_URL: &str = "config_url";

/// The most uses a boot profile's `tokenUses` may give a boot token.
pub const MAX_TOKEN_USES: u32 = 10;

/// Normalizes a MAC: `aa:bb:cc:dd:ee:ff` from colons or hyphens, any case.
pub fn normalize_mac(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6
        || !parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return None;
    }
    Some(parts.join(":").to_ascii_lowercase())
}

/// Normalizes an SMBIOS UUID: 36 characters of hex and hyphens (8-4-4-4-12), lower case.
pub fn normalize_uuid(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let ok = b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        });
    ok.then(|| s.to_ascii_lowercase())
}

/// A placeholder key (`{{.key}}`): a letter or `_`, then letters, digits and `_`, at most
/// 64 bytes.
pub fn valid_key(k: &str) -> bool {
    let b = k.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

fn plain_string(file: &str, what: &str, v: &Value) -> Result<String> {
    let Some(s) = v.as_str() else {
        bail!("{file}: {what} must be a string");
    };
    if s.is_empty() || s.len() > MAX_SELECTOR_BYTES || s.chars().any(|c| c.is_control()) {
        bail!("{file}: {what} must be 1 to {MAX_SELECTOR_BYTES} bytes without control characters");
    }
    Ok(s.to_string())
}

/// `bytes` parsed as a JSON object with no keys but `keys`; errors name `file` and never
/// quote it.
fn object(file: &str, bytes: &[u8], keys: &[&str]) -> Result<Value> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        anyhow!(
            "{file}: invalid JSON at line {} col {}: {}",
            e.line(),
            e.column(),
            crate::source::reading::redact(&e.to_string())
        )
    })?;
    let Some(o) = v.as_object() else {
        bail!("{file}: must be a JSON object with {}", keys.join(", "));
    };
    if let Some(k) = o.keys().find(|k| !keys.contains(&k.as_str())) {
        bail!(
            "{file}: unknown key {:?} ({})",
            crate::source::reading::redact(k),
            keys.join(", ")
        );
    }
    Ok(v)
}

/// The JSON text of each of a machine file's `values` (the file parsed once more, its
/// values kept as written); empty when that fails (the file was checked already: it does
/// not).
fn number_texts(bytes: &[u8]) -> BTreeMap<String, Box<serde_json::value::RawValue>> {
    #[derive(serde::Deserialize)]
    struct Raw {
        #[serde(default)]
        values: BTreeMap<String, Box<serde_json::value::RawValue>>,
    }
    serde_json::from_slice::<Raw>(bytes)
        .map(|r| r.values)
        .unwrap_or_default()
}

/// Parses and checks the machine file `machines/<name>.json`.
pub fn parse_machine(name: &str, bytes: &[u8]) -> Result<MachineSpec> {
    let file = format!("machines/{name}.json");
    if !crate::source::reading::valid_pool_name(name) {
        bail!("{file}: invalid machine file name (letters, digits, '.', '_', '-')");
    }
    let v = object(&file, bytes, &["selector", "pool", "values"])?;
    let o = v.as_object().expect("checked");
    let mut sel = Selector::default();
    let Some(so) = o.get("selector").and_then(Value::as_object) else {
        bail!("{file}: $.selector must be an object (mac, uuid, serial, hostname, labels)");
    };
    for (k, v) in so {
        let at = format!("$.selector.{k}");
        match k.as_str() {
            "mac" => {
                let s = plain_string(&file, &at, v)?;
                sel.mac = Some(normalize_mac(&s).ok_or_else(|| {
                    anyhow!("{file}: {at} is not a MAC address (aa:bb:cc:dd:ee:ff or aa-bb-..)")
                })?);
            }
            "uuid" => {
                let s = plain_string(&file, &at, v)?;
                sel.uuid = Some(normalize_uuid(&s).ok_or_else(|| {
                    anyhow!("{file}: {at} is not an SMBIOS UUID (8-4-4-4-12 hex digits)")
                })?);
            }
            "serial" => sel.serial = Some(plain_string(&file, &at, v)?),
            "hostname" => sel.hostname = Some(plain_string(&file, &at, v)?.to_ascii_lowercase()),
            "labels" => {
                let Some(lo) = v.as_object() else {
                    bail!("{file}: {at} must be an object of strings");
                };
                for (lk, lv) in lo {
                    if !valid_key(lk) {
                        bail!("{file}: {at}: label names are letters, digits and '_' (at most 64)");
                    }
                    sel.labels
                        .insert(lk.clone(), plain_string(&file, &format!("{at}.{lk}"), lv)?);
                }
            }
            _ => bail!(
                "{file}: unknown selector key {:?} (mac, uuid, serial, hostname, labels)",
                crate::source::reading::redact(k)
            ),
        }
    }
    let spec = MachineSpec {
        name: name.to_string(),
        selector: sel,
        pool: String::new(),
        values: BTreeMap::new(),
    };
    if spec.specificity() == 0 {
        bail!("{file}: $.selector is empty: it would match every machine");
    }
    let pool = match o.get("pool") {
        Some(Value::String(p)) if crate::source::reading::valid_pool_name(p) => p.clone(),
        Some(_) => bail!("{file}: $.pool must be a pool name"),
        None => bail!("{file}: $.pool is missing"),
    };
    let mut values = BTreeMap::new();
    match o.get("values") {
        None => {}
        Some(Value::Object(vo)) => {
            // Numbers as written in the file (`1e2`, `1.50`, a 23-digit integer), not as a
            // float prints: the JSON text of each value.
            let raw = number_texts(bytes);
            for (k, v) in vo {
                if !valid_key(k) {
                    bail!(
                        "{file}: $.values: {:?} is not a placeholder name (a letter or '_', then letters, digits and '_'; at most 64)",
                        crate::source::reading::redact(k)
                    );
                }
                let s = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => raw
                        .get(k)
                        .map_or_else(|| n.to_string(), |r| r.get().to_string()),
                    Value::Bool(b) => b.to_string(),
                    _ => bail!(
                        "{file}: $.values.{k} must be a string, a number or a boolean (it is placed inside a JSON string)"
                    ),
                };
                if s.len() > MAX_VALUE_BYTES {
                    bail!("{file}: $.values.{k} is longer than {MAX_VALUE_BYTES} bytes");
                }
                values.insert(k.clone(), s);
            }
        }
        Some(_) => bail!("{file}: $.values must be an object"),
    }
    Ok(MachineSpec {
        pool,
        values,
        ..spec
    })
}

/// Parses and checks a boot profile (`boot/<pool>.json`); `assets` are the files of
/// `boot/assets/` it may name.
pub fn parse_profile(
    file: &str,
    bytes: &[u8],
    assets: &dyn Fn(&str) -> bool,
) -> Result<BootProfile> {
    let v = object(
        file,
        bytes,
        &["kernel", "initrd", "args", "tokenUses", "install"],
    )?;
    let o = v.as_object().expect("checked");
    let asset = |at: &str, v: &Value| -> Result<String> {
        let Some(s) = v.as_str() else {
            bail!("{file}: {at} must be a file name in boot/assets/");
        };
        if !crate::source::reading::valid_asset_name(s) {
            bail!(
                "{file}: {at} must be a file name in boot/assets/ (no '/', not starting with '.')"
            );
        }
        if !assets(s) {
            bail!("{file}: {at}: boot/assets/{s} does not exist");
        }
        Ok(s.to_string())
    };
    let kernel = asset(
        "$.kernel",
        o.get("kernel")
            .ok_or_else(|| anyhow!("{file}: $.kernel is missing"))?,
    )?;
    let list = |k: &str| -> Result<Vec<Value>> {
        match o.get(k) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => Ok(a.clone()),
            Some(_) => bail!("{file}: $.{k} must be an array of strings"),
        }
    };
    let mut initrd = Vec::new();
    for (i, v) in list("initrd")?.iter().enumerate() {
        initrd.push(asset(&format!("$.initrd.{i}"), v)?);
    }
    let mut args = Vec::new();
    for (i, v) in list("args")?.iter().enumerate() {
        let Some(s) = v.as_str() else {
            bail!("{file}: $.args.{i} must be a string");
        };
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic()) {
            bail!("{file}: $.args.{i} must be one kernel argument: printable ASCII without spaces");
        }
        args.push(s.to_string());
    }
    let max = MAX_TOKEN_USES;
    let token_uses = match o.get("tokenUses") {
        None => 1,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=max as u64).contains(&n) => n as u32,
            _ => bail!("{file}: $.tokenUses must be a whole number from 1 to {max}"),
        },
    };
    let install = o
        .get("install")
        .map(|v| crate::source::install::parse(file, v, assets))
        .transpose()?;
    Ok(BootProfile {
        kernel,
        initrd,
        args,
        token_uses,
        install,
    })
}

/// Refuses two selectors one machine could match equally (module docs), naming both files.
pub fn check_conflicts(machines: &[MachineSpec]) -> Result<()> {
    // Grouped by key set: only selectors with the same keys are compared.
    let mut by_keys: BTreeMap<_, Vec<&MachineSpec>> = BTreeMap::new();
    for m in machines {
        by_keys.entry(m.key_set()).or_default().push(m);
    }
    for group in by_keys.values() {
        // Selectors with a MAC, UUID, serial or hostname: only those with the same value can
        // collide; bucket by it so a rack of a thousand MACs costs no million comparisons.
        let mut buckets: BTreeMap<Vec<Option<&String>>, Vec<&MachineSpec>> = BTreeMap::new();
        for m in group {
            let s = &m.selector;
            buckets
                .entry(vec![
                    s.mac.as_ref(),
                    s.uuid.as_ref(),
                    s.serial.as_ref(),
                    s.hostname.as_ref(),
                ])
                .or_default()
                .push(m);
        }
        for b in buckets.values() {
            for (i, a) in b.iter().enumerate() {
                for c in &b[i + 1..] {
                    if a.compatible(c) {
                        bail!(
                            "{} and {} select the same machines equally (the same selector keys and values): one of them must go or be more specific",
                            a.file(),
                            c.file()
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// What matching a machine gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Match<'a> {
    One(&'a MachineSpec),
    None,
    /// Two equally specific selectors with different keys (module docs): refused.
    Ambiguous(&'a MachineSpec, &'a MachineSpec),
}

/// The most specific machine file that takes `f`.
pub fn select<'a>(machines: &'a [MachineSpec], f: &Facts) -> Match<'a> {
    let mut best: Option<&MachineSpec> = None;
    let mut tie: Option<&MachineSpec> = None;
    for m in machines.iter().filter(|m| m.matches(f)) {
        match best {
            None => best = Some(m),
            Some(b) if m.specificity() > b.specificity() => {
                best = Some(m);
                tie = None;
            }
            Some(b) if m.specificity() == b.specificity() => tie = Some(m),
            Some(_) => {}
        }
    }
    match (best, tie) {
        (Some(b), Some(t)) => Match::Ambiguous(b, t),
        (Some(b), None) => Match::One(b),
        _ => Match::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, json: &str) -> MachineSpec {
        parse_machine(name, json.as_bytes()).unwrap()
    }

    #[test]
    fn parse_normalizes_and_refuses() {
        let a = m(
            "a",
            r#"{"selector":{"mac":"52-54-00-AB-cd-01","uuid":"4C4C4544-0042-3510-8052-B4C04F4E4D32"},"pool":"worker","values":{"hostname":"n1","idx":3,"on":true}}"#,
        );
        assert_eq!(a.selector.mac.as_deref(), Some("52:54:00:ab:cd:01"));
        assert_eq!(
            a.selector.uuid.as_deref(),
            Some("4c4c4544-0042-3510-8052-b4c04f4e4d32")
        );
        assert_eq!(a.values["idx"], "3");
        assert_eq!(a.values["on"], "true");
        assert_eq!(a.specificity(), 2);
        // Numbers keep their JSON text (a float would print 100.0, 1.5, 1.2345678901234568e22).
        let n = m(
            "n",
            "{\"selector\":{\"serial\":\"s\"},\"pool\":\"w\",\"values\":{\"e\": 1e2, \"big\":\n 12345678901234567890123 ,\"z\":-0.0,\"f\":1.50,\"neg\":-7,\"E\":2.5E-3}}",
        );
        for (k, want) in [
            ("e", "1e2"),
            ("big", "12345678901234567890123"),
            ("z", "-0.0"),
            ("f", "1.50"),
            ("neg", "-7"),
            ("E", "2.5E-3"),
        ] {
            assert_eq!(n.values[k], want, "{k}");
        }
        for (json, want) in [
            ("{", "machines/x.json: invalid JSON at line 1"),
            (r#"{"selector":{},"pool":"w"}"#, "$.selector is empty"),
            (
                r#"{"selector":{"mac":"zz"},"pool":"w"}"#,
                "$.selector.mac is not a MAC",
            ),
            (
                r#"{"selector":{"mac":"52:54:00:00:00:01"}}"#,
                "$.pool is missing",
            ),
            (
                r#"{"selector":{"rack":"1"},"pool":"w"}"#,
                "unknown selector key",
            ),
            (
                r#"{"selector":{"serial":"s"},"pool":"w","values":{"a":{"b":1}}}"#,
                "$.values.a must be a string, a number or a boolean",
            ),
            (
                r#"{"selector":{"serial":"s"},"pool":"w","values":{"a-b":"1"}}"#,
                "is not a placeholder name",
            ),
            (
                r#"{"selector":{"serial":"s"},"pool":"w","extra":1}"#,
                "unknown key",
            ),
        ] {
            let e = format!("{:#}", parse_machine("x", json.as_bytes()).unwrap_err());
            assert!(e.contains(want), "{json}: {e}");
        }
    }

    #[test]
    fn most_specific_wins_and_conflicts() {
        let mac = m(
            "a-mac",
            r#"{"selector":{"mac":"52:54:00:00:00:01"},"pool":"w"}"#,
        );
        let rack = m(
            "b-rack",
            r#"{"selector":{"labels":{"rack":"r1"}},"pool":"w"}"#,
        );
        let both = m(
            "c-both",
            r#"{"selector":{"mac":"52:54:00:00:00:01","labels":{"rack":"r1"}},"pool":"w"}"#,
        );
        let all = vec![mac.clone(), rack.clone(), both.clone()];
        check_conflicts(&all).unwrap();
        let mut f = Facts {
            mac: Some("52:54:00:00:00:01".into()),
            ..Default::default()
        };
        assert_eq!(select(&all, &f), Match::One(&all[0]));
        f.labels.insert("rack".into(), "r1".into());
        assert_eq!(select(&all, &f), Match::One(&all[2]), "two keys beat one");
        f.mac = Some("52:54:00:00:00:02".into());
        assert_eq!(select(&all, &f), Match::One(&all[1]));
        f.labels.clear();
        assert_eq!(select(&all, &f), Match::None);

        // The same MAC twice: refused at load, naming both files.
        let dup = m(
            "z-dup",
            r#"{"selector":{"mac":"52-54-00-00-00-01"},"pool":"x"}"#,
        );
        let e = check_conflicts(&[mac.clone(), dup])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("machines/a-mac.json") && e.contains("machines/z-dup.json"),
            "{e}"
        );
        // Different values of the same keys: no conflict.
        let other = m(
            "o",
            r#"{"selector":{"mac":"52:54:00:00:00:02"},"pool":"w"}"#,
        );
        check_conflicts(&[mac.clone(), other]).unwrap();
        // Equal specificity with different keys: refused at boot for a machine that has both.
        let uuid = m(
            "u",
            r#"{"selector":{"uuid":"00000000-0000-0000-0000-000000000001"},"pool":"w"}"#,
        );
        let two = vec![mac.clone(), uuid];
        check_conflicts(&two).unwrap();
        let f = Facts {
            mac: Some("52:54:00:00:00:01".into()),
            uuid: Some("00000000-0000-0000-0000-000000000001".into()),
            ..Default::default()
        };
        assert!(matches!(select(&two, &f), Match::Ambiguous(..)));
    }

    #[test]
    fn machine_ids_follow_the_agent() {
        let mut f = Facts {
            mac: Some("52:54:00:00:00:01".into()),
            uuid: Some("00000000-0000-0000-0000-000000000000".into()),
            ..Default::default()
        };
        assert_eq!(f.machine_id().as_deref(), Some("mac-52:54:00:00:00:01"));
        f.uuid = Some("4c4c4544-0042-3510-8052-b4c04f4e4d32".into());
        assert_eq!(
            f.machine_id().as_deref(),
            Some("4c4c4544-0042-3510-8052-b4c04f4e4d32")
        );
    }

    #[test]
    fn profiles() {
        let has = |s: &str| s == "vmlinuz" || s == "initrd.img";
        let p = parse_profile(
            "boot/w.json",
            br#"{"kernel":"vmlinuz","initrd":["initrd.img"],"args":["console=ttyS0"]}"#,
            &has,
        )
        .unwrap();
        assert_eq!(p.initrd, ["initrd.img"]);
        for (json, want) in [
            (r#"{"kernel":"nope"}"#, "boot/assets/nope does not exist"),
            (r#"{"kernel":"../x"}"#, "must be a file name"),
            (r#"{"kernel":"vmlinuz","args":["a b"]}"#, "without spaces"),
            (r#"{}"#, "$.kernel is missing"),
        ] {
            let e = parse_profile("boot/w.json", json.as_bytes(), &has)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{json}: {e}");
        }
    }
}
