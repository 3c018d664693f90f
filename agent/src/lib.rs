//! The node agent: static pods from a folder, one worker per pod syncing it
//! through CRI (kubelet's `computePodActions`, restart back-off, init
//! containers, hooks, graceful termination), PLEG, pod status, events and
//! the HTTP endpoints. It talks to the runtime only through CRI, keeps no
//! state of its own that CRI and the pod folder cannot rebuild, and can be
//! killed at any moment: a restarted agent recognises its containers by
//! their labels and spec hash and restarts nothing that is healthy.

pub mod backoff;
pub mod cadvisor;
pub mod cri_config;
pub mod events;
pub mod hooks;
mod http;
pub mod httpc;
pub mod image_gc;
pub mod kmsg;
pub mod logs;
pub mod manifest;
pub mod metrics;
mod oom;
pub mod plan;
mod pleg;
pub mod probe;
pub mod prober;
pub mod qos;
pub mod resource;
pub mod runtime;
pub mod source;
pub mod status;
pub mod summary;
pub mod validate;
pub mod volumes;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edge_config::Config;
use k8s_openapi::api::core::v1::Pod;

use crate::backoff::Backoff;
use crate::cri_config::NodeInfo;
use crate::events::{Events, Object};
pub use crate::metrics::ProbeLabels;
use crate::runtime::Cri;

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach the CRI runtime at {path}: {msg}")]
    Connect { path: String, msg: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// A cgroup's CPU reading: when, usage ns, and the last rate (nanocores).
type CpuSample = (Duration, u64, Option<u64>);

/// State shared by the workers, PLEG and the HTTP endpoints.
pub struct Shared {
    pub(crate) cri: Cri,
    pub(crate) config: Config,
    pub(crate) node: NodeInfo,
    pub(crate) runtime_name: String,
    pub(crate) cgroups: Option<cgroup::Hierarchy>,
    events: Mutex<Events>,
    pub(crate) backoff: Mutex<Backoff>,
    pub(crate) image_backoff: Mutex<Backoff>,
    workers: Mutex<HashMap<String, worker::Handle>>,
    statuses: Mutex<BTreeMap<String, Pod>>,
    /// Grace periods of orphan containers (from their annotations).
    orphan_graces: Mutex<HashMap<String, Duration>>,
    /// When PLEG last relisted and the source loop last ran: `/healthz`.
    pub(crate) last_relist: Mutex<Instant>,
    pub(crate) last_source: Mutex<Instant>,
    /// When this agent started (probe start-up spread).
    pub(crate) started: Instant,
    pub(crate) manifest_errors: Mutex<Vec<String>>,
    probe_counts: Mutex<metrics::ProbeCounts>,
    probe_durations: Mutex<metrics::ProbeDurations>,
    /// OOM kills seen in /dev/kmsg by the victim's memcg.
    oom_kills: Mutex<BTreeMap<String, u64>>,
    /// CPU readings by cgroup id for `usageNanoCores`: (when, usage ns,
    /// the last rate).
    cpu_samples: Mutex<HashMap<String, CpuSample>>,
    pub(crate) metrics: Arc<metrics::AgentMetrics>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("node", &self.node).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(crate) fn event(&self, obj: &Object, kind: &str, reason: &str, msg: &str) {
        lock(&self.events).record(obj, kind, reason, msg);
    }

    pub(crate) fn set_status(&self, uid: &str, pod: Pod) {
        lock(&self.statuses).insert(uid.to_string(), pod);
    }

    pub(crate) fn status_of(&self, uid: &str) -> Option<Pod> {
        lock(&self.statuses).get(uid).cloned()
    }

    /// A worker has finished: forget its pod.
    pub(crate) fn forget(&self, uid: &str) {
        lock(&self.statuses).remove(uid);
        lock(&self.workers).remove(uid);
        lock(&self.backoff).forget_prefix(&format!("{uid}/"));
        lock(&self.image_backoff).forget_prefix(&format!("{uid}/"));
        // kubelet deletes a pod's probe series when its workers stop.
        lock(&self.probe_counts).retain(|(l, _), _| l.pod_uid != uid);
        lock(&self.probe_durations).retain(|_, (owner, _)| owner != uid);
    }

    /// One probe run: `prober_probe_total`, and for successful and unknown
    /// results (as kubelet) `prober_probe_duration_seconds`.
    pub(crate) fn count_probe(&self, labels: &ProbeLabels, result: &'static str, took: Duration) {
        *lock(&self.probe_counts)
            .entry((labels.clone(), result))
            .or_default() += 1;
        if result != "failed" {
            let key = ProbeLabels {
                pod_uid: String::new(),
                ..labels.clone()
            };
            let mut d = lock(&self.probe_durations);
            let entry = d.entry(key).or_insert_with(|| {
                (
                    labels.pod_uid.clone(),
                    metrics::Histogram::new(metrics::DEFAULT_BUCKETS),
                )
            });
            if entry.0 != labels.pod_uid {
                // A new pod of the same name: its series starts over.
                *entry = (
                    labels.pod_uid.clone(),
                    metrics::Histogram::new(metrics::DEFAULT_BUCKETS),
                );
            }
            entry.1.observe(took.as_secs_f64());
        }
    }

    pub(crate) fn record_oom(&self, kill: &kmsg::OomKill) {
        *lock(&self.oom_kills)
            .entry(kill.task_memcg.clone())
            .or_default() += 1;
    }

    /// OOM kills by victim memcg (`container_oom_events_total`).
    pub(crate) fn oom_kills(&self) -> BTreeMap<String, u64> {
        lock(&self.oom_kills).clone()
    }

    /// `/stats/summary`, given the containers' writable layers (from the
    /// runtime). Reads cgroupfs and walks volume and log directories: call
    /// it off the async workers.
    pub(crate) fn summary(&self, rootfs: HashMap<String, (u64, u64)>) -> serde_json::Value {
        let snap = cadvisor::collect(self);
        let now = backoff::now();
        let mut nano_cores = HashMap::new();
        {
            let mut samples = lock(&self.cpu_samples);
            let ids: std::collections::HashSet<&str> =
                snap.entries.iter().map(|e| e.labels.id.as_str()).collect();
            samples.retain(|id, _| ids.contains(id.as_str()));
            for e in &snap.entries {
                let usage = e.stats.cpu.usage_ns;
                let entry = samples
                    .entry(e.labels.id.clone())
                    .or_insert((now, usage, None));
                let dt = now.saturating_sub(entry.0);
                // A rate over at least a second; in between, the last one.
                if dt >= Duration::from_secs(1) {
                    let rate = u128::from(usage.saturating_sub(entry.1)) * 1_000_000_000
                        / dt.as_nanos().max(1);
                    *entry = (now, usage, Some(u64::try_from(rate).unwrap_or(u64::MAX)));
                }
                if let Some(r) = entry.2 {
                    nano_cores.insert(e.labels.id.clone(), r);
                }
            }
        }
        let read_num = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let now_s = now.as_secs_f64();
        let processes = std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .bytes()
                            .all(|b| b.is_ascii_digit())
                    })
                    .count() as u64
            })
            .unwrap_or(0);
        let mut pods = HashMap::new();
        let mut logs = HashMap::new();
        let mut volume_stats = HashMap::new();
        for p in self.pods() {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let start = p
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| summary::rfc3339(t.0.as_second()))
                .unwrap_or_default();
            pods.insert(
                uid.clone(),
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    p.metadata.namespace.clone().unwrap_or_default(),
                    start,
                ),
            );
            let ed = volumes::pod_dir(&self.config.data_dir, &uid)
                .join("volumes")
                .join("kubernetes.io~empty-dir");
            let mut vols = Vec::new();
            for v in p.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
                if let Some(e) = &v.empty_dir {
                    let (bytes, inodes) = summary::du(&ed.join(&v.name));
                    let memory = e.medium.as_deref() == Some("Memory");
                    vols.push((v.name.clone(), bytes, inodes, memory));
                }
            }
            volume_stats.insert(uid.clone(), vols);
            let dir = cri_config::pod_log_dir(&self.config.pod_logs_dir, &p);
            for c in p.spec.iter().flat_map(|s| s.containers.iter()) {
                logs.insert(
                    (uid.clone(), c.name.clone()),
                    summary::du(&dir.join(&c.name)),
                );
            }
        }
        let x = summary::Extras {
            node_name: self.node.name.clone(),
            now: summary::rfc3339(now.as_secs() as i64),
            boot_time: summary::rfc3339((now_s - read_num("/proc/uptime")) as i64),
            nano_cores,
            node_fs: summary::Fs::of(&self.config.data_dir),
            image_fs: summary::Fs::of(&self.config.images_dir),
            pid_max: read_num("/proc/sys/kernel/pid_max") as u64,
            processes,
            pods,
            logs,
            rootfs,
            volumes: volume_stats,
        };
        summary::build(&snap, &x, &cgroup::procfs::net_dev(1))
    }

    /// `/metrics`: the agent's own, kubelet's names.
    pub(crate) fn agent_metrics(&self) -> String {
        let pods = self.pods();
        let mut running_pods = 0;
        let mut states: BTreeMap<&str, u64> = BTreeMap::new();
        for p in &pods {
            let statuses = p
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten());
            let mut any_running = false;
            for c in statuses {
                let st = c.state.as_ref();
                let state = if st.is_some_and(|s| s.running.is_some()) {
                    any_running = true;
                    "running"
                } else if st.is_some_and(|s| s.terminated.is_some()) {
                    "exited"
                } else if c.container_id.is_some() {
                    "created"
                } else {
                    continue;
                };
                *states.entry(state).or_default() += 1;
            }
            if any_running
                || p.status
                    .as_ref()
                    .is_some_and(|s| s.phase.as_deref() == Some("Running"))
            {
                running_pods += 1;
            }
        }
        self.metrics.render(running_pods, &states)
    }

    pub(crate) fn probe_metrics(&self) -> String {
        let counts = lock(&self.probe_counts).clone();
        metrics::probes(&counts, &lock(&self.probe_durations))
    }

    pub(crate) fn orphan_grace(&self, id: &str) -> Option<Duration> {
        lock(&self.orphan_graces).get(id).copied()
    }

    /// Wakes the worker of pod `uid`, if any.
    pub(crate) fn notify(&self, uid: &str) {
        if let Some(h) = lock(&self.workers).get(uid) {
            h.sync();
        }
    }

    pub(crate) fn pods(&self) -> Vec<Pod> {
        lock(&self.statuses).values().cloned().collect()
    }

    pub(crate) fn events_list(&self) -> Vec<k8s_openapi::api::core::v1::Event> {
        lock(&self.events).list()
    }
}

/// Facts about this node: name, an address, CPUs and memory.
fn node_info(name: &str, ip: Option<std::net::IpAddr>) -> NodeInfo {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as u128;
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u128>().ok())
        })
        .unwrap_or(0)
        * 1024;
    NodeInfo {
        name: name.into(),
        host_ip: ip
            .map(|i| i.to_string())
            .or_else(host_ip)
            .unwrap_or_else(|| "127.0.0.1".into()),
        cpu_milli: cpus * 1000,
        memory_bytes: mem,
    }
}

/// The first non-loopback IPv4 address of an interface that is up
/// (kubelet: the node's InternalIP).
fn host_ip() -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        if a.flags
            .contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK)
            || !a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP)
        {
            continue;
        }
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Some(sin.ip().to_string());
        }
    }
    None
}

/// Runs the agent until `shutdown` resolves. Containers keep running when
/// it returns.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    // The runtime may still be starting (`picolet up`, boot): wait for it.
    let socket = config.cri_socket.clone();
    let metrics = Arc::new(metrics::AgentMetrics::default());
    let deadline = Instant::now() + config.runtime_request_timeout;
    let (cri, runtime_name) = loop {
        let attempt = async {
            let cri = Cri::connect(&socket, config.runtime_request_timeout, metrics.clone())
                .await
                .map_err(|e| e.to_string())?;
            let name = cri.runtime_name().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((cri, name))
        };
        match attempt.await {
            Ok(v) => break v,
            Err(e) if Instant::now() >= deadline => {
                return Err(Error::Connect {
                    path: socket.display().to_string(),
                    msg: e,
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    tracing::info!(runtime = %runtime_name, socket = %socket.display(), node = %config.node_name, "agent connected to the CRI runtime");
    let cgroups = match cgroup::Hierarchy::detect() {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("no pod cgroups: {e}");
            None
        }
    };
    let node = node_info(&config.node_name, config.node_ip);
    let shared = Arc::new(Shared {
        cri,
        node,
        runtime_name,
        cgroups,
        events: Mutex::new(Events::new(1000, &config.node_name)),
        backoff: Mutex::new(Backoff::new(
            config.restart_backoff_initial,
            config.restart_backoff_max,
        )),
        image_backoff: Mutex::new(Backoff::new(
            config.restart_backoff_initial,
            config.restart_backoff_max,
        )),
        workers: Mutex::new(HashMap::new()),
        statuses: Mutex::new(BTreeMap::new()),
        orphan_graces: Mutex::new(HashMap::new()),
        last_relist: Mutex::new(Instant::now()),
        started: Instant::now(),
        last_source: Mutex::new(Instant::now()),
        manifest_errors: Mutex::new(Vec::new()),
        probe_counts: Mutex::new(metrics::ProbeCounts::new()),
        probe_durations: Mutex::new(metrics::ProbeDurations::new()),
        oom_kills: Mutex::new(BTreeMap::new()),
        cpu_samples: Mutex::new(HashMap::new()),
        metrics,
        config,
    });

    let cfg = &shared.config;
    let healthz = SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
    let api_ip = if cfg.address.is_loopback() {
        cfg.address
    } else {
        tracing::warn!(
            "address: {} ignored: the API has no authentication yet and binds 127.0.0.1 only",
            cfg.address
        );
        std::net::IpAddr::from([127, 0, 0, 1])
    };
    let api = SocketAddr::new(api_ip, cfg.port);
    http::serve(shared.clone(), healthz, api)
        .await
        .map_err(|source| Error::Io {
            what: format!("listen on {healthz} / {api}"),
            source,
        })?;
    tokio::spawn(pleg::run(shared.clone()));
    oom::spawn(shared.clone());
    logs::spawn(shared.clone());
    image_gc::spawn(shared.clone());

    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    source::watch(&cfg.static_pod_path, tx).map_err(|source| Error::Io {
        what: format!("watch {}", cfg.static_pod_path.display()),
        source,
    })?;
    let mut src = source::FileSource::new(&cfg.static_pod_path, &cfg.node_name);
    // The first scan happens before anything else looks at `desired`:
    // an orphan is only what the folder does not define.
    let mut desired = sync_source(&shared, &mut src);
    let start = tokio::time::Instant::now();
    let mut tick =
        tokio::time::interval_at(start + cfg.file_check_frequency, cfg.file_check_frequency);
    let mut housekeeping =
        tokio::time::interval_at(start + Duration::from_secs(2), Duration::from_secs(2));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => desired = sync_source(&shared, &mut src),
            Some(()) = rx.recv() => {
                while rx.try_recv().is_ok() {}
                desired = sync_source(&shared, &mut src);
            }
            _ = housekeeping.tick() => {
                *lock(&shared.last_source) = Instant::now();
                cleanup_orphans(&shared, &desired).await;
                lock(&shared.backoff).gc(backoff::now());
            }
        }
    }
    tracing::info!("agent stopping; containers keep running");
    Ok(())
}

/// Rescans the folder and starts/terminates workers to match.
fn sync_source(shared: &Arc<Shared>, src: &mut source::FileSource) -> BTreeMap<String, Arc<Pod>> {
    *lock(&shared.last_source) = Instant::now();
    let scan = src.scan();
    for e in &scan.new_errors {
        let obj = Object {
            kind: "Node",
            name: shared.config.node_name.clone(),
            ..Default::default()
        };
        shared.event(&obj, "Warning", "InvalidManifest", e);
    }
    *lock(&shared.manifest_errors) = scan.errors.clone();
    let mut desired: BTreeMap<String, Arc<Pod>> = BTreeMap::new();
    for (uid, (path, pod)) in scan.pods {
        if desired.len() >= shared.config.max_pods as usize {
            let obj = Object {
                kind: "Node",
                name: shared.config.node_name.clone(),
                ..Default::default()
            };
            shared.event(
                &obj,
                "Warning",
                "OutOfpods",
                &format!(
                    "{}: not admitted: the node already runs maxPods={} pods",
                    path.display(),
                    shared.config.max_pods
                ),
            );
            continue;
        }
        desired.insert(uid, pod);
    }
    let mut workers = lock(&shared.workers);
    // Gone from the source: terminate.
    for (uid, h) in workers.iter() {
        if !desired.contains_key(uid) && !*h.done.borrow() {
            h.terminate();
        }
    }
    // New: start, after any pod of the same name has finished terminating.
    for (uid, pod) in &desired {
        if workers.contains_key(uid) {
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
        let h = worker::spawn(shared.clone(), uid.clone(), Some(pod.clone()), after, None);
        workers.insert(uid.clone(), h);
    }
    desired
}

/// Pods the runtime has that no source wants (a file removed while the
/// agent was down): terminate them with the grace they were created with.
async fn cleanup_orphans(shared: &Arc<Shared>, desired: &BTreeMap<String, Arc<Pod>>) {
    let Ok(list) = shared.cri.list_pod_uids().await else {
        return;
    };
    let mut orphans: Vec<(String, (String, String))> = Vec::new();
    {
        let workers = lock(&shared.workers);
        for (uid, _, name, _) in &list {
            if !desired.contains_key(uid)
                && !workers.contains_key(uid)
                && !orphans.iter().any(|(u, _)| u == uid)
            {
                orphans.push((uid.clone(), name.clone()));
            }
        }
    }
    for (uid, name) in orphans {
        if let Ok(list) = shared.cri.list_container_graces(&uid).await {
            lock(&shared.orphan_graces).extend(list);
        }
        tracing::info!(uid = %uid, "terminating a pod no source defines");
        let h = worker::spawn_orphan(shared.clone(), uid.clone(), name);
        lock(&shared.workers).insert(uid, h);
    }
}
