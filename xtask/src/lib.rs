//! Builds picolet's test and demo images offline, from the host's
//! `busybox-static` (`/bin/busybox`), in every format the image store reads:
//! OCI layout directories, oci-archive and docker-archive tarballs.
//!
//! Everything is deterministic (fixed mtimes, fixed compression settings), so
//! the same inputs give the same digests on every run.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

pub const BUSYBOX_REF: &str = "docker.io/library/busybox:latest";
pub const LAYERED_REF: &str = "localhost/picolet-test/layered:v1";
pub const MULTIARCH_REF: &str = "localhost/picolet-test/multiarch:v1";
pub const BIG_REF: &str = "localhost/picolet-bench/big:v1";
pub const WEB_REF: &str = "localhost/picolet/web:v1";

pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// Layer compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// One layer: its uncompressed tar and how it is stored.
#[derive(Debug, Clone)]
pub struct Layer {
    pub tar: Vec<u8>,
    pub compression: Compression,
}

impl Layer {
    pub fn blob(&self) -> Vec<u8> {
        match self.compression {
            Compression::None => self.tar.clone(),
            Compression::Gzip => {
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                enc.write_all(&self.tar)
                    .expect("writing to a Vec cannot fail");
                enc.finish().expect("writing to a Vec cannot fail")
            }
            Compression::Zstd => ruzstd::encoding::compress_to_vec(
                &self.tar[..],
                ruzstd::encoding::CompressionLevel::Fastest,
            ),
        }
    }

    pub fn media_type(&self) -> &'static str {
        match self.compression {
            Compression::None => "application/vnd.oci.image.layer.v1.tar",
            Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
            Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
        }
    }

    pub fn diff_id(&self) -> String {
        sha256(&self.tar)
    }
}

/// Builds a layer tar entry by entry, with fixed metadata.
pub struct LayerBuilder {
    b: tar::Builder<Vec<u8>>,
}

impl Default for LayerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl LayerBuilder {
    pub fn new() -> Self {
        Self {
            b: tar::Builder::new(Vec::new()),
        }
    }

    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        h
    }

    pub fn dir(mut self, path: &str, mode: u32) -> Self {
        let mut h = Self::header(tar::EntryType::Directory, mode, 0);
        self.b
            .append_data(&mut h, path, &[][..])
            .expect("tar to Vec");
        self
    }

    pub fn file(self, path: &str, mode: u32, data: &[u8]) -> Self {
        self.file_owned(path, mode, 0, 0, data)
    }

    pub fn file_owned(mut self, path: &str, mode: u32, uid: u64, gid: u64, data: &[u8]) -> Self {
        let mut h = Self::header(tar::EntryType::Regular, mode, data.len() as u64);
        h.set_uid(uid);
        h.set_gid(gid);
        self.b.append_data(&mut h, path, data).expect("tar to Vec");
        self
    }

    pub fn symlink(mut self, path: &str, target: &str) -> Self {
        let mut h = Self::header(tar::EntryType::Symlink, 0o777, 0);
        self.b
            .append_link(&mut h, path, target)
            .expect("tar to Vec");
        self
    }

    pub fn hardlink(mut self, path: &str, target: &str) -> Self {
        let mut h = Self::header(tar::EntryType::Link, 0o644, 0);
        self.b
            .append_link(&mut h, path, target)
            .expect("tar to Vec");
        self
    }

    /// An OCI whiteout for `path` (e.g. `data/a` → `data/.wh.a`).
    pub fn whiteout(self, path: &str) -> Self {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let wh = if dir.is_empty() {
            format!(".wh.{name}")
        } else {
            format!("{dir}/.wh.{name}")
        };
        self.file(&wh, 0o644, b"")
    }

    /// Marks `dir` opaque: lower layers' contents are hidden.
    pub fn opaque(self, dir: &str) -> Self {
        self.file(&format!("{dir}/.wh..wh..opq"), 0o644, b"")
    }

    pub fn finish(self, compression: Compression) -> Layer {
        Layer {
            tar: self.b.into_inner().expect("tar to Vec"),
            compression,
        }
    }
}

/// An image to write.
#[derive(Debug, Clone)]
pub struct ImageDef {
    /// Full reference, e.g. `docker.io/library/busybox:latest`.
    pub name: String,
    pub arch: String,
    pub layers: Vec<Layer>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub user: Option<String>,
}

impl ImageDef {
    pub fn config(&self) -> Vec<u8> {
        let mut cfg = json!({
            "Env": self.env,
            "Cmd": self.cmd,
            "WorkingDir": "/",
        });
        if let Some(u) = &self.user {
            cfg["User"] = json!(u);
        }
        let diff_ids: Vec<String> = self.layers.iter().map(Layer::diff_id).collect();
        serde_json::to_vec(&json!({
            "architecture": self.arch,
            "os": "linux",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": self.layers.iter().map(|_| json!({"created_by": "picolet xtask"})).collect::<Vec<_>>(),
        }))
        .expect("json")
    }
}

/// The busybox base layer: /bin/busybox from busybox-static, its applets as
/// symlinks, a minimal /etc.
pub fn busybox_layer(busybox: &Path) -> Result<Layer> {
    let bin = fs::read(busybox).with_context(|| {
        format!(
            "read {} (apt-get install busybox-static)",
            busybox.display()
        )
    })?;
    // A busybox of another arch (an arm64 guest's image built on x86_64)
    // lists its applets under qemu-user.
    let out = match Command::new(busybox).arg("--list").output() {
        Err(e) if e.raw_os_error() == Some(8) => {
            let qemu = match bin.get(18..20) {
                Some([0xb7, 0]) => "qemu-aarch64-static",
                Some([0x3e, 0]) => "qemu-x86_64-static",
                _ => bail!("{}: not an executable for this machine", busybox.display()),
            };
            Command::new(qemu)
                .arg(busybox)
                .arg("--list")
                .output()
                .with_context(|| format!("run {qemu} {} --list", busybox.display()))?
        }
        r => r.with_context(|| format!("run {} --list", busybox.display()))?,
    };
    let applets: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_string)
        .collect();
    if applets.is_empty() {
        bail!("{} --list printed no applets", busybox.display());
    }
    let mut l = LayerBuilder::new();
    for d in [
        "bin", "dev", "etc", "proc", "sys", "tmp", "root", "var", "home", "usr",
    ] {
        l = l.dir(d, if d == "tmp" { 0o1777 } else { 0o755 });
    }
    l = l.file("bin/busybox", 0o755, &bin);
    for a in &applets {
        l = l.symlink(&format!("bin/{a}"), "busybox");
    }
    l = l
        .file("etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\nuser:x:1000:1000:user:/home:/bin/sh\n")
        .file("etc/group", 0o644, b"root:x:0:\nnogroup:x:65534:\nuser:x:1000:\npredefined:x:50000:user\n")
        .symlink("usr/bin", "../bin");
    Ok(l.finish(Compression::Gzip))
}

fn image(name: &str, arch: &str, layers: Vec<Layer>) -> ImageDef {
    ImageDef {
        name: name.to_string(),
        arch: arch.to_string(),
        layers,
        cmd: vec!["sh".into()],
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
        user: None,
    }
}

/// The OCI architecture of this host.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub fn busybox_image(base: &Layer) -> ImageDef {
    image(BUSYBOX_REF, host_arch(), vec![base.clone()])
}

/// A web server: busybox and a page, `httpd` in the foreground on :80 as
/// its command (critest's `webServerTestImage`, the pod network tests).
pub fn web_image(base: &Layer) -> ImageDef {
    let page = LayerBuilder::new()
        .dir("www", 0o755)
        .file("www/index.html", 0o644, b"<h1>Welcome to picolet</h1>\n")
        .finish(Compression::Gzip);
    let mut img = image(WEB_REF, host_arch(), vec![base.clone(), page]);
    img.cmd = ["httpd", "-f", "-p", "80", "-h", "/www"]
        .map(String::from)
        .to_vec();
    img
}

/// Three layers: busybox (gzip, shared with [`busybox_image`]), a zstd layer
/// with files, and a plain layer that deletes, replaces and hides them.
pub fn layered_image(base: &Layer) -> ImageDef {
    let l2 = LayerBuilder::new()
        .dir("data", 0o755)
        .file("data/a", 0o644, b"a\n")
        .file("data/b", 0o644, b"b\n")
        .dir("data/opaque", 0o755)
        .file("data/opaque/old1", 0o644, b"old\n")
        .file("data/opaque/old2", 0o644, b"old\n")
        .file("etc/motd", 0o644, b"v1\n")
        .finish(Compression::Zstd);
    let l3 = LayerBuilder::new()
        .whiteout("data/a")
        .opaque("data/opaque")
        .file("data/opaque/new", 0o644, b"new\n")
        .file("etc/motd", 0o644, b"v2\n")
        .file_owned("data/owned", 0o600, 1000, 1000, b"secret\n")
        .file("data/h1", 0o644, b"hard\n")
        .hardlink("data/h2", "data/h1")
        .symlink("data/motd-link", "/etc/motd")
        .finish(Compression::None);
    image(LAYERED_REF, host_arch(), vec![base.clone(), l2, l3])
}

/// The same name for amd64 and arm64, each with `/arch` naming itself.
pub fn multiarch_images() -> Vec<ImageDef> {
    ["amd64", "arm64"]
        .iter()
        .map(|arch| {
            let l = LayerBuilder::new()
                .file("arch", 0o644, format!("{arch}\n").as_bytes())
                .finish(Compression::Gzip);
            image(MULTIARCH_REF, arch, vec![l])
        })
        .collect()
}

/// busybox plus a layer of `mb` MiB of incompressible data.
pub fn big_image(base: &Layer, mb: usize) -> ImageDef {
    let mut data = vec![0u8; mb << 20];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    let l = LayerBuilder::new()
        .file("data/blob", 0o644, &data)
        .finish(Compression::Gzip);
    image(BIG_REF, host_arch(), vec![base.clone(), l])
}

/// Writes blobs of one image into a layout; returns the manifest descriptor.
fn write_image_blobs(dir: &Path, img: &ImageDef) -> Result<Value> {
    let config = img.config();
    let mut layers = Vec::new();
    for l in &img.layers {
        let blob = l.blob();
        layers.push(json!({"mediaType": l.media_type(), "digest": write_blob(dir, &blob)?, "size": blob.len()}));
    }
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": write_blob(dir, &config)?, "size": config.len()},
        "layers": layers,
    }))?;
    Ok(json!({
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": write_blob(dir, &manifest)?,
        "size": manifest.len(),
        "platform": {"os": "linux", "architecture": img.arch},
    }))
}

fn write_blob(dir: &Path, data: &[u8]) -> Result<String> {
    let digest = sha256(data);
    let p = dir.join("blobs/sha256").join(&digest["sha256:".len()..]);
    fs::create_dir_all(p.parent().expect("has parent"))?;
    fs::write(&p, data).with_context(|| format!("write {}", p.display()))?;
    Ok(digest)
}

fn ref_annotations(name: &str) -> Value {
    let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
    json!({"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag})
}

fn write_index(dir: &Path, manifests: Vec<Value>) -> Result<()> {
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests});
    fs::write(dir.join("index.json"), serde_json::to_vec(&index)?)?;
    Ok(())
}

/// Writes an OCI image layout directory holding `images`.
pub fn write_oci_layout(dir: &Path, images: &[ImageDef]) -> Result<()> {
    fs::create_dir_all(dir)?;
    let mut manifests = Vec::new();
    for img in images {
        let mut desc = write_image_blobs(dir, img)?;
        desc["annotations"] = ref_annotations(&img.name);
        manifests.push(desc);
    }
    write_index(dir, manifests)
}

/// Writes one name for several platforms: index.json → nested image index.
pub fn write_oci_layout_multiarch(dir: &Path, images: &[ImageDef]) -> Result<()> {
    fs::create_dir_all(dir)?;
    let mut platforms = Vec::new();
    for img in images {
        platforms.push(write_image_blobs(dir, img)?);
    }
    let nested = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": platforms,
    }))?;
    let name = images.first().map(|i| i.name.as_str()).unwrap_or("x");
    let desc = json!({
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "digest": write_blob(dir, &nested)?,
        "size": nested.len(),
        "annotations": ref_annotations(name),
    });
    write_index(dir, vec![desc])
}

/// Tars a directory (e.g. an OCI layout into an oci-archive).
pub fn tar_dir(dir: &Path, out: &Path) -> Result<()> {
    let f = fs::File::create(out).with_context(|| format!("create {}", out.display()))?;
    let mut b = tar::Builder::new(f);
    b.mode(tar::HeaderMode::Deterministic);
    b.follow_symlinks(false);
    b.append_dir_all(".", dir)?;
    b.into_inner()?.sync_all()?;
    Ok(())
}

/// Writes a `docker save`-style archive (legacy layout: `<id>/layer.tar`,
/// `<config>.json`, `manifest.json`, `repositories`). `tags` are the familiar
/// names docker writes (`busybox:latest`), one list per image.
pub fn write_docker_archive(out: &Path, images: &[(ImageDef, Vec<String>)]) -> Result<()> {
    let f = fs::File::create(out).with_context(|| format!("create {}", out.display()))?;
    let mut b = tar::Builder::new(f);
    let mut written = BTreeSet::new();
    let mut manifest = Vec::new();
    let mut repositories = serde_json::Map::new();
    let mut add = |b: &mut tar::Builder<fs::File>, path: &str, data: &[u8]| -> Result<()> {
        if written.insert(path.to_string()) {
            let mut h = LayerBuilder::header(tar::EntryType::Regular, 0o644, data.len() as u64);
            b.append_data(&mut h, path, data)?;
        }
        Ok(())
    };
    for (img, tags) in images {
        let config = img.config();
        let config_name = format!("{}.json", &sha256(&config)["sha256:".len()..]);
        add(&mut b, &config_name, &config)?;
        let mut parent = String::new();
        let mut layer_paths = Vec::new();
        for l in &img.layers {
            let id = &sha256(format!("{parent}{}", l.diff_id()).as_bytes())["sha256:".len()..];
            add(&mut b, &format!("{id}/VERSION"), b"1.0")?;
            add(
                &mut b,
                &format!("{id}/json"),
                format!(r#"{{"id":"{id}"}}"#).as_bytes(),
            )?;
            add(&mut b, &format!("{id}/layer.tar"), &l.tar)?;
            layer_paths.push(format!("{id}/layer.tar"));
            parent = id.to_string();
        }
        for t in tags {
            let (repo, tag) = t.rsplit_once(':').unwrap_or((t, "latest"));
            repositories
                .entry(repo.to_string())
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("inserted as object")
                .insert(tag.to_string(), json!(parent));
        }
        manifest.push(json!({"Config": config_name, "RepoTags": tags, "Layers": layer_paths}));
    }
    add(&mut b, "manifest.json", &serde_json::to_vec(&manifest)?)?;
    add(&mut b, "repositories", &serde_json::to_vec(&repositories)?)?;
    b.into_inner()?.sync_all()?;
    Ok(())
}

/// Paths of the images [`build_test_images`] writes.
#[derive(Debug, Clone)]
pub struct TestImages {
    pub busybox_layout: PathBuf,
    pub busybox_oci_archive: PathBuf,
    pub layered_layout: PathBuf,
    pub multiarch_layout: PathBuf,
    pub docker_multi: PathBuf,
}

/// Writes every test image into `out`.
pub fn build_test_images(busybox: &Path, out: &Path) -> Result<TestImages> {
    fs::create_dir_all(out)?;
    let base = busybox_layer(busybox)?;
    let t = TestImages {
        busybox_layout: out.join("busybox.oci"),
        busybox_oci_archive: out.join("busybox.oci.tar"),
        layered_layout: out.join("layered.oci"),
        multiarch_layout: out.join("multiarch.oci"),
        docker_multi: out.join("docker-multi.tar"),
    };
    let busybox = busybox_image(&base);
    let layered = layered_image(&base);
    write_oci_layout(&t.busybox_layout, std::slice::from_ref(&busybox))?;
    tar_dir(&t.busybox_layout, &t.busybox_oci_archive)?;
    write_oci_layout(&t.layered_layout, std::slice::from_ref(&layered))?;
    write_oci_layout_multiarch(&t.multiarch_layout, &multiarch_images())?;
    write_docker_archive(
        &t.docker_multi,
        &[
            (
                busybox,
                vec!["busybox:latest".into(), "busybox:1.36".into()],
            ),
            (layered, vec![LAYERED_REF.into()]),
        ],
    )?;
    Ok(t)
}
