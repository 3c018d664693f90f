//! kubelet's `NewMainKubelet` and `Run`: connects to the runtime, builds
//! each manager with the narrow handles it needs and wires them together —
//! the only module that knows them all — then runs the [`sync_loop`]. Pod
//! sources send their sets to the loop, which feeds desired pods to
//! [`PodWorkers`]; PLEG sends the UIDs of pods that changed on a channel
//! (`pleg.Watch()`), and those wake their workers directly.

mod sync_loop;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edge_config::Config;

use crate::config::apiserver;
use crate::config::file::{self, ManifestErrors};
use crate::events::Recorder;
use crate::health::Health;
use crate::images::gc;
use crate::lifecycle::predicate;
use crate::logs::rotation;
use crate::nodestatus::machine;
use crate::pod_workers::{self, PodWorkers};
use crate::runtime::{Cri, CriError};
use crate::stats::Stats;
use crate::{
    certificate, config, eviction, kube, metrics, nodestatus, oom, pleg, prober, server, status,
    volumes,
};

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach the CRI runtime at {}: {source}", path.display())]
    Connect {
        path: std::path::PathBuf,
        source: Unreachable,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Owner(#[from] edge_config::owner::OwnerError),
    #[error("claim the data dir: {0}")]
    Join(#[source] tokio::task::JoinError),
    #[error("TLS bootstrap: {0}")]
    Bootstrap(#[source] certificate::Error),
    #[error(transparent)]
    Kubeconfig(#[from] kube::ConnectError),
    #[error("authorization.mode: Webhook asks the API server, and there is no kubeconfig")]
    WebhookWithoutApiServer,
    #[error("failCgroupV1 is true and this host has cgroup v1 (set it false to run here)")]
    CgroupV1,
    /// A file the API port's TLS settings name.
    #[error("{}: {source}", path.display())]
    ApiPortFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("API port certificate: {0}")]
    ApiPortCertificate(#[source] Box<server::tls::TlsError>),
    #[error("API port TLS ({file}): {source}")]
    ApiPortTls {
        file: String,
        source: Box<server::tls::TlsError>,
    },
}

/// Why the runtime did not answer: its socket, or its first call.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    #[error(transparent)]
    Socket(#[from] std::io::Error),
    #[error(transparent)]
    Call(#[from] CriError),
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
    .map_err(Error::Join)??;
    // Pod dirs (volumes, etc-hosts) are root's alone, fixed at every start.
    let pods_root = config.data_dir.join("agent");
    edge_config::private_dir(&pods_root).map_err(|source| Error::Io {
        what: format!("make {} private", pods_root.display()),
        source,
    })?;
    let metrics = Arc::new(metrics::AgentMetrics::default());
    let (cri, runtime_name) = connect_runtime(&config, metrics.clone()).await?;
    let socket = &config.cri_socket;
    tracing::info!(runtime = %runtime_name, socket = %socket.display(), node = %config.node_name, "agent connected to the CRI runtime");
    let cgroups = match cgroup::Hierarchy::detect() {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("no pod cgroups: {e}");
            None
        }
    };
    // kubelet's failCgroupV1, before anything is made.
    if config.fail_cgroup_v1 && matches!(cgroups, Some(cgroup::Hierarchy::V1(_))) {
        return Err(Error::CgroupV1);
    }
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
    // Device plugins register from now on; without its directory the
    // agent runs without devices rather than not at all.
    let devices = match crate::devicemanager::Manager::start(&config.device_plugin_dirs) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::error!(error = %e, "no device plugins");
            None
        }
    };
    // The built-in generic plugin registers like any other.
    if let (Some(_), Some(dir)) = (&devices, config.device_plugin_dirs.first())
        && let Err(e) = crate::deviceplugin::start(&config.devices, dir)
    {
        tracing::error!(error = %e, "built-in device plugin");
    }
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
            .map_err(Error::Bootstrap)?;
            Some(path)
        }
        (k, None) => k.clone(),
    };
    let api_client = match &kubeconfig {
        Some(path) => {
            let client = Arc::new(crate::kube::connect(path)?);
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
                devices: devices.clone(),
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
    report_upgrade_rollback(&recorder, &config);
    let statuses = status::Manager::default();
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
    let (tls, local_ca) = api_tls(
        cfg,
        kubeconfig.as_deref(),
        &node.host_ip,
        api_client.as_ref(),
    )?;
    if cfg.authorization_mode() == edge_config::config::AuthorizationMode::Webhook
        && api_client.is_none()
    {
        return Err(Error::WebhookWithoutApiServer);
    }
    // One reader of the node's and pods' usage: /stats/summary, the metrics
    // and the eviction manager see the same figures and the same OOM kills.
    let stats = Arc::new(Stats::new(
        config.clone(),
        node.clone(),
        cgroups.clone(),
        statuses.clone(),
        ooms.clone(),
    ));
    let srv = server::Server {
        cri: cri.clone(),
        stats: stats.clone(),
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
            devices: devices.clone(),
        },
        auth: {
            let auth = server::auth::Auth::new(config.node_name.clone(), cfg, api_client.clone());
            match local_ca {
                Some(key) => auth.with_local_ca(key),
                None => auth,
            }
        },
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
    let cri_for_eviction = cri.clone();
    if let Some(d) = &devices {
        let dir = config.data_dir.join("pod-resources");
        if let Err(e) = crate::podresources::serve(&dir, d.clone(), statuses.clone()) {
            tracing::error!(error = %e, "pod-resources API");
        }
    }
    let close_devices = devices.clone();
    let workers = PodWorkers::new(pod_workers::Ctx {
        cri,
        config: config.clone(),
        node,
        runtime_name,
        cgroups,
        recorder: recorder.clone(),
        statuses: statuses.clone(),
        probe_metrics,
        metrics: metrics.clone(),
        started: Instant::now(),
        devices,
        userns: match crate::userns::Manager::open(
            &config.data_dir.join("userns"),
            config.user_namespace_ids_per_pod,
        ) {
            Ok(m) => Some(Arc::new(m)),
            Err(e) => {
                tracing::error!(error = %e, "pods with hostUsers: false will be refused");
                None
            }
        },
        objects: api_client.as_ref().map(|c| {
            Arc::new(volumes::api_objects::Objects::new(
                c.clone(),
                config.change_detection,
                config.sync_frequency,
            )) as Arc<dyn crate::volumes::objects::ApiObjects>
        }),
        allocatable: crate::lifecycle::predicate::Resources {
            cpu_milli: u128::from(allocatable.cpu_milli),
            memory: u128::from(allocatable.memory),
            ephemeral: u128::from(allocatable.ephemeral),
            pods: u128::from(allocatable.pods),
        },
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
            stats,
            thresholds: eviction::helpers::thresholds(&config),
            transition: config.eviction_pressure_transition_period,
            max_pod_grace: Duration::from_secs(
                u64::try_from(config.eviction_max_pod_grace_period).unwrap_or(0),
            ),
            period: eviction::PERIOD,
            recorder: recorder.clone(),
            node_name: config.node_name.clone(),
            workers: workers.clone(),
            statuses: statuses.clone(),
        },
        pressure_tx,
    );

    // The pod sources, each a task sending its whole set (kubelet's
    // PodConfig). The first sets are taken here, before anything looks at
    // the desired pods: an orphan is only what no source defines, and
    // orphans get their (terminating) workers before any desired pod does,
    // so a pod whose manifest was replaced while the agent was down starts
    // only after its old version has terminated, as at any other time.
    let (updates_tx, updates) = tokio::sync::mpsc::channel(16);
    let mut pods = config::Pods::new(api_client.is_some());
    // The static pods, for their mirror pods.
    let (statics_tx, statics_rx) = tokio::sync::watch::channel(config::PodSet::new());
    if let Some(client) = &api_client {
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
        let mut decoded = apiserver::Decoded::default();
        pods.apply(config::PodUpdate {
            source: config::Source::Api,
            pods: apiserver::desired(&saved, &mut decoded),
            ready: false,
        });
        let rx = apiserver::source(client.clone(), cfg.node_name.clone(), checkpoint);
        let has = workers.clone();
        status::apiserver::spawn_status(status::apiserver::StatusSync {
            client: client.clone(),
            node: cfg.node_name.clone(),
            node_uid: node_uid.clone(),
            statics: statics_rx.clone(),
            pods: rx.clone(),
            statuses: statuses.clone(),
            has_worker: Box::new(move |uid| has.has_worker(uid)),
        });
        apiserver::spawn_decoder(rx, decoded, updates_tx.clone());
    }
    let (wake, woken) = tokio::sync::mpsc::channel(16);
    file::watch(&cfg.static_pod_path, wake).map_err(|source| Error::Io {
        what: format!("watch {}", cfg.static_pod_path.display()),
        source,
    })?;
    let mut scanner = file::Scanner {
        folder: file::FileSource::new(&cfg.static_pod_path, &cfg.node_name),
        recorder: recorder.clone(),
        manifest_errors,
        node_name: cfg.node_name.clone(),
        max_pods: usize::try_from(cfg.max_pods).unwrap_or(usize::MAX),
        guard: config::rollback::Guard::load(&pods_root.join("static-ready")),
        is_ready: {
            let statuses = statuses.clone();
            Box::new(move |uid| is_ready(&statuses, uid))
        },
        on_rollback: {
            let metrics = metrics.clone();
            Box::new(move |r| metrics.static_pod_rolled_back(&r.namespace, &r.name))
        },
        next_deadline: None,
    };
    pods.apply(scanner.update());
    file::spawn(scanner, cfg.file_check_frequency, woken, updates_tx);

    let admission = sync_loop::Admit {
        state: predicate::Admission::default(),
        pressure,
        node: node_meta,
        allocatable,
        name: config.node_name.clone(),
        statuses,
        recorder,
        workers: workers.clone(),
    };
    sync_loop::run(
        sync_loop::SyncLoop {
            pods,
            updates,
            admission,
            workers,
            statics: statics_tx,
            health,
            unknown_pod,
        },
        shutdown,
    )
    .await;
    if let Some(d) = close_devices {
        d.close();
    }
    tracing::info!("agent stopping; containers keep running");
    Ok(())
}

/// The runtime may still be starting (`picolet up`, boot): it is tried
/// every 200 ms for `runtimeRequestTimeout`.
async fn connect_runtime(
    config: &Config,
    metrics: Arc<metrics::AgentMetrics>,
) -> Result<(Cri, String), Error> {
    let socket = &config.cri_socket;
    let deadline = Instant::now() + config.runtime_request_timeout;
    loop {
        let attempt = async {
            let cri = Cri::connect(socket, config.runtime_request_timeout, metrics.clone()).await?;
            let name = cri.runtime_name().await?;
            Ok::<_, Unreachable>((cri, name))
        };
        match attempt.await {
            Ok(v) => return Ok(v),
            Err(source) if Instant::now() >= deadline => {
                return Err(Error::Connect {
                    path: socket.clone(),
                    source,
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The API port's TLS: its serving certificate (configured, else
/// self-signed in the data dir) and the CAs client certificates are
/// checked against (`authentication.x509.clientCAFile`, else in cluster
/// mode the kubeconfig's CA: the one the API server's kubelet client
/// certificate comes from in a kubeadm-made cluster; authorization still
/// decides what such a certificate may do), and the local CA of
/// `picolet ctl api` ([`server::local`]), whose public key is returned.
fn api_tls(
    cfg: &Config,
    kubeconfig: Option<&std::path::Path>,
    host_ip: &str,
    client: Option<&Arc<kube::client::Client>>,
) -> Result<(Arc<rustls::ServerConfig>, Option<Vec<u8>>), Error> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|source| Error::ApiPortFile {
            path: path.to_path_buf(),
            source,
        })
    };
    let (cert, key) = match &cfg.tls {
        Some((c, k)) => (read(c)?, read(k)?),
        None => {
            let dir = certificate::bootstrap::cert_dir(&cfg.data_dir);
            let bootstrapped =
                certificate::serving::current(&dir).filter(|_| cfg.server_tls_bootstrap);
            match bootstrapped {
                // One file, certificate and key: rustls takes each from it.
                Some(both) => (both.clone(), both),
                None => server::tls::self_signed(&dir, &cfg.node_name, &ips(host_ip))
                    .map_err(|e| Error::ApiPortCertificate(Box::new(e.into())))?,
            }
        }
    };
    let current = server::tls::current(&cert, &key)
        .map_err(|e| Error::ApiPortCertificate(Box::new(e.into())))?;
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
            Arc::new(move |c: &[u8], k: &[u8]| Ok(server::tls::replace(&swap, c, k)?)),
        );
    }
    let client_ca = match (&cfg.authentication.client_ca_file, kubeconfig) {
        (Some(f), _) => Some(read(f)?),
        (None, Some(k)) => kube::config::load(k).ok().and_then(|c| c.ca),
        (None, None) => None,
    };
    if client_ca.is_none() && !cfg.cluster_mode() && !cfg.authentication.anonymous {
        tracing::info!(
            "API port: no authentication.x509.clientCAFile and anonymous access is off: \
             root on this host gets in with `picolet ctl api PATH`; the read-only port \
             (readOnlyPort) and /healthz answer without credentials"
        );
    }
    // The device's own way in: a convenience, so a data dir where it
    // cannot be made costs only that, not the API port.
    let pki = certificate::bootstrap::cert_dir(&cfg.data_dir);
    let local_ca = server::local::LocalCa::ensure(&pki)
        .inspect_err(|e| {
            tracing::warn!(error = %e, "API port: no local client CA: `picolet ctl api` cannot get in");
        })
        .ok();
    let config = server::tls::server_config(
        current,
        client_ca.as_deref(),
        local_ca.as_ref().map(server::local::LocalCa::cert_pem),
    )
    .map_err(|source| {
        let file = cfg.tls.as_ref().map_or_else(
            || "the self-signed certificate".into(),
            |(c, _)| c.display().to_string(),
        );
        Error::ApiPortTls {
            file,
            source: Box::new(source),
        }
    })?;
    Ok((config, local_ca.map(|ca| ca.public_key())))
}

/// The node's address, as a list.
fn ips(host_ip: &str) -> Vec<std::net::IpAddr> {
    host_ip.parse().ok().into_iter().collect()
}

/// The pod's Ready condition is True.
fn is_ready(statuses: &status::Manager, uid: &str) -> bool {
    statuses.get(uid).is_some_and(|p| {
        p.status
            .and_then(|s| s.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
}

/// An upgrade `picolet upgrade` rolled back before this agent started: a
/// Warning event on the node, once (the record is removed).
fn report_upgrade_rollback(recorder: &Recorder, config: &Config) {
    let Some(read) = edge_config::upgrade::read_rollback(&config.data_dir) else {
        return;
    };
    match read {
        Ok(r) => recorder.event(
            &crate::events::Object::node(&config.node_name),
            crate::events::EventType::Warning,
            crate::events::reason::UPGRADE_ROLLED_BACK,
            &r.message(),
        ),
        Err(e) => tracing::warn!("unreadable upgrade record: {e}"),
    }
    let path = edge_config::upgrade::rollback_path(&config.data_dir);
    if let Err(e) = std::fs::remove_file(&path) {
        tracing::warn!("remove {}: {e}", path.display());
    }
}
