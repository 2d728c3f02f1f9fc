//! `agent rollout status|pause|resume|promote|abort POOL`: a pool's rollout on the config
//! server (docs/serve.md, "Rollouts"), through its admin listener as `agent machines` does
//! (the admin token proven without being sent).

use anyhow::Result;
use clap::{Args, Subcommand};

use super::machines::{AdminServer, call_admin, enc};

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(flatten)]
    pub admin: AdminServer,
    #[command(subcommand)]
    pub action: RolloutAction,
}

#[derive(Debug, Subcommand)]
pub enum RolloutAction {
    /// The pool's rollout: state, stage, its machines and why it halted.
    Status { pool: String },
    /// Give no more machines the new config (those given it keep it).
    Pause { pool: String },
    /// Go on with a paused rollout.
    Resume { pool: String },
    /// Give every machine the new config from now on (the rollout is complete).
    Promote { pool: String },
    /// Give every machine the previous config from now on.
    Abort { pool: String },
}

pub fn run(a: RolloutArgs) -> Result<()> {
    let (pool, verb) = match &a.action {
        RolloutAction::Status { pool } => (pool, None),
        RolloutAction::Pause { pool } => (pool, Some("pause")),
        RolloutAction::Resume { pool } => (pool, Some("resume")),
        RolloutAction::Promote { pool } => (pool, Some("promote")),
        RolloutAction::Abort { pool } => (pool, Some("abort")),
    };
    // Reading the rollout is a GET, each change a POST.
    let method = if verb.is_some() { "POST" } else { "GET" };
    let path = match verb {
        None => format!("/rollouts/{}", enc(pool)),
        Some(v) => format!("/rollouts/{}/{v}", enc(pool)),
    };
    let v = call_admin(
        &a.admin.server,
        a.admin.admin_token_file.as_deref(),
        method,
        &path,
    )?;
    if a.admin.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let s = |k: &str| v[k].as_str().unwrap_or("-").to_string();
    println!("pool\t{}", s("pool"));
    println!("state\t{}", s("state"));
    println!("stage\t{} ({})", v["stage"], s("step"));
    println!("from\t{}", s("from"));
    println!("to\t{}", s("to"));
    let c = &v["counts"];
    if verb.is_none() {
        println!(
            "machines\t{} given the new config: {} provisioned, {} failed, {} pending",
            c["given"], c["provisioned"], c["failed"], c["pending"]
        );
        for m in v["machines"].as_array().into_iter().flatten() {
            let esc = |k: &str| m[k].as_str().unwrap_or("-").escape_debug().to_string();
            println!("  {}\t{}\t{}", esc("id"), esc("outcome"), esc("error"));
        }
    }
    if let Some(h) = v["halt"].as_object() {
        let hs = |k: &str| {
            h.get(k)
                .and_then(|x| x.as_str())
                .unwrap_or("-")
                .escape_debug()
                .to_string()
        };
        println!(
            "halted\tat {} (stage {}): {}",
            hs("at"),
            h["stage"],
            hs("reason")
        );
        for m in h
            .get("machines")
            .and_then(|m| m.as_array())
            .into_iter()
            .flatten()
        {
            println!(
                "  {}\t{}",
                m["id"].as_str().unwrap_or("-").escape_debug(),
                m["error"].as_str().unwrap_or("-").escape_debug()
            );
        }
    }
    Ok(())
}
