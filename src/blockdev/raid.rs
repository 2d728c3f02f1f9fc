//! Software RAID with mdadm: what is on an array's members, whether to create, assemble, reuse
//! or refuse (`decide`), the mdadm argv, and carrying the decision out.
//!
//! Rules (checked for every array before any array is touched):
//! - `/dev/md/<name>` already running: reused when its level, device count and members match;
//!   otherwise refused.
//! - every member blank: the array is created
//!   (`mdadm --create /dev/md/<name> --force --run --homehost any --level L --raid-devices N
//!   [--spare-devices S] [options] devices`).
//! - every member holds the superblock of one array whose name, level and device count match:
//!   that array is assembled, its contents kept.
//! - anything else (a member with a filesystem, superblocks of another array or of several,
//!   some members blank and some not): refused, nothing is written. RAID has no wipe option, so
//!   the agent never builds an array over data.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use super::devices::{Devices, block_device};
use super::{inuse, kernel, probe};
use spec::config::types::Raid;

/// Where an array named `name` appears.
pub fn array_path(name: &str) -> PathBuf {
    PathBuf::from("/dev/md").join(name)
}

/// The mdadm spelling of a config level ("1" → "raid1", "stripe" → "raid0").
pub fn level_name(level: &str) -> Option<&'static str> {
    Some(match level {
        "linear" => "linear",
        "raid0" | "0" | "stripe" => "raid0",
        "raid1" | "1" | "mirror" => "raid1",
        "raid4" | "4" => "raid4",
        "raid5" | "5" => "raid5",
        "raid6" | "6" => "raid6",
        "raid10" | "10" => "raid10",
        _ => return None,
    })
}

/// An md superblock (from `mdadm --examine --export`) or a running array (`--detail --export`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MdInfo {
    pub uuid: String,
    /// `homehost:name` or `name`.
    pub name: String,
    pub level: String,
    /// Active devices (MD_DEVICES), spares not counted.
    pub raid_devices: u32,
    /// Members of a running array (MD_DEVICE_*_DEV), empty for a superblock.
    pub members: Vec<String>,
}

impl MdInfo {
    /// The array name without the homehost prefix.
    pub fn short_name(&self) -> &str {
        self.name.rsplit(':').next().unwrap_or(&self.name)
    }
}

/// Parses mdadm's `--export` output (KEY=value lines).
pub fn parse_export(text: &str) -> MdInfo {
    let mut m = MdInfo::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('\'').to_string();
        match k.trim() {
            "MD_UUID" => m.uuid = v,
            "MD_NAME" => m.name = v,
            "MD_LEVEL" => m.level = v,
            "MD_DEVICES" => m.raid_devices = v.parse().unwrap_or(0),
            k if k.starts_with("MD_DEVICE_") && k.ends_with("_DEV") => m.members.push(v),
            _ => {}
        }
    }
    m
}

/// What one member device holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    Blank,
    Md(MdInfo),
    /// Another signature (filesystem, LUKS, swap, ...).
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RaidAction {
    /// Running already with the configured layout: nothing to do.
    Active,
    /// Assemble the existing array (uuid) from its members: contents kept.
    Assemble(String),
    Create,
    /// Members are (re)created by the partitioning: examined and decided afterwards.
    AfterPartitioning,
}

/// Spares and active device count of an array, checked.
pub fn layout(r: &Raid) -> Result<(&'static str, u32, u32)> {
    let lv = r.level.as_deref().unwrap_or("");
    let level = level_name(lv)
        .with_context(|| format!("array {}: unsupported RAID level {lv:?}", r.name))?;
    let spares = r.spares.unwrap_or(0);
    if spares < 0 {
        bail!("array {}: spares must not be negative", r.name);
    }
    if spares > 0 && matches!(level, "linear" | "raid0") {
        bail!(
            "array {}: spares are not allowed for {level} arrays",
            r.name
        );
    }
    let n = r.devices.len() as i64;
    if n - spares < 1 {
        bail!(
            "array {}: {n} devices leave no active device with {spares} spares",
            r.name
        );
    }
    Ok((level, (n - spares) as u32, spares as u32))
}

/// Decides from what the members hold (in config order). Refuses rather than touch data.
pub fn decide(r: &Raid, members: &[Member]) -> Result<RaidAction> {
    let (level, active, _) = layout(r)?;
    let name = &r.name;
    let mut supers = Vec::new();
    let mut blank = Vec::new();
    for (dev, m) in r.devices.iter().zip(members) {
        match m {
            Member::Blank => blank.push(dev.as_str()),
            Member::Md(i) => supers.push((dev.as_str(), i)),
            Member::Other(t) => bail!(
                "array {name}: member {dev} holds a {t} signature; refusing to build an array \
                 over it (clear the device first)"
            ),
        }
    }
    if supers.is_empty() {
        return Ok(RaidAction::Create);
    }
    if !blank.is_empty() {
        bail!(
            "array {name}: {} hold an md superblock but {} do not; refusing to create or \
             assemble a partial array",
            supers.iter().map(|s| s.0).collect::<Vec<_>>().join(", "),
            blank.join(", ")
        );
    }
    let (first_dev, first) = supers[0];
    if let Some((d, _)) = supers.iter().find(|(_, i)| i.uuid != first.uuid) {
        bail!(
            "array {name}: members {first_dev} and {d} belong to different arrays; refusing to \
             touch them"
        );
    }
    let mut why = Vec::new();
    if first.short_name() != name {
        why.push(format!("name {:?} != {name:?}", first.short_name()));
    }
    if first.level != level {
        why.push(format!("level {} != {level}", first.level));
    }
    if first.raid_devices != active {
        why.push(format!("{} active devices != {active}", first.raid_devices));
    }
    if !why.is_empty() {
        bail!(
            "array {name}: the existing array on {} does not match the config ({}); refusing to \
             recreate it",
            r.devices.join(", "),
            why.join(", ")
        );
    }
    Ok(RaidAction::Assemble(first.uuid.clone()))
}

/// Checks a running `/dev/md/<name>` against the config (members canonical device paths).
pub fn check_active(r: &Raid, info: &MdInfo, members: &[PathBuf]) -> Result<RaidAction> {
    let (level, active, _) = layout(r)?;
    let mut why = Vec::new();
    if info.level != level {
        why.push(format!("level {} != {level}", info.level));
    }
    if info.raid_devices != active {
        why.push(format!("{} active devices != {active}", info.raid_devices));
    }
    let mut have: Vec<PathBuf> = info
        .members
        .iter()
        .map(|m| std::fs::canonicalize(m).unwrap_or_else(|_| PathBuf::from(m)))
        .collect();
    have.sort();
    let mut want = members.to_vec();
    want.sort();
    if have != want {
        why.push(format!(
            "members {} != {}",
            show(&have).join(","),
            show(&want).join(",")
        ));
    }
    if !why.is_empty() {
        bail!(
            "array {}: the running {} does not match the config ({}); refusing to touch it",
            r.name,
            array_path(&r.name).display(),
            why.join(", ")
        );
    }
    Ok(RaidAction::Active)
}

fn show(p: &[PathBuf]) -> Vec<String> {
    p.iter().map(|p| p.display().to_string()).collect()
}

/// The argv of `mdadm --create`.
pub fn create_args(r: &Raid) -> Result<Vec<String>> {
    let (level, active, spares) = layout(r)?;
    let mut a: Vec<String> = vec![
        "--create".into(),
        array_path(&r.name).display().to_string(),
        "--force".into(),
        "--run".into(),
        "--homehost".into(),
        "any".into(),
        "--level".into(),
        level.into(),
        "--raid-devices".into(),
        active.to_string(),
    ];
    if spares > 0 {
        a.push("--spare-devices".into());
        a.push(spares.to_string());
    }
    a.extend(r.options.iter().cloned());
    a.extend(r.devices.iter().cloned());
    Ok(a)
}

/// The argv of `mdadm --assemble` for an existing array.
pub fn assemble_args(r: &Raid, uuid: &str) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--assemble".into(),
        array_path(&r.name).display().to_string(),
        "--run".into(),
        "--uuid".into(),
        uuid.into(),
    ];
    a.extend(r.devices.iter().cloned());
    a
}

/// What a member device holds.
pub fn examine(dev: &Path) -> Result<Member> {
    Ok(match probe::probe(dev)? {
        None => Member::Blank,
        Some(f) if f.fstype == "linux_raid_member" => {
            let args = [
                "--examine".to_string(),
                "--export".into(),
                dev.display().to_string(),
            ];
            let out = runtime::util::run("mdadm", &args)
                .with_context(|| format!("examining the md superblock of {}", dev.display()))?;
            Member::Md(parse_export(&String::from_utf8_lossy(&out.stdout)))
        }
        Some(f) => Member::Other(f.fstype),
    })
}

/// The running array `/dev/md/<name>`, if there is one.
pub fn active(name: &str) -> Result<Option<MdInfo>> {
    let p = array_path(name);
    if !p.exists() {
        return Ok(None);
    }
    let out = runtime::util::run("mdadm", &["--detail", "--export", &p.display().to_string()])
        .with_context(|| format!("reading the state of {}", p.display()))?;
    Ok(Some(parse_export(&String::from_utf8_lossy(&out.stdout))))
}

/// Decides an array from the devices as they are now.
pub fn decide_now(r: &Raid) -> Result<RaidAction> {
    let devs = r
        .devices
        .iter()
        .map(|d| block_device(d))
        .collect::<Result<Vec<_>>>()?;
    if let Some(info) = active(&r.name)? {
        return check_active(r, &info, &devs);
    }
    let members = devs
        .iter()
        .map(|d| examine(d))
        .collect::<Result<Vec<_>>>()?;
    decide(r, &members)
}

/// Carries out a decided action and waits for `/dev/md/<name>`.
pub fn apply(r: &Raid, action: &RaidAction, timeout: Duration) -> Result<()> {
    let path = array_path(&r.name);
    if matches!(action, RaidAction::Assemble(_) | RaidAction::Create) {
        kernel::load_module("md_mod");
    }
    match action {
        RaidAction::Active => {
            log::info!("reusing the running array {}", path.display());
            return Ok(());
        }
        RaidAction::AfterPartitioning => bail!("internal: undecided array {}", r.name),
        RaidAction::Assemble(uuid) => {
            log::info!("assembling the existing array {} ({uuid})", path.display());
            runtime::util::run("mdadm", &assemble_args(r, uuid))
                .with_context(|| format!("assembling {}", path.display()))?;
        }
        RaidAction::Create => {
            for d in &r.devices {
                let dev = std::fs::canonicalize(d).with_context(|| format!("resolving {d}"))?;
                let name = kernel::sys_name(&dev)?;
                inuse::ensure_free(&name, &format!("add {d} to array {}", r.name))?;
            }
            log::info!(
                "creating {} array {} on {}",
                r.level.as_deref().unwrap_or("?"),
                path.display(),
                r.devices.join(", ")
            );
            runtime::util::run("mdadm", &create_args(r)?)
                .with_context(|| format!("creating {}", path.display()))?;
        }
    }
    kernel::udev_settle();
    kernel::wait_for(std::slice::from_ref(&path), timeout)
        .with_context(|| format!("waiting for array {}", r.name))
}

/// One array of the plan.
#[derive(Debug)]
pub struct RaidWork {
    pub raid: Raid,
    pub action: RaidAction,
}

/// Plans every array: decided now from what its members hold, unless a member is a partition
/// the partitioning makes (then decided by [`settle`]); its layout is checked first. The arrays it
/// creates or assembles are added to `devices`. Reads devices, writes nothing.
pub fn plan(arrays: &[Raid], devices: &mut Devices) -> Result<Vec<RaidWork>> {
    let mut out = Vec::new();
    for r in arrays {
        layout(r)?;
        let action = if r.devices.iter().any(|d| devices.touched_by_partitioning(d)) {
            RaidAction::AfterPartitioning
        } else {
            decide_now(r)?
        };
        out.push(RaidWork {
            raid: r.clone(),
            action,
        });
    }
    for w in &out {
        if w.action != RaidAction::Active {
            devices.add_made(array_path(&w.raid.name));
        }
    }
    Ok(out)
}

/// After partitioning: every array with its members resolved to their nodes (a planned
/// partition named by its node or a by-partlabel/partuuid link, which needs no udev) and
/// decided if it was left for now. Writes nothing, so that a refusal can still put the tables
/// back.
pub fn settle(arrays: &[RaidWork], devices: &Devices, timeout: Duration) -> Result<Vec<RaidWork>> {
    arrays
        .iter()
        .map(|w| {
            let mut r = w.raid.clone();
            r.devices = r
                .devices
                .iter()
                .map(|d| devices.resolve(d, timeout).map(|n| n.display().to_string()))
                .collect::<Result<_>>()
                .with_context(|| format!("array {}", r.name))?;
            let action = match &w.action {
                RaidAction::AfterPartitioning => decide_now(&r)?,
                a => a.clone(),
            };
            Ok(RaidWork { raid: r, action })
        })
        .collect()
}

/// Carries out every settled array in order (see [`apply`]).
pub fn apply_all(arrays: &[RaidWork], timeout: Duration) -> Result<()> {
    for w in arrays {
        apply(&w.raid, &w.action, timeout)?;
    }
    Ok(())
}

/// What the plan says about an array.
pub fn describe(r: &Raid, action: &RaidAction) -> String {
    match action {
        RaidAction::Active => "reuse (running, layout matches)".to_string(),
        RaidAction::Assemble(u) => format!("reuse (assemble existing array {u})"),
        RaidAction::Create => format!(
            "create {} on {}{}",
            r.level.as_deref().unwrap_or("?"),
            r.devices.join(", "),
            match r.spares {
                Some(s) if s > 0 => format!(" ({s} spares)"),
                _ => String::new(),
            }
        ),
        RaidAction::AfterPartitioning => {
            "reuse/create (decided after partitioning: members are new or changed)".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raid(level: &str, n: usize, spares: Option<i64>) -> Raid {
        Raid {
            name: "data".into(),
            level: Some(level.into()),
            devices: (0..n)
                .map(|i| format!("/dev/vd{}", (b'b' + i as u8) as char))
                .collect(),
            spares,
            options: vec![],
        }
    }
    fn sb(uuid: &str, name: &str, level: &str, n: u32) -> Member {
        Member::Md(MdInfo {
            uuid: uuid.into(),
            name: name.into(),
            level: level.into(),
            raid_devices: n,
            members: vec![],
        })
    }

    #[test]
    fn export_parsing() {
        let t = "MD_LEVEL=raid1\nMD_DEVICES=2\nMD_NAME=any:data\nMD_UUID=a1:b2:c3:d4\n\
                 MD_DEVICE_dev_vdb_ROLE=0\nMD_DEVICE_dev_vdb_DEV=/dev/vdb\n\
                 MD_DEVICE_dev_vdc_DEV=/dev/vdc\nnoise\n";
        let m = parse_export(t);
        assert_eq!(m.level, "raid1");
        assert_eq!(m.raid_devices, 2);
        assert_eq!(m.short_name(), "data");
        assert_eq!(m.uuid, "a1:b2:c3:d4");
        assert_eq!(m.members, vec!["/dev/vdb", "/dev/vdc"]);
    }

    #[test]
    fn decisions() {
        use Member::*;
        use RaidAction::*;
        let r1 = raid("raid1", 2, None);
        let good = sb("u1", "any:data", "raid1", 2);
        let cases: Vec<(Raid, Vec<Member>, Option<RaidAction>)> = vec![
            (r1.clone(), vec![Blank, Blank], Some(Create)),
            (
                r1.clone(),
                vec![good.clone(), good.clone()],
                Some(Assemble("u1".into())),
            ),
            (
                raid("1", 2, None),
                vec![good.clone(), good.clone()],
                Some(Assemble("u1".into())),
            ),
            // another array's members
            (
                r1.clone(),
                vec![good.clone(), sb("u2", "any:data", "raid1", 2)],
                None,
            ),
            // name, level, count mismatches
            (r1.clone(), vec![sb("u1", "any:other", "raid1", 2); 2], None),
            (r1.clone(), vec![sb("u1", "any:data", "raid0", 2); 2], None),
            (r1.clone(), vec![sb("u1", "any:data", "raid1", 3); 2], None),
            // partial
            (r1.clone(), vec![good.clone(), Blank], None),
            // data on a member
            (r1.clone(), vec![Blank, Other("ext4".into())], None),
            // spares
            (
                raid("raid1", 3, Some(1)),
                vec![Blank, Blank, Blank],
                Some(Create),
            ),
            (raid("raid0", 3, Some(1)), vec![Blank, Blank, Blank], None),
            (raid("linear", 2, Some(1)), vec![Blank, Blank], None),
            (raid("raid1", 2, Some(2)), vec![Blank, Blank], None),
            (raid("raid9", 2, None), vec![Blank, Blank], None),
        ];
        for (i, (r, m, want)) in cases.into_iter().enumerate() {
            let got = decide(&r, &m);
            match want {
                None => assert!(got.is_err(), "case {i}: {got:?}"),
                Some(w) => assert_eq!(got.unwrap(), w, "case {i}"),
            }
        }
    }

    #[test]
    fn running_array_checked() {
        let r = raid("raid1", 2, None);
        let info = MdInfo {
            uuid: "u".into(),
            name: "any:data".into(),
            level: "raid1".into(),
            raid_devices: 2,
            members: vec!["/nonexistent/vdc".into(), "/nonexistent/vdb".into()],
        };
        let want = [
            PathBuf::from("/nonexistent/vdb"),
            PathBuf::from("/nonexistent/vdc"),
        ];
        assert_eq!(check_active(&r, &info, &want).unwrap(), RaidAction::Active);
        let other = [
            PathBuf::from("/nonexistent/vdb"),
            PathBuf::from("/nonexistent/vdd"),
        ];
        assert!(check_active(&r, &info, &other).is_err());
        let r0 = raid("raid0", 2, None);
        assert!(check_active(&r0, &info, &want).is_err());
    }

    #[test]
    fn create_argv() {
        let mut r = raid("1", 3, Some(1));
        r.options = vec!["--metadata=1.2".into()];
        assert_eq!(
            create_args(&r).unwrap().join(" "),
            "--create /dev/md/data --force --run --homehost any --level raid1 --raid-devices 2 \
             --spare-devices 1 --metadata=1.2 /dev/vdb /dev/vdc /dev/vdd"
        );
        assert_eq!(
            assemble_args(&raid("raid1", 2, None), "u1").join(" "),
            "--assemble /dev/md/data --run --uuid u1 /dev/vdb /dev/vdc"
        );
        assert!(create_args(&raid("raid0", 2, Some(1))).is_err());
    }
}
