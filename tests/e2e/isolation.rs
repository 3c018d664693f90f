//! End-to-end: what keeps pods and containers apart on the real `picolet
//! shim`: per-pod namespaces, PID namespace modes, the RuntimeDefault seccomp
//! profile. Root.

use crate::common;
use common::cri;
use common::rt::{logs, new_pod, ready_shim, sh, wait_log};
use cri_proto::v1::{ExecSyncRequest, ListPodSandboxRequest};
use tonic::Code;

/// Sets the container's seccomp profile.
fn seccomp(
    cfg: &mut cri_proto::v1::ContainerConfig,
    profile: cri_proto::v1::security_profile::ProfileType,
    localhost_ref: &str,
) {
    cfg.linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .expect("security context")
        .seccomp = Some(cri_proto::v1::SecurityProfile {
        profile_type: profile as i32,
        localhost_ref: localhost_ref.into(),
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn two_pods_get_their_own_namespaces() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let mut pods = Vec::new();
    for name in ["alpha", "beta"] {
        let pod = cri::pod(name, &logs(&shim, name), false, &shim.cgroup_parent(name));
        let pod_id = cri::run_pod(&mut c, &pod).await;
        let cmd = "hostname; cat /proc/net/dev | grep -c :; sleep 60";
        let id = cri::create(
            &mut c,
            &pod_id,
            &pod,
            cri::container("app", "busybox", &["sh", "-c", cmd]),
        )
        .await;
        cri::start(&mut c, &id).await;
        pods.push((name, pod_id, id));
    }
    for (name, _, _) in &pods {
        let log = wait_log(&logs(&shim, name).join("app/0.log"), "stdout F 1").await;
        assert!(log.contains(&format!("stdout F {name}")), "hostname: {log}");
    }
    // Both are listed, filterable by label and by sandbox.
    let listed = c
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .expect("list")
        .into_inner()
        .items;
    assert_eq!(listed.len(), 2);
    for (_, pod_id, _) in &pods {
        cri::teardown(&mut c, pod_id).await;
    }
    shim.assert_host_clean();
}

/// A pod's network, IPC and UTS namespaces are pinned in the shim's pin space, not in
/// the host's mount table (which every container's init copies); they are
/// kept across a kill -9 of the shim, and a clean stop with no pod left
/// leaves no mount behind.
#[tokio::test(flavor = "multi_thread")]
async fn namespace_pins_stay_off_the_host_mount_table_and_outlive_the_shim() {
    require_root!();
    let (mut shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "pins").await;
    let run = shim.dir.path().join("run/sandboxes").join(&pod_id);
    let host_mounts = || -> Vec<String> {
        std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .collect()
    };
    let mounted = host_mounts();
    for (kind, pinned) in [("net", false), ("ipc", false), ("uts", false)] {
        let p = run.join(kind).to_string_lossy().into_owned();
        assert_eq!(
            mounted.contains(&p),
            pinned,
            "{kind} pinned in the host's mount table: {mounted:?}"
        );
    }
    let ns = "readlink /proc/self/ns/net /proc/self/ns/ipc /proc/self/ns/uts; hostname";
    let first = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("first", "busybox", &["sleep", "300"]),
    )
    .await;
    cri::start(&mut c, &first).await;
    let before = String::from_utf8_lossy(&sh(&mut c, &first, ns).await.stdout).into_owned();
    let host = std::process::Command::new("sh")
        .args(["-c", ns])
        .output()
        .expect("readlink on the host");
    assert_ne!(
        before,
        String::from_utf8_lossy(&host.stdout),
        "host namespaces"
    );
    assert!(before.ends_with("pins\n"), "hostname: {before}");

    shim.kill9();
    shim.spawn();
    let mut c = cri::client(&shim.socket()).await;
    let second = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("second", "busybox", &["sleep", "300"]),
    )
    .await;
    cri::start(&mut c, &second).await;
    let after = String::from_utf8_lossy(&sh(&mut c, &second, ns).await.stdout).into_owned();
    assert_eq!(
        before, after,
        "a container made after the restart joins the pod's namespaces"
    );

    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
    shim.stop();
    let dir = shim.dir.path().to_string_lossy().into_owned();
    let left: Vec<String> = host_mounts()
        .into_iter()
        .filter(|m| m.starts_with(&dir))
        .collect();
    assert!(left.is_empty(), "mounts left after a clean stop: {left:?}");
}

/// The pin space holds no filesystem of the host but `/`, the run dir's
/// and `/proc`: a tmpfs the host had mounted (privately, as on a host
/// without systemd) when the space was made, then let go of, is not kept
/// alive in it.
#[tokio::test(flavor = "multi_thread")]
async fn the_pin_space_keeps_no_host_filesystem_alive() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let held = shim.dir.path().join("held");
    std::fs::create_dir(&held).expect("mkdir held");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .expect("run");
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    let at = held.to_str().expect("utf-8 path");
    run(&["mount", "-t", "tmpfs", "-o", "size=1m", "picolet-held", at]);
    run(&["mount", "--make-private", at]);
    let (_pod, pod_id) = new_pod(&shim, &mut c, "space").await;
    run(&["umount", at]);

    let shim_pid = shim.child.as_ref().expect("shim runs").id();
    let space = std::fs::read_dir(format!("/proc/{shim_pid}/task"))
        .expect("shim's tasks")
        .flatten()
        .find(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "pin-space")
        })
        .expect("the pin space's thread");
    let table = std::fs::read_to_string(space.path().join("mountinfo")).expect("its mountinfo");
    let run_dir = std::fs::canonicalize(shim.dir.path().join("run")).expect("run dir");
    let extra: Vec<&str> = table
        .lines()
        .filter(|l| {
            let at = std::path::Path::new(l.split(' ').nth(4).unwrap_or("?"));
            let nsfs = l
                .split(" - ")
                .nth(1)
                .is_some_and(|r| r.starts_with("nsfs "));
            !(at == std::path::Path::new("/proc")
                || run_dir.starts_with(at)
                || (nsfs && at.starts_with(&run_dir)))
        })
        .collect();
    assert!(extra.is_empty(), "the pin space holds more: {extra:#?}");
    assert!(!table.contains("picolet-held"), "{table}");

    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn seccomp_runtime_default_is_enforced() {
    require_root!();
    use cri_proto::v1::security_profile::ProfileType;
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "seccomp").await;
    // unshare(CLONE_NEWUSER) needs no capability, so only seccomp stops it.
    let cmd = "echo alive; if unshare -U true; then echo escaped; else echo blocked; fi";
    for (name, profile, want) in [
        ("confined", ProfileType::RuntimeDefault, "blocked"),
        ("free", ProfileType::Unconfined, "escaped"),
    ] {
        let mut cfg = cri::container(name, "busybox", &["sh", "-c", cmd]);
        seccomp(&mut cfg, profile, "");
        let (_, log) = cri::run_to_exit(&mut c, &pod_id, &pod, cfg).await;
        assert!(log.contains("stdout F alive"), "{name}: {log}");
        assert!(
            log.contains(&format!("stdout F {want}")),
            "{name}: want {want}: {log}"
        );
    }
    // A process exec'd into a confined container is confined too (libcontainer
    // applies seccomp only with libseccomp, which we do not link: our exec
    // path must install the filter itself).
    let mut cfg = cri::container("long", "busybox", &["sleep", "60"]);
    seccomp(&mut cfg, ProfileType::RuntimeDefault, "");
    let long = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &long).await;
    let out = c
        .exec_sync(ExecSyncRequest {
            container_id: long.clone(),
            cmd: vec!["sh".into(), "-c".into(), cmd.into()],
            timeout: 10,
        })
        .await
        .expect("exec")
        .into_inner();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "alive\nblocked\n",
        "exec'd process not confined: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A Localhost profile that is not a file is a clear InvalidArgument.
    let mut cfg = cri::container("bad", "busybox", &["true"]);
    seccomp(
        &mut cfg,
        ProfileType::Localhost,
        "/nonexistent/profile.json",
    );
    let err = c
        .create_container(cri_proto::v1::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: Some(cfg),
            sandbox_config: Some(pod.clone()),
        })
        .await
        .expect_err("missing profile");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("localhost_ref"), "{}", err.message());
    // A Localhost profile that allows everything but one syscall (critest's
    // "blocks sethostname" profile has this shape): it failed to compile.
    let profile = shim.dir.path().join("block-unshare.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["unshare"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .expect("write profile");
    let with_mode = format!("{cmd}; grep '^Seccomp:' /proc/self/status");
    let mut cfg = cri::container("allowlist", "busybox", &["sh", "-c", &with_mode]);
    seccomp(
        &mut cfg,
        ProfileType::Localhost,
        profile.to_str().expect("utf-8 path"),
    );
    let (_, log) = cri::run_to_exit(&mut c, &pod_id, &pod, cfg).await;
    assert!(log.contains("stdout F alive"), "{log}");
    assert!(log.contains("stdout F blocked"), "unshare allowed: {log}");
    assert!(
        log.contains("stdout F Seccomp:\t2"),
        "not in filter mode: {log}"
    );
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exec_runs_as_the_container_does() {
    require_root!();
    use cri_proto::v1::{Int64Value, security_profile::ProfileType};
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "execid").await;
    let mut cfg = cri::container("app", "busybox", &["sleep", "60"]);
    cfg.working_dir = "/tmp".into();
    // kubelet's score for a Burstable container: only raising is allowed here.
    cfg.linux
        .as_mut()
        .expect("linux")
        .resources
        .get_or_insert_with(Default::default)
        .oom_score_adj = 937;
    let sc = cfg
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .expect("sc");
    sc.run_as_user = Some(Int64Value { value: 1000 });
    sc.run_as_group = Some(Int64Value { value: 2000 });
    sc.supplemental_groups = vec![3000];
    seccomp(&mut cfg, ProfileType::RuntimeDefault, "");
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    // The container's init is PID 1 of its own PID namespace.
    // Namespaces, cgroups, credentials, confinement and OOM score: the same.
    let script = "pwd; for p in 1 self; do \
        grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|SigBlk|SigIgn):' /proc/$p/status; \
        for n in cgroup ipc mnt net pid uts; do readlink /proc/$p/ns/$n; done; \
        cat /proc/$p/cgroup /proc/$p/oom_score_adj; \
        echo --; done";
    let out = c
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sh".into(), "-c".into(), script.into()],
            timeout: 10,
        })
        .await
        .expect("exec")
        .into_inner();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let parts: Vec<&str> = text.split("--\n").collect();
    assert_eq!(
        parts.len(),
        3,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (cwd, init) = parts[0].split_once('\n').expect("pwd line");
    assert_eq!(cwd, "/tmp", "{text}");
    assert!(init.contains("Uid:\t1000\t1000\t1000\t1000"), "{text}");
    assert!(init.contains("Gid:\t2000\t2000\t2000\t2000"), "{text}");
    // The primary group among them, as containerd 2.
    assert!(init.contains("Groups:\t2000 3000"), "{text}");
    assert!(init.contains("Seccomp:\t2"), "{text}");
    // Started as a fresh process: no signal ignored or blocked (the picolet
    // binary ignores SIGPIPE, as every Rust program).
    assert!(init.contains("SigIgn:\t0000000000000000"), "{text}");
    assert!(init.contains("SigBlk:\t0000000000000000"), "{text}");
    assert_eq!(init, parts[1], "exec'd process differs from the init");
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn pid_namespace_modes_pod_and_target_share_processes() {
    require_root!();
    use cri_proto::v1::NamespaceMode;
    let (shim, mut c) = ready_shim().await;
    let mut pod = cri::pod(
        "sharepid",
        &logs(&shim, "sharepid"),
        false,
        &shim.cgroup_parent("sharepid"),
    );
    let set_pid =
        |opts: &mut Option<cri_proto::v1::NamespaceOption>, mode: NamespaceMode, target: &str| {
            let o = opts.get_or_insert_with(Default::default);
            o.pid = mode as i32;
            o.target_id = target.to_string();
        };
    set_pid(
        &mut pod
            .linux
            .as_mut()
            .expect("linux")
            .security_context
            .as_mut()
            .expect("sc")
            .namespace_options,
        NamespaceMode::Pod,
        "",
    );
    let pod_id = cri::run_pod(&mut c, &pod).await;
    let with_pid = |name: &str, cmd: &[&str], mode: NamespaceMode, target: &str| {
        let mut cfg = cri::container(name, "busybox", cmd);
        set_pid(
            &mut cfg
                .linux
                .as_mut()
                .expect("linux")
                .security_context
                .as_mut()
                .expect("sc")
                .namespace_options,
            mode,
            target,
        );
        cfg
    };
    let a = cri::create(
        &mut c,
        &pod_id,
        &pod,
        with_pid("a", &["sleep", "301"], NamespaceMode::Pod, ""),
    )
    .await;
    cri::start(&mut c, &a).await;
    let b = cri::create(
        &mut c,
        &pod_id,
        &pod,
        with_pid("b", &["sleep", "302"], NamespaceMode::Pod, ""),
    )
    .await;
    cri::start(&mut c, &b).await;
    // A process just started may not have exec'd yet (`[sleep]`, no
    // arguments): ps until the container's own is there.
    let out = ps_shows(&mut c, &b, &["sleep 301", "sleep 302"]).await;
    assert!(
        out.contains("sleep 301") && out.contains("sleep 302"),
        "POD mode must share processes:\n{out}"
    );

    // TARGET joins one container's namespace; CONTAINER sees only itself.
    let t = cri::create(
        &mut c,
        &pod_id,
        &pod,
        with_pid("t", &["sleep", "303"], NamespaceMode::Target, &a),
    )
    .await;
    cri::start(&mut c, &t).await;
    let out = ps_shows(&mut c, &t, &["sleep 301", "sleep 303"]).await;
    assert!(
        out.contains("sleep 301") && out.contains("sleep 303"),
        "TARGET must see its target:\n{out}"
    );
    let own = cri::create(
        &mut c,
        &pod_id,
        &pod,
        with_pid("own", &["sleep", "304"], NamespaceMode::Container, ""),
    )
    .await;
    cri::start(&mut c, &own).await;
    let out = ps_shows(&mut c, &own, &["sleep 304"]).await;
    assert!(
        out.contains("sleep 304") && !out.contains("sleep 301"),
        "CONTAINER must be alone:\n{out}"
    );
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

/// `cmd` as uid/gid 65534 (nobody): its status and stderr.
/// `ps` in container `id`, run until its output shows every one of `want`.
async fn ps_shows(c: &mut cri::Client, id: &str, want: &[&str]) -> String {
    common::eventually_async(
        format_args!("ps in {id} to show {want:?}"),
        std::time::Duration::from_secs(10),
        async || {
            let out = c
                .exec_sync(ExecSyncRequest {
                    container_id: id.to_string(),
                    cmd: vec!["ps".into()],
                    timeout: 10,
                })
                .await
                .expect("ps")
                .into_inner()
                .stdout;
            let out = String::from_utf8_lossy(&out).into_owned();
            if want.iter().all(|w| out.contains(w)) {
                Ok(out)
            } else {
                Err(out)
            }
        },
        String::new,
    )
    .await
}

fn as_nobody(cmd: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(cmd)
        .output()
        .expect("setpriv (util-linux)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn another_local_user_cannot_read_or_write_picolets_state() {
    require_root!();
    use std::os::unix::fs::PermissionsExt;
    let (mut shim, mut c) = ready_shim().await;
    // As on a device: the data root and run dir under world-traversable
    // folders (/var/lib, /run), and a shim dir an older picolet made 0755,
    // which the next start must fix.
    let open = |p: &std::path::Path| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod")
    };
    let (root, run) = (shim.root(), shim.dir.path().join("run"));
    for p in [shim.dir.path(), &root, &run, &root.join("shim")] {
        open(p);
    }
    shim.kill9();
    shim.spawn();
    let mut c2 = cri::client(&shim.socket()).await;
    drop(std::mem::replace(&mut c, c2.clone()));
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&root.join("shim")), 0o700, "fixed at start");

    let (pod, pod_id) = new_pod(&shim, &mut c2, "private").await;
    let mut cfg = cri::container("app", "busybox", &["sleep", "600"]);
    cfg.envs = vec![cri_proto::v1::KeyValue {
        key: "SECRET".into(),
        value: "hunter2".into(),
    }];
    let id = cri::create(&mut c2, &pod_id, &pod, cfg).await;
    cri::start(&mut c2, &id).await;
    let config = root
        .join("shim/containers")
        .join(&id)
        .join("bundle/config.json");
    let rootfs = run.join("containers").join(&id).join("rootfs");
    // The paths are right: root reads the secret and the container's /tmp.
    let text = std::fs::read_to_string(&config).expect("config.json");
    assert!(text.contains("SECRET=hunter2"));
    assert!(rootfs.join("tmp").is_dir(), "{}", rootfs.display());
    for cmd in [
        vec!["cat".to_string(), config.display().to_string()],
        vec!["ls".into(), rootfs.display().to_string()],
        vec!["touch".into(), rootfs.join("tmp/x").display().to_string()],
        vec!["ls".into(), root.join("shim/images").display().to_string()],
    ] {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let (ok, err) = as_nobody(&args);
        assert!(
            !ok && err.contains("Permission denied"),
            "{cmd:?} as nobody: {err}"
        );
    }
    for d in ["containers", "sandboxes", "libcontainer"] {
        assert_eq!(mode(&run.join(d)), 0o700, "{d}");
    }
    cri::teardown(&mut c2, &pod_id).await;
}
