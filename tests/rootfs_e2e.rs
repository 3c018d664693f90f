//! End-to-end: the root our own create path (`shim/src/init`) makes, seen
//! from inside the container, against what runc makes: the devices and
//! links of /dev, no descriptor of the runtime left in the init, the
//! container's own cgroups read-only under /sys/fs/cgroup, HOME, a
//! read-only rootfs, and a missing program refused at create. Root.

mod common;

use common::cri;
use common::rt::{new_pod, ready_shim};
use cri_proto::v1::LinuxContainerResources;

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
    let err = c
        .create_container(cri_proto::v1::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: Some(cri::container("missing", "busybox", &["no-such-program"])),
            sandbox_config: Some(pod.clone()),
        })
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
