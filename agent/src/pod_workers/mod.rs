//! Pod workers, kubelet's `pod_workers.go`: one task per pod, serial per
//! pod and parallel across pods. The sync loop ([`crate::kubelet`]) tells
//! [`PodWorkers`] which pods the sources want ([`PodWorkers::update`]) and
//! PLEG which pods changed ([`PodWorkers::notify`]); each worker observes
//! its pod through CRI, asks the pure [`crate::plan`] what to do, applies
//! it and publishes the pod's status. Managers never import this module:
//! they are handed to it in [`Ctx`].

mod worker;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edge_config::Config;
use k8s_openapi::api::core::v1::Pod;

use crate::backoff::Backoff;
use crate::cri_config::NodeInfo;
use crate::events::{EventType, Object, Recorder};
use crate::mutex::lock;
use crate::runtime::Cri;
use crate::{clock, prober, status};

pub use worker::{Eviction, Handle};

/// Why a sync or a termination stopped short; the worker retries.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Cri(#[from] crate::runtime::CriError),
    #[error(transparent)]
    Volume(#[from] crate::volumes::Error),
    #[error("pod cgroup {path}: {source}")]
    PodCgroup {
        path: String,
        source: std::io::Error,
    },
}

/// What the workers need, handed in by the sync loop.
#[derive(Debug)]
pub struct Ctx {
    pub cri: Cri,
    pub config: Arc<Config>,
    pub node: Arc<NodeInfo>,
    pub runtime_name: String,
    pub cgroups: Option<cgroup::Hierarchy>,
    pub recorder: Recorder,
    pub statuses: status::Manager,
    pub probe_metrics: prober::Metrics,
    pub metrics: Arc<crate::metrics::AgentMetrics>,
    /// When this agent started (probe start-up spread).
    pub started: Instant,
    /// configMaps, secrets and tokens (cluster mode); None: static pods only.
    pub objects: Option<Arc<dyn crate::volumes::objects::ApiObjects>>,
    /// Device plugins' devices; None: no device manager.
    pub devices: Option<crate::devicemanager::Manager>,
    /// `hostUsers: false` pods' ID ranges; None: such pods are refused.
    pub userns: Option<Arc<crate::userns::Manager>>,
    /// Allocatable CPU and memory, for admitting a resize.
    pub allocatable: crate::lifecycle::predicate::Resources,
}

/// The workers and the state they share: restart and image back-off, and
/// the grace periods of orphans.
#[derive(Debug)]
struct Shared {
    ctx: Ctx,
    workers: Mutex<HashMap<String, Handle>>,
    backoff: Mutex<Backoff>,
    image_backoff: Mutex<Backoff>,
    /// Image pulls at once: one with `serializeImagePulls` (kubelet's
    /// default), else `maxParallelImagePulls` (no limit when unset).
    pull_gate: tokio::sync::Semaphore,
    /// Grace periods of orphan containers (from their annotations).
    orphan_graces: Mutex<HashMap<String, Duration>>,
    /// The pods the sources want, as last given to [`PodWorkers::update`].
    desired: Mutex<Vec<Arc<Pod>>>,
    /// Each pod's admitted and actuated resources (in-place resize).
    allocation: crate::allocation::Store,
}

impl std::ops::Deref for Shared {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        &self.ctx
    }
}

impl Shared {
    fn event(&self, obj: &Object, kind: EventType, reason: &str, msg: &str) {
        self.recorder.event(obj, kind, reason, msg);
    }

    fn set_status(&self, uid: &str, pod: Pod) {
        self.statuses.set(uid, pod);
    }

    fn status_of(&self, uid: &str) -> Option<Pod> {
        self.statuses.get(uid)
    }

    fn orphan_grace(&self, id: &str) -> Option<Duration> {
        lock(&self.orphan_graces).get(id).copied()
    }

    /// A worker has finished: forget its pod.
    fn forget(&self, uid: &str) {
        self.statuses.remove(uid);
        lock(&self.workers).remove(uid);
        lock(&self.backoff).forget_prefix(&format!("{uid}/"));
        lock(&self.image_backoff).forget_prefix(&format!("{uid}/"));
        self.probe_metrics.forget(uid);
    }
}

/// The handle of the sync loop and PLEG.
#[derive(Debug, Clone)]
pub struct PodWorkers(Arc<Shared>);

impl PodWorkers {
    pub fn new(ctx: Ctx) -> Self {
        let backoff = || {
            Mutex::new(Backoff::new(
                ctx.config.restart_backoff_initial,
                ctx.config.restart_backoff_max,
            ))
        };
        let (backoff, image_backoff) = (backoff(), backoff());
        let allocation = crate::allocation::Store::new(ctx.config.data_dir.join("allocation"));
        let pulls_at_once = match (
            ctx.config.serialize_image_pulls,
            ctx.config.max_parallel_image_pulls,
        ) {
            (true, _) => 1,
            (false, Some(n)) => usize::try_from(n).unwrap_or(usize::MAX),
            (false, None) => tokio::sync::Semaphore::MAX_PERMITS,
        };
        Self(Arc::new(Shared {
            pull_gate: tokio::sync::Semaphore::new(
                pulls_at_once.min(tokio::sync::Semaphore::MAX_PERMITS),
            ),
            ctx,
            workers: Mutex::new(HashMap::new()),
            backoff,
            image_backoff,
            orphan_graces: Mutex::new(HashMap::new()),
            desired: Mutex::new(Vec::new()),
            allocation,
        }))
    }

    /// Whether pod `uid` has a worker (running, or terminating).
    pub fn has_worker(&self, uid: &str) -> bool {
        lock(&self.0.workers).contains_key(uid)
    }

    /// Evicts pod `uid` (see [`Handle::evict`]); false when it has no
    /// worker or was evicted already.
    pub fn evict(&self, uid: &str, e: Eviction) -> bool {
        match lock(&self.0.workers).get(uid) {
            Some(h) if !h.evicted() && !*h.done.borrow() => {
                h.evict(e);
                true
            }
            _ => false,
        }
    }

    /// The pods the sources want now (started or not).
    pub fn desired(&self) -> Vec<Arc<Pod>> {
        lock(&self.0.desired).clone()
    }

    /// Whether pod `uid` was evicted (its worker still there).
    pub fn evicted(&self, uid: &str) -> bool {
        lock(&self.0.workers).get(uid).is_some_and(Handle::evicted)
    }

    /// Wakes the worker of pod `uid`; false when no worker has it.
    pub fn notify(&self, uid: &str) -> bool {
        let workers = lock(&self.0.workers);
        let Some(h) = workers.get(uid) else {
            return false;
        };
        h.sync();
        true
    }

    /// Makes the workers match `desired` (by UID): terminates those whose
    /// pod is gone, starts one per new pod, after any pod of the same full
    /// name has finished terminating.
    pub fn update(&self, desired: &BTreeMap<String, Arc<Pod>>) {
        *lock(&self.0.desired) = desired.values().cloned().collect();
        let mut workers = lock(&self.0.workers);
        for (uid, h) in workers.iter() {
            if !desired.contains_key(uid) && !*h.done.borrow() {
                h.terminate();
            }
        }
        for (uid, pod) in desired {
            if let Some(h) = workers.get(uid) {
                h.set_pod(pod);
                continue;
            }
            let full = format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or("")
            );
            let after = workers
                .values()
                .find(|h| h.full_name == full)
                .map(|h| h.done.clone());
            tracing::info!(pod = %full, uid = %uid, "pod added");
            let h = worker::spawn(self.0.clone(), uid.clone(), Some(pod.clone()), after, None);
            workers.insert(uid.clone(), h);
        }
    }

    /// Pods the runtime has that no source wants (a file removed while the
    /// agent was down): terminate them with the grace they were created
    /// with.
    pub async fn cleanup_orphans(&self, desired: &BTreeMap<String, Arc<Pod>>) {
        {
            let workers = lock(&self.0.workers);
            self.0
                .allocation
                .retain(&|uid| desired.contains_key(uid) || workers.contains_key(uid));
        }
        let Ok(list) = self.0.cri.list_pod_uids().await else {
            return;
        };
        let mut orphans: Vec<(String, (String, String))> = Vec::new();
        {
            let workers = lock(&self.0.workers);
            for s in &list {
                if !desired.contains_key(&s.uid)
                    && !workers.contains_key(&s.uid)
                    && !orphans.iter().any(|(u, _)| *u == s.uid)
                {
                    orphans.push((s.uid.clone(), (s.namespace.clone(), s.name.clone())));
                }
            }
        }
        for (uid, name) in orphans {
            if let Ok(list) = self.0.cri.list_container_graces(&uid).await {
                lock(&self.0.orphan_graces).extend(list);
            }
            tracing::info!(uid = %uid, "terminating a pod no source defines");
            let h = worker::spawn(self.0.clone(), uid.clone(), None, None, Some(name));
            lock(&self.0.workers).insert(uid, h);
        }
        lock(&self.0.backoff).gc(clock::now());
    }
}
