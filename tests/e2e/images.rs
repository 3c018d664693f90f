//! End-to-end: the real `picolet shim` serving CRI ImageService over its unix
//! socket, images imported with `picolet ctl import` and the preload folder.
//! Root: unpacking whiteouts and ownership, mounting overlayfs.

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::{Overlay, Shim, have, spec, test_images};
use cri_proto::v1::{ImageFsInfoRequest, PullImageRequest, RemoveImageRequest};
use tonic::Code;

fn skopeo_copy(from: &str, to: &str) {
    let out = Command::new("skopeo")
        .args(["--insecure-policy", "copy", "-q", from, to])
        .output()
        .expect("run skopeo");
    assert!(
        out.status.success(),
        "skopeo copy {from} {to}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn require_skopeo() -> bool {
    if have("skopeo") {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI must have skopeo installed"
    );
    eprintln!("SKIP skopeo-written archives: skopeo is not installed (apt-get install skopeo)");
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn imports_every_format_and_serves_them_through_cri() {
    require_root!();
    let t = test_images();
    let shim = Shim::start();
    let scratch = tempfile::tempdir().expect("tempdir");

    // OCI layout directory and our oci-archive.
    assert!(
        shim.import(&t.busybox_layout)
            .contains("docker.io/library/busybox:latest")
    );
    assert!(
        shim.import(&t.busybox_oci_archive)
            .contains("docker.io/library/busybox:latest")
    );
    // docker-archive with two images and three tags.
    shim.import(&t.docker_multi);
    // Multi-arch index: the host's platform is picked.
    shim.import(&t.multiarch_layout);
    // Archives as skopeo writes them.
    if require_skopeo() {
        let dock = scratch.path().join("sk-docker.tar");
        let oci = scratch.path().join("sk-oci.tar");
        // docker images cannot carry zstd layers: use busybox (gzip) there.
        skopeo_copy(
            &format!("oci:{}", t.busybox_layout.display()),
            &format!("docker-archive:{}:localhost/sk/docker:v1", dock.display()),
        );
        skopeo_copy(
            &format!("oci:{}", t.layered_layout.display()),
            &format!("oci-archive:{}:localhost/sk/oci:v2", oci.display()),
        );
        shim.import(&dock);
        shim.import(&oci);
    }

    let list = shim.list().await;
    let tags: Vec<String> = list.iter().flat_map(|i| i.repo_tags.clone()).collect();
    for want in [
        "docker.io/library/busybox:1.36",
        "docker.io/library/busybox:latest",
        "localhost/picolet-test/layered:v1",
        "localhost/picolet-test/multiarch:v1",
    ] {
        assert!(
            tags.contains(&want.to_string()),
            "{want} missing from {tags:?}"
        );
    }
    if have("skopeo") {
        assert!(
            tags.contains(&"localhost/sk/docker:v1".to_string()),
            "{tags:?}"
        );
        assert!(
            tags.contains(&"localhost/sk/oci:v2".to_string()),
            "{tags:?}"
        );
        // Same config → same image ID, whatever the archive format.
        let id = async |r: &str| shim.status(r).await.expect(r).0.id;
        assert_eq!(
            id("localhost/sk/oci:v2").await,
            id("localhost/picolet-test/layered:v1").await
        );
        assert_eq!(id("localhost/sk/docker:v1").await, id("busybox").await);
    }

    // Short names and IDs resolve; repo digests name the manifest.
    let (bb, info) = shim.status("busybox").await.expect("busybox by short name");
    assert!(bb.id.starts_with("sha256:"));
    assert!(
        bb.repo_digests
            .iter()
            .any(|d| d.starts_with("docker.io/library/busybox@sha256:")),
        "{:?}",
        bb.repo_digests
    );
    let info = info.expect("verbose");
    assert_eq!(info["imageSpec"]["config"]["Cmd"][0], "sh");
    assert!(shim.status(&bb.id).await.is_some());
    assert!(
        shim.status(bb.id.trim_start_matches("sha256:"))
            .await
            .is_some()
    );
    assert!(
        shim.status("busybox:nope").await.is_none(),
        "absent image must be nil, not an error"
    );

    // Multi-arch: the snapshot holds the host's variant.
    let dirs = shim.layer_dirs("localhost/picolet-test/multiarch:v1").await;
    let arch = std::fs::read_to_string(dirs[0].join("arch")).expect("arch file");
    assert_eq!(arch.trim(), xtask::host_arch());

    // PullImage: present → its ID without asking a registry; absent → the
    // registry is asked (here: nobody listens on localhost:443).
    let mut client = shim.client().await;
    let pulled = client
        .pull_image(PullImageRequest {
            image: Some(spec("busybox:1.36")),
            ..Default::default()
        })
        .await
        .expect("pull present")
        .into_inner();
    assert_eq!(pulled.image_ref, bb.id);
    let err = client
        .pull_image(PullImageRequest {
            image: Some(spec("localhost/absent:v1")),
            ..Default::default()
        })
        .await
        .expect_err("pull absent");
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
    assert!(
        err.message()
            .starts_with("localhost/absent:v1 (localhost): dial localhost"),
        "{}",
        err.message()
    );

    // `ctl images` shows them to people.
    let out = shim.ctl(&["images"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("docker.io/library/busybox") && text.contains("1.36"),
        "{text}"
    );
    // Its reader gone (`| grep -q`, `| head -1`): ctl dies of SIGPIPE as
    // crictl does, silently; it used to panic, and the release build abort.
    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    drop(read_end);
    let out = Command::new(common::picolet())
        .args(["ctl", "--socket"])
        .arg(shim.socket())
        .arg("images")
        .stdout(write_end)
        .output()
        .expect("run picolet ctl");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn layers_merge_under_overlayfs_with_whiteouts_applied() {
    require_root!();
    let t = test_images();
    let shim = Shim::start();
    shim.import(&t.layered_layout);
    let mut lowers = shim.layer_dirs("localhost/picolet-test/layered:v1").await;
    assert_eq!(lowers.len(), 3);
    lowers.reverse(); // overlay wants the top layer first
    let scratch = tempfile::tempdir().expect("tempdir");
    let ov = Overlay::mount(&lowers, scratch.path());
    let root = &ov.target;

    assert!(
        !root.join("data/a").exists(),
        "whiteout did not delete data/a"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("data/b")).expect("b"),
        "b\n"
    );
    let mut opaque: Vec<String> = std::fs::read_dir(root.join("data/opaque"))
        .expect("opaque dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    opaque.sort();
    assert_eq!(opaque, vec!["new"], "opaque dir must hide lower contents");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/motd")).expect("motd"),
        "v2\n"
    );
    let owned = std::fs::metadata(root.join("data/owned")).expect("owned");
    assert_eq!(
        (owned.uid(), owned.gid(), owned.mode() & 0o7777),
        (1000, 1000, 0o600)
    );
    let (h1, h2) = (
        std::fs::metadata(root.join("data/h1")).expect("h1"),
        std::fs::metadata(root.join("data/h2")).expect("h2"),
    );
    assert_eq!(h1.ino(), h2.ino(), "hard link not kept");
    assert_eq!(
        std::fs::read_link(root.join("data/motd-link")).expect("symlink"),
        Path::new("/etc/motd")
    );
    assert_eq!(
        std::fs::read_link(root.join("bin/sh")).expect("applet"),
        Path::new("busybox")
    );
    let bb = std::fs::metadata(root.join("bin/busybox")).expect("busybox");
    assert_eq!(bb.mode() & 0o777, 0o755);
    // tmp keeps its sticky bit (directory modes are applied after filling).
    assert_eq!(
        std::fs::metadata(root.join("tmp")).expect("tmp").mode() & 0o7777,
        0o1777
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn shared_layers_are_stored_once_and_remove_frees_space() {
    require_root!();
    let t = test_images();
    let shim = Shim::start();
    shim.import(&t.busybox_layout);
    shim.import(&t.layered_layout);
    // busybox's layer is the bottom layer of layered: 1 + 2 snapshots.
    assert_eq!(shim.store_entries("snapshots/sha256").len(), 3);
    let bb_layers = shim.layer_dirs("busybox").await;
    let layered_layers = shim.layer_dirs("localhost/picolet-test/layered:v1").await;
    assert_eq!(bb_layers[0], layered_layers[0]);

    let mut client = shim.client().await;
    let used = |r: cri_proto::v1::ImageFsInfoResponse| {
        r.image_filesystems[0]
            .used_bytes
            .as_ref()
            .expect("used")
            .value
    };
    let before = used(
        client
            .image_fs_info(ImageFsInfoRequest {})
            .await
            .expect("fsinfo")
            .into_inner(),
    );

    client
        .remove_image(RemoveImageRequest {
            image: Some(spec("localhost/picolet-test/layered:v1")),
        })
        .await
        .expect("remove layered");
    assert_eq!(
        shim.store_entries("snapshots/sha256").len(),
        1,
        "shared layer must survive"
    );
    assert!(shim.status("busybox").await.is_some());
    let after = used(
        client
            .image_fs_info(ImageFsInfoRequest {})
            .await
            .expect("fsinfo")
            .into_inner(),
    );
    assert!(
        after < before,
        "removing an image freed nothing: {before} -> {after}"
    );

    client
        .remove_image(RemoveImageRequest {
            image: Some(spec("busybox")),
        })
        .await
        .expect("remove busybox");
    assert!(shim.store_entries("snapshots/sha256").is_empty());
    assert!(shim.store_entries("blobs/sha256").is_empty());
    // Idempotent, as CRI demands.
    client
        .remove_image(RemoveImageRequest {
            image: Some(spec("busybox")),
        })
        .await
        .expect("remove again");
    // Malformed references are InvalidArgument.
    let err = client
        .remove_image(RemoveImageRequest {
            image: Some(spec("Not A Ref")),
        })
        .await
        .expect_err("bad ref");
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = client
        .remove_image(RemoveImageRequest { image: None })
        .await
        .expect_err("no image");
    assert_eq!(err.code(), Code::InvalidArgument);
}
