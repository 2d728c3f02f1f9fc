//! `agent serve`: the machine config server (docs/serve.md).
//!
//! Folders by concern, each importing only from those below it:
//! - `source`: generations read from the source (plain tree, AtomicWriter volume, git-sync
//!   link): `reading` (bounded, regular files; errors that never quote them), `render`
//!   (per-version documents, the etcd index, the node-agent file), `selectors`,
//!   `placeholders` and `machines` (machine files, boot profiles, per-machine configs),
//!   `accept` (spec version negotiation), `openshift` and `spec2` (OpenShift mode);
//! - `tokens`: bearer tokens (derived from a key per pool+config+epoch, or the legacy store);
//!   `state`: the server's token state ([`tokens::state::Tokens`]); `cmd`: `agent token`;
//!   `pointer`: `agent pointer`;
//! - `generations`: assigned/active/lastKnownGood (`status`), the `--state-dir` checkpoints
//!   (`checkpoint`) and the watcher (`watch`), which owns the generation state
//!   ([`generations::Generations`]);
//! - `fleet`: machine reports, network boot (`boot`, answered by `jobs` off the event loop)
//!   and the inventory (`inventory`);
//! - `admin`: the admin listener (its API, `auth`, the `page`);
//! - `app`: the machine-facing listeners' router ([`App`]) and the run loop (`run`), driven by
//!   a plain [`Options`] value (the command line lives in the agent crate's `cli`);
//! - `routes`: the route tables' shape; `http`: the HTTP/1.1 server (the `http-core` crate)
//!   with this server's response labels; `metrics`: Prometheus text; `files`: private atomic
//!   writes; `options`: [`Options`], what `agent serve` is told.
//!
//! Default spec version (no usable `Accept`): the **oldest** 3.x version that can express the
//! pool's config. Every Ignition that speaks that version or any newer 3.x reads it, so old
//! and new clients alike get a config they understand.

pub mod admin;
pub mod app;
pub mod files;
pub mod fleet;
pub mod generations;
pub mod http;
pub mod metrics;
pub mod options;
pub mod routes;
pub mod source;
pub mod tokens;

pub use self::app::App;
pub use self::app::run::run;
pub use self::options::Options;
pub use self::tokens::pointer::pointer_config;
