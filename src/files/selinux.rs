//! SELinux relabelling: when the target root's `/etc/selinux/config` names a policy, every
//! path the stage created or changed is relabelled with `setfiles` and that policy's
//! `file_contexts`, in one call with the paths on stdin. A target without SELinux is
//! relabelled nothing.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::resolve::{Root, kind};

use anyhow::{Context, Result, bail};
use log::{debug, info};

/// The policy a target root uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `SELINUXTYPE`, e.g. `targeted` or `default`.
    pub name: String,
    /// `SELINUX`: enforcing, permissive or disabled.
    pub mode: String,
    /// The policy's file contexts, as a host path.
    pub file_contexts: PathBuf,
}

/// Parses `SELINUX=` and `SELINUXTYPE=` from a selinux config file.
pub fn parse_config(text: &str) -> (Option<String>, Option<String>) {
    let (mut mode, mut ty) = (None, None);
    for l in text.lines() {
        let l = l.trim();
        if l.starts_with('#') {
            continue;
        }
        if let Some((k, v)) = l.split_once('=') {
            let v = v.trim().trim_matches('"').to_string();
            match k.trim() {
                "SELINUX" => mode = Some(v),
                "SELINUXTYPE" => ty = Some(v),
                _ => {}
            }
        }
    }
    (mode, ty)
}

/// The target's policy, or `None` when it has no SELinux config, names no policy, or is
/// disabled.
pub fn target_policy(root: &Root) -> Result<Option<Policy>> {
    let cfg = root.host.join("etc/selinux/config");
    let Some(bytes) = root
        .read_file("/etc/selinux/config")
        .with_context(|| format!("reading {}", cfg.display()))?
    else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes);
    let (mode, ty) = parse_config(&text);
    let Some(name) = ty.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let mode = mode.unwrap_or_else(|| "enforcing".into());
    if mode == "disabled" {
        info!("target SELinux is disabled: no relabelling");
        return Ok(None);
    }
    if name.contains('/') || name == ".." {
        bail!("{}: invalid SELINUXTYPE {name:?}", cfg.display());
    }
    let fc_path = format!("/etc/selinux/{name}/contexts/files/file_contexts");
    let fc = root.host.join(&fc_path[1..]);
    let is_file = root
        .place(&fc_path, false)?
        .map(|p| p.stat())
        .transpose()?
        .flatten()
        .is_some_and(|st| kind(&st) == nix::sys::stat::SFlag::S_IFREG);
    if !is_file {
        bail!(
            "{} names policy {name:?} but {} is missing",
            cfg.display(),
            fc.display()
        );
    }
    Ok(Some(Policy {
        name,
        mode,
        file_contexts: fc,
    }))
}

/// Keeps existing paths and drops those under another listed path (setfiles recurses).
pub fn minimal_paths(logical: &[String]) -> Vec<String> {
    let set: BTreeSet<&str> = logical.iter().map(String::as_str).collect();
    let mut out: Vec<String> = Vec::new();
    for p in set {
        if let Some(last) = out.last()
            && (last == "/" || p.starts_with(&format!("{last}/")))
        {
            continue;
        }
        out.push(p.to_string());
    }
    out
}

/// Relabels `logical` paths of `root` with the target's policy, if it has one.
/// Returns how many paths were handed to setfiles.
pub fn relabel(troot: &Root, logical: &[String]) -> Result<usize> {
    let root = troot.host.as_path();
    let Some(policy) = target_policy(troot)? else {
        debug!("target has no SELinux policy: nothing to relabel");
        return Ok(0);
    };
    debug!("host SELinux support: {:?}", selinux::kernel_support());
    let paths: Vec<String> = minimal_paths(logical)
        .into_iter()
        .filter(|p| troot.stat(p).ok().flatten().is_some())
        .collect();
    if paths.is_empty() {
        return Ok(0);
    }
    let mut input = Vec::new();
    for p in &paths {
        input.extend_from_slice(
            root.join(p.trim_start_matches('/'))
                .as_os_str()
                .as_encoded_bytes(),
        );
        input.push(0);
    }
    let root_s = root.to_string_lossy().into_owned();
    let fc = policy.file_contexts.to_string_lossy().into_owned();
    let args = ["-F", "-0", "-r", root_s.as_str(), "-f", "-", fc.as_str()];
    runtime::util::run_with_stdin("setfiles", &args, Some(&input)).with_context(|| {
        format!(
            "relabelling {} paths with policy {}",
            paths.len(),
            policy.name
        )
    })?;
    info!(
        "relabelled {} paths with SELinux policy {}",
        paths.len(),
        policy.name
    );
    Ok(paths.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_and_minimal_paths() {
        let (m, t) = parse_config("# c\nSELINUX=permissive\nSELINUXTYPE = \"targeted\"\n");
        assert_eq!(m.as_deref(), Some("permissive"));
        assert_eq!(t.as_deref(), Some("targeted"));
        let p = minimal_paths(&[
            "/etc/a/b".into(),
            "/etc/a".into(),
            "/etc/ab".into(),
            "/etc/a".into(),
            "/var/x".into(),
        ]);
        assert_eq!(p, ["/etc/a", "/etc/ab", "/var/x"]);
    }
}
