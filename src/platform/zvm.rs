//! `zvm`: the config is a spool file of type `ign` in the z/VM reader (virtual device
//! `000c`), e.g. punched there with `vmur punch -r -u GUEST -N config.ign config.ign` or
//! `SENDFILE`. Read as Ignition does it, with the s390-tools commands: load the `vmur`
//! module, bring the reader online (`chccwdev -e 000c`; if that fails, `cio_ignore -r 000c`
//! first), let udev settle, list the reader (`vmur list`), and receive the first file whose
//! type is `ign` (`vmur receive -f SPOOLID NAME.ign`; receiving takes it out of the reader).
//! NUL padding at either end is dropped. No such file: no config. A step that fails (not
//! z/VM, tools missing) is an error naming it. The fetch stage keeps what was received for
//! its online pass of the same boot (the state directory's provider answer): the reader is
//! asked once.
//!
//! `vmur list` prints a header and one line per spool file:
//! `ORIGINID FILE CLASS RECORDS CPY HOLD DATE TIME NAME TYPE DIST`, where CLASS is two
//! fields (`A PUN`): the spool id is the second field, the name and type the tenth and
//! eleventh. As Ignition, listing stops at the first empty line and skips lines of fewer
//! than eleven fields.

use std::path::Path;

use anyhow::{Context, Result};

use super::{Found, Provider, userdata};
use crate::fetch::Fetcher;
use runtime::limits::read_file_bounded;
use runtime::util::{have_program, run};

/// The reader's device number.
pub const READER: &str = "000c";
/// The file type of a config.
pub const FILE_TYPE: &str = "ign";

/// A spool file of the reader listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolFile {
    pub id: String,
    pub name: String,
    pub ftype: String,
}

/// The spool files of a `vmur list` output, as Ignition reads them.
pub fn spool_files(listing: &str) -> Vec<SpoolFile> {
    let mut out = Vec::new();
    for l in listing.split('\n') {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() <= 1 {
            break;
        }
        if f.len() < 11 {
            continue;
        }
        out.push(SpoolFile {
            id: f[1].to_string(),
            name: f[9].to_string(),
            ftype: f[10].to_string(),
        });
    }
    out
}

/// The first spool file of type `ign` (the header's TYPE column is "TYPE").
pub fn config_file(listing: &str) -> Option<SpoolFile> {
    spool_files(listing)
        .into_iter()
        .find(|s| s.ftype == FILE_TYPE)
}

/// Brings the reader online as Ignition does.
fn online_reader() -> Result<()> {
    if run("chccwdev", &["-e", READER]).is_err() {
        run("cio_ignore", &["-r", READER])
            .with_context(|| format!("exposing the z/VM reader {READER} (cio_ignore -r)"))?;
        run("chccwdev", &["-e", READER])
            .with_context(|| format!("bringing the z/VM reader {READER} online (chccwdev -e)"))?;
    }
    if have_program("udevadm") {
        run("udevadm", &["settle", "--timeout=120"]).context("waiting for udev to settle")?;
    }
    Ok(())
}

/// Receives spool file `s` into `dir` and returns its contents without NUL padding (None
/// when the received file cannot be read, which Ignition takes as no config).
fn receive(s: &SpoolFile, dir: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    let file = dir.join(format!("{}.{}", s.name, s.ftype));
    let args: [&std::ffi::OsStr; 4] = [
        "re".as_ref(),
        "-f".as_ref(),
        s.id.as_ref(),
        file.as_os_str(),
    ];
    run("vmur", &args).with_context(|| format!("receiving spool file {} from the z/VM reader", s.id))?;
    log::info!("zvm: using the config in spool file {} ({}.{})", s.id, s.name, s.ftype);
    let what = format!("config from z/VM spool file {}", s.id);
    match read_file_bounded(&file, limit, &what) {
        Ok(raw) => Ok(Some(userdata::trim_nul(&raw).to_vec())),
        Err(e) if e.is::<runtime::limits::TooLarge>() => Err(e),
        Err(e) => {
            log::error!("zvm: {e:#}");
            Ok(None)
        }
    }
}

pub struct Zvm;

impl Provider for Zvm {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        run("modprobe", &["vmur"]).context("loading the vmur kernel module (is this a z/VM guest?)")?;
        online_reader()?;
        let listing = run("vmur", &["li"]).context("listing the z/VM reader (vmur li)")?;
        let listing = String::from_utf8_lossy(&listing.stdout);
        let Some(s) = config_file(&listing) else {
            log::info!("zvm: no spool file of type {FILE_TYPE} in the reader: no config");
            return Ok(None);
        };
        let dir = std::env::temp_dir().join(format!("agent-zvm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let got = receive(&s, &dir, f.opts.limits.max_config_size);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(got?.map(|bytes| Found {
            bytes,
            source: format!("z/VM reader spool file {} ({}.{})", s.id, s.name, s.ftype),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `vmur list` output (s390-tools), with a config among other files.
    const LISTING: &str = "\
ORIGINID FILE CLASS RECORDS  CPY HOLD DATE  TIME     NAME      TYPE      DIST
T6360025 0463 V DMP 00020222 001 NONE 06/11 15:07:42 VMDUMP    FILE      T6360025
T6360025 0465 A PUN 00000005 001 NONE 06/11 15:30:52 CONFIG    ign       T6360025
T6360025 0466 A PUN 00000005 001 NONE 06/11 15:31:02 OTHER     ign       T6360025
";

    #[test]
    fn the_listing_is_read_as_ignition_reads_it() {
        let files = spool_files(LISTING);
        // The header has 11 fields too (CLASS is one word there): read as a file of type
        // DIST, which is never a config.
        assert_eq!(files.len(), 4);
        assert_eq!(files[0].ftype, "DIST");
        assert_eq!(
            files[1],
            SpoolFile {
                id: "0463".into(),
                name: "VMDUMP".into(),
                ftype: "FILE".into()
            }
        );
        assert_eq!(
            config_file(LISTING),
            Some(SpoolFile {
                id: "0465".into(),
                name: "CONFIG".into(),
                ftype: "ign".into()
            })
        );
    }

    #[test]
    fn no_ign_file_short_lines_and_empty_lines() {
        let only_dump = LISTING.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(config_file(&only_dump), None);
        assert_eq!(config_file(""), None);
        assert_eq!(config_file("vmur: Reader device is empty\n"), None);
        // Short lines are skipped; an empty (or one-word) line ends the listing.
        let short = format!("a b c\n{}", LISTING.lines().nth(2).unwrap());
        assert_eq!(config_file(&short).unwrap().id, "0465");
        let ended = format!("x\n{}", LISTING.lines().nth(2).unwrap());
        assert_eq!(config_file(&ended), None);
        // The type is compared as Ignition does, exactly.
        assert_eq!(config_file(&LISTING.replace(" ign ", " IGN ")), None);
    }
}
