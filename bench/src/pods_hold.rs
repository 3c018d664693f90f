//! `pods-hold SOCKET IMAGE`: holds a number of running host-network pods
//! (one idle container each) on a CRI runtime, for footprint measurements.
//! Each line read from stdin is a pod count to reach; `ready N` is printed
//! when N pods run. At end of input every pod is stopped and removed.

use std::io::BufRead;

use anyhow::{Context, Result, bail};
use bench::{container, pod};
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::*;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, image] = args.as_slice() else {
        bail!("usage: pods-hold SOCKET IMAGE (pod counts on stdin)");
    };
    let mut c = RuntimeServiceClient::new(cri_proto::connect(socket).await?);
    let mut pods: Vec<String> = Vec::new();
    run(&mut c, image, &mut pods).await
}

async fn run(
    c: &mut RuntimeServiceClient<cri_proto::Channel>,
    image: &str,
    pods: &mut Vec<String>,
) -> Result<()> {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let want: usize = line?.trim().parse().context("pod count")?;
        while pods.len() < want {
            let i = pods.len();
            let config = pod(i, true);
            let id = c
                .run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: String::new(),
                })
                .await
                .context("RunPodSandbox")?
                .into_inner()
                .pod_sandbox_id;
            let cid = c
                .create_container(CreateContainerRequest {
                    pod_sandbox_id: id.clone(),
                    config: Some(container(image)),
                    sandbox_config: Some(config),
                })
                .await
                .context("CreateContainer")?
                .into_inner()
                .container_id;
            c.start_container(StartContainerRequest { container_id: cid })
                .await
                .context("StartContainer")?;
            pods.push(id);
        }
        println!("ready {}", pods.len());
    }
    for id in pods.drain(..) {
        c.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await
        .context("StopPodSandbox")?;
        c.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
            .await
            .context("RemovePodSandbox")?;
    }
    Ok(())
}
