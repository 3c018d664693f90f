//! The sync loop, kubelet's `kubelet.go`: connects to the runtime, builds
//! each manager with the narrow handles it needs and wires them together —
//! the only module that knows them all. Pod sources feed desired pods to
//! [`PodWorkers`]; PLEG sends the UIDs of pods that changed on a channel
//! (`pleg.Watch()`), and this loop wakes their workers.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edge_config::Config;
use k8s_openapi::api::core::v1::Pod;

use crate::config::apiserver;
use crate::config::file::{self, ManifestErrors};
use crate::events::{EventType, Object, Recorder};
use crate::health::Health;
use crate::images::gc;
use crate::lifecycle::predicate;
use crate::logs::rotation;
use crate::nodestatus::machine;
use crate::pod_workers::{self, PodWorkers};
use crate::runtime::Cri;
use crate::stats::Stats;
use crate::{
    certificate, eviction, kube, metrics, nodestatus, oom, pleg, prober, server, status, volumes,
};

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
    #[error("{0}")]
    Owner(String),
    #[error("{0}")]
    Kubeconfig(String),
    /// The API port's TLS or authentication settings.
    #[error("{0}")]
    ApiPort(String),
}

/// Runs the agent until `shutdown` resolves. Containers keep running when
/// it returns.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    // Before anything is created: one agent per data dir (two would each
    // create the pods of the same manifests).
    let lock = config.data_dir.join("agent.lock");
    let _owner = tokio::task::spawn_blocking(move || {
        edge_config::owner::claim(&lock, "agent", edge_config::owner::WAIT)
    })
    .await
    .map_err(|e| Error::Owner(format!("claim the data dir: {e}")))?
    .map_err(Error::Owner)?;
    // Pod dirs (volumes, etc-hosts) are root's alone, fixed at every start.
    let pods_root = config.data_dir.join("agent");
    edge_config::private_dir(&pods_root).map_err(|source| Error::Io {
        what: format!("make {} private", pods_root.display()),
        source,
    })?;
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
    let node = Arc::new(machine::info(&config.node_name, config.node_ip));
    let node_uid = Arc::new(std::sync::OnceLock::new());
    let facts = nodestatus::facts(&config, &node);
    let local_facts = facts.clone();
    let registration = nodestatus::registration(&facts, &config);
    let node_meta: nodestatus::SharedMeta = Arc::new(std::sync::RwLock::new(
        nodestatus::NodeMeta::of(&registration),
    ));
    let allocatable = facts.allocatable();
    let (pressure_tx, pressure) = eviction::pressure();
    // With a bootstrap kubeconfig, the kubeconfig is ours to make (TLS
    // bootstrap) when it does not exist yet.
    let kubeconfig = match (&config.kubeconfig, &config.bootstrap_kubeconfig) {
        (k, Some(bootstrap)) => {
            let path = k.clone().unwrap_or_else(|| pods_root.join("kubeconfig"));
            certificate::bootstrap::ensure(
                &path,
                bootstrap,
                &certificate::bootstrap::cert_dir(&config.data_dir),
                &config.node_name,
            )
            .await
            .map_err(|e| Error::Kubeconfig(format!("TLS bootstrap: {e}")))?;
            Some(path)
        }
        (k, None) => k.clone(),
    };
    let api_client = match &kubeconfig {
        Some(path) => {
            let client = Arc::new(crate::kube::connect(path).map_err(Error::Kubeconfig)?);
            tracing::info!(kubeconfig = %path.display(), node = %config.node_name, "cluster mode: joining the API server");
            if config.bootstrap_kubeconfig.is_some() && config.rotate_certificates {
                let pem = certificate::bootstrap::pem_path(&certificate::bootstrap::cert_dir(
                    &config.data_dir,
                ));
                // Only the certificate bootstrap made (a kubeconfig given
                // with a certificate of its own is the admin's to renew).
                let ours = std::fs::read_to_string(path)
                    .is_ok_and(|k| k.contains(&pem.display().to_string()));
                if ours {
                    certificate::bootstrap::spawn_rotation(
                        client.clone(),
                        pem,
                        config.node_name.clone(),
                    );
                }
            }
            crate::nodestatus::spawn(crate::nodestatus::NodeSync {
                client: client.clone(),
                node_uid: node_uid.clone(),
                facts,
                registration,
                meta: node_meta.clone(),
                cri: cri.clone(),
                pressure: pressure.clone(),
                update_every: config.node_status_update_frequency,
                report_every: config.node_status_report_frequency,
                lease_seconds: config.node_lease_duration_seconds,
            });
            Some(client)
        }
        None => None,
    };
    let config = Arc::new(config);
    let recorder = Recorder::new(1000, &config.node_name);
    if let Some(client) = &api_client {
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        recorder.forward(tx);
        crate::events::sink::spawn(client.clone(), rx);
    }
    let statuses = status::Manager::default();
    let statuses_for_api = statuses.clone();
    let health = Health::default();
    let probe_metrics = prober::Metrics::default();
    let ooms = oom::Kills::default();
    let manifest_errors = ManifestErrors::default();

    let cfg = &config;
    let healthz = SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
    let ports = server::Ports {
        healthz,
        api: SocketAddr::new(cfg.api_address(), cfg.port),
        read_only: (cfg.read_only_port != 0)
            .then(|| SocketAddr::new(cfg.api_address(), cfg.read_only_port)),
    };
    let tls = api_tls(
        cfg,
        kubeconfig.as_deref(),
        &node.host_ip,
        api_client.as_ref(),
    )?;
    if cfg.authorization_mode() == edge_config::config::AuthorizationMode::Webhook
        && api_client.is_none()
    {
        return Err(Error::ApiPort(
            "authorization.mode: Webhook asks the API server, and there is no kubeconfig".into(),
        ));
    }
    let srv = server::Server {
        cri: cri.clone(),
        stats: Stats::new(
            config.clone(),
            node.clone(),
            cgroups.clone(),
            statuses.clone(),
            ooms.clone(),
        ),
        statuses: statuses.clone(),
        recorder: recorder.clone(),
        health: health.clone(),
        manifest_errors: manifest_errors.clone(),
        metrics: metrics.clone(),
        probe_metrics: probe_metrics.clone(),
        node: server::LocalNode {
            facts: local_facts,
            meta: node_meta.clone(),
            pressure: pressure.clone(),
            shown: std::sync::Mutex::new(Vec::new()),
        },
        auth: server::auth::Auth::new(config.node_name.clone(), cfg, api_client.clone()),
        streams: Arc::new(tokio::sync::Semaphore::new(server::MAX_STREAMS)),
    };
    server::serve(Arc::new(srv), ports, tls)
        .await
        .map_err(|source| Error::Io {
            what: format!("listen on {ports:?}"),
            source,
        })?;
    let (changed, mut pleg_rx) = tokio::sync::mpsc::channel(1024);
    let (running, running_rx) = tokio::sync::watch::channel(Arc::default());
    tokio::spawn(pleg::run(pleg::Pleg {
        cri: cri.clone(),
        metrics: metrics.clone(),
        health: health.clone(),
        changed,
        running,
    }));
    oom::spawn(oom::Watcher {
        cri: cri.clone(),
        recorder: recorder.clone(),
        statuses: statuses.clone(),
        node_name: node.name.clone(),
        kills: ooms,
    });
    rotation::spawn(
        cri.clone(),
        rotation::Policy {
            max_bytes: u64::try_from(cfg.container_log_max_size).unwrap_or(u64::MAX),
            max_files: usize::try_from(cfg.container_log_max_files).unwrap_or(usize::MAX),
        },
        cfg.container_log_monitor_interval,
        running_rx,
    );
    gc::spawn(gc::Manager {
        cri: cri.clone(),
        recorder: recorder.clone(),
        node_name: cfg.node_name.clone(),
        policy: gc::Policy {
            high_percent: cfg.image_gc_high_threshold_percent,
            low_percent: cfg.image_gc_low_threshold_percent,
            min_age: cfg.image_minimum_gc_age,
        },
        period: cfg.image_gc_period,
    });
    let (cri_for_eviction, node_for_eviction, cgroups_for_eviction) =
        (cri.clone(), node.clone(), cgroups.clone());
    let workers = PodWorkers::new(pod_workers::Ctx {
        cri,
        config: config.clone(),
        node,
        runtime_name,
        cgroups,
        recorder: recorder.clone(),
        statuses,
        probe_metrics,
        metrics,
        started: Instant::now(),
        objects: api_client.as_ref().map(|c| {
            Arc::new(volumes::api_objects::Objects::new(c.clone()))
                as Arc<dyn crate::volumes::objects::ApiObjects>
        }),
    });
    // PLEG's wake-ups go straight to the workers, never queued behind the
    // source rescans and housekeeping of the loop below. A pod that no worker
    // has is an orphan to look for at once.
    let pleg_workers = workers.clone();
    let unknown_pod = Arc::new(tokio::sync::Notify::new());
    let unknown = unknown_pod.clone();
    tokio::spawn(async move {
        while let Some(uid) = pleg_rx.recv().await {
            if !pleg_workers.notify(&uid) {
                unknown.notify_one();
            }
        }
    });
    eviction::spawn(
        eviction::Manager {
            cri: cri_for_eviction,
            stats: Arc::new(Stats::new(
                config.clone(),
                node_for_eviction,
                cgroups_for_eviction,
                statuses_for_api.clone(),
                oom::Kills::default(),
            )),
            thresholds: eviction::helpers::thresholds(&config),
            transition: config.eviction_pressure_transition_period,
            max_pod_grace: Duration::from_secs(
                u64::try_from(config.eviction_max_pod_grace_period).unwrap_or(0),
            ),
            period: eviction::PERIOD,
            recorder: recorder.clone(),
            node_name: config.node_name.clone(),
            workers: workers.clone(),
            statuses: statuses_for_api.clone(),
        },
        pressure_tx,
    );
    let sources = Sources {
        config: config.clone(),
        recorder: recorder.clone(),
        health: health.clone(),
        manifest_errors,
    };

    // Cluster mode: the API server's pods, admitted, merged with the static ones.
    let mut admission = Admit {
        state: predicate::Admission::default(),
        pressure: pressure.clone(),
        node: node_meta,
        allocatable,
        name: config.node_name.clone(),
        statuses: statuses_for_api.clone(),
        recorder,
        workers: workers.clone(),
    };
    let mut decoded_api_pods = apiserver::Decoded::default();
    let mut api_desired = BTreeMap::new();
    // The static pods, for their mirror pods.
    let (statics_tx, statics_rx) = tokio::sync::watch::channel(BTreeMap::new());
    let mut api_rx = api_client.as_ref().map(|client| {
        // Until the API server answers, the pods it assigned last (a device
        // rebooted without its uplink runs them again).
        let mut checkpoint = apiserver::Checkpoint::new(pods_root.join("api-pods.json"));
        let saved = checkpoint.load();
        if !saved.is_empty() {
            tracing::info!(
                pods = saved.len(),
                "running the API server's pods from the checkpoint until it answers"
            );
        }
        api_desired = apiserver::desired(&saved, &mut decoded_api_pods);
        let rx = apiserver::source(client.clone(), cfg.node_name.clone(), checkpoint);
        let has = workers.clone();
        status::apiserver::spawn_status(status::apiserver::StatusSync {
            client: client.clone(),
            node: cfg.node_name.clone(),
            node_uid: node_uid.clone(),
            statics: statics_rx.clone(),
            pods: rx.clone(),
            statuses: statuses_for_api.clone(),
            has_worker: Box::new(move |uid| has.has_worker(uid)),
        });
        rx
    });

    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    file::watch(&cfg.static_pod_path, tx).map_err(|source| Error::Io {
        what: format!("watch {}", cfg.static_pod_path.display()),
        source,
    })?;
    let mut src = file::FileSource::new(&cfg.static_pod_path, &cfg.node_name);
    // The first scan happens before anything else looks at `desired`:
    // an orphan is only what the folder does not define. Orphans get their
    // (terminating) workers before any desired pod does, so a pod whose
    // manifest was replaced while the agent was down starts only after
    // its old version has terminated, as at any other time.
    let mut file_desired = sources.scan(&mut src);
    statics_tx.send_replace(file_desired.clone());
    let mut desired = merged(&file_desired, &admission.run(&file_desired, &api_desired));
    // Orphans are what no source defines: not before the API server's pods
    // were listed once (kubelet's sourcesReady).
    let api_listed = |rx: &Option<tokio::sync::watch::Receiver<apiserver::ApiPods>>| {
        rx.as_ref().is_none_or(|rx| rx.borrow().is_some())
    };
    if api_listed(&api_rx) {
        workers.cleanup_orphans(&desired).await;
    }
    workers.update(&desired);
    let start = tokio::time::Instant::now();
    let mut tick =
        tokio::time::interval_at(start + cfg.file_check_frequency, cfg.file_check_frequency);
    let mut housekeeping =
        tokio::time::interval_at(start + Duration::from_secs(2), Duration::from_secs(2));
    // The runtime is asked for orphans when PLEG reports a pod no worker
    // has, when the API server's pods were first listed, and every
    // ORPHAN_SWEEP anyway; not at every 2 s housekeeping (at 30 idle pods
    // those listings were a tenth of the agent's CPU).
    let mut swept = tokio::time::Instant::now();
    let mut listed_before = api_listed(&api_rx);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => file_desired = sources.scan(&mut src),
            Some(()) = rx.recv() => {
                while rx.try_recv().is_ok() {}
                file_desired = sources.scan(&mut src);
            }
            Some(pods) = api_changed(&mut api_rx) => {
                if let Some(pods) = pods {
                    api_desired = apiserver::desired(&pods, &mut decoded_api_pods);
                }
            }
            () = unknown_pod.notified() => {
                if api_listed(&api_rx) {
                    workers.cleanup_orphans(&desired).await;
                    swept = tokio::time::Instant::now();
                }
                continue;
            }
            _ = housekeeping.tick() => {
                health.synced();
                let listed = api_listed(&api_rx);
                if listed && (!listed_before || swept.elapsed() >= ORPHAN_SWEEP) {
                    workers.cleanup_orphans(&desired).await;
                    swept = tokio::time::Instant::now();
                }
                listed_before = listed;
                continue;
            }
        }
        statics_tx.send_if_modified(|s| {
            let changed = *s != file_desired;
            if changed {
                s.clone_from(&file_desired);
            }
            changed
        });
        desired = merged(&file_desired, &admission.run(&file_desired, &api_desired));
        workers.update(&desired);
    }
    tracing::info!("agent stopping; containers keep running");
    Ok(())
}

/// How often the runtime is asked for orphans when nothing reported one.
const ORPHAN_SWEEP: Duration = Duration::from_secs(30);

/// What a rescan of the pod sources touches.
struct Sources {
    config: Arc<Config>,
    recorder: Recorder,
    health: Health,
    manifest_errors: ManifestErrors,
}

impl Sources {
    /// Rescans the folder: the desired pods by UID (maxPods applied).
    fn scan(&self, src: &mut file::FileSource) -> BTreeMap<String, Arc<Pod>> {
        self.health.synced();
        let scan = src.scan();
        let node = Object::node(&self.config.node_name);
        for e in &scan.new_errors {
            let warning = EventType::Warning;
            self.recorder.event(&node, warning, "InvalidManifest", e);
        }
        self.manifest_errors.set(scan.errors.clone());
        let max_pods = usize::try_from(self.config.max_pods).unwrap_or(usize::MAX);
        let mut desired: BTreeMap<String, Arc<Pod>> = BTreeMap::new();
        for (uid, (path, pod)) in scan.pods {
            if desired.len() >= max_pods {
                self.recorder.event(
                    &node,
                    EventType::Warning,
                    "OutOfpods",
                    &format!(
                        "{}: not admitted: the node already runs maxPods={} pods",
                        path.display(),
                        self.config.max_pods
                    ),
                );
                continue;
            }
            desired.insert(uid, pod);
        }
        desired
    }
}

/// Admission of the API server's pods ([`admit`]) and what it touches.
struct Admit {
    state: predicate::Admission,
    /// The eviction manager's pressure conditions.
    pressure: eviction::Pressure,
    node: nodestatus::SharedMeta,
    allocatable: nodestatus::setters::Allocatable,
    name: String,
    statuses: status::Manager,
    recorder: Recorder,
    workers: PodWorkers,
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
                    .is_some_and(|ph| ph == "Succeeded" || ph == "Failed")
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
                phase: Some("Failed".into()),
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

/// The static pods and the API server's, by UID.
fn merged(
    file: &BTreeMap<String, Arc<Pod>>,
    api: &BTreeMap<String, Arc<Pod>>,
) -> BTreeMap<String, Arc<Pod>> {
    let mut all = api.clone();
    all.extend(file.iter().map(|(k, v)| (k.clone(), v.clone())));
    all
}

/// The API server's next set of pods; never, without one.
async fn api_changed(
    rx: &mut Option<tokio::sync::watch::Receiver<apiserver::ApiPods>>,
) -> Option<apiserver::ApiPods> {
    match rx {
        Some(rx) => {
            rx.changed().await.ok()?;
            Some(rx.borrow_and_update().clone())
        }
        None => std::future::pending().await,
    }
}

/// The API port's TLS: its serving certificate (configured, else
/// self-signed in the data dir) and the CA client certificates are
/// checked against (`authentication.x509.clientCAFile`, else in cluster
/// mode the kubeconfig's CA: the one the API server's kubelet client
/// certificate comes from in a kubeadm-made cluster; authorization still
/// decides what such a certificate may do).
fn api_tls(
    cfg: &Config,
    kubeconfig: Option<&std::path::Path>,
    host_ip: &str,
    client: Option<&Arc<kube::client::Client>>,
) -> Result<Arc<rustls::ServerConfig>, Error> {
    let bad = |what: &std::path::Path, e: &dyn std::fmt::Display| {
        Error::ApiPort(format!("{}: {e}", what.display()))
    };
    let (cert, key) = match &cfg.tls {
        Some((c, k)) => (
            std::fs::read(c).map_err(|e| bad(c, &e))?,
            std::fs::read(k).map_err(|e| bad(k, &e))?,
        ),
        None => {
            let dir = certificate::bootstrap::cert_dir(&cfg.data_dir);
            let bootstrapped =
                certificate::serving::current(&dir).filter(|_| cfg.server_tls_bootstrap);
            match bootstrapped {
                // One file, certificate and key: rustls takes each from it.
                Some(both) => (both.clone(), both),
                None => server::tls::self_signed(&dir, &cfg.node_name, &ips(host_ip))
                    .map_err(|e| Error::ApiPort(format!("API port certificate: {e}")))?,
            }
        }
    };
    let current = server::tls::current(&cert, &key)
        .map_err(|e| Error::ApiPort(format!("API port certificate: {e}")))?;
    if cfg.server_tls_bootstrap
        && cfg.tls.is_none()
        && let Some(client) = client
    {
        let swap = current.clone();
        certificate::serving::spawn(
            client.clone(),
            certificate::bootstrap::cert_dir(&cfg.data_dir),
            certificate::serving::Request {
                node: cfg.node_name.clone(),
                ips: ips(host_ip),
            },
            Arc::new(move |c: &[u8], k: &[u8]| server::tls::replace(&swap, c, k)),
        );
    }
    let client_ca = match (&cfg.authentication.client_ca_file, kubeconfig) {
        (Some(f), _) => Some(std::fs::read(f).map_err(|e| bad(f, &e))?),
        (None, Some(k)) => kube::config::load(k).ok().and_then(|c| c.ca),
        (None, None) => None,
    };
    if client_ca.is_none() && !cfg.cluster_mode() && !cfg.authentication.anonymous {
        tracing::info!(
            "API port: no authentication.x509.clientCAFile and anonymous access is off: \
             only the read-only port (readOnlyPort) and /healthz answer without credentials"
        );
    }
    server::tls::server_config(current, client_ca.as_deref()).map_err(|e| {
        let file = cfg.tls.as_ref().map_or_else(
            || "the self-signed certificate".into(),
            |(c, _)| c.display().to_string(),
        );
        Error::ApiPort(format!("API port TLS ({file}): {e}"))
    })
}

/// The node's address, as a list.
fn ips(host_ip: &str) -> Vec<std::net::IpAddr> {
    host_ip.parse().ok().into_iter().collect()
}
