//! Lifecycle hooks (postStart, preStop): exec through CRI `ExecSync`,
//! httpGet through [`crate::httpc`], and sleep. Each bounded by a
//! timeout (the grace period for preStop).

use std::time::Duration;

use crate::httpc;
use crate::probe::resolve_port;
use crate::prober::KUBE_VERSION;
use crate::runtime::Cri;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

/// Why a hook failed: its text is the message kubelet puts into the
/// FailedPostStartHook / FailedPreStopHook event.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(transparent)]
    Cri(#[from] crate::runtime::CriError),
    #[error(transparent)]
    Handler(#[from] crate::probe::HandlerError),
    #[error(transparent)]
    Http(#[from] httpc::Error),
    #[error(
        "Exec lifecycle hook ({command}) for container {container:?} failed with exit code {code}: {output}"
    )]
    Exec {
        command: String,
        container: String,
        code: i32,
        output: String,
    },
    #[error("HTTP lifecycle hook ({path}) timed out")]
    HttpTimeout { path: String },
    #[error(
        "HTTP lifecycle hook ({path}) for container {container:?} failed with status {status}: {body}"
    )]
    HttpStatus {
        path: String,
        container: String,
        status: u16,
        body: String,
    },
    #[error("no handler")]
    NoHandler,
}

/// Runs one hook for container `id`.
pub async fn run(
    cri: &Cri,
    h: &LifecycleHandler,
    c: &Container,
    id: &str,
    pod_ip: &str,
    timeout: Duration,
) -> Result<(), HookError> {
    if let Some(exec) = &h.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let r = cri.exec_sync(id, cmd.clone(), timeout).await?;
        if r.exit_code != 0 {
            return Err(HookError::Exec {
                command: cmd.join(" "),
                container: c.name.clone(),
                code: r.exit_code,
                output: r.output.trim().to_string(),
            });
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
        let path = g.path.clone().unwrap_or_default();
        let path = if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        };
        let headers: Vec<(String, String)> = g
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        let ua = format!("kube-lifecycle/{KUBE_VERSION}");
        let get = httpc::Get {
            https: g
                .scheme
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("https")),
            host: &host,
            port: resolve_port(&g.port, c)?,
            path: &path,
            headers: &headers,
            user_agent: &ua,
        };
        let r = tokio::time::timeout(timeout, httpc::get(&get))
            .await
            .map_err(|_| HookError::HttpTimeout { path: path.clone() })??;
        if !(200..400).contains(&r.status) {
            return Err(HookError::HttpStatus {
                path,
                container: c.name.clone(),
                status: r.status,
                body: r.body.trim().to_string(),
            });
        }
        return Ok(());
    }
    Err(HookError::NoHandler)
}
