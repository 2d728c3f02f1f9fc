//! The files stage: mount the config's filesystems under the target root, then users and
//! groups, files/directories/links, systemd units, the key files and crypttab of the LUKS
//! volumes the disks stage recorded, the files the platform's provider left (state
//! `provider-files.json`), kernel arguments, the result file, SELinux relabelling,
//! one `syncfs` per filesystem, and unmount (deepest first, also on failure).

use std::path::Path;

use anyhow::{Context as _, Result};
use log::info;

use super::context::{Context, Outcome, Reporter};

mod report_root;
use crate::fetch::Fetcher;
use crate::files::mounts::{MountGuard, mountable};
use crate::files::nodes::{Attrs, Contents};
use crate::files::resolve::Root;
use crate::files::{Writer, kargs, result, selinux};
use crate::report::{Changes, Delivered};
use spec::config::Config;

pub use super::context::FilesOptions as Options;

/// Runs the stage with the options of the context ([`Context::files`]). Its report goes out
/// before the root is unmounted: when reports stay queued, the queue and what sends it are
/// written into the root.
pub fn run(config: &Config, ctx: &Context, reporter: &mut dyn Reporter) -> Result<Outcome> {
    let opts = &ctx.files;
    // Tools get the root with --root: make it absolute.
    let root_path = std::fs::canonicalize(&ctx.root)
        .with_context(|| format!("opening target root {}", ctx.root.display()))?;
    let ctx = &Context {
        root: root_path,
        ..ctx.clone()
    };
    // The config's CAs before anything is mounted or written: one that cannot be had fails
    // the stage with the root as it was.
    let fetcher = Fetcher::new(ctx.fetch_options(config)?);
    let mount_paths: Vec<String> = config
        .storage
        .filesystems
        .iter()
        .filter(|f| mountable(f))
        .filter_map(|f| f.path.clone())
        .collect();
    let mut root = Root::open(&ctx.root, &mount_paths)?;
    #[cfg(feature = "test-hooks")]
    if opts.no_openat2 {
        root.set_openat2(false);
    }
    let mounts = MountGuard::mount_all(&mut root, &config.storage.filesystems)?;
    // On failure the guard's Drop unmounts; on success close() reports unmount errors.
    let mut w = Writer::new(root, &fetcher);
    w.set_mount_dirs(mounts.created_dirs().to_vec());
    let r = write_all(config, ctx, opts, &mut w);
    if let Err(e) = &r {
        // The log of the failure, where whoever looks at the disk finds it.
        if let Err(e) = report_root::keep_log(&w, ctx, Some(e)) {
            log::warn!("{e:#}");
        }
    }
    r?;
    if let Some(Delivered::Queued(dir)) = reporter.done(Changes::of_paths(w.touched()))
        && let Err(e) = report_root::install(&w, &dir)
    {
        log::warn!("installing the report queue in the root: {e:#}");
    }
    if let Some(t) = reporter.target()
        && let Err(e) = report_root::install_running(&w, &t)
    {
        log::warn!("installing the running report in the root: {e:#}");
    }
    if let Err(e) = report_root::keep_log(&w, ctx, None) {
        log::warn!("{e:#}");
    }
    selinux::relabel(&w.root, &w.touched())?;
    w.log_summary();
    // Durability: one syncfs per filesystem instead of an fsync per file.
    sync_fs(&ctx.root)?;
    for m in mounts.mounted() {
        sync_fs(m)?;
    }
    drop(w);
    mounts.close()?;
    Ok(Outcome::Done)
}

fn write_all(config: &Config, ctx: &Context, opts: &Options, w: &mut Writer) -> Result<()> {
    w.write_passwd(&config.passwd, opts.ssh_keys_file)?;
    w.write_storage(&config.storage)?;
    w.write_units(&config.systemd)?;
    // LUKS volumes of the disks stage: /etc/luks/<name> key files and /etc/crypttab lines.
    w.write_luks(&ctx.state().luks_volumes()?)?;
    // Files the platform's provider left (Hyper-V's KVP pool files).
    for f in ctx.state().provider_files()? {
        info!("writing {} (from the platform)", f.path);
        let attrs = Attrs {
            mode: Some(f.mode),
            ..Attrs::default()
        };
        w.put_file(&f.path, Contents::Bytes(&f.contents), attrs, true)
            .with_context(|| format!("writing the platform's file {}", f.path))?;
    }
    kargs::apply(
        &config.kernel_arguments,
        &ctx.root,
        opts.kargs_helper.as_deref(),
    )?;
    write_result(w, ctx)?;
    Ok(())
}

fn write_result(w: &mut Writer, ctx: &Context) -> Result<()> {
    let mut previous =
        result::previous_report(w.root.read_file(result::RESULT_FILE)?, result::RESULT_FILE);
    if previous.is_none() {
        // A root provisioned by an earlier release has its report under the old name (a
        // regular file there; the link to the new name of later releases is not followed).
        let old = result::COMPAT_RESULT_FILE;
        if w.root
            .stat(old)?
            .is_some_and(|st| crate::files::resolve::kind(&st) == nix::sys::stat::SFlag::S_IFREG)
        {
            previous = result::previous_report(w.root.read_file(old)?, old);
        }
    }
    let report = result::report(ctx.state().user_config_provided(), previous);
    let mut text = serde_json::to_vec_pretty(&report).context("encoding result report")?;
    text.push(b'\n');
    let attrs = Attrs {
        uid: Some(0),
        gid: Some(0),
        mode: Some(0o600),
    };
    w.put_file(result::RESULT_FILE, Contents::Bytes(&text), attrs, true)?;
    // The name earlier releases used, for tools that read it.
    w.put_symlink(
        result::COMPAT_RESULT_FILE,
        result::COMPAT_RESULT_TARGET,
        Attrs::default(),
        true,
    )?;
    info!("result written to {}", result::RESULT_FILE);
    Ok(())
}

fn sync_fs(p: &Path) -> Result<()> {
    let f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
    nix::unistd::syncfs(&f).with_context(|| format!("syncing filesystem of {}", p.display()))
}
