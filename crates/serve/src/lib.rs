//! `agent serve`: the machine config server (docs/serve.md).
//!
//! - `app`: what a request gets (the router and its handlers, over the server's shared state);
//! - `watch`: the source watcher (generations, the inotify/poll loop, status updates, token
//!   rotation, certificate reload);
//! - `run`: the run loop (listeners, event-loop threads, signals, reload, graceful shutdown),
//!   driven by a plain [`Options`] value (the command line lives in the agent crate's `cli`);
//! - `reading`: the source's files read (regular only, bounded) and errors that never quote
//!   them;
//! - `source`: generation loading from a plain tree, an AtomicWriter volume or a git-sync link;
//! - `render`: etcd index templating, the node-agent file, per-version documents;
//! - `selectors`: the machine files and boot profiles (parse, check, match); `placeholders`:
//!   `{{.key}}` found and filled on a config's tree; `machines`: a generation's machines, boot
//!   assets and per-machine configs; `boot`: network boot (`/boot.ipxe`, `/ipxe`,
//!   `/assets/`, `/machine-config`, one-time tokens);
//! - `accept`: spec version negotiation; `status`: assigned/active/lastKnownGood/error;
//! - `tokens`: bearer tokens (derived from a key per pool+config+epoch, or the legacy store);
//! - `checkpoint`: the `--state-dir` checkpoints (assigned/active/lastKnownGood, old payloads);
//! - `http`: the HTTP/1.1 server (the `http-core` crate) with this server's response
//!   labels; `metrics`: Prometheus text;
//! - `tokens_cmd`: `agent token` (show, rotate, revoke); `pointer`: `agent pointer`;
//! - `options`: [`Options`], what `agent serve` is told.
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
