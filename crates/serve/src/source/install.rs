//! A boot profile's `install` section (docs/serve.md, "Installing from a boot profile"):
//! the OS image a network-booted live system writes to a disk, checked when the generation
//! loads and rendered into kernel arguments at `/ipxe`: coreos-installer's
//! (`coreos.inst.*`) where they mean the same, the agent's (`agent.install.*`) for the rest,
//! which `agent install --from-kargs` reads.
//!
//! ```json
//! {"kernel": "vmlinuz", "initrd": ["initramfs.img"], "tokenUses": 1,
//!  "install": {"image": "os.raw.xz", "hash": "sha256-…", "disk": {"transport": "nvme"}}}
//! ```

use anyhow::{Result, bail};
use serde_json::Value;

/// Where the image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A file of `boot/assets/`, fetched from the server's `/assets/`.
    Asset(String),
    /// Any URL `agent install` fetches.
    Url(String),
}

/// Which disk it goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disk {
    /// `coreos.inst.install_dev=`: a device name or path.
    Device(String),
    /// `agent.install.disk.<prop>=`: the selector of `agent install --disk-*`, as (property,
    /// value) in the order of [`SELECTOR`].
    Selector(Vec<(&'static str, String)>),
}

/// The selector's properties: the profile's key, the kernel argument's name, and what a
/// value must be.
const SELECTOR: [(&str, &str, Kind); 8] = [
    ("sizeMin", "size_min", Kind::Size),
    ("sizeMax", "size_max", Kind::Size),
    ("model", "model", Kind::Glob),
    ("serial", "serial", Kind::Glob),
    ("wwn", "wwn", Kind::Glob),
    ("transport", "transport", Kind::Transport),
    ("rotational", "rotational", Kind::YesNo),
    ("removable", "removable", Kind::YesNo),
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Size,
    Glob,
    Transport,
    YesNo,
}

/// The transports `agent install --disk-transport` knows.
const TRANSPORTS: [&str; 6] = ["nvme", "sata", "scsi", "virtio", "usb", "loop"];

/// A profile's `install` section, checked; serialized as the profile has it (the
/// checkpoint keeps profiles so and parses them again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    pub image: Image,
    /// `sha256-HEX` / `sha512-HEX` of the image as fetched.
    pub hash: Option<String>,
    /// A minisign public key (its base64 line): the image's signature must be good.
    pub signature_key: Option<String>,
    pub insecure: bool,
    pub disk: Disk,
    pub overwrite: bool,
    pub skip_reboot: bool,
}

/// Whether `s` can stand in a kernel argument on iPXE's `kernel` line as it is: printable
/// ASCII without spaces, nothing iPXE expands or cuts the line at.
fn karg_safe(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 1024
        && s.bytes().all(|b| b.is_ascii_graphic())
        && !s.contains("${")
        && !s.starts_with('#')
        && !matches!(s, "||" | "&&" | ";")
}

/// A hash in Ignition's syntax: `sha256-` and 64 hex digits, or `sha512-` and 128.
fn valid_hash(s: &str) -> bool {
    let hex = |h: &str, n: usize| h.len() == n && h.bytes().all(|b| b.is_ascii_hexdigit());
    s.strip_prefix("sha256-").is_some_and(|h| hex(h, 64))
        || s.strip_prefix("sha512-").is_some_and(|h| hex(h, 128))
}

/// A size as `agent install` takes it: bytes, or a number with K, M, G or T.
fn valid_size(s: &str) -> bool {
    let digits = s.trim_end_matches(['K', 'M', 'G', 'T']);
    !digits.is_empty()
        && digits.len() + 1 >= s.len()
        && digits.len() <= 19
        && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Parses and checks `$.install` of boot profile `file`; `assets` are the files of
/// `boot/assets/` it may name.
pub fn parse(file: &str, v: &Value, assets: &dyn Fn(&str) -> bool) -> Result<Install> {
    let at = "$.install";
    let Some(o) = v.as_object() else {
        bail!("{file}: {at} must be an object");
    };
    const KEYS: [&str; 8] = [
        "image",
        "imageUrl",
        "hash",
        "signatureKey",
        "insecure",
        "disk",
        "overwrite",
        "skipReboot",
    ];
    if let Some(k) = o.keys().find(|k| !KEYS.contains(&k.as_str())) {
        bail!(
            "{file}: {at}: unknown key {:?} ({})",
            crate::source::reading::redact(k),
            KEYS.join(", ")
        );
    }
    let text = |k: &str| -> Result<Option<String>> {
        match o.get(k) {
            None => Ok(None),
            Some(Value::String(s)) if karg_safe(s) => Ok(Some(s.clone())),
            Some(_) => bail!(
                "{file}: {at}.{k} must be a string that can stand in a kernel argument (printable ASCII without spaces, no \"${{\")"
            ),
        }
    };
    let flag = |k: &str| -> Result<bool> {
        match o.get(k) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => bail!("{file}: {at}.{k} must be true or false"),
        }
    };
    let image = match (text("image")?, text("imageUrl")?) {
        (Some(a), None) => {
            if !crate::source::reading::valid_asset_name(&a) || !assets(&a) {
                bail!(
                    "{file}: {at}.image: boot/assets/{a} does not exist (a file name in boot/assets/)"
                );
            }
            Image::Asset(a)
        }
        (None, Some(u)) => {
            if !u.contains("://") && !u.starts_with("data:") {
                bail!("{file}: {at}.imageUrl must be a URL (http, https, tftp, s3, gs, data)");
            }
            Image::Url(u)
        }
        _ => bail!("{file}: {at} needs one of image (a file of boot/assets/) or imageUrl"),
    };
    let hash = text("hash")?;
    if hash.as_deref().is_some_and(|h| !valid_hash(h)) {
        bail!("{file}: {at}.hash must be sha256-<64 hex digits> or sha512-<128 hex digits>");
    }
    let signature_key = text("signatureKey")?;
    let insecure = flag("insecure")?;
    if hash.is_none() && signature_key.is_none() && !insecure {
        bail!(
            "{file}: {at}: the image would not be verified: give hash or signatureKey, or insecure: true to write it unverified"
        );
    }
    if let (Some(_), Image::Asset(a)) = (&signature_key, &image)
        && !assets(&format!("{a}.minisig"))
    {
        bail!("{file}: {at}.signatureKey: the signature boot/assets/{a}.minisig does not exist");
    }
    let disk = parse_disk(file, o.get("disk"))?;
    Ok(Install {
        image,
        hash,
        signature_key,
        insecure,
        disk,
        overwrite: flag("overwrite")?,
        skip_reboot: flag("skipReboot")?,
    })
}

fn parse_disk(file: &str, v: Option<&Value>) -> Result<Disk> {
    let at = "$.install.disk";
    let keys = || {
        let mut k = vec!["device"];
        k.extend(SELECTOR.iter().map(|s| s.0));
        k.join(", ")
    };
    let Some(o) = v.and_then(Value::as_object) else {
        bail!(
            "{file}: {at} must be an object: device, or the selector ({})",
            keys()
        );
    };
    if let Some(k) = o
        .keys()
        .find(|k| *k != "device" && !SELECTOR.iter().any(|s| s.0 == k.as_str()))
    {
        bail!(
            "{file}: {at}: unknown key {:?} ({})",
            crate::source::reading::redact(k),
            keys()
        );
    }
    if let Some(d) = o.get("device") {
        if o.len() > 1 {
            bail!("{file}: {at}: give device or the selector, not both");
        }
        return match d.as_str() {
            Some(s) if karg_safe(s) => Ok(Disk::Device(s.to_string())),
            _ => {
                bail!("{file}: {at}.device must be a device name or path (sda, /dev/disk/by-id/…)")
            }
        };
    }
    let mut sel = Vec::new();
    for (key, karg, kind) in SELECTOR {
        let Some(v) = o.get(key) else { continue };
        let value = match (kind, v) {
            (Kind::YesNo, Value::Bool(b)) => Some(if *b { "yes" } else { "no" }.to_string()),
            (Kind::Size, Value::Number(n)) => n.as_u64().map(|n| n.to_string()),
            (Kind::Size, Value::String(s)) if valid_size(s) => Some(s.clone()),
            (Kind::Glob, Value::String(s)) if karg_safe(s) => Some(s.clone()),
            (Kind::Transport, Value::String(s)) if TRANSPORTS.contains(&s.as_str()) => {
                Some(s.clone())
            }
            _ => None,
        };
        let Some(value) = value else {
            let what = match kind {
                Kind::Size => "a size (bytes, or a number with K, M, G or T)".to_string(),
                Kind::Glob => "a glob without spaces".to_string(),
                Kind::Transport => format!("one of {}", TRANSPORTS.join(", ")),
                Kind::YesNo => "true or false".to_string(),
            };
            bail!("{file}: {at}.{key} must be {what}");
        };
        sel.push((karg, value));
    }
    if sel.is_empty() {
        bail!(
            "{file}: {at} is empty: give device or the selector ({})",
            keys()
        );
    }
    Ok(Disk::Selector(sel))
}

impl serde::Serialize for Install {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut o = serde_json::Map::new();
        match &self.image {
            Image::Asset(a) => o.insert("image".into(), a.clone().into()),
            Image::Url(u) => o.insert("imageUrl".into(), u.clone().into()),
        };
        if let Some(h) = &self.hash {
            o.insert("hash".into(), h.clone().into());
        }
        if let Some(k) = &self.signature_key {
            o.insert("signatureKey".into(), k.clone().into());
        }
        let mut d = serde_json::Map::new();
        match &self.disk {
            Disk::Device(dev) => {
                d.insert("device".into(), dev.clone().into());
            }
            Disk::Selector(sel) => {
                for (karg, v) in sel {
                    let Some((key, _, kind)) = SELECTOR.iter().find(|x| x.1 == *karg) else {
                        continue;
                    };
                    let v: Value = match kind {
                        Kind::YesNo => (v == "yes").into(),
                        _ => v.clone().into(),
                    };
                    d.insert((*key).into(), v);
                }
            }
        }
        o.insert("disk".into(), d.into());
        for (k, b) in [
            ("insecure", self.insecure),
            ("overwrite", self.overwrite),
            ("skipReboot", self.skip_reboot),
        ] {
            if b {
                o.insert(k.into(), true.into());
            }
        }
        Value::Object(o).serialize(s)
    }
}

impl Install {
    /// The kernel arguments that ask the live system for this install; `base`: the URL the
    /// assets are served at; `config_url`: the machine's config URL, unless the profile
    /// places it elsewhere (`{{.config_url}}` in its `args`).
    pub fn kargs(&self, base: &str, config_url: Option<&str>) -> Vec<String> {
        let mut a = Vec::new();
        match &self.disk {
            Disk::Device(d) => a.push(format!("coreos.inst.install_dev={d}")),
            Disk::Selector(sel) => {
                for (k, v) in sel {
                    a.push(format!("agent.install.disk.{k}={v}"));
                }
            }
        }
        match &self.image {
            Image::Asset(f) => a.push(format!("coreos.inst.image_url={base}/assets/{f}")),
            Image::Url(u) => a.push(format!("coreos.inst.image_url={u}")),
        }
        if let Some(h) = &self.hash {
            a.push(format!("agent.install.image_hash={h}"));
        }
        if let Some(k) = &self.signature_key {
            a.push(format!("agent.install.image_key={k}"));
        }
        if let Some(u) = config_url {
            a.push(format!("coreos.inst.ignition_url={u}"));
        }
        if self.insecure {
            a.push("coreos.inst.insecure".into());
        }
        if self.overwrite {
            a.push("agent.install.overwrite".into());
        }
        if self.skip_reboot {
            a.push("coreos.inst.skip_reboot".into());
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(v: serde_json::Value) -> Result<Install> {
        parse("boot/default.json", &v, &|n| {
            matches!(n, "os.raw.xz" | "os.raw.xz.minisig")
        })
    }

    #[test]
    fn kargs_of_a_section() {
        let h = format!("sha256-{}", "ab".repeat(32));
        let i = parsed(serde_json::json!({
            "image": "os.raw.xz", "hash": h, "overwrite": true, "skipReboot": true,
            "disk": {"transport": "nvme", "sizeMin": "100G", "model": "Samsung*", "rotational": false},
        }))
        .unwrap();
        assert_eq!(
            i.kargs(
                "http://h:8080",
                Some("http://h:8080/machine-config?token=T")
            ),
            [
                "agent.install.disk.size_min=100G".to_string(),
                "agent.install.disk.model=Samsung*".into(),
                "agent.install.disk.transport=nvme".into(),
                "agent.install.disk.rotational=no".into(),
                "coreos.inst.image_url=http://h:8080/assets/os.raw.xz".into(),
                format!("agent.install.image_hash={h}"),
                "coreos.inst.ignition_url=http://h:8080/machine-config?token=T".into(),
                "agent.install.overwrite".into(),
                "coreos.inst.skip_reboot".into(),
            ]
        );
        let i = parsed(serde_json::json!({
            "imageUrl": "https://img/os.raw", "insecure": true, "disk": {"device": "sda"},
        }))
        .unwrap();
        assert_eq!(
            i.kargs("http://h", None),
            [
                "coreos.inst.install_dev=sda",
                "coreos.inst.image_url=https://img/os.raw",
                "coreos.inst.insecure"
            ]
        );
    }

    #[test]
    fn serialized_as_the_profile_has_it() {
        let v = serde_json::json!({
            "image": "os.raw.xz", "signatureKey": "RWQ", "skipReboot": true,
            "disk": {"transport": "nvme", "sizeMax": "2T", "rotational": true},
        });
        let i = parsed(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&i).unwrap(), v);
        assert_eq!(parsed(serde_json::to_value(&i).unwrap()).unwrap(), i);
    }

    #[test]
    fn refusals_name_the_value() {
        for (v, want) in [
            (
                serde_json::json!({"disk": {"device": "sda"}, "insecure": true}),
                "needs one of image",
            ),
            (
                serde_json::json!({"image": "nope", "insecure": true, "disk": {"device": "sda"}}),
                "boot/assets/nope does not exist",
            ),
            (
                serde_json::json!({"image": "os.raw.xz", "disk": {"device": "sda"}}),
                "would not be verified",
            ),
            (
                serde_json::json!({"image": "os.raw.xz", "hash": "md5-x", "disk": {"device": "sda"}}),
                "$.install.hash must be",
            ),
            (
                serde_json::json!({"image": "os.raw.xz", "insecure": true, "disk": {}}),
                "$.install.disk is empty",
            ),
            (
                serde_json::json!({"image": "os.raw.xz", "insecure": true, "disk": {"device": "sda", "wwn": "x"}}),
                "not both",
            ),
            (
                serde_json::json!({"image": "os.raw.xz", "insecure": true, "disk": {"transport": "ide"}}),
                "$.install.disk.transport must be one of nvme",
            ),
            (
                serde_json::json!({"image": "os.raw.xz", "insecure": true, "disk": {"model": "a b"}}),
                "$.install.disk.model must be a glob",
            ),
            (
                serde_json::json!({"image": "os.raw.xz", "insecure": true, "disk": {"sizeMin": "1X"}}),
                "$.install.disk.sizeMin must be a size",
            ),
            (
                serde_json::json!({"image": "os.raw.xz", "insecure": true, "disk": {"device": "${x}"}}),
                "$.install.disk.device must be",
            ),
            (
                serde_json::json!({"image": "os.raw.xz", "insecure": true, "disk": {"device": "sda"}, "x": 1}),
                "unknown key \"x\"",
            ),
            (
                serde_json::json!({"imageUrl": "https://i/os", "signatureKey": "RWQ", "disk": {"device": "sda"}}),
                "",
            ),
        ] {
            match parsed(v.clone()) {
                Ok(_) => assert!(want.is_empty(), "{v} was taken"),
                Err(e) => assert!(
                    !want.is_empty() && e.to_string().contains(want),
                    "{v}: {e} (want {want})"
                ),
            }
        }
        let e = parse("boot/default.json", &serde_json::json!({"image": "os.raw.xz", "signatureKey": "RWQ", "disk": {"device": "sda"}}), &|n| n == "os.raw.xz").unwrap_err();
        assert!(
            e.to_string()
                .contains("boot/assets/os.raw.xz.minisig does not exist"),
            "{e}"
        );
    }
}
