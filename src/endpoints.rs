//! Where the agent finds the services and files of the machine it runs on: the AWS instance
//! metadata service (and, for tests, the other platforms' metadata services), S3 and Google Cloud Storage, QEMU's fw_cfg directory, the kernel command
//! line, and how long it waits for a device node. One typed value, [`Endpoints`]: tests build
//! one and pass it in (in [`crate::fetch::Options`]); the shipped binary reads no environment
//! variable for any of these.
//!
//! Overrides users need are flags and kernel arguments of `agent run` (a flag wins):
//! `--s3-endpoint URL` / `agent.s3_endpoint=URL` (an S3-compatible store, path-style requests)
//! and `--device-timeout SECS` / `agent.device_timeout=SECS`. The others can be changed only
//! by test builds (feature `test-hooks`: hidden `--test-*` flags, see
//! [`TestDoubles`]).
//!
//! A plain value, no process-wide state: `agent run` builds one (built-in values, test
//! doubles, kernel arguments, flags) into [`crate::stages::Context::endpoints`], and every
//! fetch of a stage gets it through [`crate::fetch::Options::endpoints`];
//! `Endpoints::default()` (and so `fetch::Options::default()`) is [`Endpoints::builtin`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use runtime::cmdline::arg as cmdline_arg;

/// Default of [`Endpoints::aws_imds`].
pub const DEFAULT_AWS_IMDS: &str = "http://169.254.169.254";
/// Default of [`Endpoints::gs`].
pub const DEFAULT_GS: &str = "https://storage.googleapis.com";
/// Default of [`Endpoints::qemu_fw_cfg_dir`].
pub const DEFAULT_QEMU_FW_CFG_DIR: &str = "/sys/firmware/qemu_fw_cfg";
/// Default of [`Endpoints::kernel_cmdline`].
pub const DEFAULT_KERNEL_CMDLINE: &str = "/proc/cmdline";
/// Default of [`Endpoints::dmi_dir`].
pub const DEFAULT_DMI_DIR: &str = "/sys/class/dmi/id";
/// Default of [`Endpoints::net_dir`].
pub const DEFAULT_NET_DIR: &str = "/sys/class/net";
/// Default of [`Endpoints::device_timeout`].
pub const DEFAULT_DEVICE_TIMEOUT: Duration = Duration::from_secs(30);
/// Kernel argument setting [`Endpoints::s3`].
pub const KARG_S3_ENDPOINT: &str = "agent.s3_endpoint";
/// Kernel argument setting [`Endpoints::device_timeout`] (seconds).
pub const KARG_DEVICE_TIMEOUT: &str = "agent.device_timeout";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// AWS instance metadata service (instance role credentials for S3).
    pub aws_imds: String,
    /// An S3-compatible endpoint, addressed path-style (`URL/bucket/key`); None: AWS S3
    /// itself (`https://bucket.s3.REGION.amazonaws.com/key`).
    pub s3: Option<String>,
    /// Region of AWS S3 when the instance role gives none (a platform may set it when it
    /// prepares the fetcher); then `$AWS_REGION`, `$AWS_DEFAULT_REGION`, `us-east-1`.
    pub s3_region: Option<String>,
    /// Google Cloud Storage (`gs://` URLs).
    pub gs: String,
    /// QEMU's fw_cfg entries in sysfs (platform `qemu`).
    pub qemu_fw_cfg_dir: PathBuf,
    /// The kernel command line (config URL, `agent.*` kernel arguments).
    pub kernel_cmdline: PathBuf,
    /// Longest wait for a device node to appear (disks stage, `plan`).
    pub device_timeout: Duration,
    /// The firmware's SMBIOS fields (a report's machine identity, `crate::report`).
    pub dmi_dir: PathBuf,
    /// The network interfaces (a report's MAC addresses).
    pub net_dir: PathBuf,
    /// Base URLs of platforms' metadata services that replace the built-in ones, as
    /// (platform, URL) (test builds: `--test-metadata-url NAME=URL`); empty: each platform's
    /// own address (`src/platform/NAME.rs`). AWS's is [`Endpoints::aws_imds`].
    pub metadata: Vec<(String, String)>,
}

impl Endpoints {
    /// The built-in values: the real services and files.
    pub fn builtin() -> Endpoints {
        Endpoints {
            aws_imds: DEFAULT_AWS_IMDS.into(),
            s3: None,
            s3_region: None,
            gs: DEFAULT_GS.into(),
            qemu_fw_cfg_dir: DEFAULT_QEMU_FW_CFG_DIR.into(),
            kernel_cmdline: DEFAULT_KERNEL_CMDLINE.into(),
            device_timeout: DEFAULT_DEVICE_TIMEOUT,
            dmi_dir: DEFAULT_DMI_DIR.into(),
            net_dir: DEFAULT_NET_DIR.into(),
            metadata: Vec::new(),
        }
    }

    /// The base URL of `platform`'s metadata service: an override, else `builtin`
    /// ([`Endpoints::aws_imds`] for `aws`).
    pub fn metadata_base(&self, platform: &str, builtin: &str) -> String {
        if platform == "aws" {
            return self.aws_imds.clone();
        }
        self.metadata
            .iter()
            .rev()
            .find(|(p, _)| p == platform)
            .map_or_else(|| builtin.to_string(), |(_, u)| u.clone())
    }

    /// These endpoints with the kernel arguments of `cmdline` applied (the last occurrence
    /// of each wins).
    pub fn with_cmdline(mut self, cmdline: &str) -> Result<Endpoints> {
        if let Some(v) = cmdline_arg(cmdline, KARG_S3_ENDPOINT) {
            self.s3 = Some(
                parse_url(v.unwrap_or(""))
                    .with_context(|| format!("kernel argument {KARG_S3_ENDPOINT}"))?,
            );
        }
        if let Some(v) = cmdline_arg(cmdline, KARG_DEVICE_TIMEOUT) {
            self.device_timeout = parse_seconds(v.unwrap_or(""))
                .with_context(|| format!("kernel argument {KARG_DEVICE_TIMEOUT}"))?;
        }
        Ok(self)
    }
}

/// Test doubles in place of the real services and files (test builds only: the hidden
/// `--test-*` flags of `agent run`); None keeps the value it would replace.
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, Default)]
pub struct TestDoubles {
    pub kernel_cmdline: Option<PathBuf>,
    pub qemu_fw_cfg_dir: Option<PathBuf>,
    /// SMBIOS identity (`product_uuid`, `product_serial`) for reports.
    pub dmi_dir: Option<PathBuf>,
    pub aws_imds: Option<String>,
    pub gs: Option<String>,
    /// (platform, base URL) of metadata services.
    pub metadata: Vec<(String, String)>,
}

#[cfg(feature = "test-hooks")]
impl TestDoubles {
    /// `e` with these test doubles.
    pub fn apply(self, mut e: Endpoints) -> Endpoints {
        if let Some(p) = self.kernel_cmdline {
            e.kernel_cmdline = p;
        }
        if let Some(p) = self.qemu_fw_cfg_dir {
            e.qemu_fw_cfg_dir = p;
        }
        if let Some(p) = self.dmi_dir {
            e.dmi_dir = p;
        }
        if let Some(u) = self.aws_imds {
            e.aws_imds = u;
        }
        if let Some(u) = self.gs {
            e.gs = u;
        }
        e.metadata.extend(self.metadata);
        e
    }
}

impl Default for Endpoints {
    /// The built-in values ([`Endpoints::builtin`]).
    fn default() -> Self {
        Endpoints::builtin()
    }
}

/// An endpoint URL: `http://` or `https://` and a host.
pub fn parse_url(s: &str) -> Result<String> {
    let ok = ["http://", "https://"].iter().any(|p| {
        s.get(..p.len())
            .is_some_and(|h| h.eq_ignore_ascii_case(p) && s.len() > p.len())
    });
    if !ok {
        bail!("{s:?}: not an endpoint URL (want http://HOST[:PORT] or https://…)");
    }
    Ok(s.trim_end_matches('/').to_string())
}

/// A time-out in seconds, fractions allowed (`30`, `0.5`); more than zero.
pub fn parse_seconds(s: &str) -> Result<Duration> {
    let secs: f64 = s
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .with_context(|| format!("{s:?}: not a number of seconds (30, 0.5)"))?;
    if secs <= 0.0 || secs > 86400.0 {
        bail!("{s:?}: the time-out must be more than 0 and at most 86400 seconds");
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_arguments() {
        let e = Endpoints::builtin()
            .with_cmdline("quiet agent.s3_endpoint=http://minio:9000/ agent.device_timeout=2.5")
            .unwrap();
        assert_eq!(e.s3.as_deref(), Some("http://minio:9000"));
        assert_eq!(e.device_timeout, Duration::from_millis(2500));
        let same = Endpoints::builtin().with_cmdline("quiet").unwrap();
        assert_eq!(same, Endpoints::builtin());
        let e = Endpoints::builtin()
            .with_cmdline("agent.s3_endpoint=minio:9000")
            .unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "kernel argument agent.s3_endpoint: \"minio:9000\": not an endpoint URL (want http://HOST[:PORT] or https://…)"
        );
        for bad in ["agent.device_timeout=0", "agent.device_timeout=soon"] {
            let e = Endpoints::builtin().with_cmdline(bad).unwrap_err();
            assert!(
                format!("{e:#}").starts_with("kernel argument agent.device_timeout: "),
                "{e:#}"
            );
        }
    }

    #[test]
    fn metadata_services() {
        let mut e = Endpoints::builtin();
        assert_eq!(
            e.metadata_base("gcp", "http://169.254.169.254"),
            "http://169.254.169.254"
        );
        e.metadata.push(("gcp".into(), "http://127.0.0.1:1".into()));
        e.metadata.push(("gcp".into(), "http://127.0.0.1:2".into()));
        e.aws_imds = "http://127.0.0.1:3".into();
        // The last override wins; AWS's is aws_imds; others keep their own.
        assert_eq!(e.metadata_base("gcp", "x"), "http://127.0.0.1:2");
        assert_eq!(e.metadata_base("aws", "x"), "http://127.0.0.1:3");
        assert_eq!(e.metadata_base("vultr", "http://v"), "http://v");
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_seconds(" 0.3 ").unwrap(), Duration::from_millis(300));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("inf").is_err());
        assert!(parse_seconds("NaN").is_err());
    }
}
