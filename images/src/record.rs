//! What the store records of an image: its manifest, config and layers.

use serde::{Deserialize, Serialize};

use crate::digest::Digest;

/// One layer of an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRecord {
    /// Blob digest (compressed, as in the manifest).
    pub digest: Digest,
    pub size: u64,
    pub media_type: String,
    /// Digest of the uncompressed tar: names the snapshot.
    pub diff_id: Digest,
}

/// A stored image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// Config digest: the image ID.
    pub id: Digest,
    pub manifest: Digest,
    pub manifest_size: u64,
    pub config_size: u64,
    /// Normalised `name:tag` references.
    pub repo_tags: Vec<String>,
    /// `name@manifest-digest` references.
    pub repo_digests: Vec<String>,
    /// Bottom layer first.
    pub layers: Vec<LayerRecord>,
    /// Seconds since the epoch.
    pub imported_at: u64,
    /// Keyed digests ([`crate::ImageStore::grant`]) of the CRI credentials that
    /// pulled it. Empty: anyone may use it (imported, preloaded or pulled
    /// without credentials). Else a pod is given it only with one of these
    /// credentials or after the registry accepts the pod's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pulled_with: Vec<String>,
}

impl ImageRecord {
    /// Bytes of content: manifest, config and compressed layers (as containerd counts).
    pub fn size(&self) -> u64 {
        self.manifest_size + self.config_size + self.layers.iter().map(|l| l.size).sum::<u64>()
    }
}
