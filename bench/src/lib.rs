//! Pod and container configs shared by the benchmark clients: built the way
//! kubelet builds them, the same for every runtime measured.

use cri_proto::v1::*;

/// Pod `i`, in its own network namespace or the host's.
pub fn pod(i: usize, host_network: bool) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: format!("bench-{i}"),
            uid: format!("bench-uid-{}-{i}", std::process::id()),
            namespace: "default".into(),
            attempt: 0,
        }),
        // As kubelet: a host-network pod has the host's name.
        hostname: if host_network {
            String::new()
        } else {
            format!("bench-{i}")
        },
        log_directory: format!("/var/log/pods/bench-{}-{i}", std::process::id()),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("/picolet-bench/pod-{i}"),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: if host_network {
                        NamespaceMode::Node
                    } else {
                        NamespaceMode::Pod
                    } as i32,
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

/// A container that idles and exits on SIGTERM at once.
pub fn container(image: &str) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        // Exits on SIGTERM at once (a bare `sleep` as pid 1 would ignore it
        // and every stop would wait for the timeout).
        command: vec![
            "sh".into(),
            "-c".into(),
            "trap 'exit 0' TERM; sleep 3600 & wait".into(),
        ],
        log_path: "app/0.log".into(),
        // As kubelet sends it: each container has its own pid namespace.
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
