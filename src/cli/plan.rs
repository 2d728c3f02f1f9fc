//! `agent plan`: print the disks stage's plan without touching any disk.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;

use crate::stages;

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Config to plan for; default: the rendered config in the state directory.
    #[arg(long)]
    pub config_file: Option<PathBuf>,
    /// Where the fetch stage left the rendered config.
    #[arg(long, default_value = "/run/agent")]
    pub state_dir: PathBuf,
    /// Longest wait for a device node (seconds, fractions allowed); default 30.
    #[arg(long, value_name = "SECS", value_parser = super::run::parse_seconds_arg)]
    pub device_timeout: Option<std::time::Duration>,
    /// Print the plan as one JSON document (`disks`, `raid`, `luks`, `filesystems`).
    #[arg(long)]
    pub json: bool,
    /// With --disk-* flags: print which disk `agent install` would choose, and why each
    /// candidate does or does not match (then the disks plan only with --config-file).
    #[command(flatten)]
    pub selector: super::SelectorArgs,
}

fn read_stdin() -> Result<Vec<u8>, String> {
    let mut b = Vec::new();
    std::io::stdin()
        .read_to_end(&mut b)
        .map_err(|e| format!("reading standard input: {e}"))?;
    Ok(b)
}

pub fn plan(a: PlanArgs) -> anyhow::Result<()> {
    if !a.selector.selector().is_empty() {
        let choice = a.selector.choose()?;
        print!("install disk candidates:\n{choice}");
        let disk = choice.one()?;
        println!(
            "install disk: /dev/{} ({})",
            disk.name,
            crate::install::select::stable_path(&disk.name).display()
        );
        if a.config_file.is_none() {
            return Ok(());
        }
    }
    // Default: the rendered config the fetch stage leaves in the state directory.
    let config = match &a.config_file {
        None => crate::state::StateDir::new(&a.state_dir).read_rendered()?,
        Some(path) => {
            let bytes = if path.as_os_str() == "-" {
                read_stdin().map_err(anyhow::Error::msg)?
            } else {
                std::fs::read(path)
                    .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?
            };
            // A Butane config is translated first, as `agent validate` takes it.
            let bytes = super::config_file_as_ignition(
                bytes,
                path,
                runtime::limits::DEFAULT_MAX_CONFIG_SIZE,
            )
            .map_err(anyhow::Error::msg)?;
            spec::config::parse(&bytes)
                .map(|p| p.config)
                .map_err(|r| anyhow::anyhow!("config {} is invalid:\n{r}", path.display()))?
        }
    };
    let timeout = a
        .device_timeout
        .unwrap_or(crate::endpoints::DEFAULT_DEVICE_TIMEOUT);
    runtime::logging::set_stage("disks");
    let p = stages::disks::plan(&config, timeout)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&p.to_json())?);
    } else {
        print!("{p}");
    }
    Ok(())
}
