//! End-to-end: the container lifecycle through CRI RuntimeService on the real
//! `picolet shim`, with the project's busybox image: output and exit codes,
//! ExecSync, graceful stop, recovery after kill -9, bad requests, images in
//! use, the event stream. Root.

use crate::common;

use std::time::{Duration, Instant};

use common::cri;
use common::rt::{logs, new_pod, ready_shim, wait_log};
use cri_proto::v1::{
    ContainerState, CreateContainerRequest, ExecSyncRequest, ListContainersRequest,
    ListPodSandboxRequest, RemoveContainerRequest, RunPodSandboxRequest, StartContainerRequest,
    StopContainerRequest,
};
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
async fn container_output_lands_in_the_cri_log_and_exit_code_is_reported() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "demo").await;
    let cfg = cri::container(
        "app",
        "busybox",
        &["sh", "-c", "echo out-line; echo err-line >&2; exit 3"],
    );
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    // The log file is there once CreateContainer returns (critest opens
    // it as soon as StartContainer does).
    let log = logs(&shim, "demo").join("app/0.log");
    assert!(log.exists(), "{} after CreateContainer", log.display());
    assert_eq!(
        cri::status(&mut c, &id).await.state,
        ContainerState::ContainerCreated as i32
    );
    cri::start(&mut c, &id).await;
    let st = cri::wait_state(
        &mut c,
        &id,
        ContainerState::ContainerExited,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(st.exit_code, 3);
    assert_eq!(st.reason, "Error");
    // Its rootfs is unmounted at exit as containerd.
    let mounted = |id: &str| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains(&format!("{id}/rootfs ")))
    };
    common::eventually(
        "the exited container's rootfs unmounted",
        Duration::from_secs(10),
        || !mounted(&id),
        String::new,
    );
    assert!(st.finished_at >= st.started_at && st.started_at > 0);
    assert!(st.log_path.ends_with("app/0.log"));
    // As containerd: `image` is the image's tag (kubelet shows it in the pod
    // status), `image_ref` its digest or ID.
    let image = st.image.as_ref().map(|i| i.image.as_str()).unwrap_or("");
    assert!(image.contains("busybox:"), "status image {image:?}");
    assert!(st.image_ref.contains("sha256:"), "{}", st.image_ref);
    // ListContainers as containerd's: `image` is the spec the client gave,
    // `image_ref` the image's ID. The kubelet's image GC counts an image as
    // in use when some container's image_ref is its ID; a digest there made
    // it try to remove every image in use.
    let listed = c
        .list_containers(ListContainersRequest { filter: None })
        .await
        .expect("list")
        .into_inner()
        .containers;
    let listed = listed.iter().find(|x| x.id == id).expect("listed");
    assert!(st.image_id.starts_with("sha256:"), "{}", st.image_id);
    assert_eq!(listed.image_ref, st.image_id);
    assert_eq!(
        listed.image.as_ref().map(|i| i.image.as_str()),
        Some("busybox")
    );
    let log = std::fs::read_to_string(&st.log_path).expect("log file");
    let lines: Vec<&str> = log.lines().collect();
    assert!(
        lines.iter().any(|l| l.ends_with(" stdout F out-line")),
        "{log}"
    );
    assert!(
        lines.iter().any(|l| l.ends_with(" stderr F err-line")),
        "{log}"
    );
    assert_eq!(
        lines.len(),
        2,
        "only the container's own output belongs in its log:\n{log}"
    );
    for l in &lines {
        let ts = l.split(' ').next().expect("timestamp");
        assert!(
            ts.len() == 30 && ts.ends_with('Z'),
            "bad timestamp in {l:?}"
        );
    }
    // exit 0 is Completed.
    let ok = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("ok", "busybox", &["true"]),
    )
    .await;
    cri::start(&mut c, &ok).await;
    let st = cri::wait_state(
        &mut c,
        &ok,
        ContainerState::ContainerExited,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!((st.exit_code, st.reason.as_str()), (0, "Completed"));
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_sync_returns_output_and_exit_code_and_enforces_its_timeout() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "exec").await;
    let id = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("app", "busybox", &["sleep", "60"]),
    )
    .await;
    cri::start(&mut c, &id).await;

    let r = c
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "echo hi; hostname; echo oops >&2; exit 5".into(),
            ],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(r.exit_code, 5);
    assert_eq!(String::from_utf8_lossy(&r.stdout), "hi\nexec\n");
    assert_eq!(String::from_utf8_lossy(&r.stderr), "oops\n");
    // A command line longer than the room the spawner's children write
    // their own over (4 KiB): still its own exit code.
    let long = format!("{}exit 6", ": 0123456789abcdef; ".repeat(300));
    let r = c
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sh".into(), "-c".into(), long],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(r.exit_code, 6, "{}", String::from_utf8_lossy(&r.stderr));
    // A command the image lacks: 127 and why, as a shell would say it.
    let r = c
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["no-such-command".into()],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(r.exit_code, 127);
    assert!(
        String::from_utf8_lossy(&r.stderr)
            .contains("\"no-such-command\": executable file not found"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );

    let t0 = Instant::now();
    let err = c
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), "30".into()],
            timeout: 1,
        })
        .await
        .expect_err("timeout");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "timeout took {:?}",
        t0.elapsed()
    );
    // The timed-out process was killed: only the container's own sleep is left.
    let ps = c
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["ps".into()],
            timeout: 10,
        })
        .await
        .expect("ps")
        .into_inner();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(!ps.contains("sleep 30"), "{ps}");
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_is_graceful_then_forceful() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "stop").await;
    let polite = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container(
            "polite",
            "busybox",
            &[
                "sh",
                "-c",
                "trap 'echo got-term; exit 0' TERM; echo ready; while true; do sleep 0.1; done",
            ],
        ),
    )
    .await;
    let stubborn = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container(
            "stubborn",
            "busybox",
            &[
                "sh",
                "-c",
                "trap '' TERM; echo ready; while true; do sleep 0.1; done",
            ],
        ),
    )
    .await;
    cri::start(&mut c, &polite).await;
    cri::start(&mut c, &stubborn).await;
    let polite_log = logs(&shim, "stop").join("polite/0.log");
    wait_log(&polite_log, "ready").await;
    wait_log(&logs(&shim, "stop").join("stubborn/0.log"), "ready").await;

    let t0 = Instant::now();
    c.stop_container(StopContainerRequest {
        container_id: polite.clone(),
        timeout: 30,
    })
    .await
    .expect("stop");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "graceful stop took {:?}",
        t0.elapsed()
    );
    let st = cri::status(&mut c, &polite).await;
    assert_eq!(
        (st.state, st.exit_code),
        (ContainerState::ContainerExited as i32, 0)
    );
    wait_log(&polite_log, "got-term").await;

    let t0 = Instant::now();
    c.stop_container(StopContainerRequest {
        container_id: stubborn.clone(),
        timeout: 1,
    })
    .await
    .expect("stop");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(8),
        "forced stop took {took:?}"
    );
    let st = cri::status(&mut c, &stubborn).await;
    assert_eq!(
        (st.state, st.exit_code),
        (ContainerState::ContainerExited as i32, 137)
    );
    // Idempotent.
    c.stop_container(StopContainerRequest {
        container_id: stubborn.clone(),
        timeout: 1,
    })
    .await
    .expect("stop again");
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn containers_survive_a_shim_kill9_and_state_is_recovered() {
    require_root!();
    let (mut shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "survive").await;
    let long = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("long", "busybox", &["sleep", "299.7"]),
    )
    .await;
    let short = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container(
            "short",
            "busybox",
            &["sh", "-c", "sleep 2; echo bye; exit 7"],
        ),
    )
    .await;
    cri::start(&mut c, &long).await;
    cri::start(&mut c, &short).await;
    let long_pid = cri::status(&mut c, &long).await.started_at;
    // The monitor was forked by the shim's spawner (no exec of the
    // binary) and carries its own command line, which libcontainer's forks
    // keep and a restarted shim looks for when it cleans up a create it
    // did not finish (`creators_of`).
    let monitor = pid_with_cmdline(&format!(" monitor create --id {long} "))
        .expect("the monitor's command line names its container");
    let spawner = parent_of(monitor).expect("the monitor's parent");
    // The short container's shell once it has exec'd, or none if it has
    // exited already (a slow machine).
    let short_sh = common::eventually_async(
        "the short container's shell, or its exit",
        Duration::from_secs(20),
        async || {
            if let Some(pid) = pid_with_cmdline(" -c sleep 2; echo bye; exit 7") {
                return Some(Some(pid));
            }
            let st = cri::status(&mut c, &short).await;
            (st.state == ContainerState::ContainerExited as i32).then_some(None)
        },
        String::new,
    )
    .await;
    assert!(
        cmdline(spawner).contains(" monitor spawner "),
        "the monitor's parent is {:?}",
        cmdline(spawner)
    );
    let shim_pid = shim.child.as_ref().map(|c| c.id().cast_signed());
    assert_eq!(
        parent_of(spawner),
        shim_pid,
        "the spawner is the shim's child"
    );

    shim.kill9();
    // The spawner ends with the shim; the monitor it forked lives on.
    common::eventually(
        "the spawner ends with the shim",
        Duration::from_secs(5),
        || !is_alive(spawner),
        || cmdline(spawner),
    );
    assert!(is_alive(monitor), "the monitor died with the shim");
    // The short container exits while the shim is down: its monitor has
    // reaped it.
    if let Some(pid) = short_sh {
        common::eventually(
            "the short container to exit and be reaped",
            Duration::from_secs(10),
            || !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            || cmdline(pid),
        );
    }
    shim.spawn();
    let mut c = cri::client(&shim.socket()).await;

    let pods = c
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .expect("list pods")
        .into_inner()
        .items;
    assert_eq!(
        pods.iter().map(|p| p.id.clone()).collect::<Vec<_>>(),
        vec![pod_id.clone()]
    );
    let list = c
        .list_containers(ListContainersRequest { filter: None })
        .await
        .expect("list")
        .into_inner()
        .containers;
    let mut ids: Vec<String> = list.iter().map(|x| x.id.clone()).collect();
    ids.sort();
    let mut want = vec![long.clone(), short.clone()];
    want.sort();
    assert_eq!(ids, want);
    let st = cri::status(&mut c, &long).await;
    assert_eq!(st.state, ContainerState::ContainerRunning as i32);
    assert_eq!(st.started_at, long_pid, "a running container was restarted");
    let st = cri::status(&mut c, &short).await;
    assert_eq!(
        (st.state, st.exit_code),
        (ContainerState::ContainerExited as i32, 7)
    );
    assert!(
        std::fs::read_to_string(&st.log_path)
            .expect("log")
            .contains("stdout F bye")
    );
    // The recovered container can still be exec'd into and stopped.
    let r = c
        .exec_sync(ExecSyncRequest {
            container_id: long.clone(),
            cmd: vec!["true".into()],
            timeout: 10,
        })
        .await
        .expect("exec after restart")
        .into_inner();
    assert_eq!(r.exit_code, 0);
    // Its exit is noticed although its monitor is no longer the shim's
    // child (a pidfd wakes the exit watch): STOPPED event, exit 137.
    let mut events = c
        .get_container_events(cri_proto::v1::GetEventsRequest {})
        .await
        .expect("events")
        .into_inner();
    let init = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x00299.7\x00")
        })
        .expect("the long container's process");
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(init),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill");
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), events.message())
            .await
            .expect("STOPPED in time")
            .expect("stream")
            .expect("open");
        if e.container_id == long
            && e.container_event_type
                == cri_proto::v1::ContainerEventType::ContainerStoppedEvent as i32
        {
            break;
        }
    }
    eprintln!(
        "exit of a recovered container seen after {:?}",
        t0.elapsed()
    );
    let st = cri::status(&mut c, &long).await;
    assert_eq!(
        (st.state, st.exit_code),
        (ContainerState::ContainerExited as i32, 137)
    );
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

/// A reboot takes the run dir (tmpfs) with the pinned namespaces while the
/// records stay on disk: the restarted shim must report the sandbox not
/// ready (it said Ready, and kubelet kept creating containers into
/// namespaces that no longer existed: tests/vm/run.sh's power cut).
#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_whose_namespaces_went_with_a_reboot_is_not_ready() {
    require_root!();
    let (mut shim, mut c) = ready_shim().await;
    let (_pod, pod_id) = new_pod(&shim, &mut c, "reboot").await;
    shim.kill9();
    // What a reboot does to the run dir: every pin gone, the folder gone.
    let run = shim.dir.path().join("run/sandboxes").join(&pod_id);
    for e in std::fs::read_dir(&run).expect("sandbox run dir").flatten() {
        let _ = nix::mount::umount2(&e.path(), nix::mount::MntFlags::MNT_DETACH);
    }
    std::fs::remove_dir_all(&run).expect("remove run dir");
    shim.spawn();
    let mut c = cri::client(&shim.socket()).await;
    let st = c
        .pod_sandbox_status(cri_proto::v1::PodSandboxStatusRequest {
            pod_sandbox_id: pod_id.clone(),
            verbose: false,
        })
        .await
        .expect("status")
        .into_inner()
        .status
        .expect("status");
    assert_eq!(
        st.state,
        cri_proto::v1::PodSandboxState::SandboxNotready as i32,
        "a sandbox without its namespaces is reported ready"
    );
    // kubelet's next steps still work: stop (CNI DEL without a netns), remove.
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_sandbox_requests_get_the_right_codes() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let pod = cri::pod(
        "codes",
        &logs(&shim, "codes"),
        false,
        &shim.cgroup_parent("codes"),
    );

    let err = c
        .run_pod_sandbox(RunPodSandboxRequest {
            config: None,
            runtime_handler: String::new(),
        })
        .await
        .expect_err("no config");
    assert_eq!(err.code(), Code::InvalidArgument);
    let mut no_meta = pod.clone();
    no_meta.metadata = None;
    let err = c
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(no_meta),
            runtime_handler: String::new(),
        })
        .await
        .expect_err("no metadata");
    assert_eq!(err.code(), Code::InvalidArgument);

    let pod_id = cri::run_pod(&mut c, &pod).await;
    let err = c
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(pod.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect_err("same pod twice");
    assert_eq!(err.code(), Code::AlreadyExists);

    cri::teardown(&mut c, &pod_id).await;
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_container_requests_get_the_right_codes() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let pod = cri::pod(
        "codes",
        &logs(&shim, "codes"),
        false,
        &shim.cgroup_parent("codes"),
    );
    let pod_id = cri::run_pod(&mut c, &pod).await;

    let create = |sandbox: &str, cfg| CreateContainerRequest {
        pod_sandbox_id: sandbox.into(),
        config: Some(cfg),
        sandbox_config: Some(pod.clone()),
    };
    let err = c
        .create_container(create("nope", cri::container("a", "busybox", &["true"])))
        .await
        .expect_err("unknown sandbox");
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .create_container(create(
            &pod_id,
            cri::container("a", "localhost/absent:v1", &["true"]),
        ))
        .await
        .expect_err("unknown image");
    assert_eq!(err.code(), Code::NotFound);
    let mut bad_mount = cri::container("a", "busybox", &["true"]);
    bad_mount.mounts.push(cri_proto::v1::Mount {
        container_path: "relative".into(),
        host_path: "/tmp".into(),
        ..Default::default()
    });
    let err = c
        .create_container(create(&pod_id, bad_mount))
        .await
        .expect_err("relative mount");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("mounts[0].container_path"),
        "{}",
        err.message()
    );
    let mut bad_cap = cri::container("a", "busybox", &["true"]);
    bad_cap
        .linux
        .as_mut()
        .expect("linux")
        .security_context
        .as_mut()
        .expect("sc")
        .capabilities = Some(cri_proto::v1::Capability {
        add_capabilities: vec!["CAP_BOGUS".into()],
        ..Default::default()
    });
    let err = c
        .create_container(create(&pod_id, bad_cap))
        .await
        .expect_err("bad capability");
    assert_eq!(err.code(), Code::InvalidArgument);

    // A container named "a" exists: another is a name clash.
    cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("a", "busybox", &["sleep", "30"]),
    )
    .await;
    let err = c
        .create_container(create(&pod_id, cri::container("a", "busybox", &["true"])))
        .await
        .expect_err("name clash");
    assert_eq!(err.code(), Code::AlreadyExists);
    // Creates run side by side (no lock across one): of eight creations of
    // one name at once, exactly one wins.
    let mut racing = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let mut c = c.clone();
        let req = create(&pod_id, cri::container("b", "busybox", &["true"]));
        racing.spawn(async move { c.create_container(req).await });
    }
    let mut won = 0;
    while let Some(r) = racing.join_next().await {
        match r.expect("join") {
            Ok(_) => won += 1,
            Err(e) => assert_eq!(e.code(), Code::AlreadyExists, "{e}"),
        }
    }
    assert_eq!(won, 1, "creations of one name that succeeded");
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn start_stop_and_remove_get_the_right_codes() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let pod = cri::pod(
        "codes",
        &logs(&shim, "codes"),
        false,
        &shim.cgroup_parent("codes"),
    );
    let pod_id = cri::run_pod(&mut c, &pod).await;
    let id = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("a", "busybox", &["sleep", "30"]),
    )
    .await;
    cri::start(&mut c, &id).await;
    let err = c
        .start_container(StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect_err("start twice");
    assert_eq!(err.code(), Code::FailedPrecondition);
    let err = c
        .start_container(StartContainerRequest {
            container_id: "nope".into(),
        })
        .await
        .expect_err("unknown");
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .start_container(StartContainerRequest {
            container_id: String::new(),
        })
        .await
        .expect_err("empty id");
    assert_eq!(err.code(), Code::InvalidArgument);
    // Stopping and removing what does not exist succeed (CRI idempotence).
    c.stop_container(StopContainerRequest {
        container_id: "nope".into(),
        timeout: 0,
    })
    .await
    .expect("stop unknown");
    c.remove_container(RemoveContainerRequest {
        container_id: "nope".into(),
    })
    .await
    .expect("remove unknown");
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_in_use_cannot_be_removed() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "inuse").await;
    cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("app", "busybox", &["sleep", "60"]),
    )
    .await;
    let mut images = shim.client().await;
    let rm = || cri_proto::v1::RemoveImageRequest {
        image: Some(common::spec("busybox")),
    };
    let err = images.remove_image(rm()).await.expect_err("in use");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    cri::teardown(&mut c, &pod_id).await;
    images
        .remove_image(rm())
        .await
        .expect("free after teardown");
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn container_events_stream_the_lifecycle() {
    require_root!();
    use cri_proto::v1::{ContainerEventType, GetEventsRequest};
    let (shim, mut c) = ready_shim().await;
    let mut events = cri::client(&shim.socket())
        .await
        .get_container_events(GetEventsRequest {})
        .await
        .expect("events")
        .into_inner();
    let (pod, pod_id) = new_pod(&shim, &mut c, "events").await;
    let id = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("app", "busybox", &["true"]),
    )
    .await;
    cri::start(&mut c, &id).await;
    cri::wait_state(
        &mut c,
        &id,
        ContainerState::ContainerExited,
        Duration::from_secs(20),
    )
    .await;
    c.remove_container(RemoveContainerRequest {
        container_id: id.clone(),
    })
    .await
    .expect("remove");
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let e = tokio::time::timeout(Duration::from_secs(10), events.message())
            .await
            .expect("event in time")
            .expect("stream")
            .expect("open");
        if e.container_id == id {
            seen.push(e.container_event_type);
        }
    }
    let want = [
        ContainerEventType::ContainerCreatedEvent,
        ContainerEventType::ContainerStartedEvent,
        ContainerEventType::ContainerStoppedEvent,
        ContainerEventType::ContainerDeletedEvent,
    ]
    .map(|t| t as i32);
    assert_eq!(seen, want);
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

/// A process's command line, NULs as spaces.
fn cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

/// The first process whose command line holds `needle`.
fn pid_with_cmdline(needle: &str) -> Option<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|p| cmdline(*p).contains(needle))
}

/// Field 4 of /proc/<pid>/stat.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// Running: there, and not a zombie. Only a pid that is gone reads as
/// not alive; any other failure to read its stat fails the test.
fn is_alive(pid: i32) -> bool {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(e) => panic!("read /proc/{pid}/stat: {e}"),
    };
    let state = stat
        .rfind(')')
        .map(|i| &stat[i + 2..])
        .expect("stat fields");
    !state.starts_with('Z')
}

/// The command lines of this shim's `picolet monitor create` processes.
fn creating_monitors(shim: &common::Shim) -> Vec<String> {
    let mark = shim.dir.path().to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|c| c.contains("monitor create") && c.contains(&mark))
        .collect()
}

/// A client that goes away in the middle of a CreateContainer (an agent
/// killed; bench/faults.sh found it) must not leave a container being made
/// that no record names: the call runs to its end and CRI lists what it made.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_container_whose_client_went_away_is_finished_and_listed() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "cut").await;
    let mut gone = cri::client(&shim.socket()).await;
    let req = CreateContainerRequest {
        pod_sandbox_id: pod_id.clone(),
        config: Some(cri::container("app", "busybox", &["sleep", "60"])),
        sandbox_config: Some(pod.clone()),
    };
    let call = tokio::spawn(async move { gone.create_container(req).await });
    // Cut the call (its connection with it) once its monitor is making the
    // container, before the monitor's handshake.
    // Polled every millisecond: the window ends at the handshake.
    common::eventually_async(
        "a monitor making the container",
        common::wait::Patience {
            timeout: Duration::from_secs(20),
            poll: Duration::from_millis(1),
        },
        async || {
            assert!(
                !call.is_finished(),
                "CreateContainer ended before it was cut"
            );
            !creating_monitors(&shim).is_empty()
        },
        String::new,
    )
    .await;
    call.abort();
    let _ = call.await;
    let listed = common::eventually_async(
        "the container being made to be listed",
        Duration::from_secs(20),
        async || {
            let listed = c
                .list_containers(ListContainersRequest::default())
                .await
                .expect("list")
                .into_inner()
                .containers;
            (!listed.is_empty()).then_some(listed)
        },
        || format!("monitors: {:?}", creating_monitors(&shim)),
    )
    .await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].state, ContainerState::ContainerCreated as i32);
    // What a returning client does with it: start it, as any created container.
    cri::start(&mut c, &listed[0].id).await;
    cri::wait_state(
        &mut c,
        &listed[0].id,
        ContainerState::ContainerRunning,
        Duration::from_secs(20),
    )
    .await;
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}
