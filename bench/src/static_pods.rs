//! `static-pod-bench MANIFEST_DIR SOCKET NODE N [at-once]`: writes N static
//! pod manifests into the agent's folder (temp file + rename, as config
//! management does) one after another, or all at once (a cold start: a
//! device booting with its folder full, or an update dropping many), and
//! measures, for each, manifest written → container running: the
//! container's `started_at` from CRI ContainerStatus minus the wall-clock
//! time of its rename. Prints the latencies in milliseconds as JSON, then
//! removes the manifests and waits until the runtime has no container of
//! them left.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::{
    ContainerFilter, ContainerState, ContainerStatusRequest, ListContainersRequest,
    ListPodSandboxRequest,
};

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn manifest(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n"
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, socket, node, n, at_once) = match args.as_slice() {
        [d, s, nd, n] => (d, s, nd, n, false),
        [d, s, nd, n, m] if m == "at-once" => (d, s, nd, n, true),
        _ => bail!("usage: static-pod-bench MANIFEST_DIR SOCKET NODE N [at-once]"),
    };
    let n: usize = n.parse().context("N")?;
    let dir = Path::new(dir);
    let mut rt = RuntimeServiceClient::new(cri_proto::connect(socket).await?);
    let tag = std::process::id();
    let lat = if at_once {
        all_at_once(dir, &mut rt, node, n, tag).await?
    } else {
        one_after_another(dir, &mut rt, node, n, tag).await?
    };
    println!("{}", serde_json::to_string(&lat)?);
    cleanup(dir, &mut rt, n, tag).await
}

type Rt = RuntimeServiceClient<cri_proto::Channel>;

/// Writes `name`'s manifest (temp file + rename); the time of the rename.
fn write(dir: &Path, name: &str) -> Result<i64> {
    let tmp = dir.join(format!(".{name}.yaml"));
    std::fs::write(&tmp, manifest(name))?;
    let written = now_ns();
    std::fs::rename(&tmp, dir.join(format!("{name}.yaml")))?;
    Ok(written)
}

/// The container's CRI `started_at` (ns since the epoch).
async fn started_at(rt: &mut Rt, id: &str) -> Result<i64> {
    Ok(rt
        .container_status(ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        })
        .await?
        .into_inner()
        .status
        .context("status")?
        .started_at)
}

/// All N written at once, then each pod's write → its container started.
/// Also says on stderr, as `phases {json}`, where in the pipeline the
/// pods were (ms after their write, sorted): RunPodSandbox called (the
/// sandbox's `created_at`), CreateContainer called (the container's), and
/// started: a cold start whose pods all wait in one phase shows there.
async fn all_at_once(dir: &Path, rt: &mut Rt, node: &str, n: usize, tag: u32) -> Result<Vec<f64>> {
    let mut written = HashMap::new();
    for i in 0..n {
        let name = format!("bench-{tag}-{i}");
        written.insert(format!("{name}-{node}"), write(dir, &name)?);
    }
    let busy0 = busy_ticks();
    let mut lat = HashMap::new();
    let mut created = Vec::with_capacity(n);
    let deadline = Instant::now() + Duration::from_secs(300);
    while lat.len() < n {
        let list = rt
            .list_containers(ListContainersRequest::default())
            .await?
            .into_inner()
            .containers;
        for c in list {
            let Some(pod) = c.labels.get("io.kubernetes.pod.name") else {
                continue;
            };
            if c.state != ContainerState::ContainerRunning as i32 || lat.contains_key(pod) {
                continue;
            }
            let Some(w) = written.get(pod) else { continue };
            let started = started_at(rt, &c.id).await?;
            lat.insert(pod.clone(), (started - w) as f64 / 1e6);
            created.push((c.created_at - w) as f64 / 1e6);
        }
        if Instant::now() > deadline {
            bail!("{} of {n} pods running after 300 s", lat.len());
        }
        // The latencies come from the runtime's started_at, not from when
        // a look saw them: a look every 100 ms (kubelet's PLEG lists every
        // second) keeps the bench's own load on the shim small.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let (Some(a), Some(b)) = (busy0, busy_ticks()) {
        eprintln!("busy-ticks {}", b.saturating_sub(a));
    }
    let mut sandbox: Vec<f64> = rt
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await?
        .into_inner()
        .items
        .iter()
        .filter_map(|s| {
            let w = written.get(&s.metadata.as_ref()?.name)?;
            Some((s.created_at - w) as f64 / 1e6)
        })
        .collect();
    let mut started: Vec<f64> = lat.values().copied().collect();
    for v in [&mut sandbox, &mut created, &mut started] {
        v.sort_by(f64::total_cmp);
    }
    eprintln!(
        "phases {}",
        serde_json::json!({"sandbox": sandbox, "container": created, "started": started})
    );
    Ok(lat.into_values().collect())
}

/// The machine's busy CPU time so far, in clock ticks (`/proc/stat`: user,
/// nice, system, irq, softirq of all CPUs).
fn busy_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = text
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    Some([0, 1, 2, 5, 6].iter().filter_map(|i| cpu.get(*i)).sum())
}

async fn one_after_another(
    dir: &Path,
    rt: &mut Rt,
    node: &str,
    n: usize,
    tag: u32,
) -> Result<Vec<f64>> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("bench-{tag}-{i}");
        let written = write(dir, &name)?;
        let full = format!("{name}-{node}");
        let deadline = Instant::now() + Duration::from_secs(60);
        let started = loop {
            let list = rt
                .list_containers(ListContainersRequest {
                    filter: Some(ContainerFilter {
                        label_selector: HashMap::from([(
                            "io.kubernetes.pod.name".to_string(),
                            full.clone(),
                        )]),
                        ..Default::default()
                    }),
                })
                .await?
                .into_inner()
                .containers;
            if let Some(c) = list
                .iter()
                .find(|c| c.state == ContainerState::ContainerRunning as i32)
            {
                break started_at(rt, &c.id).await?;
            }
            if Instant::now() > deadline {
                bail!("{full} did not start within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        lat.push((started - written) as f64 / 1e6);
    }
    Ok(lat)
}

/// Removes the manifests; waits until their containers are gone.
async fn cleanup(dir: &Path, rt: &mut Rt, n: usize, tag: u32) -> Result<()> {
    for i in 0..n {
        let _ = std::fs::remove_file(dir.join(format!("bench-{tag}-{i}.yaml")));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = rt
            .list_containers(ListContainersRequest::default())
            .await?
            .into_inner()
            .containers
            .into_iter()
            .filter(|c| {
                c.labels
                    .get("io.kubernetes.pod.name")
                    .is_some_and(|p| p.starts_with(&format!("bench-{tag}-")))
            })
            .count();
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{left} containers still there 120 s after their manifests were removed");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
