//! HTTP endpoints: `/healthz` on healthzBindAddress:healthzPort (failing
//! when PLEG or the source loop stalls; nothing else there, as kubelet), and
//! on the API port `/pods` (a v1 `PodList` with status), `/events` (a v1
//! `EventList`), the metrics and `/stats/summary`.

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

use crate::metrics;
use crate::{Shared, lock};

/// kubelet's PLEG health threshold.
const STALL: Duration = Duration::from_secs(180);

/// Binds both listeners (so a port clash is an error at start) and serves
/// them in the background.
pub async fn serve(
    shared: Arc<Shared>,
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
                                    json_reply(&shared.summary(rootfs))
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

fn route(shared: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
    }
    match req.uri().path() {
        "/healthz" => {
            let relist = lock(&shared.last_relist).elapsed();
            let source = lock(&shared.last_source).elapsed();
            if relist > STALL {
                reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("pleg was last seen active {relist:?} ago; threshold is {STALL:?}\n"),
                )
            } else if source > STALL {
                reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("the sync loop was last seen active {source:?} ago\n"),
                )
            } else {
                reply(StatusCode::OK, "text/plain", "ok")
            }
        }
        "/pods" | "/pods/" => {
            let items = shared.pods();
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
            "items": shared.events_list(),
        })),
        "/metrics" => metrics_reply(&req, shared.agent_metrics()),
        "/metrics/cadvisor" => metrics_reply(
            &req,
            crate::cadvisor::render(&crate::cadvisor::collect(shared)),
        ),
        "/metrics/resource" => metrics_reply(
            &req,
            crate::resource::render(&crate::cadvisor::collect(shared)),
        ),
        "/metrics/probes" => metrics_reply(&req, shared.probe_metrics()),
        "/manifests" => json_reply(&json!({
            "errors": lock(&shared.manifest_errors).clone(),
        })),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "404 page not found\n"),
    }
}
