//! `agent token` and `agent pointer`: their flags, handed to [`crate::serve::tokens_cmd`] and
//! [`crate::serve::pointer`] as plain values.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};

use super::serve::parse_duration;
use crate::serve::{pointer, tokens, tokens_cmd};

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(Debug, Args)]
pub struct TokenStoreArgs {
    /// Config source directory (tokens in SOURCE/tokens).
    #[arg(long, required_unless_present = "token_dir")]
    pub source: Option<PathBuf>,
    /// Token state directory (overrides SOURCE/tokens).
    #[arg(long)]
    pub token_dir: Option<PathBuf>,
}

impl TokenStoreArgs {
    fn store(&self) -> Result<tokens::Store> {
        match (&self.token_dir, &self.source) {
            (Some(d), _) => Ok(tokens::Store::new(d)),
            (None, Some(s)) => Ok(tokens::Store::new(s.join("tokens"))),
            (None, None) => bail!("give --source or --token-dir"),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TokenAction {
    /// List tokens (hash prefix, created, expires); --reveal prints current plaintext tokens.
    Show {
        #[command(flatten)]
        store: TokenStoreArgs,
        /// Only this pool.
        #[arg(long)]
        pool: Option<String>,
        /// Print each pool's current token in clear.
        #[arg(long)]
        reveal: bool,
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
        } => tokens_cmd::show(&store.store()?, pool.as_deref(), reveal),
        TokenAction::Rotate { store, pool, ttl } => tokens_cmd::rotate(&store.store()?, &pool, ttl),
        TokenAction::Revoke { store, pool } => tokens_cmd::revoke(&store.store()?, &pool),
    }
}

/// `agent pointer ...`
pub fn pointer_main(a: PointerArgs) -> Result<()> {
    pointer::print(&a.store.store()?, &a.pool, &a.url, a.ca.as_deref())
}
