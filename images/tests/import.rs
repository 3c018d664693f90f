//! Store-level import tests that need no root: platform selection and
//! docker-archive naming, on images built by xtask.

use std::path::Path;

use images::{Error, ImageStore, Platform, StoreOptions, unpack::UnpackOptions};

fn store(dir: &Path, platform: &str) -> ImageStore {
    ImageStore::open_with(
        dir,
        StoreOptions {
            platform: Platform::parse(platform).expect("platform"),
            unpack: UnpackOptions {
                privileged: false,
                ..UnpackOptions::default()
            },
        },
    )
    .expect("open store")
}

fn multiarch_layout(dir: &Path) -> std::path::PathBuf {
    let layout = dir.join("multiarch.oci");
    xtask::write_oci_layout_multiarch(&layout, &xtask::multiarch_images()).expect("layout");
    layout
}

#[test]
fn multiarch_index_picks_the_store_platform() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let layout = multiarch_layout(tmp.path());
    for (platform, want) in [("linux/arm64/v8", "arm64"), ("linux/amd64", "amd64")] {
        let s = store(&tmp.path().join(want), platform);
        let recs = s.import(&layout, &|_, _| {}).expect("import");
        assert_eq!(recs[0].repo_tags, vec![xtask::MULTIARCH_REF.to_string()]);
        let dirs = s.layer_dirs(&recs[0]);
        let arch = std::fs::read_to_string(dirs[0].join("arch")).expect("arch");
        assert_eq!(arch.trim(), want, "platform {platform}");
        // Only the chosen platform's blobs stay in the store.
        let other = if want == "arm64" { "amd64" } else { "arm64" };
        assert!(
            !s.list()
                .iter()
                .any(|i| s.config(i).expect("config").architecture().to_string() == other)
        );
    }
}

#[test]
fn no_matching_platform_is_a_clear_error_and_stores_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let layout = multiarch_layout(tmp.path());
    let s = store(&tmp.path().join("s"), "linux/riscv64");
    let err = s.import(&layout, &|_, _| {}).expect_err("no riscv64 image");
    assert!(matches!(err, Error::NoPlatform { .. }), "{err}");
    assert!(
        err.to_string().contains("linux/riscv64") && err.to_string().contains("multiarch.oci"),
        "{err}"
    );
    assert!(s.list().is_empty());
    assert!(
        std::fs::read_dir(tmp.path().join("s/blobs/sha256"))
            .expect("ls")
            .next()
            .is_none()
    );
}

#[test]
fn docker_archive_without_repo_tags_uses_repositories() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let layer = xtask::LayerBuilder::new()
        .file("hello", 0o644, b"hi\n")
        .finish(xtask::Compression::None);
    let img = xtask::ImageDef {
        name: "x".into(),
        arch: xtask::host_arch().into(),
        layers: vec![layer],
        cmd: vec![],
        env: vec![],
        user: Some("1000:1000".into()),
    };
    let archive = tmp.path().join("legacy.tar");
    xtask::write_docker_archive(&archive, &[(img, vec!["legacy/app:v3".into()])]).expect("archive");
    // Rewrite manifest.json without RepoTags, as very old `docker save` did.
    let unpacked = tmp.path().join("unpacked");
    std::fs::create_dir(&unpacked).expect("mkdir");
    tar::Archive::new(std::fs::File::open(&archive).expect("open"))
        .unpack(&unpacked)
        .expect("untar");
    let mpath = unpacked.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&mpath).expect("read")).expect("json");
    m[0]["RepoTags"] = serde_json::Value::Null;
    std::fs::write(&mpath, serde_json::to_vec(&m).expect("json")).expect("write");
    let legacy = tmp.path().join("legacy-norepotags.tar.gz");
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&legacy).expect("create"),
        flate2::Compression::fast(),
    );
    let mut b = tar::Builder::new(gz);
    b.append_dir_all(".", &unpacked).expect("tar");
    b.into_inner().expect("tar").finish().expect("gz");

    let s = store(&tmp.path().join("s"), &Platform::host().to_string());
    let recs = s
        .import(&legacy, &|_, _| {})
        .expect("import gzip-compressed docker archive");
    assert_eq!(
        recs[0].repo_tags,
        vec!["docker.io/legacy/app:v3".to_string()]
    );
    assert_eq!(
        s.get("legacy/app:v3").map(|r| r.id),
        Some(recs[0].id.clone())
    );
}

#[test]
fn oversized_metadata_is_named_as_too_large_in_a_layout_and_in_a_tarball() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = store(&tmp.path().join("s"), "linux/amd64");
    // 17 MiB of whitespace around an empty index: valid JSON, too large.
    let mut big = vec![b' '; 17 << 20];
    big.extend_from_slice(b"{}");
    let layout = tmp.path().join("big.oci");
    std::fs::create_dir_all(&layout).expect("mkdir");
    std::fs::write(layout.join("index.json"), &big).expect("write");
    let err = s.import(&layout, &|_, _| {}).expect_err("too large");
    assert!(
        err.to_string()
            .contains("index.json is 17 MiB: larger than the 16 MiB allowed for image metadata"),
        "{err}"
    );
    // The same as a docker-archive's manifest.json (was: "EOF while
    // parsing" at the 16 MiB a silent cut left).
    let tar_path = tmp.path().join("big.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&tar_path).expect("create"));
    let mut h = tar::Header::new_gnu();
    h.set_size(big.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "manifest.json", &big[..])
        .expect("append");
    b.finish().expect("finish");
    let err = s.import(&tar_path, &|_, _| {}).expect_err("too large");
    assert!(
        err.to_string().contains("manifest.json")
            && err
                .to_string()
                .contains("is 17 MiB: larger than the 16 MiB"),
        "{err}"
    );
    assert!(s.list().is_empty());
}
