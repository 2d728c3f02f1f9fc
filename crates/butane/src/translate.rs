//! The translation: variant/version to Ignition spec version, decoding, Butane's validation,
//! the sugar of each variant, Ignition's validation of the result, and the JSON.

use crate::api::{Diag, LocalError, Options, Output, Release, Report, TreeEntry};
use crate::decode::{Decoder, entries};
use crate::schema::{self, Def, F, K, T};
use crate::sugar::{make_data_url, merge, unit_path_escape};
use crate::value::{G, Obj, to_json};
use crate::yaml::{self, Kind, Node, Pos};

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Fcos,
    Flatcar,
    Openshift,
    R4e,
    Fiot,
}

/// A variant version's output and features.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub variant: Variant,
    /// Ignition spec minor (3.N.0).
    pub minor: u8,
    pub ign_version: &'static str,
    boot_device: bool,
    grub: bool,
    /// The middle number of the variant version (openshift 4.20.0: 20).
    ver_minor: u8,
}

/// The target of `variant`/`version`, or `None` when Butane has no translator for it.
pub fn target(variant: &str, version: &str, release: Release) -> Option<Target> {
    use Variant::*;
    let exp = |old: (u8, &'static str)| match release {
        Release::V0_25 => old,
        Release::Newest => (7, "3.7.0-experimental"),
    };
    let (v, (minor, ign)) = match (variant, version) {
        ("fcos", "1.0.0") => (Fcos, (0, "3.0.0")),
        ("fcos", "1.1.0") => (Fcos, (1, "3.1.0")),
        ("fcos", "1.2.0") | ("fcos", "1.3.0") => (Fcos, (2, "3.2.0")),
        ("fcos", "1.4.0") => (Fcos, (3, "3.3.0")),
        ("fcos", "1.5.0") => (Fcos, (4, "3.4.0")),
        ("fcos", "1.6.0") => (Fcos, (5, "3.5.0")),
        ("fcos", "1.7.0") => (Fcos, (6, "3.6.0")),
        // v0.25 only: Butane v0.29 has no translator for it.
        ("fcos", "1.7.0-experimental") if release == Release::V0_25 => {
            (Fcos, (6, "3.6.0-experimental"))
        }
        ("fcos", "1.8.0-experimental") => (Fcos, (7, "3.7.0-experimental")),
        ("flatcar", "1.0.0") => (Flatcar, (3, "3.3.0")),
        ("flatcar", "1.1.0") => (Flatcar, (4, "3.4.0")),
        ("flatcar", "1.2.0-experimental") => (Flatcar, exp((6, "3.6.0-experimental"))),
        ("r4e", "1.0.0") => (R4e, (3, "3.3.0")),
        ("r4e", "1.1.0") => (R4e, (4, "3.4.0")),
        ("r4e", "1.2.0-experimental") => (R4e, exp((6, "3.6.0-experimental"))),
        ("fiot", "1.0.0") => (Fiot, (4, "3.4.0")),
        ("fiot", "1.1.0-experimental") => (Fiot, exp((6, "3.6.0-experimental"))),
        ("openshift", v) => {
            let m = match v {
                "4.8.0" | "4.9.0" | "4.10.0" | "4.11.0" | "4.12.0" | "4.13.0" => (2, "3.2.0"),
                "4.14.0" | "4.15.0" | "4.16.0" | "4.17.0" | "4.18.0" => (4, "3.4.0"),
                "4.19.0" | "4.20.0" | "4.21.0" | "4.22.0" => (5, "3.5.0"),
                "4.21.0-experimental" if release == Release::V0_25 => (6, "3.6.0-experimental"),
                "4.23.0-experimental" => (7, "3.7.0-experimental"),
                _ => return None,
            };
            (Openshift, m)
        }
        _ => return None,
    };
    let fcos_minor = |m: &str| -> u8 {
        m.split('.')
            .nth(1)
            .and_then(|x| x.parse().ok())
            .unwrap_or(0)
    };
    let (boot_device, grub) = match v {
        Fcos => (fcos_minor(version) >= 3, fcos_minor(version) >= 5),
        Openshift => (true, minor >= 4),
        _ => (false, false),
    };
    Some(Target {
        variant: v,
        minor,
        ign_version: ign,
        boot_device,
        grub,
        ver_minor: fcos_minor(version),
    })
}

const fn sf(json: &'static str, yaml: &'static str, t: T, since: u8) -> F {
    F {
        json,
        yaml,
        t,
        k: K::Ptr,
        since,
        until: 255,
    }
}

static BOOT_DEVICE: Def = Def {
    name: "BootDevice",
    fields: &[
        sf("layout", "layout", T::Str, 0),
        sf("luks", "luks", T::Obj(&BOOT_LUKS), 0),
        sf("mirror", "mirror", T::Obj(&BOOT_MIRROR), 0),
    ],
};
static BOOT_LUKS: Def = Def {
    name: "BootDeviceLuks",
    fields: &[
        sf("cex", "cex", T::Obj(&schema::CEX), 5),
        sf("device", "device", T::Str, 5),
        sf("discard", "discard", T::Bool, 4),
        sf("tang", "tang", T::ListObj(&schema::TANG), 0),
        sf("threshold", "threshold", T::Int, 0),
        sf("tpm2", "tpm2", T::Bool, 0),
    ],
};
static BOOT_MIRROR: Def = Def {
    name: "BootDeviceMirror",
    fields: &[sf("devices", "devices", T::ListStr, 0)],
};
static GRUB: Def = Def {
    name: "Grub",
    fields: &[sf("users", "users", T::ListObj(&GRUB_USER), 0)],
};
static GRUB_USER: Def = Def {
    name: "GrubUser",
    fields: &[
        sf("name", "name", T::Str, 0),
        sf("password_hash", "password_hash", T::Str, 0),
    ],
};
const ROLE_LABEL: &str = "machineconfiguration.openshift.io/role";

static OPENSHIFT: Def = Def {
    name: "OpenShift",
    fields: &[
        sf("extensions", "extensions", T::ListStr, 0),
        sf("fips", "fips", T::Bool, 0),
        sf("kernel_arguments", "kernel_arguments", T::ListStr, 0),
        sf("kernel_type", "kernel_type", T::Str, 0),
    ],
};

/// From which diagnostic on, (output path, source path) pairs, and whether each pair maps
/// the whole subtree to its source path (see `Ctx::remap`).
type Remap = (usize, Vec<(String, String)>, bool);

struct Ctx<'a, 'o> {
    opts: &'a Options<'o>,
    t: Target,
    report: Report,
    local: Local,
    /// After each sugar's merge: output entry paths of the user's entries and the paths the
    /// user wrote, for the diagnostics reported from then on; `true` where every path under
    /// an entry maps to the one source path (Butane's AddFromCommonSource: a tree, a sugar).
    remap: Vec<Remap>,
    /// openshift: the MachineConfig's metadata (name, labels) and its `openshift` fields.
    mc: Option<McParts>,
}

/// A local file's bytes (shared by its uses), or why it could not be read.
type LocalRead = Result<Rc<Vec<u8>>, String>;
/// A data URL and the compression to set with it (`data_url_for`).
type DataUrl = (String, Option<String>);

/// The local files of one translation: each path read once (ten uses of one file read and
/// compress it once), and the bytes read and embedded, against `Options::max_local_total`.
#[derive(Default)]
struct Local {
    files: RefCell<HashMap<String, LocalRead>>,
    /// Data URLs of local files, by path and the compression asked for.
    urls: RefCell<HashMap<(String, Option<String>), DataUrl>>,
    read: Cell<u64>,
    embedded: Cell<u64>,
}

pub fn run(input: &[u8], opts: &Options<'_>) -> Result<Output, Report> {
    let mut report = Report::default();
    if input.len() > opts.max_size {
        report.push(Diag::plain(format!(
            "config is {} bytes, more than the limit of {} bytes (--max-config-size)",
            input.len(),
            opts.max_size
        )));
        return Err(report);
    }
    let text = match yaml::decode_text(input) {
        Ok(t) => t,
        Err(e) => {
            report.push(Diag::plain(e));
            return Err(report);
        }
    };
    let root = match yaml::parse(&text, &opts.limits) {
        Ok(r) => r,
        Err(e) => {
            report.push(Diag {
                error: true,
                path: String::new(),
                pos: Some(e.pos),
                message: format!("error unmarshaling yaml: {}", e.message),
            });
            return Err(report);
        }
    };
    if !root.is_null() && !matches!(root.kind, Kind::Map(_)) {
        report.push(Diag::error(
            "$",
            root.pos,
            format!(
                "a Butane config must be a mapping, found a {}",
                root.kind_name()
            ),
        ));
        return Err(report);
    }
    let field = |k: &str| root.get(k).filter(|n| !n.is_null());
    let Some(variant) = field("variant").and_then(|n| n.scalar()) else {
        report.push(Diag::plain("error parsing variant; must be specified"));
        return Err(report);
    };
    let Some(version) = field("version").and_then(|n| n.scalar()) else {
        report.push(Diag::plain("error parsing version; must be specified"));
        return Err(report);
    };
    // Butane parses the version with go-semver and looks its String() up: `01.5.0` is 1.5.0.
    let canon = go_semver_canonical(version);
    let Some(t) = canon
        .as_deref()
        .and_then(|v| target(variant, v, opts.release))
    else {
        report.push(Diag::plain(format!(
            "no translator exists for variant {variant} with version {version}"
        )));
        return Err(report);
    };
    let mut cx = Ctx {
        opts,
        t,
        report,
        local: Local::default(),
        remap: Vec::new(),
        mc: None,
    };
    let out = cx.translate(&root);
    if cx.report.has_errors() {
        cx.remap_paths();
        return Err(cx.report);
    }
    let Some(cfg) = out else {
        return Err(cx.report);
    };
    let mut json = to_json(&cfg, t.minor, opts.pretty);
    json.push('\n');
    let ign_report = validate_ignition(&json, &cfg, t, opts.agent_checks);
    cx.report.diags.extend(ign_report.diags);
    bad_urls(&cfg, t.minor, &mut cx.report);
    luks_key_files(
        &cfg,
        opts.machine_config && t.variant == Variant::Openshift,
        &mut cx.report,
    );
    cx.remap_paths();
    if cx.report.has_errors() || (opts.strict && cx.report.has_warnings()) {
        if !cx.report.has_errors() {
            cx.report.push(Diag::plain(
                "config produced warnings and --strict was specified",
            ));
        }
        return Err(cx.report);
    }
    if opts.machine_config && t.variant == Variant::Openshift {
        json = machine_config(&json, cx.mc.take());
    }
    Ok(Output {
        json: json.into_bytes(),
        ign_version: t.ign_version.to_string(),
        report: cx.report,
    })
}

/// Ignition's validation of the output (which Butane runs after the translation, so after
/// every translation warning): a source (or Tang URL) Go's url.Parse refuses.
fn bad_urls(cfg: &Obj, minor: u8, report: &mut Report) {
    let mut bad = Vec::new();
    walk(cfg, "$", &mut |o, p| {
        let k = match o.def.name {
            "Resource" | "ConfigReference" | "CaReference" => "source",
            "Tang" => "url",
            _ => return,
        };
        if let Some(u) = o.str(k)
            && !go_url_ok(u)
        {
            let path = format!("{p}.{k}");
            if minor >= 1
                && let Some(entry) = required_source_entry(&path)
            {
                bad.push(Diag::error(entry, o.pos_of(k), "unable to parse url"));
            }
            bad.push(Diag::error(&path, o.pos_of(k), "unable to parse url"));
        }
    });
    for d in bad {
        if !report.diags.iter().any(|e| e.error && e.path == d.path) {
            report.diags.push(d);
        }
    }
}

/// The MachineConfig around the Ignition config `json`, as Butane's YAML.
/// A MachineConfig's name, labels and `openshift` fields.
type McParts = (String, Vec<(String, String)>, Option<Obj>);

fn machine_config(json: &str, mc: Option<McParts>) -> String {
    use crate::machine_config::{Y, document};
    let cfg = spec::json::parse(json.as_bytes())
        .map(|v| Y::from_json(&v))
        .unwrap_or(Y::Null);
    let (name, labels, os) = mc.unwrap_or_default();
    let mut meta = vec![("name".to_string(), Y::Str(name))];
    if !labels.is_empty() {
        meta.push((
            "labels".into(),
            Y::Map(labels.into_iter().map(|(k, v)| (k, Y::Str(v))).collect()),
        ));
    }
    let mut spec = vec![("config".to_string(), cfg)];
    if let Some(os) = &os {
        for (k, json) in [
            ("kernel_arguments", "kernelArguments"),
            ("extensions", "extensions"),
        ] {
            let l = os.list(k);
            if !l.is_empty() {
                spec.push((
                    json.into(),
                    Y::Seq(
                        l.iter()
                            .map(|(g, _)| Y::Str(g.as_str().unwrap_or("").into()))
                            .collect(),
                    ),
                ));
            }
        }
        if let Some(f) = os.boolean("fips") {
            spec.push(("fips".into(), Y::Bool(f)));
        }
        if let Some(k) = os.str("kernel_type") {
            spec.push(("kernelType".into(), Y::Str(k.into())));
        }
    }
    document(&Y::Map(vec![
        (
            "apiVersion".into(),
            Y::Str("machineconfiguration.openshift.io/v1".into()),
        ),
        ("kind".into(), Y::Str("MachineConfig".into())),
        ("metadata".into(), Y::Map(meta)),
        ("spec".into(), Y::Map(spec)),
    ]))
}

/// Ignition's Luks.Validate also checks the key file's URL itself: a source its resource
/// check refuses is a second error, at the volume's `keys`.
fn luks_key_files(cfg: &Obj, mc: bool, report: &mut Report) {
    let Some(st) = cfg.obj("storage") else { return };
    let mut extra = Vec::new();
    for (i, (_, pos)) in st.list("luks").iter().enumerate() {
        let src = format!("$.storage.luks.{i}.key_file.source");
        if report.diags.iter().any(|d| d.error && d.path == src) {
            // A MachineConfig's translation set has no `keys` (Butane sets no translation
            // for it): the path stays in the MachineConfig's space.
            let root = if mc { "$.spec.config" } else { "$" };
            extra.push(Diag::error(
                &format!("{root}.storage.luks.{i}.keys"),
                *pos,
                "invalid key-file source",
            ));
        }
    }
    report.diags.extend(extra);
}

/// Ignition's own validation of the translated config (as Butane runs it), with the JSON
/// paths mapped back to the YAML where the value came from.
fn validate_ignition(json: &str, cfg: &Obj, t: Target, agent_checks: bool) -> Report {
    let mut report = Report::default();
    // The agent validates stable versions; an experimental spec is checked as the newest
    // stable one it extends.
    let text: std::borrow::Cow<'_, str> = if t.ign_version.ends_with("-experimental") {
        json.replacen(
            &format!("\"version\":\"{}\"", t.ign_version),
            "\"version\":\"3.6.0\"",
            1,
        )
        .replacen(
            &format!("\"version\": \"{}\"", t.ign_version),
            "\"version\": \"3.6.0\"",
            1,
        )
        .into()
    } else {
        // Not copied: the output of a big translation is hundreds of MiB.
        json.into()
    };
    let diags = match spec::config::parse(text.as_bytes()) {
        Ok(p) => p.warnings.diagnostics,
        Err(r) => r.diagnostics,
    };
    ignition_dups(cfg, "$", &mut report);
    // Ignition warns of special bits as `uint32(mode) & 07000` before spec 3.6, also for a
    // mode it refuses (-1); the agent's validator names only valid modes.
    if t.minor < 6 {
        walk(cfg, "$", &mut |o, p| {
            if matches!(o.def.name, "File" | "Directory")
                && let Some(m) = o.int("mode")
                && !(0..=0o7777).contains(&m)
                && (m as u32) & 0o7000 != 0
            {
                report.push(Diag::warning(
                    &format!("{p}.mode"),
                    o.pos_of("mode"),
                    "setuid/setgid/sticky bits are not supported or functional in spec versions older than 3.6.0",
                ));
            }
        });
    }
    for d in diags {
        if !agent_checks && agent_only(&d.message)
            || t.minor < 3 && d.message == "link target is required"
        {
            continue;
        }
        // Spec 3.0's ignition-validate accepts a merge without a source (Butane fcos 1.0.0
        // writes `"source": null` for an inline merge); Ignition fails it only at run time.
        if t.minor == 0 && d.message.contains("need a source") {
            continue;
        }
        let (ypath, pos) = yaml_path(cfg, &d.path);
        let error = d.severity == spec::config::Severity::Error;
        // Spec 3.1+ checks a merge's or CA's source twice: its validateRequiredSource at the
        // entry ("source is required", or the URL's error) and the resource's at `source`.
        if t.minor >= 1
            && error
            && let Some(entry) = required_source_entry(&ypath)
        {
            let at = Diag::error(entry, pos, d.message.clone());
            if d.message.contains("need a source") {
                report.push(at);
                continue;
            }
            report.push(at);
        }
        report.push(Diag {
            error,
            path: ypath,
            pos: Some(pos),
            message: d.message.clone(),
        });
    }
    report
}

/// `$.ignition.config.merge.N` for `$.ignition.config.merge.N.source` (also a CA's): the
/// entries whose source Ignition 3.1+ requires.
fn required_source_entry(path: &str) -> Option<&str> {
    let entry = path.strip_suffix(".source")?;
    let (list, n) = entry.rsplit_once('.')?;
    (matches!(
        list,
        "$.ignition.config.merge" | "$.ignition.security.tls.certificate_authorities"
    ) && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit()))
    .then_some(entry)
}

/// Butane's isTemplateInstance: `foo@bar.container` is an instance of `foo@.container`.
fn quadlet_template(name: &str) -> Option<String> {
    let at = name.find('@')?;
    let dot = name.rfind('.')?;
    if at + 1 == dot {
        return None;
    }
    Some(format!("{}@.{}", &name[..at], &name[dot + 1..]))
}

/// Ignition's `ValidateDups`, which Butane runs on its output: in every struct, a list entry
/// whose key (`Key()`: path, name, device, source, ...; a string itself) an earlier entry of
/// the list has is an error. Files, directories and links share one key space, as do the two
/// kernel argument lists; `append` and the option lists are exempt.
fn ignition_dups(o: &Obj, path: &str, report: &mut Report) {
    fn key(g: &G) -> Option<String> {
        let o = match g {
            G::Str(s) => return Some(s.clone()),
            G::Obj(o) => o,
            _ => return None,
        };
        let s = |k: &str| o.str(k).unwrap_or("").to_string();
        Some(match o.def.name {
            "Directory" | "File" | "Link" => s("path"),
            "Disk" | "Filesystem" => s("device"),
            "HTTPHeader" | "Luks" | "Raid" | "PasswdUser" | "PasswdGroup" | "Unit" | "Dropin" => {
                s("name")
            }
            "Resource" | "ConfigReference" | "CaReference" => s("source"),
            "Tang" => s("url"),
            "Partition" => match (o.int("number").unwrap_or(0), o.str("label")) {
                (n, _) if n != 0 => format!("number:{n}"),
                (_, Some(l)) => format!("label:{l}"),
                _ => String::new(),
            },
            _ => return None,
        })
    }
    let mut lists: HashMap<&str, HashSet<String>> = HashMap::new();
    for (fd, v) in o.def.fields.iter().zip(&o.vals) {
        if fd.k == K::Sugar {
            continue;
        }
        let name = if fd.yaml.is_empty() { fd.json } else { fd.yaml };
        let child = format!("{path}.{name}");
        match v {
            Some(G::Obj(c)) => ignition_dups(c, &child, report),
            Some(G::List(l)) => {
                let ignored = matches!(
                    (o.def.name, fd.json),
                    ("File", "append")
                        | ("Filesystem", "options" | "mountOptions")
                        | ("Luks" | "Raid", "options")
                );
                let group = match (o.def.name, fd.json) {
                    ("Storage", "directories" | "files" | "links") => "Node",
                    ("KernelArguments", _) => "KernelArgument",
                    (_, j) => j,
                };
                for (i, (g, pos)) in l.iter().enumerate() {
                    if let G::Obj(c) = g {
                        ignition_dups(c, &format!("{child}.{i}"), report);
                    }
                    if ignored {
                        continue;
                    }
                    let Some(k) = key(g) else { continue };
                    if !lists.entry(group).or_default().insert(k) {
                        report.push(Diag::error(
                            &format!("{child}.{i}"),
                            *pos,
                            "duplicate entry defined",
                        ));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether Go's `url.Parse` accepts `s` (Ignition refuses a source it cannot parse): no
/// control characters, no leading `:`, valid `%` escapes in the path and fragment, a host of
/// allowed characters with a closed `[...]` and a numeric port.
fn go_url_ok(s: &str) -> bool {
    fn unescape_ok(s: &str, host: bool) -> bool {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if c == b'%' {
                if i + 2 >= b.len()
                    || !b[i + 1].is_ascii_hexdigit()
                    || !b[i + 2].is_ascii_hexdigit()
                {
                    return false;
                }
                i += 3;
                continue;
            }
            if host
                && c < 0x80
                && !(c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]<>\"".contains(&c))
            {
                return false;
            }
            i += 1;
        }
        true
    }
    if s.bytes().any(|c| c < 0x20 || c == 0x7f) {
        return false;
    }
    if s.is_empty() {
        return true;
    }
    let (rest, frag) = s.split_once('#').map_or((s, None), |(a, b)| (a, Some(b)));
    if let Some(f) = frag
        && !unescape_ok(f, false)
    {
        return false;
    }
    // The scheme: letters first, then letters, digits, + - .; a ':' at 0 is an error.
    let mut scheme = "";
    let mut rest = rest;
    for (i, c) in rest.char_indices() {
        if c.is_ascii_alphabetic() {
            continue;
        }
        if i > 0 && (c.is_ascii_digit() || "+-.".contains(c)) {
            continue;
        }
        if c == ':' {
            if i == 0 {
                return false;
            }
            scheme = &rest[..i];
            rest = &rest[i + 1..];
        }
        break;
    }
    let rest = rest.split_once('?').map_or(rest, |(a, _)| a);
    if !rest.starts_with('/') && !scheme.is_empty() {
        return true; // opaque
    }
    if scheme.is_empty()
        && !rest.starts_with('/')
        && rest.split('/').next().is_some_and(|seg| seg.contains(':'))
    {
        return false;
    }
    let mut path = rest;
    if rest.starts_with("//") && (!scheme.is_empty() || !rest.starts_with("///")) {
        let after = &rest[2..];
        let end = after.find('/').unwrap_or(after.len());
        let authority = &after[..end];
        path = &after[end..];
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if let Some(h) = host.strip_prefix('[') {
            let Some(close) = h.find(']') else {
                return false;
            };
            let port = &h[close + 1..];
            if !(port.is_empty()
                || port.starts_with(':') && port[1..].bytes().all(|c| c.is_ascii_digit()))
            {
                return false;
            }
        } else {
            if let Some(i) = host.rfind(':')
                && !host[i + 1..].bytes().all(|c| c.is_ascii_digit())
            {
                return false;
            }
            if !unescape_ok(host, true) {
                return false;
            }
        }
    }
    unescape_ok(path, false)
}

/// Checks of the agent's config validation that Ignition's validation (which Butane runs on
/// its output) does not make: `agent butane` prints what Butane prints, and these stay with
/// `agent validate` and the agent's own run (README, "Where the agent differs from Ignition").
fn agent_only(msg: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "id ",
        "uid ",
        "gid ",
        "invalid user name",
        "invalid group name",
    ];
    const PARTS: &[&str] = &[
        "a masked unit cannot be enabled",
        " UUID: mkfs will refuse it",
        "home directory must be an absolute path",
    ];
    // Duplicates are Ignition's ValidateDups (`ignition_dups`): "duplicate entry defined" at
    // the later list entry, not the agent's messages at its key.
    if msg.starts_with("duplicate ") {
        return true;
    }
    if PREFIXES.iter().any(|p| msg.starts_with(p)) && msg.contains("out of range")
        || msg.starts_with("invalid user name")
        || msg.starts_with("invalid group name")
    {
        return true;
    }
    if let Some(rest) = msg.strip_prefix("invalid unit name \"")
        && let Some(name) = rest.split('"').next()
    {
        // Ignition looks only at path.Ext of the name.
        let ext = name.rfind('.').map(|i| &name[i..]).unwrap_or("");
        return !ext.contains('/') && spec::config::validate::UNIT_SUFFIXES.contains(&ext);
    }
    PARTS.iter().any(|p| msg.contains(p))
}

/// The `ignition.version` of a config given `inline`, read as Butane reads it (Go's
/// `json.Unmarshal` into the Ignition types, keys matched without case, then go-semver): text
/// that is not JSON, or not an object, or a version that is missing or not semver, is an error.
fn child_version(bytes: &[u8]) -> Result<String, String> {
    fn member<'v>(v: &'v spec::json::Value, key: &str) -> Option<&'v spec::json::Value> {
        match &v.kind {
            spec::json::Kind::Object(m) => m
                .iter()
                .rev()
                .find(|m| m.key == key)
                .or_else(|| m.iter().rev().find(|m| m.key.eq_ignore_ascii_case(key)))
                .map(|m| &m.value),
            _ => None,
        }
    }
    use spec::json::Kind as J;
    let v = spec::json::parse(bytes).map_err(|e| format!("config is not valid: {e}"))?;
    let ign = match &v.kind {
        J::Object(_) => member(&v, "ignition"),
        J::Null => None,
        k => {
            return Err(format!(
                "config is not valid: cannot unmarshal {} into a config",
                k.type_name()
            ));
        }
    };
    let version = match ign.map(|i| &i.kind) {
        None | Some(J::Null) => None,
        Some(J::Object(_)) => match member(ign.expect("ignition"), "version").map(|v| &v.kind) {
            None | Some(J::Null) => None,
            Some(J::String(s)) => Some(s.clone()),
            Some(k) => {
                return Err(format!(
                    "config is not valid: cannot unmarshal {} into ignition.version",
                    k.type_name()
                ));
            }
        },
        Some(k) => {
            return Err(format!(
                "config is not valid: cannot unmarshal {} into ignition",
                k.type_name()
            ));
        }
    };
    match version {
        Some(v) if go_semver(&v) => Ok(v),
        _ => Err("invalid config version (couldn't parse)".into()),
    }
}

/// A tree's entry `i` of `$.storage.{kind}` comes from the tree at `tree` (so does the list,
/// where the tree started it: Butane's translation of the list path).
fn tree_origin(origins: &mut Vec<(String, String)>, kind: &str, i: usize, tree: &str) {
    origins.push((format!("$.storage.{kind}.{i}"), tree.to_string()));
    if i == 0 {
        origins.push((format!("$.storage.{kind}"), tree.to_string()));
    }
}

/// `v` as go-semver's `Version.String()` prints what it parsed, or `None` where it fails.
fn go_semver_canonical(v: &str) -> Option<String> {
    if !go_semver(v) {
        return None;
    }
    let (v, meta) = v.split_once('+').map_or((v, None), |(a, m)| (a, Some(m)));
    let (v, pre) = v.split_once('-').map_or((v, None), |(a, p)| (a, Some(p)));
    let nums: Vec<u64> = v
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let mut out = format!("{}.{}.{}", nums[0], nums[1], nums[2]);
    if let Some(p) = pre {
        out.push('-');
        out.push_str(p);
    }
    if let Some(m) = meta {
        out.push('+');
        out.push_str(m);
    }
    Some(out)
}

/// Whether go-semver (`semver.NewVersion`) parses `v`: `MAJOR.MINOR.PATCH[-PRE][+META]`,
/// each number decimal digits (leading zeros allowed).
fn go_semver(v: &str) -> bool {
    let v = v.split_once('+').map_or(v, |(a, _)| a);
    let v = v.split_once('-').map_or(v, |(a, _)| a);
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 18 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Butane validates a merged or replacing config given `inline` with the parser of the
/// output's own spec version: a child of another version is "unknown" to it and only warned
/// about; a child of the same version has its errors reported.
fn child_configs(cfg: &Obj, t: Target, report: &mut Report) {
    if t.minor == 0 {
        return;
    }
    let Some(c) = cfg.obj("ignition").and_then(|i| i.obj("config")) else {
        return;
    };
    let mut refs: Vec<(String, &Obj, Pos)> = c
        .list("merge")
        .iter()
        .enumerate()
        .filter_map(|(i, (g, p))| {
            g.as_obj()
                .map(|o| (format!("$.ignition.config.merge.{i}"), o, *p))
        })
        .collect();
    if let Some(r) = c.obj("replace") {
        refs.push(("$.ignition.config.replace".into(), r, c.pos_of("replace")));
    }
    for (path, r, pos) in refs {
        // Butane checks the configs given `inline` (not `local` ones, nor URLs).
        let Some(G::Str(inline)) = r.sugar("inline") else {
            continue;
        };
        let bytes = inline.as_bytes();
        // Ignition's validation of the child reports at the child's own paths (Butane prints
        // them as they are): an unparsable version at `$.ignition.version`.
        match child_version(bytes) {
            Err(msg) if msg.contains("couldn't parse") => {
                report.push(Diag::error("$.ignition.version", pos, msg))
            }
            Err(msg) => report.push(Diag::error(&format!("{path}.inline"), pos, msg)),
            Ok(v) if v != t.ign_version => report.push(Diag::warning(
                &format!("{path}.version"),
                pos,
                "skipping validation for the merge/replace ignition config due to an unkown version",
            )),
            Ok(_) => {
                if let Err(r) = spec::config::parse(bytes) {
                    for d in r.errors() {
                        report.push(Diag::error(
                            &d.path.to_string(),
                            pos,
                            format!("in the merged config: {d}"),
                        ));
                    }
                }
            }
        }
    }
}

/// Maps an Ignition JSON path to the YAML path and position of the value it came from.
fn yaml_path(cfg: &Obj, path: &spec::config::Path) -> (String, Pos) {
    use spec::config::diag::Seg;
    let mut out = String::from("$");
    let mut pos = cfg.at;
    let mut cur: Option<&G> = None;
    let mut obj: Option<&Obj> = Some(cfg);
    for seg in &path.0 {
        match seg {
            Seg::Key(k) => {
                let Some(o) = obj else { break };
                let Some(i) = o
                    .def
                    .fields
                    .iter()
                    .enumerate()
                    .position(|(i, f)| f.json == k && o.vals[i].is_some())
                else {
                    out.push('.');
                    out.push_str(k);
                    break;
                };
                let f = &o.def.fields[i];
                out.push('.');
                out.push_str(if f.yaml.is_empty() { f.json } else { f.yaml });
                pos = o.pos[i];
                cur = o.vals[i].as_ref();
                obj = cur.and_then(|g| g.as_obj());
            }
            Seg::Index(n) => {
                out.push('.');
                out.push_str(&n.to_string());
                match cur {
                    Some(G::List(l)) if *n < l.len() => {
                        pos = l[*n].1;
                        cur = Some(&l[*n].0);
                        obj = cur.and_then(|g| g.as_obj());
                    }
                    _ => break,
                }
            }
        }
    }
    (out, pos)
}

/// Butane's MakeDataURL: the shortest of URL-escaped, base64 and (where `gzip`: not on
/// openshift 4.8/4.9, which set NoResourceAutoCompression) gzip'd base64.
fn data_url_for(
    minor: u8,
    gzip: bool,
    contents: &[u8],
    current: Option<&str>,
) -> (String, Option<String>) {
    if minor == 0 {
        (format!("data:,{}", crate::sugar::escape(contents)), None)
    } else if gzip {
        make_data_url(contents, current)
    } else {
        make_data_url(contents, Some("none"))
            .0
            .pipe_compression(current)
    }
}

trait PipeCompression {
    fn pipe_compression(self, current: Option<&str>) -> (String, Option<String>);
}

impl PipeCompression for String {
    /// A URL made without compression; the compression field set to "" where unset.
    fn pipe_compression(self, current: Option<&str>) -> (String, Option<String>) {
        (self, current.is_none_or(str::is_empty).then(String::new))
    }
}

fn no_files_dir() -> String {
    "local file paths are relative to a files directory that must be specified with -d/--files-dir"
        .into()
}

impl Ctx<'_, '_> {
    fn translate(&mut self, root: &Node) -> Option<Obj> {
        let minor = self.t.minor;
        // Split the root: the Ignition part and the variant's own keys.
        let mut base_entries = Vec::new();
        let mut extra: Vec<(&str, &Node, Pos)> = Vec::new();
        crate::decode::merge_key_warnings(root, "$", &mut self.report);
        for (k, v, p) in entries(root, "$", &mut self.report) {
            match k {
                "variant" | "version" => {}
                "boot_device" if self.t.boot_device => extra.push((k, v, p)),
                "grub" if self.t.grub => extra.push((k, v, p)),
                "openshift" | "metadata" if self.t.variant == Variant::Openshift => {
                    extra.push((k, v, p))
                }
                _ => base_entries.push((
                    Node {
                        kind: Kind::Scalar {
                            value: k.to_string(),
                            style: yaml::Style::Plain,
                            tag: None,
                        },
                        pos: p,
                    },
                    v.clone(),
                )),
            }
        }
        let base = Node {
            kind: Kind::Map(std::rc::Rc::new(base_entries)),
            pos: root.pos,
        };
        let mut dec = Decoder {
            minor,
            report: &mut self.report,
        };
        let mut cfg = dec
            .obj(&schema::CONFIG, &base, "$")
            .unwrap_or_else(|| Obj::new(&schema::CONFIG, root.pos));
        let mut boot = None;
        let mut grub = None;
        let mut openshift = None;
        let mut metadata_name: Option<String> = None;
        let mut metadata_pos = root.pos;
        let mut role: Option<String> = None;
        let mut labels: Vec<(String, String)> = Vec::new();
        for (k, v, p) in &extra {
            let path = format!("$.{k}");
            if v.is_null() {
                dec.null_struct(v, &path);
            }
            match *k {
                "boot_device" => boot = dec.obj(&BOOT_DEVICE, v, &path),
                "grub" => grub = dec.obj(&GRUB, v, &path),
                "openshift" => openshift = dec.obj(&OPENSHIFT, v, &path),
                "metadata" => {
                    metadata_pos = *p;
                    crate::decode::merge_key_warnings(v, &path, dec.report);
                    for (mk, mv, mp) in entries(v, &path, dec.report) {
                        match mk {
                            "name" => metadata_name = dec.string(mv, "$.metadata.name"),
                            "labels" => {
                                if let Kind::Map(m) = &mv.kind {
                                    for (lk, lv) in m.iter() {
                                        if lk.scalar() == Some(ROLE_LABEL) {
                                            role = lv.scalar().map(str::to_string);
                                        }
                                        if let Some(k) = lk.scalar() {
                                            let v = if lv.is_null() {
                                                ""
                                            } else {
                                                lv.scalar().unwrap_or("")
                                            };
                                            labels.retain(|(o, _)| o != k);
                                            labels.push((k.to_string(), v.to_string()));
                                        }
                                    }
                                }
                            }
                            _ => dec.report.push(Diag::warning(
                                &format!("$.metadata.{mk}"),
                                mp,
                                format!("unused key {mk}"),
                            )),
                        }
                    }
                }
                _ => {}
            }
        }
        if self.report.has_errors() {
            // go-yaml's unmarshal errors end Butane before its unused-key check: no warnings,
            // and the errors have no path (go-yaml names only the line).
            self.report.diags.retain(|d| d.error);
            for d in &mut self.report.diags {
                d.path.clear();
            }
            return None;
        }
        cfg.obj_mut("ignition", minor)
            .set("version", minor, G::Str(self.t.ign_version.into()));

        self.validate_base(&cfg);
        // Part of Butane's validation of the source, before any translation.
        child_configs(&cfg, self.t, &mut self.report);
        // fcos 1.6+'s Config.Validate (openshift's own Config.Validate shadows it).
        if minor >= 5 && self.t.variant == Variant::Fcos {
            self.partitions_by_label(&cfg, boot.as_ref());
            if let Some(st) = cfg.obj("storage") {
                for (i, (fs, _)) in st.list("filesystems").iter().enumerate() {
                    let fs = fs.as_obj().expect("object");
                    if let Some(p) = fs.str("path")
                        && fs.sugar("with_mount_unit") == Some(&G::Bool(true))
                        && !(p == "/etc"
                            || p == "/var"
                            || p.starts_with("/etc/")
                            || p.starts_with("/var/"))
                    {
                        self.report.push(Diag::error(
                            &format!("$.storage.filesystems.{i}.path"),
                            fs.pos_of("path"),
                            "path must be under /etc or /var if with_mount_unit is true",
                        ));
                    }
                }
            }
        }
        if minor == 0 {
            self.ca_sources_30(&cfg);
        }
        if self.t.variant == Variant::Openshift {
            self.openshift_cex(&cfg, openshift.as_ref(), boot.as_ref());
        }
        if self.t.variant == Variant::Openshift && metadata_name.as_deref().unwrap_or("").is_empty()
        {
            self.report.push(Diag::error(
                "$.metadata.name",
                metadata_pos,
                "metadata.name is required",
            ));
        }
        if self.t.variant == Variant::Openshift && role.as_deref().unwrap_or("").is_empty() {
            self.report.push(Diag::error(
                "$.metadata.labels",
                metadata_pos,
                "machineconfiguration.openshift.io/role label is required",
            ));
        }
        if let Some(kt) = openshift.as_ref().and_then(|o| o.str("kernel_type"))
            && !matches!(kt, "" | "default" | "realtime")
        {
            let pos = openshift.as_ref().map(|o| o.pos_of("kernel_type"));
            self.report.push(Diag::error(
                "$.openshift.kernel_type",
                pos.unwrap_or(metadata_pos),
                "must be empty, \"default\", or \"realtime\"",
            ));
        }
        if let Some(b) = &boot {
            self.validate_boot_device(b);
        }
        if let Some(g) = &grub {
            for (i, (u, p)) in g.list("users").iter().enumerate() {
                let u = u.as_obj().expect("object");
                if u.str("name").unwrap_or("").is_empty() {
                    self.report.push(Diag::error(
                        &format!("$.grub.users.{i}.name"),
                        *p,
                        "field \"name\" is required",
                    ));
                }
                if u.str("password_hash").unwrap_or("").is_empty() {
                    self.report.push(Diag::error(
                        &format!("$.grub.users.{i}.password_hash"),
                        *p,
                        "field \"password_hash\" is required",
                    ));
                }
            }
        }
        if self.report.has_errors() {
            return None;
        }

        // Base sugar, in Butane's order.
        self.resources(&mut cfg, "$");
        self.users_and_units(&mut cfg);
        self.mount_units(&mut cfg);
        self.trees(&mut cfg);
        self.quadlets(&mut cfg);
        if self.report.has_errors() {
            return None;
        }
        // Variant sugar.
        if let Some(b) = &boot {
            self.boot_device(&mut cfg, b);
        }
        self.partition_label_warnings(&cfg);
        if let Some(g) = &grub {
            self.grub(&mut cfg, g);
        }
        if self.t.variant == Variant::Openshift {
            self.openshift_raw(&mut cfg, openshift.as_ref(), boot.as_ref());
        }
        self.forbidden_fields(&cfg);
        if self.report.has_errors() {
            return None;
        }
        if self.t.variant == Variant::Openshift && self.opts.machine_config {
            self.machine_config_filters(&cfg);
            if self.report.has_errors() {
                return None;
            }
        }
        if self.t.variant == Variant::Openshift {
            self.mc = Some((metadata_name.unwrap_or_default(), labels, openshift));
        }
        Some(cfg)
    }

    fn validate_base(&mut self, cfg: &Obj) {
        let mut diags = Vec::new();
        // Swap filesystems need no path from base v0_4 (spec 3.3) on.
        let swap_ok = self.t.minor >= 3;
        walk(cfg, "$", &mut |o, path| match o.def.name {
            "Resource" => {
                let n = ["source", "inline", "local"]
                    .iter()
                    .filter(|k| {
                        if **k == "source" {
                            o.get("source").is_some()
                        } else {
                            o.sugar(k).is_some()
                        }
                    })
                    .count();
                if n > 1 {
                    let which = ["local", "inline", "source"]
                        .into_iter()
                        .rev()
                        .find(|k| {
                            if *k == "source" {
                                o.get("source").is_some()
                            } else {
                                o.sugar(k).is_some()
                            }
                        })
                        .unwrap_or("source");
                    diags.push(Diag::error(
                        &format!("{path}.{which}"),
                        o.pos_of(which),
                        "only one of the following can be set: inline, local, source",
                    ));
                }
            }
            "Filesystem" if o.sugar("with_mount_unit") == Some(&G::Bool(true)) => {
                let format = o.str("format").unwrap_or("");
                // Before spec 3.3 (no swap units) the two are checked apart: both can fail.
                if !swap_ok && o.str("path").unwrap_or("").is_empty() {
                    diags.push(Diag::error(
                        &format!("{path}.path"),
                        o.at,
                        "path is required if with_mount_unit is true and format is not swap",
                    ));
                }
                if format.is_empty() {
                    diags.push(Diag::error(
                        &format!("{path}.format"),
                        o.at,
                        "format is required if with_mount_unit is true",
                    ));
                } else if format != "swap" && swap_ok && o.str("path").unwrap_or("").is_empty() {
                    diags.push(Diag::error(
                        &format!("{path}.path"),
                        o.at,
                        "path is required if with_mount_unit is true and format is not swap",
                    ));
                }
            }
            "File" | "Directory" => {
                if let Some(m) = o.int("mode")
                    && decimal_mode(m, o.def.name == "Directory")
                {
                    diags.push(Diag::warning(
                        &format!("{path}.mode"),
                        o.pos_of("mode"),
                        "unreasonable mode would be reasonable if specified in octal; remember to add a leading zero",
                    ));
                }
            }
            "Tree"
                if o.sugar("local")
                    .and_then(G::as_str)
                    .unwrap_or("")
                    .is_empty() =>
            {
                diags.push(Diag::error(path, o.at, "field \"local\" is required"));
            }
            "Unit" | "Dropin"
                if o.sugar("contents_local").is_some() && o.get("contents").is_some() =>
            {
                diags.push(Diag::error(
                    &format!("{path}.contents_local"),
                    o.sugar_pos("contents_local"),
                    "only one of the following can be set: contents, contents_local",
                ));
            }
            _ => {}
        });
        self.report.diags.extend(diags);
    }

    /// Base v0_6 on (spec 3.5): a partition given by label only, on a disk whose table is
    /// kept, is not reused but created anew; Butane warns.
    fn partitions_by_label(&mut self, cfg: &Obj, boot: Option<&Obj>) {
        let Some(st) = cfg.obj("storage") else { return };
        // Butane v0.29 no longer warns for the disks of boot_device.mirror.
        let mirrored: HashSet<&str> = match self.opts.release {
            Release::Newest => boot
                .and_then(|b| b.obj("mirror"))
                .map(|m| {
                    m.list("devices")
                        .iter()
                        .filter_map(|(g, _)| g.as_str())
                        .collect()
                })
                .unwrap_or_default(),
            Release::V0_25 => HashSet::new(),
        };
        for (i, (d, _)) in st.list("disks").iter().enumerate() {
            let d = d.as_obj().expect("object");
            if d.boolean("wipeTable") == Some(true)
                || d.str("device") == Some("/dev/disk/by-id/coreos-boot-disk")
                || d.str("device").is_some_and(|dev| mirrored.contains(dev))
            {
                continue;
            }
            for (j, (p, pos)) in d.list("partitions").iter().enumerate() {
                let p = p.as_obj().expect("object");
                if p.int("number").unwrap_or(0) == 0 && p.get("label").is_some() {
                    self.report.push(Diag::warning(
                        &format!("$.storage.disks.{i}.partitions.{j}.number"),
                        *pos,
                        "partitions cannot be reused by label; number must be specified except on boot disk (/dev/disk/by-id/coreos-boot-disk) or when wipe_table is true",
                    ));
                }
            }
        }
    }

    /// Spec 3.0's CaReference has a required source: `inline`/`local` (which 3.0 cannot
    /// express there) leave it empty, which Ignition 3.0 refuses.
    fn ca_sources_30(&mut self, cfg: &Obj) {
        let Some(tls) = cfg
            .obj("ignition")
            .and_then(|i| i.obj("security"))
            .and_then(|s| s.obj("tls"))
        else {
            return;
        };
        for (i, (ca, pos)) in tls.list("certificateAuthorities").iter().enumerate() {
            let ca = ca.as_obj().expect("object");
            if ca.str("source").unwrap_or("").is_empty() {
                self.report.push(Diag::error(
                    &format!("$.ignition.security.tls.certificate_authorities.{i}.source"),
                    *pos,
                    "certificate authorities need a source",
                ));
            }
        }
    }

    fn validate_boot_device(&mut self, b: &Obj) {
        // Butane's BootDevice.Validate: fcos 1.6 / openshift 4.19 (spec 3.5) brought the s390x
        // layouts and the CEX rules; before, only the three layouts are known.
        let new_rules = self.t.minor >= 5;
        let layout = b.str("layout");
        let devices = b
            .obj("mirror")
            .map(|m| m.list("devices").len())
            .unwrap_or(0);
        if devices > 0 && layout.is_none() && self.opts.release == Release::Newest {
            // An error from fcos 1.7 (spec 3.6) on, a warning before.
            let d = Diag {
                error: self.t.minor >= 6,
                path: "$.boot_device.mirror".into(),
                pos: Some(b.pos_of("mirror")),
                message:
                    "boot_device.layout should be specified when boot_device.mirror is specified"
                        .into(),
            };
            self.report.push(d);
        }
        let luks_device = b.obj("luks").and_then(|l| l.str("device")).unwrap_or("");
        let at = b.pos_of("layout");
        if let Some(l) = layout {
            match l {
                "aarch64" | "ppc64le" | "x86_64" => {}
                "s390x-eckd" | "s390x-zfcp" if new_rules => {
                    let prefix = if l == "s390x-eckd" { "/dev/dasd" } else { "/dev/sd" };
                    let ok = luks_device
                        .strip_prefix(prefix)
                        .is_some_and(|r| r.len() == 1 && r.as_bytes()[0].is_ascii_lowercase());
                    let msg = if luks_device.is_empty() {
                        "device is required for layouts: s390x-eckd, s390x-zfcp"
                    } else {
                        "device name must start with /dev/dasd on s390x-eckd layout or /dev/sd on s390x-zfcp layout"
                    };
                    if !ok {
                        self.report
                            .push(Diag::error("$.boot_device.layout", at, msg));
                    }
                }
                "s390x-virt" if new_rules => {}
                _ => self.report.push(Diag::error(
                    "$.boot_device.layout",
                    at,
                    if new_rules {
                        "layout must be one of: aarch64, ppc64le, s390x-eckd, s390x-virt, s390x-zfcp, x86_64"
                    } else {
                        "layout must be one of: aarch64, ppc64le, x86_64"
                    },
                )),
            }
            if new_rules && l.starts_with("s390x") && devices > 0 {
                self.report.push(Diag::error(
                    "$.boot_device.layout",
                    at,
                    "mirroring the boot disk is not supported on s390x",
                ));
            }
        }
        if new_rules
            && let Some(luks) = b.obj("luks")
            && luks
                .obj("cex")
                .and_then(|c| c.boolean("enabled"))
                .unwrap_or(false)
        {
            match layout {
                None => self.report.push(Diag::error(
                    "$.boot_device.luks.cex",
                    b.pos_of("luks"),
                    "when using cex the targeted architecture must match s390x",
                )),
                Some(l) if !l.starts_with("s390x") => self.report.push(Diag::error(
                    "$.boot_device.layout",
                    at,
                    "when using cex the targeted architecture must match s390x",
                )),
                _ => {}
            }
            if !luks.list("tang").is_empty() || luks.boolean("tpm2") == Some(true) {
                self.report.push(Diag::error(
                    "$.boot_device.luks",
                    b.pos_of("luks"),
                    "cannot use cex with clevis",
                ));
            }
        }
        if devices == 1 {
            self.report.push(Diag::error(
                "$.boot_device.mirror.devices",
                b.pos_of("mirror"),
                "mirroring requires at least two devices",
            ));
        }
    }

    /// `inline` and `local` of every resource, to a data URL.
    fn resources(&mut self, o: &mut Obj, path: &str) {
        let minor = self.t.minor;
        for i in 0..o.vals.len() {
            let f = &o.def.fields[i];
            let name = if f.yaml.is_empty() { f.json } else { f.yaml };
            let child = format!("{path}.{name}");
            match o.vals[i].as_mut() {
                Some(G::Obj(c)) => self.resources(c, &child),
                Some(G::List(l)) => {
                    for (j, (v, _)) in l.iter_mut().enumerate() {
                        if let G::Obj(c) = v {
                            self.resources(c, &format!("{child}.{j}"));
                        }
                    }
                }
                _ => {}
            }
        }
        if o.def.name != "Resource" {
            return;
        }
        let converted = if let Some(G::Str(rel)) = o.sugar("local").cloned() {
            let pos = o.sugar_pos("local");
            match self.local_url(&rel, o.str("compression")) {
                Ok(u) => Some((u, pos)),
                Err(e) => {
                    self.report
                        .push(Diag::error(&format!("{path}.local"), pos, e));
                    return;
                }
            }
        } else {
            o.sugar("inline").and_then(G::as_str).map(|s| {
                (
                    data_url_for(minor, self.gzip(), s.as_bytes(), o.str("compression")),
                    o.sugar_pos("inline"),
                )
            })
        };
        if let Some(((url, compression), pos)) = converted {
            o.set_at("source", minor, G::Str(url), pos);
            if let Some(c) = compression {
                o.set_at("compression", minor, G::Str(c), pos);
            }
        }
    }

    /// The data URL of local file `rel` (read and compressed once per translation), counted
    /// as embedded once more.
    fn local_url(
        &self,
        rel: &str,
        compression: Option<&str>,
    ) -> Result<(String, Option<String>), String> {
        let key = (rel.to_string(), compression.map(str::to_string));
        let cached = self.local.urls.borrow().get(&key).cloned();
        let url = match cached {
            Some(u) => u,
            None => {
                let data = self.read_local(rel)?;
                let u = data_url_for(self.t.minor, self.gzip(), &data, compression);
                self.local.urls.borrow_mut().insert(key, u.clone());
                // The URL is what later uses need: the bytes are not kept (another kind of
                // use, e.g. `contents_local`, reads the file again and counts it again).
                self.local.files.borrow_mut().remove(rel);
                u
            }
        };
        self.embed(url.0.len())?;
        Ok(url)
    }

    /// Counts `n` more bytes embedded from local files against `max-local-total`.
    /// Whether inline and local contents may be gzip'd (not on openshift 4.8/4.9).
    fn gzip(&self) -> bool {
        !(self.t.variant == Variant::Openshift && self.t.ver_minor < 10)
    }

    fn embed(&self, n: usize) -> Result<(), String> {
        let total = self.local.embedded.get().saturating_add(n as u64);
        self.local.embedded.set(total);
        if total > self.opts.max_local_total {
            return Err(format!(
                "contents embedded from local files exceed {} bytes in this translation, counting each use (limit max-local-total)",
                self.opts.max_local_total
            ));
        }
        Ok(())
    }

    /// Bytes that may still be read from the files dir in this translation.
    fn local_left(&self) -> u64 {
        self.opts
            .max_local_total
            .saturating_sub(self.local.read.get())
    }

    /// The message for a local read over a bound: `max` was what was allowed.
    fn too_large(&self, what: &str, size: u64, total: bool, max: u64) -> String {
        if !total && max >= self.opts.max_local_file {
            format!(
                "{what} is {size} bytes or more, larger than the limit of {} bytes per local file (limit max-local-file)",
                self.opts.max_local_file
            )
        } else {
            format!(
                "{what} would take the local files read by this translation past {} bytes (limit max-local-total)",
                self.opts.max_local_total
            )
        }
    }

    /// Local file `rel`, read once per translation (later uses share it), within
    /// `max-local-file` and what is left of `max-local-total`.
    fn read_local(&self, rel: &str) -> Result<Rc<Vec<u8>>, String> {
        if let Some(r) = self.local.files.borrow().get(rel) {
            return r.clone();
        }
        let fd = self.opts.files_dir.ok_or_else(no_files_dir)?;
        let max = self.opts.max_local_file.min(self.local_left());
        let r = match fd.read(rel, max) {
            Ok(data) => {
                self.local
                    .read
                    .set(self.local.read.get().saturating_add(data.len() as u64));
                Ok(Rc::new(data))
            }
            Err(LocalError::TooLarge { size, total }) => {
                Err(self.too_large(&format!("local file {rel}"), size, total, max))
            }
            Err(LocalError::Other(e)) => Err(e),
        };
        self.local
            .files
            .borrow_mut()
            .insert(rel.to_string(), r.clone());
        r
    }

    fn users_and_units(&mut self, cfg: &mut Obj) {
        let minor = self.t.minor;
        let mut errors = Vec::new();
        if let Some(G::Obj(passwd)) = cfg.get_mut("passwd")
            && let Some(G::List(users)) = passwd.get_mut("users")
        {
            for (i, (u, _)) in users.iter_mut().enumerate() {
                let G::Obj(u) = u else { continue };
                let Some(G::List(files)) = u.sugar("ssh_authorized_keys_local").cloned() else {
                    continue;
                };
                if files.is_empty() {
                    continue;
                }
                let path = format!("$.passwd.users.{i}.ssh_authorized_keys_local");
                let pos = u.sugar_pos("ssh_authorized_keys_local");
                if self.opts.files_dir.is_none() {
                    errors.push(Diag::error(&path, pos, no_files_dir()));
                    continue;
                }
                let mut keys: Vec<(G, Pos)> = u.list("sshAuthorizedKeys").to_vec();
                for (j, (f, fpos)) in files.iter().enumerate() {
                    let rel = f.as_str().unwrap_or("");
                    match self
                        .read_local(rel)
                        .and_then(|d| self.embed(d.len()).map(|_| d))
                    {
                        Ok(data) => {
                            let text = String::from_utf8_lossy(&data).into_owned();
                            for line in text.split('\n') {
                                let line = line.strip_suffix('\r').unwrap_or(line);
                                if !line.is_empty() {
                                    keys.push((G::Str(line.to_string()), *fpos));
                                }
                            }
                        }
                        Err(e) => errors.push(Diag::error(&format!("{path}.{j}"), *fpos, e)),
                    }
                }
                u.set_at("sshAuthorizedKeys", minor, G::List(keys), pos);
            }
        }
        if let Some(G::Obj(systemd)) = cfg.get_mut("systemd")
            && let Some(G::List(units)) = systemd.get_mut("units")
        {
            for (i, (u, _)) in units.iter_mut().enumerate() {
                let G::Obj(u) = u else { continue };
                let path = format!("$.systemd.units.{i}");
                self.contents_local(u, &path, &mut errors);
                if let Some(G::List(dropins)) = u.get_mut("dropins") {
                    for (j, (d, _)) in dropins.iter_mut().enumerate() {
                        if let G::Obj(d) = d {
                            self.contents_local(d, &format!("{path}.dropins.{j}"), &mut errors);
                        }
                    }
                }
            }
        }
        self.report.diags.extend(errors);
    }

    fn contents_local(&self, u: &mut Obj, path: &str, errors: &mut Vec<Diag>) {
        let Some(G::Str(rel)) = u.sugar("contents_local").cloned() else {
            return;
        };
        if rel.is_empty() {
            return;
        }
        let pos = u.sugar_pos("contents_local");
        match self
            .read_local(&rel)
            .and_then(|d| self.embed(d.len()).map(|_| d))
        {
            Ok(data) => u.set_at(
                "contents",
                self.t.minor,
                G::Str(String::from_utf8_lossy(&data).into_owned()),
                pos,
            ),
            Err(e) => errors.push(Diag::error(&format!("{path}.contents_local"), pos, e)),
        }
    }

    /// Butane v0.29's processQuadlets (after the trees): each quadlet is a file (or, for a
    /// template instance `foo@bar.container`, a link to `foo@.container`) under
    /// /etc/containers/systemd (rootful) or /etc/containers/systemd/users, and each drop-in a
    /// file under `<name>.d/`; appended after the config's own entries, refused where any
    /// entry already has the path.
    fn quadlets(&mut self, cfg: &mut Obj) {
        let minor = self.t.minor;
        let list: Vec<(G, Pos)> = match cfg.obj("systemd").and_then(|s| s.sugar("quadlets")) {
            Some(G::List(l)) if !l.is_empty() => l.clone(),
            _ => return,
        };
        const EXTS: &[&str] = &[
            ".container",
            ".volume",
            ".network",
            ".kube",
            ".image",
            ".build",
            ".pod",
            ".artifact",
        ];
        let mut taken: HashSet<String> = HashSet::new();
        if let Some(st) = cfg.obj("storage") {
            for k in ["files", "directories", "links"] {
                for (n, _) in st.list(k) {
                    if let Some(p) = n.as_obj().and_then(|n| n.str("path")) {
                        taken.insert(p.to_string());
                    }
                }
            }
        }
        let mut new_files = Vec::new();
        let mut new_links = Vec::new();
        for (i, (q, pos)) in list.iter().enumerate() {
            let q = q.as_obj().expect("object");
            let path = format!("$.systemd.quadlets.{i}");
            let name = q.sugar("name").and_then(G::as_str).unwrap_or("");
            if !EXTS.iter().any(|e| name.ends_with(e)) {
                self.report.push(Diag::error(
                    &format!("{path}.name"),
                    *pos,
                    "quadlet name must end with one of: .container, .volume, .network, .kube, .image, .build, .pod, .artifact",
                ));
                continue;
            }
            let template = quadlet_template(name);
            let contents = q.sugar("contents").and_then(G::as_str);
            let local = q.sugar("contents_local").and_then(G::as_str);
            if template.is_some() && (contents.is_some() || local.is_some()) {
                self.report.push(Diag::error(
                    &format!("{path}.contents"),
                    *pos,
                    "template instances cannot have contents",
                ));
                continue;
            }
            if template.is_none() && contents.is_some() && local.is_some() {
                self.report.push(Diag::error(
                    &format!("{path}.contents_local"),
                    *pos,
                    "only one of contents and contents_local may be specified",
                ));
                continue;
            }
            let base = if q.sugar("rootful") == Some(&G::Bool(true)) {
                "/etc/containers/systemd"
            } else {
                "/etc/containers/systemd/users"
            };
            let dest = join_path(base, name);
            if let Some(t) = template {
                if !taken.insert(dest.clone()) {
                    self.report.push(Diag::error(
                        &path,
                        *pos,
                        "config already specifies that path",
                    ));
                } else {
                    let mut l = Obj::new(&schema::LINK, *pos);
                    l.set("path", minor, G::Str(dest.clone()));
                    l.set("target", minor, G::Str(t));
                    new_links.push((G::Obj(l), *pos));
                }
            } else if let Some(f) =
                self.quadlet_file(&dest, contents, local, &path, *pos, &mut taken)
            {
                new_files.push(f);
            }
            if let Some(G::List(dropins)) = q.sugar("dropins") {
                for (j, (d, dpos)) in dropins.iter().enumerate() {
                    let d = d.as_obj().expect("object");
                    let dpath = format!("{path}.dropins.{j}");
                    let c = d.str("contents");
                    let l = d.sugar("contents_local").and_then(G::as_str);
                    if c.is_some() && l.is_some() {
                        self.report.push(Diag::error(
                            &format!("{dpath}.contents_local"),
                            *dpos,
                            "only one of contents and contents_local may be specified",
                        ));
                        continue;
                    }
                    let dest = format!("{dest}.d/{}", d.str("name").unwrap_or(""));
                    if let Some(f) = self.quadlet_file(&dest, c, l, &dpath, *dpos, &mut taken) {
                        new_files.push(f);
                    }
                }
            }
        }
        let st = cfg.obj_mut("storage", minor);
        if !new_files.is_empty() {
            st.list_mut("files", minor).extend(new_files);
        }
        if !new_links.is_empty() {
            st.list_mut("links", minor).extend(new_links);
        }
    }

    /// One file of a quadlet or its drop-in: contents, or else contents_local, or empty.
    fn quadlet_file(
        &mut self,
        dest: &str,
        contents: Option<&str>,
        local: Option<&str>,
        path: &str,
        pos: Pos,
        taken: &mut HashSet<String>,
    ) -> Option<(G, Pos)> {
        let minor = self.t.minor;
        if !taken.insert(dest.to_string()) {
            self.report
                .push(Diag::error(path, pos, "config already specifies that path"));
            return None;
        }
        let (url, compression) = match (
            contents.filter(|c| !c.is_empty()),
            local.filter(|l| !l.is_empty()),
        ) {
            (Some(c), _) => data_url_for(minor, self.gzip(), c.as_bytes(), None),
            (None, Some(l)) => match self.local_url(l, None) {
                Ok(u) => u,
                Err(e) => {
                    self.report
                        .push(Diag::error(&format!("{path}.contents_local"), pos, e));
                    return None;
                }
            },
            (None, None) => data_url_for(minor, self.gzip(), &[], None),
        };
        let mut res = Obj::new(&schema::RESOURCE, pos);
        if let Some(c) = compression {
            res.set("compression", minor, G::Str(c));
        }
        res.set("source", minor, G::Str(url));
        let mut f = Obj::new(&schema::FILE, pos);
        f.set("path", minor, G::Str(dest.to_string()));
        f.set("contents", minor, G::Obj(res));
        f.set("mode", minor, G::Int(0o644));
        Some((G::Obj(f), pos))
    }

    fn mount_units(&mut self, cfg: &mut Obj) {
        let minor = self.t.minor;
        let Some(storage) = cfg.obj("storage") else {
            return;
        };
        // Names of the LUKS volumes unlocked over the network (Tang).
        let tang_luks: HashSet<&str> = storage
            .list("luks")
            .iter()
            .filter_map(|(l, _)| l.as_obj())
            .filter(|l| {
                spec::work::add(1);
                l.obj("clevis")
                    .map(|c| !c.list("tang").is_empty())
                    .unwrap_or(false)
            })
            .map(|l| l.str("name").unwrap_or(""))
            .collect();
        let mut units = Vec::new();
        for (fs, pos) in storage.list("filesystems") {
            let fs = fs.as_obj().expect("object");
            if fs.sugar("with_mount_unit") != Some(&G::Bool(true)) {
                continue;
            }
            let device = fs.str("device").unwrap_or("");
            let format = fs.str("format").unwrap_or("");
            spec::work::add(1);
            let remote = device
                .strip_prefix("/dev/mapper/")
                .or_else(|| device.strip_prefix("/dev/disk/by-id/dm-name-"))
                .is_some_and(|name| tang_luks.contains(name));
            let mount_options: Vec<&str> = fs
                .list("mountOptions")
                .iter()
                .filter_map(|(g, _)| g.as_str())
                .collect();
            let mut options = String::new();
            if !mount_options.is_empty() || remote {
                options.push_str("\nOptions=");
                options.push_str(&mount_options.join(","));
                if remote {
                    if !mount_options.is_empty() {
                        options.push(',');
                    }
                    options.push_str("_netdev");
                }
            }
            let escaped = unit_path_escape(device);
            let (name, contents) = if format == "swap" && minor >= 3 {
                (
                    format!("{escaped}.swap"),
                    format!(
                        "# Generated by Butane\n[Swap]\nWhat={device}{options}\n\n[Install]\nRequiredBy=swap.target"
                    ),
                )
            } else {
                let path = fs.str("path").unwrap_or("");
                let target = if remote {
                    "remote-fs.target"
                } else {
                    "local-fs.target"
                };
                (
                    format!("{}.mount", unit_path_escape(path)),
                    format!(
                        "# Generated by Butane\n[Unit]\nRequires=systemd-fsck@{escaped}.service\nAfter=systemd-fsck@{escaped}.service\n\n[Mount]\nWhere={path}\nWhat={device}\nType={format}{options}\n\n[Install]\nRequiredBy={target}"
                    ),
                )
            };
            let mut u = Obj::new(&schema::UNIT, *pos);
            u.set("contents", minor, G::Str(contents));
            u.set("enabled", minor, G::Bool(true));
            u.set("name", minor, G::Str(name));
            units.push((G::Obj(u), *pos));
        }
        if units.is_empty() {
            return;
        }
        let mut rendered = Obj::new(&schema::CONFIG, cfg.at);
        *rendered.obj_mut("systemd", minor).list_mut("units", minor) = units;
        self.merge_sugar(cfg, &rendered);
    }

    fn trees(&mut self, cfg: &mut Obj) {
        let minor = self.t.minor;
        let gzip = self.gzip();
        let trees: Vec<(G, Pos)> = match cfg.obj("storage").and_then(|s| s.sugar("trees")) {
            Some(G::List(l)) if !l.is_empty() => l.clone(),
            _ => return,
        };
        // The paths of the entries of each kind (the first entry of each), kept up to date
        // as trees add files and links: each tree entry is a lookup, not a scan.
        let paths = |cfg: &Obj, kind: &str| -> HashMap<String, usize> {
            let mut m = HashMap::new();
            if let Some(st) = cfg.obj("storage") {
                for (j, (n, _)) in st.list(kind).iter().enumerate() {
                    spec::work::add(1);
                    if let Some(p) = n.as_obj().and_then(|n| n.str("path")) {
                        m.entry(p.to_string()).or_insert(j);
                    }
                }
            }
            m
        };
        let mut file_paths = paths(cfg, "files");
        let mut dir_paths = paths(cfg, "directories");
        let mut link_paths = paths(cfg, "links");
        // Where each entry a tree adds came from (the tree), and each list a tree started.
        let mut origins: Vec<(String, String)> = Vec::new();
        let from = self.report.diags.len();
        for (i, (tree, pos)) in trees.iter().enumerate() {
            let path = format!("$.storage.trees.{i}");
            let tree = tree.as_obj().expect("object");
            let Some(fd) = self.opts.files_dir else {
                self.report.push(Diag::error(&path, *pos, no_files_dir()));
                return;
            };
            let local = tree.sugar("local").and_then(G::as_str).unwrap_or("");
            let dest = tree.sugar("path").and_then(G::as_str).unwrap_or("/");
            let dest = if dest.is_empty() { "/" } else { dest };
            let file_mode = tree.sugar("file_mode").and_then(|g| match g {
                G::Int(i) => Some(*i),
                _ => None,
            });
            let dir_mode = tree.sugar("dir_mode").and_then(|g| match g {
                G::Int(i) => Some(*i),
                _ => None,
            });
            // Go compares the NodeUser/NodeGroup structs (two pointers) with their zero value.
            let owner = |k: &str| {
                tree.sugar(k)
                    .and_then(G::as_obj)
                    .filter(|o| o.get("id").is_some() || o.get("name").is_some())
                    .cloned()
            };
            let (user, group) = (owner("user"), owner("group"));
            let set_owner = |o: &mut Obj| {
                if let Some(u) = &user {
                    o.set("user", minor, G::Obj(u.clone()));
                }
                if let Some(g) = &group {
                    o.set("group", minor, G::Obj(g.clone()));
                }
            };
            let left = self.local_left();
            let walked = match fd.walk(local, self.opts.max_local_file, left) {
                Ok(w) => w,
                Err(LocalError::TooLarge { size, total }) => {
                    let what = format!("a file of tree {local}");
                    let e = if total {
                        self.too_large(&format!("tree {local}"), size, true, left)
                    } else {
                        self.too_large(&what, size, false, self.opts.max_local_file)
                    };
                    self.report.push(Diag::error(&path, *pos, e));
                    continue;
                }
                Err(LocalError::Other(e)) => {
                    self.report.push(Diag::error(&path, *pos, e));
                    continue;
                }
            };
            let read: u64 = walked
                .iter()
                .map(|e| match e {
                    TreeEntry::File { contents, .. } => contents.len() as u64,
                    TreeEntry::Symlink { .. } | TreeEntry::Dir { .. } => 0,
                })
                .sum();
            self.local
                .read
                .set(self.local.read.get().saturating_add(read));
            let storage = cfg.obj_mut("storage", minor);
            for e in walked {
                spec::work::add(1);
                match e {
                    TreeEntry::Dir { rel } => {
                        if dir_mode.is_none() && user.is_none() && group.is_none() {
                            continue;
                        }
                        let dpath = join_path(dest, &rel);
                        if file_paths.contains_key(&dpath)
                            || dir_paths.contains_key(&dpath)
                            || link_paths.contains_key(&dpath)
                        {
                            self.report.push(Diag::error(
                                &path,
                                *pos,
                                "config already specifies that path",
                            ));
                            continue;
                        }
                        let dirs = storage.list_mut("directories", minor);
                        let mut d = Obj::new(&schema::DIRECTORY, *pos);
                        d.set("path", minor, G::Str(dpath.clone()));
                        set_owner(&mut d);
                        d.set("mode", minor, G::Int(dir_mode.unwrap_or(0o755)));
                        dirs.push((G::Obj(d), *pos));
                        dir_paths.insert(dpath, dirs.len() - 1);
                        tree_origin(&mut origins, "directories", dirs.len() - 1, &path);
                    }
                    TreeEntry::File {
                        rel,
                        contents,
                        executable,
                    } => {
                        let dpath = join_path(dest, &rel);
                        if dir_paths.contains_key(&dpath) || link_paths.contains_key(&dpath) {
                            self.report.push(Diag::error(
                                &path,
                                *pos,
                                "config already specifies that path",
                            ));
                            continue;
                        }
                        let files = storage.list_mut("files", minor);
                        let idx = file_paths.get(&dpath).copied();
                        let idx = match idx {
                            Some(i) => {
                                let f = files[i].0.as_obj().expect("object");
                                if f.obj("contents").and_then(|c| c.str("source")).is_some() {
                                    self.report.push(Diag::error(
                                        &path,
                                        *pos,
                                        "config already specifies that path",
                                    ));
                                    continue;
                                }
                                i
                            }
                            None => {
                                let mut f = Obj::new(&schema::FILE, *pos);
                                f.set("path", minor, G::Str(dpath.clone()));
                                set_owner(&mut f);
                                files.push((G::Obj(f), *pos));
                                file_paths.insert(dpath.clone(), files.len() - 1);
                                tree_origin(&mut origins, "files", files.len() - 1, &path);
                                files.len() - 1
                            }
                        };
                        let f = files[idx].0.as_obj_mut().expect("object");
                        let current = f
                            .obj("contents")
                            .and_then(|c| c.str("compression"))
                            .map(str::to_string);
                        let (url, compression) =
                            data_url_for(minor, gzip, &contents, current.as_deref());
                        if let Err(e) = self.embed(url.len()) {
                            self.report.push(Diag::error(&path, *pos, e));
                            return;
                        }
                        let c = f.obj_mut("contents", minor);
                        c.set("source", minor, G::Str(url));
                        if let Some(comp) = compression {
                            c.set("compression", minor, G::Str(comp));
                        }
                        if f.int("mode").is_none() {
                            f.set(
                                "mode",
                                minor,
                                G::Int(file_mode.unwrap_or(if executable { 0o755 } else { 0o644 })),
                            );
                        }
                    }
                    TreeEntry::Symlink { rel, target } => {
                        let dpath = join_path(dest, &rel);
                        if file_paths.contains_key(&dpath) || dir_paths.contains_key(&dpath) {
                            self.report.push(Diag::error(
                                &path,
                                *pos,
                                "config already specifies that path",
                            ));
                            continue;
                        }
                        let links = storage.list_mut("links", minor);
                        let idx = link_paths.get(&dpath).copied();
                        let idx = match idx {
                            Some(i) => {
                                if links[i].0.as_obj().and_then(|l| l.str("target")).is_some() {
                                    self.report.push(Diag::error(
                                        &path,
                                        *pos,
                                        "config already specifies that path",
                                    ));
                                    continue;
                                }
                                i
                            }
                            None => {
                                let mut l = Obj::new(&schema::LINK, *pos);
                                l.set("path", minor, G::Str(dpath.clone()));
                                set_owner(&mut l);
                                links.push((G::Obj(l), *pos));
                                link_paths.insert(dpath.clone(), links.len() - 1);
                                tree_origin(&mut origins, "links", links.len() - 1, &path);
                                links.len() - 1
                            }
                        };
                        links[idx].0.as_obj_mut().expect("object").set(
                            "target",
                            minor,
                            G::Str(target),
                        );
                    }
                }
            }
        }
        if !origins.is_empty() {
            self.remap.push((from, origins, true));
        }
    }

    /// Butane reports a diagnostic on an entry the boot_device sugar's merge moved at the
    /// path the user wrote (its translation set maps the output path back).
    fn remap_paths(&mut self) {
        // The latest merge first: each maps its output paths to the config it merged into.
        for (from, pairs, common) in std::mem::take(&mut self.remap).into_iter().rev() {
            for d in self.report.diags.iter_mut().skip(from) {
                if common {
                    if let Some(p) = crate::sugar::common_source(&d.path, &pairs) {
                        d.path = p;
                    }
                } else if let Some(p) = crate::sugar::remap_path(&d.path, &pairs) {
                    d.path = p;
                }
            }
        }
    }

    /// Merges the sugar's `rendered` entries under the config (Ignition's merge), keeping where
    /// the user's entries moved for the diagnostics reported from then on.
    fn merge_sugar(&mut self, cfg: &mut Obj, rendered: &Obj) {
        let pairs = crate::sugar::merge_origins(rendered, cfg);
        if !pairs.is_empty() {
            self.remap.push((self.report.diags.len(), pairs, false));
        }
        *cfg = merge(rendered, cfg);
    }

    fn boot_device(&mut self, cfg: &mut Obj, b: &Obj) {
        let minor = self.t.minor;
        let luks = b.obj("luks");
        let want_luks = luks.map(want_boot_luks).unwrap_or(false);
        let mirror: Vec<String> = b
            .obj("mirror")
            .map(|m| {
                m.list("devices")
                    .iter()
                    .filter_map(|(g, _)| g.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let want_mirror = !mirror.is_empty();
        if !want_luks && !want_mirror {
            return;
        }
        let layout = b.str("layout").unwrap_or("x86_64");
        let (bios, efi, prep) = match layout {
            "x86_64" => (true, true, false),
            "aarch64" => (false, true, false),
            "ppc64le" => (false, false, true),
            _ => (false, false, false),
        };
        let at = b.at;
        let mut rendered = Obj::new(&schema::CONFIG, at);
        let mut disks = Vec::new();
        let mut filesystems = Vec::new();
        let part = |label: String, size: Option<i64>, guid: Option<&str>| {
            let mut p = Obj::new(&schema::PARTITION, at);
            p.set("label", minor, G::Str(label));
            if let Some(s) = size {
                p.set("sizeMiB", minor, G::Int(s));
            }
            if let Some(g) = guid {
                p.set("typeGuid", minor, G::Str(g.into()));
            }
            (G::Obj(p), at)
        };
        let fs = |device: String, format: &str, label: String| {
            let mut f = Obj::new(&schema::FILESYSTEM, at);
            f.set("device", minor, G::Str(device));
            f.set("format", minor, G::Str(format.into()));
            f.set("label", minor, G::Str(label));
            f.set("wipeFilesystem", minor, G::Bool(true));
            (G::Obj(f), at)
        };
        const RESERVED: &str = "8DA63339-0007-60C0-C436-083AC8230908";
        if want_mirror {
            for (i, dev) in mirror.iter().enumerate() {
                let n = i + 1;
                let mut parts = Vec::new();
                if bios {
                    parts.push(part(
                        format!("bios-{n}"),
                        Some(1),
                        Some("21686148-6449-6E6F-744E-656564454649"),
                    ));
                } else if prep {
                    parts.push(part(
                        format!("prep-{n}"),
                        Some(4),
                        Some("9E1A2D38-C612-4316-AA26-8B49521E5A8B"),
                    ));
                } else {
                    parts.push(part(format!("reserved-{n}"), Some(1), Some(RESERVED)));
                }
                if efi {
                    parts.push(part(
                        format!("esp-{n}"),
                        Some(127),
                        Some("C12A7328-F81F-11D2-BA4B-00A0C93EC93B"),
                    ));
                } else {
                    parts.push(part(format!("reserved-{n}"), Some(1), Some(RESERVED)));
                }
                parts.push(part(format!("boot-{n}"), Some(384), None));
                parts.push(part(format!("root-{n}"), None, None));
                let mut d = Obj::new(&schema::DISK, at);
                d.set("device", minor, G::Str(dev.clone()));
                d.set("partitions", minor, G::List(parts));
                d.set("wipeTable", minor, G::Bool(true));
                disks.push((G::Obj(d), at));
                if efi {
                    filesystems.push(fs(
                        format!("/dev/disk/by-partlabel/esp-{n}"),
                        "vfat",
                        format!("esp-{n}"),
                    ));
                }
            }
            let devs = |prefix: &str| {
                G::List(
                    (1..=mirror.len())
                        .map(|i| (G::Str(format!("/dev/disk/by-partlabel/{prefix}-{i}")), at))
                        .collect(),
                )
            };
            let mut boot = Obj::new(&schema::RAID, at);
            boot.set("devices", minor, devs("boot"));
            boot.set("level", minor, G::Str("raid1".into()));
            boot.set("name", minor, G::Str("md-boot".into()));
            boot.set(
                "options",
                minor,
                G::List(vec![(G::Str("--metadata=1.0".into()), at)]),
            );
            let mut root = Obj::new(&schema::RAID, at);
            root.set("devices", minor, devs("root"));
            root.set("level", minor, G::Str("raid1".into()));
            root.set("name", minor, G::Str("md-root".into()));
            rendered.obj_mut("storage", minor).set(
                "raid",
                minor,
                G::List(vec![(G::Obj(boot), at), (G::Obj(root), at)]),
            );
            filesystems.push(fs("/dev/md/md-boot".into(), "ext4", "boot".into()));
        }
        if want_luks {
            let l = luks.expect("luks");
            let device = match layout {
                "s390x-eckd" => format!("{}2", l.str("device").unwrap_or("")),
                "s390x-zfcp" => format!("{}4", l.str("device").unwrap_or("")),
                _ if want_mirror => "/dev/md/md-root".into(),
                _ => "/dev/disk/by-partlabel/root".into(),
            };
            let mut clevis = Obj::new(&schema::CLEVIS, at);
            if let Some(t) = l.get("tang") {
                clevis.set("tang", minor, t.clone());
            }
            if let Some(t) = l.get("threshold") {
                clevis.set("threshold", minor, t.clone());
            }
            if let Some(t) = l.get("tpm2") {
                clevis.set("tpm2", minor, t.clone());
            }
            let mut lk = Obj::new(&schema::LUKS, at);
            if let Some(c) = l.get("cex")
                && minor >= 5
            {
                lk.set("cex", minor, c.clone());
            }
            lk.set("clevis", minor, G::Obj(clevis));
            lk.set("device", minor, G::Str(device));
            if let Some(d) = l.get("discard")
                && minor >= 4
            {
                lk.set("discard", minor, d.clone());
            }
            lk.set("label", minor, G::Str("luks-root".into()));
            lk.set("name", minor, G::Str("root".into()));
            lk.set("wipeVolume", minor, G::Bool(true));
            rendered
                .obj_mut("storage", minor)
                .set("luks", minor, G::List(vec![(G::Obj(lk), at)]));
        }
        let root_dev = if want_luks {
            "/dev/mapper/root"
        } else {
            "/dev/md/md-root"
        };
        filesystems.push(fs(root_dev.into(), "xfs", "root".into()));
        let st = rendered.obj_mut("storage", minor);
        if !disks.is_empty() {
            st.set("disks", minor, G::List(disks));
        }
        st.set("filesystems", minor, G::List(filesystems));
        self.merge_sugar(cfg, &rendered);
    }

    fn partition_label_warnings(&mut self, cfg: &Obj) {
        // The reserved labels: every fcos version (and openshift); the root checks: fcos 1.3+.
        if !matches!(self.t.variant, Variant::Fcos | Variant::Openshift) {
            return;
        }
        let Some(st) = cfg.obj("storage") else { return };
        for (i, (d, _)) in st.list("disks").iter().enumerate() {
            let d = d.as_obj().expect("object");
            // Butane v0.28+: a root partition smaller than 8 GiB, or one that fills the
            // space but is followed by an auto-positioned partition.
            let parts = d.list("partitions");
            for (j, (p, ppos)) in parts.iter().enumerate() {
                let p = p.as_obj().expect("object");
                if self.opts.release != Release::Newest
                    || !self.t.boot_device
                    || p.str("label") != Some("root")
                {
                    continue;
                }
                match p.int("sizeMiB").unwrap_or(0) {
                    0 => {
                        let auto = parts.iter().enumerate().any(|(k, (q, _))| {
                            k != j
                                && q.as_obj()
                                    .is_some_and(|q| q.int("startMiB").unwrap_or(0) == 0)
                        });
                        if auto {
                            self.report.push(Diag::warning(
                                &format!("$.storage.disks.{i}.partitions.{j}.label"),
                                *ppos,
                                "root partition cannot expand; it is set to fill available space but is followed by an auto-positioned partition",
                            ));
                        }
                    }
                    n if n < 8192 => self.report.push(Diag::warning(
                        &format!("$.storage.disks.{i}.partitions.{j}.size_mib"),
                        *ppos,
                        "root should have 8GiB of space assigned",
                    )),
                    _ => {}
                }
            }
            if d.boolean("wipeTable") == Some(true) {
                continue;
            }
            for (j, (p, ppos)) in d.list("partitions").iter().enumerate() {
                let p = p.as_obj().expect("object");
                let n = p.int("number").unwrap_or(0);
                let bad = match p.str("label") {
                    Some("BIOS-BOOT") | Some("PowerPC-PReP-boot") => n != 1,
                    Some("EFI-SYSTEM") => n != 2,
                    Some("boot") => n != 3,
                    Some("root") => n != 4,
                    _ => false,
                };
                if bad {
                    self.report.push(Diag::warning(
                        &format!("$.storage.disks.{i}.partitions.{j}.label"),
                        *ppos,
                        "incorrect partition number; a new partition will be created using reserved label",
                    ));
                }
            }
        }
    }

    fn grub(&mut self, cfg: &mut Obj, g: &Obj) {
        let minor = self.t.minor;
        let users: Vec<(String, String)> = g
            .list("users")
            .iter()
            .filter_map(|(u, _)| u.as_obj())
            .map(|u| {
                (
                    u.str("name").unwrap_or("").to_string(),
                    u.str("password_hash").unwrap_or("").to_string(),
                )
            })
            .collect();
        if users.is_empty() {
            return;
        }
        let at = g.at;
        let names: Vec<&str> = users.iter().map(|u| u.0.as_str()).collect();
        let cmds: Vec<String> = users
            .iter()
            .map(|(n, h)| format!("password_pbkdf2 {n} {h}"))
            .collect();
        let text = format!(
            "# Generated by Butane\n\nset superusers=\"{}\"\n{}\n",
            names.join(" "),
            cmds.join("\n")
        );
        let (url, compression) = make_data_url(text.as_bytes(), None);
        let mut rendered = Obj::new(&schema::CONFIG, at);
        let mut fs = Obj::new(&schema::FILESYSTEM, at);
        fs.set("device", minor, G::Str("/dev/disk/by-label/boot".into()));
        fs.set("format", minor, G::Str("ext4".into()));
        fs.set("path", minor, G::Str("/boot".into()));
        let mut res = Obj::new(&schema::RESOURCE, at);
        if let Some(c) = compression {
            res.set("compression", minor, G::Str(c));
        }
        res.set("source", minor, G::Str(url));
        let mut file = Obj::new(&schema::FILE, at);
        file.set("path", minor, G::Str("/boot/grub2/user.cfg".into()));
        file.set("append", minor, G::List(vec![(G::Obj(res), at)]));
        let st = rendered.obj_mut("storage", minor);
        st.set("files", minor, G::List(vec![(G::Obj(file), at)]));
        st.set("filesystems", minor, G::List(vec![(G::Obj(fs), at)]));
        let from = self.report.diags.len();
        // Butane's translation set maps the sugar's own entries to `grub.users`.
        let own = crate::sugar::unmerged_parent_entries(&rendered, cfg);
        self.merge_sugar(cfg, &rendered);
        if !own.is_empty() {
            let pairs = own
                .into_iter()
                .map(|p| (p, "$.grub.users".into()))
                .collect();
            self.remap.push((from, pairs, true));
        }
    }

    /// What a variant does not support (r4e and fiot: no disk layout or kernel arguments;
    /// flatcar: no clevis).
    fn forbidden_fields(&mut self, cfg: &Obj) {
        let st = cfg.obj("storage");
        match self.t.variant {
            Variant::R4e | Variant::Fiot => {
                if cfg.obj("kernelArguments").is_some_and(|k| !k.is_zero()) {
                    self.report.push(Diag::error(
                        "$.kernel_arguments",
                        cfg.pos_of("kernelArguments"),
                        "kernel argument customization is not supported in this spec version",
                    ));
                }
                for (k, y, what) in [
                    (
                        "disks",
                        "disks",
                        "disk customization is not supported in this spec version",
                    ),
                    (
                        "filesystems",
                        "filesystems",
                        "filesystem customization is not supported in this spec version",
                    ),
                    ("luks", "luks", "luks is not supported in this spec version"),
                    ("raid", "raid", "raid is not supported in this spec version"),
                ] {
                    if let Some(st) = st
                        && !st.list(k).is_empty()
                    {
                        self.report.push(Diag::error(
                            &format!("$.storage.{y}"),
                            st.pos_of(k),
                            what,
                        ));
                    }
                }
            }
            // flatcar 1.2.0-experimental's field filter: no CEX (after the translation, on
            // the output, so after every sugar error).
            Variant::Flatcar if self.t.minor > 4 => {
                if let Some(st) = st {
                    for (i, (l, _)) in st.list("luks").iter().enumerate() {
                        let l = l.as_obj().expect("object");
                        if l.obj("cex").is_some_and(|c| !c.is_zero()) {
                            self.report.push(Diag::error(
                                &format!("$.storage.luks.{i}.cex"),
                                l.pos_of("cex"),
                                "cex is not currently supported on the target platform",
                            ));
                        }
                    }
                }
            }
            Variant::Flatcar => {
                if let Some(st) = st {
                    for (i, (l, _)) in st.list("luks").iter().enumerate() {
                        let l = l.as_obj().expect("object");
                        if l.obj("clevis").is_some_and(|c| !c.is_zero()) {
                            self.report.push(Diag::error(
                                &format!("$.storage.luks.{i}.clevis"),
                                l.pos_of("clevis"),
                                "clevis is not supported in this spec version",
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The MachineConfig's field filters (Butane's fieldFilters of each openshift version),
    /// on the translated config: what the MCO cannot apply is an error.
    fn machine_config_filters(&mut self, cfg: &Obj) {
        let ver = self.t.ver_minor;
        let mut errs = Vec::new();
        let name = |o: &Obj, json: &str| -> String {
            o.def
                .fields
                .iter()
                .find(|f| f.json == json)
                .map(|f| if f.yaml.is_empty() { f.json } else { f.yaml })
                .unwrap_or(json)
                .to_string()
        };
        let set = |g: Option<&G>| match g {
            None => false,
            Some(G::List(l)) => !l.is_empty(),
            Some(G::Obj(o)) => !o.is_zero(),
            Some(_) => true,
        };
        if ver >= 14
            && let Some(k) = cfg.obj("kernelArguments")
            && (!k.list("shouldExist").is_empty() || !k.list("shouldNotExist").is_empty())
        {
            errs.push(Diag::error(
                "$.kernel_arguments",
                cfg.pos_of("kernelArguments"),
                "this section cannot be used for kernel arguments in this spec version; use openshift.kernel_arguments instead",
            ));
        }
        if let Some(p) = cfg.obj("passwd") {
            if !p.list("groups").is_empty() {
                errs.push(Diag::error(
                    "$.passwd.groups",
                    p.pos_of("groups"),
                    "groups are not supported in this spec version",
                ));
            }
            let mut fields = vec![
                "gecos",
                "groups",
                "homeDir",
                "noCreateHome",
                "noLogInit",
                "noUserGroup",
                "primaryGroup",
                "shell",
                "shouldExist",
                "system",
                "uid",
            ];
            if ver <= 12 {
                fields.push("passwordHash");
            }
            for (i, (u, _)) in p.list("users").iter().enumerate() {
                let u = u.as_obj().expect("object");
                for f in &fields {
                    if set(u.get(f)) {
                        errs.push(Diag::error(
                            &format!("$.passwd.users.{i}.{}", name(u, f)),
                            u.pos_of(f),
                            "fields other than \"name\", \"ssh_authorized_keys\", and \"password_hash\" (4.13.0+) are not supported in this spec version",
                        ));
                    }
                }
            }
        }
        if let Some(st) = cfg.obj("storage") {
            for (k, msg) in [
                (
                    "directories",
                    "directories are not supported in this spec version",
                ),
                ("links", "links are not supported in this spec version"),
            ] {
                if !st.list(k).is_empty() {
                    errs.push(Diag::error(&format!("$.storage.{k}"), st.pos_of(k), msg));
                }
            }
            for (i, (f, _)) in st.list("files").iter().enumerate() {
                let f = f.as_obj().expect("object");
                if !f.list("append").is_empty() {
                    errs.push(Diag::error(
                        &format!("$.storage.files.{i}.append"),
                        f.pos_of("append"),
                        "appending to files is not supported in this spec version",
                    ));
                }
                if let Some(c) = f.obj("contents") {
                    if !c.list("httpHeaders").is_empty() {
                        errs.push(Diag::error(
                            &format!("$.storage.files.{i}.contents.http_headers"),
                            c.pos_of("httpHeaders"),
                            "file HTTP headers are not supported in this spec version",
                        ));
                    }
                    if ver < 10 && c.str("compression").is_some_and(|z| !z.is_empty()) {
                        errs.push(Diag::error(
                            &format!("$.storage.files.{i}.contents.compression"),
                            c.pos_of("compression"),
                            "file compression is not supported in this spec version",
                        ));
                    }
                }
            }
        }
        self.report.diags.extend(errs);
    }

    /// CEX on the boot disk needs its key file named on the kernel command line.
    fn openshift_cex(&mut self, cfg: &Obj, os: Option<&Obj>, boot: Option<&Obj>) {
        // From 4.19: CEX on the boot device, or on a LUKS volume of the config named `root`
        // (each reported: two errors where both are set).
        if self.t.minor < 5 {
            return;
        }
        let boot_cex = boot
            .and_then(|b| b.obj("luks"))
            .and_then(|l| l.obj("cex"))
            .and_then(|c| c.boolean("enabled"))
            == Some(true);
        let root_cex = cfg.obj("storage").is_some_and(|st| {
            st.list("luks").iter().any(|(l, _)| {
                l.as_obj().is_some_and(|l| {
                    l.str("name") == Some("root")
                        && l.obj("cex").and_then(|c| c.boolean("enabled")) == Some(true)
                })
            })
        });
        let karg = os.is_some_and(|o| {
            o.list("kernel_arguments")
                .iter()
                .any(|(k, _)| k.as_str() == Some("rd.luks.key=/etc/luks/cex.key"))
        });
        for _ in (0..2).filter(|i| [boot_cex, root_cex][*i] && !karg) {
            self.report.push(Diag::error(
                "$.openshift.kernel_arguments",
                os.map(|o| o.pos_of("kernel_arguments")).unwrap_or(cfg.at),
                "'rd.luks.key=/etc/luks/cex.key' must be set as kernel argument when CEX is enabled for the boot device",
            ));
        }
    }

    /// What `butane --raw` does after the base translation: the GRUB sugar's append becomes
    /// contents (4.23-experimental), FIPS ciphers on LUKS volumes (up to 4.19), a warning for
    /// each openshift field that is set (even to false or []: Go sees a non-nil pointer or
    /// slice), and the RHCOS/MCO checks of the desugared config. The MachineConfig-only field
    /// filters (groups, user fields, directories, links, append, ...) do not apply: Butane runs
    /// them against the MachineConfig type, whose paths a raw Ignition config never matches.
    fn openshift_raw(&mut self, cfg: &mut Obj, os: Option<&Obj>, _boot: Option<&Obj>) {
        let minor = self.t.minor;
        let ver = self.t.ver_minor;
        // Only 4.23.0-experimental (translateUserGrubCfg); 4.14-4.22 keep the append.
        if self.t.grub
            && ver >= 23
            && let Some(G::Obj(st)) = cfg.get_mut("storage")
            && let Some(G::List(files)) = st.get_mut("files")
        {
            for (f, _) in files.iter_mut() {
                let f = f.as_obj_mut().expect("object");
                if f.str("path") == Some("/boot/grub2/user.cfg") {
                    if f.list("append").len() == 1 {
                        let a = f.list("append")[0].0.clone();
                        f.set("contents", minor, a);
                        let i = f.def.idx("append", minor).expect("append");
                        f.vals[i] = None;
                    }
                    break;
                }
            }
        }
        // Up to 4.19, FIPS mode also sets a FIPS cipher on LUKS volumes.
        let fips = os.and_then(|o| o.boolean("fips")) == Some(true) && ver < 20;
        if fips
            && let Some(G::Obj(st)) = cfg.get_mut("storage")
            && let Some(G::List(luks)) = st.get_mut("luks")
        {
            for (l, pos) in luks.iter_mut() {
                let l = l.as_obj_mut().expect("object");
                let has = l.list("options").iter().any(|(o, _)| {
                    let o = o.as_str().unwrap_or("");
                    o == "--cipher" || o.starts_with("--cipher=") || o == "-c"
                });
                if !has {
                    let p = *pos;
                    let opts = l.list_mut("options", minor);
                    opts.push((G::Str("--cipher".into()), p));
                    opts.push((G::Str("aes-cbc-essiv:sha256".into()), p));
                }
            }
        }
        if let Some(os) = os.filter(|_| !self.opts.machine_config) {
            for k in ["extensions", "fips", "kernel_arguments", "kernel_type"] {
                if os.get(k).is_some() {
                    self.report.push(Diag::warning(
                        &format!("$.openshift.{k}"),
                        os.pos_of(k),
                        "field ignored in raw mode",
                    ));
                }
            }
        }
        // validateRHCOSSupport and validateMCOSupport, on the fully desugared config.
        let mut errs = Vec::new();
        if let Some(p) = cfg.obj("passwd") {
            for (i, (u, _)) in p.list("users").iter().enumerate() {
                let u = u.as_obj().expect("object");
                if u.str("name") != Some("core") {
                    errs.push(Diag::error(
                        &format!("$.passwd.users.{i}.name"),
                        u.pos_of("name"),
                        "only the core user is supported",
                    ));
                }
            }
        }
        if let Some(st) = cfg.obj("storage") {
            for (i, (f, _)) in st.list("files").iter().enumerate() {
                let f = f.as_obj().expect("object");
                if let Some(c) = f.obj("contents")
                    && let Some(src) = c.str("source")
                    && go_url_ok(src)
                    && let Some(scheme) = url_scheme(src)
                    && scheme != "data"
                {
                    errs.push(Diag::error(
                        &format!("$.storage.files.{i}.contents.source"),
                        c.pos_of("source"),
                        "only data: URLs are supported",
                    ));
                }
                if ver >= 10
                    && let Some(m) = f.int("mode")
                    && m & !0o777 != 0
                {
                    errs.push(Diag::error(
                        &format!("$.storage.files.{i}.mode"),
                        f.pos_of("mode"),
                        "special mode bits are not supported",
                    ));
                }
            }
            for (i, (fs, _)) in st.list("filesystems").iter().enumerate() {
                let fs = fs.as_obj().expect("object");
                match fs.str("format") {
                    Some("btrfs") => errs.push(Diag::error(
                        &format!("$.storage.filesystems.{i}.format"),
                        fs.pos_of("format"),
                        "btrfs is not supported in this spec version",
                    )),
                    Some("none") if ver >= 14 => errs.push(Diag::error(
                        &format!("$.storage.filesystems.{i}.format"),
                        fs.pos_of("format"),
                        "format \"none\" is not supported",
                    )),
                    _ => {}
                }
            }
        }
        // Butane reports them at `$.spec.config` + the output's path; with --raw its
        // translation set (rooted at spec.config) has no such path, so they stay there.
        if !self.opts.machine_config {
            for d in &mut errs {
                d.path.replace_range(..1, "$.spec.config");
            }
        }
        self.report.diags.extend(errs);
    }
}

/// The scheme of `src` as Go's `url.Parse` reads it, or `None` where it fails (a parse error
/// is reported by the config's validation). An empty scheme is `Some("")`.
fn url_scheme(src: &str) -> Option<&str> {
    match src.split_once(':') {
        Some((scheme, _))
            if scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            Some(scheme)
        }
        Some(("", _)) => None,
        _ => Some(""),
    }
}

/// Whether `boot_device.luks` asks for an encrypted root: TPM2, Tang or CEX.
fn want_boot_luks(l: &Obj) -> bool {
    l.boolean("tpm2") == Some(true)
        || !l.list("tang").is_empty()
        || l.obj("cex").and_then(|c| c.boolean("enabled")) == Some(true)
}

fn join_path(base: &str, rel: &str) -> String {
    let joined = format!("{}/{}", base.trim_end_matches('/'), rel);
    let mut parts: Vec<&str> = Vec::new();
    for p in joined.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Visits every struct of the tree with its YAML path.
fn walk(o: &Obj, path: &str, f: &mut dyn FnMut(&Obj, &str)) {
    f(o, path);
    for (fd, v) in o.def.fields.iter().zip(&o.vals) {
        let name = if fd.yaml.is_empty() { fd.json } else { fd.yaml };
        let child = format!("{path}.{name}");
        match v {
            Some(G::Obj(c)) => walk(c, &child, f),
            Some(G::List(l)) => {
                for (i, (v, _)) in l.iter().enumerate() {
                    if let G::Obj(c) = v {
                        walk(c, &format!("{child}.{i}"), f);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Butane's "mode written in decimal" check (`CheckForDecimalMode`).
fn decimal_mode(mode: i64, dir: bool) -> bool {
    if !(0..=7777).contains(&mode) {
        return false;
    }
    let mut oct = 0;
    let mut d = 1000;
    while d > 0 {
        let digit = (mode / d) % 10;
        if digit > 7 {
            return false;
        }
        oct = (oct << 3) | digit;
        d /= 10;
    }
    !typical_mode(mode, dir) && typical_mode(oct, dir)
}

fn typical_mode(mode: i64, dir: bool) -> bool {
    if mode == 0 {
        return true;
    }
    let perms = [mode & 7, (mode & 0o70) >> 3, (mode & 0o700) >> 6];
    let (mut hr, mut hw, mut hx) = (false, false, false);
    for p in perms {
        let (r, w, x) = (p & 4 != 0, p & 2 != 0, p & 1 != 0);
        if (!r && hr) || (!w && hw) || (!x && hx) {
            return false;
        }
        if x && hr && !hx {
            return false;
        }
        if (w || x) && !r {
            return false;
        }
        hr |= r;
        hw |= w;
        hx |= x;
    }
    if !hr {
        return false;
    }
    if dir {
        if !hx || mode & 0o4000 != 0 || (mode & 0o3000 != 0 && !hw) {
            return false;
        }
    } else {
        if mode & 0o6000 != 0 && (!hx || mode & 2 != 0) {
            return false;
        }
        if mode & 0o1000 != 0 {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_modes() {
        assert!(decimal_mode(644, false));
        assert!(!decimal_mode(420, false));
        assert!(decimal_mode(755, true));
    }
}
