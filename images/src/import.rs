//! From an opened [`Source`] to image records: pick manifests (multi-arch
//! indexes resolved to the store's platform), verify every blob, unpack the
//! layers into snapshots. Nothing here touches the image metadata; the store
//! commits the returned records in one atomic write.

use oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, ImageManifest};
use serde::Deserialize;

use crate::blobs::Blobs;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::record::{ImageRecord, LayerRecord};
use crate::reference::Reference;
use crate::snapshots::Snapshots;
use crate::source::Source;

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const CONFIG_TYPES: [&str; 2] = [
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
];
const LAYER_TYPES: [&str; 9] = [
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
];
const NAME_ANNOTATION: &str = "io.containerd.image.name";
const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";

/// What [`Source`] is asked to produce.
pub(crate) struct Importer<'a> {
    pub source: &'a Source,
    pub blobs: &'a Blobs,
    pub snapshots: &'a Snapshots,
    pub platform: &'a Platform,
}

/// One image found in the source, before it is committed.
pub(crate) struct Candidate {
    pub manifest: Digest,
    pub names: Vec<Reference>,
    /// What the names' repo digests point at when that is not `manifest`
    /// (a pulled tag that resolved to a multi-arch index).
    pub repo_digest: Option<Digest>,
}

impl Importer<'_> {
    fn bad(&self, what: impl Into<String>) -> Error {
        Error::BadArchive {
            source_name: self.source.name.clone(),
            what: what.into(),
        }
    }

    /// Resolves, verifies and unpacks every image of the source.
    pub fn run(&self) -> Result<Vec<ImageRecord>> {
        let candidates = if let Some(index) = self.source.metadata.get("index.json") {
            self.oci_candidates(index)?
        } else if let Some(manifest) = self.source.metadata.get("manifest.json") {
            self.docker_candidates(manifest)?
        } else {
            return Err(
                self.bad("neither index.json (OCI) nor manifest.json (docker-archive) found")
            );
        };
        if candidates.is_empty() {
            return Err(self.bad("holds no image"));
        }
        candidates.into_iter().map(|c| self.image(c)).collect()
    }

    fn oci_candidates(&self, index: &[u8]) -> Result<Vec<Candidate>> {
        let index: ImageIndex =
            serde_json::from_slice(index).map_err(|e| self.bad(format!("index.json: {e}")))?;
        let mut out = Vec::new();
        let mut skipped_platform = false;
        for desc in index.manifests() {
            let names = names_from_annotations(desc);
            // A manifest listed directly with a platform for another host.
            if let Some(p) = desc.platform()
                && is_manifest(desc)
                && self.platform.score(p).is_none()
            {
                skipped_platform = true;
                continue;
            }
            let manifest = self.resolve(desc, 0)?;
            out.push(Candidate {
                manifest,
                names,
                repo_digest: None,
            });
        }
        if out.is_empty() && skipped_platform {
            return Err(Error::NoPlatform {
                source_name: self.source.name.clone(),
                platform: self.platform.to_string(),
            });
        }
        Ok(out)
    }

    /// Follows indexes down to the manifest for our platform.
    fn resolve(&self, desc: &Descriptor, depth: u8) -> Result<Digest> {
        let digest = Digest::parse(desc.digest().as_ref())?;
        self.source.fetch(&digest, self.blobs)?;
        let media_type = desc.media_type().to_string();
        if media_type != OCI_INDEX && media_type != DOCKER_LIST {
            return Ok(digest);
        }
        if depth > 4 {
            return Err(self.bad("indexes nested too deep"));
        }
        let index: ImageIndex = serde_json::from_slice(&self.blobs.read(&digest)?)
            .map_err(|e| self.bad(format!("index {digest}: {e}")))?;
        let best = index
            .manifests()
            .iter()
            .filter_map(|m| {
                m.platform()
                    .as_ref()
                    .and_then(|p| self.platform.score(p))
                    .map(|s| (s, m))
            })
            .max_by_key(|(s, _)| *s)
            .map(|(_, m)| m)
            .ok_or_else(|| Error::NoPlatform {
                source_name: self.source.name.clone(),
                platform: self.platform.to_string(),
            })?;
        self.resolve(best, depth + 1)
    }

    fn docker_candidates(&self, manifest_json: &[u8]) -> Result<Vec<Candidate>> {
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Entry {
            config: String,
            #[serde(default)]
            repo_tags: Option<Vec<String>>,
            layers: Vec<String>,
        }
        let entries: Vec<Entry> = serde_json::from_slice(manifest_json)
            .map_err(|e| self.bad(format!("manifest.json: {e}")))?;
        let legacy = self.legacy_repositories()?;
        let mut out = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let (config, config_size) = self.source.file(&e.config)?;
            let mut layers = Vec::new();
            for l in &e.layers {
                let (digest, size) = self.source.file(l)?;
                let head = {
                    let mut f = self.blobs.open_blob(&digest)?;
                    let mut buf = [0u8; 4];
                    let n = std::io::Read::read(&mut f, &mut buf)
                        .map_err(Error::io("read", self.blobs.path(&digest)))?;
                    buf[..n].to_vec()
                };
                let media_type = match crate::unpack::Compression::detect(&head) {
                    crate::unpack::Compression::None => {
                        "application/vnd.docker.image.rootfs.diff.tar"
                    }
                    crate::unpack::Compression::Gzip => {
                        "application/vnd.docker.image.rootfs.diff.tar.gzip"
                    }
                    crate::unpack::Compression::Zstd => {
                        "application/vnd.oci.image.layer.v1.tar+zstd"
                    }
                };
                layers.push(serde_json::json!({"mediaType": media_type, "size": size, "digest": digest.as_str()}));
            }
            // The manifest `docker save` implies, as containerd synthesises it.
            let manifest = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": DOCKER_MANIFEST,
                "config": {"mediaType": CONFIG_TYPES[1], "size": config_size, "digest": config.as_str()},
                "layers": layers,
            });
            let bytes = serde_json::to_vec(&manifest).map_err(|e| self.bad(e.to_string()))?;
            let (digest, _) = self.blobs.ingest(&bytes[..], None, None)?;
            let tags = match &e.repo_tags {
                Some(t) => t.clone(),
                None => e
                    .layers
                    .last()
                    .and_then(|top| top.split('/').next())
                    .and_then(|id| legacy.get(id).cloned())
                    .unwrap_or_default(),
            };
            let names = tags
                .iter()
                .map(|t| Reference::parse(t))
                .collect::<Result<Vec<_>>>()
                .map_err(|err| self.bad(format!("manifest.json entry {i}: {err}")))?;
            out.push(Candidate {
                manifest: digest,
                names,
                repo_digest: None,
            });
        }
        Ok(out)
    }

    /// `repositories` (`{"repo": {"tag": "<top layer id>"}}`) as top layer id → tags.
    fn legacy_repositories(&self) -> Result<std::collections::HashMap<String, Vec<String>>> {
        let mut out: std::collections::HashMap<String, Vec<String>> = Default::default();
        let Some(raw) = self.source.metadata.get("repositories") else {
            return Ok(out);
        };
        let repos: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
            serde_json::from_slice(raw).map_err(|e| self.bad(format!("repositories: {e}")))?;
        for (repo, tags) in repos {
            for (tag, id) in tags {
                out.entry(id).or_default().push(format!("{repo}:{tag}"));
            }
        }
        Ok(out)
    }

    /// Verifies, unpacks and describes one image whose manifest is known.
    pub fn image(&self, c: Candidate) -> Result<ImageRecord> {
        let manifest_bytes = self.blobs.read(&c.manifest)?;
        let manifest: ImageManifest = serde_json::from_slice(&manifest_bytes)
            .map_err(|e| self.bad(format!("manifest {}: {e}", c.manifest)))?;
        if let Some(mt) = manifest.media_type() {
            let mt = mt.to_string();
            if mt != OCI_MANIFEST && mt != DOCKER_MANIFEST {
                return Err(Error::UnknownMediaType {
                    source_name: self.source.name.clone(),
                    what: format!("manifest {}", c.manifest),
                    media_type: mt,
                });
            }
        }
        let config_desc = manifest.config();
        let config_type = config_desc.media_type().to_string();
        if !CONFIG_TYPES.contains(&config_type.as_str()) {
            return Err(Error::UnknownMediaType {
                source_name: self.source.name.clone(),
                what: format!("config of manifest {}", c.manifest),
                media_type: config_type,
            });
        }
        let config_digest = Digest::parse(config_desc.digest().as_ref())?;
        let config_size = self.source.fetch(&config_digest, self.blobs)?;
        let config: ImageConfiguration = serde_json::from_slice(&self.blobs.read(&config_digest)?)
            .map_err(|e| self.bad(format!("config {config_digest}: {e}")))?;
        let arch = config.architecture().to_string();
        if config.os().to_string() != self.platform.os || arch != self.platform.architecture {
            return Err(Error::NoPlatform {
                source_name: format!("{} (image is {}/{arch})", self.source.name, config.os()),
                platform: self.platform.to_string(),
            });
        }
        let diff_ids = config.rootfs().diff_ids();
        if diff_ids.len() != manifest.layers().len() {
            return Err(self.bad(format!(
                "manifest {} has {} layers but its config lists {} diff ids",
                c.manifest,
                manifest.layers().len(),
                diff_ids.len()
            )));
        }
        let mut layers = Vec::new();
        for (i, (desc, diff_id)) in manifest.layers().iter().zip(diff_ids).enumerate() {
            let media_type = desc.media_type().to_string();
            if !LAYER_TYPES.contains(&media_type.as_str()) {
                return Err(Error::UnknownMediaType {
                    source_name: self.source.name.clone(),
                    what: format!("layer {i} of manifest {}", c.manifest),
                    media_type,
                });
            }
            let digest = Digest::parse(desc.digest().as_ref())?;
            let size = self.source.fetch(&digest, self.blobs)?;
            let diff_id = Digest::parse(diff_id)?;
            self.snapshots.ensure(self.blobs, &digest, &diff_id)?;
            layers.push(LayerRecord {
                digest,
                size,
                media_type,
                diff_id,
            });
        }
        let mut repo_tags: Vec<String> = c
            .names
            .iter()
            .filter(|n| n.tag.is_some())
            .map(|n| n.to_string())
            .collect();
        repo_tags.sort();
        repo_tags.dedup();
        let points_at = c.repo_digest.as_ref().unwrap_or(&c.manifest);
        let mut repo_digests: Vec<String> =
            c.names.iter().map(|n| n.with_digest(points_at)).collect();
        repo_digests.sort();
        repo_digests.dedup();
        Ok(ImageRecord {
            id: config_digest,
            manifest: c.manifest,
            manifest_size: manifest_bytes.len() as u64,
            config_size,
            repo_tags,
            repo_digests,
            layers,
            imported_at: now_secs(),
            pulled_with: Vec::new(),
        })
    }
}

fn is_manifest(desc: &Descriptor) -> bool {
    let mt = desc.media_type().to_string();
    mt == OCI_MANIFEST || mt == DOCKER_MANIFEST
}

/// Image names from an index descriptor's annotations. A bare
/// `org.opencontainers.image.ref.name` such as `latest` names no repository
/// and is ignored (the image is imported untagged), as with `ctr import`.
fn names_from_annotations(desc: &Descriptor) -> Vec<Reference> {
    let Some(ann) = desc.annotations() else {
        return Vec::new();
    };
    let full = ann
        .get(NAME_ANNOTATION)
        .and_then(|n| Reference::parse(n).ok());
    let ref_name = ann
        .get(REF_NAME_ANNOTATION)
        .filter(|n| n.contains(':') || n.contains('/'))
        .and_then(|n| Reference::parse(n).ok());
    full.into_iter().chain(ref_name).collect()
}

pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
