//! End-to-end: the real kubelet's own CRI requests against the real
//! `picolet shim`. Recorded (cri-proto/testdata/kubelet-1.26.5-*.pb, raw
//! protobuf) from an unmodified kubelet v1.26.5 driving the shim for a pod
//! that a real control plane bound to its node; replayed here with only
//! what belongs to that machine moved into the test's own: host paths, the
//! pod cgroup parent, IDs and the image's ID. The kubelet sends hugepage
//! limits for every page size the kernel has (2MB and 1GB) even where no
//! hugetlb controller exists, masked and read-only paths, no_new_privs, a
//! dropped capability, resources on the sandbox and the container, and its
//! emptyDir, /etc/hosts and termination-log mounts. Root.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::Shim;
use common::cri;
use common::rt::{cgroup_file, logs};
use cri_proto::v1::{
    ContainerState, CreateContainerRequest, ExecSyncRequest, PodSandboxConfig,
    RunPodSandboxRequest, StopContainerRequest,
};
use prost::Message;

const RUN_POD_SANDBOX: &[u8] =
    include_bytes!("../../cri-proto/testdata/kubelet-1.26.5-run-pod-sandbox.pb");
const CREATE_CONTAINER: &[u8] =
    include_bytes!("../../cri-proto/testdata/kubelet-1.26.5-create-container.pb");
const EXEC_SYNC: &[u8] = include_bytes!("../../cri-proto/testdata/kubelet-1.26.5-exec-sync.pb");
const STOP_CONTAINER: &[u8] =
    include_bytes!("../../cri-proto/testdata/kubelet-1.26.5-stop-container.pb");

/// Where the recording kubelet kept its pods (`--root-dir`).
const KUBELET_ROOT: &str = "/tmp/k8s/kubelet-picolet";

/// The recorded sandbox config with its log directory and cgroup parent
/// moved into the test's.
fn sandbox_config(recorded: Option<PodSandboxConfig>, shim: &Shim) -> PodSandboxConfig {
    let mut cfg = recorded.expect("recorded sandbox config");
    assert!(cfg.log_directory.starts_with("/var/log/pods/default_rec_"));
    cfg.log_directory = logs(shim, "rec").display().to_string();
    let linux = cfg.linux.as_mut().expect("linux");
    assert!(linux.cgroup_parent.starts_with("/kubepods/pod"));
    linux.cgroup_parent = shim.cgroup_parent("rec");
    cfg
}

/// The kubelet's web image, as the recording used (busybox httpd).
fn import_web_image(shim: &Shim) -> String {
    let busybox = std::env::var("BUSYBOX").unwrap_or_else(|_| "/bin/busybox".into());
    let base = xtask::busybox_layer(Path::new(&busybox)).expect("busybox layer");
    let archive = shim.dir.path().join("web.tar");
    xtask::write_docker_archive(
        &archive,
        &[(xtask::web_image(&base), vec![xtask::WEB_REF.into()])],
    )
    .expect("web image");
    shim.import(&archive);
    let out = shim.ctl(&["images", "-q"]);
    let ids = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = ids.lines().next().expect("an image ID").trim().to_string();
    assert!(id.starts_with("sha256:"), "{ids}");
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_recorded_requests_run_its_pod() {
    require_root!();
    let shim = Shim::start();
    let web_id = import_web_image(&shim);
    let mut c = cri::client(&shim.socket()).await;

    let mut run = RunPodSandboxRequest::decode(RUN_POD_SANDBOX).expect("decode RunPodSandbox");
    let pod = sandbox_config(run.config.take(), &shim);
    let pod_id = cri::run_pod(&mut c, &pod).await;

    let mut create =
        CreateContainerRequest::decode(CREATE_CONTAINER).expect("decode CreateContainer");
    create.pod_sandbox_id = pod_id.clone();
    create.sandbox_config = Some(sandbox_config(create.sandbox_config.take(), &shim));
    let config = create.config.as_mut().expect("container config");
    let resources = config
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .expect("resources");
    assert_eq!(
        resources
            .hugepage_limits
            .iter()
            .map(|h| h.page_size.as_str())
            .collect::<Vec<_>>(),
        ["2MB", "1GB"],
        "the recording carries the kubelet's hugepage limits"
    );
    config.image.as_mut().expect("image").image = web_id;
    // The kubelet's pod dir: the emptyDir, /etc/hosts and termination log.
    let kubelet_root = shim.dir.path().join("kubelet");
    for m in &mut config.mounts {
        let local = m
            .host_path
            .strip_prefix(KUBELET_ROOT)
            .unwrap_or_else(|| panic!("a mount outside the kubelet's root: {}", m.host_path));
        let path = kubelet_root.join(local.trim_start_matches('/'));
        if m.container_path == "/scratch" {
            std::fs::create_dir_all(&path).expect("emptyDir");
        } else {
            std::fs::create_dir_all(path.parent().expect("parent")).expect("pod dir");
            std::fs::write(&path, "127.0.0.1\tlocalhost\n").expect("file mount");
        }
        m.host_path = path.display().to_string();
    }
    let id = c
        .create_container(create)
        .await
        .expect("CreateContainer from the kubelet's request")
        .into_inner()
        .container_id;
    cri::start(&mut c, &id).await;
    cri::wait_state(
        &mut c,
        &id,
        ContainerState::ContainerRunning,
        Duration::from_secs(20),
    )
    .await;

    // The kubelet's exec liveness probe.
    let mut probe = ExecSyncRequest::decode(EXEC_SYNC).expect("decode ExecSync");
    assert_eq!(probe.cmd, ["sh", "-c", "true"]);
    probe.container_id = id.clone();
    let r = c.exec_sync(probe).await.expect("ExecSync").into_inner();
    assert_eq!(r.exit_code, 0);

    // What the request asked for is what the container got.
    let st = cri::exec_ok(&mut c, &id, "echo $GREETING; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; wc -c < /proc/keys; touch /scratch/x && echo rw").await;
    let lines: Vec<&str> = st.lines().collect();
    assert_eq!(lines[0], "hello", "{st}");
    let cap_eff =
        u64::from_str_radix(lines[1].trim_start_matches("CapEff:").trim(), 16).expect("CapEff");
    assert_eq!(cap_eff & (1 << 13), 0, "NET_RAW dropped: {st}");
    assert_eq!(
        lines[2].split_whitespace().last(),
        Some("1"),
        "no_new_privs: {st}"
    );
    assert_eq!(lines[3].trim(), "0", "/proc/keys masked: {st}");
    assert_eq!(lines[4], "rw", "{st}");
    let ro = c
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "echo 1 > /proc/sys/kernel/panic".into(),
            ],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_ne!(ro.exit_code, 0, "/proc/sys is read-only");
    // Its resources, on a cgroup v1 host as this CI's (the VM tests cover v2).
    let cg = format!("{}/{id}", shim.cgroup_parent("rec"));
    assert_eq!(
        cgroup_file("memory", &cg, "memory.limit_in_bytes"),
        (32u64 << 20).to_string(),
        "the kubelet's 32Mi limit"
    );
    assert_eq!(cgroup_file("cpu", &cg, "cpu.cfs_quota_us"), "10000");

    // The kubelet's stop, with the pod's 5 s grace: httpd is PID 1 of its
    // own PID namespace (the kubelet asked for CONTAINER) and has no SIGTERM
    // handler, so the kernel ignores the signal and SIGKILL ends it after
    // the grace, as with containerd.
    let mut stop = StopContainerRequest::decode(STOP_CONTAINER).expect("decode StopContainer");
    assert_eq!(stop.timeout, 5);
    stop.container_id = id.clone();
    let t = std::time::Instant::now();
    c.stop_container(stop).await.expect("StopContainer");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(8),
        "{took:?}"
    );
    let st = cri::status(&mut c, &id).await;
    assert_eq!(
        (st.state, st.exit_code),
        (ContainerState::ContainerExited as i32, 137)
    );
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}
