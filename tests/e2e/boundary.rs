//! End-to-end: the container boundary. The root our own create path
//! (`shim/src/init`) makes, seen from inside the container, against what
//! runc makes; and one test per escape class runc, crun or youki shipped a
//! fix for, each written as the attack a non-privileged container (or a
//! neighbour of the pod) would make. Root.
//!
//! Classes and where they are tried:
//! - CVE-2025-31133, CVE-2025-52565 (a /dev volume's `null` or `console`
//!   as a link to /proc/sys): `a_dev_volume_cannot_turn_devices_into_host_files`
//! - CVE-2023-27561, CVE-2026-41579 (an image's /proc or /dev as a link):
//!   `an_image_cannot_turn_proc_or_dev_into_a_link`
//! - the pod's PID 1 as a door to the host (containerd's pause is confined):
//!   `a_shared_pid_pods_init_shows_nothing_of_the_host`
//! - CVE-2024-21626, CVE-2016-9962 (descriptors of the runtime, a cwd
//!   through them): `nothing_the_shim_inherited_reaches_a_container`
//! - CVE-2019-5736 (the runtime's binary through /proc/<pid>/exe):
//!   `no_picolet_process_in_a_pod_exposes_the_binary_on_disk`
//! - CVE-2019-19921, CVE-2023-27561, CVE-2025-52881 (mounts onto /proc,
//!   directly or through a volume's link):
//!   `mounts_cannot_be_pointed_into_proc`
//! - CVE-2022-29162 (inheritable capabilities): `no_capability_is_inheritable`

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::cri;
use common::rt::{new_pod, ready_shim};
use cri_proto::v1::{
    Capability, ContainerConfig, LinuxContainerResources, Mount, NamespaceMode, PodSandboxConfig,
};

async fn sh(c: &mut common::cri::Client, id: &str, cmd: &str) -> (i32, String) {
    let out = common::rt::sh(c, id, cmd).await;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.exit_code, text)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_container_root_is_made_as_runc_makes_it() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "rootfs").await;

    let mut cfg = cri::container("plain", "busybox", &["sleep", "60"]);
    if let Some(l) = cfg.linux.as_mut() {
        l.resources = Some(LinuxContainerResources {
            memory_limit_in_bytes: 48 << 20,
            ..Default::default()
        });
    }
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;

    // Only the standard streams reach the program (runc's
    // GHSA-xr7r-f8xq-vfvv): PID 1 of its namespace is the init.
    let (code, fds) = sh(&mut c, &id, "ls /proc/1/fd").await;
    assert_eq!(
        (code, fds.split_whitespace().collect::<Vec<_>>()),
        (0, vec!["0", "1", "2"]),
        "{fds}"
    );

    // runc's default devices and links.
    let (code, devs) = sh(
        &mut c,
        &id,
        "for d in null zero full tty urandom random; do stat -c '%n %F %a %t:%T' /dev/$d; done; for l in ptmx fd stdin stderr; do readlink /dev/$l; done",
    )
    .await;
    assert_eq!(code, 0, "{devs}");
    let want = "/dev/null character special file 666 1:3\n\
                /dev/zero character special file 666 1:5\n\
                /dev/full character special file 666 1:7\n\
                /dev/tty character special file 666 5:0\n\
                /dev/urandom character special file 666 1:9\n\
                /dev/random character special file 666 1:8\n\
                pts/ptmx\n/proc/self/fd\n/proc/self/fd/0\n/proc/self/fd/2\n";
    assert_eq!(devs, want);

    // The container's own cgroup, and only to read.
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let limit = if v2 {
        "/sys/fs/cgroup/memory.max"
    } else {
        "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    };
    let (code, got) = sh(&mut c, &id, &format!("cat {limit}")).await;
    if !v2 {
        // On v1 the container sees its own cgroup as the hierarchy's root.
        assert_eq!((code, got.trim()), (0, (48u64 << 20).to_string().as_str()));
    }
    let (code, said) = sh(&mut c, &id, &format!("echo 1073741824 > {limit}")).await;
    assert_ne!(code, 0, "the container raised its own memory limit: {said}");
    assert!(said.contains("Read-only file system"), "{said}");

    // The spec's read-only paths (those this kernel has) are mounts of
    // their own, read-only.
    let (code, got) = sh(
        &mut c,
        &id,
        "for p in /proc/bus /proc/fs /proc/irq /proc/sys /proc/sysrq-trigger; do \
           [ -e $p ] || continue; \
           awk -v p=$p '$5==p{print substr($6,1,3)}' /proc/self/mountinfo | grep -q '^ro,' \
             && echo \"$p ro\" || echo \"$p NOT read-only\"; done",
    )
    .await;
    assert_eq!(code, 0, "{got}");
    assert!(
        got.contains("/proc/sys ro") && !got.contains("NOT"),
        "{got}"
    );

    // HOME from the image's passwd, or / as runc.
    let (_, home) = sh(&mut c, &id, "echo \"$HOME\"").await;
    assert!(home.trim().starts_with('/'), "HOME={home}");

    // A read-only rootfs: / refuses writes; /dev and /dev/shm do not.
    let mut ro = cri::container("ro", "busybox", &["sleep", "60"]);
    if let Some(sc) = ro.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
        sc.readonly_rootfs = true;
    }
    let ro_id = cri::create(&mut c, &pod_id, &pod, ro).await;
    cri::start(&mut c, &ro_id).await;
    let (code, said) = sh(&mut c, &ro_id, "touch /x").await;
    assert_ne!(code, 0, "{said}");
    let (code, said) = sh(&mut c, &ro_id, "touch /dev/x /dev/shm/x").await;
    assert_eq!(code, 0, "{said}");

    // A program the image lacks fails the create, saying so.
    let missing = cri::container("missing", "busybox", &["no-such-program"]);
    let err = cri::try_create(&mut c, &pod_id, &pod, missing)
        .await
        .expect_err("no such program");
    assert!(
        err.message()
            .contains("\"no-such-program\": executable file not found in $PATH"),
        "{}",
        err.message()
    );

    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

/// `cfg` with the host folder or file `host` at `at`.
fn with_mount(mut cfg: ContainerConfig, host: &Path, at: &str) -> ContainerConfig {
    cfg.mounts.push(Mount {
        container_path: at.into(),
        host_path: host.display().to_string(),
        ..Default::default()
    });
    cfg
}

/// `cfg` with these capabilities added to the runtime's default set.
fn with_caps(mut cfg: ContainerConfig, caps: &[&str]) -> ContainerConfig {
    if let Some(sc) = cfg.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
        sc.capabilities = Some(Capability {
            add_capabilities: caps.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        });
    }
    cfg
}

/// PID mode POD in these namespace options.
fn pid_pod(o: Option<&mut cri_proto::v1::NamespaceOption>) {
    if let Some(o) = o {
        o.pid = NamespaceMode::Pod as i32;
    }
}

/// `cfg` in the pod's shared PID namespace.
fn in_pod_pidns(mut cfg: ContainerConfig) -> ContainerConfig {
    pid_pod(
        cfg.linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|sc| sc.namespace_options.as_mut()),
    );
    cfg
}

/// A pod whose containers share one PID namespace (its init is picolet's
/// pod-init).
async fn shared_pid_pod(
    shim: &common::Shim,
    c: &mut common::cri::Client,
    name: &str,
) -> (PodSandboxConfig, String) {
    let mut pod = cri::pod(
        name,
        &common::rt::logs(shim, name),
        false,
        &shim.cgroup_parent(name),
    );
    pid_pod(
        pod.linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|sc| sc.namespace_options.as_mut()),
    );
    let id = cri::run_pod(c, &pod).await;
    (pod, id)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dev_volume_cannot_turn_devices_into_host_files() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "devvol").await;
    // What an earlier container of the pod, with this volume as its /dev,
    // leaves behind: the devices the next init makes, and the console it
    // binds a terminal onto, as links to host files through /proc.
    let vol = shim.dir.path().join("devvol");
    std::fs::create_dir_all(&vol).expect("mkdir");
    for (name, to) in [
        ("null", "/proc/sys/kernel/core_pattern"),
        ("zero", "/proc/sysrq-trigger"),
        ("console", "/proc/sys/kernel/modprobe"),
    ] {
        std::os::unix::fs::symlink(to, vol.join(name)).expect("plant a link");
    }
    let cfg = with_mount(
        cri::container("next", "busybox", &["sleep", "60"]),
        &vol,
        "/dev",
    );
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    // Its stdin was the host's /dev/null: reopened as the container's, which
    // must be the null device, not the link's target opened read-write.
    let (code, got) = sh(
        &mut c,
        &id,
        "stat -L -c '%F %t:%T' /proc/1/fd/0 /dev/null /dev/zero; \
         for p in /proc/kcore /proc/timer_list; do [ -e $p ] && stat -c '%F %t:%T' $p; done; true",
    )
    .await;
    assert_eq!(code, 0, "{got}");
    let mut lines = got.lines();
    assert_eq!(
        lines.next(),
        Some("character special file 1:3"),
        "stdin: {got}"
    );
    assert_eq!(
        lines.next(),
        Some("character special file 1:3"),
        "/dev/null: {got}"
    );
    assert_eq!(
        lines.next(),
        Some("character special file 1:5"),
        "/dev/zero: {got}"
    );
    // Masks are the real null device too.
    for l in lines {
        assert_eq!(l, "character special file 1:3", "a mask: {got}");
    }
    // On the host the links were replaced by the devices.
    let null = std::fs::symlink_metadata(vol.join("null")).expect("stat");
    assert!(!null.file_type().is_symlink() && null.rdev() == libc::makedev(1, 3));
    // A container with a terminal binds its pty onto /dev/console: never
    // onto the link's target. With /dev a volume, the devpts mounted
    // before it is hidden, so the terminal cannot be made: refused, naming
    // the node; else its console must be the pty (major 136, `stat %t` is
    // hex).
    let mut tty = with_mount(
        cri::container("tty", "busybox", &["sleep", "60"]),
        &vol,
        "/dev",
    );
    tty.tty = true;
    tty.stdin = true;
    match cri::try_create(&mut c, &pod_id, &pod, tty).await {
        Err(e) => assert!(
            e.message().contains("/dev/ptmx") || e.message().contains("/dev/console"),
            "{}",
            e.message()
        ),
        Ok(tty_id) => {
            cri::start(&mut c, &tty_id).await;
            let (code, got) = sh(&mut c, &tty_id, "stat -c '%F %t' /dev/console").await;
            assert_eq!(
                (code, got.trim()),
                (0, "character special file 88"),
                "{got}"
            );
        }
    }
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shared_pid_pods_init_shows_nothing_of_the_host() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = shared_pid_pod(&shim, &mut c, "pidone").await;
    // Not privileged, but allowed to trace: /proc/1 is open to it.
    let cfg = with_caps(
        in_pod_pidns(cri::container("nosy", "busybox", &["sleep", "60"])),
        &["SYS_PTRACE"],
    );
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    let (code, got) = sh(
        &mut c,
        &id,
        "echo root:$(ls -A /proc/1/root/ | wc -l); echo mounts:$(wc -l < /proc/1/mountinfo); \
         for n in net ipc uts; do [ $(readlink /proc/1/ns/$n) = $(readlink /proc/self/ns/$n) ] && echo same:$n; done; \
         echo fds:$(ls /proc/1/fd | tr '\n' ' '); \
         grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/1/status | tr -s '\t ' ' '",
    )
    .await;
    assert_eq!(code, 0, "{got}");
    for want in [
        "root:0",
        "mounts:1",
        "same:net",
        "same:ipc",
        "same:uts",
        "fds:0 1 2",
        "Uid: 65535 65535 65535 65535",
        "Gid: 65535 65535 65535 65535",
        "CapInh: 0000000000000000",
        "CapPrm: 0000000000000000",
        "CapEff: 0000000000000000",
        "CapBnd: 0000000000000000",
        "CapAmb: 0000000000000000",
        "NoNewPrivs: 1",
        "Seccomp: 2",
    ] {
        assert!(
            got.lines().any(|l| l == want),
            "missing {want:?} in:\n{got}"
        );
    }
    // Still the pod's init: what its namespace orphans goes to it (the
    // container's own processes have parents outside: ppid 0), and it
    // reaps them: the orphan that exits leaves no zombie.
    let (code, got) = sh(
        &mut c,
        &id,
        "sh -c 'sleep 30 >/dev/null 2>&1 & sleep 0.1 >/dev/null 2>&1 &'; \
         for i in $(seq 100); do ps -o ppid,stat,comm | grep -q '^ *1 S *sleep' && \
           ! ps -o stat,comm | grep -q '^Z' && break; usleep 20000; done; ps -o ppid,stat,comm",
    )
    .await;
    assert_eq!(code, 0, "{got}");
    let rows: Vec<Vec<&str>> = got
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.iter()
            .any(|f| f.len() == 3 && f[0] == "1" && f[2] == "sleep"),
        "the orphan did not go to pod-init:\n{got}"
    );
    assert!(
        !rows.iter().any(|f| f.len() == 3 && f[1].starts_with('Z')),
        "a zombie pod-init did not reap:\n{got}"
    );
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_the_shim_inherited_reaches_a_container() {
    require_root!();
    let secret = tempfile::Builder::new()
        .prefix("picolet-leak-")
        .tempdir()
        .expect("tempdir");
    std::fs::write(secret.path().join("host-secret"), "x").expect("marker");
    let shim = common::Shim::start_leaking(secret.path());
    shim.import(&common::test_images().busybox_layout);
    let mut c = cri::client(&shim.socket()).await;
    let (pod, pod_id) = shared_pid_pod(&shim, &mut c, "leak").await;
    let id = cri::create(
        &mut c,
        &pod_id,
        &pod,
        in_pod_pidns(cri::container("plain", "busybox", &["sleep", "60"])),
    )
    .await;
    cri::start(&mut c, &id).await;
    let fd = common::LEAKED_FD;
    // Through an exec (the helper is a child of the shim) and in the
    // container's own process.
    let (_, got) = sh(
        &mut c,
        &id,
        &format!("ls /proc/self/fd/{fd}/ /proc/$(pgrep -o sleep)/fd/{fd}/ 2>&1; ls /proc/self/fd"),
    )
    .await;
    assert!(!got.contains("host-secret"), "{got}");
    // The same for a working directory set to it (runc's CVE-2024-21626):
    // the container must not start in the host's folder.
    let mut cwd = cri::container("cwd", "busybox", &["sh", "-c", "touch escaped; sleep 60"]);
    cwd.working_dir = format!("/proc/self/fd/{fd}");
    if let Ok(cwd_id) = cri::try_create(&mut c, &pod_id, &pod, cwd).await {
        let _ = c
            .start_container(cri_proto::v1::StartContainerRequest {
                container_id: cwd_id,
            })
            .await;
    }
    assert!(
        !secret.path().join("escaped").exists(),
        "a container wrote into the shim's inherited folder"
    );
    // The shim holds it only close-on-exec (fdinfo's octal flags), and no
    // process picolet runs for the pod holds it (spawner, monitors,
    // pod-init): every process whose command line names the shim's folder.
    let shim_pid = shim.child.as_ref().expect("shim").id();
    let info = std::fs::read_to_string(format!("/proc/{shim_pid}/fdinfo/{fd}")).expect("fdinfo");
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .expect("flags");
    assert_ne!(
        flags & libc::O_CLOEXEC as u32,
        0,
        "the shim passes it on:\n{info}"
    );
    let ours = shim.dir.path().display().to_string();
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(&ours)
            || e.file_name().to_str() == Some(shim_pid.to_string().as_str())
        {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        for f in fds.flatten() {
            let to = std::fs::read_link(f.path()).unwrap_or_default();
            assert_ne!(
                to,
                secret.path(),
                "{} holds the inherited folder: {}",
                e.path().display(),
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            );
        }
    }
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn no_picolet_process_in_a_pod_exposes_the_binary_on_disk() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = shared_pid_pod(&shim, &mut c, "exe").await;
    let tracer = cri::create(
        &mut c,
        &pod_id,
        &pod,
        with_caps(
            in_pod_pidns(cri::container("tracer", "busybox", &["sleep", "60"])),
            &["SYS_PTRACE"],
        ),
    )
    .await;
    cri::start(&mut c, &tracer).await;
    let plain = cri::create(
        &mut c,
        &pod_id,
        &pod,
        in_pod_pidns(cri::container("plain", "busybox", &["sleep", "60"])),
    )
    .await;
    cri::start(&mut c, &plain).await;
    // Created, not started: its init is a picolet process waiting in the
    // pod's PID namespace, beside pod-init.
    let _waiting = cri::create(
        &mut c,
        &pod_id,
        &pod,
        in_pod_pidns(cri::container("waiting", "busybox", &["sleep", "60"])),
    )
    .await;
    let disk = std::fs::metadata(common::picolet()).expect("stat picolet");
    let (code, got) = sh(
        &mut c,
        &tracer,
        "for p in /proc/[0-9]*; do echo \"$(readlink $p/exe) $(stat -L -c %d:%i $p/exe)\"; done",
    )
    .await;
    assert_eq!(code, 0, "{got}");
    let on_disk = format!("{}:{}", disk.dev(), disk.ino());
    assert!(
        !got.lines().any(|l| l.ends_with(&on_disk)),
        "a process of the pod runs picolet's binary on disk:\n{got}"
    );
    // pod-init and the waiting init run the sealed copy; not writable.
    let sealed: Vec<&str> = got
        .lines()
        .filter(|l| l.contains("memfd:picolet"))
        .collect();
    assert!(sealed.len() >= 2, "{got}");
    let (code, said) = sh(
        &mut c,
        &tracer,
        "for p in /proc/[0-9]*; do readlink $p/exe | grep -q memfd: && { printf x >> $p/exe && echo WROTE $p; }; done 2>&1; true",
    )
    .await;
    assert_eq!(code, 0, "{said}");
    assert!(!said.contains("WROTE"), "{said}");
    // Without CAP_SYS_PTRACE a container cannot even look (the inits are
    // not dumpable until they exec).
    let (_, got) = sh(
        &mut c,
        &plain,
        "for p in /proc/[0-9]*; do readlink $p/exe; done 2>/dev/null",
    )
    .await;
    assert!(!got.contains("picolet"), "{got}");
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn mounts_cannot_be_pointed_into_proc() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "procmnt").await;
    let file = shim.dir.path().join("innocent");
    std::fs::write(&file, "|/bin/evil\n").expect("file");
    let refused = async |c: &mut common::cri::Client, cfg: ContainerConfig| {
        cri::try_create(c, &pod_id, &pod, cfg)
            .await
            .expect_err("a mount into /proc")
            .message()
            .to_string()
    };
    // Straight at a procfs file.
    let err = refused(
        &mut c,
        with_mount(
            cri::container("direct", "busybox", &["sleep", "60"]),
            &file,
            "/proc/sys/kernel/core_pattern",
        ),
    )
    .await;
    assert!(err.contains("inside /proc"), "{err}");
    // Through a link a neighbour left in a shared volume.
    let vol = shim.dir.path().join("shared");
    std::fs::create_dir_all(&vol).expect("mkdir");
    std::os::unix::fs::symlink("/proc/sys/kernel", vol.join("link")).expect("link");
    let cfg = with_mount(
        with_mount(
            cri::container("linked", "busybox", &["sleep", "60"]),
            &vol,
            "/data",
        ),
        &file,
        "/data/link/core_pattern",
    );
    let err = refused(&mut c, cfg).await;
    assert!(err.contains("resolves into /proc"), "{err}");
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn no_capability_is_inheritable() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "capinh").await;
    let cfg = with_caps(
        cri::container("caps", "busybox", &["sleep", "60"]),
        &["NET_ADMIN", "SYS_TIME"],
    );
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    for p in ["1", "self"] {
        let (code, got) = sh(&mut c, &id, &format!("grep CapInh /proc/{p}/status")).await;
        assert_eq!(
            (code, got.split_whitespace().last()),
            (0, Some("0000000000000000")),
            "{p}: {got}"
        );
    }
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_cannot_turn_proc_or_dev_into_a_link() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let busybox = std::env::var("BUSYBOX").unwrap_or_else(|_| "/bin/busybox".into());
    let base = xtask::busybox_layer(Path::new(&busybox)).expect("busybox layer");
    // Images whose /proc or /dev is a link: the procfs, or the /dev tmpfs
    // and the devices made in it, would land where the link points.
    for (what, target) in [("proc", "/tmp"), ("dev", "/proc/sys/kernel")] {
        let link = xtask::LayerBuilder::new()
            .symlink(what, target)
            .finish(xtask::Compression::Gzip);
        let image = xtask::ImageDef {
            name: format!("localhost/picolet-test/{what}-link:v1"),
            arch: xtask::host_arch().into(),
            layers: vec![base.clone(), link],
            cmd: vec!["sh".into()],
            env: vec!["PATH=/bin".into()],
            user: None,
        };
        let dir = shim.dir.path().join(format!("{what}-link.oci"));
        xtask::write_oci_layout(&dir, &[image]).expect("layout");
        shim.import(&dir);
    }
    let (pod, pod_id) = new_pod(&shim, &mut c, "imglink").await;
    let refused = async |c: &mut common::cri::Client, image: &str| {
        let cfg = cri::container("linked", image, &["sleep", "60"]);
        cri::try_create(c, &pod_id, &pod, cfg)
            .await
            .expect_err(image)
            .message()
            .to_string()
    };
    // runc's CVE-2023-27561, youki's GHSA-j26p-6wx7-f3pw.
    let err = refused(&mut c, "localhost/picolet-test/proc-link:v1").await;
    assert!(
        err.contains("proc must be mounted on a plain directory"),
        "{err}"
    );
    // runc's CVE-2026-41579.
    let err = refused(&mut c, "localhost/picolet-test/dev-link:v1").await;
    assert!(err.contains("resolves into /proc"), "{err}");
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}
