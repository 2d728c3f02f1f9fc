//! A small, strict HTTP/1.1 server on epoll, with rustls for TLS. It knows nothing of the
//! application it serves: that is the [`Handler`].
//!
//! A few event-loop threads (`threads`, one per CPU by default) own every connection; every
//! socket is non-blocking, so no thread ever waits on one client. A connection that has not
//! sent anything costs a socket and a small struct, not a thread, so a flood of silent
//! connections cannot exhaust threads or memory. Each loop accepts from the shared listeners
//! (`EPOLLEXCLUSIVE`), reads until a whole request head is there, answers it from the
//! handler (which never blocks on the network), and writes the response as far as the socket
//! takes it, finishing later on `EPOLLOUT`. Keep-alive and pipelining are supported.
//!
//! Its parts, each readable alone:
//! - `head`: finding the end of a request head as it arrives and parsing it ([`Request`]);
//! - `response`: [`Response`] and [`Body`], the response head, shared bodies in sealed
//!   memfds ([`FileBody`]) and each loop's cache of whole responses, sent with sendfile(2);
//! - `admission`: the [`Limits`], the connection counts ([`ConnStats`]), and eviction at
//!   `max_connections` (the oldest connection waiting for a head, else the slowest response);
//!   what a connection holds of them is a value that gives it back when dropped;
//! - `transport`: a connection's plain TCP or TLS behind one type (reading plaintext,
//!   flushing handshake records, writing a response, the close_notify);
//! - `event_loop`: the [`Server`], its epoll loops, accepting and handing connections over,
//!   each connection's state machine (its phase, reading a request or writing a response,
//!   holds that phase's state), and what each loop owns (no thread-local state: a loop
//!   makes its own buffers, caches, pipes and the [`Handler`]'s per-loop value and passes
//!   them down);
//! - `pipes`: hot responses sent from per-loop pipes; `tls`: rustls with certificate reload.
//!
//! Limits (documented in docs/serve.md):
//! - `header_timeout` runs from accept (TLS handshake included) until the whole first head is
//!   read, and from the first byte of each later head; a silent connection is closed then, a
//!   partial head is answered 408.
//! - `idle_timeout` between requests on a keep-alive connection.
//! - The minimum send rate: a response in progress must have `min_send_rate` bytes a second
//!   acknowledged by its client in every `send_window` (the socket's unacknowledged bytes do
//!   not count), or the connection is reset.
//! - `max_connections` is global. At the limit the connection that has waited longest without
//!   a whole request head (new and silent, mid-handshake, slow headers, idle keep-alive,
//!   lingering after a close) is evicted to make room: silent connections, from one address
//!   or many, cannot crowd out clients that send requests. When there is none, the slowest
//!   response waiting for its client is evicted. Only when neither is left is a new one
//!   refused, in the listener's own protocol: a plain 503, or over TLS a 503 after the
//!   handshake (a bounded number at a time; beyond that a bare close).
//! - Memory per connection is bounded whatever the response: bodies are shared, never
//!   copied per connection; TLS is encrypted one record at a time as the socket takes it.
//! - `max_connections_per_address` (0 = off) refuses connections over a per-address cap. A
//!   connection stops counting against its address once it has sent its last response (while
//!   it lingers, below); lingering connections have the same cap of their own, beyond which
//!   the connection is closed at once.
//! - Heads are checked as they arrive: a malformed request line or a bare LF/CR line ending is
//!   answered 400 at once; more than `max_header_bytes` → 431; more than `max_headers` → 431.
//!   Only GET and HEAD carry meaning here: a request with a body is answered and the
//!   connection closed (the body is never read).
//!
//! After a response that closes the connection the server half-closes and drains what the
//! client still sends for a moment ("lingering close"), so the client reads the response
//! instead of a reset.

mod admission;
mod event_loop;
mod head;
mod pipes;
mod response;
pub mod tls;
mod transport;

pub use admission::{ConnStats, Limits};
pub use event_loop::{Handler, LOOP_FDS, Listener, Server, bind, stop_listener};
pub use head::{Request, parse_head};
pub use response::{Answer, Body, Deferred, FileBody, Labels, Reply, Response, http_date, reason};
