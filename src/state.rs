//! The state directory (`--state-dir`, default `/run/agent`): what one stage leaves for the
//! next. This module owns its files and their formats; the stages and the CLI read and write
//! them only through [`StateDir`].
//!
//! | file | written by | read by | format |
//! |---|---|---|---|
//! | `config.json` | fetch | disks, files, `agent plan` | the rendered config (newest spec version), 0600 |
//! | `fetch.json` | fetch | files (the result file) | [`FetchRecord`] (JSON), 0644 |
//! | `neednet` | fetch `--offline` | the initramfs (brings the network up) | empty marker, 0644; removed by a fetch that succeeds |
//! | `luks/<name>.json` | disks | files (`/etc/crypttab`) | [`LuksRecord`] (JSON), 0600, directory 0700 |
//! | `luks/<name>.key` | disks | files (`/etc/luks/<name>`) | the volume's key, 0600 |
//! | `provider-files.json` | fetch (the platform's provider) | files (writes them into the root) | [`ProviderFile`]s (JSON, contents in base64), 0600; absent: none |
//! | `report-auth` | fetch (the config fetch that named a report URL) | every stage's report ([`crate::report`]) | the `Authorization` header value the config was fetched with, 0600; only for reports to the origin it was sent to (or `agent.report.url=`), never logged |
//! | `report-url` | fetch (the config fetch that named a report URL) | every stage's report ([`crate::report`]) | the report URL whole (its query may carry a token), 0600; `fetch.json` shows it without userinfo and query |
//! | `reports/*.json` | any stage ([`crate::report`]) | the next stage's report, the files stage (copies them into the root) | reports not sent yet, 0600, at most 100 |
//! | `agent.log` | every stage (the logger) | people, the files stage (copies it to the root's `/var/log/agent/`) | the log lines, 0600 |
//! | `provider-answer.json` | fetch (the first pass that asks the platform's provider) | fetch (later passes of the same boot) | [`ProviderAnswer`] (JSON, config and files in base64), 0600 |
//!
//! Every file is written atomically (a temporary file beside it, fsync, rename).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};

use spec::config::{self, Config, Version};

/// The rendered config.
pub const RENDERED_FILE: &str = "config.json";
/// The record of the fetch stage.
pub const RECORD_FILE: &str = "fetch.json";
/// Marker written when an offline fetch needs the network.
pub const NEEDNET_MARKER: &str = "neednet";
/// Directory of the LUKS records and keys.
pub const LUKS_DIR: &str = "luks";
/// Files the platform's provider leaves for the target root.
pub const PROVIDER_FILES: &str = "provider-files.json";

/// What the platform's provider answered, kept for the later passes of the fetch stage.
pub const PROVIDER_ANSWER: &str = "provider-answer.json";
/// The kernel's id of this boot (a random UUID per boot).
pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// What the platform's provider answered, as the fetch stage keeps it: the initramfs runs the
/// stage twice when the config needs the network (offline, then online), and some channels
/// hand the config over only once (Hyper-V KVP, the z/VM reader). The later pass of the same
/// boot takes this answer instead of asking the provider again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderAnswer {
    /// The platform asked.
    pub platform: String,
    /// The boot it was asked in ([`BOOT_ID`]); another boot's answer is not taken.
    pub boot_id: String,
    /// The config found, or None: the platform had none (an answer too).
    pub config: Option<AnsweredConfig>,
    /// The files the provider leaves for the target root.
    pub files: Vec<ProviderFile>,
}

/// A config a provider found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnsweredConfig {
    /// Where it came from (as the provider named it).
    pub source: String,
    /// The bytes (standard base64 in the state file).
    #[serde(with = "base64_bytes")]
    pub bytes: Vec<u8>,
}

/// This boot's id ([`BOOT_ID`], trimmed); empty when the kernel does not say.
pub fn boot_id() -> String {
    std::fs::read_to_string(BOOT_ID)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A file the platform's provider leaves for the files stage to write into the target root
/// (Ignition's provider output files, e.g. Hyper-V's KVP pool files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderFile {
    /// Absolute path in the target root.
    pub path: String,
    pub mode: u32,
    /// The contents (standard base64 in the state file).
    #[serde(with = "base64_bytes")]
    pub contents: Vec<u8>,
}

mod base64_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&spec::encoding::base64_encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        spec::encoding::base64_decode(text.as_bytes()).map_err(serde::de::Error::custom)
    }
}

/// What the fetch stage fetched, for later stages and the result file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchRecord {
    pub user_config_provided: bool,
    /// Where the user config came from ("no user config provided" if nowhere).
    pub source: String,
    pub platform: Option<String>,
    /// Every config fetched, in order: user config, its references, base configs.
    pub configs: Vec<Fetched>,
    /// What `agent serve` said of the config it served (its `X-Agent-*` headers), where
    /// reports go; None: no server said (docs/reports.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<Served>,
}

/// The `X-Agent-*` headers of a config fetch, kept by the fetch stage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Served {
    /// `X-Agent-Pool`.
    pub pool: Option<String>,
    /// `X-Agent-Config`: the config's name in the pool.
    pub config: Option<String>,
    /// `X-Agent-Config-Hash`.
    pub hash: Option<String>,
    /// `X-Agent-Report-URL`, resolved against the URL first asked (before redirects; its
    /// userinfo left out). Kept whole in [`REPORT_URL`] (0600); `fetch.json` has it as
    /// `report::redact::url` shows it (no userinfo, no query).
    pub report_url: Option<String>,
    /// The origin (`scheme://host[:port]`) the `Authorization` header was sent to: the URL
    /// first asked. Reports are sent with it only to this origin (or to `agent.report.url=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_origin: Option<String>,
    /// The CAs the rendered config trusts (PEM), for an https report URL.
    #[serde(default)]
    pub cas: Vec<String>,
    /// The `Authorization` header value the config was fetched with: kept in [`REPORT_AUTH`]
    /// (0600), never in `fetch.json`.
    #[serde(skip)]
    pub auth: Option<String>,
}

/// The file of the `Authorization` header value reports are sent with.
pub const REPORT_AUTH: &str = "report-auth";
/// The file of the report URL the config server named, whole.
pub const REPORT_URL: &str = "report-url";
/// Directory of the reports not sent yet.
pub const REPORTS_DIR: &str = "reports";
/// The full log of the stages.
pub const LOG_FILE: &str = "agent.log";

/// One config the fetch stage fetched.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fetched {
    pub kind: String,
    pub source: String,
    pub sha512: String,
}

/// What the files stage needs to let the booted system open a LUKS volume the disks stage
/// opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LuksRecord {
    pub name: String,
    /// UUID of the LUKS header (crypttab `UUID=`).
    pub uuid: String,
    /// A key file `<name>.key` sits beside the record (false for clevis-bound volumes).
    pub key_file: bool,
    pub discard: bool,
    /// Opening needs the network (`_netdev`).
    pub netdev: bool,
}

/// A recorded LUKS volume with its key (present when `record.key_file`).
pub struct LuksVolume {
    pub record: LuksRecord,
    pub key: Option<Vec<u8>>,
}

impl std::fmt::Debug for LuksVolume {
    // Never the key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LuksVolume")
            .field("record", &self.record)
            .field(
                "key",
                &self.key.as_ref().map(|k| format!("{} bytes", k.len())),
            )
            .finish()
    }
}

/// The state directory.
#[derive(Debug, Clone, Copy)]
pub struct StateDir<'a> {
    dir: &'a Path,
}

impl<'a> StateDir<'a> {
    pub fn new(dir: &'a Path) -> Self {
        StateDir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir
    }

    /// Creates the directory (the fetch stage, before anything else).
    pub fn create(&self) -> Result<()> {
        std::fs::create_dir_all(self.dir)
            .with_context(|| format!("creating state directory {}", self.dir.display()))
    }

    /// Where the fetch stage leaves the rendered config.
    pub fn rendered_path(&self) -> PathBuf {
        self.dir.join(RENDERED_FILE)
    }

    /// Writes the rendered config (newest spec version, 0600); returns its path.
    pub fn write_rendered(&self, c: &Config) -> Result<PathBuf> {
        let bytes = config::to_json_pretty(c, Version::NEWEST).map_err(anyhow::Error::msg)?;
        let path = self.rendered_path();
        runtime::util::write_atomic(&path, &bytes, 0o600)?;
        Ok(path)
    }

    /// Reads the rendered config the fetch stage left.
    pub fn read_rendered(&self) -> Result<Config> {
        let path = self.rendered_path();
        let file = std::fs::File::open(&path).map_err(|e| {
            anyhow::anyhow!(
                "reading {}: {e} (run the fetch stage first)",
                path.display()
            )
        })?;
        let parse = |bytes: &[u8]| {
            config::parse(bytes)
                .map(|p| p.config)
                .map_err(|r| anyhow::anyhow!("rendered config {} is invalid:\n{r}", path.display()))
        };
        // A large config (10,000 files of inline contents: 140 MiB) is mapped rather than
        // copied into a fresh buffer: no page zeroing, no copy.
        match Mapped::new(&file) {
            Some(m) => parse(m.bytes()),
            None => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut &file, &mut bytes)
                    .with_context(|| format!("reading {}", path.display()))?;
                parse(&bytes)
            }
        }
    }

    /// Writes the fetch record (0644): the report URL as shown (no userinfo, no query),
    /// whole in [`REPORT_URL`] (0600).
    pub fn write_fetch_record(&self, r: &FetchRecord) -> Result<()> {
        let served = r.served.as_ref();
        self.write_private(REPORT_URL, served.and_then(|s| s.report_url.as_deref()))?;
        let mut r = r.clone();
        if let Some(s) = &mut r.served {
            s.report_url = s.report_url.as_deref().map(shown_url);
        }
        let rec = serde_json::to_vec_pretty(&r).context("serializing fetch record")?;
        runtime::util::write_atomic(&self.dir.join(RECORD_FILE), &rec, 0o644)
    }

    /// Reads the fetch record.
    pub fn read_fetch_record(&self) -> Result<FetchRecord> {
        let p = self.dir.join(RECORD_FILE);
        let b = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
        serde_json::from_slice(&b).with_context(|| format!("parsing {}", p.display()))
    }

    /// Whether the fetch stage found a user config: `None` when there is no (readable) record.
    pub fn user_config_provided(&self) -> Option<bool> {
        self.read_fetch_record()
            .ok()
            .map(|r| r.user_config_provided)
    }

    /// Keeps the `Authorization` header value reports are sent with (0600); `None` removes it.
    pub fn write_report_auth(&self, auth: Option<&str>) -> Result<()> {
        self.write_private(REPORT_AUTH, auth)
    }

    /// The `Authorization` header value reports are sent with, if the config had one.
    pub fn report_auth(&self) -> Option<String> {
        self.read_private(REPORT_AUTH)
    }

    /// The report URL the config server named, whole ([`REPORT_URL`]).
    pub fn report_url(&self) -> Option<String> {
        self.read_private(REPORT_URL)
    }

    /// Writes `value` to `name` (0600); `None` removes the file.
    fn write_private(&self, name: &str, value: Option<&str>) -> Result<()> {
        let p = self.dir.join(name);
        match value {
            Some(a) => runtime::util::write_atomic(&p, a.as_bytes(), 0o600),
            None => match std::fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("removing {}", p.display()))
                }
                _ => Ok(()),
            },
        }
    }

    /// The trimmed text of `name`; None if missing or empty.
    fn read_private(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(name))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// Directory of the reports not sent yet.
    pub fn reports_dir(&self) -> PathBuf {
        self.dir.join(REPORTS_DIR)
    }

    /// The full log of the stages.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// Where the neednet marker goes.
    pub fn neednet_path(&self) -> PathBuf {
        self.dir.join(NEEDNET_MARKER)
    }

    /// Writes the neednet marker; returns its path.
    pub fn set_neednet(&self) -> Result<PathBuf> {
        let marker = self.neednet_path();
        runtime::util::write_atomic(&marker, b"", 0o644)?;
        Ok(marker)
    }

    /// Removes the neednet marker if it is there.
    pub fn clear_neednet(&self) -> Result<()> {
        let marker = self.neednet_path();
        if marker.exists() {
            std::fs::remove_file(&marker)
                .with_context(|| format!("removing {}", marker.display()))?;
        }
        Ok(())
    }

    fn luks_dir(&self) -> PathBuf {
        self.dir.join(LUKS_DIR)
    }

    /// Leaves the record (and key) of a LUKS volume for the files stage: `luks/<name>.json`
    /// and `luks/<name>.key`, both 0600 in a 0700 directory.
    pub fn save_luks(&self, r: &LuksRecord, key: Option<&[u8]>) -> Result<()> {
        let dir = self.luks_dir();
        runtime::util::mkdir_private(&dir)?;
        if let Some(k) = key {
            runtime::util::write_atomic(&dir.join(format!("{}.key", r.name)), k, 0o600)?;
        }
        let json = serde_json::to_vec_pretty(r).context("encoding a LUKS record")?;
        runtime::util::write_atomic(&dir.join(format!("{}.json", r.name)), &json, 0o600)
    }

    /// Every recorded LUKS volume, sorted by name, with its key read (nothing recorded, or
    /// no LUKS directory: none).
    pub fn luks_volumes(&self) -> Result<Vec<LuksVolume>> {
        let dir = self.luks_dir();
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return Ok(Vec::new());
        };
        let mut records = Vec::new();
        for e in rd {
            let e = e.with_context(|| format!("reading {}", dir.display()))?;
            let p = e.path();
            if p.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let b = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
            let r: LuksRecord =
                serde_json::from_slice(&b).with_context(|| format!("decoding {}", p.display()))?;
            if r.name.contains('/') || r.name.is_empty() {
                bail!("{}: invalid volume name {:?}", p.display(), r.name);
            }
            records.push(r);
        }
        records.sort_by(|a, b| a.name.cmp(&b.name));
        records
            .into_iter()
            .map(|record| {
                let key = if record.key_file {
                    let src = dir.join(format!("{}.key", record.name));
                    Some(
                        std::fs::read(&src)
                            .with_context(|| format!("reading {}", src.display()))?,
                    )
                } else {
                    None
                };
                Ok(LuksVolume { record, key })
            })
            .collect()
    }
}

impl StateDir<'_> {
    /// Leaves the provider's files for the files stage (none: removes an earlier record).
    pub fn write_provider_files(&self, files: &[ProviderFile]) -> Result<()> {
        let path = self.dir.join(PROVIDER_FILES);
        if files.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("removing {}", path.display()))
                }
                _ => Ok(()),
            };
        }
        let json = serde_json::to_vec_pretty(files).context("encoding the provider's files")?;
        runtime::util::write_atomic(&path, &json, 0o600)
    }

    /// The files the provider left (none recorded: none).
    pub fn provider_files(&self) -> Result<Vec<ProviderFile>> {
        let path = self.dir.join(PROVIDER_FILES);
        let b = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let files: Vec<ProviderFile> =
            serde_json::from_slice(&b).with_context(|| format!("decoding {}", path.display()))?;
        for f in &files {
            if !f.path.starts_with('/') || f.mode > 0o7777 {
                bail!(
                    "{}: invalid file {:?} (mode {:o})",
                    path.display(),
                    f.path,
                    f.mode
                );
            }
        }
        Ok(files)
    }
}

impl StateDir<'_> {
    /// Where the provider's answer is kept.
    pub fn provider_answer_path(&self) -> PathBuf {
        self.dir.join(PROVIDER_ANSWER)
    }

    /// Keeps the provider's answer (atomically, 0600: it may hold secrets).
    pub fn write_provider_answer(&self, a: &ProviderAnswer) -> Result<PathBuf> {
        let path = self.provider_answer_path();
        let json = serde_json::to_vec_pretty(a).context("encoding the provider's answer")?;
        runtime::util::write_atomic(&path, &json, 0o600)?;
        Ok(path)
    }

    /// The answer an earlier pass of this boot kept for `platform` ([`boot_id`]); None when
    /// there is none, or it is another platform's or another boot's.
    pub fn provider_answer(&self, platform: &str) -> Result<Option<ProviderAnswer>> {
        let path = self.provider_answer_path();
        let b = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let a: ProviderAnswer = serde_json::from_slice(&b).with_context(|| {
            format!(
                "decoding {} (the platform's answer kept by an earlier pass; remove it to ask the platform again)",
                path.display()
            )
        })?;
        if a.platform != platform {
            log::info!(
                "{}: kept for platform {}, not {platform}: not taken",
                path.display(),
                a.platform
            );
            return Ok(None);
        }
        if a.boot_id != boot_id() {
            log::info!("{}: kept in another boot: not taken", path.display());
            return Ok(None);
        }
        Ok(Some(a))
    }
}

/// A read-only, private mapping of a whole file of the state directory.
struct Mapped {
    ptr: std::ptr::NonNull<std::ffi::c_void>,
    len: usize,
}

impl Mapped {
    /// None when the file is empty or cannot be mapped (the caller reads it instead).
    fn new(file: &std::fs::File) -> Option<Mapped> {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap};
        let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
        let nz = std::num::NonZeroUsize::new(len)?;
        // SAFETY: a fresh private read-only mapping of a regular file we opened; no other
        // memory is affected. The state directory's files are replaced by rename, never
        // rewritten in place (util::write_atomic), so the mapped inode does not change under us.
        let ptr = unsafe {
            mmap(
                None,
                nz,
                ProtFlags::PROT_READ,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_POPULATE,
                file,
                0,
            )
        }
        .ok()?;
        Some(Mapped { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u8>(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference to it outlives `self`.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use runtime::util::TestDir as Tmp;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn provider_answer_is_kept_for_its_platform_and_boot() {
        let t = Tmp::new("provider-answer");
        let s = StateDir::new(&t.0);
        assert_eq!(s.provider_answer("hyperv").unwrap(), None);
        let a = ProviderAnswer {
            platform: "hyperv".into(),
            boot_id: boot_id(),
            config: Some(AnsweredConfig {
                source: "hyperv KVP".into(),
                bytes: b"{\"secret\": 1}".to_vec(),
            }),
            files: vec![ProviderFile {
                path: "/var/lib/hyperv/.kvp_pool_0".into(),
                mode: 0o600,
                contents: vec![0, 255],
            }],
        };
        s.write_provider_answer(&a).unwrap();
        assert_eq!(mode(&s.provider_answer_path()), 0o600);
        assert_eq!(s.provider_answer("hyperv").unwrap(), Some(a.clone()));
        assert_eq!(s.provider_answer("zvm").unwrap(), None);
        // "No config" is an answer too.
        let none = ProviderAnswer {
            config: None,
            files: Vec::new(),
            ..a.clone()
        };
        s.write_provider_answer(&none).unwrap();
        assert_eq!(s.provider_answer("hyperv").unwrap(), Some(none));
        let other_boot = ProviderAnswer {
            boot_id: "another".into(),
            ..a
        };
        s.write_provider_answer(&other_boot).unwrap();
        assert_eq!(s.provider_answer("hyperv").unwrap(), None);
        std::fs::write(s.provider_answer_path(), "{").unwrap();
        let e = s.provider_answer("hyperv").unwrap_err();
        assert!(format!("{e:#}").contains("remove it"), "{e:#}");
    }

    #[test]
    fn provider_files_round_trip() {
        let t = Tmp::new("provider-files");
        let s = StateDir::new(&t.0);
        assert_eq!(s.provider_files().unwrap(), []);
        let files = vec![ProviderFile {
            path: "/var/lib/hyperv/.kvp_pool_0".into(),
            mode: 0o600,
            contents: vec![0, 1, 2, 255],
        }];
        s.write_provider_files(&files).unwrap();
        assert_eq!(mode(&t.0.join(PROVIDER_FILES)), 0o600);
        assert_eq!(s.provider_files().unwrap(), files);
        s.write_provider_files(&[]).unwrap();
        assert!(!t.0.join(PROVIDER_FILES).exists());
        s.write_provider_files(&[]).unwrap();
        std::fs::write(
            t.0.join(PROVIDER_FILES),
            r#"[{"path":"rel","mode":384,"contents":""}]"#,
        )
        .unwrap();
        assert!(s.provider_files().is_err());
    }

    #[test]
    fn rendered_config_round_trip() {
        let t = Tmp::new("rendered");
        let s = StateDir::new(&t.0);
        let err = format!("{:#}", s.read_rendered().unwrap_err());
        assert!(err.contains("run the fetch stage first"), "{err}");
        let c = config::parse(
            br#"{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a"}]}}"#,
        )
        .unwrap()
        .config;
        let p = s.write_rendered(&c).unwrap();
        assert_eq!(p, t.0.join("config.json"));
        assert_eq!(mode(&p), 0o600);
        let back = s.read_rendered().unwrap();
        assert_eq!(back.storage.files[0].path, "/a");
        std::fs::write(&p, b"{").unwrap();
        let err = format!("{:#}", s.read_rendered().unwrap_err());
        assert!(
            err.contains("rendered config") && err.contains("is invalid"),
            "{err}"
        );
    }

    #[test]
    fn fetch_record_and_neednet() {
        let t = Tmp::new("fetch");
        let s = StateDir::new(&t.0);
        assert_eq!(s.user_config_provided(), None);
        let r = FetchRecord {
            user_config_provided: true,
            source: "file /x".into(),
            platform: None,
            configs: vec![Fetched {
                kind: "user".into(),
                source: "file /x".into(),
                sha512: "00".into(),
            }],
            served: Some(Served {
                pool: Some("worker".into()),
                auth: Some("Bearer tok_never_in_fetch_json".into()),
                report_url: Some("http://h/report?token=tok_query_secret".into()),
                ..Default::default()
            }),
        };
        s.write_fetch_record(&r).unwrap();
        assert_eq!(mode(&t.0.join("fetch.json")), 0o644);
        let text = std::fs::read_to_string(t.0.join("fetch.json")).unwrap();
        // The report URL whole in its own 0600 file; fetch.json shows it without its query.
        assert!(
            text.contains("\"reportUrl\": \"http://h/report?…\"") && !text.contains("tok_query"),
            "{text}"
        );
        assert_eq!(mode(&t.0.join(REPORT_URL)), 0o600);
        assert_eq!(
            s.report_url().as_deref(),
            Some("http://h/report?token=tok_query_secret")
        );
        assert!(text.contains("\"userConfigProvided\": true"), "{text}");
        // The token goes to its own 0600 file, never into the record.
        assert!(
            !text.contains("tok_never") && text.contains("worker"),
            "{text}"
        );
        s.write_report_auth(Some("Bearer tok_x")).unwrap();
        assert_eq!(mode(&t.0.join(REPORT_AUTH)), 0o600);
        assert_eq!(s.report_auth().as_deref(), Some("Bearer tok_x"));
        assert_eq!(s.read_fetch_record().unwrap().configs[0].kind, "user");
        assert_eq!(s.user_config_provided(), Some(true));

        s.clear_neednet().unwrap();
        let m = s.set_neednet().unwrap();
        assert_eq!(m, t.0.join("neednet"));
        assert_eq!(std::fs::read(&m).unwrap(), b"");
        assert_eq!(mode(&m), 0o644);
        s.clear_neednet().unwrap();
        assert!(!m.exists());
    }

    #[test]
    fn luks_records_and_keys() {
        let t = Tmp::new("luks");
        let s = StateDir::new(&t.0);
        assert!(s.luks_volumes().unwrap().is_empty());
        let rec = |name: &str, key_file: bool| LuksRecord {
            name: name.into(),
            uuid: format!("u-{name}"),
            key_file,
            discard: false,
            netdev: !key_file,
        };
        s.save_luks(&rec("zeta", true), Some(&[0, 1, 2, 255]))
            .unwrap();
        s.save_luks(&rec("alpha", false), None).unwrap();
        assert_eq!(mode(&t.0.join("luks")), 0o700);
        assert_eq!(mode(&t.0.join("luks/zeta.key")), 0o600);
        assert_eq!(mode(&t.0.join("luks/zeta.json")), 0o600);
        assert!(!t.0.join("luks/alpha.key").exists());
        let v = s.luks_volumes().unwrap();
        let names: Vec<&str> = v.iter().map(|v| v.record.name.as_str()).collect();
        assert_eq!(names, ["alpha", "zeta"]);
        assert_eq!(v[0].key, None);
        assert_eq!(v[1].key.as_deref(), Some(&[0u8, 1, 2, 255][..]));
        assert!(!format!("{v:?}").contains("255"));
        // A recorded key file that is missing, or a bad name: refused.
        std::fs::remove_file(t.0.join("luks/zeta.key")).unwrap();
        assert!(s.luks_volumes().is_err());
        std::fs::remove_file(t.0.join("luks/zeta.json")).unwrap();
        std::fs::write(
            t.0.join("luks/bad.json"),
            serde_json::to_vec(&rec("../x", false)).unwrap(),
        )
        .unwrap();
        assert!(s.luks_volumes().is_err());
    }
}

/// A URL as the fetch record shows it: no userinfo, no query (`?…`), a data URL as `data:…`
/// (as `report::redact::url`, which sits a layer above this one).
fn shown_url(u: &str) -> String {
    if u.starts_with("data:") {
        return "data:…".into();
    }
    let mut u = u.to_string();
    if let Some(s) = u.find("://") {
        let rest = &u[s + 3..];
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..end].rfind('@') {
            u = format!("{}{}", &u[..s + 3], &rest[at + 1..]);
        }
    }
    match u.find('?') {
        Some(q) => format!("{}?…", &u[..q]),
        None => u,
    }
}

#[cfg(test)]
mod shown_url_tests {
    #[test]
    fn no_userinfo_no_query() {
        assert_eq!(
            super::shown_url("http://u:p@h:1/report?token=x"),
            "http://h:1/report?…"
        );
        assert_eq!(super::shown_url("/report?token=x"), "/report?…");
        assert_eq!(super::shown_url("data:,x"), "data:…");
    }
}
