//! `cri-bench SOCKET IMAGE ITERATIONS [pod|host|cni|userns]`: drives one CRI runtime the way kubelet
//! does — RunPodSandbox, CreateContainer, StartContainer, ExecSync (`true`,
//! as an exec probe), Exec (streaming `echo`, as `kubectl exec`), StopContainer,
//! RemoveContainer, StopPodSandbox, RemovePodSandbox — and prints the latency
//! of each call in milliseconds as JSON (`{"RunPodSandbox": [..], ...}`),
//! with "Create + Start" and "StopContainer: exit → return" (how long after
//! the exit time the runtime recorded StopContainer returned).
//! The same client runs against picolet and containerd, so only the runtimes
//! differ; no CLI start-up is counted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use bench::{container, pod};
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::*;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    // cni: a pod network with a hostPort per pod (the portmap plugin's work).
    let (socket, image, n, net) = match args.as_slice() {
        [_, s, i, n] => (s, i, n, "pod"),
        [_, s, i, n, net] if ["pod", "host", "cni", "userns"].contains(&net.as_str()) => {
            (s, i, n, net.as_str())
        }
        _ => bail!("usage: cri-bench SOCKET IMAGE ITERATIONS [pod|host|cni|userns]"),
    };
    let n: usize = n.parse().context("ITERATIONS")?;
    let mut c = RuntimeServiceClient::new(cri_proto::connect(socket).await?);
    let mut times: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut record_ms = |name: &'static str, ms: f64| times.entry(name).or_default().push(ms);
    let ms_since = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    for i in 0..n {
        let mut config = pod(i, net == "host");
        // userns: a pod network namespace and a user namespace of the
        // pod's own (kubelet's hostUsers: false), a range of 65536 each.
        let userns = (net == "userns").then(|| {
            let range = IdMapping {
                host_id: 1 << 30 | u32::try_from(i % 1024).unwrap_or(0) << 16,
                container_id: 0,
                length: 65536,
            };
            UserNamespace {
                mode: NamespaceMode::Pod as i32,
                uids: vec![range],
                gids: vec![range],
            }
        });
        let with_userns = |ns: Option<&mut NamespaceOption>| {
            if let Some(ns) = ns {
                ns.userns_options = userns.clone();
            }
        };
        with_userns(
            config
                .linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
                .and_then(|s| s.namespace_options.as_mut()),
        );
        let mut ctr = container(image);
        with_userns(
            ctr.linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
                .and_then(|s| s.namespace_options.as_mut()),
        );
        if net == "cni" {
            config.port_mappings = vec![PortMapping {
                protocol: Protocol::Tcp as i32,
                container_port: 80,
                host_port: 30000 + i32::try_from(i % 1000).unwrap_or(0),
                host_ip: String::new(),
            }];
        }
        let t = Instant::now();
        let pod_id = c
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .context("RunPodSandbox")?
            .into_inner()
            .pod_sandbox_id;
        record_ms("RunPodSandbox", ms_since(t));
        if net == "cni" {
            // Not timed: the plugins really gave the pod an address.
            let ip = c
                .pod_sandbox_status(PodSandboxStatusRequest {
                    pod_sandbox_id: pod_id.clone(),
                    verbose: false,
                })
                .await
                .context("PodSandboxStatus")?
                .into_inner()
                .status
                .and_then(|s| s.network)
                .map(|n| n.ip)
                .unwrap_or_default();
            if ip.is_empty() {
                bail!("pod {i}: no IP from the CNI network");
            }
        }
        let t = Instant::now();
        let id = c
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod_id.clone(),
                config: Some(ctr),
                sandbox_config: Some(config),
            })
            .await
            .context("CreateContainer")?
            .into_inner()
            .container_id;
        let create_ms = ms_since(t);
        record_ms("CreateContainer", create_ms);
        let t = Instant::now();
        c.start_container(StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .context("StartContainer")?;
        let start_ms = ms_since(t);
        record_ms("StartContainer", start_ms);
        record_ms("Create + Start", create_ms + start_ms);
        tokio::time::sleep(Duration::from_millis(20)).await;
        // What an exec probe costs: `true` in the running container.
        let t = Instant::now();
        let exec = c
            .exec_sync(ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["true".into()],
                timeout: 10,
            })
            .await
            .context("ExecSync")?
            .into_inner();
        if exec.exit_code != 0 {
            bail!("ExecSync true: exit {}", exec.exit_code);
        }
        record_ms("ExecSync", ms_since(t));
        // `kubectl exec`'s path: Exec for a URL, the SPDY upgrade, the
        // streams, `echo`, its output and exit status (crictl's v4 streams).
        // Not in the cni runs: the runtime then lives in a network namespace
        // of the bench's own, its streaming server on that loopback.
        if net != "cni" {
            let t = Instant::now();
            streaming_exec(&mut c, &id).await?;
            record_ms("Exec (streaming)", ms_since(t));
        }
        let t = Instant::now();
        c.stop_container(StopContainerRequest {
            container_id: id.clone(),
            timeout: 10,
        })
        .await
        .context("StopContainer")?;
        let returned = SystemTime::now();
        record_ms("StopContainer", ms_since(t));
        // Not timed: the exit time the runtime recorded. How long after it
        // StopContainer returned (within ~2 ms of the exit, for a
        // container that exits at once on SIGTERM). Both clocks are the
        // host's realtime clock.
        let finished_at = c
            .container_status(ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            })
            .await
            .context("ContainerStatus")?
            .into_inner()
            .status
            .map(|s| s.finished_at)
            .unwrap_or_default();
        if finished_at <= 0 {
            bail!("pod {i}: no finished_at after StopContainer");
        }
        let returned_ns = returned.duration_since(UNIX_EPOCH)?.as_nanos();
        let after_exit = returned_ns.saturating_sub(u128::try_from(finished_at)?);
        record_ms(
            "StopContainer: exit → return",
            Duration::from_nanos(u64::try_from(after_exit)?).as_secs_f64() * 1000.0,
        );
        let t = Instant::now();
        c.remove_container(RemoveContainerRequest { container_id: id })
            .await
            .context("RemoveContainer")?;
        record_ms("RemoveContainer", ms_since(t));
        let t = Instant::now();
        c.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: pod_id.clone(),
        })
        .await
        .context("StopPodSandbox")?;
        record_ms("StopPodSandbox", ms_since(t));
        let t = Instant::now();
        c.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: pod_id,
        })
        .await
        .context("RemovePodSandbox")?;
        record_ms("RemovePodSandbox", ms_since(t));
    }
    println!("{}", serde_json::to_string(&times)?);
    Ok(())
}

/// A streaming exec of `echo x` in `id`: Exec for a URL, the SPDY upgrade,
/// the streams, the output and the exit status.
async fn streaming_exec(c: &mut RuntimeServiceClient<cri_proto::Channel>, id: &str) -> Result<()> {
    use cri_proto::streaming::{self, client};
    let url = c
        .exec(ExecRequest {
            container_id: id.to_string(),
            cmd: vec!["echo".into(), "x".into()],
            stdout: true,
            stderr: true,
            ..Default::default()
        })
        .await
        .context("Exec")?
        .into_inner()
        .url;
    let (session, protocol) = client::connect(&url, streaming::REMOTECOMMAND_PROTOCOLS)
        .await
        .context("streaming upgrade")?;
    let outcome = client::exec(
        session,
        protocol,
        client::ExecIo {
            stdin: None::<tokio::io::Empty>,
            stdout: Some(tokio::io::sink()),
            stderr: Some(tokio::io::sink()),
            tty: false,
            resize: None,
        },
    )
    .await
    .context("streaming exec")?;
    if outcome != streaming::Outcome::Exited(0) {
        bail!("Exec echo: {outcome:?}");
    }
    Ok(())
}
