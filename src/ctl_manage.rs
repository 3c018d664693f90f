//! `picolet ctl` verbs that manage what exists, as crictl's: stop, rm,
//! stopp, rmp, inspect, inspectp, stats. An orphaned pod (its agent gone)
//! can be removed by hand with them.

use std::collections::HashMap;

use anyhow::{Result, bail};
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::{
    ContainerFilter, ContainerState, ContainerStats, ContainerStatsFilter, ContainerStatusRequest,
    ListContainerStatsRequest, ListContainersRequest, ListPodSandboxRequest, PodSandboxState,
    PodSandboxStatusRequest, RemoveContainerRequest, RemovePodSandboxRequest, StopContainerRequest,
    StopPodSandboxRequest,
};
use serde_json::{Value, json};

type Client = RuntimeServiceClient<cri_proto::Channel>;

/// StopContainer for each, with `timeout` seconds of grace before SIGKILL.
pub async fn stop(client: &mut Client, ids: &[String], timeout: i64) -> Result<()> {
    for prefix in ids {
        let id = resolve(client, prefix).await?;
        client
            .stop_container(StopContainerRequest {
                container_id: id.clone(),
                timeout,
            })
            .await?;
        out!("{id}");
    }
    Ok(())
}

/// RemoveContainer for each; a running one only with `force` (stopped
/// first, at once), as crictl's `rm`.
pub async fn rm(client: &mut Client, ids: &[String], force: bool) -> Result<()> {
    for prefix in ids {
        let id = resolve(client, prefix).await?;
        let status = client
            .container_status(ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status
            .unwrap_or_default();
        if status.state == ContainerState::ContainerRunning as i32 {
            if !force {
                bail!("container {id} is running: stop it first, or use -f");
            }
            client
                .stop_container(StopContainerRequest {
                    container_id: id.clone(),
                    timeout: 0,
                })
                .await?;
        }
        client
            .remove_container(RemoveContainerRequest {
                container_id: id.clone(),
            })
            .await?;
        out!("{id}");
    }
    Ok(())
}

/// StopPodSandbox for each: its containers are stopped, its network torn
/// down.
pub async fn stopp(client: &mut Client, pods: &[String]) -> Result<()> {
    for prefix in pods {
        let id = resolve_pod(client, prefix).await?;
        client
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await?;
        out!("Stopped sandbox {id}");
    }
    Ok(())
}

/// RemovePodSandbox for each (its containers too); a ready one only with
/// `force` (stopped first), as crictl's `rmp`.
pub async fn rmp(client: &mut Client, pods: &[String], force: bool) -> Result<()> {
    for prefix in pods {
        let id = resolve_pod(client, prefix).await?;
        let state = client
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id.clone(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status
            .map(|s| s.state);
        if state == Some(PodSandboxState::SandboxReady as i32) {
            if !force {
                bail!("pod sandbox {id} is ready: stop it first (stopp), or use -f");
            }
            client
                .stop_pod_sandbox(StopPodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await?;
        }
        client
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await?;
        out!("Removed sandbox {id}");
    }
    Ok(())
}

/// ContainerStatus (verbose) as JSON: `{"status": ..., "info": ...}`.
pub async fn inspect(client: &mut Client, prefix: &str) -> Result<()> {
    let id = resolve(client, prefix).await?;
    let r = client
        .container_status(ContainerStatusRequest {
            container_id: id,
            verbose: true,
        })
        .await?
        .into_inner();
    let s = r.status.unwrap_or_default();
    let m = s.metadata.unwrap_or_default();
    let state = ContainerState::try_from(s.state)
        .map(|st| st.as_str_name())
        .unwrap_or("CONTAINER_UNKNOWN");
    let status = json!({
        "id": s.id,
        "metadata": {"name": m.name, "attempt": m.attempt},
        "state": state,
        "createdAt": s.created_at,
        "startedAt": s.started_at,
        "finishedAt": s.finished_at,
        "exitCode": s.exit_code,
        "image": s.image.map(|i| i.image).unwrap_or_default(),
        "imageRef": s.image_ref,
        "reason": s.reason,
        "message": s.message,
        "labels": s.labels,
        "annotations": s.annotations,
        "mounts": s.mounts.iter().map(|mt| json!({
            "containerPath": mt.container_path,
            "hostPath": mt.host_path,
            "readonly": mt.readonly,
        })).collect::<Vec<_>>(),
        "logPath": s.log_path,
    });
    print_json(status, &r.info)
}

/// PodSandboxStatus (verbose) as JSON: `{"status": ..., "info": ...}`.
pub async fn inspectp(client: &mut Client, prefix: &str) -> Result<()> {
    let id = resolve_pod(client, prefix).await?;
    let r = client
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: id,
            verbose: true,
        })
        .await?
        .into_inner();
    let s = r.status.unwrap_or_default();
    let m = s.metadata.unwrap_or_default();
    let state = PodSandboxState::try_from(s.state)
        .map(|st| st.as_str_name())
        .unwrap_or("SANDBOX_UNKNOWN");
    let network = s.network.unwrap_or_default();
    let ns = s
        .linux
        .and_then(|l| l.namespaces)
        .and_then(|n| n.options)
        .unwrap_or_default();
    let status = json!({
        "id": s.id,
        "metadata": {
            "name": m.name,
            "uid": m.uid,
            "namespace": m.namespace,
            "attempt": m.attempt,
        },
        "state": state,
        "createdAt": s.created_at,
        "network": {
            "ip": network.ip,
            "additionalIps": network.additional_ips.iter().map(|i| i.ip.clone()).collect::<Vec<_>>(),
        },
        "linux": {"namespaces": {"options": {
            "network": ns.network,
            "pid": ns.pid,
            "ipc": ns.ipc,
        }}},
        "labels": s.labels,
        "annotations": s.annotations,
        "runtimeHandler": s.runtime_handler,
    });
    print_json(status, &r.info)
}

fn print_json(status: Value, info: &HashMap<String, String>) -> Result<()> {
    // Verbose info values are JSON documents; others stay strings.
    let info: serde_json::Map<String, Value> = info
        .iter()
        .map(|(k, v)| {
            let v = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.clone()));
            (k.clone(), v)
        })
        .collect();
    out!(
        "{}",
        serde_json::to_string_pretty(&json!({"status": status, "info": info}))?
    );
    Ok(())
}

/// ListContainerStats of the running containers (or one): CPU over one
/// second between two samples, memory working set, writable layer.
pub async fn stats(client: &mut Client, prefix: Option<&str>) -> Result<()> {
    let id = match prefix {
        Some(p) => Some(resolve(client, p).await?),
        None => None,
    };
    let sample = |client: &mut Client| {
        let mut client = client.clone();
        let id = id.clone();
        async move {
            let filter = ContainerStatsFilter {
                id: id.unwrap_or_default(),
                ..Default::default()
            };
            let stats = client
                .list_container_stats(ListContainerStatsRequest {
                    filter: Some(filter),
                })
                .await?
                .into_inner()
                .stats;
            Ok::<_, anyhow::Error>(stats)
        }
    };
    let first = sample(client).await?;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let second = sample(client).await?;
    // Only running containers, as crictl's default.
    let running: std::collections::HashSet<String> = client
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                state: Some(cri_proto::v1::ContainerStateValue {
                    state: ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await?
        .into_inner()
        .containers
        .into_iter()
        .map(|c| c.id)
        .collect();
    let before: HashMap<String, &ContainerStats> = first
        .iter()
        .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
        .collect();
    out!(
        "{:<14} {:<20} {:>6} {:>10} {:>10} {:>7}",
        "CONTAINER",
        "NAME",
        "CPU %",
        "MEM",
        "DISK",
        "INODES"
    );
    let mut rows: Vec<&ContainerStats> = second
        .iter()
        .filter(|s| {
            s.attributes
                .as_ref()
                .is_some_and(|a| running.contains(&a.id))
        })
        .collect();
    rows.sort_by_key(|s| s.attributes.as_ref().map(|a| a.id.clone()));
    for s in rows {
        let attrs = s.attributes.clone().unwrap_or_default();
        let cpu = cpu_percent(before.get(&attrs.id).copied(), s);
        let mem = s
            .memory
            .as_ref()
            .and_then(|m| m.working_set_bytes.as_ref())
            .map(|v| v.value);
        let (disk, inodes) = s
            .writable_layer
            .as_ref()
            .map(|w| {
                (
                    w.used_bytes.as_ref().map(|v| v.value),
                    w.inodes_used.as_ref().map(|v| v.value),
                )
            })
            .unwrap_or_default();
        let opt = |v: Option<u64>, f: fn(u64) -> String| v.map_or_else(|| "-".into(), f);
        out!(
            "{:<14} {:<20} {:>6} {:>10} {:>10} {:>7}",
            short(&attrs.id),
            attrs.metadata.map(|m| m.name).unwrap_or_default(),
            cpu.map_or_else(|| "-".into(), |c| format!("{c:.2}")),
            opt(mem, crate::ctl_images::human),
            opt(disk, crate::ctl_images::human),
            opt(inodes, |n| n.to_string()),
        );
    }
    Ok(())
}

/// CPU use between two samples, in percent of one core.
fn cpu_percent(before: Option<&ContainerStats>, after: &ContainerStats) -> Option<f64> {
    let cpu = |s: &ContainerStats| {
        let c = s.cpu.as_ref()?;
        Some((c.timestamp, c.usage_core_nano_seconds.as_ref()?.value))
    };
    let (t0, u0) = cpu(before?)?;
    let (t1, u1) = cpu(after)?;
    let dt = t1.checked_sub(t0).filter(|d| *d > 0)?;
    Some(u1.saturating_sub(u0) as f64 * 100.0 / dt as f64)
}

/// The one pod sandbox whose ID starts with `prefix`.
pub(crate) async fn resolve_pod(
    client: &mut RuntimeServiceClient<cri_proto::Channel>,
    prefix: &str,
) -> Result<String> {
    let list = client
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await?
        .into_inner()
        .items;
    let hits: Vec<String> = list
        .into_iter()
        .map(|p| p.id)
        .filter(|id| id.starts_with(prefix))
        .collect();
    match hits.as_slice() {
        [one] => Ok(one.clone()),
        [] => anyhow::bail!("no pod sandbox {prefix:?}"),
        _ => anyhow::bail!("{prefix:?} matches {} pod sandboxes", hits.len()),
    }
}

/// The one container whose ID starts with `prefix`.
pub(crate) async fn resolve(
    client: &mut RuntimeServiceClient<cri_proto::Channel>,
    prefix: &str,
) -> Result<String> {
    let list = client
        .list_containers(ListContainersRequest { filter: None })
        .await?
        .into_inner()
        .containers;
    let hits: Vec<String> = list
        .into_iter()
        .map(|c| c.id)
        .filter(|id| id.starts_with(prefix))
        .collect();
    match hits.as_slice() {
        [one] => Ok(one.clone()),
        [] => anyhow::bail!("no container {prefix:?}"),
        _ => anyhow::bail!("{prefix:?} matches {} containers", hits.len()),
    }
}

/// A container or sandbox ID as crictl shows it.
pub(crate) fn short(id: &str) -> String {
    id.chars().take(13).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_proto::v1::{CpuUsage, UInt64Value};

    #[test]
    fn cpu_percent_between_two_samples() {
        let at = |t: i64, used: u64| ContainerStats {
            cpu: Some(CpuUsage {
                timestamp: t,
                usage_core_nano_seconds: Some(UInt64Value { value: used }),
                usage_nano_cores: None,
            }),
            ..Default::default()
        };
        let p = cpu_percent(
            Some(&at(1_000_000_000, 10)),
            &at(2_000_000_000, 250_000_010),
        );
        assert_eq!(p, Some(25.0));
        assert_eq!(cpu_percent(None, &at(2, 2)), None);
        assert_eq!(
            cpu_percent(Some(&at(2, 2)), &at(2, 5)),
            None,
            "no time passed"
        );
    }
}
