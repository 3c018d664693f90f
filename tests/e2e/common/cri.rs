//! Building CRI requests the way kubelet does, for the runtime tests.
use std::collections::HashMap;
use std::path::Path;

use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::*;

pub type Client = RuntimeServiceClient<cri_proto::Channel>;

pub async fn client(socket: &Path) -> Client {
    RuntimeServiceClient::new(cri_proto::connect(socket).await.expect("connect"))
}

pub fn pod(
    name: &str,
    log_dir: &Path,
    host_network: bool,
    cgroup_parent: &str,
) -> PodSandboxConfig {
    let uid = format!("uid-{name}-{}", std::process::id());
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid,
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: log_dir.display().to_string(),
        labels: HashMap::from([("app".to_string(), name.to_string())]),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.to_string(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: if host_network {
                        NamespaceMode::Node as i32
                    } else {
                        NamespaceMode::Pod as i32
                    },
                    pid: NamespaceMode::Container as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn container(name: &str, image: &str, cmd: &[&str]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: cmd.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}/0.log"),
        labels: HashMap::from([("io.kubernetes.container.name".to_string(), name.to_string())]),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub async fn run_pod(c: &mut Client, config: &PodSandboxConfig) -> String {
    try_run_pod(c, config).await.expect("RunPodSandbox")
}

/// RunPodSandbox, its error kept for the test to look at.
pub async fn try_run_pod(
    c: &mut Client,
    config: &PodSandboxConfig,
) -> Result<String, tonic::Status> {
    c.run_pod_sandbox(RunPodSandboxRequest {
        config: Some(config.clone()),
        runtime_handler: String::new(),
    })
    .await
    .map(|r| r.into_inner().pod_sandbox_id)
}

pub async fn create(
    c: &mut Client,
    pod_id: &str,
    pod: &PodSandboxConfig,
    config: ContainerConfig,
) -> String {
    try_create(c, pod_id, pod, config)
        .await
        .expect("CreateContainer")
}

/// CreateContainer, its error kept: the container's ID or the status.
pub async fn try_create(
    c: &mut Client,
    pod_id: &str,
    pod: &PodSandboxConfig,
    config: ContainerConfig,
) -> Result<String, tonic::Status> {
    c.create_container(CreateContainerRequest {
        pod_sandbox_id: pod_id.into(),
        config: Some(config),
        sandbox_config: Some(pod.clone()),
    })
    .await
    .map(|r| r.into_inner().container_id)
}

pub async fn start(c: &mut Client, id: &str) {
    c.start_container(StartContainerRequest {
        container_id: id.into(),
    })
    .await
    .expect("StartContainer");
}

pub async fn status(c: &mut Client, id: &str) -> ContainerStatus {
    c.container_status(ContainerStatusRequest {
        container_id: id.into(),
        verbose: false,
    })
    .await
    .expect("ContainerStatus")
    .into_inner()
    .status
    .expect("status")
}

/// Waits for the container to reach `state`.
pub async fn wait_state(
    c: &mut Client,
    id: &str,
    state: ContainerState,
    timeout: std::time::Duration,
) -> ContainerStatus {
    super::eventually_async(
        format_args!("container {id} to reach {state:?}"),
        timeout,
        async || {
            let s = status(c, id).await;
            if s.state == state as i32 {
                Ok(s)
            } else {
                Err(format!("{s:?}"))
            }
        },
        String::new,
    )
    .await
}

/// Creates and starts a container, waits (20 s at most) for it to exit,
/// and returns its status and its CRI log.
pub async fn run_to_exit(
    c: &mut Client,
    pod_id: &str,
    pod: &PodSandboxConfig,
    config: ContainerConfig,
) -> (ContainerStatus, String) {
    let id = create(c, pod_id, pod, config).await;
    start(c, &id).await;
    let st = wait_state(
        c,
        &id,
        ContainerState::ContainerExited,
        std::time::Duration::from_secs(20),
    )
    .await;
    let log = std::fs::read_to_string(&st.log_path)
        .unwrap_or_else(|e| panic!("log {}: {e}", st.log_path));
    (st, log)
}

pub async fn teardown(c: &mut Client, pod_id: &str) {
    c.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod_id.into(),
    })
    .await
    .expect("StopPodSandbox");
    c.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod_id.into(),
    })
    .await
    .expect("RemovePodSandbox");
}

/// ExecSync of `sh -c cmd`, asserting exit 0: its stdout.
pub async fn exec_ok(c: &mut Client, id: &str, cmd: &str) -> String {
    let r = c
        .exec_sync(cri_proto::v1::ExecSyncRequest {
            container_id: id.into(),
            cmd: vec!["sh".into(), "-c".into(), cmd.into()],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(
        r.exit_code,
        0,
        "{cmd}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    String::from_utf8_lossy(&r.stdout).into_owned()
}
