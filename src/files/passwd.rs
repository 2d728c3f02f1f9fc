//! Users and groups: groups first, then users; create, modify or delete (`shouldExist: false`)
//! with the target root's own tools (shadow-utils `useradd`/`usermod`/`userdel`/`groupadd`/
//! `groupmod`/`groupdel` with `--root`), then SSH keys into the user's home.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use log::info;

use super::Writer;
use super::nodes::{Attrs, Contents};
use super::owners::{parse_group, parse_passwd};
use crate::config::types::{Group, Passwd, User};

/// Where SSH keys go inside `~/.ssh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SshKeysFile {
    /// `~/.ssh/authorized_keys.d/agent` (sshd reads it with an AuthorizedKeysFile drop-in or
    /// a helper that concatenates the fragments).
    #[default]
    Fragment,
    /// `~/.ssh/authorized_keys`.
    AuthorizedKeys,
}

/// How a shadow-utils tool is run against the target root.
enum Tool {
    /// The host's tool with `--root <root>`.
    Host(PathBuf),
    /// The target's own tool through chroot.
    Chroot(String),
}

const SBIN_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

fn find_tool(root: &Path, name: &str) -> Result<Tool> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(SBIN_DIRS.iter().map(PathBuf::from));
    if let Some(d) = dirs.iter().find(|d| d.join(name).is_file()) {
        return Ok(Tool::Host(d.join(name)));
    }
    for d in SBIN_DIRS {
        let rel = format!("{d}/{name}");
        if root.join(rel.trim_start_matches('/')).is_file() {
            return Ok(Tool::Chroot(rel));
        }
    }
    bail!("{name} not found on the host or in the target root (install shadow-utils/passwd)")
}

fn run_tool(root: &Path, name: &str, args: &[String]) -> Result<()> {
    match find_tool(root, name)? {
        Tool::Host(p) => {
            let mut a: Vec<String> = vec!["--root".into(), root.to_string_lossy().into_owned()];
            a.extend_from_slice(args);
            crate::util::run(&p.to_string_lossy(), &a)?;
        }
        Tool::Chroot(p) => {
            let mut a: Vec<String> = vec![root.to_string_lossy().into_owned(), p];
            a.extend_from_slice(args);
            crate::util::run("chroot", &a)?;
        }
    }
    Ok(())
}

/// Lines of a target database file (empty if missing).
fn read_db(root: &Path, rel: &str) -> Result<String> {
    let p = root.join(rel);
    match std::fs::read_to_string(&p) {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

fn group_exists(root: &Path, name: &str) -> Result<bool> {
    Ok(parse_group(&read_db(root, "etc/group")?)
        .iter()
        .any(|(n, _)| n == name))
}

fn user_exists(root: &Path, name: &str) -> Result<bool> {
    Ok(parse_passwd(&read_db(root, "etc/passwd")?)
        .iter()
        .any(|u| u.name == name))
}

/// Arguments for groupadd/groupmod.
pub fn group_args(g: &Group, exists: bool) -> Vec<String> {
    let mut a = Vec::new();
    if let Some(gid) = g.gid {
        a.extend(["--gid".into(), gid.to_string()]);
    }
    if let Some(h) = &g.password_hash {
        a.extend(["--password".into(), h.clone()]);
    }
    if !exists && g.system == Some(true) {
        a.push("--system".into());
    }
    a.push(g.name.clone());
    a
}

/// Arguments for useradd (`exists` false) or usermod (`exists` true).
pub fn user_args(u: &User, exists: bool) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut opt = |flag: &str, v: &Option<String>| {
        if let Some(v) = v {
            a.push(flag.into());
            a.push(v.clone());
        }
    };
    opt("--comment", &u.gecos);
    opt("--home", &u.home_dir);
    opt("--gid", &u.primary_group);
    opt("--shell", &u.shell);
    if let Some(uid) = u.uid {
        a.extend(["--uid".into(), uid.to_string()]);
    }
    if !u.groups.is_empty() {
        a.extend(["--groups".into(), u.groups.join(",")]);
    }
    match (&u.password_hash, exists) {
        (Some(h), _) => a.extend(["--password".into(), h.clone()]),
        // New accounts without a hash are locked.
        (None, false) => a.extend(["--password".into(), "*".into()]),
        (None, true) => {}
    }
    if !exists {
        if u.no_create_home == Some(true) {
            a.push("--no-create-home".into());
        } else {
            a.push("--create-home".into());
        }
        if u.no_user_group == Some(true) {
            a.push("--no-user-group".into());
        }
        if u.no_log_init == Some(true) {
            a.push("--no-log-init".into());
        }
        if u.system == Some(true) {
            a.push("--system".into());
        }
    }
    a.push(u.name.clone());
    a
}

impl Writer<'_> {
    /// Groups, then users, then SSH keys.
    pub fn write_passwd(&mut self, p: &Passwd, keys_file: SshKeysFile) -> Result<()> {
        if p.is_empty() {
            return Ok(());
        }
        let root = self.root.host.clone();
        for g in &p.groups {
            let exists = group_exists(&root, &g.name)?;
            if g.should_exist == Some(false) {
                if exists {
                    run_tool(&root, "groupdel", std::slice::from_ref(&g.name))
                        .with_context(|| format!("deleting group {}", g.name))?;
                    info!("deleted group {}", g.name);
                }
                continue;
            }
            let (tool, verb) = if exists {
                ("groupmod", "modifying")
            } else {
                ("groupadd", "creating")
            };
            let args = group_args(g, exists);
            if exists && args.len() == 1 {
                continue;
            }
            run_tool(&root, tool, &args).with_context(|| format!("{verb} group {}", g.name))?;
            info!("{verb} group {}: done", g.name);
        }
        for u in &p.users {
            let exists = user_exists(&root, &u.name)?;
            if u.should_exist == Some(false) {
                if exists {
                    run_tool(&root, "userdel", std::slice::from_ref(&u.name))
                        .with_context(|| format!("deleting user {}", u.name))?;
                    info!("deleted user {}", u.name);
                }
                continue;
            }
            let (tool, verb) = if exists {
                ("usermod", "modifying")
            } else {
                ("useradd", "creating")
            };
            let args = user_args(u, exists);
            if !(exists && args.len() == 1) {
                run_tool(&root, tool, &args).with_context(|| format!("{verb} user {}", u.name))?;
                info!("{verb} user {}: done", u.name);
            }
            if !exists && u.no_create_home != Some(true) {
                // Relabel the new home (found after the user database reload below).
                if let Some(e) = parse_passwd(&read_db(&root, "etc/passwd")?)
                    .into_iter()
                    .find(|e| e.name == u.name)
                    && e.home.starts_with('/')
                    && e.home != "/"
                {
                    self.touch(e.home);
                }
            }
        }
        for f in ["/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"] {
            if root.join(&f[1..]).exists() {
                self.touch(f.to_string());
            }
        }
        self.forget_owners();
        for u in &p.users {
            if u.should_exist != Some(false) && !u.ssh_authorized_keys.is_empty() {
                self.write_ssh_keys(u, keys_file)?;
            }
        }
        Ok(())
    }

    fn write_ssh_keys(&mut self, u: &User, keys_file: SshKeysFile) -> Result<()> {
        let entry = self
            .owners()?
            .users
            .get(&u.name)
            .cloned()
            .with_context(|| format!("user {} not found in the target's /etc/passwd", u.name))?;
        if !entry.home.starts_with('/') {
            bail!(
                "user {}: home directory {:?} is not absolute",
                u.name,
                entry.home
            );
        }
        let home = entry.home.trim_end_matches('/');
        let owner = |mode| Attrs {
            uid: Some(entry.uid),
            gid: Some(entry.gid),
            mode: Some(mode),
        };
        let ssh = format!("{home}/.ssh");
        self.put_dir(&ssh, owner(0o700), false)?;
        let file = match keys_file {
            SshKeysFile::Fragment => {
                let d = format!("{ssh}/authorized_keys.d");
                self.put_dir(&d, owner(0o700), false)?;
                format!("{d}/agent")
            }
            SshKeysFile::AuthorizedKeys => format!("{ssh}/authorized_keys"),
        };
        let mut text = u.ssh_authorized_keys.join("\n");
        text.push('\n');
        self.put_file(&file, Contents::Bytes(text.as_bytes()), owner(0o600), true)
            .with_context(|| format!("writing SSH keys of {}", u.name))?;
        info!(
            "wrote {} SSH key(s) for {} to {file}",
            u.ssh_authorized_keys.len(),
            u.name
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn useradd_and_usermod_arguments() {
        let u = User {
            name: "core".into(),
            uid: Some(1500),
            groups: vec!["wheel".into(), "adm".into()],
            no_create_home: Some(true),
            system: Some(true),
            ..Default::default()
        };
        assert_eq!(
            user_args(&u, false),
            [
                "--uid",
                "1500",
                "--groups",
                "wheel,adm",
                "--password",
                "*",
                "--no-create-home",
                "--system",
                "core"
            ]
        );
        assert_eq!(
            user_args(&u, true),
            ["--uid", "1500", "--groups", "wheel,adm", "core"]
        );
        let g = Group {
            name: "g".into(),
            gid: Some(5),
            system: Some(true),
            ..Default::default()
        };
        assert_eq!(group_args(&g, false), ["--gid", "5", "--system", "g"]);
        assert_eq!(group_args(&g, true), ["--gid", "5", "g"]);
    }
}
