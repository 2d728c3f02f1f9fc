//! What the tests that need root share. Every such test is
//! `#[ignore = "needs root: make test-root"]` and fails here, loudly, when run as non-root.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::{TempDir, need, sh};

/// Fails the test unless it runs as root.
#[track_caller]
pub fn must_be_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (loop devices, mount, chown, device nodes): run it as root \
         (`make test-root`, or `make test` for everything)"
    );
}

/// A sparse image file attached to a loop device (partscan off unless asked); on drop the
/// partition nodes the tests added are removed and the device detached (the image goes with
/// its directory).
pub struct Loop {
    _dir: TempDir,
    pub img: PathBuf,
    /// `/dev/loopN`.
    pub dev: String,
}

impl Loop {
    /// A blank image of `mib` MiB, 512-byte sectors.
    #[track_caller]
    pub fn new(mib: u64) -> Loop {
        Loop::with(mib << 20, 512, |_| {})
    }

    /// An image of `bytes` bytes with `sector`-byte logical sectors; `prepare` may write to
    /// the image file before it is attached.
    #[track_caller]
    pub fn with(bytes: u64, sector: u32, prepare: impl FnOnce(&Path)) -> Loop {
        Loop::attach(bytes, sector, false, prepare)
    }

    /// [`Loop::with`] with partscan on (`losetup -P`, as Ignition's blackbox suite attaches
    /// its disks): on a kernel that parses no tables it still has no partition nodes, but a
    /// whole-table re-read (BLKRRPART) is done, and removes every node.
    #[track_caller]
    pub fn with_partscan(bytes: u64, sector: u32, prepare: impl FnOnce(&Path)) -> Loop {
        Loop::attach(bytes, sector, true, prepare)
    }

    #[track_caller]
    fn attach(bytes: u64, sector: u32, partscan: bool, prepare: impl FnOnce(&Path)) -> Loop {
        must_be_root();
        need("losetup", "disks.apt");
        let dir = TempDir::new("loop");
        let img = dir.join("disk.img");
        File::create(&img).unwrap().set_len(bytes).unwrap();
        prepare(&img);
        let sector = sector.to_string();
        let mut args = vec!["-f", "--show", "-b", &sector, img.to_str().unwrap()];
        if partscan {
            args.insert(0, "-P");
        }
        let dev = sh("losetup", &args, None).trim().to_string();
        Loop {
            _dir: dir,
            img,
            dev,
        }
    }

    pub fn dev(&self) -> &str {
        &self.dev
    }

    /// `loopN`.
    pub fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }

    /// The image's bytes, after flushing the device.
    pub fn bytes(&self) -> Vec<u8> {
        let _ = File::open(&self.dev).and_then(|f| f.sync_all());
        std::fs::read(&self.img).unwrap()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if let Ok(f) = File::open(&self.dev) {
            let _ = agent::blockdev::kernel::remove_partitions(&f, self.name());
        }
        let _ = std::process::Command::new("losetup")
            .args(["-d", &self.dev])
            .status();
    }
}
