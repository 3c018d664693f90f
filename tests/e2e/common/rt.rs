//! Shared set-up of the runtime end-to-end tests (shim + CRI client).

use std::path::PathBuf;
use std::time::Duration;

use super::cri::{self, Client};
use super::{Shim, test_images};

/// A started shim with the busybox image, and a client.
pub async fn ready_shim() -> (Shim, Client) {
    let shim = Shim::start();
    shim.import(&test_images().busybox_layout);
    let client = cri::client(&shim.socket()).await;
    (shim, client)
}

/// Runs a pod-network pod with its own log dir and test cgroup parent.
pub async fn new_pod(
    shim: &Shim,
    c: &mut Client,
    name: &str,
) -> (cri_proto::v1::PodSandboxConfig, String) {
    let pod = cri::pod(name, &logs(shim, name), false, &shim.cgroup_parent(name));
    let pod_id = cri::run_pod(c, &pod).await;
    (pod, pod_id)
}

pub fn logs(shim: &Shim, pod: &str) -> PathBuf {
    shim.dir.path().join("pods").join(pod)
}

/// Waits (20 s at most) until the file at `path` contains `needle`;
/// returns its text then.
pub async fn wait_log(path: &std::path::Path, needle: &str) -> String {
    super::eventually_async(
        format_args!("{} to contain {needle:?}", path.display()),
        Duration::from_secs(20),
        async || {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if text.contains(needle) {
                Ok(text)
            } else {
                Err(text)
            }
        },
        String::new,
    )
    .await
}

pub fn cgroup_file(controller: &str, cgroup: &str, file: &str) -> String {
    let p = PathBuf::from("/sys/fs/cgroup")
        .join(controller)
        .join(cgroup.trim_start_matches('/'))
        .join(file);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_string()
}

/// `sh -c cmd` in container `id` through ExecSync (10 s timeout).
pub async fn sh(c: &mut Client, id: &str, cmd: &str) -> cri_proto::v1::ExecSyncResponse {
    c.exec_sync(cri_proto::v1::ExecSyncRequest {
        container_id: id.into(),
        cmd: vec!["sh".into(), "-c".into(), cmd.into()],
        timeout: 10,
    })
    .await
    .expect("ExecSync")
    .into_inner()
}

/// A character device node at `path` with the host's /dev/kmsg numbers
/// (c 1:11): outside the default device rules, and writable with no
/// capability, so a test sees at once whether a container may open it.
pub fn mknod_kmsg(path: &std::path::Path) {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    mknod(
        path,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o600),
        makedev(1, 11),
    )
    .expect("mknod");
}
