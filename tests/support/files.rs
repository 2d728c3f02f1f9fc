//! Helpers shared by the files-stage integration tests: ext4 loop devices, mounts, data URLs,
//! hashes and running the stage.

use std::io::Write;
use std::path::{Path, PathBuf};

pub use super::root::{Loop, must_be_root};
pub use super::{TempDir, mounted_under};
use agent::stages::Context;
use agent::stages::files::Options;
use sha2::Digest;
use spec::config::Config;

impl Loop {
    /// An ext4 filesystem of `mib` MiB, populated from `from` if given (mkfs.ext4 -d).
    pub fn ext4(mib: u64, from: Option<&Path>) -> Loop {
        Loop::with(mib << 20, 512, |img| {
            let mut args: Vec<String> = vec!["-q".into(), "-F".into()];
            if let Some(d) = from {
                args.push("-d".into());
                args.push(d.to_string_lossy().into());
            }
            args.push(img.to_string_lossy().into());
            runtime::util::run("mkfs.ext4", &args).expect("mkfs.ext4 (install e2fsprogs)");
        })
    }
}

/// Mounts a device for a test; unmounted on drop.
pub struct TestMount(pub PathBuf);

impl TestMount {
    pub fn new(dev: &str, at: &Path) -> TestMount {
        runtime::util::run("mount", &[dev, at.to_str().unwrap()]).expect("mount");
        TestMount(at.to_path_buf())
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let _ = runtime::util::run("umount", &[self.0.to_str().unwrap()]);
    }
}

pub fn base64(data: &[u8]) -> String {
    spec::encoding::base64_encode(data)
}

pub fn data_url(data: &[u8]) -> String {
    format!("data:;base64,{}", base64(data))
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub fn sha512(data: &[u8]) -> String {
    format!("sha512-{}", agent::fetch::hex(&sha2::Sha512::digest(data)))
}

pub fn sha256(data: &[u8]) -> String {
    format!("sha256-{}", agent::fetch::hex(&sha2::Sha256::digest(data)))
}

/// Parses a config (spec version added if the JSON has no "ignition").
pub fn config(json: &str) -> Config {
    match spec::config::parse(json.as_bytes()) {
        Ok(p) => p.config,
        Err(r) => panic!("test config invalid:\n{r}"),
    }
}

pub fn ctx(root: &Path, state: &Path) -> Context {
    Context {
        root: root.to_path_buf(),
        state_dir: state.to_path_buf(),
        platform: None,
        offline: false,
        limits: Default::default(),
        endpoints: Default::default(),
        files: Options::default(),
    }
}

/// Runs the files stage on `root` with default options.
pub fn run(cfg: &Config, root: &Path) -> anyhow::Result<()> {
    run_opts(cfg, root, &Options::default())
}

pub fn run_opts(cfg: &Config, root: &Path, opts: &Options) -> anyhow::Result<()> {
    let state = TempDir::new("state");
    let ctx = Context {
        files: opts.clone(),
        ..ctx(root, state.path())
    };
    run_ctx(cfg, &ctx)
}

/// Runs the files stage in `ctx`, without reports.
pub fn run_ctx(cfg: &Config, ctx: &Context) -> anyhow::Result<()> {
    let outcome = agent::stages::files::run(cfg, ctx, &mut agent::stages::NoReports)?;
    assert_eq!(outcome, agent::stages::Outcome::Done);
    Ok(())
}

pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}
