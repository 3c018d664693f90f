//! End-to-end: what the real kubelet v1.36.3 sent the shim for a static
//! pod that asked a device plugin for `picolet.test/serial: 1` — the
//! plugin answered a device node (DeviceSpec) and a CDI device name, and
//! kubelet passed them on as CRI `devices` and `CDI_devices`. Recorded
//! (cri-proto/testdata/kubelet-1.36.3-devices.json, the CRI configs as the
//! shim decoded them) and replayed here with the host paths, the cgroup
//! parent and the image moved into the test's own: the container gets
//! both nodes, unprivileged, and the CDI spec's env. Root.

use cri_proto::v1::{ContainerConfig, PodSandboxConfig};

use crate::common;
use common::cri;
use common::rt::logs;
use common::{Shim, test_images};

const RECORDED: &str = include_str!("../../cri-proto/testdata/kubelet-1.36.3-devices.json");
/// Where the recording kubelet and its device nodes lived.
const KUBELET_ROOT: &str = "/tmp/k136/kubelet";
const DEVS: &str = "/tmp/k136/devs";

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_device_plugin_and_cdi_devices_reach_the_container() {
    require_root!();
    let dir = tempfile::tempdir().expect("tempdir");
    let (devs, cdi) = (dir.path().join("devs"), dir.path().join("cdi"));
    for d in [&devs, &cdi] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    common::rt::mknod_kmsg(&devs.join("tty0"));
    common::rt::mknod_kmsg(&devs.join("tty1"));
    // The recording's CDI spec, its node moved here.
    std::fs::write(
        cdi.join("test.yaml"),
        format!(
            "cdiVersion: \"0.6.0\"\nkind: picolet.test/serial\ndevices:\n- name: tty0\n  containerEdits:\n    \
             deviceNodes:\n    - {{path: /dev/cdi-tty0, hostPath: {}}}\n    env: [CDI_TTY=tty0]\n",
            devs.join("tty0").display()
        ),
    )
    .expect("spec");
    let shim = Shim::start_with_config(&format!("picolet:\n  cdiSpecDirs: [{}]\n", cdi.display()));
    shim.import(&test_images().busybox_layout);
    let mut c = cri::client(&shim.socket()).await;

    let recorded: serde_json::Value = serde_json::from_str(RECORDED).expect("fixture");
    let mut pod: PodSandboxConfig =
        serde_json::from_value(recorded["sandbox"].clone()).expect("sandbox config");
    pod.log_directory = logs(&shim, "k136").display().to_string();
    let linux = pod.linux.as_mut().expect("linux");
    assert!(
        linux
            .cgroup_parent
            .starts_with("/k136/kubepods/besteffort/pod")
    );
    linux.cgroup_parent = shim.cgroup_parent("k136");
    let pod_id = cri::run_pod(&mut c, &pod).await;

    let mut config: ContainerConfig =
        serde_json::from_value(recorded["container"].clone()).expect("container config");
    // What kubelet 1.36 made of the plugin's answer.
    assert_eq!(config.devices.len(), 1);
    assert_eq!(config.devices[0].container_path, "/dev/plugin-tty1");
    assert_eq!(config.devices[0].permissions, "rw");
    let cdi_names: Vec<&str> = config.cdi_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(cdi_names, ["picolet.test/serial=tty0"]);
    assert!(
        config
            .envs
            .iter()
            .any(|e| e.key == "PLUGIN_TTY" && e.value == "tty1")
    );
    config.devices[0].host_path = config.devices[0]
        .host_path
        .replace(DEVS, &devs.display().to_string());
    config.image.as_mut().expect("image").image = "busybox".into();
    config.command = vec!["sleep".into(), "60".into()];
    let pod_dir = dir.path().join("kubelet");
    for m in &mut config.mounts {
        let local = m
            .host_path
            .strip_prefix(KUBELET_ROOT)
            .unwrap_or_else(|| panic!("a mount outside the kubelet's root: {}", m.host_path));
        let path = pod_dir.join(local.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("pod dir");
        std::fs::write(&path, "").expect("file mount");
        m.host_path = path.display().to_string();
    }
    let id = cri::create(&mut c, &pod_id, &pod, config).await;
    cri::start(&mut c, &id).await;
    let out = cri::exec_ok(
        &mut c,
        &id,
        "echo picolet-k136-replay > /dev/cdi-tty0 && echo picolet-k136-replay > /dev/plugin-tty1 && echo $CDI_TTY $PLUGIN_TTY",
    )
    .await;
    assert_eq!(out, "tty0 tty1\n");
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}
