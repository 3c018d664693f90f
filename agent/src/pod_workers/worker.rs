//! One worker per pod: serial per pod, parallel across pods. Each sync
//! observes the pod through CRI, asks [`plan`] what to do and applies it;
//! termination runs preStop hooks and stops containers within the grace
//! period, then removes everything the pod had.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use tokio::sync::{Notify, watch};

use crate::clock::{now, now_ns};
use crate::cri_config::{self, SandboxEnv};
use crate::events::reason as event;
use crate::events::{EventType, Object};
use crate::mutex::lock;
use crate::plan::{self, Observed, ObservedContainer, State};
use crate::prober::{self, PodProbes};
use crate::qos::{self, Qos};
use crate::reason;
use crate::status::Waiting;
use crate::volumes;

use super::{Shared, SyncError};

mod devices;
mod image_volumes;
mod report;
mod resize;
mod start;
mod stop;
mod userns;
use stop::Stop;

/// What applying a plan did.
enum Applied {
    Nothing,
    Acted,
    /// RunPodSandbox failed: retry in a few seconds.
    SandboxFailed,
}

/// kubelet's minimum grace after a preStop hook used up the period.
const MIN_GRACE: Duration = Duration::from_secs(2);

/// The handle the agent keeps for a worker.
#[derive(Debug)]
pub struct Handle {
    /// Wake-ups (PLEG, source): many coalesce into one sync.
    wake: Arc<Notify>,
    /// Set once the pod is gone from its source: terminate it.
    stop: watch::Sender<bool>,
    /// Becomes `true` once the worker has terminated the pod.
    pub done: watch::Receiver<bool>,
    pub full_name: String,
    /// Set once the eviction manager evicted the pod.
    evict: watch::Sender<Option<Eviction>>,
    /// The pod as its source now defines it (a new image, a resize).
    pod: watch::Sender<Option<Arc<Pod>>>,
}

/// An eviction: the grace its containers get and the status's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub grace: Duration,
    pub message: String,
}

impl Handle {
    /// Something changed: sync soon.
    pub fn sync(&self) {
        self.wake.notify_one();
    }

    /// The pod is gone from its source: terminate it. Never lost, however
    /// many wake-ups are pending.
    pub fn terminate(&self) {
        self.stop.send_replace(true);
    }

    /// Evicts the pod (kubelet's `TerminatePodAbnormally` with `Evict`):
    /// its containers stop within `e.grace`, it is Failed with reason
    /// Evicted, and nothing of it starts again.
    pub fn evict(&self, e: Eviction) {
        self.evict.send_replace(Some(e));
        self.wake.notify_one();
    }

    /// Whether the pod was evicted.
    pub fn evicted(&self) -> bool {
        self.evict.borrow().is_some()
    }

    /// The source changed the pod's spec (same UID): the worker syncs to
    /// the new one. An equal pod wakes nobody.
    pub fn set_pod(&self, pod: &Arc<Pod>) {
        let changed = self.pod.send_if_modified(|cur| match cur {
            Some(old) if Arc::ptr_eq(old, pod) || **old == **pod => false,
            _ => {
                *cur = Some(pod.clone());
                true
            }
        });
        if changed {
            self.wake.notify_one();
        }
    }
}

/// The pod a worker syncs: the desired pod, or only what the runtime
/// knows (an orphan whose source is gone: terminate only).
pub struct Worker {
    shared: Arc<Shared>,
    pod: Option<Arc<Pod>>,
    /// Newer versions of the pod from its source ([`Handle::set_pod`]).
    updates: watch::Receiver<Option<Arc<Pod>>>,
    uid: String,
    obj: Object,
    waiting: HashMap<String, Waiting>,
    start_time: i64,
    qos: Qos,
    wake: Arc<Notify>,
    probes: PodProbes,
    /// The pod's start duration has been recorded, or is not this agent's
    /// to record (its containers were already running when it came).
    start_recorded: bool,
    /// This worker started a container.
    started_any: bool,
    /// When the pod's configMap/secret/projected volumes were last written
    /// (they are refreshed every syncFrequency while the pod runs).
    volumes_written: Option<tokio::time::Instant>,
    /// The eviction, once the eviction manager evicted the pod.
    evicted: watch::Receiver<Option<Eviction>>,
    /// What the last sync saw, and when. A sync that only the clock woke
    /// (syncFrequency, a back-off's end) plans from it: any change of the
    /// pod's containers or sandbox wakes the worker (PLEG, the event
    /// stream), as kubelet's pod cache spares its periodic syncs the
    /// runtime. Older than [`OBSERVED_MAX_AGE`], it is observed again.
    observed: Option<(Observed, tokio::time::Instant)>,
    /// The pod has the devices it asks for (or asks for none); a pod
    /// refused them is failed and never runs.
    devices_admitted: bool,
    refused: Option<devices::Refused>,
    /// The pod's own user namespace (`hostUsers: false`), once it has its
    /// range ([`Worker::pod_userns`]).
    userns: Option<cri_proto::v1::UserNamespace>,
    /// The pod's admitted and actuated resources, once loaded or made
    /// ([`Worker::allocate`]).
    alloc: Option<crate::allocation::PodState>,
    /// The resize conditions the pod status shows.
    resize: resize::ResizeStatus,
}

/// How long a clock-woken sync may plan from the last observation: at most
/// this long a change PLEG did not report goes unseen (kubelet's evented
/// PLEG relists every 300 s). At 30 idle pods the 60 s resyncs' four CRI
/// calls each were ~70 % of the agent's calls to the runtime.
const OBSERVED_MAX_AGE: Duration = Duration::from_secs(300);

/// Starts a worker. `after` is the `done` of a pod with the same full
/// name that is still terminating: the new one waits for it.
pub fn spawn(
    shared: Arc<Shared>,
    uid: String,
    pod: Option<Arc<Pod>>,
    after: Option<watch::Receiver<bool>>,
    orphan_name: Option<(String, String)>,
) -> Handle {
    let wake = Arc::new(Notify::new());
    let (stop, stop_rx) = watch::channel(orphan_name.is_some());
    let (done_tx, done) = watch::channel(false);
    let (evict, evicted) = watch::channel(None);
    let (pod_tx, updates) = watch::channel(pod.clone());
    let (ns, name) = pod
        .as_ref()
        .map(|p| {
            (
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            )
        })
        .or(orphan_name)
        .unwrap_or_default();
    let full_name = format!("{ns}/{name}");
    let qos = pod
        .as_ref()
        .and_then(|p| p.spec.as_ref())
        .map(qos::qos_class)
        .unwrap_or(Qos::BestEffort);
    let w = Worker {
        shared,
        obj: Object {
            kind: "Pod",
            namespace: ns,
            name,
            uid: uid.clone(),
            field_path: String::new(),
        },
        pod,
        updates,
        uid,
        waiting: HashMap::new(),
        start_time: now_ns(),
        qos,
        wake: wake.clone(),
        probes: PodProbes::default(),
        start_recorded: false,
        started_any: false,
        volumes_written: None,
        evicted,
        observed: None,
        devices_admitted: false,
        userns: None,
        refused: None,
        alloc: None,
        resize: resize::ResizeStatus::default(),
    };
    tokio::spawn(w.run(wake.clone(), stop_rx, done_tx, after));
    Handle {
        wake,
        stop,
        done,
        full_name,
        evict,
        pod: pod_tx,
    }
}

impl Worker {
    async fn run(
        mut self,
        wake: Arc<Notify>,
        mut stop: watch::Receiver<bool>,
        done: watch::Sender<bool>,
        after: Option<watch::Receiver<bool>>,
    ) {
        if let Some(mut after) = after {
            let _ = after.wait_for(|d| *d).await;
        }
        if self.pod.is_some() {
            let mut woken = true;
            while !*stop.borrow() {
                let next = match self.sync(woken).await {
                    Ok(next) => next,
                    Err(e) => {
                        tracing::warn!(pod = %self.obj.name, "sync failed: {e}");
                        Duration::from_secs(2)
                    }
                };
                tokio::select! {
                    _ = wake.notified() => woken = true,
                    r = stop.changed() => if r.is_err() { break },
                    _ = tokio::time::sleep(next) => woken = false,
                }
            }
        }
        // Terminate until it sticks (the runtime may be restarting).
        loop {
            match self.terminate().await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(pod = %self.obj.name, uid = %self.uid, "terminating: {e}; retrying");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
        self.shared.forget(&self.uid);
        if let Some(m) = &self.shared.devices {
            m.release(&self.uid);
        }
        if let Some(m) = &self.shared.userns {
            m.release(&self.uid);
        }
        if let Err(e) = self.shared.allocation.remove(&self.uid) {
            tracing::warn!(pod = %self.obj.name, "{e}");
        }
        let _ = done.send(true);
    }

    fn event(&self, container: Option<&str>, kind: EventType, reason: &str, msg: &str) {
        let mut obj = self.obj.clone();
        if let Some(c) = container {
            obj.field_path = format!("spec.containers{{{c}}}");
        }
        self.shared.event(&obj, kind, reason, msg);
    }

    fn grace(&self) -> Duration {
        if let Some(e) = self.evicted.borrow().as_ref() {
            return e.grace;
        }
        let secs = self
            .pod
            .as_ref()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        Duration::from_secs(u64::try_from(secs).unwrap_or(0))
    }

    fn sandbox_env(&self) -> SandboxEnv {
        let cfg = &self.shared.config;
        let cgroup_parent = if cfg.cgroups_per_qos {
            qos::pod_cgroup_parent(&cfg.cgroup_root, self.qos, &self.uid)
        } else {
            String::new()
        };
        SandboxEnv {
            cgroup_parent,
            pod_logs_dir: cfg.pod_logs_dir.clone(),
            host_resolv_conf: std::fs::read_to_string(&cfg.resolv_conf).unwrap_or_default(),
            cluster_dns: cfg.cluster_dns.iter().map(|i| i.to_string()).collect(),
            cluster_domain: cfg.cluster_domain.clone(),
            userns: self.userns.clone(),
        }
    }

    fn backoff_key(&self, c: &Container) -> String {
        format!("{}/{}/{}", self.uid, c.name, cri_config::container_hash(c))
    }

    /// One sync: observe (or, when only the clock woke the worker and
    /// `woken` is false, take the last observation: [`Worker::observed`]),
    /// plan (pure), apply, publish.
    /// Returns when to sync again at the latest (kube-runtime's
    /// `Action::requeue`), which [`plan::next_sync`] decides.
    async fn sync(&mut self, woken: bool) -> Result<Duration, SyncError> {
        if self.updates.has_changed().unwrap_or(false) {
            let newer = self.updates.borrow_and_update().clone();
            if newer.is_some() {
                self.pod = newer;
            }
        }
        let Some(desired) = self.pod.clone() else {
            return Ok(Duration::from_secs(3600));
        };
        let pod = self.allocate(&desired);
        let eviction = self.evicted.borrow().clone();
        if let Some(e) = eviction {
            return self.sync_evicted(&pod, &e).await;
        }
        if self.refused.is_none() && !self.devices_admitted {
            self.refused = match self.admit_groups_policy(&pod).await {
                Some(r) => Some(r),
                None => self.admit_devices(&pod).await,
            };
        }
        if let Some(r) = self.refused.clone() {
            return self.sync_refused(&pod, &r).await;
        }
        let cri = self.shared.cri.clone();
        let (mut observed, observed_at) = match self.observed.take() {
            Some((o, at)) if !woken && at.elapsed() < OBSERVED_MAX_AGE => (o, at),
            _ => (cri.observe(&self.uid).await?, tokio::time::Instant::now()),
        };
        self.adopt(&pod, &mut observed);
        if let Some(oldest) = observed.sandboxes.last() {
            self.start_time = self.start_time.min(oldest.created_at);
        }
        let mut actions = self.plan(&pod, &observed);
        self.plan_restarts(&pod, &observed, &mut actions);
        // Waiting reasons that no longer hold go away.
        self.waiting.retain(|_, w| {
            !matches!(
                w.reason.as_str(),
                reason::CRASH_LOOP_BACK_OFF | reason::CONTAINER_CREATING
            )
        });
        let acted = match self.apply(&pod, &observed, &actions).await? {
            Applied::SandboxFailed => {
                self.publish(&pod, &observed);
                return Ok(Duration::from_secs(5));
            }
            Applied::Acted => true,
            Applied::Nothing => false,
        };
        self.record_waits(&pod, &actions.waits);
        let killed: Vec<String> = actions.kill.iter().map(|k| k.id.clone()).collect();
        // A resize changes what the runtime reports: observe again.
        let resized = self.actuate(&pod, &observed, &killed).await;
        let acted = acted || resized;
        self.refresh_volumes(&pod, &observed).await;
        let (observed, observed_at) = if acted {
            let mut o = cri.observe(&self.uid).await?;
            self.adopt(&pod, &mut o);
            (o, tokio::time::Instant::now())
        } else {
            (observed, observed_at)
        };
        self.gc(&observed).await;
        let pod_ip = prober::address(&self.shared.node.host_ip, &pod, &observed);
        let env = prober::Env {
            cri: &self.shared.cri,
            recorder: &self.shared.recorder,
            metrics: &self.shared.probe_metrics,
            agent_started: self.shared.started,
            wake: &self.wake,
            pod: &self.obj,
            pod_ip: &pod_ip,
        };
        self.probes.sync(&env, &pod, &observed);
        self.publish(&pod, &observed);
        self.release_devices_if_done();
        self.observed = Some((observed, observed_at));
        Ok(plan::next_sync(
            self.shared.config.sync_frequency,
            &actions.waits,
            self.waiting.values().map(|w| w.reason.as_str()),
        ))
    }

    /// The pure plan for this sync, given restart back-off and probe results.
    fn plan(&self, pod: &Pod, observed: &Observed) -> plan::Actions {
        let now_t = now();
        let mut backoff = lock(&self.shared.backoff);
        let spec = pod.spec.as_ref();
        // Back-off survives an agent restart: rebuilt from what the runtime
        // says of each container's latest run.
        for c in spec.into_iter().flat_map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
        }) {
            if let Some(last) = observed.latest(&c.name) {
                let started = Duration::from_nanos(u64::try_from(last.started_at).unwrap_or(0));
                backoff.seed(&self.backoff_key(c), last.restart_count, started);
            }
        }
        let lookup = |name: &str, finished_at: i64| {
            let c = spec?
                .init_containers
                .iter()
                .flatten()
                .chain(spec?.containers.iter())
                .find(|c| c.name == name)?;
            let since = Duration::from_nanos(u64::try_from(finished_at).unwrap_or(0));
            backoff.remaining(&self.backoff_key(c), since, now_t)
        };
        let unhealthy = |id: &str| {
            let c = observed.containers.iter().find(|c| c.id == id)?;
            self.probes.unhealthy(pod, &c.name, id)
        };
        let started = |id: &str| self.probes.state(id).started == Some(true);
        plan::plan(pod, observed, &lookup, &unhealthy, &started)
    }

    /// Applies the plan through CRI: stop the pod, (re)create its sandbox,
    /// kill containers, start containers.
    async fn apply(
        &mut self,
        pod: &Pod,
        observed: &Observed,
        actions: &plan::Actions,
    ) -> Result<Applied, SyncError> {
        let cri = self.shared.cri.clone();
        let mut acted = false;
        if actions.kill_pod {
            let live: Vec<&ObservedContainer> = observed.live().collect();
            let ready: Vec<String> = observed
                .sandboxes
                .iter()
                .filter(|s| s.ready)
                .map(|s| s.id.clone())
                .collect();
            if !live.is_empty() || !ready.is_empty() {
                acted = true;
                self.kill_pod_containers(&live).await;
                for id in ready {
                    cri.stop_pod_sandbox(&id).await?;
                }
            }
        }
        let no_spec = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&no_spec);
        let mut sandbox_id = actions.sandbox_id.clone();
        let mut pod_ip = observed
            .sandboxes
            .first()
            .map(|s| s.ip.clone())
            .unwrap_or_default();
        if let Some(attempt) = actions.create_sandbox {
            acted = true;
            self.prepare_pod_cgroup(pod)?;
            if attempt > 0 {
                self.event(
                    None,
                    EventType::Normal,
                    event::SANDBOX_CHANGED,
                    "Pod sandbox changed, it will be killed and re-created.",
                );
            }
            let made = match self.pod_userns(pod).await {
                Ok(()) => {
                    let cfg = cri_config::sandbox_config(pod, attempt, &self.sandbox_env());
                    cri.run_pod_sandbox(cfg).await.map_err(|e| e.to_string())
                }
                Err(e) => Err(e.to_string()),
            };
            match made {
                Ok(id) => {
                    pod_ip = cri.sandbox_ip(&id).await.unwrap_or_default();
                    sandbox_id = Some(id);
                }
                Err(e) => {
                    let msg = format!("Failed to create pod sandbox: {e}");
                    self.event(
                        None,
                        EventType::Warning,
                        event::FAILED_CREATE_POD_SANDBOX,
                        &msg,
                    );
                    // Visible in the status (Pending, each container
                    // ContainerCreating with why), not only as an event.
                    for c in spec
                        .init_containers
                        .iter()
                        .flatten()
                        .chain(spec.containers.iter())
                    {
                        self.waiting.insert(
                            c.name.clone(),
                            Waiting {
                                reason: reason::CONTAINER_CREATING.into(),
                                message: msg.clone(),
                            },
                        );
                    }
                    return Ok(Applied::SandboxFailed);
                }
            }
        }
        let kills: Vec<Stop<'_>> = actions
            .kill
            .iter()
            .filter_map(|k| {
                tracing::info!(pod = %self.obj.name, container = %k.name, id = %k.id, "{}", k.why);
                let c = observed.containers.iter().find(|c| c.id == k.id)?;
                Some((c, k.why.clone(), k.grace))
            })
            .collect();
        if !kills.is_empty() {
            acted = true;
            self.kill_containers(&kills).await;
        }
        if let Some(sb) = sandbox_id {
            let mut starts: Vec<&Container> = Vec::new();
            let inits = spec.init_containers.as_deref().unwrap_or(&[]);
            starts.extend(actions.start_init.and_then(|i| inits.get(i)));
            starts.extend(
                actions
                    .restart_sidecars
                    .iter()
                    .filter_map(|i| inits.get(*i)),
            );
            starts.extend(actions.start.iter().filter_map(|i| spec.containers.get(*i)));
            for c in starts {
                acted = true;
                self.start_container(pod, c, observed, &sb, &pod_ip).await;
            }
        }
        Ok(if acted {
            Applied::Acted
        } else {
            Applied::Nothing
        })
    }

    /// kubelet's container GC with MaxPerPodContainer = 1: per container
    /// name the newest exited container stays (for `lastState` and the
    /// restart count), older exited ones go; then old sandboxes that have
    /// no containers left.
    async fn gc(&self, observed: &Observed) {
        let cri = &self.shared.cri;
        let mut kept: BTreeMap<&str, ()> = BTreeMap::new();
        let mut removed: Vec<&str> = Vec::new();
        for c in observed
            .containers
            .iter()
            .filter(|c| c.state == State::Exited)
        {
            if kept.insert(c.name.as_str(), ()).is_none() {
                continue;
            }
            match cri.remove_container(&c.id).await {
                Ok(()) => removed.push(&c.id),
                Err(e) => tracing::debug!("gc {}: {e}", c.id),
            }
        }
        for s in observed.sandboxes.iter().skip(1).filter(|s| !s.ready) {
            let used = observed
                .containers
                .iter()
                .any(|c| c.sandbox_id == s.id && !removed.contains(&c.id.as_str()));
            if !used && let Err(e) = cri.remove_pod_sandbox(&s.id).await {
                tracing::debug!("gc sandbox {}: {e}", s.id);
            }
        }
    }

    /// Stops the pod's containers (preStop hooks, grace) and its sandboxes;
    /// what the runtime had before.
    async fn stop_pod(&mut self) -> Result<Observed, SyncError> {
        self.probes.clear();
        let cri = self.shared.cri.clone();
        let observed = cri.observe(&self.uid).await?;
        let live: Vec<&ObservedContainer> = observed.live().collect();
        if !live.is_empty() {
            self.kill_pod_containers(&live).await;
        }
        for s in &observed.sandboxes {
            cri.stop_pod_sandbox(&s.id).await?;
        }
        Ok(observed)
    }

    /// Stops and removes everything the runtime has for this pod, then the
    /// pod's cgroup, volumes and logs.
    async fn terminate(&mut self) -> Result<(), SyncError> {
        let cri = self.shared.cri.clone();
        let observed = self.stop_pod().await?;
        for c in &observed.containers {
            cri.remove_container(&c.id).await?;
        }
        for s in &observed.sandboxes {
            cri.remove_pod_sandbox(&s.id).await?;
        }
        let cfg = &self.shared.config;
        if let Some(h) = self.shared.cgroups.as_ref()
            && cfg.cgroups_per_qos
        {
            for qos in [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort] {
                let path = qos::pod_cgroup_parent(&cfg.cgroup_root, qos, &self.uid);
                if let Err(e) = h.remove_pod(&path) {
                    tracing::warn!("pod cgroup {path}: {e}");
                }
            }
        }
        volumes::cleanup(&cfg.data_dir, &self.uid)?;
        // From the names, not the pod object: an orphan (its source gone
        // while the agent was down) has none, and its logs leaked.
        let dir = match &self.pod {
            Some(pod) => Some(cri_config::pod_log_dir(&cfg.pod_logs_dir, pod)),
            None if !self.obj.name.is_empty() && !self.uid.is_empty() => {
                Some(cri_config::pod_log_dir_of(
                    &cfg.pod_logs_dir,
                    &self.obj.namespace,
                    &self.obj.name,
                    &self.uid,
                ))
            }
            None => None,
        };
        if let Some(dir) = dir
            && let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("pod logs {}: {e}", dir.display());
        }
        if !observed.sandboxes.is_empty() {
            tracing::info!(pod = %self.obj.name, uid = %self.uid, "pod terminated");
        }
        Ok(())
    }
}
