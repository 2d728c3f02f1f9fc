//! The machine records a store's writers wrote last, kept decoded so the next report of the
//! same machine (a boot's reports come one after the other) is applied without reading and
//! parsing its record again. Bounded: [`RECENT`] records, the oldest put forgotten first.

use std::collections::{HashMap, VecDeque};

/// Records kept at most (a few KiB each: a few tens of MiB at most).
pub const RECENT: usize = 16 * 1024;

/// Records by machine id, with what the store needs to write over them (the embedded store:
/// nothing; etcd: the record's `mod_revision`).
pub struct Recent<T> {
    /// Each with the number of the put that left it.
    map: HashMap<String, (T, u64)>,
    /// Puts, oldest first: (id, number); an entry whose number is not its id's in `map`
    /// any more is stale.
    order: VecDeque<(String, u64)>,
    puts: u64,
    cap: usize,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent::new(RECENT)
    }
}

impl<T> Recent<T> {
    pub fn new(cap: usize) -> Recent<T> {
        Recent {
            map: HashMap::new(),
            order: VecDeque::new(),
            puts: 0,
            cap: cap.max(1),
        }
    }

    /// Takes machine `id`'s record out (the caller puts the new one back once written).
    pub fn take(&mut self, id: &str) -> Option<T> {
        self.map.remove(id).map(|(v, _)| v)
    }

    pub fn put(&mut self, id: String, v: T) {
        self.puts += 1;
        self.order.push_back((id.clone(), self.puts));
        self.map.insert(id, (v, self.puts));
        while self.order.len() > self.cap {
            let Some((old, n)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&old).is_some_and(|(_, m)| *m == n) {
                self.map.remove(&old);
            }
        }
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_put_within_the_cap() {
        let mut r = Recent::new(2);
        r.put("a".into(), 1);
        r.put("b".into(), 2);
        r.put("c".into(), 3);
        assert_eq!(r.take("a"), None);
        assert_eq!(r.take("b"), Some(2));
        assert_eq!(r.take("b"), None);
        r.put("b".into(), 4);
        assert_eq!(r.take("c"), Some(3));
        assert_eq!(r.take("b"), Some(4));
    }
}
