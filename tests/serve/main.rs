//! Integration tests: `agent serve` over real sockets on 127.0.0.1: HTTP, TLS, tokens, sources,
//! Butane pools, OpenShift, network boot, the fleet (reports, inventory, the page in a browser),
//! limits, replicas and the Kubernetes manifests.
//!
//! One test binary (`cargo test --test serve`); each file below is a module of it.

#[path = "../support/mod.rs"]
mod support;

// The real etcd cluster of the serve crate's inventory tests.
#[path = "../../crates/serve/tests/inventory_support/etcd.rs"]
mod etcd_cluster;

mod api;
mod boot;
mod butane;
mod deploy;
mod fleet;
mod http;
mod limits;
mod openshift;
mod page;
mod replicas;
mod rollout;
mod source;
mod tls;
mod tokens;
