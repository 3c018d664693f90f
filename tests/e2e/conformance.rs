//! End-to-end: what critest v1.29.0 (kubernetes-sigs/cri-tools, the CRI
//! conformance suite) found wrong in the real `picolet shim`, one test per
//! finding, each failing on the code critest failed. Root.

use crate::common;

use std::time::Duration;

use common::cri;
use common::rt::{logs, new_pod, ready_shim, wait_log};
use cri_proto::v1::ReopenContainerLogRequest;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The `picolet monitor` of a container, found by its command line.
fn monitor_pid(container_id: &str) -> Pid {
    let want = format!("monitor\0create\0--id\0{container_id}\0");
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&want) {
            return Pid::from_raw(pid);
        }
    }
    panic!("no monitor for container {container_id}");
}

/// critest "runtime should support reopening container log": the new file
/// must exist when ReopenContainerLog returns. It returned as soon as the
/// monitor was signalled; here the monitor is held stopped to show the call
/// waits for it.
#[tokio::test(flavor = "multi_thread")]
async fn reopen_container_log_returns_once_the_new_file_is_open() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "reopen").await;
    let cmd = "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.1; done";
    let id = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("talker", "busybox", &["sh", "-c", cmd]),
    )
    .await;
    cri::start(&mut c, &id).await;
    let log = logs(&shim, "reopen").join("talker/0.log");
    wait_log(&log, "stdout F line 2").await;

    // Plain rotation, as the agent and kubelet do it.
    let rotated = log.with_extension("log.1");
    std::fs::rename(&log, &rotated).expect("rename");
    let reopen = ReopenContainerLogRequest {
        container_id: id.clone(),
    };
    c.reopen_container_log(reopen.clone())
        .await
        .expect("reopen");
    assert!(
        log.exists(),
        "the new log file exists when the call returns"
    );
    wait_log(&log, "stdout F line").await;
    let old = std::fs::read_to_string(&rotated).expect("rotated");
    common::consistently(
        "the rotated file unchanged",
        Duration::from_millis(300),
        || std::fs::read_to_string(&rotated).is_ok_and(|now| now == old),
        String::new,
    );
    assert_eq!(
        std::fs::read_to_string(&rotated).expect("rotated"),
        old,
        "the rotated file no longer grows"
    );

    // A monitor that cannot act yet: the call waits for it.
    let monitor = monitor_pid(&id);
    kill(monitor, Signal::SIGSTOP).expect("stop the monitor");
    std::fs::rename(&log, &rotated).expect("rename");
    let mut c2 = c.clone();
    let call = tokio::spawn(async move { c2.reopen_container_log(reopen).await });
    // The call runs on another worker meanwhile (multi-thread runtime).
    common::consistently(
        "ReopenContainerLog waiting for the stopped monitor",
        Duration::from_millis(500),
        || !call.is_finished(),
        || {
            let _ = kill(monitor, Signal::SIGCONT);
            String::new()
        },
    );
    let waited = !call.is_finished();
    kill(monitor, Signal::SIGCONT).expect("continue the monitor");
    assert!(
        waited,
        "ReopenContainerLog returned before the monitor reopened"
    );
    call.await.expect("join").expect("reopen");
    assert!(
        log.exists(),
        "the new log file exists when the call returns"
    );
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

/// Detaches (lazily, with everything below it) a mount the test made.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Binds `dir` onto itself with the given propagation, as critest does.
fn own_mount(dir: &std::path::Path, propagation: nix::mount::MsFlags) -> Unmount {
    use nix::mount::{MsFlags, mount};
    mount(
        Some(dir),
        dir,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .expect("bind the source onto itself");
    let guard = Unmount(dir.to_path_buf());
    mount(
        None::<&str>,
        dir,
        None::<&str>,
        propagation | MsFlags::MS_REC,
        None::<&str>,
    )
    .expect("set its propagation");
    guard
}

async fn exec(c: &mut common::cri::Client, id: &str, cmd: &str) -> String {
    let out = common::rt::sh(c, id, cmd).await;
    assert_eq!(
        out.exit_code,
        0,
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// critest "mount with 'rshared' should support propagation from host to
/// container and vice versa" and "mount with 'rslave' should support
/// propagation from host to container": the container's mount namespace was
/// always private, so nothing propagated either way.
#[tokio::test(flavor = "multi_thread")]
async fn mount_propagation_follows_the_mounts_mode() {
    require_root!();
    use cri_proto::v1::MountPropagation::{
        PropagationBidirectional as Both, PropagationHostToContainer as HostOnly,
        PropagationPrivate as Private,
    };
    use nix::mount::{MsFlags, mount};
    let (shim, mut c) = ready_shim().await;
    let mut pod = cri::pod(
        "propagation",
        &logs(&shim, "propagation"),
        false,
        &shim.cgroup_parent("propagation"),
    );
    if let Some(sc) = pod.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
        sc.privileged = true;
    }
    let pod_id = cri::run_pod(&mut c, &pod).await;
    let base = tempfile::Builder::new()
        .prefix("picolet-propagation-")
        .tempdir()
        .expect("tempdir");
    let mut guards = Vec::new();
    for (name, mode, host_flags, host_to_container, container_to_host) in [
        ("private", Private, MsFlags::MS_PRIVATE, false, false),
        ("slave", HostOnly, MsFlags::MS_SHARED, true, false),
        ("shared", Both, MsFlags::MS_SHARED, true, true),
    ] {
        let mnt = base.path().join(name).join("mnt");
        let src = base.path().join(name).join("src");
        std::fs::create_dir_all(mnt.join("from-host")).expect("mkdir");
        std::fs::create_dir_all(&src).expect("mkdir");
        std::fs::write(src.join("flag"), "x").expect("flag file");
        guards.push(own_mount(&mnt, host_flags));
        let mnt_s = mnt.to_str().expect("utf-8").to_string();
        let mut cfg = cri::container(name, "busybox", &["sleep", "60"]);
        if let Some(sc) = cfg.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
            sc.privileged = true;
        }
        cfg.mounts.push(cri_proto::v1::Mount {
            container_path: mnt_s.clone(),
            host_path: mnt_s.clone(),
            propagation: mode as i32,
            ..Default::default()
        });
        let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
        cri::start(&mut c, &id).await;

        // Host → container.
        mount(
            Some(&src),
            &mnt.join("from-host"),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .expect("mount on the host");
        let seen = exec(&mut c, &id, &format!("ls -A {mnt_s}/from-host")).await;
        assert_eq!(
            seen.trim() == "flag",
            host_to_container,
            "{name}: the container sees {seen:?} of a host mount"
        );
        // Container → host.
        exec(
            &mut c,
            &id,
            &format!("mkdir -p {mnt_s}/from-container && mount --bind /etc {mnt_s}/from-container"),
        )
        .await;
        let on_host = std::fs::read_dir(mnt.join("from-container"))
            .expect("read dir")
            .count();
        assert_eq!(
            on_host > 0,
            container_to_host,
            "{name}: the host sees {on_host} entries of a container mount"
        );
    }

    // A source that cannot propagate is refused, naming the field.
    let mut cfg = cri::container("refused", "busybox", &["true"]);
    let private = base.path().join("private/mnt");
    cfg.mounts.push(cri_proto::v1::Mount {
        container_path: "/data".into(),
        host_path: private.to_str().expect("utf-8").into(),
        propagation: HostOnly as i32,
        ..Default::default()
    });
    let err = c
        .create_container(cri_proto::v1::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: Some(cfg),
            sandbox_config: Some(pod.clone()),
        })
        .await
        .expect_err("private source");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("mounts[0].propagation")
            && err.message().contains("not shared or slave"),
        "{}",
        err.message()
    );
    cri::teardown(&mut c, &pod_id).await;
    drop(guards);
    shim.assert_host_clean();
}
