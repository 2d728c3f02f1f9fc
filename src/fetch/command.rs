//! `agent fetch URL --output FILE`: fetch one resource with the same fetcher the stages use
//! (retries, verification, atomic placement). Handy for debugging and for the benchmark. The
//! command line (`crate::cli::fetch`) turns its flags into the resource and options.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::fetcher::Fetcher;
use super::options::Options;
use spec::config::types::Resource;

/// Fetches `r` to the file `output` ("-": standard output), created with `mode`. The CA
/// bundles in `ca_files` (each read whole, at most `opts.limits.max_config_size`) are trusted
/// besides `opts.ca_pems` and the system roots.
pub fn run(
    r: &Resource,
    mut opts: Options,
    ca_files: &[PathBuf],
    output: &Path,
    mode: u32,
) -> Result<()> {
    for f in ca_files {
        opts.ca_pems.push(runtime::limits::read_file_bounded(
            f,
            opts.limits.max_config_size,
            &format!("CA file {}", f.display()),
        )?);
    }
    let f = Fetcher::new(opts);
    let n = if output.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        f.fetch_to(r, &mut lock)?
    } else {
        f.fetch_to_file(r, output, mode)?
    };
    log::info!("fetched {n} bytes to {}", output.display());
    Ok(())
}
