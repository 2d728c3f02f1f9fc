//! Static networking: `agent network-generate` (dracut's `ip=` and friends) and its
//! comparison with systemd-network-generator's recorded answers.

mod diff;
mod generate;
