//! The eviction manager's loop (kubelet's `managerImpl.Start` and
//! `synchronize`): every monitoring period it reads the node's part of the
//! summary `/stats/summary` serves (the pods' only when it must rank them:
//! reading every pod's cgroups each period was most of an idle node's
//! agent CPU), asks [`eviction`] which thresholds hold, publishes the
//! node's pressure conditions, reclaims unused images for disk signals,
//! and only then evicts one pod, the first of kubelet's ranking that is not
//! critical, and waits (30 s at most) for its containers to stop.

pub mod helpers;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::events::{EventType, Object, Recorder};
use crate::images::gc as image_gc;
use crate::lifecycle::predicate as admit;
use crate::pod_workers::{Eviction, PodWorkers};
use crate::runtime::Cri;
use crate::stats::{Scope, Stats};
use crate::{clock, status};
use helpers::{Candidate, Condition, State, Threshold};

/// The node's pressure conditions now, as the manager last saw them.
pub type Pressure = watch::Receiver<BTreeSet<Condition>>;

/// kubelet's `evictionMonitoringPeriod`.
pub const PERIOD: Duration = Duration::from_secs(10);
/// How long the manager waits for an evicted pod to stop.
const CLEANUP: Duration = Duration::from_secs(30);
/// The least grace an evicted pod's containers get (kubelet's minimum).
const MIN_GRACE: Duration = Duration::from_secs(2);

/// What the manager reads and acts on.
#[derive(Debug)]
pub struct Manager {
    pub cri: Cri,
    pub stats: Arc<Stats>,
    pub thresholds: Vec<Threshold>,
    /// `evictionPressureTransitionPeriod`.
    pub transition: Duration,
    /// `evictionMaxPodGracePeriod`: the grace a soft eviction gives.
    pub max_pod_grace: Duration,
    pub period: Duration,
    pub recorder: Recorder,
    pub node_name: String,
    pub workers: PodWorkers,
    pub statuses: status::Manager,
}

/// A sender of pressure conditions and what reads them.
pub fn pressure() -> (watch::Sender<BTreeSet<Condition>>, Pressure) {
    watch::channel(BTreeSet::new())
}

/// Starts the manager, which publishes the pressure conditions on `tx`.
/// Without thresholds it never runs and the node never reports pressure.
pub fn spawn(m: Manager, tx: watch::Sender<BTreeSet<Condition>>) {
    if m.thresholds.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let mut state = State::default();
        // The first pass after a period, as kubelet's: the sources have
        // given their pods by then.
        let start = tokio::time::Instant::now() + m.period;
        let mut tick = tokio::time::interval_at(start, m.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Some(uid) = pass(&m, &mut state, &tx).await {
                wait_stopped(&m, &uid).await;
            }
        }
    });
}

/// The summary of `scope`, read off the async workers; the pods' disk usage
/// (the runtime's writable layers, log and volume directories walked) only
/// ranking for a disk signal needs.
async fn summary(m: &Manager, scope: Scope) -> Option<crate::statsapi::Summary> {
    let rootfs = if scope == Scope::PodsAndDisk {
        m.cri.writable_layers().await.unwrap_or_default()
    } else {
        HashMap::new()
    };
    let stats = m.stats.clone();
    tokio::task::spawn_blocking(move || stats.summary_of(rootfs, scope))
        .await
        .ok()
}

/// One pass; the UID of the pod it evicted.
async fn pass(
    m: &Manager,
    state: &mut State,
    tx: &watch::Sender<BTreeSet<Condition>>,
) -> Option<String> {
    let obs = helpers::observe(&summary(m, Scope::Node).await?).0;
    let p = state.pass(&m.thresholds, &obs, clock::now(), m.transition);
    tx.send_if_modified(|now| {
        if *now == p.conditions {
            return false;
        }
        let names: Vec<&str> = p.conditions.iter().map(|c| c.name()).collect();
        tracing::info!(conditions = ?names, "node pressure changed");
        now.clone_from(&p.conditions);
        true
    });
    let t = p.reclaim?;
    let resource = t.signal.resource();
    let node = Object::node(&m.node_name);
    m.recorder.event(
        &node,
        EventType::Warning,
        "EvictionThresholdMet",
        &format!("Attempting to reclaim {resource}"),
    );
    if t.signal.node_reclaimable() {
        let freed = match image_gc::remove_unused(&m.cri, &wanted_images(m).await).await {
            Ok(freed) => freed,
            Err(e) => {
                tracing::warn!("eviction: removing unused images: {e}");
                0
            }
        };
        // Nothing freed, nothing changed: no second reading.
        if freed > 0 {
            tracing::info!(bytes = freed, "eviction: unused images removed");
            if let Some(after) = summary(m, Scope::Node).await
                && helpers::met(&m.thresholds, &helpers::observe(&after).0, true).is_empty()
            {
                tracing::info!(
                    resource,
                    "eviction: pressure relieved without evicting a pod"
                );
                return None;
            }
        }
    }
    // Who may be evicted first: when no pod may (a device of static pods
    // only), a node that stays under pressure reads no pod's usage every
    // pass (at 30 idle pods that reading was half the agent's idle CPU).
    let mut candidates = candidates(m);
    if candidates.is_empty() {
        // kubelet logs it every pass too; the event above says it.
        tracing::debug!(
            resource,
            "eviction: thresholds met, but no pod may be evicted"
        );
        return None;
    }
    // Ranking needs the pods' usage; a disk signal's, their disk usage too.
    let scope = if t.signal.node_reclaimable() {
        Scope::PodsAndDisk
    } else {
        Scope::Pods
    };
    let usage = helpers::observe(&summary(m, scope).await?).1;
    for c in &mut candidates {
        c.usage = usage.get(&c.uid).cloned();
    }
    helpers::rank(t.signal, &mut candidates);
    let c = candidates.into_iter().next()?;
    let message = helpers::message(&t, &obs, &c);
    let grace = if t.hard() {
        MIN_GRACE
    } else {
        m.max_pod_grace.max(MIN_GRACE)
    };
    let obj = Object {
        kind: "Pod",
        namespace: c.pod.metadata.namespace.clone().unwrap_or_default(),
        name: c.pod.metadata.name.clone().unwrap_or_default(),
        uid: c.uid.clone(),
        field_path: String::new(),
    };
    tracing::warn!(pod = %obj.name, uid = %c.uid, signal = t.signal.name(), "evicting: {message}");
    m.recorder
        .event(&obj, EventType::Warning, crate::reason::EVICTED, &message);
    m.workers
        .evict(&c.uid, Eviction { grace, message })
        .then_some(c.uid)
}

/// The IDs of the images the node's pods name, started or not: never
/// reclaimed (unlike kubelet, which can pull them again, a device offline
/// could not get them back).
async fn wanted_images(m: &Manager) -> HashSet<String> {
    let mut names = BTreeSet::new();
    for p in m.workers.desired() {
        for c in p.spec.iter().flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        }) {
            names.extend(c.image.clone());
        }
    }
    let mut ids = HashSet::new();
    for n in names {
        if let Ok(Some(id)) = m.cri.image_id(&n).await {
            ids.insert(id);
        }
    }
    ids
}

/// The pods that may be evicted: running (not finished), not critical,
/// not evicted already; their usage not read yet.
fn candidates(m: &Manager) -> Vec<Candidate> {
    m.statuses
        .pods()
        .into_iter()
        .filter_map(|p| {
            let uid = p.metadata.uid.clone()?;
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            let finished = phase.is_some_and(crate::phase::is_terminal);
            if finished || admit::is_critical(&p) || m.workers.evicted(&uid) {
                return None;
            }
            Some(Candidate {
                usage: None,
                uid,
                pod: Arc::new(p),
            })
        })
        .collect()
}

/// Waits until the evicted pod has nothing running (kubelet's
/// `waitForPodsCleanup`), 30 s at most.
async fn wait_stopped(m: &Manager, uid: &str) {
    let deadline = tokio::time::Instant::now() + CLEANUP;
    while tokio::time::Instant::now() < deadline {
        if m.cri
            .observe(uid)
            .await
            .is_ok_and(|o| o.live().next().is_none())
        {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tracing::info!(uid, "eviction: timed out waiting for the pod to stop");
}
