//! End-to-end: the CRI features critest 1.36 runs when the runtime says it
//! has them: recursive read-only mounts, SupplementalGroupsPolicy and the
//! effective user in ContainerStatus. Root.

use crate::common;

use common::cri;
use common::rt::{new_pod, ready_shim};
use cri_proto::v1::{
    ContainerUser, Int64Value, LinuxContainerUser, Mount, StatusRequest, SupplementalGroupsPolicy,
};

/// Detaches (lazily, with everything below it) a mount the test made.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// As critest: a read-only volume with a tmpfs under it. Plain `readonly`
/// leaves the tmpfs writable; `recursive_read_only` makes it read-only
/// too, and the one handler says it can.
#[tokio::test(flavor = "multi_thread")]
async fn recursive_read_only_reaches_mounts_under_the_volume() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let status = c
        .status(StatusRequest { verbose: false })
        .await
        .expect("Status")
        .into_inner();
    let handler = status
        .runtime_handlers
        .iter()
        .find(|h| h.name.is_empty())
        .expect("the default handler");
    let features = handler.features.expect("its features");
    assert!(features.recursive_read_only_mounts);
    assert!(
        status
            .features
            .expect("features")
            .supplemental_groups_policy
    );

    let volume = tempfile::Builder::new()
        .prefix("picolet-rro-")
        .tempdir()
        .expect("tempdir");
    let sub = volume.path().join("tmpfs");
    std::fs::create_dir(&sub).expect("mkdir");
    nix::mount::mount(
        Some("tmpfs"),
        &sub,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .expect("tmpfs under the volume");
    let _tmpfs = Unmount(sub.clone());

    let (pod, pod_id) = new_pod(&shim, &mut c, "rro").await;
    let host_path = volume.path().to_str().expect("utf-8").to_string();
    let mut cfg = cri::container("rro", "busybox", &["sleep", "60"]);
    for (dest, recursive) in [("/ro", false), ("/rro", true)] {
        cfg.mounts.push(Mount {
            container_path: dest.into(),
            host_path: host_path.clone(),
            readonly: true,
            recursive_read_only: recursive,
            ..Default::default()
        });
    }
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    for (cmd, ok) in [
        ("touch /ro/tmpfs/f", true),
        ("touch /ro/f", false),
        ("touch /rro/tmpfs/g", false),
        ("touch /rro/g", false),
    ] {
        let out = common::rt::sh(&mut c, &id, cmd).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.exit_code == 0, ok, "{cmd}: {stderr}");
        if !ok {
            assert!(stderr.contains("Read-only file system"), "{cmd}: {stderr}");
        }
    }

    // Writable, or shared with the host: refused, naming the field.
    for (readonly, propagation) in [
        (false, cri_proto::v1::MountPropagation::PropagationPrivate),
        (
            true,
            cri_proto::v1::MountPropagation::PropagationHostToContainer,
        ),
    ] {
        let mut cfg = cri::container("refused", "busybox", &["true"]);
        cfg.mounts.push(Mount {
            container_path: "/rro".into(),
            host_path: host_path.clone(),
            readonly,
            recursive_read_only: true,
            propagation: propagation as i32,
            ..Default::default()
        });
        let err = cri::try_create(&mut c, &pod_id, &pod, cfg)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message().contains("mounts[0].recursive_read_only"),
            "{}",
            err.message()
        );
    }
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

/// SupplementalGroupsPolicy Strict leaves out the image's groups, and
/// ContainerStatus tells the process's user and groups (the primary group
/// among them); `id -G` in the container agrees.
#[tokio::test(flavor = "multi_thread")]
async fn supplemental_groups_policy_and_the_user_in_the_status() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "groups").await;
    // The test image's /etc/group puts `user` (1000:1000) in group 50000,
    // as critest's test-image-predefined-group does.
    for (name, policy, want) in [
        (
            "merge",
            SupplementalGroupsPolicy::Merge,
            vec![1000, 1234, 50000],
        ),
        ("strict", SupplementalGroupsPolicy::Strict, vec![1000, 1234]),
    ] {
        let mut cfg = cri::container(name, "busybox", &["sleep", "60"]);
        let sc = cfg
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .expect("security context");
        sc.run_as_user = Some(Int64Value { value: 1000 });
        sc.supplemental_groups = vec![1234];
        sc.supplemental_groups_policy = policy as i32;
        let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
        cri::start(&mut c, &id).await;
        let status = cri::status(&mut c, &id).await;
        assert_eq!(
            status.user,
            Some(ContainerUser {
                linux: Some(LinuxContainerUser {
                    uid: 1000,
                    gid: 1000,
                    supplemental_groups: want.clone(),
                }),
            }),
            "{name}"
        );
        let out = common::rt::sh(&mut c, &id, "id -G").await;
        let mut seen: Vec<i64> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|g| g.parse().expect("a gid"))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, want, "{name}: id -G");
    }
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}
