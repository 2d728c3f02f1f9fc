//! A small bounded pool of threads for requests whose answer waits on the inventory store
//! besides reports (network boot's `/ipxe` and `/machine-config`: a token written or
//! spent, a machine's record updated: a few fsyncs, or an etcd round trip that may wait out
//! a failover). The event loop parks such a request ([`Response::later`]) and a job here
//! answers it, so no event loop ever waits for the store (reports have their own writers,
//! `fleet.rs`).
//!
//! [`Response::later`]: crate::http::Response::later

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, PoisonError};

/// Network-boot requests waiting for a job thread at most; beyond it one is answered 503
/// with Retry-After (docs/serve.md, "Machines and network boot").
pub const BOOT_QUEUE: usize = 256;
/// Threads answering them (started on the first such request).
pub const BOOT_THREADS: usize = 4;
/// Jobs one client address may have queued or running at once; beyond it its next one is
/// refused as when the queue is full, so one client cannot take the queue from the rest.
pub const PER_CLIENT: usize = 16;

/// A job: called with `true` when it was refused because the queue was full (it answers
/// 503 then), `false` when a thread runs it.
pub type Job = Box<dyn FnOnce(bool) + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<(Job, Option<IpAddr>)>,
    /// Jobs queued or running, by client.
    per_client: HashMap<IpAddr, usize>,
}

pub struct Jobs {
    name: &'static str,
    threads: usize,
    max: usize,
    started: Once,
    queue: Mutex<Queue>,
    more: Condvar,
    /// Jobs queued or running.
    waiting: AtomicUsize,
}

impl Jobs {
    pub fn new(name: &'static str, threads: usize, max: usize) -> Arc<Jobs> {
        Arc::new(Jobs {
            name,
            threads: threads.max(1),
            max,
            started: Once::new(),
            queue: Mutex::new(Queue::default()),
            more: Condvar::new(),
            waiting: AtomicUsize::new(0),
        })
    }

    /// Jobs queued or running now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Queues `job` of `client`, or calls it at once with `true` when [`BOOT_QUEUE`] jobs
    /// wait, or [`PER_CLIENT`] of this client's.
    pub fn push(self: &Arc<Self>, job: Job, client: Option<IpAddr>) {
        self.started.call_once(|| {
            for i in 0..self.threads {
                let me = self.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("{}-{i}", self.name))
                    .spawn(move || me.run());
                if let Err(e) = spawned {
                    // The threads that did start take the queue; with none, the requests
                    // wait for the answer time-out (503).
                    log::error!("starting a {} thread: {e}", self.name);
                }
            }
        });
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = client.map_or(0, |c| q.per_client.get(&c).copied().unwrap_or(0));
        if q.jobs.len() >= self.max || mine >= PER_CLIENT {
            drop(q);
            return job(true);
        }
        if let Some(c) = client {
            *q.per_client.entry(c).or_insert(0) += 1;
        }
        q.jobs.push_back((job, client));
        self.waiting.fetch_add(1, Ordering::Relaxed);
        drop(q);
        self.more.notify_one();
    }

    fn run(&self) {
        loop {
            let (job, client) = {
                let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    if let Some(j) = q.jobs.pop_front() {
                        break j;
                    }
                    q = self.more.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
            };
            job(false);
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            if let Some(c) = client {
                let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(n) = q.per_client.get_mut(&c) {
                    *n -= 1;
                    if *n == 0 {
                        q.per_client.remove(&c);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn jobs_run_on_their_threads_and_a_full_queue_refuses() {
        // One thread held by a job that waits: the queue fills behind it.
        let jobs = Jobs::new("test-jobs", 1, 2);
        let (hold_tx, hold_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<(usize, bool)>();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        jobs.push(
            Box::new(move |refused| {
                assert!(!refused);
                started_tx.send(()).unwrap();
                hold_rx.recv().unwrap();
            }),
            None,
        );
        started_rx.recv().unwrap();
        for i in 0..3 {
            let tx = done_tx.clone();
            jobs.push(
                Box::new(move |refused| tx.send((i, refused)).unwrap()),
                None,
            );
        }
        // The third waiting job found the queue (2) full: refused at once, on this thread.
        assert_eq!(done_rx.recv().unwrap(), (2, true));
        hold_tx.send(()).unwrap();
        let mut rest = vec![done_rx.recv().unwrap(), done_rx.recv().unwrap()];
        rest.sort();
        assert_eq!(rest, vec![(0, false), (1, false)]);
    }
}
