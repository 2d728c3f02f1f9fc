//! How reports reach the store: the one place that decides how many writer threads hand
//! reports to it and how many queued reports go into one commit ([`Batching`]). A store
//! says only what its commits can take ([`Commits`], a fact of the backend); the server's
//! writers (`crate::fleet`) follow the policy made of it, and a store commits each batch it
//! is handed as it comes (`Records::record_batch`), with no batching of its own.

/// What a store's commits can take, as the store knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commits {
    /// Whether commits of different callers run at once: etcd's do (each is a round trip to
    /// the cluster); redb's write transactions, and the in-memory store's lock, run one at
    /// a time.
    pub concurrent: bool,
    /// Reports one commit takes at most (etcd: what fits its transaction's operation
    /// limit); None: any number.
    pub max_reports: Option<usize>,
}

/// How the server's writers hand reports to a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Writer threads, each with one batch in flight.
    pub writers: usize,
    /// Queued reports handed to the store in one batch (one commit) at most: a writer takes
    /// what has queued, up to this many.
    pub reports: usize,
}

/// Reports in one batch at most where the store takes any number: one commit (one fsync for
/// the embedded store) records a herd's reports that queued while the last one committed
/// (measured in docs/reports.md, "The stores": 2.9 ms a report one at a time, 0.08 ms with
/// 64 concurrent senders), and a batch holds a bounded part of the queue.
pub const REPORTS: usize = 512;

/// Writer threads where commits run at once (the etcd store): enough batches in flight to
/// keep the cluster's round trips overlapped; the etcd store keeps a connection for each.
pub const CONCURRENT_WRITERS: usize = 16;

impl Batching {
    /// The policy for a store whose commits are `c`: one writer taking whatever has queued
    /// (up to [`REPORTS`]) where commits run one at a time, so reports that arrive while one
    /// commits share the next (group commit) and writers never wait on each other;
    /// [`CONCURRENT_WRITERS`] writers where they run at once; never more reports in a batch
    /// than one commit takes.
    pub fn for_commits(c: Commits) -> Batching {
        Batching {
            writers: if c.concurrent { CONCURRENT_WRITERS } else { 1 },
            reports: c.max_reports.map_or(REPORTS, |m| m.clamp(1, REPORTS)),
        }
    }

    /// How many of `queued` reports the next batch takes (one at least, when one waits).
    pub fn take(&self, queued: usize) -> usize {
        queued.min(self.reports.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_follows_what_commits_take() {
        let cases = [
            // (concurrent, max_reports) -> (writers, reports)
            ((false, None), (1, REPORTS)),
            ((true, Some(32)), (CONCURRENT_WRITERS, 32)),
            ((false, Some(4096)), (1, REPORTS)),
            ((true, Some(0)), (CONCURRENT_WRITERS, 1)),
        ];
        for ((concurrent, max_reports), (writers, reports)) in cases {
            let b = Batching::for_commits(Commits {
                concurrent,
                max_reports,
            });
            assert_eq!(
                b,
                Batching { writers, reports },
                "{concurrent} {max_reports:?}"
            );
        }
        let b = Batching::for_commits(Commits {
            concurrent: true,
            max_reports: Some(32),
        });
        assert_eq!((b.take(0), b.take(5), b.take(1000)), (0, 5, 32));
    }
}
