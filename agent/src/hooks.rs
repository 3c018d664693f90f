//! Lifecycle hooks (postStart, preStop): exec through CRI `ExecSync`,
//! httpGet with a small HTTP/1.1 client, and sleep. Each bounded by a
//! timeout (the grace period for preStop).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::runtime::Cri;

/// Resolves a port by number or by the container's port name.
pub fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("bad port {n}")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("no container port named {name:?}")),
    }
}

/// Runs one hook for container `id`; `Err` carries the message kubelet
/// would put into the FailedPostStartHook / FailedPreStopHook event.
pub async fn run(
    cri: &Cri,
    h: &LifecycleHandler,
    c: &Container,
    id: &str,
    pod_ip: &str,
    timeout: Duration,
) -> Result<(), String> {
    if let Some(exec) = &h.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let (code, out) = cri
            .exec_sync(id, cmd.clone(), timeout)
            .await
            .map_err(|e| e.to_string())?;
        if code != 0 {
            return Err(format!(
                "Exec lifecycle hook ({}) for container {:?} failed with exit code {code}: {}",
                cmd.join(" "),
                c.name,
                out.trim()
            ));
        }
        return Ok(());
    }
    if let Some(s) = &h.sleep {
        let d = Duration::from_secs(u64::try_from(s.seconds).unwrap_or(0));
        tokio::time::sleep(d.min(timeout)).await;
        return Ok(());
    }
    if let Some(g) = &h.http_get {
        let host = g.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| {
            if pod_ip.is_empty() {
                "127.0.0.1".into()
            } else {
                pod_ip.into()
            }
        });
        let port = resolve_port(&g.port, c)?;
        let path = g.path.clone().unwrap_or_else(|| "/".into());
        let headers: Vec<(String, String)> = g
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        let status = tokio::time::timeout(timeout, http_get(&host, port, &path, &headers))
            .await
            .map_err(|_| format!("HTTP lifecycle hook ({path}) timed out"))??;
        if !(200..400).contains(&status) {
            return Err(format!(
                "HTTP lifecycle hook ({path}) for container {:?} failed with status {status}",
                c.name
            ));
        }
        return Ok(());
    }
    Err("no handler".into())
}

/// A minimal HTTP/1.1 GET: returns the status code.
pub async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<u16, String> {
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut s = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-lifecycle/1.31\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("write {addr}: {e}"))?;
    let mut buf = vec![0u8; 1024];
    let mut n = 0;
    while n < buf.len() {
        let r = s
            .read(&mut buf[n..])
            .await
            .map_err(|e| format!("read {addr}: {e}"))?;
        if r == 0 || buf[..n + r].windows(2).any(|w| w == b"\r\n") {
            n += r;
            break;
        }
        n += r;
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let line = head.lines().next().unwrap_or("");
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad HTTP response from {addr}: {line:?}"))
}
