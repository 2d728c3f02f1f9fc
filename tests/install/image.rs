//! `agent install` against real loop devices (root): images built here (sfdisk, mkfs.ext4 at
//! offsets), compressed with the real gzip, xz and zstd, signed with the real minisign, served
//! by a real HTTP server that drops the connection once. The result is read back with
//! `sfdisk --json`, `blkid -p` and a mount of the boot partition.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::agent;
use crate::support;
use serde_json::Value;
use support::TempDir;
use support::root::Loop;

const MIB: u64 = 1 << 20;
const CONFIG: &str = r#"{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/installed","contents":{"source":"data:,yes"}}]}}"#;

fn need(tool: &str) {
    support::need(tool, "install.apt");
}

fn sh(program: &str, args: &[&str]) -> String {
    need(program);
    support::sh(program, args, None)
}

/// A 64 MiB GPT image: partition 1 `boot` (16 MiB, ext4 labelled boot), partition 2 `root`
/// (ext4 labelled root), with 4 MiB of random bytes in the root partition's free space so that
/// the compressed image is megabytes, not kilobytes.
fn build_image(dir: &TempDir) -> PathBuf {
    let img = dir.join("os.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    let mut noise = vec![0u8; 4 * MIB as usize];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut noise)
        .unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &noise, 56 * MIB).unwrap();
    drop(f);
    need("sfdisk");
    support::sh(
        "sfdisk",
        &["-q", img.to_str().unwrap()],
        Some(b"label: gpt\nstart=2048, size=16M, name=boot\nsize=+, name=root\n"),
    );
    let i = img.to_str().unwrap();
    sh(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-L",
            "boot",
            "-E",
            &format!("offset={}", MIB),
            i,
            "16M",
        ],
    );
    // Root: 17 MiB .. 50 MiB (the noise past it stays free space of the partition).
    sh(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-L",
            "root",
            "-E",
            &format!("offset={}", 17 * MIB),
            i,
            "33M",
        ],
    );
    img
}

/// `img` compressed with `tool` (zstd, xz, gzip) into a file with `suffix`.
fn compress(img: &Path, tool: &str, suffix: &str) -> PathBuf {
    need(tool);
    let out = PathBuf::from(format!("{}{suffix}", img.display()));
    let f = std::fs::File::create(&out).unwrap();
    let st = Command::new(tool)
        .args(["-c", img.to_str().unwrap()])
        .stdout(f)
        .status()
        .unwrap();
    assert!(st.success(), "{tool} failed");
    out
}

fn sha256(p: &Path) -> String {
    let out = sh("sha256sum", &[p.to_str().unwrap()]);
    format!("sha256-{}", out.split_whitespace().next().unwrap())
}

/// Partition names as sfdisk reads them from the device; empty when there is no table.
fn table(dev: &str) -> Vec<String> {
    let out = Command::new("sfdisk")
        .args(["--json", dev])
        .output()
        .unwrap();
    if !out.status.success() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["partitiontable"]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap_or("").to_string())
        .collect()
}

fn blkid(dev: &str, tag: &str) -> String {
    Command::new("blkid")
        .args(["-p", "-s", tag, "-o", "value", dev])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The config on the boot partition (mounted read-only for the read).
fn installed_config(dev: &str) -> String {
    let mnt = TempDir::new("install-boot");
    sh(
        "mount",
        &[
            "-o",
            "ro",
            &format!("{dev}p1"),
            mnt.path().to_str().unwrap(),
        ],
    );
    let c = std::fs::read_to_string(mnt.join("ignition/config.ign"));
    sh("umount", &[mnt.path().to_str().unwrap()]);
    c.unwrap_or_default()
}

/// Checks that `img` (raw) is on `lp` with its partitions and the config.
fn assert_installed(lp: &Loop, img: &Path) {
    let dev = lp.dev();
    assert_eq!(table(dev), ["boot", "root"], "partition table of {dev}");
    assert_eq!(blkid(&format!("{dev}p1"), "LABEL"), "boot");
    assert_eq!(blkid(&format!("{dev}p1"), "TYPE"), "ext4");
    assert_eq!(blkid(&format!("{dev}p2"), "LABEL"), "root");
    assert_eq!(installed_config(dev), CONFIG);
    // Outside the boot partition the disk holds the image byte for byte.
    let disk = lp.bytes();
    let raw = std::fs::read(img).unwrap();
    assert_eq!(&disk[..MIB as usize], &raw[..MIB as usize], "first MiB");
    assert!(
        disk[17 * MIB as usize..64 * MIB as usize] == raw[17 * MIB as usize..],
        "root partition"
    );
}

/// Asserts that nothing on `lp` looks installed: no partition table, a zero first MiB, no
/// partition nodes.
fn assert_nothing_installed(lp: &Loop) {
    assert_eq!(
        table(lp.dev()),
        Vec::<String>::new(),
        "a partition table was left"
    );
    let disk = lp.bytes();
    assert!(
        disk[..MIB as usize].iter().all(|b| *b == 0),
        "the first MiB is not zero"
    );
    assert!(
        !Path::new(&format!("{}p1", lp.dev())).exists(),
        "a partition node was left"
    );
}

struct Fixture {
    dir: TempDir,
    img: PathBuf,
    cfg: PathBuf,
}

fn fixture() -> Fixture {
    let dir = TempDir::new("install");
    let img = build_image(&dir);
    let cfg = dir.join("config.ign");
    std::fs::write(&cfg, CONFIG).unwrap();
    Fixture { dir, img, cfg }
}

#[test]
#[ignore = "needs root: make test-root"]
fn installs_zstd_xz_gzip_and_raw_images() {
    let fx = fixture();
    for (tool, suffix) in [("zstd", ".zst"), ("xz", ".xz"), ("gzip", ".gz"), ("", "")] {
        let image = if tool.is_empty() {
            fx.img.clone()
        } else {
            compress(&fx.img, tool, suffix)
        };
        let lp = Loop::new(96);
        let state = fx.dir.join(&format!("state{suffix}"));
        let (code, out, err) = agent(&[
            "install",
            lp.dev(),
            "--image-file",
            image.to_str().unwrap(),
            "--image-hash",
            &sha256(&image),
            "--ignition-file",
            fx.cfg.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{tool}: {err}");
        let format = if tool.is_empty() { "raw" } else { tool };
        assert!(err.contains(&format!("image format: {format}")), "{err}");
        assert_eq!(out.trim(), lp.dev());
        assert_eq!(
            std::fs::read_to_string(state.join("install-disk"))
                .unwrap()
                .trim(),
            lp.dev()
        );
        assert_installed(&lp, &fx.img);
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn an_images_zeros_are_zeroed_by_the_device_over_old_data() {
    // The disk held data (noise); the image is mostly zeros (its free space). Each MiB of
    // zeros is zeroed by the loop device (BLKZEROOUT) instead of written, and the disk reads
    // back as the image byte for byte: no old data left where the image has zeros.
    let fx = fixture();
    let image = compress(&fx.img, "zstd", ".zst");
    let lp = Loop::with(96 * MIB, 512, |p| {
        let mut noise = vec![0u8; 96 * MIB as usize];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut noise)
            .unwrap();
        std::fs::write(p, &noise).unwrap();
    });
    let state = fx.dir.join("state-zeros");
    let (code, _, err) = agent(&[
        "install",
        lp.dev(),
        "--image-file",
        image.to_str().unwrap(),
        "--image-hash",
        &sha256(&image),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let zeroed: u64 = err
        .split_once(" MiB of zeros zeroed by the device")
        .and_then(|(before, _)| before.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count of zeroed MiB in: {err}"));
    assert!(zeroed >= 20, "only {zeroed} MiB zeroed: {err}");
    let disk = lp.bytes();
    let raw = std::fs::read(&fx.img).unwrap();
    assert!(
        disk[..64 * MIB as usize] == raw[..],
        "the disk differs from the image"
    );
    assert_eq!(table(lp.dev()), ["boot", "root"]);
}

/// The partitions the kernel has for `disk`: (number, start, size) in 512-byte sectors.
fn kernel_partitions(disk: &str) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/sys/block/{disk}"))
        .unwrap()
        .flatten()
    {
        let rd = |f: &str| {
            std::fs::read_to_string(e.path().join(f))
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(n), Some(s), Some(l)) = (rd("partition"), rd("start"), rd("size")) {
            out.push((n, s, l));
        }
    }
    out.sort();
    out
}

#[test]
#[ignore = "needs root: make test-root"]
fn an_mbr_image_has_its_partitions_announced() {
    // A DOS table: 1 `boot` (primary, ext4), 2 extended, 5 and 6 logical (`root` on 6). The
    // kernel here parses no tables, so the nodes come only from the agent's BLKPG calls; they
    // must be what sfdisk reads in the table (an extended partition's node is 2 sectors, as
    // the kernel's msdos parser makes it).
    let dir = TempDir::new("install-mbr");
    let img = dir.join("os.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    let i = img.to_str().unwrap();
    support::sh(
        "sfdisk",
        &["-q", i],
        Some(b"label: dos\nstart=2048, size=16M, type=83\nstart=34816, type=5\nsize=8M, type=83\nsize=+, type=83\n"),
    );
    sh(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-L",
            "boot",
            "-E",
            &format!("offset={MIB}"),
            i,
            "16M",
        ],
    );
    let parts: Value = serde_json::from_str(&sh("sfdisk", &["--json", i])).unwrap();
    let parts = parts["partitiontable"]["partitions"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(parts.len(), 4, "{parts:?}");
    let root_start = parts[3]["start"].as_u64().unwrap();
    sh(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-L",
            "root",
            "-E",
            &format!("offset={}", root_start * 512),
            i,
            "8M",
        ],
    );
    let cfg = dir.join("config.ign");
    std::fs::write(&cfg, CONFIG).unwrap();
    let lp = Loop::new(96);
    let (code, _, err) = agent(&[
        "install",
        lp.dev(),
        "--image-file",
        i,
        "--image-hash",
        &sha256(&img),
        "--ignition-file",
        cfg.to_str().unwrap(),
        "--state-dir",
        dir.join("state").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("DOS (MBR) partition table: 4 partitions"),
        "{err}"
    );
    let want: Vec<(u64, u64, u64)> = parts
        .iter()
        .map(|p| {
            let node = p["node"].as_str().unwrap();
            let digits = node.len() - node.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            let n: u64 = node[node.len() - digits..].parse().unwrap();
            let size = if p["type"] == "5" {
                2
            } else {
                p["size"].as_u64().unwrap()
            };
            (n, p["start"].as_u64().unwrap(), size)
        })
        .collect();
    assert_eq!(want.iter().map(|w| w.0).collect::<Vec<_>>(), [1, 2, 5, 6]);
    assert_eq!(kernel_partitions(lp.name()), want);
    assert_eq!(blkid(&format!("{}p6", lp.dev()), "LABEL"), "root");
    assert_eq!(installed_config(lp.dev()), CONFIG);
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_wrong_hash_or_signature_leaves_nothing_installed() {
    let fx = fixture();
    let zst = compress(&fx.img, "zstd", ".zst");
    let lp = Loop::new(96);
    let wrong = format!("sha256-{}", "0".repeat(64));
    let (code, _, err) = agent(&[
        "install",
        lp.dev(),
        "--image-file",
        zst.to_str().unwrap(),
        "--image-hash",
        &wrong,
        "-i",
        fx.cfg.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("image hash mismatch"), "{err}");
    assert_nothing_installed(&lp);
    // --preserve-on-error keeps what was written: the image without its first MiB, still no
    // partition table.
    let (code, _, err) = agent(&[
        "install",
        lp.dev(),
        "--image-file",
        zst.to_str().unwrap(),
        "--image-hash",
        &wrong,
        "--preserve-on-error",
    ]);
    assert_eq!(code, 1, "{err}");
    assert_nothing_installed(&lp);
    let raw = std::fs::read(&fx.img).unwrap();
    assert!(lp.bytes()[17 * MIB as usize..64 * MIB as usize] == raw[17 * MIB as usize..]);

    // minisign: a good signature installs, the signature of another file does not.
    need("minisign");
    let key = fx.dir.join("k.key");
    let public = fx.dir.join("k.pub");
    sh(
        "minisign",
        &[
            "-G",
            "-W",
            "-p",
            public.to_str().unwrap(),
            "-s",
            key.to_str().unwrap(),
        ],
    );
    sh(
        "minisign",
        &[
            "-S",
            "-W",
            "-s",
            key.to_str().unwrap(),
            "-m",
            zst.to_str().unwrap(),
            "-t",
            "test image",
        ],
    );
    let other = fx.dir.join("other.zst");
    std::fs::write(&other, b"not the image").unwrap();
    sh(
        "minisign",
        &[
            "-S",
            "-W",
            "-s",
            key.to_str().unwrap(),
            "-m",
            other.to_str().unwrap(),
        ],
    );
    let other_sig = format!("{}.minisig", other.display());
    let lp = Loop::new(96);
    let (code, _, err) = agent(&[
        "install",
        lp.dev(),
        "--image-file",
        zst.to_str().unwrap(),
        "--image-key",
        public.to_str().unwrap(),
        "--image-signature",
        &other_sig,
        "-i",
        fx.cfg.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("signature verification failed"), "{err}");
    assert_nothing_installed(&lp);
    let (code, _, err) = agent(&[
        "install",
        lp.dev(),
        "--image-file",
        zst.to_str().unwrap(),
        "--image-key",
        public.to_str().unwrap(),
        "-i",
        fx.cfg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("image signature good") && err.contains("trusted comment: test image"),
        "{err}"
    );
    assert_installed(&lp, &fx.img);
    // Unverified images are refused unless asked for.
    let lp = Loop::new(96);
    let (code, _, err) = agent(&["install", lp.dev(), "--image-file", zst.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("--insecure"), "{err}");
    assert_nothing_installed(&lp);
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_disk_in_use_or_with_contents_is_refused() {
    let fx = fixture();
    let zst = compress(&fx.img, "zstd", ".zst");
    let lp = Loop::with(96 * MIB, 512, |img| {
        sh(
            "mkfs.ext4",
            &["-q", "-F", "-L", "old", img.to_str().unwrap()],
        );
    });
    let args = |extra: &[&str]| {
        let mut v = vec![
            "install",
            lp.dev(),
            "--image-file",
            zst.to_str().unwrap(),
            "--insecure",
        ];
        v.extend_from_slice(extra);
        v.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| agent(&a.iter().map(String::as_str).collect::<Vec<_>>());
    // Mounted: refused even with --overwrite, and left as it was.
    let mnt = TempDir::new("install-inuse");
    sh("mount", &[lp.dev(), mnt.path().to_str().unwrap()]);
    let (code, _, err) = run(args(&["--overwrite"]));
    sh("umount", &[mnt.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("{} is mounted on", lp.dev())),
        "{err}"
    );
    assert_eq!(blkid(lp.dev(), "LABEL"), "old");
    // A filesystem: refused without --overwrite.
    let (code, _, err) = run(args(&[]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("a signature of type ext4 labelled \"old\"") && err.contains("--overwrite"),
        "{err}"
    );
    assert_eq!(blkid(lp.dev(), "LABEL"), "old");
    // A partition table: refused too.
    let parted = Loop::with(96 * MIB, 512, |img| {
        support::sh(
            "sfdisk",
            &["-q", img.to_str().unwrap()],
            Some(b"label: gpt\nsize=8M\n"),
        );
    });
    let (code, _, err) = agent(&[
        "install",
        parted.dev(),
        "--image-file",
        zst.to_str().unwrap(),
        "--insecure",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("a GPT partition table (1 partitions)"),
        "{err}"
    );
    // With --overwrite: installed.
    let (code, _, err) = run(args(&["--overwrite", "-i", fx.cfg.to_str().unwrap()]));
    assert_eq!(code, 0, "{err}");
    assert_installed(&lp, &fx.img);
    // An image larger than the disk: refused part-way, nothing left.
    let small = Loop::new(32);
    let (code, _, err) = agent(&[
        "install",
        small.dev(),
        "--image-file",
        zst.to_str().unwrap(),
        "--insecure",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("the image is larger than"), "{err}");
    assert_nothing_installed(&small);
}

/// An HTTP server for one file that drops the first connection after `cut` bytes of the body
/// and answers later requests' `Range: bytes=N-` with 206. Records each request's Range.
struct DroppingServer {
    url: String,
    ranges: Arc<Mutex<Vec<Option<String>>>>,
}

fn dropping_server(body: Vec<u8>, cut: usize, path: &'static str) -> DroppingServer {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}{path}", l.local_addr().unwrap());
    let ranges: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let r = ranges.clone();
    let body = Arc::new(body);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut reader = BufReader::new(s.try_clone().unwrap());
            let mut range = None;
            let mut line = String::new();
            let mut first = true;
            let mut ok_path = false;
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if first {
                    ok_path = line.split(' ').nth(1) == Some(path);
                    first = false;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("range")
                {
                    range = Some(v.trim().to_string());
                }
            }
            if !ok_path {
                let _ = s.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                continue;
            }
            let n = {
                let mut g = r.lock().unwrap();
                g.push(range.clone());
                g.len()
            };
            let start = range
                .as_deref()
                .and_then(|v| v.strip_prefix("bytes="))
                .and_then(|v| v.strip_suffix('-'))
                .and_then(|v| v.parse::<usize>().ok());
            let send = |s: &mut TcpStream, head: String, data: &[u8]| {
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(data);
                let _ = s.flush();
            };
            match start {
                Some(st) if n > 1 => send(
                    &mut s,
                    format!(
                        "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {st}-{}/{}\r\nConnection: close\r\n\r\n",
                        body.len() - st,
                        body.len() - 1,
                        body.len()
                    ),
                    &body[st..],
                ),
                _ if n == 1 => {
                    // The whole length announced, `cut` bytes sent, then the connection drops.
                    send(
                        &mut s,
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        ),
                        &body[..cut],
                    );
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                _ => send(
                    &mut s,
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    ),
                    &body,
                ),
            }
        }
    });
    DroppingServer { url, ranges }
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_dropped_download_resumes_with_a_range_request() {
    let fx = fixture();
    let zst = compress(&fx.img, "zstd", ".zst");
    let body = std::fs::read(&zst).unwrap();
    assert!(
        body.len() > 2 * MIB as usize,
        "the compressed image is {} bytes",
        body.len()
    );
    let cut = body.len() / 2;
    let srv = dropping_server(body, cut, "/os.img.zst");
    let lp = Loop::new(96);
    let (code, _, err) = agent(&[
        "install",
        lp.dev(),
        "--image-url",
        &srv.url,
        "--image-hash",
        &sha256(&zst),
        "-i",
        fx.cfg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let ranges = srv.ranges.lock().unwrap().clone();
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(ranges[0], None);
    // Resumed where the first connection stopped: the bytes before were hashed once.
    let from: usize = ranges[1]
        .as_deref()
        .unwrap()
        .trim_start_matches("bytes=")
        .trim_end_matches('-')
        .parse()
        .unwrap();
    assert!(from > 0 && from <= cut, "{from} vs {cut}");
    assert!(err.contains(&format!("resuming at byte {from}")), "{err}");
    assert!(err.contains("resumed 1 times"), "{err}");
    assert_installed(&lp, &fx.img);
}

#[test]
#[ignore = "needs root: make test-root"]
fn from_kernel_arguments() {
    let fx = fixture();
    let xz = compress(&fx.img, "xz", ".xz");
    let srv = support::faulty_http::Server::start();
    srv.route(
        "/os.img.xz",
        vec![support::faulty_http::Behavior::Ok(
            std::fs::read(&xz).unwrap(),
        )],
    );
    srv.route(
        "/config.ign",
        vec![support::faulty_http::Behavior::Ok(
            CONFIG.as_bytes().to_vec(),
        )],
    );
    let lp = Loop::new(96);
    let cmdline = fx.dir.join("cmdline");
    std::fs::write(
        &cmdline,
        format!(
            "BOOT_IMAGE=/vmlinuz coreos.inst.install_dev={} coreos.inst.image_url={} coreos.inst.ignition_url={} coreos.inst.insecure coreos.inst.skip_reboot\n",
            lp.name(),
            srv.url("/os.img.xz"),
            srv.url("/config.ign")
        ),
    )
    .unwrap();
    let state = fx.dir.join("state");
    let (code, out, err) = agent(&[
        "install",
        "--from-kargs",
        "--kernel-cmdline",
        cmdline.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), lp.dev());
    assert!(!err.contains("rebooting"), "{err}");
    assert_installed(&lp, &fx.img);

    // The first boot's step copies the installed config to the system config dir as user.ign.
    let sys = fx.dir.join("system-config");
    let st = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/dracut/30agent/agent-setup-user"
    ))
    .env("AGENT_BOOT_DEVICE", format!("{}p1", lp.dev()))
    .env("AGENT_SYSTEM_CONFIG_DIR", &sys)
    .env("AGENT_SETUP_USER_MNT", fx.dir.join("boot-mnt"))
    .status()
    .unwrap();
    assert!(st.success());
    assert_eq!(
        std::fs::read_to_string(sys.join("user.ign")).unwrap(),
        CONFIG
    );
    assert!(!support::mounted_under(&fx.dir.join("boot-mnt")));

    // Without an install device or image on the command line: a clear error.
    std::fs::write(&cmdline, "quiet\n").unwrap();
    let (code, _, err) = agent(&[
        "install",
        "--from-kargs",
        "--kernel-cmdline",
        cmdline.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "neither coreos.inst.install_dev, agent.install.disk.* nor coreos.inst.image_url"
        ),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn an_image_past_the_decoder_memory_limit_is_refused() {
    // A zstd frame with a 256 MiB window (streamed: zstd cannot shrink it to the input's size).
    need("zstd");
    let dir = TempDir::new("install-window");
    let zst = dir.join("big-window.zst");
    let mut child = Command::new("zstd")
        .args(["-q", "--long=28", "-c"])
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&zst).unwrap())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&vec![7u8; 2 * MIB as usize])
        .unwrap();
    assert!(child.wait().unwrap().success());
    let lp = Loop::new(32);
    let (code, _, err) = agent(&[
        "install",
        lp.dev(),
        "--image-file",
        zst.to_str().unwrap(),
        "--insecure",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("needs more memory to decompress than the 128 MiB the decoder may use"),
        "{err}"
    );
    assert_nothing_installed(&lp);
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_damaged_image_is_reported_as_such_and_a_partition_is_refused() {
    // 16 MiB that do not compress, damaged 1 MiB in: the decompressor fails while the reader
    // still has megabytes to hand over; the error is the decompressor's.
    need("zstd");
    let dir = TempDir::new("install-damaged");
    let raw = dir.join("noise.img");
    let mut noise = vec![0u8; 16 * MIB as usize];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut noise)
        .unwrap();
    std::fs::write(&raw, &noise).unwrap();
    let zst = compress(&raw, "zstd", ".zst");
    let mut z = std::fs::read(&zst).unwrap();
    for b in &mut z[MIB as usize..MIB as usize + 64] {
        *b ^= 0xff;
    }
    std::fs::write(&zst, &z).unwrap();
    let lp = Loop::new(32);
    let (code, _, err) = agent(&[
        "install",
        lp.dev(),
        "--image-file",
        zst.to_str().unwrap(),
        "--insecure",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("decompressing") && err.contains("zstd data"),
        "{err}"
    );
    assert!(!err.contains("stopped"), "{err}");
    assert_nothing_installed(&lp);

    // A partition, not a disk: refused.
    let parted = Loop::with(32 * MIB, 512, |img| {
        support::sh(
            "sfdisk",
            &["-q", img.to_str().unwrap()],
            Some(b"label: gpt\nsize=8M\n"),
        );
    });
    let f = std::fs::File::open(parted.dev()).unwrap();
    let g = agent::blockdev::kernel::geometry(&f, Path::new(parted.dev())).unwrap();
    let table = match agent::blockdev::gpt::read(&f, &g).unwrap() {
        agent::blockdev::gpt::OnDisk::Gpt(t) => t,
        other => panic!("{other:?}"),
    };
    let nodes = agent::blockdev::kernel::sync_partitions(&f, parted.name(), &g, &table).unwrap();
    let (code, _, err) = agent(&[
        "install",
        nodes[0].to_str().unwrap(),
        "--image-file",
        zst.to_str().unwrap(),
        "--insecure",
        "--overwrite",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is a partition: give the whole disk"), "{err}");
}

/// The bare-metal flow end to end, on a loop device, against a real `agent serve`: a boot
/// profile's `install` section (the image a boot asset, its hash, the disk by a selector,
/// overwrite, no reboot) rendered by `/ipxe` into kernel arguments; `agent install
/// --from-kargs` with nothing but those arguments chooses the disk, writes the image over
/// what was there, fetches the machine's config with its one-time token and leaves it, with
/// where the installed system reports, on the boot partition; its `install` report makes the
/// machine `installed` (and its next `/ipxe` the local disk). The first boot's copy
/// (`agent-setup-user`) and `agent run` from that copy report with the machine's credential
/// (`provisioned`), and the running report the files stage left makes it `running`.
#[test]
#[ignore = "needs root: make test-root"]
fn unattended_from_a_boot_profile_to_running() {
    use support::serve::{request, serve_args, write};
    let fx = fixture();
    let zst = compress(&fx.img, "zstd", ".zst");
    let src = fx.dir.join("src");
    let uuid = "4c4c4544-0000-0000-0000-0000000000c3";
    write(&src.join("pools/worker.ign"), CONFIG);
    write(
        &src.join("machines/n1.json"),
        r#"{"selector": {"mac": "52:54:00:12:34:c3"}, "pool": "worker"}"#,
    );
    // An odd size no other test's loop device has: the selector finds exactly this one.
    write(
        &src.join("boot/worker.json"),
        &serde_json::json!({
            "kernel": "vmlinuz", "args": ["console=ttyS0"],
            "install": {"image": "os.img.zst", "hash": sha256(&zst), "overwrite": true,
                        "skipReboot": true,
                        "disk": {"transport": "loop", "sizeMin": "93M", "sizeMax": "93M"}},
        })
        .to_string(),
    );
    std::fs::create_dir_all(src.join("boot/assets")).unwrap();
    std::fs::write(src.join("boot/assets/vmlinuz"), b"kernel").unwrap();
    std::fs::copy(&zst, src.join("boot/assets/os.img.zst")).unwrap();
    let s = serve_args(&src).quiet().start();
    let get = |path: &str| {
        let a = s.plain();
        request(
            a,
            &format!("GET {path} HTTP/1.1\r\nHost: {a}\r\nConnection: close\r\n\r\n"),
        )
    };
    let machine = || -> Value {
        let a = s.addr_of("admin");
        let r = request(
            a,
            &format!("GET /machines/{uuid} HTTP/1.1\r\nHost: {a}\r\nConnection: close\r\n\r\n"),
        );
        serde_json::from_slice(&r.body).unwrap()
    };
    let ipxe = format!("/ipxe?mac=52-54-00-12-34-c3&uuid={uuid}");
    let script = get(&ipxe).text();
    let kernel = script
        .lines()
        .find_map(|l| l.strip_prefix("kernel "))
        .unwrap_or_else(|| panic!("{script}"));
    let cmdline = fx.dir.join("cmdline");
    std::fs::write(&cmdline, kernel).unwrap();

    // Something is on the disk already: overwrite says to install over it.
    let lp = Loop::new(93);
    sh("mkfs.ext4", &["-q", "-F", lp.dev()]);
    let dmi = fx.dir.join("dmi");
    std::fs::create_dir_all(&dmi).unwrap();
    std::fs::write(dmi.join("product_uuid"), format!("{uuid}\n")).unwrap();
    let state = fx.dir.join("state");
    let (code, out, err) = agent(&[
        "install",
        "--from-kargs",
        "--kernel-cmdline",
        cmdline.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--test-dmi-dir",
        dmi.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), lp.dev(), "{err}");
    assert_eq!(table(lp.dev()), ["boot", "root"]);
    let disk = lp.bytes();
    let raw = std::fs::read(&fx.img).unwrap();
    assert!(disk[17 * MIB as usize..64 * MIB as usize] == raw[17 * MIB as usize..]);
    let installed: Value = serde_json::from_str(&installed_config(lp.dev())).unwrap();
    assert_eq!(installed["storage"]["files"][0]["path"], "/etc/installed");
    let m = machine();
    assert_eq!(m["state"], "installed", "{m}");
    let installs = m["boots"][0]["stages"].as_array().unwrap();
    assert_eq!(installs[0]["stage"], "install", "{m}");
    let again = get(&ipxe).text();
    assert!(again.contains("booting from the local disk"), "{again}");

    // The installed system's first boot: the copy from the boot partition, then the stages.
    let sys = fx.dir.join("system-config");
    let st = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/dracut/30agent/agent-setup-user"
    ))
    .env("AGENT_BOOT_DEVICE", format!("{}p1", lp.dev()))
    .env("AGENT_SYSTEM_CONFIG_DIR", &sys)
    .env("AGENT_SETUP_USER_MNT", fx.dir.join("boot-mnt"))
    .status()
    .unwrap();
    assert!(st.success());
    use std::os::unix::fs::PermissionsExt;
    let served = sys.join("user.served.json");
    assert_eq!(
        std::fs::metadata(&served).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let sv: Value = serde_json::from_slice(&std::fs::read(&served).unwrap()).unwrap();
    assert!(
        sv["reportUrl"]
            .as_str()
            .unwrap()
            .starts_with(&format!("http://{}/report?token=", s.plain())),
        "{sv}"
    );
    let root = fx.dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let none = fx.dir.join("cmdline-first");
    std::fs::write(&none, "console=ttyS0 agent.firstboot").unwrap();
    let (code, _, err) = agent(&[
        "run",
        "--platform",
        "metal",
        "--root",
        root.to_str().unwrap(),
        "--state-dir",
        fx.dir.join("state-first").to_str().unwrap(),
        "--system-config-dir",
        sys.to_str().unwrap(),
        "--test-kernel-cmdline-file",
        none.to_str().unwrap(),
        "--test-dmi-dir",
        dmi.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/installed")).unwrap(),
        "yes"
    );
    let m = machine();
    assert_eq!(m["state"], "provisioned", "{m}");
    assert_eq!(m["trust"], "machine", "{m}");
    let (code, _, err) = agent(&[
        "report-running",
        "--state",
        root.join("var/lib/agent/running.json").to_str().unwrap(),
        "--test-dmi-dir",
        dmi.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let m = machine();
    assert_eq!(m["state"], "running", "{m}");
}

/// `agent.install.*` values are checked as their flags are, before any disk is looked at.
#[test]
fn bad_agent_install_kargs_are_named() {
    let dir = TempDir::new("install-bad-kargs");
    let cmdline = dir.join("cmdline");
    for (line, want) in [
        (
            "agent.install.disk.transport=ide coreos.inst.image_url=http://127.0.0.1:9/os",
            "agent.install.disk.transport=ide: unknown transport \"ide\"",
        ),
        (
            "agent.install.disk.size_min=lots coreos.inst.image_url=http://127.0.0.1:9/os",
            "agent.install.disk.size_min=lots",
        ),
        (
            "agent.install.disk.rotational=maybe coreos.inst.image_url=http://127.0.0.1:9/os",
            "agent.install.disk.rotational",
        ),
        (
            "coreos.inst.install_dev=/dev/null coreos.inst.image_url=http://127.0.0.1:9/os agent.install.image_key=notakey",
            "public key agent.install.image_key=",
        ),
    ] {
        std::fs::write(&cmdline, line).unwrap();
        let (code, _, err) = agent(&[
            "install",
            "--from-kargs",
            "--kernel-cmdline",
            cmdline.to_str().unwrap(),
        ]);
        assert_eq!(code, 1, "{line}: {err}");
        assert!(err.contains(want), "{line}: {err}");
    }
}
