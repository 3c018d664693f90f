//! `static-pod-bench MANIFEST_DIR SOCKET NODE N`: writes N static pod
//! manifests into the agent's folder one after another (temp file + rename,
//! as config management does) and measures, for each, manifest written →
//! container running: the container's `started_at` from CRI ContainerStatus
//! minus the wall-clock time of the rename. Prints the latencies in
//! milliseconds as JSON, then removes the manifests and waits until the
//! runtime has no container of them left.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::{
    ContainerFilter, ContainerState, ContainerStatusRequest, ListContainersRequest,
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
    let [dir, socket, node, n] = args.as_slice() else {
        bail!("usage: static-pod-bench MANIFEST_DIR SOCKET NODE N");
    };
    let n: usize = n.parse().context("N")?;
    let dir = Path::new(dir);
    let mut rt = RuntimeServiceClient::new(cri_proto::connect(socket).await?);
    let mut lat = Vec::with_capacity(n);
    let tag = std::process::id();
    for i in 0..n {
        let name = format!("bench-{tag}-{i}");
        let tmp = dir.join(format!(".{name}.yaml"));
        std::fs::write(&tmp, manifest(&name))?;
        let written = now_ns();
        std::fs::rename(&tmp, dir.join(format!("{name}.yaml")))?;
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
                let st = rt
                    .container_status(ContainerStatusRequest {
                        container_id: c.id.clone(),
                        verbose: false,
                    })
                    .await?
                    .into_inner()
                    .status
                    .context("status")?;
                break st.started_at;
            }
            if Instant::now() > deadline {
                bail!("{full} did not start within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        lat.push((started - written) as f64 / 1e6);
    }
    println!("{}", serde_json::to_string(&lat)?);
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
