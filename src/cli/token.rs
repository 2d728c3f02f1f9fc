//! `agent token` and `agent pointer`: their flags, handed to [`serve::tokens::cmd`] and
//! [`serve::tokens::pointer`] as plain values.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};

use super::serve::parse_duration;
use serve::tokens::{self, cmd as tokens_cmd, pointer};

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(Debug, Args)]
pub struct TokenStoreArgs {
    /// Config source directory (the pools; with --token-key).
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// The server's --state-dir: its token store is STATE_DIR/tokens.
    #[arg(
        long,
        default_value = "/var/lib/agent-serve",
        conflicts_with = "token_dir"
    )]
    pub state_dir: PathBuf,
    /// The server's --token-dir, where it was given (overrides STATE_DIR/tokens).
    #[arg(long, conflicts_with = "token_key")]
    pub token_dir: Option<PathBuf>,
    /// The servers' --token-key: tokens are computed from it and the source's configs.
    #[arg(long, requires = "source")]
    pub token_key: Option<PathBuf>,
    /// The servers' --token-ttl (with --token-key; it sets the rotation epochs).
    #[arg(long, default_value = "11h", value_parser = parse_duration)]
    pub token_ttl: Duration,
}

impl TokenStoreArgs {
    fn tokens(&self) -> Result<tokens_cmd::Tokens> {
        match (&self.token_key, &self.token_dir, &self.source) {
            (Some(k), _, Some(s)) => Ok(tokens_cmd::Tokens::Derived {
                key: Box::new(tokens::Key::from_file(k)?),
                // The skew only widens what servers accept; it does not change tokens.
                schedule: tokens::Schedule::new(self.token_ttl.as_secs(), 0),
                source: s.clone(),
            }),
            (Some(_), _, None) => bail!("--token-key needs --source (the configs it signs)"),
            (None, Some(d), _) => Ok(tokens_cmd::Tokens::Store(tokens::Store::new(d))),
            (None, None, _) => Ok(tokens_cmd::Tokens::Store(tokens::Store::new(
                self.state_dir.join("tokens"),
            ))),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TokenAction {
    /// List tokens (hash prefix, config, created, expires); --reveal prints current tokens.
    Show {
        #[command(flatten)]
        store: TokenStoreArgs,
        /// Only this pool.
        #[arg(long)]
        pool: Option<String>,
        /// Print each pool's current token in clear.
        #[arg(long)]
        reveal: bool,
        /// One JSON document: {"tokens": [{pool, role, hash, config, created, expires,
        /// state}], "revealed": {pool: token}} (times in RFC 3339).
        #[arg(long)]
        json: bool,
    },
    /// Issue a new current token for a pool (the previous one stays valid until its TTL).
    Rotate {
        #[command(flatten)]
        store: TokenStoreArgs,
        #[arg(long)]
        pool: String,
        /// Lifetime of the new token.
        #[arg(long, default_value = "11h", value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Revoke every token of a pool at once.
    Revoke {
        #[command(flatten)]
        store: TokenStoreArgs,
        #[arg(long)]
        pool: String,
    },
}

#[derive(Debug, Args)]
pub struct PointerArgs {
    /// Pool whose token to use.
    #[arg(long)]
    pub pool: String,
    /// URL of the server's /ignition endpoint (e.g. https://mcs.example:22623/ignition).
    #[arg(long)]
    pub url: String,
    /// CA certificate (PEM) the machine must trust for the server.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    #[command(flatten)]
    pub store: TokenStoreArgs,
}

/// `agent token ...`
pub fn token_main(a: TokenArgs) -> Result<()> {
    match a.action {
        TokenAction::Show {
            store,
            pool,
            reveal,
            json,
        } => tokens_cmd::show_tokens(&store.tokens()?, pool.as_deref(), reveal, json),
        TokenAction::Rotate { store, pool, ttl } => {
            let t = store.tokens()?;
            tokens_cmd::rotate(tokens_cmd::store_only(&t, "rotate")?, &pool, ttl)
        }
        TokenAction::Revoke { store, pool } => {
            let t = store.tokens()?;
            tokens_cmd::revoke(tokens_cmd::store_only(&t, "revoke")?, &pool)
        }
    }
}

/// `agent pointer ...`
pub fn pointer_main(a: PointerArgs) -> Result<()> {
    pointer::print(&a.store.tokens()?, &a.pool, &a.url, a.ca.as_deref())
}
