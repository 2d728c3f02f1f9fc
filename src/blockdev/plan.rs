//! The partition planner: a pure function of (existing table, geometry, config partitions) to the
//! complete new table and one action per partition, following Ignition's rules:
//!
//! | present | shouldExist | wipePartitionEntry | action |
//! |---|---|---|---|
//! | no  | false | any   | nothing |
//! | no  | true  | any   | create |
//! | yes | false | false | fail |
//! | yes | false | true  | delete |
//! | yes | true  | false | keep if it matches, resize with `resize` if only the size differs, else fail |
//! | yes | true  | true  | keep if it matches, else delete and recreate |
//!
//! The order is Ignition's (`internal/exec/stages/disks/partitions.go` driving sgdisk):
//!
//! 1. The pretend run. Numbered partitions first, `number` 0 last (in config order otherwise).
//!    Every listed partition that exists is deleted, then every one that should exist is created
//!    in order, the way sgdisk places it: an unspecified start/size is the existing partition's
//!    when it exists and wipePartitionEntry is false, else it acts like 0; start 0 = first
//!    aligned sector of the largest free block, size 0 = up to the end of the largest free block
//!    (fails when the start is not inside it); `number` 0 = the lowest free number. This gives
//!    every partition that should exist its number, start and size.
//! 2. The action table above, against the table as it is: an existing partition matches when
//!    its start and size are the ones of step 1 and every label/guid/typeGuid given is equal.
//! 3. The commit: every deletion (delete, recreate, resize) first, then every creation in
//!    order. So a partition may be placed where one deleted later in the list used to be.

use std::fmt;

use anyhow::{Result, anyhow, bail};
use uuid::Uuid;

use super::gpt::{Entry, Geometry, LINUX_FS_TYPE, Table};
use spec::config::types::Partition;

/// The highest partition number the agent's tables hold.
pub const MAX_ENTRIES: u32 = 128;

/// One config partition, checked and typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spec {
    pub number: u32,
    pub label: Option<String>,
    pub start_mib: Option<u64>,
    pub size_mib: Option<u64>,
    pub guid: Option<Uuid>,
    pub type_guid: Option<Uuid>,
    pub should_exist: bool,
    pub wipe: bool,
    pub resize: bool,
}

fn guid_opt(s: &Option<String>, what: &str, n: i64) -> Result<Option<Uuid>> {
    match s.as_deref() {
        None | Some("") => Ok(None),
        Some(g) => Uuid::parse_str(g)
            .map(Some)
            .map_err(|e| anyhow!("partition {n}: invalid {what} {g:?}: {e}")),
    }
}

fn mib_opt(v: Option<i64>, what: &str, n: i64) -> Result<Option<u64>> {
    match v {
        None => Ok(None),
        Some(x) if x < 0 => bail!("partition {n}: {what} must not be negative"),
        Some(x) => Ok(Some(x as u64)),
    }
}

impl Spec {
    pub fn from_config(p: &Partition) -> Result<Spec> {
        let n = p.num();
        let should_exist = p.should_exist.unwrap_or(true);
        // Like Ignition, a number beyond the table only fails when the partition is to be
        // created: `shouldExist: false` on a number that cannot exist is a no-op.
        let number = match u32::try_from(n) {
            Ok(x) if x <= MAX_ENTRIES || !should_exist => x,
            Err(_) if n > 0 && !should_exist => u32::MAX,
            _ => bail!(
                "partition number {n} is outside 1..={MAX_ENTRIES} (0 = the next free number); \
                 a GPT holds {MAX_ENTRIES} partitions"
            ),
        };
        if let Some(l) = &p.label
            && l.encode_utf16().count() > 36
        {
            bail!("partition {n}: label {l:?} is longer than 36 UTF-16 code units");
        }
        Ok(Spec {
            number,
            label: p.label.clone(),
            start_mib: mib_opt(p.start_mib, "startMiB", n)?,
            size_mib: mib_opt(p.size_mib, "sizeMiB", n)?,
            guid: guid_opt(&p.guid, "guid", n)?,
            type_guid: guid_opt(&p.type_guid, "typeGuid", n)?,
            should_exist,
            wipe: p.wipe_partition_entry.unwrap_or(false),
            resize: p.resize.unwrap_or(false),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Listed, absent and should not exist.
    Absent,
    Keep,
    Create,
    Delete,
    /// Deleted and created again (wipePartitionEntry, did not match).
    Recreate,
    /// Grown in place (resize).
    Resize,
    /// Not mentioned in the config: left alone.
    Unlisted,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartPlan {
    pub number: u32,
    pub action: Action,
    pub old: Option<Entry>,
    pub new: Option<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskPlan {
    pub geometry: Geometry,
    pub wipe_table: bool,
    /// The table as it was (None: no table, or it is wiped).
    pub old: Option<Table>,
    pub new: Table,
    pub parts: Vec<PartPlan>,
}

impl DiskPlan {
    /// Whether anything must be written.
    pub fn changes(&self) -> bool {
        if self.wipe_table {
            return true;
        }
        match &self.old {
            Some(old) => old != &self.new,
            // A blank disk stays blank unless a partition is created (like Ignition).
            None => !self.new.entries.is_empty(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    Unspec,
    Zero,
    Sectors(u64),
}

/// Free blocks `(first, last)` (inclusive) of `used` within the usable area.
fn free_blocks(g: &Geometry, used: &[Entry]) -> Vec<(u64, u64)> {
    let mut ext: Vec<(u64, u64)> = used.iter().map(|e| (e.start, e.end)).collect();
    ext.sort();
    let mut out = Vec::new();
    let mut next = g.first_usable();
    for (s, e) in ext {
        if s > next {
            out.push((next, s - 1));
        }
        next = next.max(e + 1);
    }
    if next <= g.last_usable() {
        out.push((next, g.last_usable()));
    }
    out
}

/// The largest free block (the first one on ties), as sgdisk picks it.
fn largest(g: &Geometry, used: &[Entry]) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    for b in free_blocks(g, used) {
        if best.is_none_or(|x| b.1 - b.0 > x.1 - x.0) {
            best = Some(b);
        }
    }
    best
}

fn check_fits(g: &Geometry, used: &[Entry], n: u32, start: u64, end: u64) -> Result<()> {
    if start < g.first_usable() || end > g.last_usable() || end < start {
        bail!(
            "partition {n} (sectors {start}..={end}) does not fit the usable area {}..={} of the disk",
            g.first_usable(),
            g.last_usable()
        );
    }
    if let Some(o) = used
        .iter()
        .find(|e| e.number != n && e.start <= end && start <= e.end)
    {
        bail!(
            "partition {n} (sectors {start}..={end}) would overlap partition {} (sectors {}..={})",
            o.number,
            o.start,
            o.end
        );
    }
    Ok(())
}

/// The alignment sgdisk uses for default starts (its `ComputeAlignment`): 1 MiB, reduced to the
/// largest power of two that divides the start of every partition already on the disk; at least
/// 8 sectors on disks of 1677721600 sectors or more (Advanced Format safety).
pub fn alignment(g: &Geometry, existing: &[Entry]) -> u64 {
    let mut align = g.align();
    for e in existing {
        while align > 1 && e.start % align != 0 {
            align /= 2;
        }
    }
    if align < 8 && g.sectors >= 1_677_721_600 {
        align = 8;
    }
    align
}

/// Places a partition in `used` the way sgdisk would: returns (start, end).
fn place(
    g: &Geometry,
    align: u64,
    used: &[Entry],
    n: u32,
    start: Want,
    size: Want,
) -> Result<(u64, u64)> {
    let big = largest(g, used);
    let start = match start {
        Want::Sectors(s) => s,
        Want::Zero | Want::Unspec => {
            let (b0, b1) = big.ok_or_else(|| anyhow!("partition {n}: no free space left"))?;
            let s = b0.div_ceil(align) * align;
            if s > b1 {
                bail!("partition {n}: the largest free block is smaller than the alignment");
            }
            s
        }
    };
    let end = match size {
        Want::Sectors(0) => bail!("partition {n}: size 0"),
        Want::Sectors(len) => start
            .checked_add(len - 1)
            .ok_or_else(|| anyhow!("partition {n}: size overflows"))?,
        Want::Zero | Want::Unspec => match big {
            Some((b0, b1)) if (b0..=b1).contains(&start) => b1,
            _ => bail!(
                "partition {n}: start sector {start} is not within the largest free block, \
                 so a size of 0 cannot be resolved"
            ),
        },
    };
    check_fits(g, used, n, start, end)?;
    Ok((start, end))
}

fn next_free_number(used: &[Entry]) -> Result<u32> {
    (1..=MAX_ENTRIES)
        .find(|n| used.iter().all(|e| e.number != *n))
        .ok_or_else(|| anyhow!("no free partition number left ({MAX_ENTRIES} in use)"))
}

/// Why an existing partition does not match its spec (None: it matches). `start..=end` is where
/// the pretend run put it; `skip_size` ignores the size (the resize check).
fn mismatch(e: &Entry, s: &Spec, start: u64, end: u64, skip_size: bool) -> Option<String> {
    let mut why = Vec::new();
    if e.start != start {
        why.push(format!("start sector {} != {start}", e.start));
    }
    if !skip_size && e.size() != end + 1 - start {
        why.push(format!("size {} != {} sectors", e.size(), end + 1 - start));
    }
    if let Some(l) = &s.label
        && l != &e.name
    {
        why.push(format!("label {:?} != {l:?}", e.name));
    }
    if let Some(gd) = s.guid
        && gd != e.guid
    {
        why.push(format!("guid {} != {gd}", e.guid));
    }
    if let Some(t) = s.type_guid
        && t != e.type_guid
    {
        why.push(format!("type guid {} != {t}", e.type_guid));
    }
    (!why.is_empty()).then(|| why.join(", "))
}

/// Computes the plan. `new_guid` makes up GUIDs for new partitions/tables (random in real use).
pub fn plan(
    existing: Option<&Table>,
    g: &Geometry,
    wipe_table: bool,
    specs: &[Spec],
    new_guid: &mut dyn FnMut() -> Uuid,
) -> Result<DiskPlan> {
    let old = if wipe_table { None } else { existing.cloned() };
    let base: Vec<Entry> = old.as_ref().map(|t| t.entries.clone()).unwrap_or_default();

    // Checks the config can be applied at all.
    let mut seen = std::collections::BTreeSet::new();
    for s in specs {
        if s.number != 0 && !seen.insert(s.number) {
            bail!("partition {} is listed twice", s.number);
        }
    }
    if specs.iter().any(|s| s.number == 0) && specs.iter().any(|s| !s.should_exist) {
        bail!("partition number 0 is not allowed on a disk with shouldExist: false partitions");
    }
    let mut order: Vec<&Spec> = specs.iter().collect();
    order.sort_by_key(|s| s.number == 0); // stable: numbered first, in config order
    let current = |s: &Spec| base.iter().find(|e| s.number != 0 && e.number == s.number);

    let mib = |v: Option<u64>, n: u32| -> Result<Want> {
        Ok(match v {
            None => Want::Unspec,
            Some(0) => Want::Zero,
            Some(m) => Want::Sectors(
                g.mib(m)
                    .ok_or_else(|| anyhow!("partition {n}: value {m} MiB overflows"))?,
            ),
        })
    };

    let align = alignment(g, &base);
    // Step 1, the pretend run: every listed partition that exists is deleted, then every one
    // that should exist is created, in order.
    let mut virt: Vec<Entry> = base
        .iter()
        .filter(|e| !order.iter().any(|s| s.number == e.number))
        .cloned()
        .collect();
    let mut resolved: Vec<Option<(u32, u64, u64)>> = Vec::new();
    for s in &order {
        if !s.should_exist {
            resolved.push(None);
            continue;
        }
        if s.number > MAX_ENTRIES {
            bail!(
                "partition {} cannot be created: a GPT holds partitions 1..={MAX_ENTRIES}",
                s.number
            );
        }
        let mut start = mib(s.start_mib, s.number)?;
        let mut size = mib(s.size_mib, s.number)?;
        if let Some(e) = current(s)
            && !s.wipe
        {
            if start == Want::Unspec {
                start = Want::Sectors(e.start);
            }
            if size == Want::Unspec {
                size = Want::Sectors(e.size());
            }
        }
        let number = if s.number == 0 {
            next_free_number(&virt)?
        } else {
            s.number
        };
        let (a, b) = place(g, align, &virt, number, start, size)?;
        virt.push(Entry {
            number,
            start: a,
            end: b,
            type_guid: LINUX_FS_TYPE,
            guid: Uuid::nil(),
            name: String::new(),
            attrs: 0,
        });
        resolved.push(Some((number, a, b)));
    }

    // Step 2, the action table against the table as it is.
    let mut parts = Vec::new();
    let make = |s: &Spec, n: u32, a: u64, b: u64, new_guid: &mut dyn FnMut() -> Uuid| Entry {
        number: n,
        start: a,
        end: b,
        type_guid: s.type_guid.unwrap_or(LINUX_FS_TYPE),
        guid: s.guid.unwrap_or_else(&mut *new_guid),
        name: s.label.clone().unwrap_or_default(),
        attrs: 0,
    };
    for (s, r) in order.iter().zip(&resolved) {
        let cur = current(s).cloned();
        let placed = || r.ok_or_else(|| anyhow!("internal: unresolved partition"));
        let (action, new) = match (&cur, s.should_exist, s.wipe) {
            (None, false, _) => (Action::Absent, None),
            (None, true, _) => {
                let (n, a, b) = placed()?;
                (Action::Create, Some(make(s, n, a, b, new_guid)))
            }
            (Some(_), false, false) => bail!(
                "partition {} exists but is specified as nonexistent and wipePartitionEntry is \
                 false; set wipePartitionEntry to delete it",
                s.number
            ),
            (Some(_), false, true) => (Action::Delete, None),
            (Some(e), true, wipe) => {
                let (n, a, b) = placed()?;
                match mismatch(e, s, a, b, false) {
                    None => (Action::Keep, Some(e.clone())),
                    Some(_) if wipe => (Action::Recreate, Some(make(s, n, a, b, new_guid))),
                    Some(_) if s.resize && mismatch(e, s, a, b, true).is_none() => {
                        // Same start (checked), the new size; number, guids and label kept.
                        let mut resized = e.clone();
                        resized.end = b;
                        (Action::Resize, Some(resized))
                    }
                    Some(why) => bail!(
                        "partition {} does not match the config ({why}) and wipePartitionEntry \
                         is false{}",
                        s.number,
                        if s.resize {
                            ""
                        } else {
                            " (set wipePartitionEntry to recreate it, or resize: true if only \
                             the size differs)"
                        }
                    ),
                }
            }
        };
        let number = new.as_ref().map(|e| e.number).unwrap_or(s.number);
        parts.push(PartPlan {
            number,
            action,
            old: cur,
            new,
        });
    }

    // Step 3, the commit: every deletion first, then every creation in order.
    let mut table: Vec<Entry> = base
        .iter()
        .filter(|e| {
            !parts.iter().any(|p| {
                p.number == e.number
                    && matches!(p.action, Action::Delete | Action::Recreate | Action::Resize)
            })
        })
        .cloned()
        .collect();
    for p in &parts {
        if let (Action::Create | Action::Recreate | Action::Resize, Some(e)) = (&p.action, &p.new) {
            check_fits(g, &table, e.number, e.start, e.end)?;
            table.push(e.clone());
        }
    }
    for e in &base {
        if !parts.iter().any(|p| p.number == e.number) {
            parts.push(PartPlan {
                number: e.number,
                action: Action::Unlisted,
                old: Some(e.clone()),
                new: Some(e.clone()),
            });
        }
    }
    table.sort_by_key(|e| e.number);
    parts.sort_by_key(|p| p.number);
    let disk_guid = match &old {
        Some(t) => t.disk_guid,
        None => new_guid(),
    };
    Ok(DiskPlan {
        geometry: *g,
        wipe_table,
        new: Table {
            disk_guid,
            entries: table,
        },
        old,
        parts,
    })
}

fn mib_str(g: &Geometry, sectors: u64) -> String {
    let m = sectors as f64 / g.align() as f64;
    if m.fract() == 0.0 {
        format!("{m:.0} MiB")
    } else {
        format!("{m:.2} MiB")
    }
}

fn entry_str(g: &Geometry, e: &Entry) -> String {
    format!(
        "start {} ({}) size {} ({}) label {:?} type {} guid {}",
        e.start,
        mib_str(g, e.start),
        e.size(),
        mib_str(g, e.size()),
        e.name,
        e.type_guid.hyphenated().to_string().to_uppercase(),
        e.guid
    )
}

impl Action {
    /// The word `agent plan` prints for it.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Absent => "absent",
            Action::Keep => "keep",
            Action::Create => "create",
            Action::Delete => "delete",
            Action::Recreate => "recreate",
            Action::Resize => "resize",
            Action::Unlisted => "keep (not in config)",
        }
    }
}

/// A partition entry as `agent plan --json` shows it.
fn entry_json(e: &Entry) -> serde_json::Value {
    serde_json::json!({
        "start": e.start,
        "size": e.size(),
        "label": e.name,
        "type": e.type_guid.hyphenated().to_string().to_uppercase(),
        "guid": e.guid.to_string(),
    })
}

impl DiskPlan {
    /// What happens to the table, in words.
    fn table_action(&self) -> &'static str {
        if self.wipe_table {
            "wipe and write a new table"
        } else if self.old.is_none() && self.changes() {
            "write a new table (none found)"
        } else if self.old.is_none() {
            "leave the disk without a table (nothing to create)"
        } else if self.changes() {
            "update the table"
        } else {
            "keep the table"
        }
    }

    /// The plan as `agent plan --json` shows it (sectors; `old`/`new` entries where there are).
    pub fn to_json(&self) -> serde_json::Value {
        let parts: Vec<serde_json::Value> = self
            .parts
            .iter()
            .map(|p| {
                serde_json::json!({
                    "number": p.number,
                    "action": p.action.verb(),
                    "old": p.old.as_ref().map(entry_json),
                    "new": p.new.as_ref().map(entry_json),
                })
            })
            .collect();
        serde_json::json!({
            "table": self.table_action(),
            "changes": self.changes(),
            "sectors": self.geometry.sectors,
            "sectorSize": self.geometry.sector_size,
            "partitions": parts,
        })
    }
}

impl fmt::Display for DiskPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        let what = self.table_action();
        writeln!(
            f,
            "  table: {what} ({} sectors of {} bytes)",
            g.sectors, g.sector_size
        )?;
        for p in &self.parts {
            let verb = p.action.verb();
            write!(f, "  partition {}: {verb}", p.number)?;
            match (&p.action, &p.old, &p.new) {
                (Action::Resize, Some(o), Some(n)) => write!(
                    f,
                    " from {} to {} sectors ({})",
                    o.size(),
                    n.size(),
                    mib_str(g, n.size())
                )?,
                (Action::Recreate, Some(o), Some(n)) => {
                    write!(f, " {} (was {})", entry_str(g, n), entry_str(g, o))?
                }
                (_, _, Some(n)) => write!(f, " {}", entry_str(g, n))?,
                (_, Some(o), None) => write!(f, " (was {})", entry_str(g, o))?,
                _ => {}
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 2048; // sectors of 512 bytes
    fn geom() -> Geometry {
        Geometry::new(512, 100 * 1024 * 1024).unwrap() // 100 MiB
    }
    fn e(n: u32, start_mib: u64, size_mib: u64) -> Entry {
        Entry {
            number: n,
            start: start_mib * MIB,
            end: (start_mib + size_mib) * MIB - 1,
            type_guid: LINUX_FS_TYPE,
            guid: Uuid::from_u128(n as u128),
            name: format!("p{n}"),
            attrs: 0,
        }
    }
    fn table(es: Vec<Entry>) -> Table {
        Table {
            disk_guid: Uuid::from_u128(99),
            entries: es,
        }
    }
    fn spec(n: u32) -> Spec {
        Spec {
            number: n,
            should_exist: true,
            ..Default::default()
        }
    }
    fn run(t: Option<&Table>, wipe: bool, specs: &[Spec]) -> Result<DiskPlan> {
        let mut k = 1000u128;
        plan(t, &geom(), wipe, specs, &mut || {
            k += 1;
            Uuid::from_u128(k)
        })
    }
    fn action(p: &DiskPlan, n: u32) -> Action {
        p.parts
            .iter()
            .find(|x| x.number == n)
            .unwrap()
            .action
            .clone()
    }
    fn mib_of(p: &DiskPlan, n: u32) -> (u64, u64) {
        let e = p.new.get(n).unwrap();
        (e.start / MIB, e.size() / MIB)
    }

    /// The action table: (present, shouldExist, wipe, matches) -> outcome.
    #[test]
    fn action_table() {
        let t = table(vec![e(1, 1, 10)]);
        // (present, should_exist, wipe, spec label) -> Ok(action) | Err
        let rows: Vec<(bool, bool, bool, &str, Option<Action>)> = vec![
            (false, false, false, "p1", Some(Action::Absent)),
            (false, false, true, "p1", Some(Action::Absent)),
            (false, true, false, "p1", Some(Action::Create)),
            (false, true, true, "p1", Some(Action::Create)),
            (true, false, false, "p1", None),
            (true, false, true, "p1", Some(Action::Delete)),
            (true, true, false, "p1", Some(Action::Keep)),
            (true, true, false, "other", None),
            (true, true, true, "p1", Some(Action::Keep)),
            (true, true, true, "other", Some(Action::Recreate)),
        ];
        for (present, exist, wipe, label, want) in rows {
            let mut s = spec(1);
            s.should_exist = exist;
            s.wipe = wipe;
            if exist {
                s.label = Some(label.into());
                s.size_mib = Some(10);
            }
            let cur = present.then(|| t.clone());
            let got = run(cur.as_ref(), false, &[s]);
            let row = format!("present={present} exist={exist} wipe={wipe} label={label}");
            match want {
                None => assert!(got.is_err(), "{row}: expected failure, got {got:?}"),
                Some(a) => {
                    let p = got.unwrap_or_else(|e| panic!("{row}: {e:#}"));
                    assert_eq!(action(&p, 1), a, "{row}");
                    match a {
                        Action::Absent | Action::Delete => assert!(p.new.get(1).is_none()),
                        _ => assert_eq!(p.new.get(1).unwrap().name, label, "{row}"),
                    }
                }
            }
        }
    }

    #[test]
    fn every_specified_attribute_is_matched() {
        let t = table(vec![e(1, 1, 10)]);
        type Edit = Box<dyn Fn(&mut Spec)>;
        let cases: Vec<(&str, Edit, bool)> = vec![
            ("start same", Box::new(|s| s.start_mib = Some(1)), true),
            ("start diff", Box::new(|s| s.start_mib = Some(2)), false),
            ("size same", Box::new(|s| s.size_mib = Some(10)), true),
            ("size diff", Box::new(|s| s.size_mib = Some(11)), false),
            (
                "label diff",
                Box::new(|s| s.label = Some("x".into())),
                false,
            ),
            (
                "guid same",
                Box::new(|s| s.guid = Some(Uuid::from_u128(1))),
                true,
            ),
            (
                "guid diff",
                Box::new(|s| s.guid = Some(Uuid::from_u128(2))),
                false,
            ),
            (
                "type diff",
                Box::new(|s| s.type_guid = Some(Uuid::from_u128(7))),
                false,
            ),
            (
                "type same",
                Box::new(|s| s.type_guid = Some(LINUX_FS_TYPE)),
                true,
            ),
            ("nothing", Box::new(|_| {}), true),
        ];
        for (name, f, ok) in cases {
            let mut s = spec(1);
            f(&mut s);
            assert_eq!(run(Some(&t), false, &[s]).is_ok(), ok, "{name}");
        }
    }

    #[test]
    fn guid_strings_case_insensitive_and_empty_is_unspecified() {
        let p = Partition {
            number: Some(1),
            guid: Some("".into()),
            type_guid: Some("0fc63daf-8483-4772-8e79-3d69d8477de4".into()),
            ..Default::default()
        };
        let s = Spec::from_config(&p).unwrap();
        assert_eq!(s.guid, None);
        assert_eq!(s.type_guid, Some(LINUX_FS_TYPE));
        let bad = |f: &dyn Fn(&mut Partition)| {
            let mut q = p.clone();
            f(&mut q);
            Spec::from_config(&q).is_err()
        };
        assert!(bad(&|q| q.label = Some("x".repeat(37))));
        assert!(bad(&|q| q.guid = Some("not-a-guid".into())));
        assert!(bad(&|q| q.size_mib = Some(-1)));
        assert!(bad(&|q| q.number = Some(129)));
        assert!(bad(&|q| q.number = Some(-1)));
        // A number no table can hold is fine when the partition should not exist (a no-op).
        assert!(!bad(&|q| {
            q.number = Some(999);
            q.should_exist = Some(false);
            q.type_guid = None;
        }));
        assert!(!bad(&|q| q.label = Some("é".repeat(36))));
    }

    #[test]
    fn zero_start_is_start_of_largest_block_and_zero_size_its_end() {
        // Free: 1..10 (9 MiB) and 30..end (~69 MiB): largest is the second.
        let t = table(vec![e(1, 10, 20)]);
        let mut s = spec(2);
        s.start_mib = Some(0);
        s.size_mib = Some(0);
        let p = run(Some(&t), false, &[s]).unwrap();
        let n = p.new.get(2).unwrap();
        assert_eq!(n.start, 30 * MIB);
        assert_eq!(n.end, geom().last_usable());
        // Unspecified start/size on a new partition behave like 0.
        let p = run(Some(&t), false, &[spec(2)]).unwrap();
        assert_eq!(p.new.get(2).unwrap().start, 30 * MIB);
    }

    #[test]
    fn zero_size_fails_when_start_outside_largest_block() {
        let t = table(vec![e(1, 10, 20)]);
        let mut s = spec(2);
        s.start_mib = Some(2);
        s.size_mib = Some(0);
        assert!(run(Some(&t), false, &[s]).is_err());
    }

    #[test]
    fn zero_values_compare_against_layout_after_deletions() {
        // p1 takes the whole disk; spec 0/0 matches it as it would be recreated.
        let whole = {
            let g = geom();
            let mut x = e(1, 1, 1);
            x.end = g.last_usable();
            x
        };
        let t = table(vec![whole.clone()]);
        let mut s = spec(1);
        s.start_mib = Some(0);
        s.size_mib = Some(0);
        let p = run(Some(&t), false, std::slice::from_ref(&s)).unwrap();
        assert_eq!(action(&p, 1), Action::Keep);
        // A smaller p1 does not match 0/0; without wipe it fails, with wipe it is recreated.
        let t = table(vec![e(1, 1, 10)]);
        assert!(run(Some(&t), false, std::slice::from_ref(&s)).is_err());
        s.wipe = true;
        let p = run(Some(&t), false, &[s]).unwrap();
        assert_eq!(action(&p, 1), Action::Recreate);
        assert_eq!(p.new.get(1).unwrap().end, geom().last_usable());
    }

    #[test]
    fn unspecified_start_size_keep_existing_unless_wipe() {
        let t = table(vec![e(1, 5, 10)]);
        let mut s = spec(1);
        s.label = Some("new".into());
        s.wipe = true;
        let p = run(Some(&t), false, &[s]).unwrap();
        // Recreated with label; start/size unspecified + wipe => largest block (whole disk).
        assert_eq!(action(&p, 1), Action::Recreate);
        assert_eq!(p.new.get(1).unwrap().start, MIB);
        // Without wipe, size specified and different -> fail; unspecified -> keep.
        let mut s = spec(1);
        s.label = Some("p1".into());
        let p = run(Some(&t), false, &[s]).unwrap();
        assert_eq!(mib_of(&p, 1), (5, 10));
    }

    #[test]
    fn number_zero_after_numbered_and_next_free() {
        let t = table(vec![e(1, 1, 10)]);
        let mut a = spec(0);
        a.size_mib = Some(5);
        a.label = Some("a".into());
        let mut b = spec(3);
        b.size_mib = Some(5);
        b.label = Some("b".into());
        let mut c = spec(0);
        c.size_mib = Some(5);
        c.label = Some("c".into());
        let p = run(Some(&t), false, &[a, b, c]).unwrap();
        let name = |n| p.new.get(n).unwrap().name.clone();
        assert_eq!(name(3), "b");
        assert_eq!(name(2), "a");
        assert_eq!(name(4), "c");
        // Numbered one placed first: b at 11 MiB, then a, then c.
        assert_eq!(mib_of(&p, 3), (11, 5));
        assert_eq!(mib_of(&p, 2), (16, 5));
        assert_eq!(mib_of(&p, 4), (21, 5));
    }

    #[test]
    fn number_zero_with_should_not_exist_is_rejected() {
        let mut d = spec(2);
        d.should_exist = false;
        assert!(run(None, false, &[spec(0), d]).is_err());
    }

    #[test]
    fn resize_changes_only_the_size_in_place() {
        let t = table(vec![e(1, 1, 10)]);
        let mut s = spec(1);
        s.size_mib = Some(20);
        s.resize = true;
        let p = run(Some(&t), false, std::slice::from_ref(&s)).unwrap();
        assert_eq!(action(&p, 1), Action::Resize);
        let n = p.new.get(1).unwrap();
        assert_eq!(
            (n.start, n.size(), n.guid),
            (MIB, 20 * MIB, Uuid::from_u128(1))
        );
        // Something else differs too: fail.
        s.label = Some("x".into());
        assert!(run(Some(&t), false, std::slice::from_ref(&s)).is_err());
        // Shrinking, like Ignition: the entry is recreated smaller at the same start.
        s.label = None;
        s.size_mib = Some(5);
        let p = run(Some(&t), false, &[s]).unwrap();
        assert_eq!(action(&p, 1), Action::Resize);
        assert_eq!(mib_of(&p, 1), (1, 5));
    }

    #[test]
    fn wipe_table_ignores_existing() {
        let t = table(vec![e(1, 1, 10), e(2, 20, 10)]);
        let mut s = spec(1);
        s.size_mib = Some(4);
        let p = run(Some(&t), true, &[s]).unwrap();
        assert_eq!(p.new.entries.len(), 1);
        assert_eq!(mib_of(&p, 1), (1, 4));
        assert_ne!(p.new.disk_guid, t.disk_guid);
        assert!(p.changes());
    }

    #[test]
    fn overlap_and_out_of_disk_fail() {
        let t = table(vec![e(1, 1, 10)]);
        let mut s = spec(2);
        s.start_mib = Some(5);
        s.size_mib = Some(5);
        assert!(run(Some(&t), false, &[s]).is_err());
        let mut s = spec(2);
        s.start_mib = Some(90);
        s.size_mib = Some(20);
        assert!(run(Some(&t), false, &[s]).is_err());
    }

    #[test]
    fn unlisted_partitions_are_kept_and_no_change_means_no_write() {
        let t = table(vec![e(1, 1, 10), e(2, 20, 10)]);
        let mut s = spec(1);
        s.label = Some("p1".into());
        let p = run(Some(&t), false, &[s]).unwrap();
        assert_eq!(action(&p, 2), Action::Unlisted);
        assert!(!p.changes());
    }

    #[test]
    fn plan_text_names_each_action() {
        let t = table(vec![e(1, 1, 10), e(2, 20, 10), e(3, 40, 5)]);
        let mut a = spec(1);
        a.label = Some("x".into());
        a.wipe = true;
        (a.start_mib, a.size_mib) = (Some(1), Some(10));
        let mut b = spec(2);
        b.should_exist = false;
        b.wipe = true;
        let mut c = spec(3);
        c.size_mib = Some(8);
        c.resize = true;
        let mut d = spec(4);
        d.size_mib = Some(1);
        let text = run(Some(&t), false, &[a, b, c, d]).unwrap().to_string();
        for want in [
            "table: update the table",
            "partition 1: recreate",
            "(was start 2048",
            "partition 2: delete (was",
            "partition 3: resize from 10240 to 16384 sectors (8 MiB)",
            "partition 4: create",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
    }

    #[test]
    fn blank_disk_without_partitions_is_left_alone() {
        assert!(!run(None, false, &[]).unwrap().changes());
        assert!(run(None, true, &[]).unwrap().changes());
        assert!(run(None, false, &[spec(1)]).unwrap().changes());
        let mut gone = spec(1);
        gone.should_exist = false;
        assert!(!run(None, false, &[gone]).unwrap().changes());
    }

    #[test]
    fn alignment_follows_existing_partitions_like_sgdisk() {
        let g = geom();
        assert_eq!(alignment(&g, &[]), 2048);
        assert_eq!(alignment(&g, &[e(1, 1, 10)]), 2048);
        let mut odd = e(2, 20, 1);
        odd.start = 100_000; // divisible by 32, not 64
        assert_eq!(alignment(&g, &[e(1, 1, 10), odd]), 32);
        let g4k = Geometry::new(4096, 100 * 1024 * 1024).unwrap();
        assert_eq!(alignment(&g4k, &[]), 256);
    }

    #[test]
    fn sector_size_4096() {
        let g = Geometry::new(4096, 100 * 1024 * 1024).unwrap();
        let mut s = spec(1);
        s.size_mib = Some(10);
        let p = plan(None, &g, false, &[s], &mut Uuid::new_v4).unwrap();
        let n = p.new.get(1).unwrap();
        assert_eq!((n.start, n.size()), (256, 2560));
    }
}

#[cfg(test)]
#[path = "plan_ignition_cases.rs"]
mod ignition_cases;
