//! Property tests of the merge engine over randomly generated configs (a fixed-seed
//! generator, so failures reproduce): merging an empty config changes nothing, merging into an
//! empty config gives the child, merging a config into itself changes nothing but its
//! appended argument lists, and a child's scalars always win.

use spec::config::merge;
use spec::config::types::*;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn coin(&mut self) -> bool {
        self.below(2) == 0
    }
    fn maybe<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Option<T> {
        if self.coin() { Some(f(self)) } else { None }
    }
    fn pick(&mut self, pool: &[&str]) -> String {
        pool[self.below(pool.len() as u64) as usize].to_string()
    }
    /// Distinct picks from a pool (list keys must be unique within one config).
    fn distinct(&mut self, pool: &[&str], max: usize) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for _ in 0..self.below(max as u64 + 1) {
            let s = self.pick(pool);
            if !v.contains(&s) {
                v.push(s);
            }
        }
        v
    }
}

const PATHS: &[&str] = &["/a", "/b", "/c", "/d/e", "/f"];
const NAMES: &[&str] = &["x", "y", "z"];

fn resource(r: &mut Rng) -> Resource {
    Resource {
        source: r.maybe(|r| format!("data:,{}", r.pick(NAMES))),
        compression: r.maybe(|r| r.pick(&["", "gzip"])),
        http_headers: r
            .distinct(NAMES, 2)
            .into_iter()
            .map(|n| HttpHeader {
                name: n,
                value: Some("v".into()),
            })
            .collect(),
        verification: Verification {
            hash: r.maybe(|r| r.pick(&["sha512-00", "sha256-11"])),
        },
    }
}

fn node_user(r: &mut Rng) -> NodeUser {
    NodeUser {
        id: r.maybe(|r| r.below(3) as i64),
        name: r.maybe(|r| r.pick(NAMES)),
    }
}

fn random_config(r: &mut Rng, with_args: bool) -> Config {
    let mut c = Config::default();
    c.ignition.timeouts.http_total = r.maybe(|r| r.below(100) as i64);
    c.ignition.proxy.no_proxy = r.distinct(NAMES, 2);
    c.ignition.security.tls.certificate_authorities = r
        .distinct(NAMES, 2)
        .into_iter()
        .map(|n| Resource {
            source: Some(format!("data:,{n}")),
            ..Default::default()
        })
        .collect();
    // Files, directories and links share one path namespace.
    let mut paths = r.distinct(PATHS, 5);
    while let Some(p) = paths.pop() {
        match r.below(3) {
            0 => c.storage.files.push(File {
                path: p,
                mode: r.maybe(|r| r.below(512) as i64),
                overwrite: r.maybe(Rng::coin),
                contents: resource(r),
                append: r
                    .distinct(NAMES, 2)
                    .into_iter()
                    .map(|n| Resource {
                        source: Some(format!("data:,{n}")),
                        ..Default::default()
                    })
                    .collect(),
                user: node_user(r),
                group: node_user(r),
            }),
            1 => c.storage.directories.push(Directory {
                path: p,
                mode: r.maybe(|r| r.below(512) as i64),
                ..Default::default()
            }),
            _ => c.storage.links.push(Link {
                path: p,
                target: r.maybe(|r| r.pick(PATHS)),
                hard: r.maybe(Rng::coin),
                ..Default::default()
            }),
        }
    }
    for dev in r.distinct(&["/dev/a", "/dev/b"], 2) {
        let numbers = r.distinct(&["1", "2", "3"], 3);
        c.storage.disks.push(Disk {
            device: dev.clone(),
            wipe_table: r.maybe(Rng::coin),
            partitions: numbers
                .into_iter()
                .map(|n| Partition {
                    number: Some(n.parse().unwrap()),
                    size_mib: r.maybe(|r| r.below(10) as i64),
                    label: r.maybe(|r| r.pick(NAMES)),
                    ..Default::default()
                })
                .collect(),
        });
        if r.coin() {
            c.storage.filesystems.push(Filesystem {
                device: dev,
                format: r.maybe(|r| r.pick(&["ext4", "xfs"])),
                options: if with_args {
                    r.distinct(NAMES, 2)
                } else {
                    vec![]
                },
                mount_options: if with_args {
                    r.distinct(NAMES, 2)
                } else {
                    vec![]
                },
                label: r.maybe(|r| r.pick(NAMES)),
                ..Default::default()
            });
        }
    }
    for n in r.distinct(NAMES, 3) {
        c.systemd.units.push(Unit {
            name: format!("{n}.service"),
            enabled: r.maybe(Rng::coin),
            contents: r.maybe(|r| r.pick(NAMES)),
            dropins: r
                .distinct(NAMES, 2)
                .into_iter()
                .map(|d| Dropin {
                    name: format!("{d}.conf"),
                    contents: Some("x".into()),
                })
                .collect(),
            ..Default::default()
        });
    }
    for n in r.distinct(NAMES, 3) {
        c.passwd.users.push(User {
            name: n,
            uid: r.maybe(|r| r.below(5000) as i64),
            ssh_authorized_keys: r.distinct(NAMES, 3),
            groups: r.distinct(NAMES, 2),
            ..Default::default()
        });
    }
    let ka = r.distinct(NAMES, 3);
    for a in ka {
        if r.coin() {
            c.kernel_arguments.should_exist.push(a);
        } else {
            c.kernel_arguments.should_not_exist.push(a);
        }
    }
    c
}

const ROUNDS: u64 = 2000;

#[test]
fn merging_an_empty_config_changes_nothing() {
    let mut r = Rng(0x9e3779b97f4a7c15);
    for _ in 0..ROUNDS {
        let c = random_config(&mut r, true);
        assert_eq!(merge(&c, &Config::default()), c);
        assert_eq!(merge(&Config::default(), &c), c);
    }
}

#[test]
fn merging_a_config_into_itself_changes_nothing() {
    let mut r = Rng(0x2545f4914f6cdd1d);
    for _ in 0..ROUNDS {
        let c = random_config(&mut r, false);
        assert_eq!(merge(&c, &c), c);
    }
}

#[test]
fn self_merge_only_doubles_argument_lists() {
    let mut r = Rng(0x1234_5678_9abc_def1);
    for _ in 0..ROUNDS {
        let c = random_config(&mut r, true);
        let m = merge(&c, &c);
        for (a, b) in c.storage.filesystems.iter().zip(&m.storage.filesystems) {
            assert_eq!(b.options.len(), 2 * a.options.len());
            assert_eq!(b.mount_options.len(), 2 * a.mount_options.len());
        }
        let mut undoubled = m.clone();
        for (fs, orig) in undoubled
            .storage
            .filesystems
            .iter_mut()
            .zip(&c.storage.filesystems)
        {
            fs.options.clone_from(&orig.options);
            fs.mount_options.clone_from(&orig.mount_options);
        }
        assert_eq!(undoubled, c);
    }
}

#[test]
fn child_scalars_win_and_parent_entries_survive() {
    let mut r = Rng(0xdead_beef_cafe_f00d);
    for _ in 0..ROUNDS {
        let p = random_config(&mut r, true);
        let c = random_config(&mut r, true);
        let m = merge(&p, &c);
        if c.ignition.timeouts.http_total.is_some() {
            assert_eq!(
                m.ignition.timeouts.http_total,
                c.ignition.timeouts.http_total
            );
        } else {
            assert_eq!(
                m.ignition.timeouts.http_total,
                p.ignition.timeouts.http_total
            );
        }
        // Every child file's set fields show up in the result.
        for f in &c.storage.files {
            let got = m
                .storage
                .files
                .iter()
                .find(|x| x.path == f.path)
                .expect("child file kept");
            if f.mode.is_some() {
                assert_eq!(got.mode, f.mode);
            }
            if f.contents.source.is_some() {
                assert_eq!(got.contents.source, f.contents.source);
            }
        }
        // No path appears twice across files, directories and links.
        let mut all: Vec<&str> = m.storage.files.iter().map(|f| f.path.as_str()).collect();
        all.extend(m.storage.directories.iter().map(|d| d.path.as_str()));
        all.extend(m.storage.links.iter().map(|l| l.path.as_str()));
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "duplicate paths after merge");
        // Parent units not in the child survive unchanged.
        for u in &p.systemd.units {
            if !c.systemd.units.iter().any(|x| x.name == u.name) {
                assert!(m.systemd.units.contains(u));
            }
        }
        // Kernel arguments never end up in both lists.
        for a in &m.kernel_arguments.should_exist {
            assert!(!m.kernel_arguments.should_not_exist.contains(a));
        }
    }
}
