//! Platform providers: where a platform keeps the user config when neither the command line
//! nor the kernel command line names one. One module per provider behind [`Provider`].

pub mod file;
pub mod metal;
pub mod qemu;

use anyhow::{Result, bail};

use crate::fetch::Fetcher;

/// A config found by a provider: its bytes and a description of where it came from.
pub struct Found {
    pub bytes: Vec<u8>,
    pub source: String,
}

pub trait Provider {
    fn name(&self) -> &'static str;
    /// The user config, or None when the platform has none.
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>>;
}

/// The provider for `--platform NAME`.
pub fn provider(name: &str) -> Result<Box<dyn Provider>> {
    Ok(match name {
        "file" => Box::new(file::File),
        "metal" => Box::new(metal::Metal),
        "qemu" => Box::new(qemu::Qemu),
        other => bail!("unsupported platform {other:?} (supported: file, metal, qemu)"),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_platforms() {
        for p in ["file", "metal", "qemu"] {
            assert_eq!(super::provider(p).unwrap().name(), p);
        }
        assert!(super::provider("aws-nope").is_err());
    }
}
