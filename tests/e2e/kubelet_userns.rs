//! End-to-end: what the real kubelet v1.36.3 sent the shim for a static
//! pod with `hostUsers: false` — the pod's user namespace range (host IDs
//! 3239378944 + 65536, kubelet's pick) on the sandbox, the container and
//! each of its mounts. Recorded (cri-proto/testdata/kubelet-1.36.3-userns.json,
//! the CRI configs as the shim decoded them) and replayed here with the
//! host paths, cgroup parent and image moved into the test's own: the
//! container's root is the range's first ID outside, the image and the
//! volume are root's inside, and what it writes in the volume is the
//! host's root's. Root.

use cri_proto::v1::{ContainerConfig, NamespaceMode, PodSandboxConfig};

use crate::common;
use common::cri;
use common::rt::logs;
use common::{Shim, test_images};

const RECORDED: &str = include_str!("../../cri-proto/testdata/kubelet-1.36.3-userns.json");
/// Where the recording kubelet lived.
const KUBELET_ROOT: &str = "/tmp/k136u/kubelet";

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_host_users_false_pod_runs_in_its_range() {
    require_root!();
    let dir = tempfile::tempdir().expect("tempdir");
    let shim = Shim::start();
    shim.import(&test_images().busybox_layout);
    let mut c = cri::client(&shim.socket()).await;

    let recorded: serde_json::Value = serde_json::from_str(RECORDED).expect("fixture");
    let mut pod: PodSandboxConfig =
        serde_json::from_value(recorded["sandbox"].clone()).expect("sandbox config");
    pod.log_directory = logs(&shim, "k136u").display().to_string();
    let linux = pod.linux.as_mut().expect("linux");
    let userns = linux
        .security_context
        .as_ref()
        .and_then(|s| s.namespace_options.as_ref())
        .and_then(|n| n.userns_options.clone())
        .expect("kubelet's user namespace");
    assert_eq!(userns.mode, NamespaceMode::Pod as i32);
    assert_eq!(userns.uids, userns.gids);
    let (host, length) = (userns.uids[0].host_id, userns.uids[0].length);
    assert_eq!((host, length), (3_239_378_944, 65536));
    linux.cgroup_parent = shim.cgroup_parent("k136u");
    let pod_id = cri::run_pod(&mut c, &pod).await;

    let mut config: ContainerConfig =
        serde_json::from_value(recorded["container"].clone()).expect("container config");
    config.image.as_mut().expect("image").image = "busybox".into();
    config.command = vec!["sleep".into(), "60".into()];
    config.args.clear();
    let pod_dir = dir.path().join("kubelet");
    for m in &mut config.mounts {
        // kubelet 1.36 sends the pod's range on every mount.
        assert_eq!(m.uid_mappings, userns.uids, "{}", m.container_path);
        let local = m
            .host_path
            .strip_prefix(KUBELET_ROOT)
            .unwrap_or_else(|| panic!("a mount outside the kubelet's root: {}", m.host_path));
        let path = pod_dir.join(local.trim_start_matches('/'));
        if m.container_path == "/scratch" {
            std::fs::create_dir_all(&path).expect("emptyDir");
        } else {
            std::fs::create_dir_all(path.parent().expect("parent")).expect("pod dir");
            std::fs::write(&path, "").expect("file mount");
        }
        m.host_path = path.display().to_string();
    }
    let scratch = config
        .mounts
        .iter()
        .find(|m| m.container_path == "/scratch")
        .map(|m| std::path::PathBuf::from(&m.host_path))
        .expect("the emptyDir");
    let id = cri::create(&mut c, &pod_id, &pod, config).await;
    cri::start(&mut c, &id).await;
    let out = cri::exec_ok(
        &mut c,
        &id,
        "cat /proc/self/uid_map; id -u; touch /scratch/f; stat -c %u /scratch/f /bin/busybox",
    )
    .await;
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(
        words,
        ["0", &host.to_string(), "65536", "0", "0", "0"],
        "{out}"
    );
    use std::os::unix::fs::MetadataExt;
    let f = std::fs::metadata(scratch.join("f")).expect("written through the volume");
    assert_eq!((f.uid(), f.gid()), (0, 0));
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}
