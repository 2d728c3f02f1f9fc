//! Kernel arguments: the changes are handed to a distro helper named on the command line
//! (`--kargs-helper`), which is run as
//! `HELPER --root <root> [--should-exist ARG]... [--should-not-exist ARG]...`.

use std::path::Path;

use anyhow::{Result, bail};
use log::info;

use spec::config::types::KernelArguments;

/// Runs the helper when the config asks for kernel argument changes.
pub fn apply(k: &KernelArguments, root: &Path, helper: Option<&Path>) -> Result<()> {
    if k.is_empty() {
        return Ok(());
    }
    let Some(helper) = helper else {
        bail!(
            "the config asks for kernel argument changes (shouldExist {:?}, shouldNotExist {:?}) \
             but no kernel argument helper is configured (--kargs-helper)",
            k.should_exist,
            k.should_not_exist
        );
    };
    let args = helper_args(k, root);
    runtime::util::run(&helper.to_string_lossy(), &args)?;
    info!(
        "kernel arguments: {} to add, {} to remove, handed to {}",
        k.should_exist.len(),
        k.should_not_exist.len(),
        helper.display()
    );
    Ok(())
}

pub fn helper_args(k: &KernelArguments, root: &Path) -> Vec<String> {
    let mut a = vec!["--root".to_string(), root.to_string_lossy().into_owned()];
    for s in &k.should_exist {
        a.extend(["--should-exist".into(), s.clone()]);
    }
    for s in &k.should_not_exist {
        a.extend(["--should-not-exist".into(), s.clone()]);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_helper_is_an_error_only_with_changes() {
        let root = Path::new("/r");
        assert!(apply(&KernelArguments::default(), root, None).is_ok());
        let k = KernelArguments {
            should_exist: vec!["quiet".into()],
            should_not_exist: vec!["debug".into()],
        };
        let e = apply(&k, root, None).unwrap_err().to_string();
        assert!(e.contains("--kargs-helper"), "{e}");
        assert_eq!(
            helper_args(&k, root),
            [
                "--root",
                "/r",
                "--should-exist",
                "quiet",
                "--should-not-exist",
                "debug"
            ]
        );
    }
}
