//! The handlers of the API port that reach into containers: logs,
//! exec, attach, port-forward and run (the read-only ones are in the
//! parent module).

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{MAX_STREAMS, Server, Shared, stream};
use crate::logs::reader as logs;

/// The pod `namespace/name` (of `uid`, when given) as the status manager
/// has it.
fn find_pod(
    s: &Server,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<k8s_openapi::api::core::v1::Pod, Box<Response>> {
    s.statuses
        .pods()
        .into_iter()
        .find(|p| {
            p.metadata.namespace.as_deref().unwrap_or("default") == namespace
                && p.metadata.name.as_deref() == Some(name)
                && uid.is_none_or(|u| p.metadata.uid.as_deref() == Some(u))
        })
        .ok_or_else(|| {
            Box::new(stream::text(
                StatusCode::NOT_FOUND,
                format!("pod {namespace}/{name} does not exist\n"),
            ))
        })
}

/// The runtime's ID of a `runtime://id` container ID.
fn runtime_id(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, i)| i)
}

/// The container `name` of `pod`: its current ID, or with `previous` its
/// last terminated one.
fn container_id(
    pod: &k8s_openapi::api::core::v1::Pod,
    name: &str,
    previous: bool,
) -> Result<String, Box<Response>> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let in_spec = pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .any(|c| c.name == name)
    });
    if !in_spec {
        return Err(Box::new(stream::text(
            StatusCode::NOT_FOUND,
            format!("container {name:?} not found in pod {pod_name:?}\n"),
        )));
    }
    let status = pod.status.as_ref().and_then(|st| {
        st.container_statuses
            .iter()
            .flatten()
            .chain(st.init_container_statuses.iter().flatten())
            .find(|c| c.name == name)
    });
    let id = if previous {
        status
            .and_then(|c| c.last_state.as_ref())
            .and_then(|l| l.terminated.as_ref())
            .and_then(|t| t.container_id.clone())
    } else {
        status.and_then(|c| c.container_id.clone())
    };
    id.filter(|i| !i.is_empty())
        .map(|i| runtime_id(&i).to_string())
        .ok_or_else(|| {
            let what = if previous {
                "previous terminated container"
            } else {
                "container"
            };
            Box::new(stream::text(
                StatusCode::BAD_REQUEST,
                format!("{what} {name:?} in pod {pod_name:?} not found\n"),
            ))
        })
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `/containerLogs/{namespace}/{pod}/{container}`.
/// Every endpoint here, by its first path segment: one handler, so axum
/// builds one handler into the binary, not nine.
pub(super) async fn container_endpoint(State(s): Shared, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let parts: Vec<String> = path.split('/').skip(1).map(String::from).collect();
    let query = req.uri().query().map(String::from);
    match (
        parts.first().map(String::as_str),
        &parts[1.min(parts.len())..],
    ) {
        (Some("containerLogs"), [ns, pod, c]) => {
            container_logs(&s, (ns.clone(), pod.clone(), c.clone()), query).await
        }
        (Some(what @ ("exec" | "attach")), [ns, pod, c]) => {
            session(
                &s,
                (ns.clone(), pod.clone(), None, c.clone()),
                req,
                what == "attach",
            )
            .await
        }
        (Some(what @ ("exec" | "attach")), [ns, pod, uid, c]) => {
            let at = (ns.clone(), pod.clone(), Some(uid.clone()), c.clone());
            session(&s, at, req, what == "attach").await
        }
        (Some("portForward"), [ns, pod]) => forward(&s, ns, pod, None, req).await,
        (Some("portForward"), [ns, pod, uid]) => forward(&s, ns, pod, Some(uid), req).await,
        (Some("run"), [ns, pod, c]) => {
            run_in(&s, (ns.clone(), pod.clone(), None, c.clone()), query).await
        }
        (Some("run"), [ns, pod, uid, c]) => {
            run_in(
                &s,
                (ns.clone(), pod.clone(), Some(uid.clone()), c.clone()),
                query,
            )
            .await
        }
        _ => stream::text(StatusCode::NOT_FOUND, "404 page not found\n"),
    }
}

async fn container_logs(
    s: &Server,
    (namespace, pod, container): (String, String, String),
    query: Option<String>,
) -> Response {
    let options = match logs::parse_query(query.as_deref().unwrap_or(""), now_ns()) {
        Ok(o) => o,
        Err((code, m)) => {
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
            return stream::text(code, format!("{m}\n"));
        }
    };
    let pod = match find_pod(s, &namespace, &pod, None) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let id = match container_id(&pod, &container, options.previous) {
        Ok(i) => i,
        Err(r) => return *r,
    };
    let (path, running) = match s.cri.log_file(&id).await {
        Ok(Some(f)) => f,
        Ok(None) => {
            return stream::text(StatusCode::NOT_FOUND, format!("container {id} is gone\n"));
        }
        Err(e) => return stream::text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    };
    let follow = options.follow && running;
    let slot = if follow {
        match s.streams.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                return stream::text(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!("at most {MAX_STREAMS} log follows and streams at once\n"),
                );
            }
        }
    } else {
        None
    };
    let mut reader = match logs::Reader::open(&path, options) {
        Ok(r) => r,
        Err(e) => {
            return stream::text(
                StatusCode::BAD_REQUEST,
                format!("failed to open log file {}: {e}\n", path.display()),
            );
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
    let cri = s.cri.clone();
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let handle = tokio::runtime::Handle::current();
        let mut last_check = std::time::Instant::now();
        loop {
            match reader.next_block() {
                Ok(Some(block)) if !block.is_empty() => {
                    if tx.blocking_send(Ok(bytes::Bytes::from(block))).is_err() {
                        return; // the client went away
                    }
                    continue;
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
            if !follow || tx.is_closed() {
                return;
            }
            if reader.reopen_if_rotated() {
                continue;
            }
            // At the end of what is written: still running?
            if last_check.elapsed() >= Duration::from_secs(1) {
                last_check = std::time::Instant::now();
                let alive = handle
                    .block_on(cri.log_file(&id))
                    .map(|f| f.is_some_and(|(_, running)| running))
                    .unwrap_or(true);
                if !alive {
                    // What was written before the exit, then the end.
                    if let Ok(Some(block)) = reader.next_block()
                        && !block.is_empty()
                    {
                        let _ = tx.blocking_send(Ok(bytes::Bytes::from(block)));
                    }
                    return;
                }
            }
            std::thread::sleep(logs::Reader::period());
        }
    });
    (
        [(header::CONTENT_TYPE, "text/plain")],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}

/// The runtime's ID of the current instance of `container` in the pod.
fn running_container(
    s: &Server,
    namespace: &str,
    pod: &str,
    uid: Option<&str>,
    container: &str,
) -> Result<String, Box<Response>> {
    container_id(&find_pod(s, namespace, pod, uid)?, container, false)
}

/// The runtime's URL for an exec or attach of `container` in the pod.
async fn session(
    s: &Server,
    (namespace, pod, uid, container): (String, String, Option<String>, String),
    req: Request,
    attach: bool,
) -> Response {
    let o = match stream::options(req.uri().query().unwrap_or("")) {
        Ok(o) => o,
        Err(m) => return stream::text(StatusCode::BAD_REQUEST, format!("{m}\n")),
    };
    let id = match running_container(s, &namespace, &pod, uid.as_deref(), &container) {
        Ok(i) => i,
        Err(r) => return *r,
    };
    if !attach && o.command.is_empty() {
        return stream::text(StatusCode::BAD_REQUEST, "no command given\n");
    }
    let url = if attach {
        s.cri
            .attach_url(cri_proto::v1::AttachRequest {
                container_id: id,
                stdin: o.stdin,
                tty: o.tty,
                stdout: o.stdout,
                stderr: o.stderr,
            })
            .await
    } else {
        s.cri
            .exec_url(cri_proto::v1::ExecRequest {
                container_id: id,
                cmd: o.command,
                tty: o.tty,
                stdin: o.stdin,
                stdout: o.stdout,
                stderr: o.stderr,
            })
            .await
    };
    proxy_with_slot(s, url, req).await
}

async fn proxy_with_slot(
    s: &Server,
    url: crate::runtime::Result<String>,
    req: Request,
) -> Response {
    let url = match url {
        Ok(u) => u,
        Err(e) => return stream::text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    };
    let Ok(slot) = s.streams.clone().try_acquire_owned() else {
        return stream::text(
            StatusCode::TOO_MANY_REQUESTS,
            format!("at most {MAX_STREAMS} log follows and streams at once\n"),
        );
    };
    stream::proxy(&url, req, slot).await
}

async fn forward(
    s: &Server,
    namespace: &str,
    pod: &str,
    uid: Option<&str>,
    req: Request,
) -> Response {
    let o = match stream::options(req.uri().query().unwrap_or("")) {
        Ok(o) => o,
        Err(m) => return stream::text(StatusCode::BAD_REQUEST, format!("{m}\n")),
    };
    let pod = match find_pod(s, namespace, pod, uid) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let sandbox = match s.cri.list_pod_uids().await {
        Ok(list) => list.into_iter().find(|b| b.uid == uid && b.ready),
        Err(e) => return stream::text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    };
    let Some(sandbox) = sandbox else {
        return stream::text(
            StatusCode::BAD_REQUEST,
            format!(
                "pod {namespace}/{} has no ready sandbox\n",
                pod.metadata.name.as_deref().unwrap_or_default()
            ),
        );
    };
    let url = s.cri.port_forward_url(&sandbox.id, o.ports).await;
    proxy_with_slot(s, url, req).await
}

/// How long `/run` waits for its command.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

async fn run_in(
    s: &Server,
    (namespace, pod, uid, container): (String, String, Option<String>, String),
    query: Option<String>,
) -> Response {
    let cmd: Vec<String> = logs::url_pairs(query.as_deref().unwrap_or(""))
        .into_iter()
        .find(|(k, _)| k == "cmd")
        .map(|(_, v)| {
            v.split(' ')
                .filter(|w| !w.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    if cmd.is_empty() {
        return stream::text(StatusCode::BAD_REQUEST, "no cmd given\n");
    }
    let id = match running_container(s, &namespace, &pod, uid.as_deref(), &container) {
        Ok(i) => i,
        Err(r) => return *r,
    };
    match s.cri.exec_sync(&id, cmd, RUN_TIMEOUT).await {
        Ok(r) => ([(header::CONTENT_TYPE, "text/plain")], r.output).into_response(),
        Err(e) => stream::text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}
