//! A network namespace of the test's own (`ip netns add agent-PID-N`), with its loopback up
//! and the addresses a platform's metadata service answers on (169.254.169.254,
//! 100.100.100.200, ...) added to it, so that a test server can listen on the platform's real
//! address and the agent, run inside with `ip netns exec`, reach it there. Nothing is sent
//! to those addresses outside the namespace. Dropping the guard deletes the namespace (and
//! with it every address and socket in it), also when the test fails.

use std::net::TcpListener;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use super::faulty_http::Server;
use super::{need, sh};

static SEQ: AtomicU32 = AtomicU32::new(0);

pub struct Netns {
    pub name: String,
}

impl Netns {
    /// A new namespace with `lo` up and each of `addrs` on it as a /32 (IPv6: /128).
    #[track_caller]
    pub fn new(addrs: &[&str]) -> Netns {
        super::root::must_be_root();
        need("ip", "fetch.apt");
        let name = format!(
            "agent-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        sh("ip", &["netns", "add", &name], None);
        // From here on the guard deletes it, whatever fails next.
        let ns = Netns { name };
        sh("ip", &["-n", &ns.name, "link", "set", "lo", "up"], None);
        for a in addrs {
            let cidr = format!("{a}/{}", if a.contains(':') { 128 } else { 32 });
            let mut args = vec!["-n", &ns.name, "addr", "add", &cidr, "dev", "lo"];
            if a.contains(':') {
                // Usable at once: no duplicate address detection (a tentative address cannot
                // be bound).
                args.push("nodad");
            }
            sh("ip", &args, None);
        }
        ns
    }

    /// `ip netns exec NAME PROGRAM`: a command run inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// A TCP listener on `addr` (`169.254.169.254:80`, `[fd00:42::42]:80`) inside the namespace: bound by a thread
    /// that joined the namespace (setns only moves the calling thread); the socket stays in
    /// it, whichever thread accepts.
    #[track_caller]
    pub fn listen(&self, addr: &str) -> TcpListener {
        let path = format!("/run/netns/{}", self.name);
        let addr = addr.to_string();
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
                .unwrap_or_else(|e| panic!("setns {path}: {e}"));
            // An address just added may not be bindable for a moment (EADDRNOTAVAIL while
            // the kernel sets it up): try for up to 5 s.
            let mut tries = 0;
            loop {
                match TcpListener::bind(&addr) {
                    Ok(l) => break l,
                    Err(e) if e.raw_os_error() == Some(nix::libc::EADDRNOTAVAIL) && tries < 50 => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    Err(e) => panic!("bind {addr} in {path}: {e}"),
                }
            }
        })
        .join()
        .expect("binding inside the namespace")
    }

    /// The fault-injecting HTTP server (`support::faulty_http`) on `addr` inside the
    /// namespace.
    #[track_caller]
    pub fn serve(&self, addr: &str) -> Server {
        Server::on(self.listen(addr))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let out = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .output();
        if !matches!(&out, Ok(o) if o.status.success()) {
            eprintln!("deleting network namespace {}: {out:?}", self.name);
        }
    }
}
