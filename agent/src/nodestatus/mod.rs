//! Cluster mode, the node's side (kubelet's `kubelet_node_status.go` and
//! `nodelease`): with a kubeconfig the agent registers its Node, reports
//! the node status every `nodeStatusUpdateFrequency` (posted when it
//! changed or the server's conditions differ, else every
//! `nodeStatusReportFrequency`) and renews its Lease
//! every quarter of `nodeLeaseDurationSeconds`. Its own Node (labels,
//! taints, the conditions the server holds) comes from a watch, as
//! kubelet's node informer, not from a GET at every check. Only what a
//! node may do under `Node,RBAC` and NodeRestriction: create, read and
//! watch its Node, PATCH (never GET) nodes/status, its own Lease, the
//! status and final delete of the pods bound to it.
//!
//! [`setters`] and [`lease`] build the objects (pure); [`machine`] reads
//! what the node has.

pub mod lease;
pub mod machine;
pub mod setters;

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::kube::client::Client;
use crate::kube::reflector::{self, Seen};
use crate::kube::watch::Query;
use crate::runtime::Cri;

/// The Node's labels and taints as the API server last showed them (an
/// admin may `kubectl label` or `taint` the node): what admission checks
/// pods against. Until the server answers, what the node registers with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeMeta {
    pub labels: std::collections::BTreeMap<String, String>,
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
}

impl NodeMeta {
    /// The labels and taints of a Node (the API server's JSON).
    pub fn of(node: &Value) -> Self {
        Self {
            labels: serde_json::from_value(node["metadata"]["labels"].clone()).unwrap_or_default(),
            taints: serde_json::from_value(node["spec"]["taints"].clone()).unwrap_or_default(),
        }
    }
}

/// Shared between the node loops (writer) and the sync loop (reader).
pub type SharedMeta = Arc<std::sync::RwLock<NodeMeta>>;

fn set_meta(shared: &SharedMeta, node: &Value) {
    if node["metadata"]["name"].is_string() {
        let m = NodeMeta::of(node);
        let mut w = shared
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *w != m {
            *w = m;
        }
    }
}

/// The Node this agent registers: kubelet's labels, `nodeLabels`,
/// `registerWithTaints`.
pub fn registration(facts: &setters::Facts, config: &edge_config::Config) -> Value {
    let taints: Vec<Value> = config
        .register_with_taints
        .iter()
        .map(|t| {
            let mut v = json!({"key": t.key, "effect": t.effect});
            if !t.value.is_empty() {
                v["value"] = json!(t.value);
            }
            v
        })
        .collect();
    setters::registration(facts, &config.node_labels, &taints)
}

/// kubelet's registration back-off: 100 ms doubling to 7 s.
const REGISTER_BACKOFF_MAX: Duration = Duration::from_secs(7);

/// What the node loops need.
pub struct NodeSync {
    pub client: Arc<Client>,
    /// Set once the Node is registered.
    pub node_uid: Arc<std::sync::OnceLock<String>>,
    pub facts: setters::Facts,
    /// The Node to create ([`registration`]).
    pub registration: Value,
    /// Written from every Node the API server returns.
    pub meta: SharedMeta,
    pub cri: Cri,
    /// The eviction manager's conditions.
    pub pressure: crate::eviction::Pressure,
    pub update_every: Duration,
    pub report_every: Duration,
    pub lease_seconds: u32,
    /// Device plugins' resources for capacity and allocatable.
    pub devices: Option<crate::devicemanager::Manager>,
}

/// Registers the node, then keeps its status and lease up to date until
/// the process ends; API errors are logged and retried, never fatal.
pub fn spawn(ns: NodeSync) {
    tokio::spawn(async move {
        let ns = Arc::new(ns);
        let uid = register(&ns).await;
        if let Some(u) = &uid {
            let _ = ns.node_uid.set(u.clone());
        }
        tokio::spawn(renew_lease(ns.clone(), uid));
        let (node_tx, node_rx) = tokio::sync::watch::channel(None);
        tokio::spawn(watch_node(ns.clone(), node_tx));
        report_status(ns, node_rx).await;
    });
}

fn now() -> k8s_openapi::jiff::Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    k8s_openapi::jiff::Timestamp::new(
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        i32::try_from(d.subsec_nanos()).unwrap_or(0),
    )
    .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

/// Time (RFC 3339 in whole seconds), as conditions carry it.
fn rfc3339(t: k8s_openapi::jiff::Timestamp) -> String {
    format!("{t:.0}")
}

/// POSTs the Node until the API server has it (created now or before);
/// its UID, when the answer gave one.
async fn register(ns: &NodeSync) -> Option<String> {
    let name = &ns.facts.name;
    let body = &ns.registration;
    let mut delay = Duration::from_millis(100);
    loop {
        match ns
            .client
            .json(Method::POST, "/api/v1/nodes", Some(body), None)
            .await
        {
            Ok(created) => {
                tracing::info!(node = %name, "registered the node with the API server");
                set_meta(&ns.meta, &created);
                return created["metadata"]["uid"].as_str().map(String::from);
            }
            Err(e) if e.status() == Some(StatusCode::CONFLICT) => {
                // Registered before (a restart): the node may read itself.
                // Its labels and taints are the server's now (kubelet does
                // not reconcile --node-labels either).
                tracing::info!(node = %name, "the node was registered before");
                return match ns.client.get(&format!("/api/v1/nodes/{name}")).await {
                    Ok(n) => {
                        set_meta(&ns.meta, &n);
                        n["metadata"]["uid"].as_str().map(String::from)
                    }
                    Err(e) => {
                        tracing::warn!("read the node: {e}");
                        None
                    }
                };
            }
            Err(e) => tracing::warn!(node = %name, "register the node: {e}"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(REGISTER_BACKOFF_MAX);
    }
}

/// Every quarter of the lease's duration (kubelet: 10 s for 40 s): the
/// first time it is created or taken over (GET and PUT), then patched.
async fn renew_lease(ns: Arc<NodeSync>, uid: Option<String>) {
    let name = ns.facts.name.clone();
    let path = lease::path(Some(&name));
    let every = Duration::from_secs(u64::from(ns.lease_seconds)) / 4;
    let mut held = false;
    let mut outage = crate::kube::Outage::default();
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let at = lease::micro_time(now());
        let result = if held {
            let patch = lease::renewal(&name, ns.lease_seconds, &at);
            ns.client
                .patch(&path, "application/merge-patch+json", &patch)
                .await
        } else {
            match ns.client.get(&path).await {
                Ok(l) => {
                    let body = lease::renewed(&l, &name, uid.as_deref(), ns.lease_seconds, &at);
                    ns.client
                        .json(Method::PUT, &path, Some(&body), None)
                        .await
                        .map(drop)
                }
                Err(e) if e.status() == Some(StatusCode::NOT_FOUND) => {
                    let body = lease::new(&name, uid.as_deref(), ns.lease_seconds, &at);
                    ns.client
                        .json(Method::POST, &lease::path(None), Some(&body), None)
                        .await
                        .map(drop)
                }
                Err(e) => Err(e),
            }
        };
        match result {
            Ok(()) => {
                outage.ok("renew the node lease");
                held = true;
            }
            Err(e) => {
                // Gone (deleted), a conflict while taking it over: made or
                // taken over again at the next tick; no answer: patched
                // again.
                outage.failed("renew the node lease", &e);
                if e.status().is_some() {
                    held = false;
                }
            }
        }
    }
}

/// What the node conditions are made of now: the runtime's readiness (in
/// its `report`) and the eviction manager's pressure.
fn health(
    report: &crate::runtime::Result<crate::runtime::RuntimeReport>,
    pressure: &crate::eviction::Pressure,
) -> setters::Health {
    use crate::eviction::helpers::Condition;
    let p = pressure.borrow().clone();
    setters::Health {
        not_ready: match report {
            Ok(r) => r.not_ready.clone(),
            Err(e) => Some(format!("container runtime is down: {e}")),
        },
        memory_pressure: p.contains(&Condition::MemoryPressure),
        disk_pressure: p.contains(&Condition::DiskPressure),
        pid_pressure: p.contains(&Condition::PidPressure),
    }
}

/// The Node's status now: runtime version, conditions (kept transition
/// times from `previous`), images. Also the local `/node` endpoint's.
pub async fn node_status(
    cri: &Cri,
    facts: &setters::Facts,
    pressure: &crate::eviction::Pressure,
    previous: &[Value],
) -> Value {
    let mut facts = facts.clone();
    if let Ok(v) = cri.runtime_version().await {
        facts.runtime_version = v;
    }
    let report = cri.runtime_status().await;
    let health = health(&report, pressure);
    if let Ok(r) = report {
        facts.runtime_handlers = r.handlers;
        facts.supplemental_groups_policy = r.supplemental_groups_policy;
    }
    let images = cri
        .list_images()
        .await
        .map(|l| l.into_iter().map(|i| (i.names, i.size)).collect())
        .unwrap_or_default();
    let conditions = setters::conditions(&health, previous, &rfc3339(now()));
    setters::status(&facts, conditions, images)
}

/// The Node as the API server last said (a watch of it alone).
type WatchedNode = tokio::sync::watch::Receiver<Option<Arc<Value>>>;

/// Keeps the Node's labels and taints and the server's copy current.
async fn watch_node(ns: Arc<NodeSync>, tx: tokio::sync::watch::Sender<Option<Arc<Value>>>) {
    let query = Query::named("/api/v1/nodes".into(), &ns.facts.name);
    reflector::run(&ns.client, &query, "the node", |seen| {
        if let Seen::Listed(nodes) | Seen::Changed(nodes) = seen
            && let Some(n) = nodes.values().next()
        {
            set_meta(&ns.meta, n);
            tx.send_replace(Some(Arc::new(n.clone())));
        }
        ControlFlow::Continue(())
    })
    .await;
}

/// Checks the status every `update_every`; PATCHes it when it changed,
/// when the server's conditions differ (the controller may have set Ready
/// to Unknown while the lease lapsed), or when `report_every` passed since
/// the last post.
async fn report_status(ns: Arc<NodeSync>, node: WatchedNode) {
    let name = ns.facts.name.clone();
    let path = format!("/api/v1/nodes/{name}/status");
    let mut posted: Option<(Value, tokio::time::Instant)> = None;
    let mut outage = crate::kube::Outage::default();
    let mut tick = tokio::time::interval(ns.update_every);
    loop {
        tick.tick().await;
        let previous = posted
            .as_ref()
            .and_then(|(s, _)| s["conditions"].as_array().cloned())
            .unwrap_or_default();
        let mut facts = ns.facts.clone();
        if let Some(d) = &ns.devices {
            facts.extended = d.capacity();
        }
        let status = node_status(&ns.cri, &facts, &ns.pressure, &previous).await;
        let due = match &posted {
            None => true,
            Some((old, at)) => {
                setters::changed(old, &status)
                    || at.elapsed() >= ns.report_every
                    || node.borrow().as_ref().is_some_and(|n| {
                        setters::server_differs(&n["status"]["conditions"], &status["conditions"])
                    })
            }
        };
        if !due {
            continue;
        }
        // The answer (the whole Node) is not read: the watch brings it.
        let patch = json!({ "status": status });
        match ns
            .client
            .patch(&path, "application/strategic-merge-patch+json", &patch)
            .await
        {
            Ok(()) => {
                outage.ok("update the node status");
                posted = Some((status, tokio::time::Instant::now()));
            }
            Err(e) => {
                outage.failed("update the node status", &e);
            }
        }
    }
}

/// The facts of this node for its Node object.
pub fn facts(config: &edge_config::Config, info: &crate::cri_config::NodeInfo) -> setters::Facts {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let os_image = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into());
    let ephemeral_bytes = nix::sys::statvfs::statvfs(&config.data_dir)
        .map(|s| s.blocks() * s.fragment_size())
        .unwrap_or(0);
    let threshold = |signal: &str, capacity: u64| {
        config
            .eviction
            .hard
            .get(signal)
            .map_or(0, |t| t.of(capacity))
    };
    let memory_bytes = u64::try_from(info.memory_bytes).unwrap_or(u64::MAX);
    let mut hugepage_kib: Vec<u64> = std::fs::read_dir("/sys/kernel/mm/hugepages")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()
        })
        .collect();
    hugepage_kib.sort_unstable();
    setters::Facts {
        name: config.node_name.clone(),
        internal_ip: info.host_ip.clone(),
        hostname: config.node_name.clone(),
        cpus: u64::try_from(info.cpu_milli / 1000).unwrap_or(1),
        memory_bytes,
        ephemeral_bytes,
        hugepage_kib,
        max_pods: config.max_pods,
        machine_id: read("/etc/machine-id"),
        system_uuid: read("/sys/class/dmi/id/product_uuid"),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        os_image,
        arch: setters::goarch().into(),
        runtime_version: String::new(),
        kubelet_port: config.port,
        reserved_memory: threshold("memory.available", memory_bytes)
            .saturating_add(clamp(config.reserved.memory)),
        reserved_ephemeral: threshold("nodefs.available", ephemeral_bytes)
            .saturating_add(clamp(config.reserved.ephemeral)),
        reserved_cpu_milli: clamp(config.reserved.cpu_milli),
        extended: BTreeMap::new(),
        runtime_handlers: Vec::new(),
        supplemental_groups_policy: false,
    }
}

fn clamp(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}
