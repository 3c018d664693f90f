//! HTTP endpoints: `/healthz` on healthzBindAddress:healthzPort (failing
//! when PLEG or the source loop stalls; nothing else there, as kubelet), and
//! on the API port `/pods` (a v1 `PodList` with status), `/events` (a v1
//! `EventList`), the metrics and `/stats/summary`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
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

/// Binds both listeners (so a port clash is an error at start) and serves
/// them in the background.
pub async fn serve(
    shared: Arc<Server>,
    healthz: SocketAddr,
    api: SocketAddr,
) -> std::io::Result<()> {
    // The healthz port serves /healthz only (it may be bound wider than the
    // API port); when both are one port, that port serves everything.
    let mut listeners = vec![(
        tokio::net::TcpListener::bind(healthz).await?,
        api != healthz,
    )];
    if api != healthz {
        listeners.push((tokio::net::TcpListener::bind(api).await?, false));
    }
    for (l, healthz_only) in listeners {
        tracing::info!(addr = %l.local_addr()?, healthz_only, "serving HTTP");
        let shared = shared.clone();
        tokio::spawn(async move {
            loop {
                let stream = match l.accept().await {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors (EMFILE) fails every accept
                        // at once: wait instead of spinning a core on it.
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let shared = shared.clone();
                        async move {
                            if healthz_only && req.uri().path() != "/healthz" {
                                return Ok::<_, Infallible>(reply(
                                    StatusCode::NOT_FOUND,
                                    "text/plain",
                                    "the healthz port serves /healthz only\n",
                                ));
                            }
                            // Endpoints read cgroupfs, /proc and walk directories
                            // (10 ms per 100 containers): on the blocking pool, so
                            // a scrape never stalls the pod workers' runtime threads.
                            let summary = req.method() == Method::GET
                                && matches!(req.uri().path(), "/stats/summary" | "/stats/summary/");
                            // The summary first asks the runtime (writable layers).
                            let rootfs = if summary {
                                shared.cri.writable_layers().await.unwrap_or_default()
                            } else {
                                Default::default()
                            };
                            let answer = tokio::task::spawn_blocking(move || {
                                if summary {
                                    json_reply(&shared.stats.summary(rootfs))
                                } else {
                                    route(&shared, req)
                                }
                            })
                            .await;
                            Ok::<_, Infallible>(answer.unwrap_or_else(|e| {
                                reply(
                                    StatusCode::INTERNAL_SERVER_ERROR,
                                    "text/plain",
                                    format!("{e}\n"),
                                )
                            }))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
    }
    Ok(())
}

fn reply(code: StatusCode, ctype: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = code;
    if let Ok(v) = ctype.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn json_reply(v: &serde_json::Value) -> Response<Full<Bytes>> {
    reply(
        StatusCode::OK,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    )
}

/// Prometheus text, or OpenMetrics when the scraper asks for it.
fn metrics_reply(req: &Request<Incoming>, text: String) -> Response<Full<Bytes>> {
    let accept = req
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    if metrics::wants_openmetrics(accept) {
        reply(
            StatusCode::OK,
            metrics::OPENMETRICS_CONTENT_TYPE,
            metrics::to_openmetrics(&text),
        )
    } else {
        reply(StatusCode::OK, metrics::TEXT_CONTENT_TYPE, text)
    }
}

fn route(shared: &Server, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
    }
    match req.uri().path() {
        "/healthz" => match shared.health.check() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ok"),
            Err(e) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                format!("{e}\n"),
            ),
        },
        "/pods" | "/pods/" => {
            let items = shared.statuses.pods();
            json_reply(&json!({
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {},
                "items": items,
            }))
        }
        "/events" => json_reply(&json!({
            "kind": "EventList",
            "apiVersion": "v1",
            "metadata": {},
            "items": shared.recorder.list(),
        })),
        "/metrics" => metrics_reply(&req, shared.agent_metrics()),
        "/metrics/cadvisor" => metrics_reply(
            &req,
            crate::stats::cadvisor::render(&shared.stats.collect()),
        ),
        "/metrics/resource" => metrics_reply(
            &req,
            crate::stats::resource::render(&shared.stats.collect()),
        ),
        "/metrics/probes" => metrics_reply(&req, shared.probe_metrics.render()),
        "/manifests" => json_reply(&json!({
            "errors": shared.manifest_errors.get(),
        })),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "404 page not found\n"),
    }
}
