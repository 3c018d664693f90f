//! End-to-end: container resources on the real `picolet shim`: limits in the
//! cgroup and live updates, OOM kills reported, CRI stats against known
//! allocations. Root.

use crate::common;

use std::time::Duration;

use common::cri;
use common::rt::{cgroup_file, logs, new_pod, ready_shim, wait_log};
use cri_proto::v1::{ContainerState, LinuxContainerResources, UpdateContainerResourcesRequest};

#[tokio::test(flavor = "multi_thread")]
async fn resource_limits_land_in_the_container_cgroup_and_update_live() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let parent = shim.cgroup_parent("limits");
    let pod = cri::pod("limits", &logs(&shim, "limits"), false, &parent);
    let pod_id = cri::run_pod(&mut c, &pod).await;
    let mut cfg = cri::container("app", "busybox", &["sleep", "60"]);
    cfg.linux.as_mut().expect("linux").resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        cpu_shares: 512,
        cpu_quota: 50_000,
        cpu_period: 100_000,
        ..Default::default()
    });
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    let cg = format!("{parent}/{id}");
    assert_eq!(
        cgroup_file("memory", &cg, "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    assert_eq!(cgroup_file("cpu", &cg, "cpu.shares"), "512");
    assert_eq!(cgroup_file("cpu", &cg, "cpu.cfs_quota_us"), "50000");
    assert_eq!(cgroup_file("cpu", &cg, "cpu.cfs_period_us"), "100000");
    c.update_container_resources(UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 96 << 20,
            cpu_shares: 256,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .expect("UpdateContainerResources");
    assert_eq!(
        cgroup_file("memory", &cg, "memory.limit_in_bytes"),
        (96u64 << 20).to_string()
    );
    assert_eq!(cgroup_file("cpu", &cg, "cpu.shares"), "256");
    // The init process really is in that cgroup.
    let procs = cgroup_file("memory", &cg, "cgroup.procs");
    assert!(!procs.is_empty());
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_over_its_memory_limit_is_reported_oomkilled() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "oom").await;
    // busybox tail buffers an endless line from /dev/zero until the kernel kills it.
    let mut cfg = cri::container("hog", "busybox", &["tail", "/dev/zero"]);
    cfg.linux.as_mut().expect("linux").resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 16 << 20,
        memory_swap_limit_in_bytes: 16 << 20,
        ..Default::default()
    });
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    let st = cri::wait_state(
        &mut c,
        &id,
        ContainerState::ContainerExited,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        (st.exit_code, st.reason.as_str()),
        (137, "OOMKilled"),
        "{st:?}"
    );
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_reflect_a_known_allocation_and_writable_layer() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "stats").await;
    // 32 MiB in the pod's /dev/shm (charged to the container's memory
    // cgroup) and 8 MiB in the writable layer.
    let cmd = "dd if=/dev/zero of=/dev/shm/fill bs=1M count=32 && dd if=/dev/zero of=/data.bin bs=1M count=8 && echo filled && sleep 60";
    let id = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("app", "busybox", &["sh", "-c", cmd]),
    )
    .await;
    cri::start(&mut c, &id).await;
    wait_log(&logs(&shim, "stats").join("app/0.log"), "filled").await;
    let s1 = c
        .container_stats(cri_proto::v1::ContainerStatsRequest {
            container_id: id.clone(),
        })
        .await
        .expect("ContainerStats")
        .into_inner()
        .stats
        .expect("stats");
    let ws = s1
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .expect("working set")
        .value;
    assert!((32 << 20..64 << 20).contains(&ws), "working set {ws}");
    let wl = s1
        .writable_layer
        .as_ref()
        .and_then(|w| w.used_bytes)
        .expect("writable")
        .value;
    assert!(wl >= 8 << 20, "writable layer {wl}");
    assert!(
        s1.cpu
            .as_ref()
            .and_then(|c| c.usage_core_nano_seconds)
            .expect("cpu")
            .value
            > 0
    );
    let list = c
        .list_container_stats(cri_proto::v1::ListContainerStatsRequest { filter: None })
        .await
        .expect("ListContainerStats")
        .into_inner()
        .stats;
    assert_eq!(list.len(), 1);
    assert!(
        list[0]
            .cpu
            .as_ref()
            .and_then(|c| c.usage_nano_cores)
            .is_some(),
        "second sample gives a rate"
    );
    // The pod: its cgroup (the 32 MiB are below it), processes, network,
    // and the container's stats inside.
    let ps = c
        .pod_sandbox_stats(cri_proto::v1::PodSandboxStatsRequest {
            pod_sandbox_id: pod_id.clone(),
        })
        .await
        .expect("PodSandboxStats")
        .into_inner()
        .stats
        .expect("stats");
    assert_eq!(
        ps.attributes.as_ref().map(|a| a.id.as_str()),
        Some(pod_id.as_str())
    );
    let linux = ps.linux.expect("linux");
    let pod_ws = linux
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .expect("pod working set")
        .value;
    assert!(pod_ws >= 32 << 20, "pod working set {pod_ws}");
    assert!(
        linux
            .process
            .as_ref()
            .and_then(|p| p.process_count)
            .expect("process count")
            .value
            >= 1
    );
    // A loopback-only pod (no CNI config here) has no interface to report:
    // no network usage rather than one without a default interface (which
    // the kubelet dereferences). the cni tests check a pod with one.
    assert!(linux.network.is_none(), "{:?}", linux.network);
    assert_eq!(linux.containers.len(), 1);
    assert_eq!(
        linux.containers[0]
            .attributes
            .as_ref()
            .map(|a| a.id.as_str()),
        Some(id.as_str())
    );
    let all = c
        .list_pod_sandbox_stats(cri_proto::v1::ListPodSandboxStatsRequest { filter: None })
        .await
        .expect("ListPodSandboxStats")
        .into_inner()
        .stats;
    assert_eq!(all.len(), 1);
    let err = c
        .pod_sandbox_stats(cri_proto::v1::PodSandboxStatsRequest {
            pod_sandbox_id: "nope".into(),
        })
        .await
        .expect_err("unknown sandbox");
    assert_eq!(err.code(), tonic::Code::NotFound);
    // CRI metrics in cAdvisor's names (kubelet's PodAndContainerStatsFromCRI).
    let descs = c
        .list_metric_descriptors(cri_proto::v1::ListMetricDescriptorsRequest {})
        .await
        .expect("ListMetricDescriptors")
        .into_inner()
        .descriptors;
    let ws_desc = descs
        .iter()
        .find(|d| d.name == "container_memory_working_set_bytes")
        .expect("working set descriptor");
    let pm = c
        .list_pod_sandbox_metrics(cri_proto::v1::ListPodSandboxMetricsRequest {})
        .await
        .expect("ListPodSandboxMetrics")
        .into_inner()
        .pod_metrics;
    assert_eq!(pm.len(), 1);
    assert_eq!(pm[0].pod_sandbox_id, pod_id);
    let cm = &pm[0].container_metrics;
    assert_eq!(cm.len(), 1);
    assert_eq!(cm[0].container_id, id);
    let ws_metric = cm[0]
        .metrics
        .iter()
        .find(|m| m.name == "container_memory_working_set_bytes")
        .expect("working set metric");
    assert_eq!(ws_metric.label_values.len(), ws_desc.label_keys.len());
    assert_eq!(ws_metric.label_values[0], "app", "container label");
    assert!(ws_metric.value.as_ref().map(|v| v.value) >= Some(32 << 20));
    assert!(
        pm[0]
            .metrics
            .iter()
            .any(|m| m.name == "container_memory_working_set_bytes"),
        "pod cgroup metrics"
    );
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

/// The kubelet sends a hugepage limit for every page size the kernel offers,
/// whether or not the hugetlb controller is there (it is not mounted on this
/// CI machine): the container must run, with the limits where they can be
/// applied, as under containerd. CreateContainer failed with libcontainer's
/// "cgroup hugetlb is required".
#[tokio::test(flavor = "multi_thread")]
async fn hugepage_limits_do_not_stop_a_container_on_any_host() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "hugepages").await;
    let mut cfg = cri::container("app", "busybox", &["sh", "-c", "echo up; sleep 60"]);
    cfg.linux.as_mut().expect("linux").resources = Some(LinuxContainerResources {
        hugepage_limits: ["2MB", "1GB"]
            .into_iter()
            .map(|size| cri_proto::v1::HugepageLimit {
                page_size: size.into(),
                limit: 0,
            })
            .collect(),
        ..Default::default()
    });
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    wait_log(&logs(&shim, "hugepages").join("app/0.log"), "stdout F up").await;
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let hugetlb_dir = if v2 { "" } else { "hugetlb" };
    let limit_file = std::path::Path::new("/sys/fs/cgroup")
        .join(hugetlb_dir)
        .join(shim.cgroup_parent("hugepages").trim_start_matches('/'))
        .join(&id)
        .join(if v2 {
            "hugetlb.2MB.max"
        } else {
            "hugetlb.2MB.limit_in_bytes"
        });
    if limit_file.exists() {
        assert_eq!(
            std::fs::read_to_string(&limit_file).expect("limit").trim(),
            "0",
            "the limit applies where the controller is"
        );
    } else {
        eprintln!("no hugetlb controller here: the limits were dropped, the container runs");
    }
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

/// `picolet.cgroupFavorDynmods` (default on): the shim sets the cgroup2
/// root's `favordynmods`, with the root's other options kept, so moving a
/// process into a container's cgroups stops waiting for an RCU grace
/// period (BENCHMARKS.md: ExecSync), and leaves no scratch mount behind.
#[tokio::test(flavor = "multi_thread")]
async fn the_shim_sets_cgroup2_favordynmods_and_leaves_no_scratch_mount() {
    require_root!();
    let options = || {
        let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        cgroup::favor::cgroup2_options(&text).map(str::to_string)
    };
    let before = options();
    // A cgroup2 mount without the flag clears it: the shim below must set it
    // (unless another test's shim starting at the same time does first).
    let keep: Vec<&str> = before
        .as_deref()
        .unwrap_or("rw")
        .split(',')
        .filter(|o| *o != "favordynmods")
        .collect();
    let scratch = tempfile::tempdir().expect("tempdir");
    let ok = std::process::Command::new("mount")
        .args(["-t", "cgroup2", "-o", &keep.join(","), "cgroup2"])
        .arg(scratch.path())
        .status()
        .expect("mount");
    assert!(ok.success(), "mount cgroup2 without favordynmods");
    let ok = std::process::Command::new("umount")
        .arg(scratch.path())
        .status()
        .expect("umount");
    assert!(ok.success());

    let off = common::Shim::start_with_config("picolet:\n  cgroupFavorDynmods: false\n");
    assert!(!off.log().contains("favordynmods"), "{}", off.log());
    drop(off);

    let shim = common::Shim::start();
    let after = options().unwrap_or_default();
    assert!(
        after.split(',').any(|o| o == "favordynmods"),
        "cgroup2 options after the shim started: {after}"
    );
    for o in keep.iter().filter(|o| !matches!(**o, "rw" | "ro")) {
        assert!(after.split(',').any(|a| a == *o), "{o} lost: {after}");
    }
    assert!(
        shim.log().contains("cgroup2 favordynmods"),
        "{}",
        shim.log()
    );
    // What a shim killed between its mount and unmount would leave goes at
    // the next start.
    let mut shim = shim;
    shim.stop();
    let run = shim.dir.path().join("run");
    let stale = run.join("cgroup2-favor.1");
    std::fs::create_dir_all(&stale).expect("stale dir");
    let ok = std::process::Command::new("mount")
        .args(["-t", "cgroup2", "-o", &after, "cgroup2"])
        .arg(&stale)
        .status()
        .expect("mount");
    assert!(ok.success(), "mount a stale scratch");
    shim.spawn();
    let left: Vec<_> = std::fs::read_dir(&run)
        .expect("run dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("cgroup2-favor"))
        .collect();
    assert!(
        left.is_empty(),
        "scratch left in {}: {left:?}",
        run.display()
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mounts.contains(&run.display().to_string()),
        "a mount left under {}",
        run.display()
    );
}
