//! The kubelet HTTP API on axum: `/healthz` on healthzBindAddress:healthzPort
//! (failing when PLEG or the sync loop stalls; nothing else there, as
//! kubelet), and on the API port `/pods` (a v1 `PodList` with status),
//! `/events` (a v1 `EventList`), the metrics and `/stats/summary`.
//! Endpoints that read cgroupfs, /proc or walk directories run on the
//! blocking pool, so a scrape never stalls the pod workers' threads.
//! `axum::serve` waits a second after an accept error such as EMFILE
//! instead of spinning.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::events::Recorder;
use crate::health::Health;
use crate::metrics::{self, AgentMetrics};
use crate::runtime::Cri;
use crate::source::ManifestErrors;
use crate::stats::Stats;
use crate::{prober, status};

/// What the endpoints read.
#[derive(Debug)]
pub struct Server {
    pub cri: Cri,
    pub stats: Stats,
    pub statuses: status::Manager,
    pub recorder: Recorder,
    pub health: Health,
    pub manifest_errors: ManifestErrors,
    pub metrics: Arc<AgentMetrics>,
    pub probe_metrics: prober::Metrics,
    /// This node as its Node object shows it (`/node`).
    pub node: LocalNode,
}

/// What `/node` is made of: the facts, labels and taints the Node is
/// registered with, the eviction manager's pressure, and the conditions
/// last shown (for their transition times).
#[derive(Debug)]
pub struct LocalNode {
    pub facts: crate::kube::node::Facts,
    pub meta: crate::kube::SharedMeta,
    pub pressure: crate::evict::Pressure,
    pub shown: std::sync::Mutex<Vec<serde_json::Value>>,
}

impl Server {
    /// `/metrics`: the agent's own, kubelet's names.
    fn agent_metrics(&self) -> String {
        let pods = self.statuses.pods();
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
}

type Shared = State<Arc<Server>>;

/// Binds both listeners (so a port clash is an error at start) and serves
/// them in the background. When both are one port, it serves everything.
pub async fn serve(
    server: Arc<Server>,
    healthz: SocketAddr,
    api: SocketAddr,
) -> std::io::Result<()> {
    let healthz_listener = tokio::net::TcpListener::bind(healthz).await?;
    // One port for both, unless the ports are left to the kernel (0): then
    // each gets its own, as configured.
    if api == healthz && api.port() != 0 {
        spawn(healthz_listener, api_router(server), false);
        return Ok(());
    }
    let api_listener = tokio::net::TcpListener::bind(api).await?;
    spawn(healthz_listener, healthz_router(server.clone()), true);
    spawn(api_listener, api_router(server), false);
    Ok(())
}

fn spawn(listener: tokio::net::TcpListener, router: Router, healthz_only: bool) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, healthz_only, "serving HTTP");
    }
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::warn!(error = %e, "HTTP server stopped");
        }
    });
}

/// The healthz port: `/healthz` only (it may be bound wider than the API).
fn healthz_router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "the healthz port serves /healthz only\n",
            )
        })
        .with_state(server)
}

/// The API port. Authentication and authorization (kubelet's
/// `InstallAuthFilter`) go in as a `.layer(...)` before `with_state`.
fn api_router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/pods", get(pods))
        .route("/pods/", get(pods))
        .route("/node", get(local_node))
        .route("/events", get(events))
        .route("/metrics", get(agent_metrics))
        .route("/metrics/cadvisor", get(cadvisor))
        .route("/metrics/resource", get(resource))
        .route("/metrics/probes", get(probes))
        .route("/manifests", get(manifests))
        .route("/stats/summary", get(summary))
        .route("/stats/summary/", get(summary))
        .fallback(|| async { (StatusCode::NOT_FOUND, "404 page not found\n") })
        .with_state(server)
}

/// Runs `f` on the blocking pool.
async fn blocking(f: impl FnOnce() -> Response + Send + 'static) -> Response {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response())
}

fn json_reply(v: &serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(v).unwrap_or_default(),
    )
        .into_response()
}

/// Prometheus text, or OpenMetrics when the scraper asks for it.
fn metrics_reply(headers: &HeaderMap, text: String) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if metrics::wants_openmetrics(accept) {
        (
            [(header::CONTENT_TYPE, metrics::OPENMETRICS_CONTENT_TYPE)],
            metrics::to_openmetrics(&text),
        )
            .into_response()
    } else {
        ([(header::CONTENT_TYPE, metrics::TEXT_CONTENT_TYPE)], text).into_response()
    }
}

async fn healthz(State(s): Shared) -> Response {
    match s.health.check() {
        Ok(()) => "ok".into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn pods(State(s): Shared) -> Response {
    json_reply(&json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": s.statuses.pods(),
    }))
}

/// This node as a v1 Node (kubelet has no such endpoint; on a device
/// without an API server it is where the node's conditions show).
async fn local_node(State(s): Shared) -> Response {
    let n = &s.node;
    let previous = crate::mutex::lock(&n.shown).clone();
    let status = crate::kube::node_status(&s.cri, &n.facts, &n.pressure, &previous).await;
    if let Some(c) = status["conditions"].as_array() {
        crate::mutex::lock(&n.shown).clone_from(c);
    }
    let meta = n
        .meta
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    json_reply(&json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": n.facts.name, "labels": meta.labels},
        "spec": {"taints": meta.taints},
        "status": status,
    }))
}

async fn events(State(s): Shared) -> Response {
    json_reply(&json!({
        "kind": "EventList",
        "apiVersion": "v1",
        "metadata": {},
        "items": s.recorder.list(),
    }))
}

async fn agent_metrics(State(s): Shared, headers: HeaderMap) -> Response {
    metrics_reply(&headers, s.agent_metrics())
}

async fn cadvisor(State(s): Shared, headers: HeaderMap) -> Response {
    blocking(move || {
        let text = crate::stats::cadvisor::render(&s.stats.collect());
        metrics_reply(&headers, text)
    })
    .await
}

async fn resource(State(s): Shared, headers: HeaderMap) -> Response {
    blocking(move || {
        let text = crate::stats::resource::render(&s.stats.collect());
        metrics_reply(&headers, text)
    })
    .await
}

async fn probes(State(s): Shared, headers: HeaderMap) -> Response {
    metrics_reply(&headers, s.probe_metrics.render())
}

async fn manifests(State(s): Shared) -> Response {
    json_reply(&json!({ "errors": s.manifest_errors.get() }))
}

/// The summary first asks the runtime for the writable layers.
async fn summary(State(s): Shared) -> Response {
    let rootfs = s.cri.writable_layers().await.unwrap_or_default();
    blocking(move || json_reply(&s.stats.summary(rootfs))).await
}
