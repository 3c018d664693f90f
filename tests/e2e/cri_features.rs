//! End-to-end: the CRI features critest 1.36 runs when the runtime says it
//! has them: recursive read-only mounts, SupplementalGroupsPolicy and the
//! effective user in ContainerStatus. Root.

use crate::common;

use common::cri;
use common::rt::{new_pod, ready_shim};
use cri_proto::v1::{
    ContainerUser, IdMapping, Int64Value, LinuxContainerUser, Mount, NamespaceMode, StatusRequest,
    SupplementalGroupsPolicy, UserNamespace,
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

/// The pod's user namespace with one range, as kubelet sends for
/// `hostUsers: false`.
fn userns(mode: NamespaceMode, host_id: u32, length: u32) -> UserNamespace {
    let range = || {
        (mode == NamespaceMode::Pod)
            .then_some(IdMapping {
                host_id,
                container_id: 0,
                length,
            })
            .into_iter()
            .collect()
    };
    UserNamespace {
        mode: mode as i32,
        uids: range(),
        gids: range(),
    }
}

/// critest's user namespace specs and more: a pod of its own user
/// namespace maps root to the host's ID it was given; the image is the
/// pod root's (idmapped layers, not a copy), what it writes belongs to the
/// host's ID, and the container has its /proc and can be exec'd into, in
/// the pod's PID namespace (critest) and in one of its own (kubelet).
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_in_a_user_namespace_of_its_own() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let host_id: u32 = 3_000_000;
    for (name, pid_mode) in [
        ("userns-pod", NamespaceMode::Pod),
        ("userns-ctr", NamespaceMode::Container),
    ] {
        let mut pod = cri::pod(
            name,
            &common::rt::logs(&shim, name),
            false,
            &shim.cgroup_parent(name),
        );
        let ns = pod
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|s| s.namespace_options.as_mut())
            .expect("namespace options");
        ns.pid = pid_mode as i32;
        ns.userns_options = Some(userns(NamespaceMode::Pod, host_id, 65536));
        let pod_id = cri::run_pod(&mut c, &pod).await;
        let mut cfg = cri::container(name, "busybox", &["sleep", "60"]);
        let cns = cfg
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|s| s.namespace_options.as_mut())
            .expect("namespace options");
        cns.pid = pid_mode as i32;
        cns.userns_options = Some(userns(NamespaceMode::Pod, host_id, 65536));
        let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
        cri::start(&mut c, &id).await;
        for (cmd, want) in [
            ("cat /proc/self/uid_map", format!("0 {host_id} 65536")),
            ("cat /proc/self/gid_map", format!("0 {host_id} 65536")),
            (
                "id -u; stat -c %u:%g /bin/busybox /etc/passwd",
                "0\n0:0\n0:0".into(),
            ),
            (
                "echo hi > /root-was-here && stat -c %u /root-was-here",
                "0".into(),
            ),
            ("ps -o pid,comm | grep -c sleep", "1".into()),
        ] {
            let out = common::rt::sh(&mut c, &id, cmd).await;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let got: Vec<&str> = stdout.split_whitespace().collect();
            let want: Vec<&str> = want.split_whitespace().collect();
            assert_eq!(
                (out.exit_code, got),
                (0, want),
                "{name}: {cmd}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // On the host, what the pod's root wrote is the host's ID's.
        let upper = std::fs::read_dir(shim.dir.path())
            .ok()
            .and_then(|_| find_file(shim.dir.path(), "root-was-here"))
            .expect("the file in the container's upper dir");
        let meta = std::fs::metadata(&upper).expect("stat");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (meta.uid(), meta.gid()),
            (host_id, host_id),
            "{}",
            upper.display()
        );
        cri::teardown(&mut c, &pod_id).await;
    }
    shim.assert_host_clean();
}

/// `name` anywhere under `dir` (not through links).
fn find_file(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let ft = e.file_type().ok()?;
        if ft.is_file() && e.file_name() == name {
            return Some(p);
        }
        if ft.is_dir()
            && !ft.is_symlink()
            && let Some(f) = find_file(&p, name)
        {
            return Some(f);
        }
    }
    None
}

/// What no pod's user namespace can be is refused by RunPodSandbox,
/// naming the field; mode NODE is the host's.
#[tokio::test(flavor = "multi_thread")]
async fn user_namespace_options_that_cannot_be_are_refused() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    for (i, (opts, want)) in [
        (
            userns(NamespaceMode::Container, 3_000_000, 65536),
            "userns_options.mode",
        ),
        (
            userns(NamespaceMode::Pod, 3_000_000, 0),
            "userns_options.uids: an empty range",
        ),
        (
            UserNamespace {
                uids: vec![IdMapping {
                    host_id: 3_000_000,
                    container_id: 1,
                    length: 10,
                }],
                ..userns(NamespaceMode::Pod, 3_000_000, 65536)
            },
            "userns_options.uids: the range starts at 1",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("bad-userns-{i}");
        let mut pod = cri::pod(
            &name,
            &common::rt::logs(&shim, &name),
            false,
            &shim.cgroup_parent(&name),
        );
        if let Some(ns) = pod
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|s| s.namespace_options.as_mut())
        {
            ns.userns_options = Some(opts);
        }
        let err = cri::try_run_pod(&mut c, &pod).await.expect_err(want);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{want}");
        assert!(err.message().contains(want), "{}", err.message());
    }
    shim.assert_host_clean();
}

/// Image volumes (CRI `Mount.image`, kubelet 1.36's `image` volume
/// source): the image's files at the mount, read-only, one layer or many
/// (whiteouts and opaque dirs as in a rootfs); unmounted with the
/// container; an image not in the store is NotFound, by field.
#[tokio::test(flavor = "multi_thread")]
async fn image_volumes_show_an_image_read_only() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    shim.import(&common::test_images().layered_layout);
    let (pod, pod_id) = new_pod(&shim, &mut c, "imgvol").await;
    let mut cfg = cri::container("imgvol", "busybox", &["sleep", "60"]);
    for (path, image) in [("/one", "busybox"), ("/many", xtask::LAYERED_REF)] {
        cfg.mounts.push(Mount {
            container_path: path.into(),
            image: Some(cri_proto::v1::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    let out = cri::exec_ok(
        &mut c,
        &id,
        "test -x /one/bin/busybox && cat /many/etc/motd && ls /many/data/opaque && test ! -e /many/data/a && echo ok",
    )
    .await;
    assert_eq!(out, "v2\nnew\nok\n");
    for path in ["/one", "/many"] {
        let out = common::rt::sh(&mut c, &id, &format!("touch {path}/x")).await;
        assert_ne!(out.exit_code, 0, "{path} is writable");
        assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
    }
    let mut missing = cri::container("missing", "busybox", &["true"]);
    missing.mounts.push(Mount {
        container_path: "/x".into(),
        image: Some(cri_proto::v1::ImageSpec {
            image: "example.com/not/here:1".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let err = cri::try_create(&mut c, &pod_id, &pod, missing)
        .await
        .expect_err("not in the store");
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(
        err.message().contains("mounts[0].image"),
        "{}",
        err.message()
    );
    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}
