//! End-to-end: broken archives give one clear error and leave the store as it
//! was; a kill -9 during an import leaves no partial image and a store that
//! `picolet check --store` verifies; the preload folder.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Shim, eventually_async, test_images};
use serde_json::Value;

/// Copies an OCI layout so a test can break it.
fn copy_layout(src: &Path, dst: &Path) {
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(dst)
        .output()
        .expect("cp");
    assert!(out.status.success());
}

fn blob_path(layout: &Path, digest: &str) -> PathBuf {
    layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

fn write_blob(layout: &Path, data: &[u8]) -> String {
    let d = xtask::sha256(data);
    std::fs::write(blob_path(layout, &d), data).expect("write blob");
    d
}

/// Rewrites the first manifest of a layout with `edit`, fixing up index.json.
fn edit_manifest(layout: &Path, edit: impl FnOnce(&mut Value)) {
    let index_path = layout.join("index.json");
    let mut index: Value =
        serde_json::from_slice(&std::fs::read(&index_path).expect("index")).expect("json");
    let mdigest = index["manifests"][0]["digest"]
        .as_str()
        .expect("digest")
        .to_string();
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(blob_path(layout, &mdigest)).expect("manifest"))
            .expect("json");
    edit(&mut manifest);
    let raw = serde_json::to_vec(&manifest).expect("json");
    let d = write_blob(layout, &raw);
    index["manifests"][0]["digest"] = d.into();
    index["manifests"][0]["size"] = raw.len().into();
    std::fs::write(&index_path, serde_json::to_vec(&index).expect("json")).expect("write index");
}

/// A layer whose one entry is `../escaped` (tar builders refuse to write it).
fn escaping_layer() -> Vec<u8> {
    let mut tar = xtask::LayerBuilder::new()
        .file("xxxxxxxxxxxxxxxxxxxxxxxxxxxx", 0o644, b"evil")
        .finish(xtask::Compression::None)
        .tar;
    let name = b"../../escaped";
    tar[..100].fill(0);
    tar[..name.len()].copy_from_slice(name);
    let mut h = tar::Header::from_byte_slice(&tar[..512]).clone();
    h.set_cksum();
    tar[..512].copy_from_slice(h.as_bytes());
    tar
}

#[tokio::test(flavor = "multi_thread")]
async fn broken_archives_fail_clearly_and_leave_the_store_unchanged() {
    require_root!();
    let t = test_images();
    let shim = Shim::start();
    shim.import(&t.busybox_layout);
    let images_before = shim.list().await;
    let blobs_before = shim.store_entries("blobs/sha256");
    let snaps_before = shim.store_entries("snapshots/sha256");
    let scratch = tempfile::tempdir().expect("tempdir");

    // 1. Truncated archive.
    let truncated = scratch.path().join("truncated.tar");
    let full = std::fs::read(&t.docker_multi).expect("read");
    std::fs::write(&truncated, &full[..full.len() / 2]).expect("write");

    // 2. A blob whose content does not match its name.
    let wrong = scratch.path().join("wrong-digest.oci");
    copy_layout(&t.layered_layout, &wrong);
    let index: Value =
        serde_json::from_slice(&std::fs::read(wrong.join("index.json")).expect("index"))
            .expect("json");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(blob_path(
            &wrong,
            index["manifests"][0]["digest"].as_str().expect("d"),
        ))
        .expect("m"),
    )
    .expect("json");
    let top_layer = manifest["layers"][2]["digest"]
        .as_str()
        .expect("layer")
        .to_string();
    let mut data = std::fs::read(blob_path(&wrong, &top_layer)).expect("layer");
    data[600] ^= 0xff;
    std::fs::write(blob_path(&wrong, &top_layer), &data).expect("corrupt");

    // 3. Unknown layer media type.
    let unknown = scratch.path().join("unknown-media.oci");
    copy_layout(&t.layered_layout, &unknown);
    edit_manifest(&unknown, |m| {
        m["layers"][1]["mediaType"] = "application/x-picolet-bogus".into()
    });

    // 4. A layer with an entry that escapes the root.
    let escape = scratch.path().join("escape.oci");
    copy_layout(&t.layered_layout, &escape);
    let evil = escaping_layer();
    let evil_digest = write_blob(&escape, &evil);
    let mut config_digest = String::new();
    edit_manifest(&escape, |m| {
        m["layers"][2] = serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": evil_digest, "size": evil.len()});
        config_digest = m["config"]["digest"].as_str().expect("config").to_string();
    });
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(blob_path(&escape, &config_digest)).expect("cfg"))
            .expect("json");
    config["rootfs"]["diff_ids"][2] = xtask::sha256(&evil).into();
    let config_raw = serde_json::to_vec(&config).expect("json");
    let new_cfg = write_blob(&escape, &config_raw);
    edit_manifest(&escape, |m| {
        m["config"]["digest"] = new_cfg.clone().into();
        m["config"]["size"] = config_raw.len().into();
    });

    // 5. Not an archive at all.
    let garbage = scratch.path().join("garbage.tar");
    std::fs::write(&garbage, vec![0x42u8; 4096]).expect("write");

    let cases: [(&Path, &[&str]); 5] = [
        (&truncated, &["truncated.tar", "truncated"]),
        (&wrong, &[&top_layer, "wrong content"]),
        (
            &unknown,
            &[
                "unknown-media.oci",
                "application/x-picolet-bogus",
                "layer 1",
            ],
        ),
        (&escape, &["../../escaped", "escapes"]),
        (&garbage, &["garbage.tar"]),
    ];
    for (path, words) in cases {
        let out = shim.ctl(&["import", path.to_str().expect("utf8")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} imported", path.display());
        for w in words {
            assert!(
                stderr.contains(w),
                "error for {} lacks {w:?}: {stderr}",
                path.display()
            );
        }
        assert_eq!(
            shim.list().await,
            images_before,
            "store changed after {}",
            path.display()
        );
        assert_eq!(
            shim.store_entries("blobs/sha256"),
            blobs_before,
            "blobs left after {}",
            path.display()
        );
        assert_eq!(
            shim.store_entries("snapshots/sha256"),
            snaps_before,
            "snapshots left after {}",
            path.display()
        );
        assert!(shim.store_entries("ingest").is_empty());
        assert!(shim.store_entries("snapshots/tmp").is_empty());
    }
    assert!(
        !scratch.path().join("escaped").exists()
            && !shim.store().join("snapshots/escaped").exists()
    );
    // The good image still imports afterwards.
    shim.import(&t.layered_layout);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill9_during_import_leaves_no_partial_image_and_a_retry_succeeds() {
    require_root!();
    let mut shim = Shim::start();
    let scratch = tempfile::tempdir().expect("tempdir");
    let big = big_archive(scratch.path(), 128);

    let mut ctl = std::process::Command::new(common::picolet())
        .args(["ctl", "--socket"])
        .arg(shim.socket())
        .arg("import")
        .arg(&big)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("ctl import");
    // Kill the shim while the import is writing blobs or unpacking.
    let store = shim.store();
    eventually_async(
        "import to be under way",
        Duration::from_secs(60),
        async || {
            std::fs::read_dir(store.join("ingest")).is_ok_and(|mut d| d.next().is_some())
                || std::fs::read_dir(store.join("snapshots/tmp"))
                    .is_ok_and(|mut d| d.next().is_some())
        },
        String::new,
    )
    .await;
    shim.kill9();
    let _ = ctl.wait();
    // What the kill left is only leftovers to the verifier, before the next
    // shim start cleans them.
    let (ok, said) = common::check_store(&shim.root());
    assert!(ok, "store damaged by kill -9 mid-import: {said}");

    shim.spawn();
    assert!(
        shim.status(xtask::BIG_REF).await.is_none(),
        "partial image visible after kill -9"
    );
    assert!(shim.list().await.is_empty());
    assert!(
        shim.store_entries("ingest").is_empty(),
        "ingest not cleaned"
    );
    assert!(
        shim.store_entries("snapshots/tmp").is_empty(),
        "half-unpacked layer not cleaned"
    );
    assert!(
        shim.store_entries("blobs/sha256").is_empty(),
        "orphan blobs not collected"
    );

    shim.import(&big);
    assert!(shim.status(xtask::BIG_REF).await.is_some());
    shim.kill9();
    let (ok, said) = common::check_store(&shim.root());
    assert!(
        ok && said.contains(": 1 images, ") && !said.contains("leftover"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_layer_past_max_layer_size_fails_the_import_and_leaves_nothing() {
    require_root!();
    let shim = Shim::start_with_config("picolet:\n  maxLayerSize: 8Mi\n");
    let scratch = tempfile::tempdir().expect("tempdir");
    let big = big_archive(scratch.path(), 16);
    let out = shim.ctl(&["import", big.to_str().expect("utf8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("data/blob")
            && err.contains("the layer unpacks to more than 8 MiB: the limit is 8 MiB"),
        "{err}"
    );
    assert!(shim.list().await.is_empty());
    for sub in [
        "blobs/sha256",
        "snapshots/sha256",
        "snapshots/tmp",
        "ingest",
    ] {
        assert!(shim.store_entries(sub).is_empty(), "{sub} not empty");
    }
    // Small images still import under the limit.
    shim.import(&test_images().busybox_layout);
}

/// xtask's busybox + MB MiB of random data, as a docker-archive in `dir`.
fn big_archive(dir: &Path, mb: usize) -> PathBuf {
    let big = dir.join("big.tar");
    let base = xtask::busybox_layer(Path::new(
        &std::env::var("BUSYBOX").unwrap_or_else(|_| "/bin/busybox".into()),
    ))
    .expect("base");
    xtask::write_docker_archive(
        &big,
        &[(xtask::big_image(&base, mb), vec![xtask::BIG_REF.into()])],
    )
    .expect("big image");
    big
}

#[tokio::test(flavor = "multi_thread")]
async fn preload_folder_imports_at_start_and_on_arrival_and_survives_corrupt_files() {
    require_root!();
    let t = test_images();
    // Before the shim starts: one good archive, one corrupt.
    let dir = tempfile::Builder::new()
        .prefix("picolet-preload-")
        .tempdir()
        .expect("tempdir");
    let mut shim = Shim {
        dir,
        child: None,
        netns_holder: None,
        leak: None,
    };
    std::fs::create_dir_all(shim.images_dir()).expect("mkdir");
    std::fs::copy(&t.docker_multi, shim.images_dir().join("multi.tar")).expect("copy");
    std::fs::write(
        shim.images_dir().join("corrupt.tar"),
        b"this is not a tar archive at all",
    )
    .expect("write");
    std::fs::write(shim.images_dir().join("notes.txt"), b"ignored").expect("write");
    shim.spawn();

    eventually_async(
        "preloaded busybox",
        Duration::from_secs(30),
        async || shim.status("busybox:1.36").await.is_some(),
        String::new,
    )
    .await;
    eventually_async(
        "corrupt archive logged",
        Duration::from_secs(10),
        async || shim.log().contains("corrupt.tar"),
        String::new,
    )
    .await;

    // An archive moved in while running (written under a hidden name first).
    let tmp = shim.images_dir().join(".busybox.tar.part");
    std::fs::copy(&t.busybox_oci_archive, &tmp).expect("copy");
    let layered_tar = shim.dir.path().join("layered.tar");
    xtask::tar_dir(&t.layered_layout, &layered_tar).expect("tar");
    std::fs::rename(&layered_tar, shim.images_dir().join("layered.tar")).expect("move in");
    eventually_async(
        "layered preloaded on arrival",
        Duration::from_secs(30),
        async || {
            shim.status("localhost/picolet-test/layered:v1")
                .await
                .is_some()
        },
        String::new,
    )
    .await;

    // A restart skips what was imported already and still lists everything.
    // (The preloader records an archive right after its import commits.)
    let state = shim.store().join("preload.json");
    eventually_async(
        "preload state recorded",
        Duration::from_secs(10),
        async || std::fs::read_to_string(&state).is_ok_and(|s| s.contains("layered.tar")),
        String::new,
    )
    .await;
    shim.kill9();
    let log_len = shim.log().len();
    shim.spawn();
    eventually_async(
        "images listed after restart",
        Duration::from_secs(10),
        async || shim.list().await.len() == 2,
        String::new,
    )
    .await;
    common::consistently(
        "no import again after the restart",
        Duration::from_millis(500),
        || {
            let new_log = &shim.log()[log_len..];
            !new_log.contains("preloaded") && !new_log.contains("corrupt.tar")
        },
        || shim.log()[log_len..].to_string(),
    );
    let new_log = shim.log()[log_len..].to_string();
    assert!(
        !new_log.contains("preloaded"),
        "unchanged archives were imported again:\n{new_log}"
    );
    assert!(
        !new_log.contains("corrupt.tar"),
        "unchanged corrupt archive was retried:\n{new_log}"
    );
}
