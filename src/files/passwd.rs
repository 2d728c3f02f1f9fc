//! Users and groups: groups first, then users; create, modify or delete (`shouldExist: false`)
//! with the target root's own tools (shadow-utils `useradd`/`usermod`/`userdel`/`groupadd`/
//! `groupmod`/`groupdel` with `--root`), then SSH keys into the user's home.
//!
//! The tools get the long options Ignition passes, in Ignition's order (distributions' wrappers
//! around shadow-utils accept exactly those): `useradd --root R [--home-dir H]
//! --create-home|--no-create-home [--no-user-group] [--system] [--no-log-init] --password P
//! [--uid U] [--comment C] [--gid G] [--groups A,B] [--shell S] NAME`; `usermod` the same
//! without the creation options and with `--home H --move-home`; `userdel --remove`;
//! `groupadd --root R [--gid G] --password P [--system] NAME`. A new account without a
//! password hash (or with an empty one) gets `*` (locked).
//!
//! Like Ignition: directories the stage created as mount points inside a user's home (the
//! home itself included) are given to the user (owner, primary group, mode 0700) once the
//! user exists; SSH keys go to `~/.ssh/authorized_keys.d/ignition` (or `~/.ssh/authorized_keys`
//! with `--ssh-keys-file authorized-keys`), mode 0600, owned by the user, and the directories
//! on the way that did not exist are created owned by the user with mode 0700 (existing ones
//! are left as they are).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use log::info;

use super::Writer;
use super::nodes::{Attrs, Contents};
use super::owners::{PasswdEntry, parse_group, parse_passwd};
use super::resolve::{Root, elements, kind, logical};
use nix::sys::stat::SFlag;
use spec::config::types::{Group, Passwd, User};

/// Where SSH keys go inside `~/.ssh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SshKeysFile {
    /// `~/.ssh/authorized_keys.d/ignition`, Ignition's fragment (sshd reads it with an
    /// AuthorizedKeysFile drop-in or a helper that concatenates the fragments).
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
            runtime::util::run(&p.to_string_lossy(), &a)?;
        }
        Tool::Chroot(p) => {
            let mut a: Vec<String> = vec![root.to_string_lossy().into_owned(), p];
            a.extend_from_slice(args);
            runtime::util::run("chroot", &a)?;
        }
    }
    Ok(())
}

/// Lines of a target database file (empty if missing), read through the root.
fn read_db(root: &Root, path: &str) -> Result<String> {
    let b = root
        .read_file(path)
        .with_context(|| format!("reading the target's {path}"))?
        .unwrap_or_default();
    Ok(String::from_utf8_lossy(&b).into_owned())
}

fn group_exists(root: &Root, name: &str) -> Result<bool> {
    Ok(parse_group(&read_db(root, "/etc/group")?)
        .iter()
        .any(|(n, _)| n == name))
}

fn user_exists(root: &Root, name: &str) -> Result<bool> {
    Ok(parse_passwd(&read_db(root, "/etc/passwd")?)
        .iter()
        .any(|u| u.name == name))
}

/// The largest id `chown`, `useradd` and `groupadd` can take: 4294967295 is -1, "no change".
pub const MAX_ID: i64 = u32::MAX as i64 - 1;

/// Checks a uid/gid of the config against 0..=4294967294.
fn check_id(id: Option<i64>, what: &str) -> Result<()> {
    match id {
        Some(i) if !(0..=MAX_ID).contains(&i) => bail!(
            "{what}: id {i} is outside 0..={MAX_ID} (4294967295 would mean -1, \"leave as is\", to chown); use a valid id"
        ),
        _ => Ok(()),
    }
}

/// A password hash as Ignition passes it: an empty one locks the account (`*`).
fn password(h: &str) -> String {
    if h.is_empty() {
        "*".into()
    } else {
        h.to_string()
    }
}

/// Arguments for groupadd (`exists` false) or groupmod (`exists` true), after `--root R`.
pub fn group_args(g: &Group, exists: bool) -> Vec<String> {
    let mut a = Vec::new();
    if let Some(gid) = g.gid {
        a.extend(["--gid".into(), gid.to_string()]);
    }
    match (&g.password_hash, exists) {
        (Some(h), _) => a.extend(["--password".into(), password(h)]),
        (None, false) => a.extend(["--password".into(), "*".into()]),
        (None, true) => {}
    }
    if !exists && g.system == Some(true) {
        a.push("--system".into());
    }
    a.push(g.name.clone());
    a
}

/// Arguments for useradd (`exists` false) or usermod (`exists` true), after `--root R`.
pub fn user_args(u: &User, exists: bool) -> Vec<String> {
    let set = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    let mut a: Vec<String> = Vec::new();
    if exists {
        if let Some(h) = set(&u.home_dir) {
            a.extend(["--home".into(), h, "--move-home".into()]);
        }
    } else {
        if let Some(h) = set(&u.home_dir) {
            a.extend(["--home-dir".into(), h]);
        }
        a.push(if u.no_create_home == Some(true) {
            "--no-create-home".into()
        } else {
            "--create-home".into()
        });
        if u.no_user_group == Some(true) {
            a.push("--no-user-group".into());
        }
        if u.system == Some(true) {
            a.push("--system".into());
        }
        if u.no_log_init == Some(true) {
            a.push("--no-log-init".into());
        }
    }
    match (&u.password_hash, exists) {
        (Some(h), _) => a.extend(["--password".into(), password(h)]),
        // New accounts without a hash are locked.
        (None, false) => a.extend(["--password".into(), "*".into()]),
        (None, true) => {}
    }
    if let Some(uid) = u.uid {
        a.extend(["--uid".into(), uid.to_string()]);
    }
    for (flag, v) in [("--comment", &u.gecos), ("--gid", &u.primary_group)] {
        if let Some(v) = set(v) {
            a.extend([flag.into(), v]);
        }
    }
    if !u.groups.is_empty() {
        a.extend(["--groups".into(), u.groups.join(",")]);
    }
    if let Some(v) = set(&u.shell) {
        a.extend(["--shell".into(), v]);
    }
    a.push(u.name.clone());
    a
}

impl Writer<'_> {
    /// Groups, then users; then per user the mount points inside its home and its SSH keys.
    pub fn write_passwd(&mut self, p: &Passwd, keys_file: SshKeysFile) -> Result<()> {
        if p.is_empty() {
            return Ok(());
        }
        let root = self.root.host.clone();
        let troot = &self.root;
        for (i, g) in p.groups.iter().enumerate() {
            check_id(
                g.gid,
                &format!("$.passwd.groups.{i}.gid (group {})", g.name),
            )?;
        }
        for (i, u) in p.users.iter().enumerate() {
            check_id(u.uid, &format!("$.passwd.users.{i}.uid (user {})", u.name))?;
        }
        for g in &p.groups {
            let exists = group_exists(troot, &g.name)?;
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
            let exists = user_exists(troot, &u.name)?;
            if u.should_exist == Some(false) {
                if exists {
                    // Like Ignition: the home directory and mail spool go with the account.
                    run_tool(&root, "userdel", &["--remove".into(), u.name.clone()])
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
                if let Some(e) = parse_passwd(&read_db(troot, "/etc/passwd")?)
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
            if troot.stat(f)?.is_some() {
                self.touch(f.to_string());
            }
        }
        self.forget_owners();
        for u in p.users.iter().filter(|u| u.should_exist != Some(false)) {
            self.give_mount_dirs(u)?;
            if !u.ssh_authorized_keys.is_empty() {
                self.write_ssh_keys(u, keys_file)?;
            }
        }
        Ok(())
    }

    /// The user's `/etc/passwd` entry in the target (after the tools ran).
    fn passwd_entry(&mut self, u: &User) -> Result<PasswdEntry> {
        let e = self
            .owners()?
            .users
            .get(&u.name)
            .cloned()
            .with_context(|| format!("user {} not found in the target's /etc/passwd", u.name))?;
        if e.uid == u32::MAX || e.gid == u32::MAX {
            bail!(
                "user {}: uid/gid 4294967295 in the target's /etc/passwd cannot be used as an owner",
                u.name
            );
        }
        Ok(e)
    }

    /// The logical path of directory `path` with every symlink followed (missing elements
    /// kept as they are).
    fn dir_logical(&self, path: &str) -> Result<Vec<String>> {
        Ok(self.root.resolve(&format!("{path}/x"))?.parent)
    }

    /// Gives the directories created as mount points inside the user's home (the home
    /// included) to the user, mode 0700, as Ignition does once the user exists: a home that is
    /// a mount point would otherwise stay root-owned (useradd does not take over an existing
    /// directory).
    fn give_mount_dirs(&mut self, u: &User) -> Result<()> {
        if self.mount_dirs.is_empty() {
            return Ok(());
        }
        let e = self.passwd_entry(u)?;
        if !e.home.starts_with('/') {
            return Ok(());
        }
        let home = self.dir_logical(&e.home)?;
        if home.is_empty() {
            // A home of "/" would hand every mount point to the user.
            return Ok(());
        }
        let dirs: Vec<String> = self
            .mount_dirs
            .iter()
            .filter(|d| elements(d).starts_with(&home))
            .cloned()
            .collect();
        for d in dirs {
            let attrs = Attrs {
                uid: Some(e.uid),
                gid: Some(e.gid),
                mode: Some(0o700),
            };
            if !self
                .set_dir_attrs(&d, attrs)
                .with_context(|| format!("giving mount point {d} to user {}", u.name))?
            {
                continue;
            }
            info!("mount point {d} given to {} (mode 0700)", u.name);
            self.touch(d);
        }
        Ok(())
    }

    /// Creates directory `path` owned by the user with mode 0700 if it does not exist (an
    /// existing one is left as it is).
    fn user_dir(&self, path: &str, owner: Attrs) -> Result<String> {
        let elems = self.dir_logical(path)?;
        let l = logical(elems.iter());
        let is_dir = elems.is_empty()
            || self
                .root
                .stat(&l)?
                .is_some_and(|st| kind(&st) == SFlag::S_IFDIR);
        if !is_dir {
            self.put_dir(&l, owner, false)?;
        }
        Ok(l)
    }

    fn write_ssh_keys(&mut self, u: &User, keys_file: SshKeysFile) -> Result<()> {
        let entry = self.passwd_entry(u)?;
        if !entry.home.starts_with('/') {
            bail!(
                "user {}: home directory {:?} is not absolute",
                u.name,
                entry.home
            );
        }
        let owner = |mode| Attrs {
            uid: Some(entry.uid),
            gid: Some(entry.gid),
            mode: Some(mode),
        };
        let mut dir = if elements(&entry.home).is_empty() {
            "/".to_string()
        } else {
            self.user_dir(&entry.home, owner(0o700))?
        };
        let mut subdirs = vec![".ssh"];
        if keys_file == SshKeysFile::Fragment {
            subdirs.push("authorized_keys.d");
        }
        for sub in subdirs {
            dir = self.user_dir(
                &format!("{}/{sub}", dir.trim_end_matches('/')),
                owner(0o700),
            )?;
        }
        let file = match keys_file {
            SshKeysFile::Fragment => format!("{dir}/ignition"),
            SshKeysFile::AuthorizedKeys => format!("{dir}/authorized_keys"),
        };
        // Ignition joins the keys with newlines and ends the file with one.
        let mut text = u.ssh_authorized_keys.join("\n");
        if !text.ends_with('\n') {
            text.push('\n');
        }
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
    fn useradd_and_usermod_take_ignitions_long_options_in_its_order() {
        let u = User {
            name: "core".into(),
            uid: Some(1500),
            gecos: Some("Core".into()),
            home_dir: Some("/var/home/core".into()),
            primary_group: Some("users".into()),
            shell: Some("/bin/sh".into()),
            groups: vec!["wheel".into(), "adm".into()],
            no_create_home: Some(true),
            no_user_group: Some(true),
            no_log_init: Some(true),
            system: Some(true),
            ..Default::default()
        };
        assert_eq!(
            user_args(&u, false),
            [
                "--home-dir",
                "/var/home/core",
                "--no-create-home",
                "--no-user-group",
                "--system",
                "--no-log-init",
                "--password",
                "*",
                "--uid",
                "1500",
                "--comment",
                "Core",
                "--gid",
                "users",
                "--groups",
                "wheel,adm",
                "--shell",
                "/bin/sh",
                "core"
            ]
        );
        assert_eq!(
            user_args(&u, true),
            [
                "--home",
                "/var/home/core",
                "--move-home",
                "--uid",
                "1500",
                "--comment",
                "Core",
                "--gid",
                "users",
                "--groups",
                "wheel,adm",
                "--shell",
                "/bin/sh",
                "core"
            ]
        );
        // Defaults: a home is created, the account locked; empty strings are not passed.
        let plain = User {
            name: "p".into(),
            gecos: Some(String::new()),
            password_hash: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(
            user_args(&plain, false),
            ["--create-home", "--password", "*", "p"]
        );
        assert_eq!(user_args(&plain, true), ["--password", "*", "p"]);
        let hashed = User {
            name: "h".into(),
            password_hash: Some("$6$x".into()),
            ..Default::default()
        };
        assert_eq!(user_args(&hashed, true), ["--password", "$6$x", "h"]);
    }

    #[test]
    fn groupadd_and_groupmod_arguments() {
        let g = Group {
            name: "g".into(),
            gid: Some(5),
            system: Some(true),
            ..Default::default()
        };
        assert_eq!(
            group_args(&g, false),
            ["--gid", "5", "--password", "*", "--system", "g"]
        );
        assert_eq!(group_args(&g, true), ["--gid", "5", "g"]);
        let h = Group {
            name: "h".into(),
            password_hash: Some("$1$y".into()),
            ..Default::default()
        };
        assert_eq!(group_args(&h, false), ["--password", "$1$y", "h"]);
    }

    #[test]
    fn ids_outside_the_chown_range_are_refused() {
        assert!(check_id(Some(0), "u").is_ok());
        assert!(check_id(Some(4_294_967_294), "u").is_ok());
        assert!(check_id(None, "u").is_ok());
        let e = check_id(Some(4_294_967_295), "user x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("user x") && e.contains("-1"), "{e}");
        assert!(check_id(Some(-1), "u").is_err());
        assert!(check_id(Some(1 << 40), "u").is_err());
    }
}
