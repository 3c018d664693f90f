//! The probe handlers (exec through CRI, httpGet, tcpSocket, grpc health)
//! and each pod's probe workers: one tokio task per (container instance,
//! probe kind), started when a container is seen running and dropped when
//! it stops, so a restarted container starts its probes over. A result
//! that crosses its threshold wakes the pod worker, which restarts the
//! container (liveness, startup) or republishes readiness.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::clock::now;
use crate::events::{EventType, Object, Recorder};
use crate::metrics::{self, ProbeLabels};
use crate::mutex::lock;
use crate::plan::{Observed, State};
use crate::probe::{self, Kind, Outcome, Params, Report};
use crate::runtime::Cri;
use crate::status::ProbeState;

mod handlers;
mod worker;

pub use handlers::{KUBE_VERSION, run};

/// `prober_probe_total` and `prober_probe_duration_seconds`.
#[derive(Debug, Clone, Default)]
pub struct Metrics(Arc<Mutex<(metrics::ProbeCounts, metrics::ProbeDurations)>>);

impl Metrics {
    /// One probe run: `prober_probe_total`, and for successful and unknown
    /// results (as kubelet) `prober_probe_duration_seconds`.
    pub fn count(&self, labels: &ProbeLabels, result: &'static str, took: Duration) {
        let mut m = lock(&self.0);
        let (counts, durations) = &mut *m;
        *counts.entry((labels.clone(), result)).or_default() += 1;
        if result != "failed" {
            let key = ProbeLabels {
                pod_uid: String::new(),
                ..labels.clone()
            };
            let fresh = || {
                (
                    labels.pod_uid.clone(),
                    metrics::Histogram::new(metrics::DEFAULT_BUCKETS),
                )
            };
            let entry = durations.entry(key).or_insert_with(fresh);
            if entry.0 != labels.pod_uid {
                // A new pod of the same name: its series starts over.
                *entry = fresh();
            }
            entry.1.observe(took.as_secs_f64());
        }
    }

    /// kubelet deletes a pod's probe series when its workers stop.
    pub fn forget(&self, uid: &str) {
        let mut m = lock(&self.0);
        m.0.retain(|(l, _), _| l.pod_uid != uid);
        m.1.retain(|_, (owner, _)| owner != uid);
    }

    /// `/metrics/probes`.
    pub fn render(&self) -> Vec<metrics::Family> {
        let m = lock(&self.0);
        metrics::probes(&m.0, &m.1)
    }
}

/// The address probes use: the node's for host-network pods, else the
/// sandbox's.
pub fn address(host_ip: &str, pod: &Pod, observed: &Observed) -> String {
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let ip = observed
        .sandboxes
        .first()
        .map(|s| s.ip.clone())
        .unwrap_or_default();
    if host_network || ip.is_empty() {
        host_ip.to_string()
    } else {
        ip
    }
}

/// Results by (container ID, kind).
type Results = Arc<Mutex<HashMap<(String, Kind), bool>>>;

/// The probe tasks of one container instance.
#[derive(Debug)]
struct Group {
    id: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Group {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One pod's probes.
#[derive(Debug, Default)]
pub struct PodProbes {
    /// By container name.
    groups: HashMap<String, Group>,
    results: Results,
}

/// What the probe tasks of a pod need.
pub struct Env<'a> {
    pub cri: &'a Cri,
    pub recorder: &'a Recorder,
    pub metrics: &'a Metrics,
    /// When the agent started (start-up spread of first probes).
    pub agent_started: std::time::Instant,
    pub wake: &'a Arc<Notify>,
    pub pod: &'a Object,
    pub pod_ip: &'a str,
}

impl PodProbes {
    /// Startup and readiness results of container `id`.
    pub fn state(&self, id: &str) -> ProbeState {
        let r = lock(&self.results);
        ProbeState {
            started: r.get(&(id.to_string(), Kind::Startup)).copied(),
            ready: r.get(&(id.to_string(), Kind::Readiness)).copied(),
        }
    }

    /// The liveness or startup probe that failed for container `id`, and
    /// its grace period.
    pub fn unhealthy(&self, pod: &Pod, name: &str, id: &str) -> Option<(Kind, Option<Duration>)> {
        let r = lock(&self.results);
        let kind = [Kind::Liveness, Kind::Startup]
            .into_iter()
            .find(|k| r.get(&(id.to_string(), *k)) == Some(&false))?;
        let spec = pod.spec.as_ref()?;
        let c = spec
            .containers
            .iter()
            .chain(crate::plan::sidecars(spec))
            .find(|c| c.name == name)?;
        Some((kind, kind.of(c).and_then(|p| Params::of(p, kind).grace)))
    }

    /// Stops every probe.
    pub fn clear(&mut self) {
        self.groups.clear();
        lock(&self.results).clear();
    }

    /// Starts probes for app containers and sidecars that are running and
    /// not yet probed; drops those of containers that are gone.
    pub fn sync(&mut self, env: &Env<'_>, pod: &Pod, observed: &Observed) {
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let mut keep: Vec<String> = Vec::new();
        for c in spec.containers.iter().chain(crate::plan::sidecars(spec)) {
            if Kind::ALL.iter().all(|k| k.of(c).is_none()) {
                continue;
            }
            let running = observed
                .latest(&c.name)
                .filter(|l| l.state == State::Running);
            let Some(r) = running else {
                self.groups.remove(&c.name);
                continue;
            };
            keep.push(c.name.clone());
            if self.groups.get(&c.name).is_some_and(|g| g.id == r.id) {
                continue;
            }
            let since_start = now().saturating_sub(Duration::from_nanos(
                u64::try_from(r.started_at).unwrap_or(0),
            ));
            let group = self.spawn(env, c, &r.id, since_start);
            self.groups.insert(c.name.clone(), group);
        }
        self.groups.retain(|name, _| keep.contains(name));
        let ids: Vec<String> = self.groups.values().map(|g| g.id.clone()).collect();
        lock(&self.results).retain(|(id, _), _| ids.contains(id));
    }

    fn spawn(
        &self,
        env: &Env<'_>,
        c: &k8s_openapi::api::core::v1::Container,
        id: &str,
        since_start: Duration,
    ) -> Group {
        let (started_tx, started_rx) = watch::channel(false);
        let started_tx = Arc::new(started_tx);
        let has_startup = c.startup_probe.is_some();
        let mut tasks = Vec::new();
        for kind in Kind::ALL {
            let Some(p) = kind.of(c) else { continue };
            let params = Params::of(p, kind);
            let mut obj = env.pod.clone();
            obj.field_path = if crate::plan::is_sidecar(c) {
                format!("spec.initContainers{{{}}}", c.name)
            } else {
                format!("spec.containers{{{}}}", c.name)
            };
            let target = match probe::target(p, c, env.pod_ip) {
                Ok(t) => t,
                Err(e) => {
                    env.recorder.event(
                        &obj,
                        EventType::Warning,
                        crate::events::reason::CONTAINER_UNHEALTHY,
                        &format!("{} probe errored: {e}", kind.as_str()),
                    );
                    continue;
                }
            };
            let gate = (has_startup && kind != Kind::Startup).then(|| started_rx.clone());
            let cri = env.cri.clone();
            let (recorder, metrics) = (env.recorder.clone(), env.metrics.clone());
            let agent_started = env.agent_started;
            let wake = env.wake.clone();
            let results = self.results.clone();
            let started_tx = started_tx.clone();
            let labels = ProbeLabels {
                probe_type: kind.as_str(),
                container: c.name.clone(),
                pod: env.pod.name.clone(),
                namespace: env.pod.namespace.clone(),
                pod_uid: env.pod.uid.clone(),
            };
            let id = id.to_string();
            tasks.push(tokio::spawn(async move {
                let probe_id = id.clone();
                let probe = move |timeout| {
                    let (cri, id, target) = (cri.clone(), probe_id.clone(), target.clone());
                    async move { run(&cri, &id, &target, timeout).await }
                };
                let report = |r: Report| match r {
                    Report::Probed(o, took) => {
                        metrics.count(&labels, o.metric_label(), took);
                        let (reason, msg) = match &o {
                            Outcome::Success => return,
                            Outcome::Warning(m) => (
                                crate::events::reason::CONTAINER_PROBE_WARNING,
                                format!("probe warning: {m}"),
                            ),
                            Outcome::Failure(m) => (
                                crate::events::reason::CONTAINER_UNHEALTHY,
                                format!("probe failed: {m}"),
                            ),
                            Outcome::Error(m) => (
                                crate::events::reason::CONTAINER_UNHEALTHY,
                                format!("probe errored: {m}"),
                            ),
                        };
                        let msg = format!("{} {msg}", kind.as_str());
                        recorder.event(&obj, EventType::Warning, reason, &msg);
                    }
                    Report::Result(v) => {
                        let old = lock(&results).insert((id.clone(), kind), v);
                        if kind == Kind::Startup && v {
                            started_tx.send_replace(true);
                        }
                        if old != Some(v) {
                            wake.notify_one();
                        }
                    }
                };
                let jitter = probe::start_jitter(
                    agent_started.elapsed(),
                    params.period,
                    &format!("{id}/{}", kind.as_str()),
                );
                worker::run_loop(kind, params, since_start, jitter, gate, probe, report).await;
            }));
        }
        Group {
            id: id.to_string(),
            tasks,
        }
    }
}
