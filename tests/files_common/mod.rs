//! Helpers shared by the files-stage integration tests: temporary roots, loop devices, data
//! URLs and running the stage.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

use agent::config::Config;
use agent::stages::Context;
use agent::stages::files::Options;
use sha2::Digest;
#[path = "../common/mod.rs"]
mod common;
#[allow(unused_imports)]
pub use common::{TempDir, mounted_under};

/// A sparse image attached to a loop device, detached on drop.
pub struct Loop {
    pub dev: String,
    _img: TempDir,
}

impl Loop {
    /// An ext4 filesystem of `mib` MiB, populated from `from` if given (mkfs.ext4 -d).
    pub fn ext4(mib: u64, from: Option<&Path>) -> Loop {
        let img = TempDir::new("img");
        let f = img.join("disk.img");
        std::fs::File::create(&f)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let mut args: Vec<String> = vec!["-q".into(), "-F".into()];
        if let Some(d) = from {
            args.push("-d".into());
            args.push(d.to_string_lossy().into());
        }
        args.push(f.to_string_lossy().into());
        agent::util::run("mkfs.ext4", &args).expect("mkfs.ext4 (install e2fsprogs)");
        let out =
            agent::util::run("losetup", &["-f", "--show", f.to_str().unwrap()]).expect("losetup");
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        Loop { dev, _img: img }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = agent::util::run("losetup", &["-d", self.dev.as_str()]);
    }
}

/// Mounts a device for a test; unmounted on drop.
pub struct TestMount(pub PathBuf);

impl TestMount {
    pub fn new(dev: &str, at: &Path) -> TestMount {
        agent::util::run("mount", &[dev, at.to_str().unwrap()]).expect("mount");
        TestMount(at.to_path_buf())
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let _ = agent::util::run("umount", &[self.0.to_str().unwrap()]);
    }
}

pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
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
    match agent::config::parse(json.as_bytes()) {
        Ok(p) => p.config,
        Err(r) => panic!("test config invalid:\n{r}"),
    }
}

pub fn ctx(root: &Path, state: &Path) -> Context {
    Context {
        root: root.to_path_buf(),
        state_dir: state.to_path_buf(),
        platform: None,
        config_file: None,
        config_url: None,
        system_config_dir: state.join("no-system-config"),
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
    agent::stages::files::run_with(cfg, &ctx(root, state.path()), opts)
}

pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

pub fn must_be_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the files-stage tests must run as root (they chown, mount and use loop devices)"
    );
}
