//! The kubelet HTTP API on axum (kubelet's `pkg/kubelet/server`).
//! `/healthz` on healthzBindAddress:healthzPort (failing when PLEG or the
//! sync loop stalls; nothing else there, as kubelet). The API port
//! (`address:port`) is HTTPS ([`tls`]) and every request on it is
//! authenticated and authorized ([`auth`]): `/pods` (a v1 `PodList` with
//! status), `/events`, `/node`, the metrics, `/stats/summary`,
//! `/containerLogs` ([`logs`]), and `/exec`, `/attach`, `/portForward`,
//! `/run` ([`stream`]). The read-only port, when configured, serves the
//! read-only endpoints over plain HTTP without authentication.
//!
//! Endpoints that read cgroupfs, /proc or walk directories run on the
//! blocking pool, so a scrape never stalls the pod workers' threads.
//! Limits: connections per port, the TLS handshake and the request head
//! have deadlines, heads are bounded, and log follows and stream sessions
//! have a cap of their own.

pub mod auth;
mod endpoints;
pub mod local;
pub mod stream;
pub mod tls;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::config::file::ManifestErrors;
use crate::events::Recorder;
use crate::health::Health;
use crate::metrics::{self, AgentMetrics};
use crate::runtime::Cri;
use crate::stats::Stats;
use crate::{prober, status};

/// What the endpoints read.
#[derive(Debug)]
pub struct Server {
    pub cri: Cri,
    pub stats: Arc<Stats>,
    pub statuses: status::Manager,
    pub recorder: Recorder,
    pub health: Health,
    pub manifest_errors: ManifestErrors,
    pub metrics: Arc<AgentMetrics>,
    pub probe_metrics: prober::Metrics,
    /// This node as its Node object shows it (`/node`).
    pub node: LocalNode,
    /// Who may use the API port.
    pub auth: auth::Auth,
    /// Log follows and exec/attach/port-forward sessions at once.
    pub streams: Arc<Semaphore>,
}

/// Connections at once per port.
const MAX_CONNECTIONS: usize = 256;
/// Log follows and stream sessions at once.
pub const MAX_STREAMS: usize = 64;
/// Deadline of the TLS handshake and of the request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head.
const MAX_HEAD: usize = 64 << 10;

/// The client certificate (DER) a connection's handshake verified (none:
/// no certificate).
#[derive(Debug, Clone)]
struct Peer(Option<Arc<[u8]>>);

/// What `/node` is made of: the facts, labels and taints the Node is
/// registered with, the eviction manager's pressure, and the conditions
/// last shown (for their transition times).
#[derive(Debug)]
pub struct LocalNode {
    pub facts: crate::nodestatus::setters::Facts,
    pub meta: crate::nodestatus::SharedMeta,
    pub pressure: crate::eviction::Pressure,
    pub shown: std::sync::Mutex<Vec<serde_json::Value>>,
    /// Device plugins' resources for capacity and allocatable.
    pub devices: Option<crate::devicemanager::Manager>,
}

impl Server {
    /// `/metrics`: the agent's own, kubelet's names.
    fn agent_metrics(&self) -> Vec<metrics::Family> {
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
                    .is_some_and(|s| s.phase.as_deref() == Some(crate::phase::RUNNING))
            {
                running_pods += 1;
            }
        }
        self.metrics.render(running_pods, &states)
    }
}

type Shared = State<Arc<Server>>;

/// Where the ports are: healthz (plain), the API (TLS), the read-only
/// port (plain, if any).
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub healthz: SocketAddr,
    pub api: SocketAddr,
    pub read_only: Option<SocketAddr>,
}

/// Binds every listener (so a port clash is an error at start) and serves
/// them in the background.
pub async fn serve(
    server: Arc<Server>,
    ports: Ports,
    tls: Arc<rustls::ServerConfig>,
) -> std::io::Result<()> {
    let healthz = tokio::net::TcpListener::bind(ports.healthz).await?;
    let api = tokio::net::TcpListener::bind(ports.api).await?;
    let read_only = match ports.read_only {
        Some(a) => {
            if !a.ip().is_loopback() {
                // Anyone who reaches the address reads pods, events and
                // metrics there: nothing asks who they are.
                tracing::warn!(addr = %a, "the read-only port (readOnlyPort) serves without authentication on a non-loopback address");
            }
            Some(tokio::net::TcpListener::bind(a).await?)
        }
        None => None,
    };
    spawn(healthz, healthz_router(server.clone()), None, "healthz");
    if let Some(l) = read_only {
        spawn(l, read_only_router(server.clone()), None, "read-only");
    }
    spawn(
        api,
        api_router(server),
        Some(tokio_rustls::TlsAcceptor::from(tls)),
        "api",
    );
    Ok(())
}

/// Accepts connections on `listener` (TLS when `tls`), at most
/// [`MAX_CONNECTIONS`] at once (more are closed at once), each served
/// with `router` (upgrades allowed: exec, attach, port-forward).
fn spawn(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    port: &'static str,
) {
    if let Ok(addr) = listener.local_addr() {
        if tls.is_some() {
            tracing::info!(%addr, port, "serving HTTPS");
        } else {
            tracing::info!(%addr, port, "serving HTTP");
        }
    }
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // EMFILE and friends: wait instead of spinning.
                    tracing::warn!(error = %e, port, "accept failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::debug!(port, "too many connections: one closed");
                continue;
            };
            let (router, tls) = (router.clone(), tls.clone());
            tokio::spawn(async move {
                let _slot = slot;
                match tls {
                    Some(acceptor) => {
                        let Ok(Ok(stream)) =
                            tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(tcp)).await
                        else {
                            return;
                        };
                        let cert = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .map(|c| Arc::from(c.as_ref()));
                        serve_conn(Box::new(stream), router, Peer(cert)).await;
                    }
                    None => serve_conn(Box::new(tcp), router, Peer(None)).await,
                }
            });
        }
    });
}

async fn serve_conn(io: Box<dyn crate::httpc::Io>, router: Router, peer: Peer) {
    let io = TokioIo::new(io);
    let service =
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(peer.clone());
            let router = router.clone();
            async move { tower::ServiceExt::oneshot(router, req.map(Body::new)).await }
        });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .serve_connection(io, service)
        .with_upgrades()
        .await;
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

/// What both the API port and the read-only port serve.
fn read_only_routes() -> Router<Arc<Server>> {
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
}

/// The read-only port (kubelet's `readOnlyPort`): no logs, no streams.
fn read_only_router(server: Arc<Server>) -> Router {
    read_only_routes().with_state(server)
}

/// The API port: everything, behind authentication and authorization
/// (kubelet's `InstallAuthFilter`).
fn api_router(server: Arc<Server>) -> Router {
    read_only_routes()
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(endpoints::container_endpoint),
        )
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(endpoints::container_endpoint).post(endpoints::container_endpoint),
        )
        .route(
            "/exec/{namespace}/{pod}/{uid}/{container}",
            get(endpoints::container_endpoint).post(endpoints::container_endpoint),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(endpoints::container_endpoint).post(endpoints::container_endpoint),
        )
        .route(
            "/attach/{namespace}/{pod}/{uid}/{container}",
            get(endpoints::container_endpoint).post(endpoints::container_endpoint),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(endpoints::container_endpoint).post(endpoints::container_endpoint),
        )
        .route(
            "/portForward/{namespace}/{pod}/{uid}",
            get(endpoints::container_endpoint).post(endpoints::container_endpoint),
        )
        .route(
            "/run/{namespace}/{pod}/{container}",
            post(endpoints::container_endpoint),
        )
        .route(
            "/run/{namespace}/{pod}/{uid}/{container}",
            post(endpoints::container_endpoint),
        )
        .layer(axum::middleware::from_fn_with_state(
            server.clone(),
            authenticate,
        ))
        .with_state(server)
}

/// Authentication, then authorization, of every request on the API port.
async fn authenticate(State(s): Shared, req: Request, next: Next) -> Response {
    let cert = req.extensions().get::<Peer>().and_then(|p| p.0.clone());
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let admitted = s
        .auth
        .admit(cert.as_deref(), bearer, req.method(), req.uri().path())
        .await;
    if let Err(r) = admitted {
        return refusal(r);
    }
    next.run(req).await
}

fn refusal(r: auth::Refusal) -> Response {
    match r {
        auth::Refusal::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response(),
        auth::Refusal::Forbidden(m) => (StatusCode::FORBIDDEN, m).into_response(),
        auth::Refusal::Error(m) => {
            tracing::warn!("API port: {m}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal Server Error: authorization\n",
            )
                .into_response()
        }
    }
}

/// Runs `f` on the blocking pool.
async fn blocking(f: impl FnOnce() -> Response + Send + 'static) -> Response {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response())
}

fn json_reply(v: &impl serde::Serialize) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(v).unwrap_or_default(),
    )
        .into_response()
}

/// Prometheus text, or OpenMetrics when the scraper asks for it.
fn metrics_reply(headers: &HeaderMap, families: &[metrics::Family]) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = metrics::Format::negotiate(accept);
    (
        [(header::CONTENT_TYPE, format.content_type())],
        format.encode(families),
    )
        .into_response()
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
    let mut facts = n.facts.clone();
    if let Some(d) = &n.devices {
        facts.extended = d.capacity();
    }
    let status = crate::nodestatus::node_status(&s.cri, &facts, &n.pressure, &previous).await;
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
    metrics_reply(&headers, &s.agent_metrics())
}

async fn cadvisor(State(s): Shared, headers: HeaderMap) -> Response {
    blocking(move || {
        let families = crate::stats::cadvisor::render(&s.stats.collect());
        metrics_reply(&headers, &families)
    })
    .await
}

async fn resource(State(s): Shared, headers: HeaderMap) -> Response {
    blocking(move || {
        let families = crate::stats::resource::render(&s.stats.collect());
        metrics_reply(&headers, &families)
    })
    .await
}

async fn probes(State(s): Shared, headers: HeaderMap) -> Response {
    metrics_reply(&headers, &s.probe_metrics.render())
}

async fn manifests(State(s): Shared) -> Response {
    json_reply(&json!({ "errors": s.manifest_errors.get() }))
}

/// The summary first asks the runtime for the writable layers.
async fn summary(State(s): Shared) -> Response {
    let rootfs = s.cri.writable_layers().await.unwrap_or_default();
    blocking(move || json_reply(&s.stats.summary(rootfs))).await
}
