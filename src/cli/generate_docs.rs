//! `agent generate-docs DIR` (hidden; feature `docs`): the man pages and the shell completions,
//! generated from this command line's clap definition, so they always match the binary's
//! flags. `make man completions` runs it on the static binary; `make install` and `make deb`
//! install what it writes:
//! - `DIR/man/agent.1` and one page per subcommand (`agent-serve.1`, `agent-machines-list.1`);
//! - `DIR/completions/agent.bash`, `_agent` (zsh) and `agent.fish`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, CommandFactory};
use clap_complete::Shell;

#[derive(Debug, Args)]
pub struct GenerateDocsArgs {
    /// Output directory: `man/` and `completions/` are made (or replaced) in it.
    pub dir: PathBuf,
}

pub fn run(a: GenerateDocsArgs) -> Result<()> {
    let man = a.dir.join("man");
    let completions = a.dir.join("completions");
    for d in [&man, &completions] {
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
        }
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    // No page for `agent help`: every page is the help.
    let mut cmd = super::Cli::command().disable_help_subcommand(true);
    cmd.build();
    write_pages(&cmd, &man)?;
    let mut cmd = super::Cli::command();
    cmd.build();
    let mut cmd = visible(&cmd);
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "agent", &completions).with_context(|| {
            format!(
                "writing the {shell} completions in {}",
                completions.display()
            )
        })?;
    }
    Ok(())
}

/// `cmd` without its hidden subcommands and arguments, at every level: clap_complete's bash
/// and fish generators would complete them (clap_mangen leaves them out by itself). `cmd` is
/// built, so its help and version flags are among its arguments already.
fn visible(cmd: &clap::Command) -> clap::Command {
    // A command's name is a `&'static str` (`Str`) unless clap's `string` feature is on: the
    // few names are leaked, in a process that exits once it has written the files.
    let name: &'static str = cmd.get_name().to_string().leak();
    let mut v = clap::Command::new(name)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true)
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(
            cmd.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(visible),
        );
    if let Some(about) = cmd.get_about() {
        v = v.about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        v = v.version(version.to_string().leak() as &'static str);
    }
    v
}

/// `cmd`'s page and, recursively, one per visible subcommand.
fn write_pages(cmd: &clap::Command, dir: &Path) -> Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let page = clap_mangen::Man::new(cmd.clone())
        .source(format!("agent {}", env!("CARGO_PKG_VERSION")))
        .manual("agent manual");
    let path = dir.join(page.get_filename());
    let mut text = Vec::new();
    page.render(&mut text)
        .with_context(|| format!("rendering {}", path.display()))?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    /// Every visible subcommand gets a page, nested ones too; the hidden generator none.
    #[test]
    fn pages_and_completions() {
        let dir = std::env::temp_dir().join(format!("agent-generate-docs-{}", std::process::id()));
        super::run(super::GenerateDocsArgs { dir: dir.clone() }).unwrap();
        let page = |n: &str| std::fs::read_to_string(dir.join("man").join(n));
        let top = page("agent.1").unwrap();
        assert!(top.contains("agent\\-serve(1)"), "{top}");
        let serve = page("agent-serve.1").unwrap();
        assert!(serve.contains("\\-\\-admin\\-listen"), "{serve}");
        assert!(page("agent-machines-list.1").is_ok());
        assert!(page("agent-generate-docs.1").is_err());
        assert!(page("agent-help.1").is_err());
        let bash = std::fs::read_to_string(dir.join("completions/agent.bash")).unwrap();
        assert!(bash.contains("--admin-listen"));
        assert!(
            !bash.contains("generate-docs"),
            "the hidden command is not completed"
        );
        // Hidden flags neither (`delete-config --cmdline-file`; a test build's `--test-*`).
        assert!(!bash.contains("--test-"), "hidden flags are not completed");
        assert!(bash.contains("--help"), "{bash}");
        for f in ["_agent", "agent.fish"] {
            assert!(dir.join("completions").join(f).is_file(), "{f}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
