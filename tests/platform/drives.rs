//! The config-drive reader (`agent::platform::drive`) and the platforms that use it, on real
//! ext4 filesystems on loop devices (the host kernel mounts ext4; iso9660 and vfat drives are
//! booted in the VM: vm-tests/scenarios/12-14), and their metadata-service halves against a
//! real HTTP server on 127.0.0.1. Each test looks only at its own loop devices: the block
//! devices it scans are the entries of a directory it makes.

use crate::support;

use std::path::Path;
use std::time::Duration;

use agent::fetch::{Fetcher, Options};
use agent::platform::drive::{self, Absent, Drive, Roots};
use agent::platform::{azure, cloudstack, ionoscloud, kubevirt, openstack, proxmoxve};
use support::TempDir;
use support::faulty_http::{Behavior, Server};
use support::root::Loop;

const CONFIG: &str = r#"{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/x"}]}}"#;

/// An ext4 filesystem labelled `label` holding `files` (path, contents).
fn drive(label: &str, files: &[(&str, &[u8])]) -> Loop {
    let src = TempDir::new("drive-src");
    for (p, c) in files {
        let p = src.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, c).unwrap();
    }
    Loop::with(8 << 20, 512, |img| {
        support::sh(
            "mkfs.ext4",
            &[
                "-q",
                "-F",
                "-L",
                label,
                "-d",
                src.path().to_str().unwrap(),
                img.to_str().unwrap(),
            ],
            None,
        );
    })
}

/// Block devices as a test sees them: only `loops` (and label links, when given).
struct TestRoots {
    dir: TempDir,
    roots: Roots,
}

fn roots(loops: &[&Loop], links: &[(&str, &Loop)]) -> TestRoots {
    let dir = TempDir::new("drive-roots");
    let sys = dir.join("sys");
    let by_label = dir.join("by-label");
    std::fs::create_dir_all(&sys).unwrap();
    std::fs::create_dir_all(&by_label).unwrap();
    for l in loops {
        std::os::unix::fs::symlink(
            Path::new("/sys/class/block").join(l.name()),
            sys.join(l.name()),
        )
        .unwrap();
    }
    for (label, l) in links {
        std::os::unix::fs::symlink(l.dev(), by_label.join(label)).unwrap();
    }
    let roots = Roots {
        sys_block: sys,
        dev: "/dev".into(),
        by_label,
    };
    TestRoots { dir, roots }
}

fn fetcher(offline: bool) -> Fetcher {
    Fetcher::new(Options {
        offline,
        ..Default::default()
    })
}

fn short(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

fn mounted(dev: &str) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').next() == Some(dev))
}

#[test]
#[ignore = "needs root: make test-root"]
fn openstack_offline_reads_the_config_drive_and_writes_nothing() {
    let d = drive(
        "config-2",
        &[("openstack/latest/user_data", CONFIG.as_bytes())],
    );
    let before = d.bytes();
    let r = roots(&[&d], &[]);
    let found = openstack::fetch(
        "openstack",
        &fetcher(true),
        &r.roots,
        "http://127.0.0.1:9",
        None,
        [short(5.0), short(5.0)],
    )
    .unwrap()
    .expect("a config");
    assert_eq!(found.bytes, CONFIG.as_bytes());
    assert_eq!(
        found.source,
        format!(
            "openstack config drive {} (ext4, label config-2), file openstack/latest/user_data",
            d.dev()
        )
    );
    assert!(!mounted(d.dev()), "unmounted afterwards");
    assert!(before == d.bytes(), "the drive is not written to");
    drop(r.dir);
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_label_link_finds_the_drive_and_upper_case_counts() {
    let d = drive(
        "CONFIG-2",
        &[("openstack/latest/user_data", CONFIG.as_bytes())],
    );
    // Only the link names it: the scanned directory is empty.
    let r = roots(&[], &[("CONFIG-2", &d)]);
    let found = openstack::fetch(
        "brightbox",
        &fetcher(true),
        &r.roots,
        "http://127.0.0.1:9",
        None,
        [short(5.0), short(5.0)],
    )
    .unwrap()
    .unwrap();
    assert!(
        found.source.starts_with("brightbox config drive "),
        "{}",
        found.source
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_drive_without_the_file_is_no_user_data() {
    let d = drive("config-2", &[("openstack/latest/meta_data.json", b"{}")]);
    let r = roots(&[&d], &[]);
    let got = openstack::fetch(
        "openstack",
        &fetcher(true),
        &r.roots,
        "http://127.0.0.1:9",
        None,
        [short(5.0), short(5.0)],
    )
    .unwrap();
    assert!(got.is_none());
    assert!(!mounted(d.dev()));
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_broken_config_names_platform_device_and_path() {
    let d = drive(
        "config-2",
        &[(
            "openstack/latest/user_data",
            b"{\"ignition\": {\"version\": ",
        )],
    );
    let r = roots(&[&d], &[]);
    let found = openstack::fetch(
        "openstack",
        &fetcher(true),
        &r.roots,
        "http://127.0.0.1:9",
        None,
        [short(5.0), short(5.0)],
    )
    .unwrap()
    .unwrap();
    // As the fetch stage logs it (sources are shortened there: not this one).
    let source = agent::fetch::short(&found.source);
    let e = agent::stages::fetch::parse_logged(&found.bytes, &source).unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains(&format!("config from openstack config drive {} (ext4, label config-2), file openstack/latest/user_data is invalid", d.dev())),
        "{msg}"
    );
}

#[test]
fn openstack_offline_without_a_drive_needs_the_network() {
    let r = roots(&[], &[]);
    let f = fetcher(true);
    let e = openstack::fetch(
        "openstack",
        &f,
        &r.roots,
        "http://127.0.0.1:9",
        None,
        [short(0.5), short(5.0)],
    )
    .err()
    .unwrap();
    assert!(
        format!("{e:#}").contains("no config drive labelled config-2 or CONFIG-2 within 0.5s"),
        "{e:#}"
    );
    // The refusal is recorded where the fetch stage asks for it (exit 3).
    let refused = f.opts.refused.first().unwrap_or_default();
    assert!(
        refused.starts_with("the config of platform openstack (no config drive"),
        "{refused}"
    );
}

#[test]
fn openstack_online_without_a_drive_asks_the_metadata_service() {
    let s = Server::start();
    s.route(
        "/openstack/latest/user_data",
        vec![
            Behavior::Status(503),
            Behavior::Ok(CONFIG.as_bytes().to_vec()),
        ],
    );
    let r = roots(&[], &[]);
    let found = openstack::fetch(
        "openstack",
        &fetcher(false),
        &r.roots,
        &s.url(""),
        None,
        [short(0.5), short(20.0)],
    )
    .unwrap()
    .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    assert_eq!(
        found.source,
        format!(
            "openstack metadata service {}/openstack/latest/user_data",
            s.url("")
        )
    );
    assert_eq!(
        s.requests("/openstack/latest/user_data").len(),
        2,
        "the 503 was retried"
    );
    // 404: the service has no user data for this machine: an empty config, no retry.
    let s = Server::start();
    s.route("/openstack/latest/user_data", vec![Behavior::Status(404)]);
    let got = openstack::fetch(
        "openstack",
        &fetcher(false),
        &r.roots,
        &s.url(""),
        None,
        [short(0.5), short(20.0)],
    )
    .unwrap();
    assert!(got.is_none());
    assert_eq!(s.requests("/openstack/latest/user_data").len(), 1);
}

#[test]
fn openstack_online_with_neither_source_fails_naming_both() {
    let s = Server::start();
    s.route("/openstack/latest/user_data", vec![Behavior::Status(403)]);
    let r = roots(&[], &[]);
    let e = openstack::fetch(
        "openstack",
        &fetcher(false),
        &r.roots,
        &s.url(""),
        None,
        [short(0.5), short(1.0)],
    )
    .err()
    .unwrap();
    let msg = format!("{e:#}");
    assert!(
        msg.contains(
            "config drive: no config drive labelled config-2 or CONFIG-2 appeared within 1s"
        ),
        "{msg}"
    );
    assert!(
        msg.contains("metadata service: ") && msg.contains("HTTP 403"),
        "{msg}"
    );
}

#[test]
fn cloudstack_asks_the_dhcp_server() {
    let s = Server::start();
    s.route(
        "/latest/user-data",
        vec![Behavior::Ok(CONFIG.as_bytes().to_vec())],
    );
    let leases = TempDir::new("leases");
    std::fs::write(
        leases.join("2"),
        format!("ADDRESS=10.0.0.5\nSERVER_ADDRESS={}\n", s.addr),
    )
    .unwrap();
    let r = roots(&[], &[]);
    let found = cloudstack::fetch(
        &fetcher(false),
        &r.roots,
        leases.path(),
        [short(0.5), short(10.0)],
    )
    .unwrap()
    .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    assert_eq!(
        found.source,
        format!(
            "cloudstack metadata service http://{}/latest/user-data",
            s.addr
        )
    );
    // Offline, without a drive: the network.
    let f = fetcher(true);
    let e = cloudstack::fetch(&f, &r.roots, leases.path(), [short(0.3), short(10.0)])
        .err()
        .unwrap();
    assert!(
        format!("{e:#}").contains("needs the network (offline mode)"),
        "{e:#}"
    );
    assert!(f.opts.refused.first().is_some(), "{e:#}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn cloudstack_reads_its_path_on_the_config_drive() {
    let d = drive(
        "config-2",
        &[("cloudstack/userdata/user_data.txt", CONFIG.as_bytes())],
    );
    let r = roots(&[&d], &[]);
    let found = cloudstack::fetch(
        &fetcher(true),
        &r.roots,
        Path::new("/nonexistent"),
        [short(5.0), short(5.0)],
    )
    .unwrap()
    .unwrap();
    assert!(
        found
            .source
            .ends_with("file cloudstack/userdata/user_data.txt"),
        "{}",
        found.source
    );
}

const CIDATA: Drive = Drive {
    platform: "test",
    what: "NoCloud seed",
    labels: &["cidata", "CIDATA"],
    fstypes: &[],
    cdrom: false,
    wait: Duration::from_secs(5),
};

#[test]
#[ignore = "needs root: make test-root"]
fn the_label_picks_the_drive_among_others() {
    let other = drive("data", &[("user-data", b"not this one")]);
    let seed = drive("cidata", &[("user-data", CONFIG.as_bytes())]);
    let r = roots(&[&other, &seed], &[]);
    let found = drive::fetch_file(&CIDATA, &r.roots, "user-data", 1 << 20, Absent::Error)
        .unwrap()
        .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    assert!(found.source.contains(seed.dev()), "{}", found.source);
}

#[test]
fn a_missing_seed_is_no_user_data_or_an_error_as_the_platform_says() {
    let r = roots(&[], &[]);
    let d = Drive {
        wait: short(0.3),
        ..CIDATA
    };
    assert!(
        drive::fetch_file(&d, &r.roots, "user-data", 1 << 20, Absent::NoUserData)
            .unwrap()
            .is_none()
    );
    let e = drive::fetch_file(&d, &r.roots, "user-data", 1 << 20, Absent::Error)
        .err()
        .unwrap();
    assert!(
        format!("{e:#}").contains("no NoCloud seed labelled cidata or CIDATA appeared within 0.3s"),
        "{e:#}"
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn the_size_limit_applies_to_drives() {
    let seed = drive("cidata", &[("user-data", &[b' '; 4096])]);
    let r = roots(&[&seed], &[]);
    let e = drive::fetch_file(&CIDATA, &r.roots, "user-data", 1000, Absent::Error)
        .err()
        .unwrap();
    assert!(
        e.downcast_ref::<runtime::limits::TooLarge>().is_some(),
        "{e:#}"
    );
    assert!(!mounted(seed.dev()), "unmounted after the error");
}

#[test]
#[ignore = "needs root: make test-root"]
fn proxmoxve_skips_cloud_init_documents_for_vendor_data() {
    let seed = drive(
        "cidata",
        &[
            ("user-data", b"#cloud-config\nhostname: pve\n"),
            ("vendor-data", CONFIG.as_bytes()),
        ],
    );
    let r = roots(&[&seed], &[]);
    let found = proxmoxve::fetch(&proxmoxve::DRIVE, &r.roots, 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    assert!(
        found.source.ends_with("file vendor-data"),
        "{}",
        found.source
    );
    let only_cloud_init = drive("CIDATA", &[("user-data", b"#cloud-config\n")]);
    let r = roots(&[&only_cloud_init], &[]);
    assert!(
        proxmoxve::fetch(&proxmoxve::DRIVE, &r.roots, 1 << 20)
            .unwrap()
            .is_none()
    );
    // Anything else that is not empty is taken, as Ignition takes it: a script in user-data
    // is the config (and fails the stage), vendor-data is not looked at.
    let script = drive(
        "cidata",
        &[
            ("user-data", b"#!/bin/sh\necho hi\n"),
            ("vendor-data", CONFIG.as_bytes()),
        ],
    );
    let r = roots(&[&script], &[]);
    let found = proxmoxve::fetch(&proxmoxve::DRIVE, &r.roots, 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(found.bytes, b"#!/bin/sh\necho hi\n");
    assert!(found.source.ends_with("file user-data"), "{}", found.source);
    assert!(agent::stages::fetch::parse_logged(&found.bytes, &found.source).is_err());
    // An empty user-data is passed over for vendor-data.
    let empty = drive(
        "cidata",
        &[("user-data", b""), ("vendor-data", CONFIG.as_bytes())],
    );
    let r = roots(&[&empty], &[]);
    let found = proxmoxve::fetch(&proxmoxve::DRIVE, &r.roots, 1 << 20)
        .unwrap()
        .unwrap();
    assert!(
        found.source.ends_with("file vendor-data"),
        "{}",
        found.source
    );
    // A broken config is taken too: the fetch stage then names it.
    let broken = drive("cidata", &[("user-data", b"{\"ignition\": ")]);
    let r = roots(&[&broken], &[]);
    let found = proxmoxve::fetch(&proxmoxve::DRIVE, &r.roots, 1 << 20)
        .unwrap()
        .unwrap();
    let e = agent::stages::fetch::parse_logged(&found.bytes, &found.source).unwrap_err();
    assert!(
        format!("{e:#}").contains(&format!(
            "config from proxmoxve cloud-init drive {} (ext4, label cidata), file user-data is invalid",
            broken.dev()
        )),
        "{e:#}"
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn ionoscloud_reads_the_oem_disk_or_the_one_named() {
    let oem = drive("OEM", &[("config/user-data", CONFIG.as_bytes())]);
    let r = roots(&[&oem], &[]);
    let (label, path) = ionoscloud::location("quiet");
    let found = ionoscloud::fetch(&label, &path, &r.roots, short(5.0), 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    let other = drive("ionos", &[("u/data", b"#cloud-config\n")]);
    let r = roots(&[&other], &[]);
    let (label, path) =
        ionoscloud::location("ignition.config.device=ionos ignition.config.path=u/data");
    assert!(
        ionoscloud::fetch(&label, &path, &r.roots, short(5.0), 1 << 20)
            .unwrap()
            .is_none()
    );
}

/// Azure's CD reader on ext4 loop devices (the real one is a UDF CD-ROM: VM scenario
/// 14-azure-ovf).
const OVF_TEST: Drive = Drive {
    platform: "azure",
    what: "OVF provisioning CD",
    labels: &[],
    fstypes: &["ext4"],
    cdrom: false,
    wait: Duration::from_secs(5),
};

fn ovf_env(custom_data_b64: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\"?>\n<Environment xmlns:ns1=\"http://schemas.microsoft.com/windowsazure\"><ns1:ProvisioningSection><ns1:LinuxProvisioningConfigurationSet><ns1:CustomData>{custom_data_b64}</ns1:CustomData></ns1:LinuxProvisioningConfigurationSet></ns1:ProvisioningSection></Environment>\n"
    )
    .into_bytes()
}

#[test]
#[ignore = "needs root: make test-root"]
fn azure_takes_imds_user_data_first_then_the_cd() {
    let b64 = spec::encoding::base64_encode(CONFIG.as_bytes());
    let not_ovf = drive("x", &[("CustomData.bin", b"not this one")]);
    let cd = drive("y", &[("ovf-env.xml", &ovf_env(&b64))]);
    let r = roots(&[&not_ovf, &cd], &[]);
    let path = azure::IMDS_USER_DATA;
    // The service has userData: it wins, and the request carried `Metadata: true`.
    let s = Server::start();
    s.route(
        path,
        vec![
            Behavior::Status(404),
            Behavior::Ok(b64.clone().into_bytes()),
        ],
    );
    let found = azure::fetch(
        &fetcher(false),
        &s.url(""),
        short(20.0),
        &OVF_TEST,
        &r.roots,
    )
    .unwrap()
    .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    assert!(
        found.source.starts_with("azure instance metadata service"),
        "{}",
        found.source
    );
    let reqs = s.requests(path);
    assert_eq!(reqs.len(), 2, "a 404 from IMDS is retried");
    assert_eq!(reqs[1].header("metadata"), Some("true"));
    // Empty userData: the CD's custom data (the disk without ovf-env.xml is passed over).
    let s = Server::start();
    s.route(path, vec![Behavior::Ok(Vec::new())]);
    let found = azure::fetch(
        &fetcher(false),
        &s.url(""),
        short(20.0),
        &OVF_TEST,
        &r.roots,
    )
    .unwrap()
    .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    assert_eq!(
        found.source,
        format!(
            "azure OVF provisioning CD {} (ext4, label y), file ovf-env.xml (CustomData)",
            cd.dev()
        )
    );
    // A service that is not there at all: the CD, after the bounded retries.
    let found = azure::fetch(
        &fetcher(false),
        "http://127.0.0.1:9",
        short(0.5),
        &OVF_TEST,
        &r.roots,
    )
    .unwrap()
    .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    // A service that answers with errors only: an error, not the CD.
    let s = Server::start();
    s.route(path, vec![Behavior::Status(403)]);
    let e = azure::fetch(
        &fetcher(false),
        &s.url(""),
        short(20.0),
        &OVF_TEST,
        &r.roots,
    )
    .err()
    .unwrap();
    assert!(format!("{e:#}").contains("HTTP 403"), "{e:#}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn azure_custom_data_bin_comes_before_ovf_env_and_none_is_no_user_data() {
    let cd = drive(
        "z",
        &[
            ("ovf-env.xml", &ovf_env("e30=")),
            ("CustomData.bin", CONFIG.as_bytes()),
        ],
    );
    let r = roots(&[&cd], &[]);
    let found = azure::from_cd(&OVF_TEST, &r.roots, 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    assert!(
        found.source.ends_with("file CustomData.bin"),
        "{}",
        found.source
    );
    let empty = drive("z", &[("ovf-env.xml", b"<Environment/>")]);
    let r = roots(&[&empty], &[]);
    assert!(
        azure::from_cd(&OVF_TEST, &r.roots, 1 << 20)
            .unwrap()
            .is_none()
    );
}

/// KubeVirt's two drives with waits a test can afford (the provider's are without end).
fn kubevirt_drives(secs: f64) -> [Drive; 2] {
    [
        Drive {
            wait: short(secs),
            ..kubevirt::NOCLOUD
        },
        Drive {
            wait: short(secs),
            ..kubevirt::CONFIG_DRIVE
        },
    ]
}

#[test]
#[ignore = "needs root: make test-root"]
fn kubevirt_reads_a_nocloud_seed_or_a_config_drive() {
    // cloudInitNoCloud: a seed labelled cidata, file user-data (Ignition >= 2.24).
    let seed = drive("cidata", &[("user-data", CONFIG.as_bytes())]);
    let r = roots(&[&seed], &[]);
    let found = kubevirt::fetch(&kubevirt_drives(20.0), &r.roots, 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    assert_eq!(
        found.source,
        format!(
            "kubevirt NoCloud seed {} (ext4, label cidata), file user-data",
            seed.dev()
        )
    );
    assert!(!mounted(seed.dev()));
    // cloudInitConfigDrive: config-2, OpenStack's layout.
    let cd = drive(
        "config-2",
        &[("openstack/latest/user_data", CONFIG.as_bytes())],
    );
    let r = roots(&[&cd], &[]);
    let found = kubevirt::fetch(&kubevirt_drives(20.0), &r.roots, 1 << 20)
        .unwrap()
        .unwrap();
    assert!(
        found
            .source
            .ends_with("(ext4, label config-2), file openstack/latest/user_data"),
        "{}",
        found.source
    );
    // A seed without user-data: the drive answered, no user data (as Ignition).
    let bare = drive("cidata", &[("meta-data", b"instance-id: x\n")]);
    let r = roots(&[&bare], &[]);
    assert!(
        kubevirt::fetch(&kubevirt_drives(20.0), &r.roots, 1 << 20)
            .unwrap()
            .is_none()
    );
    // Neither (with bounded waits): an error naming both.
    let r = roots(&[], &[]);
    let e = kubevirt::fetch(&kubevirt_drives(0.5), &r.roots, 1 << 20)
        .err()
        .unwrap();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("no NoCloud seed labelled cidata or CIDATA appeared within 0.5s")
            && msg.contains("no config drive labelled config-2 appeared within 0.5s"),
        "{msg}"
    );
}

#[test]
fn azure_imds_answering_410_for_a_while_is_waited_for() {
    // IMDS answers 410 Gone while it starts (up to 70 s on Azure): retried, with the usual
    // back-off, past the wait for a service that never answers (here 1 s), until userData.
    let b64 = spec::encoding::base64_encode(CONFIG.as_bytes());
    let path = azure::IMDS_USER_DATA;
    let s = Server::start();
    let mut script = vec![Behavior::Status(410); 5];
    script.push(Behavior::Status(429));
    script.push(Behavior::Status(404));
    script.push(Behavior::Ok(b64.into_bytes()));
    s.route(path, script);
    let r = roots(&[], &[]);
    let found = azure::fetch(&fetcher(false), &s.url(""), short(1.0), &OVF_TEST, &r.roots)
        .unwrap()
        .unwrap();
    assert_eq!(found.bytes, CONFIG.as_bytes());
    let reqs = s.requests(path);
    assert_eq!(reqs.len(), 8, "{reqs:?}");
    // (The back-off alone, 0.1 s doubling, spends 6.3 s before the 8th request: the old
    // bound of the service's wait, here 1 s, gave up after about 4 answers.)
    // Bounded by timeouts.httpTotal, as any fetch: 410 only for longer is an error naming it.
    let s = Server::start();
    s.route(path, vec![Behavior::Status(410)]);
    let f = Fetcher::new(Options {
        http_total: Some(2),
        ..Default::default()
    });
    let e = azure::fetch(&f, &s.url(""), short(1.0), &OVF_TEST, &r.roots)
        .err()
        .unwrap();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("timeouts.httpTotal of 2s exceeded") && msg.contains("HTTP 410"),
        "{msg}"
    );
}
