//! Rollouts (docs/serve.md, "Rollouts"): a pool with a rollout policy
//! (`crate::source::rollout`) whose config changed gets the new config (the active
//! generation's) on a canary set of the machines that boot first; the others get the
//! previous one (lastKnownGood's). The rollout widens step by step as the machines on the
//! new config report provisioned, and halts itself when failures among them pass the
//! policy's threshold.
//!
//! Everything is decided from the inventory store's rollout record of the pool
//! ([`Rollout`], changed by compare-and-swap) and the machines' own records (each keeps
//! what it was given, [`Given`]), so replicas on one store agree on every machine and a halt
//! one replica saw holds on all. A pool without a policy never reaches this module: its
//! config is served to all as it always was, with no store access.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Result;

use crate::fleet::inventory::model::{Boot, Given, boot_state};
use crate::fleet::inventory::{
    FailedMachine, Halt, Machine, Rollout, RolloutMachine, RolloutState, State, Store,
};
use crate::generations::Generations;
use crate::source::Generation;
use crate::source::rollout::{Amount, Policy, bucket};

/// Which generation a machine's config comes from.
#[derive(Debug, Clone)]
pub enum Choice {
    /// The active generation's (no rollout, or the machine is on the new config).
    Active,
    /// The previous good generation's (lastKnownGood).
    Previous(Arc<Generation>),
}

/// A pool's rollout as the server sees it now: the previous and the new config, and the
/// policy (None: the pool has no rollout now).
pub struct Current<'a> {
    pub pool: &'a str,
    pub policy: &'a Policy,
    pub from: String,
    pub to: String,
    pub previous: Arc<Generation>,
}

/// The rollout pool `pool` of `active` is in, if any: it has a policy, lastKnownGood has the
/// pool with another config.
pub fn current<'a>(
    active: &'a Generation,
    lkg: Option<&Arc<Generation>>,
    pool: &'a str,
) -> Option<Current<'a>> {
    let policy = active.rollouts.get(pool)?;
    let new = active.pools.get(pool)?;
    let lkg = lkg?;
    let old = lkg.pools.get(pool)?;
    (old.config_hash != new.config_hash).then(|| Current {
        pool,
        policy,
        from: old.config_hash.clone(),
        to: new.config_hash.clone(),
        previous: lkg.clone(),
    })
}

/// A new rollout record for `c`, begun at `now`.
fn begin(c: &Current<'_>, now: u64) -> Rollout {
    Rollout {
        pool: c.pool.to_string(),
        from: c.from.clone(),
        to: c.to.clone(),
        state: if c.policy.steps.first() == Some(&Amount::ALL) {
            RolloutState::Complete
        } else {
            RolloutState::Rolling
        },
        stage: 0,
        started: now,
        changed: now,
        machines: Vec::new(),
        halt: None,
    }
}

/// The store's record of `c`, made when there is none (or one of another rollout).
pub fn record(store: &dyn Store, c: &Current<'_>, now: u64) -> Result<Rollout> {
    if let Some(r) = store.rollout(c.pool)?
        && r.from == c.from
        && r.to == c.to
    {
        return Ok(r);
    }
    let r = store.update_rollout(c.pool, &mut |old| match old {
        Some(r) if r.from == c.from && r.to == c.to => None,
        _ => Some(begin(c, now)),
    })?;
    Ok(r.unwrap_or_else(|| begin(c, now)))
}

/// Which config machine `machine` of `c`'s pool gets (module docs): what it was given
/// before in this rollout, else the new config while the stage has room for it, else the
/// previous. Reads the store; writes it only when the machine is given something new.
pub fn choose(store: &dyn Store, c: &Current<'_>, machine: &str, now: u64) -> Result<Choice> {
    let mut r = record(store, c, now)?;
    let previous = || Choice::Previous(c.previous.clone());
    match r.state {
        RolloutState::Complete => return Ok(Choice::Active),
        RolloutState::Halted | RolloutState::Aborted => return Ok(previous()),
        RolloutState::Rolling | RolloutState::Paused => {}
    }
    let sticky = store
        .machine(machine)?
        .and_then(|m| m.rollout)
        .filter(|g| g.pool == c.pool && g.rollout == c.to);
    if let Some(g) = sticky {
        return Ok(if g.config == c.to {
            Choice::Active
        } else {
            previous()
        });
    }
    // Admitted to the new config, or not; a full stage of counted canaries may widen once
    // they all provisioned (so look again after evaluating it).
    let mut admitted = false;
    for round in 0..2 {
        if r.state != RolloutState::Rolling {
            break;
        }
        let step = c.policy.steps[r.stage.min(c.policy.steps.len() - 1)];
        if r.machines.iter().any(|m| m.id == machine) {
            admitted = true;
            break;
        }
        let room = match step {
            Amount::Machines(n) => (r.machines.len() as u64) < n,
            Amount::Percent(p) => bucket(machine, &c.to) < p,
        };
        if room {
            let stored = store.update_rollout(c.pool, &mut |old| {
                let mut r = old.filter(|r| r.from == c.from && r.to == c.to)?;
                if r.state != RolloutState::Rolling || r.machines.iter().any(|m| m.id == machine) {
                    return None;
                }
                let still = match c.policy.steps[r.stage.min(c.policy.steps.len() - 1)] {
                    Amount::Machines(n) => (r.machines.len() as u64) < n,
                    Amount::Percent(p) => bucket(machine, &c.to) < p,
                };
                still.then(|| {
                    let stage = r.stage;
                    r.machines.push(RolloutMachine {
                        id: machine.to_string(),
                        given: now,
                        stage,
                    });
                    r
                })
            })?;
            admitted = stored.is_some_and(|r| r.machines.iter().any(|m| m.id == machine));
            break;
        }
        if round == 0 && matches!(step, Amount::Machines(_)) {
            r = evaluate(store, c, now)?;
            if r.state == RolloutState::Complete {
                return Ok(Choice::Active);
            }
            continue;
        }
        break;
    }
    let config = if admitted { &c.to } else { &c.from };
    let mut kept = None;
    store.update(machine, &mut |m: Option<Machine>| {
        let mut m = m?;
        if let Some(g) = m
            .rollout
            .as_ref()
            .filter(|g| g.pool == c.pool && g.rollout == c.to)
        {
            // Another replica gave it one meanwhile: that one holds.
            kept = Some(g.config.clone());
            return None;
        }
        m.rollout = Some(Given {
            pool: c.pool.to_string(),
            rollout: c.to.clone(),
            config: config.clone(),
        });
        Some(m)
    })?;
    let on_new = kept.as_deref().unwrap_or(config) == c.to;
    Ok(if on_new { Choice::Active } else { previous() })
}

/// How a machine on the new config is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Provisioned,
    Failed(String),
    Pending,
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Provisioned => "provisioned",
            Outcome::Failed(_) => "failed",
            Outcome::Pending => "pending",
        }
    }
}

/// What machine `m` (given the new config as `given`) did since, over its boots that began
/// since then: a failed stage fails it; a machine provisioned counts as provisioned, unless
/// it installed an OS image since (a network install: the live boot's `install`, then the
/// installed system's boot), which counts once the installed system reports `running`.
/// None by the policy's deadline counts as failed.
pub fn outcome(m: Option<&Machine>, given: &RolloutMachine, policy: &Policy, now: u64) -> Outcome {
    let boots: Vec<&Boot> = m
        .map(|m| {
            m.boots
                .iter()
                .filter(|b| b.first_seen >= given.given)
                .collect()
        })
        .unwrap_or_default();
    if let Some(b) = boots.iter().find(|b| boot_state(b) == Some(State::Failed)) {
        let why = b
            .stages
            .iter()
            .find(|s| s.outcome == report_format::Outcome::Failed)
            .map(|s| {
                format!(
                    "{}: {}",
                    s.stage.as_str(),
                    s.error.as_deref().unwrap_or("failed")
                )
            })
            .unwrap_or_else(|| "failed".into());
        return Outcome::Failed(why);
    }
    let reached = |st: State| boots.iter().any(|b| boot_state(b) == Some(st));
    let installed = boots.iter().any(|b| {
        b.stages
            .iter()
            .any(|s| s.stage == report_format::Stage::Install)
    });
    if reached(State::Running) || (!installed && reached(State::Provisioned)) {
        return Outcome::Provisioned;
    }
    if now >= given.given + policy.report_within_seconds {
        Outcome::Failed(format!(
            "no report of {} within {} s of getting the new config",
            if installed { "running" } else { "provisioned" },
            policy.report_within_seconds
        ))
    } else {
        Outcome::Pending
    }
}

/// The next state of rollout `r` under `policy` given its machines' outcomes (in
/// `r.machines`' order) at `now`: halted when the failures pass the threshold, the next
/// stage when every machine of the stage so far provisioned; None: no change.
pub fn advance(r: &Rollout, policy: &Policy, outcomes: &[Outcome], now: u64) -> Option<Rollout> {
    if !matches!(r.state, RolloutState::Rolling | RolloutState::Paused) {
        return None;
    }
    let n = r.machines.len() as u64;
    let failed: Vec<FailedMachine> = r
        .machines
        .iter()
        .zip(outcomes)
        .filter_map(|(m, o)| match o {
            Outcome::Failed(e) => Some(FailedMachine {
                id: m.id.clone(),
                error: e.clone(),
            }),
            _ => None,
        })
        .collect();
    let f = failed.len() as u64;
    let halts = match policy.halt_after {
        Amount::Machines(k) => f >= k,
        Amount::Percent(p) => f > 0 && f * 10_000 >= u64::from(p) * n,
    };
    let mut next = r.clone();
    if halts {
        next.state = RolloutState::Halted;
        next.changed = now;
        next.halt = Some(Halt {
            at: now,
            stage: r.stage,
            reason: format!(
                "{f} of {n} machines on the new config failed (the policy halts after {})",
                policy.halt_after
            ),
            machines: failed,
        });
        return Some(next);
    }
    if r.state == RolloutState::Paused {
        return None;
    }
    let all_ok = n > 0 && outcomes.iter().all(|o| *o == Outcome::Provisioned);
    let step = policy.steps[r.stage.min(policy.steps.len() - 1)];
    let reached = match step {
        Amount::Machines(k) => n >= k,
        Amount::Percent(_) => r.machines.iter().any(|m| m.stage == r.stage),
    };
    if !(all_ok && reached) || now < r.changed + policy.hold_seconds {
        return None;
    }
    next.stage = (r.stage + 1).min(policy.steps.len() - 1);
    next.changed = now;
    if policy.steps[next.stage] == Amount::ALL {
        next.state = RolloutState::Complete;
    }
    Some(next)
}

/// Reads `c`'s record and its machines' records, and moves it on as [`advance`] says
/// (compare-and-swap: a change another replica made meanwhile is evaluated again).
pub fn evaluate(store: &dyn Store, c: &Current<'_>, now: u64) -> Result<Rollout> {
    let r = record(store, c, now)?;
    let outcomes = outcomes(store, &r, c.policy, now)?;
    let stored = store.update_rollout(c.pool, &mut |old| {
        let old = old.filter(|o| o.from == c.from && o.to == c.to)?;
        // Machines given the new config since the outcomes were read are pending.
        let mut o = outcomes.clone();
        o.resize(old.machines.len(), Outcome::Pending);
        advance(&old, c.policy, &o, now)
    })?;
    Ok(stored.unwrap_or(r))
}

/// The outcome of each of `r`'s machines, in order.
pub fn outcomes(store: &dyn Store, r: &Rollout, policy: &Policy, now: u64) -> Result<Vec<Outcome>> {
    r.machines
        .iter()
        .map(|g| Ok(outcome(store.machine(&g.id)?.as_ref(), g, policy, now)))
        .collect()
}

/// What an operator asks of a rollout (`agent rollout`, the admin API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pause,
    Resume,
    Promote,
    Abort,
}

impl std::str::FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "pause" => Action::Pause,
            "resume" => Action::Resume,
            "promote" => Action::Promote,
            "abort" => Action::Abort,
            _ => {
                return Err(format!(
                    "unknown rollout action {s:?} (pause, resume, promote, abort)"
                ));
            }
        })
    }
}

/// Applies `action` to `c`'s rollout; Err(message) when the state does not allow it.
pub fn act(
    store: &dyn Store,
    c: &Current<'_>,
    action: Action,
    now: u64,
) -> Result<Result<Rollout, String>> {
    record(store, c, now)?;
    let mut refused = None;
    let stored = store.update_rollout(c.pool, &mut |old| {
        let mut r = old.filter(|o| o.from == c.from && o.to == c.to)?;
        let to = match (action, r.state) {
            (Action::Pause, RolloutState::Rolling) => RolloutState::Paused,
            (Action::Resume, RolloutState::Paused) => RolloutState::Rolling,
            (Action::Promote, s) if s != RolloutState::Complete => RolloutState::Complete,
            (Action::Abort, s) if s != RolloutState::Aborted => RolloutState::Aborted,
            (_, s) => {
                refused = Some(format!(
                    "the rollout of pool {} is {}: {} does not apply{}",
                    c.pool,
                    s.as_str(),
                    format!("{action:?}").to_lowercase(),
                    if s == RolloutState::Halted {
                        " (promote or abort a halted rollout)"
                    } else {
                        ""
                    }
                ));
                return None;
            }
        };
        r.state = to;
        r.changed = now;
        Some(r)
    })?;
    Ok(match (refused, stored) {
        (Some(e), _) => Err(e),
        (None, Some(r)) => Ok(r),
        (None, None) => Err(format!("pool {} has no rollout now", c.pool)),
    })
}

/// What the tick found of each rollout, for `/status`, the page and the metrics (read on
/// the event loops, which never wait for the store).
#[derive(Default)]
pub struct Watch(Mutex<Vec<View>>);

/// One pool's rollout as the tick saw it.
#[derive(Debug, Clone)]
pub struct View {
    pub rollout: Rollout,
    pub step: Amount,
    pub outcomes: Vec<Outcome>,
}

impl Watch {
    pub fn views(&self) -> Vec<View> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn set(&self, v: Vec<View>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = v;
    }

    /// `/status`'s `"rollouts"`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::Value::Array(self.views().iter().map(View::json).collect())
    }

    /// `agent_rollout_state{pool,state}` and `agent_rollout_machines{pool,generation,outcome}`.
    pub fn metrics(&self) -> String {
        let views = self.views();
        let mut s = String::from(
            "# HELP agent_rollout_state A pool's rollout: 1 for its state.\n# TYPE agent_rollout_state gauge\n",
        );
        for v in &views {
            for st in RolloutState::ALL {
                s.push_str(&format!(
                    "agent_rollout_state{{pool=\"{}\",state=\"{}\"}} {}\n",
                    v.rollout.pool,
                    st.as_str(),
                    u8::from(st == v.rollout.state)
                ));
            }
        }
        s.push_str("# HELP agent_rollout_machines Machines given a rollout's new config, by outcome.\n# TYPE agent_rollout_machines gauge\n");
        for v in &views {
            for label in ["provisioned", "failed", "pending"] {
                let n = v.outcomes.iter().filter(|o| o.label() == label).count();
                s.push_str(&format!(
                    "agent_rollout_machines{{pool=\"{}\",generation=\"{}\",outcome=\"{label}\"}} {n}\n",
                    v.rollout.pool,
                    &v.rollout.to[..v.rollout.to.len().min(16)]
                ));
            }
        }
        s
    }
}

impl View {
    /// In camelCase with RFC 3339 times.
    pub fn json(&self) -> serde_json::Value {
        json(&self.rollout, Some(self.step), &self.outcomes)
    }
}

/// A rollout as the admin API and `/status` show it.
pub fn json(r: &Rollout, step: Option<Amount>, outcomes: &[Outcome]) -> serde_json::Value {
    let t = runtime::util::rfc3339;
    let count = |l: &str| outcomes.iter().filter(|o| o.label() == l).count();
    serde_json::json!({
        "pool": r.pool,
        "from": r.from,
        "to": r.to,
        "state": r.state.as_str(),
        "stage": r.stage,
        "step": step.map(|s| s.to_string()),
        "started": t(r.started),
        "changed": t(r.changed),
        "counts": {"given": r.machines.len(), "provisioned": count("provisioned"),
                   "failed": count("failed"), "pending": count("pending")},
        "machines": r.machines.iter().zip(outcomes.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(m, o)| serde_json::json!({
                "id": m.id, "given": t(m.given), "stage": m.stage,
                "outcome": o.map(Outcome::label),
                "error": match o { Some(Outcome::Failed(e)) => Some(e.as_str()), _ => None },
            })).collect::<Vec<_>>(),
        "halt": r.halt.as_ref().map(|h| serde_json::json!({
            "at": t(h.at), "stage": h.stage, "reason": h.reason,
            "machines": h.machines.iter().map(|m| serde_json::json!({"id": m.id, "error": m.error})).collect::<Vec<_>>(),
        })),
    })
}

/// The rollouts of the active generation's pools: each evaluated (halts, deadlines, the
/// next stage), what completed told the generations (lastKnownGood waits for it), the
/// views kept for `/status`, the page and the metrics.
pub fn tick(store: &dyn Store, gens: &Generations, watch: &Watch, now: u64) {
    let (Some(active), lkg) = (gens.active(), gens.roles().lkg_generation) else {
        return watch.set(Vec::new());
    };
    let mut views = Vec::new();
    let mut done = BTreeSet::new();
    for pool in active.rollouts.keys() {
        let Some(c) = current(&active, lkg.as_ref(), pool) else {
            continue;
        };
        let r = match evaluate(store, &c, now) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("rollout of pool {pool}: reading the store: {e:#}");
                continue;
            }
        };
        if r.state == RolloutState::Complete {
            done.insert(format!("{pool}:{}", c.to));
        }
        let before = watch
            .views()
            .into_iter()
            .find(|v| v.rollout.pool == *pool && v.rollout.to == r.to);
        if before
            .as_ref()
            .is_none_or(|b| b.rollout.state != r.state || b.rollout.stage != r.stage)
        {
            match &r.halt {
                Some(h) if r.state == RolloutState::Halted => log::error!(
                    "rollout of pool {pool} to config {} halted at stage {}: {}; machines: {}",
                    &r.to[..16.min(r.to.len())],
                    h.stage,
                    h.reason,
                    h.machines
                        .iter()
                        .map(|m| format!("{} ({})", m.id, m.error))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => log::info!(
                    "rollout of pool {pool} to config {}: {} at stage {}",
                    &r.to[..16.min(r.to.len())],
                    r.state.as_str(),
                    r.stage
                ),
            }
        }
        let outcomes = outcomes(store, &r, c.policy, now).unwrap_or_default();
        let step = c.policy.steps[r.stage.min(c.policy.steps.len() - 1)];
        views.push(View {
            rollout: r,
            step,
            outcomes,
        });
    }
    gens.set_rollouts_done(done);
    watch.set(views);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::inventory::model::StageRecord;

    fn policy(steps: &str, halt: &str) -> Policy {
        Policy::parse(
            format!(r#"{{"steps": {steps}, "haltAfter": {halt}, "reportWithinSeconds": 100}}"#)
                .as_bytes(),
        )
        .unwrap()
    }

    fn rollout(n: usize, stage: usize) -> Rollout {
        Rollout {
            pool: "p".into(),
            from: "a".into(),
            to: "b".into(),
            state: RolloutState::Rolling,
            stage,
            started: 0,
            changed: 0,
            machines: (0..n)
                .map(|i| RolloutMachine {
                    id: format!("m{i}"),
                    given: 10,
                    stage,
                })
                .collect(),
            halt: None,
        }
    }

    #[test]
    fn advance_halts_widens_and_completes() {
        let p = policy(r#"[1, 3]"#, "1");
        use Outcome::*;
        assert_eq!(advance(&rollout(1, 0), &p, &[Pending], 20), None);
        let next = advance(&rollout(1, 0), &p, &[Provisioned], 20).unwrap();
        assert_eq!((next.stage, next.state), (1, RolloutState::Rolling));
        assert_eq!(
            advance(&rollout(2, 1), &p, &[Provisioned, Provisioned], 20),
            None,
            "3 needed"
        );
        let done = advance(
            &rollout(3, 1),
            &p,
            &[Provisioned, Provisioned, Provisioned],
            20,
        )
        .unwrap();
        assert_eq!((done.stage, done.state), (2, RolloutState::Complete));
        let h = advance(
            &rollout(3, 1),
            &p,
            &[Provisioned, Failed("files: bad hash".into()), Pending],
            30,
        )
        .unwrap();
        assert_eq!(h.state, RolloutState::Halted);
        let halt = h.halt.unwrap();
        assert_eq!((halt.at, halt.stage), (30, 1));
        assert_eq!(
            halt.machines,
            [FailedMachine {
                id: "m1".into(),
                error: "files: bad hash".into()
            }]
        );
        assert!(halt.reason.contains("1 of 3"), "{}", halt.reason);
        // A percentage: 1 of 30 is under 5 %, 2 of 30 is not.
        let p = policy(r#"["50%"]"#, r#""5%""#);
        let mut o = vec![Provisioned; 30];
        o[0] = Failed("x".into());
        assert_eq!(
            advance(&rollout(30, 0), &p, &o, 20),
            None,
            "under 5 %: goes on, not widened"
        );
        o[1] = Failed("y".into());
        let h = advance(&rollout(30, 0), &p, &o, 20).unwrap();
        assert_eq!(h.state, RolloutState::Halted);
    }

    #[test]
    fn deadline_counts_as_failed() {
        let p = policy("[1]", "1");
        let g = RolloutMachine {
            id: "m".into(),
            given: 10,
            stage: 0,
        };
        assert_eq!(outcome(None, &g, &p, 50), Outcome::Pending);
        assert!(matches!(outcome(None, &g, &p, 110), Outcome::Failed(e) if e.contains("100 s")));
    }

    fn boot(id: &str, at: u64, stages: &[(report_format::Stage, bool)]) -> Boot {
        Boot {
            boot_id: id.into(),
            first_seen: at,
            last_seen: at,
            stages: stages
                .iter()
                .map(|&(stage, last)| StageRecord {
                    stage,
                    outcome: report_format::Outcome::Ok,
                    last,
                    duration_ms: 1,
                    report_id: format!("{id}-{}", stage.as_str()),
                    received: at,
                    authenticated: true,
                    trust: Default::default(),
                    counts: true,
                    error: None,
                    detail_bytes: 0,
                    detail: None,
                })
                .collect(),
            kernel: None,
        }
    }

    #[test]
    fn an_installed_machine_counts_once_it_runs() {
        use report_format::Stage::*;
        let p = policy("[1]", "1");
        let g = RolloutMachine {
            id: "m".into(),
            given: 10,
            stage: 0,
        };
        let mut m = Machine {
            id: "m".into(),
            ..Default::default()
        };
        // Provisioned in place (no install): counts.
        m.boots = vec![boot(
            "b1",
            11,
            &[(Fetch, false), (Disks, false), (Files, true)],
        )];
        assert_eq!(outcome(Some(&m), &g, &p, 20), Outcome::Provisioned);
        // A network install: the live boot's install, then the installed system's boot.
        m.boots = vec![boot("live", 11, &[(Install, true)])];
        assert_eq!(outcome(Some(&m), &g, &p, 20), Outcome::Pending, "installed");
        m.boots
            .push(boot("os", 12, &[(Fetch, false), (Files, true)]));
        assert_eq!(
            outcome(Some(&m), &g, &p, 20),
            Outcome::Pending,
            "provisioned, not yet running"
        );
        assert!(
            matches!(outcome(Some(&m), &g, &p, 110), Outcome::Failed(e) if e.contains("running")),
            "never up by the deadline"
        );
        m.boots[1] = boot("os", 12, &[(Fetch, false), (Files, true), (Running, true)]);
        assert_eq!(
            outcome(Some(&m), &g, &p, 20),
            Outcome::Provisioned,
            "running"
        );
        // Boots from before it was given the config do not count.
        m.boots = vec![boot("old", 5, &[(Files, true)])];
        assert_eq!(outcome(Some(&m), &g, &p, 20), Outcome::Pending);
    }
}
