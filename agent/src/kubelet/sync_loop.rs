//! kubelet's `syncLoop`: one task that takes the sources' pod sets
//! ([`PodUpdate`]), admits the API server's pods, and hands the desired
//! set to the pod workers; it also looks for orphans (pods the runtime has
//! that no source defines) when PLEG reports a pod no worker has, when the
//! API server's pods were first listed, and every [`ORPHAN_SWEEP`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::config::{self, PodSet, PodUpdate};
use crate::events::{EventType, Object, Recorder};
use crate::health::Health;
use crate::lifecycle::predicate;
use crate::nodestatus;
use crate::pod_workers::PodWorkers;
use crate::{eviction, status};

/// How often the runtime is asked for orphans when nothing reported one.
pub(super) const ORPHAN_SWEEP: Duration = Duration::from_secs(30);

/// What the loop holds.
pub(super) struct SyncLoop {
    /// The latest set of each source.
    pub pods: config::Pods,
    pub updates: tokio::sync::mpsc::Receiver<PodUpdate>,
    pub admission: Admit,
    pub workers: PodWorkers,
    /// The static pods, for their mirror pods.
    pub statics: tokio::sync::watch::Sender<PodSet>,
    pub health: Health,
    /// PLEG saw a pod that no worker has.
    pub unknown_pod: Arc<tokio::sync::Notify>,
}

/// Runs until `shutdown` resolves.
pub(super) async fn run(mut s: SyncLoop, shutdown: impl Future<Output = ()>) {
    s.statics.send_replace(s.pods.file.clone());
    let mut desired = s.desired();
    if s.pods.ready() {
        s.workers.cleanup_orphans(&desired).await;
    }
    s.workers.update(&desired);
    let start = tokio::time::Instant::now();
    let mut housekeeping =
        tokio::time::interval_at(start + Duration::from_secs(2), Duration::from_secs(2));
    // Not at every 2 s housekeeping: at 30 idle pods those listings were a
    // tenth of the agent's CPU.
    let mut swept = tokio::time::Instant::now();
    let mut listed_before = s.pods.ready();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(update) = s.updates.recv() => {
                if s.pods.apply(update) {
                    s.statics.send_replace(s.pods.file.clone());
                }
            }
            () = s.unknown_pod.notified() => {
                if s.pods.ready() {
                    s.workers.cleanup_orphans(&desired).await;
                    swept = tokio::time::Instant::now();
                }
                continue;
            }
            _ = housekeeping.tick() => {
                s.health.synced();
                let listed = s.pods.ready();
                if listed && (!listed_before || swept.elapsed() >= ORPHAN_SWEEP) {
                    s.workers.cleanup_orphans(&desired).await;
                    swept = tokio::time::Instant::now();
                }
                listed_before = listed;
                continue;
            }
        }
        s.health.synced();
        desired = s.desired();
        s.workers.update(&desired);
    }
}

impl SyncLoop {
    /// The static pods and the admitted API server's pods.
    fn desired(&mut self) -> PodSet {
        let admitted = self.admission.run(&self.pods.file, &self.pods.api);
        config::merged(&self.pods.file, &admitted)
    }
}

/// Admission of the API server's pods ([`predicate`]) and what it touches.
pub(super) struct Admit {
    pub state: predicate::Admission,
    /// The eviction manager's pressure conditions.
    pub pressure: eviction::Pressure,
    pub node: nodestatus::SharedMeta,
    pub allocatable: nodestatus::setters::Allocatable,
    pub name: String,
    pub statuses: status::Manager,
    pub recorder: Recorder,
    pub workers: PodWorkers,
}

impl Admit {
    /// The API server's pods to run; a refused one is failed (its status
    /// goes to the API server) with a Warning event, as kubelet's
    /// `rejectPod`.
    fn run(
        &mut self,
        statics: &BTreeMap<String, Arc<Pod>>,
        api: &BTreeMap<String, Arc<Pod>>,
    ) -> BTreeMap<String, Arc<Pod>> {
        let meta = self
            .node
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let a = self.allocatable;
        let view = predicate::NodeView {
            name: self.name.clone(),
            labels: meta.labels,
            taints: meta.taints,
            allocatable: predicate::Resources {
                cpu_milli: u128::from(a.cpu_milli),
                memory: u128::from(a.memory),
                ephemeral: u128::from(a.ephemeral),
                pods: u128::from(a.pods),
            },
            pressure: self
                .pressure
                .borrow()
                .iter()
                .map(|c| c.name().to_string())
                .collect(),
        };
        let finished = |uid: &str| {
            self.statuses.get(uid).is_some_and(|p| {
                p.status
                    .and_then(|s| s.phase)
                    .is_some_and(|ph| crate::phase::is_terminal(&ph))
            })
        };
        let d = self.state.admit(&view, statics, api, finished, |uid| {
            self.workers.has_worker(uid)
        });
        for (uid, pod, why) in d.rejected {
            let message = format!("Pod was rejected: {}", why.message);
            let obj = Object {
                kind: "Pod",
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: uid.clone(),
                field_path: String::new(),
            };
            self.recorder
                .event(&obj, EventType::Warning, &why.reason, &why.message);
            let mut failed = (*pod).clone();
            failed.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(crate::phase::FAILED.into()),
                reason: Some(why.reason),
                message: Some(message),
                ..Default::default()
            });
            self.statuses.set(&uid, failed);
        }
        for uid in d.forgotten {
            self.statuses.remove(&uid);
        }
        d.run
    }
}
