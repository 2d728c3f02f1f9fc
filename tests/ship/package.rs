//! Installing: `make install` (into a staging tree and under a prefix of its own) and the
//! Debian package (`make deb`), as an operator would use them:
//! - the installed units pass `systemd-analyze verify`; the sysusers entry creates the user
//!   the server's unit runs as, and the tmpfiles entry its directories;
//! - man pages (`man agent`, one per subcommand) and completions for bash, zsh and fish are
//!   there, generated from the CLI: bash completes `agent se<TAB>` to `serve`, zsh and fish
//!   read theirs without error;
//! - the package passes lintian without an error or a warning, installs with `dpkg -i` on
//!   this machine (`agent --version`, `man agent`, the user, the units verified in place) and
//!   `dpkg --purge` leaves nothing of it behind.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use support::{TempDir, need, sh};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The tests here share target/docs and the staging tree of `make deb`: one at a time.
static MAKE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `make ARGS...` in the source tree; fails the test with its output.
fn make(args: &[&str]) -> String {
    let mut cmd = Command::new("make");
    // Without the variables cargo sets for a test (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...):
    // build scripts that track them would make `make static` rebuild on every run.
    for (k, _) in std::env::vars_os() {
        if k.to_str()
            .is_some_and(|k| k.starts_with("CARGO_") && k != "CARGO_HOME")
        {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .args(["--no-print-directory", "-C", ROOT])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running make");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "make {args:?} failed:\n{text}");
    text
}

/// Runs a command; (exit code, stdout + stderr).
fn run(program: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Every file, link and directory under `root`, relative.
fn files(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            out.insert(p.strip_prefix(root).unwrap().display().to_string());
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// bash, with the completion file loaded, completes `agent se` to `serve`, and a subcommand's
/// flags after it.
fn check_bash_completion(file: &Path) {
    let script = format!(
        r#"source {}
complete -p agent >/dev/null || exit 3
COMP_WORDS=(agent se); COMP_CWORD=1; COMP_LINE="agent se"; COMP_POINT=${{#COMP_LINE}}
_agent agent se agent
echo "words: ${{COMPREPLY[*]}}"
COMP_WORDS=(agent serve --adm); COMP_CWORD=2; COMP_LINE="agent serve --adm"; COMP_POINT=${{#COMP_LINE}}
_agent agent --adm serve
echo "flags: ${{COMPREPLY[*]}}"
"#,
        file.display()
    );
    let (code, out) = run("bash", &["--norc", "-c", &script]);
    assert_eq!(code, 0, "bash could not load {}: {out}", file.display());
    assert!(out.contains("words: serve"), "{out}");
    assert!(out.contains("--admin-listen"), "{out}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn make_install_units_users_docs_completions() {
    support::root::must_be_root();
    let _one = MAKE.lock().unwrap_or_else(|e| e.into_inner());
    for t in [
        "systemd-analyze",
        "systemd-sysusers",
        "systemd-tmpfiles",
        "bash",
        "zsh",
        "fish",
    ] {
        need(t, "ship.apt");
    }
    let t = TempDir::new("ship-install");
    let dest = t.path().join("dest");
    make(&["install", &format!("DESTDIR={}", dest.display())]);
    for f in [
        "usr/bin/agent",
        "usr/lib/dracut/modules.d/30agent/module-setup.sh",
        "usr/lib/dracut/modules.d/30agent/units/agent-fetch.service",
        "usr/lib/systemd/system/agent-serve.service",
        "usr/lib/systemd/system/agent-delete-config.service",
        "usr/lib/sysusers.d/agent-serve.conf",
        "usr/lib/tmpfiles.d/agent-serve.conf",
        "etc/default/agent-serve",
        "usr/share/man/man1/agent.1",
        "usr/share/man/man1/agent-serve.1",
        "usr/share/man/man1/agent-machines-list.1",
        "usr/share/bash-completion/completions/agent",
        "usr/share/zsh/site-functions/_agent",
        "usr/share/fish/vendor_completions.d/agent.fish",
    ] {
        assert!(dest.join(f).exists(), "make install did not install /{f}");
    }
    // The user the server's unit runs as comes from the sysusers entry; the directories its
    // unit reads from the tmpfiles entry, owned as the unit expects.
    let unit =
        std::fs::read_to_string(dest.join("usr/lib/systemd/system/agent-serve.service")).unwrap();
    let user = unit
        .lines()
        .find_map(|l| l.strip_prefix("User="))
        .expect("User= in agent-serve.service");
    sh(
        "systemd-sysusers",
        &[&format!("--root={}", dest.display())],
        None,
    );
    let passwd = std::fs::read_to_string(dest.join("etc/passwd")).unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{user}:")))
        .unwrap_or_else(|| panic!("no sysusers entry creates {user}: {passwd}"));
    let uid: u32 = line.split(':').nth(2).unwrap().parse().unwrap();
    sh(
        "systemd-tmpfiles",
        &[&format!("--root={}", dest.display()), "--create"],
        None,
    );
    use std::os::unix::fs::MetadataExt;
    for (dir, owner, mode) in [
        ("etc/agent-serve", 0, 0o750),
        ("var/lib/agent-serve/source", uid, 0o750),
    ] {
        let m = std::fs::metadata(dest.join(dir)).unwrap_or_else(|e| panic!("/{dir}: {e}"));
        assert_eq!((m.uid(), m.mode() & 0o7777), (owner, mode), "/{dir}");
    }
    // Every path the unit reads is one the tmpfiles entry makes.
    for l in unit.lines() {
        if let Some(paths) = l.strip_prefix("ReadOnlyPaths=") {
            for p in paths.split_whitespace() {
                assert!(dest.join(&p[1..]).is_dir(), "ReadOnlyPaths {p} is not made");
            }
        }
    }
    // Completions load in each shell.
    check_bash_completion(&dest.join("usr/share/bash-completion/completions/agent"));
    let zsh = dest.join("usr/share/zsh/site-functions");
    let (code, out) = run(
        "zsh",
        &[
            "-f",
            "-c",
            &format!(
                "fpath=({} $fpath); autoload -Uz compinit && compinit -u -D && \
                 autoload -Uz _agent && whence -w _agent && (( $+_comps[agent] ))",
                zsh.display()
            ),
        ],
    );
    assert_eq!(code, 0, "zsh: {out}");
    // compinit writes no dump file (`-D`): a dump path is replaced by rename, and one named
    // /dev/null would turn the host's /dev/null into a regular file.
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device(),
        "/dev/null is no longer the null device"
    );
    let (code, out) = run(
        "fish",
        &[
            "--no-config",
            "-c",
            &format!(
                "source {}; and complete -C 'agent se'",
                dest.join("usr/share/fish/vendor_completions.d/agent.fish")
                    .display()
            ),
        ],
    );
    assert_eq!(code, 0, "fish: {out}");
    assert!(out.lines().any(|l| l.starts_with("serve")), "fish: {out}");
    // The man page renders.
    let (code, out) = run(
        "man",
        &[dest
            .join("usr/share/man/man1/agent-serve.1")
            .to_str()
            .unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("--admin-listen"), "{out}");

    // Under a prefix of its own, the units run the binary installed there: verified in place
    // (systemd-analyze checks that each command exists and is executable).
    let prefix = t.path().join("prefix");
    make(&[
        "install",
        &format!("PREFIX={}/usr", prefix.display()),
        &format!("SYSCONFDIR={}/etc", prefix.display()),
    ]);
    let units = prefix.join("usr/lib/systemd/system");
    let serve = units.join("agent-serve.service");
    let text = std::fs::read_to_string(&serve).unwrap();
    assert!(
        text.contains(&format!("{}/usr/bin/agent serve", prefix.display())),
        "{text}"
    );
    // (It also opens each Documentation= man page: the ones installed there.)
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&serve)
        .arg(units.join("agent-delete-config.service"))
        .env("MANPATH", prefix.join("usr/share/man"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Paths dpkg or the package's scripts may touch, listed before and after: nothing may be
/// left over after `dpkg --purge`.
const WATCHED: &[&str] = &[
    "/usr/bin",
    "/usr/lib/dracut",
    "/lib/systemd/system",
    "/usr/lib/sysusers.d",
    "/usr/lib/tmpfiles.d",
    "/usr/share/man/man1",
    "/usr/share/bash-completion/completions",
    "/usr/share/zsh/vendor-completions",
    "/usr/share/fish/vendor_completions.d",
    "/usr/share/doc",
    "/usr/share/lintian/overrides",
    "/etc",
    "/var/lib",
];

fn snapshot() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for w in WATCHED {
        all.insert(w.to_string());
        for f in files(Path::new(w)) {
            all.insert(format!("{w}/{f}"));
        }
    }
    // What other processes on the machine change meanwhile is not the package's.
    all.retain(|p| {
        !p.starts_with("/var/lib/dpkg")
            && !p.starts_with("/var/lib/apt")
            && !p.starts_with("/var/lib/man-db")
            && !p.starts_with("/var/lib/systemd")
            && !p.starts_with("/var/lib/containers")
            && !p.starts_with("/etc/ld.so.cache")
            && !p.contains("agent-test-")
    });
    all
}

#[test]
#[ignore = "needs root: make test-root"]
fn deb_lints_installs_and_purges_clean() {
    support::root::must_be_root();
    let _one = MAKE.lock().unwrap_or_else(|e| e.into_inner());
    for t in ["dpkg-deb", "lintian", "man", "systemd-analyze", "bash"] {
        need(t, "ship.apt");
    }
    let out = make(&["deb"]);
    let deb = Path::new(ROOT).join(format!(
        "target/deb/agent_{}_amd64.deb",
        env!("CARGO_PKG_VERSION")
    ));
    assert!(deb.is_file(), "{out}");
    let deb = deb.to_str().unwrap();

    // lintian: no error and no warning (the one override, a static binary, is for the
    // initramfs and stated in the package).
    let (code, out) = run("lintian", &["--fail-on", "error,warning", deb]);
    let findings: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("E:") || l.starts_with("W:"))
        .collect();
    assert!(
        code == 0 && findings.is_empty(),
        "lintian: {findings:?}\n{out}"
    );
    let contents = sh("dpkg-deb", &["--contents", deb], None);
    for f in [
        "./usr/bin/agent",
        "./lib/systemd/system/agent-serve.service",
        "./usr/lib/sysusers.d/agent-serve.conf",
        "./usr/lib/tmpfiles.d/agent-serve.conf",
        "./etc/default/agent-serve",
        "./usr/share/man/man1/agent.1.gz",
        "./usr/share/bash-completion/completions/agent",
        "./usr/share/zsh/vendor-completions/_agent",
        "./usr/share/fish/vendor_completions.d/agent.fish",
        "./usr/share/doc/agent/copyright",
        "./usr/lib/dracut/modules.d/30agent/module-setup.sh",
    ] {
        assert!(contents.contains(f), "the package lacks {f}:\n{contents}");
    }

    // Installed on this machine (removed first if a run before left it).
    let _ = run("dpkg", &["--purge", "agent"]);
    let before = snapshot();
    let (code, out) = run("dpkg", &["-i", deb]);
    assert_eq!(code, 0, "dpkg -i: {out}");
    let result = std::panic::catch_unwind(|| {
        let (code, out) = run("/usr/bin/agent", &["--version"]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(out.trim(), format!("agent {}", env!("CARGO_PKG_VERSION")));
        let (code, out) = run("man", &["-P", "cat", "agent"]);
        assert_eq!(code, 0, "man agent: {out}");
        assert!(out.contains("agent-serve(1)"), "{out}");
        let (code, out) = run("man", &["-P", "cat", "agent-serve"]);
        assert_eq!(code, 0, "man agent-serve: {out}");
        check_bash_completion(Path::new("/usr/share/bash-completion/completions/agent"));
        // The user and the directories exist; the installed units verify in place.
        let (code, out) = run("getent", &["passwd", "agent-serve"]);
        assert_eq!(code, 0, "no agent-serve user after dpkg -i: {out}");
        assert!(Path::new("/var/lib/agent-serve/source").is_dir());
        assert!(Path::new("/etc/agent-serve").is_dir());
        let (code, out) = run(
            "systemd-analyze",
            &[
                "verify",
                "/lib/systemd/system/agent-serve.service",
                "/lib/systemd/system/agent-delete-config.service",
            ],
        );
        assert_eq!(code, 0, "systemd-analyze verify: {out}");
    });
    let (code, out) = run("dpkg", &["--purge", "agent"]);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert_eq!(code, 0, "dpkg --purge: {out}");
    let after = snapshot();
    let left: Vec<_> = after.difference(&before).collect();
    assert!(left.is_empty(), "left behind by dpkg --purge: {left:?}");
    let (code, _) = run("dpkg-query", &["-W", "agent"]);
    assert_ne!(code, 0, "the package is still known to dpkg");
}
