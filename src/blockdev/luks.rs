//! LUKS2 volumes with cryptsetup (and clevis for tang/tpm2/sss bindings): what is on the
//! device, whether to create, reuse or refuse (`decide`), the argv, the key material, and the
//! record of each opened volume (`apply`), which `carry_out` leaves in the state directory
//! (`crate::state`) for the disks stage and the files stage turns into `/etc/luks/<name>` and `/etc/crypttab`
//! (`crate::files::luks`). Nothing here writes into the target root.
//!
//! Rules (checked for every volume before any volume is touched):
//! - `/dev/mapper/<name>` already open on the configured device: reused as it is.
//! - nothing on the device: a new volume (`luksFormat --type luks2`).
//! - a LUKS volume, `wipeVolume` false: reused when its uuid/label match the config (where set)
//!   and it is not bound to clevis (its key file must open it, tested before anything is
//!   written); a clevis-bound volume is reused only when the config asks for clevis too (opened
//!   with `clevis luks unlock`). Anything else is refused.
//! - any other signature: refused unless `wipeVolume` (then wiped and formatted).
//!
//! Keys: the `keyFile` resource fetched through the fetcher, or 64 bytes from /dev/urandom (hex). Keys
//! go to cryptsetup on stdin only, never into an argv or a log line; `carry_out` keeps the
//! key of a volume not bound to clevis in the state directory for the files stage.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use super::devices::{Devices, block_device};
use super::{inuse, kernel, probe};
use crate::fetch::Fetcher;
use crate::state::{LuksRecord, StateDir};
use spec::config::types::Luks;

/// Where an open volume named `name` appears.
pub fn mapper_path(name: &str) -> PathBuf {
    PathBuf::from("/dev/mapper").join(name)
}

/// What is on a volume's device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Existing {
    /// blkid type ("crypto_LUKS", "ext4", ...).
    pub fstype: String,
    pub uuid: Option<String>,
    pub label: Option<String>,
    /// A LUKS header with a clevis token.
    pub clevis: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LuksAction {
    /// Already open on the configured device.
    Active,
    /// Reuse the existing volume: open it with the key file (`clevis`: with `clevis luks unlock`).
    Reuse { clevis: bool },
    /// Format a new volume; `wipe`: what is there first (wipeVolume).
    Create { wipe: Option<String> },
    /// The device is (re)created by the partitioning or an array: probed and decided afterwards.
    AfterPartitioning,
}

/// The volume rules: reuse, create, wipe, or refuse touching nothing.
pub fn decide(l: &Luks, found: Option<&Existing>) -> Result<LuksAction> {
    let name = &l.name;
    let dev = l.device.as_deref().unwrap_or("?");
    if l.cex.enabled == Some(true) {
        bail!("luks {name}: cex (IBM Z crypto express) is not supported on this platform");
    }
    let wipe = l.wipe_volume.unwrap_or(false);
    let Some(f) = found else {
        return Ok(LuksAction::Create { wipe: None });
    };
    if wipe {
        return Ok(LuksAction::Create {
            wipe: Some(f.fstype.clone()),
        });
    }
    if f.fstype != "crypto_LUKS" {
        bail!(
            "luks {name}: {dev} holds a {} signature and wipeVolume is false; refusing to \
             format it",
            f.fstype
        );
    }
    let mut why = Vec::new();
    if let Some(u) = &l.uuid
        && !f.uuid.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(u))
    {
        why.push(format!(
            "uuid {:?} != {u:?}",
            f.uuid.as_deref().unwrap_or("")
        ));
    }
    if let Some(lb) = &l.label
        && f.label.as_ref() != Some(lb)
    {
        why.push(format!(
            "label {:?} != {lb:?}",
            f.label.as_deref().unwrap_or("")
        ));
    }
    let want_clevis = l.clevis.is_bound();
    if f.clevis && !want_clevis {
        why.push("the volume is bound to clevis, the config has no clevis binding".into());
    }
    if !f.clevis && l.key_file.url().is_none() {
        why.push(
            "the config has no keyFile to open it with (a generated key cannot open an \
             existing volume)"
                .into(),
        );
    }
    if !why.is_empty() {
        bail!(
            "luks {name}: the existing LUKS volume on {dev} cannot be reused ({}) and \
             wipeVolume is false; refusing to touch it",
            why.join(", ")
        );
    }
    Ok(LuksAction::Reuse { clevis: f.clevis })
}

/// Reads what is on `dev` (blkid, plus the LUKS2 tokens for a clevis binding).
pub fn examine(dev: &Path) -> Result<Option<Existing>> {
    let Some(f) = probe::probe(dev)? else {
        return Ok(None);
    };
    let mut e = Existing {
        fstype: f.fstype,
        uuid: f.uuid,
        label: f.label,
        clevis: false,
    };
    if e.fstype == "crypto_LUKS" {
        let d = dev.display().to_string();
        let out = runtime::util::run("cryptsetup", &["luksDump", "--dump-json-metadata", &d]);
        // LUKS1 has no JSON metadata (and no tokens): not bound through tokens.
        if let Ok(out) = out {
            e.clevis = has_clevis_token(&out.stdout);
        }
    }
    Ok(Some(e))
}

/// Whether LUKS2 JSON metadata carries a clevis token.
pub fn has_clevis_token(json: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get("tokens").and_then(|t| t.as_object()).cloned())
        .is_some_and(|t| {
            t.values()
                .any(|x| x.get("type").and_then(|t| t.as_str()) == Some("clevis"))
        })
}

/// The device currently backing an open `/dev/mapper/<name>`, if it is open.
pub fn open_backing(name: &str) -> Result<Option<PathBuf>> {
    if !mapper_path(name).exists() {
        return Ok(None);
    }
    let out = runtime::util::run("cryptsetup", &["status", name])
        .with_context(|| format!("reading the state of {}", mapper_path(name).display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("device:"))
        .map(|d| PathBuf::from(d.trim()))
        .next())
}

/// Decides a volume from its device as it is now.
pub fn decide_now(l: &Luks) -> Result<LuksAction> {
    let d = l.device.as_deref().unwrap_or_default();
    let dev = block_device(d).with_context(|| format!("luks {}", l.name))?;
    if let Some(b) = open_backing(&l.name)? {
        let b = std::fs::canonicalize(&b).unwrap_or(b);
        if b != dev {
            bail!(
                "luks {}: {} is already open on {}, not on {d}; refusing to touch it",
                l.name,
                mapper_path(&l.name).display(),
                b.display()
            );
        }
        return Ok(LuksAction::Active);
    }
    decide(l, examine(&dev)?.as_ref())
}

/// The argv of `cryptsetup luksFormat` (the key comes on stdin).
pub fn format_args(l: &Luks, dev: &str) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "luksFormat".into(),
        "--type".into(),
        "luks2".into(),
        "--batch-mode".into(),
        "--key-file=-".into(),
    ];
    if let Some(lb) = &l.label {
        a.push("--label".into());
        a.push(lb.clone());
    }
    if let Some(u) = &l.uuid {
        a.push("--uuid".into());
        a.push(u.clone());
    }
    a.extend(l.options.iter().cloned());
    a.push(dev.into());
    a
}

/// The argv of `cryptsetup open` (the key comes on stdin).
pub fn open_args(l: &Luks, dev: &str) -> Vec<String> {
    let mut a: Vec<String> = vec!["open".into(), "--key-file=-".into()];
    if l.discard == Some(true) {
        a.push("--allow-discards".into());
    }
    a.extend(l.open_options.iter().cloned());
    a.push(dev.into());
    a.push(l.name.clone());
    a
}

/// The clevis pin and its JSON config for a binding: `sss` over tang servers and tpm2 (like
/// Ignition), or the custom pin as given.
pub fn clevis_pin(l: &Luks) -> Option<(String, String)> {
    let c = &l.clevis;
    if let (Some(pin), Some(cfg)) = (&c.custom.pin, &c.custom.config) {
        return Some((pin.clone(), cfg.clone()));
    }
    if !c.is_bound() {
        return None;
    }
    let mut pins = serde_json::Map::new();
    if !c.tang.is_empty() {
        let tangs: Vec<serde_json::Value> = c
            .tang
            .iter()
            .map(|t| {
                let mut o = serde_json::Map::new();
                o.insert("url".into(), t.url.clone().into());
                if let Some(th) = &t.thumbprint {
                    o.insert("thp".into(), th.clone().into());
                }
                if let Some(adv) = &t.advertisement
                    && let Ok(v) = serde_json::from_str::<serde_json::Value>(adv)
                {
                    o.insert("adv".into(), v);
                }
                serde_json::Value::Object(o)
            })
            .collect();
        pins.insert("tang".into(), tangs.into());
    }
    if c.tpm2 == Some(true) {
        pins.insert("tpm2".into(), serde_json::json!([{}]));
    }
    let cfg = serde_json::json!({ "t": c.threshold.unwrap_or(1), "pins": pins });
    Some(("sss".into(), cfg.to_string()))
}

/// The binding in words, for the plan and for errors: `sss (tpm2)`, `sss (tang http://t1,
/// tpm2; threshold 2)`, or the custom pin.
pub fn binding(l: &Luks) -> Option<String> {
    let (pin, _) = clevis_pin(l)?;
    let c = &l.clevis;
    if c.custom.pin.is_some() {
        return Some(pin);
    }
    let mut pins: Vec<String> = c.tang.iter().map(|t| format!("tang {}", t.url)).collect();
    if c.tpm2 == Some(true) {
        pins.push("tpm2".into());
    }
    let t = c.threshold.unwrap_or(1);
    let threshold = if pins.len() > 1 {
        format!("; threshold {t}")
    } else {
        String::new()
    };
    Some(format!("{pin} ({}{threshold})", pins.join(", ")))
}

/// Whether opening the volume needs the network (tang, or a custom pin that says so).
pub fn needs_network(l: &Luks) -> bool {
    !l.clevis.tang.is_empty() || l.clevis.custom.needs_network == Some(true)
}

/// A volume's key material (never logged).
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({} bytes)", self.0.len())
    }
}

impl Key {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// 64 random bytes from /dev/urandom, hex-encoded (128 characters, no newline): text, since
/// `clevis luks bind -k -` reads the key with the shell, which loses NUL bytes and newlines.
pub fn generate_key() -> Result<Key> {
    let mut k = vec![0u8; 64];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut k))
        .context("reading a key from /dev/urandom")?;
    Ok(Key(spec::encoding::hex(&k).into_bytes()))
}

/// The volume's key: the fetched keyFile, or a generated one (only for a new volume).
pub fn key_for(l: &Luks, fetcher: &Fetcher, create: bool) -> Result<Key> {
    if l.key_file.url().is_some() {
        let k = fetcher
            .fetch_bytes_as(&l.key_file, "key file")
            .with_context(|| format!("fetching the key file of luks {}", l.name))?;
        if k.is_empty() {
            bail!("luks {}: the key file is empty", l.name);
        }
        return Ok(Key(k));
    }
    if !create {
        bail!("luks {}: no key file to open the existing volume", l.name);
    }
    generate_key()
}

/// Checks, writing nothing, that `key` opens the volume on `dev`.
pub fn test_key(l: &Luks, dev: &Path, key: &Key) -> Result<()> {
    let d = dev.display().to_string();
    runtime::util::run_with_stdin(
        "cryptsetup",
        &["open", "--test-passphrase", "--key-file=-", &d],
        Some(key.bytes()),
    )
    .with_context(|| {
        format!(
            "luks {}: the key file does not open the existing volume on {d}; refusing to touch it",
            l.name
        )
    })?;
    Ok(())
}

/// The UUID of the LUKS header on `dev`.
pub fn luks_uuid(dev: &Path) -> Result<String> {
    let d = dev.display().to_string();
    let out = runtime::util::run("cryptsetup", &["luksUUID", &d])
        .with_context(|| format!("reading the LUKS UUID of {d}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A volume ready to be carried out: decided, with its key in hand.
#[derive(Debug)]
pub struct Prepared {
    pub dev: PathBuf,
    pub action: LuksAction,
    /// None for an active volume or a clevis reuse.
    pub key: Option<Key>,
}

/// Fetches/generates the key and, for a reuse, checks that it opens the volume. Writes nothing.
pub fn prepare(l: &Luks, action: LuksAction, fetcher: &Fetcher) -> Result<Prepared> {
    let d = l.device.as_deref().unwrap_or_default();
    let dev = std::fs::canonicalize(d).with_context(|| format!("resolving {d}"))?;
    let key = match &action {
        LuksAction::Active => {
            if l.key_file.url().is_some() {
                Some(key_for(l, fetcher, false)?)
            } else {
                None
            }
        }
        LuksAction::Reuse { clevis: true } => None,
        LuksAction::Reuse { clevis: false } => {
            let k = key_for(l, fetcher, false)?;
            test_key(l, &dev, &k)?;
            Some(k)
        }
        LuksAction::Create { .. } => {
            let k = key_for(l, fetcher, true)?;
            if clevis_pin(l).is_some() && k.bytes().iter().any(|&b| b == 0 || b == b'\n') {
                // `clevis luks bind -k -` reads one line with the shell.
                bail!(
                    "luks {}: a key file used with clevis must be one line of text (no NUL or \
                     newline)",
                    l.name
                );
            }
            Some(k)
        }
        LuksAction::AfterPartitioning => bail!("internal: undecided luks volume {}", l.name),
    };
    Ok(Prepared { dev, action, key })
}

/// A new volume: wipes what is there (wipeVolume), formats, binds to clevis when asked.
/// Needs no device-mapper (cryptsetup and clevis write the header directly).
pub fn format_and_bind(l: &Luks, p: &Prepared) -> Result<()> {
    let LuksAction::Create { wipe } = &p.action else {
        bail!("internal: luks {} is not to be created", l.name);
    };
    let d = p.dev.display().to_string();
    let k = p.key.as_ref().context("internal: no key")?;
    let name = kernel::sys_name(&p.dev)?;
    inuse::ensure_free(&name, &format!("format {d} as LUKS"))?;
    if let Some(t) = wipe {
        log::info!("wiping the {t} signatures on {d} (wipeVolume)");
        runtime::util::run("wipefs", &["-a", &d]).with_context(|| format!("wiping {d}"))?;
    }
    log::info!("creating LUKS2 volume {} on {d}", l.name);
    runtime::util::run_with_stdin("cryptsetup", &format_args(l, &d), Some(k.bytes()))
        .with_context(|| format!("formatting {d} as LUKS2"))?;
    if let Some((pin, cfg)) = clevis_pin(l) {
        log::info!("binding {d} to clevis pin {pin}");
        runtime::util::run_with_stdin(
            "clevis",
            &["luks", "bind", "-y", "-d", &d, "-k", "-", &pin, &cfg],
            Some(k.bytes()),
        )
        .with_context(|| format!("binding {d} to clevis ({pin})"))?;
    }
    Ok(())
}

/// Carries out a prepared volume: format (and bind) if new, open, wait for /dev/mapper/<name>.
/// Returns the volume's record for the files stage and the key to keep with it (none for a
/// volume bound to clevis).
pub fn apply<'p>(
    l: &Luks,
    p: &'p Prepared,
    timeout: Duration,
) -> Result<(LuksRecord, Option<&'p [u8]>)> {
    let d = p.dev.display().to_string();
    let mapper = mapper_path(&l.name);
    if p.action != LuksAction::Active {
        kernel::load_module("dm_crypt");
    }
    match &p.action {
        LuksAction::Active => log::info!("reusing the open volume {}", mapper.display()),
        LuksAction::Reuse { clevis } => {
            log::info!("reusing the existing LUKS volume on {d} as {}", l.name);
            if *clevis {
                // Nothing is written before or by a failed unlock: a volume whose pins no
                // longer release the key (another TPM, a TPM whose state was reset, tang
                // unreachable or rotated away) stays as it is.
                runtime::util::run("clevis", &["luks", "unlock", "-d", &d, "-n", &l.name])
                    .with_context(|| {
                        let tpm = if l.clevis.tpm2 == Some(true) {
                            " (a tpm2 pin opens only on the TPM it was bound to, with the \
                             same state)"
                        } else {
                            ""
                        };
                        format!(
                            "luks {}: clevis could not unlock the existing volume on {d} \
                             bound with {}: its pins did not release the key{tpm}; \
                             wipeVolume is false, so the volume was left untouched",
                            l.name,
                            binding(l).unwrap_or_else(|| "clevis".into())
                        )
                    })?;
            } else {
                let k = p.key.as_ref().context("internal: no key")?;
                runtime::util::run_with_stdin("cryptsetup", &open_args(l, &d), Some(k.bytes()))
                    .with_context(|| format!("opening {d} as {}", l.name))?;
            }
        }
        LuksAction::Create { .. } => {
            let k = p.key.as_ref().context("internal: no key")?;
            format_and_bind(l, p)?;
            runtime::util::run_with_stdin("cryptsetup", &open_args(l, &d), Some(k.bytes()))
                .with_context(|| format!("opening {d} as {}", l.name))?;
        }
        LuksAction::AfterPartitioning => bail!("internal: undecided luks volume {}", l.name),
    }
    kernel::udev_settle();
    kernel::wait_for(std::slice::from_ref(&mapper), timeout)
        .with_context(|| format!("waiting for luks volume {}", l.name))?;
    let clevis = l.clevis.is_bound();
    let r = LuksRecord {
        name: l.name.clone(),
        uuid: luks_uuid(&p.dev)?,
        key_file: !clevis && p.key.is_some(),
        discard: l.discard == Some(true),
        netdev: needs_network(l),
    };
    let key = if clevis {
        None
    } else {
        p.key.as_ref().map(Key::bytes)
    };
    Ok((r, key))
}

/// One volume of the plan.
#[derive(Debug)]
pub struct LuksWork {
    pub luks: Luks,
    pub action: LuksAction,
}

/// Plans every volume: decided now from what its device holds, unless the plan makes that
/// device (a partition, an array, or a volume listed before it: then only what does not depend
/// on the device is checked, and the rest is decided by [`carry_out`]). The volumes it formats
/// or opens are added to `devices`. Reads devices, writes nothing.
pub fn plan(volumes: &[Luks], devices: &mut Devices) -> Result<Vec<LuksWork>> {
    let mut out = Vec::new();
    for l in volumes {
        let dev = l.device.as_deref().unwrap_or_default();
        let action = if devices.made_by_plan(dev) {
            decide(l, None)?; // checks what does not depend on the device (cex)
            LuksAction::AfterPartitioning
        } else {
            decide_now(l)?
        };
        if action != LuksAction::Active {
            devices.add_made(mapper_path(&l.name));
        }
        out.push(LuksWork {
            luks: l.clone(),
            action,
        });
    }
    Ok(out)
}

/// Carries out every volume once the devices below exist: each one's device resolved (a planned
/// partition's node for a by-partlabel/partuuid link), decided if it was left for now, keyed
/// with `fetcher` and its key checked, all before any is formatted or opened; then each one
/// formatted or reused, opened, and its record and key saved in `state` for the files stage.
pub fn carry_out(
    volumes: &[LuksWork],
    devices: &Devices,
    fetcher: &Fetcher,
    state: &StateDir,
    timeout: Duration,
) -> Result<()> {
    let prepared = volumes
        .iter()
        .map(|w| {
            let mut l = w.luks.clone();
            let d = l.device.clone().unwrap_or_default();
            let node = devices
                .resolve(&d, timeout)
                .with_context(|| format!("luks {}", l.name))?;
            l.device = Some(node.display().to_string());
            let a = match &w.action {
                LuksAction::AfterPartitioning => decide_now(&l)?,
                a => a.clone(),
            };
            Ok((prepare(&l, a, fetcher)?, l))
        })
        .collect::<Result<Vec<_>>>()?;
    for (pr, l) in &prepared {
        let (record, key) = apply(l, pr, timeout)?;
        state.save_luks(&record, key)?;
    }
    Ok(())
}

/// What the plan says about a volume (and its clevis binding).
pub fn describe(l: &Luks, action: &LuksAction) -> String {
    let key = if l.key_file.url().is_some() {
        "key file"
    } else {
        "generated key"
    };
    let what = match action {
        LuksAction::Active => "reuse (already open on the device)".to_string(),
        LuksAction::Reuse { clevis: true } => "reuse (open with clevis)".into(),
        LuksAction::Reuse { clevis: false } => format!("reuse (open with the {key})"),
        LuksAction::Create { wipe: None } => format!("create LUKS2 ({key})"),
        LuksAction::Create { wipe: Some(t) } => {
            format!("wipe {t} and create LUKS2 ({key})")
        }
        LuksAction::AfterPartitioning => format!(
            "{} ({key}; decided once its device exists)",
            if l.wipe_volume == Some(true) {
                "wipe/create"
            } else {
                "reuse/create"
            }
        ),
    };
    let bind = binding(l)
        .map(|b| format!(", clevis {b}"))
        .unwrap_or_default();
    format!("{what}{bind}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use spec::config::types::{Resource, Tang};

    fn luks(key: bool, wipe: bool) -> Luks {
        Luks {
            name: "data".into(),
            device: Some("/dev/vdb".into()),
            key_file: Resource {
                source: key.then(|| "data:,secret".into()),
                ..Default::default()
            },
            wipe_volume: Some(wipe),
            ..Default::default()
        }
    }
    fn ex(t: &str, clevis: bool) -> Existing {
        Existing {
            fstype: t.into(),
            uuid: Some("6b7f1c2e-0000-4000-8000-000000000001".into()),
            label: Some("lab".into()),
            clevis,
        }
    }

    #[test]
    fn decisions() {
        use LuksAction::*;
        let mut tang = luks(false, false);
        tang.clevis.tang.push(Tang {
            url: "http://t".into(),
            ..Default::default()
        });
        let mut wrong_uuid = luks(true, false);
        wrong_uuid.uuid = Some("6b7f1c2e-0000-4000-8000-000000000002".into());
        let mut right = luks(true, false);
        right.uuid = Some("6B7F1C2E-0000-4000-8000-000000000001".into());
        right.label = Some("lab".into());
        let mut wrong_label = luks(true, false);
        wrong_label.label = Some("other".into());
        let mut cex = luks(false, false);
        cex.cex.enabled = Some(true);
        let cases: Vec<(Luks, Option<Existing>, Option<LuksAction>)> = vec![
            (luks(false, false), None, Some(Create { wipe: None })),
            (luks(true, false), None, Some(Create { wipe: None })),
            (
                luks(true, false),
                Some(ex("crypto_LUKS", false)),
                Some(Reuse { clevis: false }),
            ),
            (
                right,
                Some(ex("crypto_LUKS", false)),
                Some(Reuse { clevis: false }),
            ),
            (wrong_uuid, Some(ex("crypto_LUKS", false)), None),
            (wrong_label, Some(ex("crypto_LUKS", false)), None),
            // generated key: cannot open an existing volume
            (luks(false, false), Some(ex("crypto_LUKS", false)), None),
            // bound to clevis: only with clevis in the config
            (luks(true, false), Some(ex("crypto_LUKS", true)), None),
            (
                tang.clone(),
                Some(ex("crypto_LUKS", true)),
                Some(Reuse { clevis: true }),
            ),
            (tang, Some(ex("crypto_LUKS", false)), None),
            // other data: only with wipeVolume
            (luks(true, false), Some(ex("ext4", false)), None),
            (
                luks(true, true),
                Some(ex("ext4", false)),
                Some(Create {
                    wipe: Some("ext4".into()),
                }),
            ),
            (
                luks(false, true),
                Some(ex("crypto_LUKS", true)),
                Some(Create {
                    wipe: Some("crypto_LUKS".into()),
                }),
            ),
            (cex, None, None),
        ];
        for (i, (l, f, want)) in cases.into_iter().enumerate() {
            let got = decide(&l, f.as_ref());
            match want {
                None => assert!(got.is_err(), "case {i}: {got:?}"),
                Some(w) => assert_eq!(got.unwrap(), w, "case {i}"),
            }
        }
    }

    #[test]
    fn argv() {
        let mut l = luks(true, false);
        l.label = Some("lab".into());
        l.uuid = Some("6b7f1c2e-0000-4000-8000-000000000001".into());
        l.options = vec!["--cipher".into(), "aes-xts-plain64".into()];
        l.open_options = vec!["--perf-no_read_workqueue".into()];
        l.discard = Some(true);
        assert_eq!(
            format_args(&l, "/dev/vdb").join(" "),
            "luksFormat --type luks2 --batch-mode --key-file=- --label lab --uuid \
             6b7f1c2e-0000-4000-8000-000000000001 --cipher aes-xts-plain64 /dev/vdb"
        );
        assert_eq!(
            open_args(&l, "/dev/vdb").join(" "),
            "open --key-file=- --allow-discards --perf-no_read_workqueue /dev/vdb data"
        );
        let k = generate_key().unwrap();
        assert_eq!(k.bytes().len(), 128);
        assert!(k.bytes().iter().all(u8::is_ascii_hexdigit));
        assert_ne!(k.bytes(), generate_key().unwrap().bytes());
        // No key material in any argv.
        assert!(
            !format_args(&l, "/dev/vdb")
                .iter()
                .any(|a| a.contains("secret"))
        );
    }

    #[test]
    fn clevis_configs() {
        let mut l = luks(false, false);
        assert_eq!(clevis_pin(&l), None);
        l.clevis.tang.push(Tang {
            url: "http://10.0.2.100:8080".into(),
            thumbprint: Some("abc".into()),
            ..Default::default()
        });
        l.clevis.tpm2 = Some(true);
        l.clevis.threshold = Some(2);
        let (pin, cfg) = clevis_pin(&l).unwrap();
        assert_eq!(pin, "sss");
        let v: serde_json::Value = serde_json::from_str(&cfg).unwrap();
        assert_eq!(v["t"], 2);
        assert_eq!(v["pins"]["tang"][0]["url"], "http://10.0.2.100:8080");
        assert_eq!(v["pins"]["tang"][0]["thp"], "abc");
        assert!(v["pins"]["tpm2"].is_array());
        assert!(needs_network(&l));
        assert_eq!(
            binding(&l).unwrap(),
            "sss (tang http://10.0.2.100:8080, tpm2; threshold 2)"
        );
        let mut t = luks(false, false);
        t.clevis.tpm2 = Some(true);
        assert_eq!(binding(&t).unwrap(), "sss (tpm2)");
        assert!(!needs_network(&t));
        let mut c = luks(false, false);
        c.clevis.custom.pin = Some("tpm2".into());
        c.clevis.custom.config = Some("{\"pcr_ids\":\"7\"}".into());
        assert_eq!(
            clevis_pin(&c),
            Some(("tpm2".into(), "{\"pcr_ids\":\"7\"}".into()))
        );
        assert_eq!(binding(&c).unwrap(), "tpm2");
        assert!(!needs_network(&c));
    }

    #[test]
    fn clevis_token_detection() {
        assert!(has_clevis_token(
            br#"{"tokens":{"0":{"type":"clevis","keyslots":["1"]}}}"#
        ));
        assert!(!has_clevis_token(br#"{"tokens":{}}"#));
        assert!(!has_clevis_token(b"not json"));
    }
}
