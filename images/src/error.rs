//! The image store's error type. I/O variants carry the path that failed;
//! import errors name the archive entry or layer at fault.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid digest {0:?} (want sha256:<64 lowercase hex>)")]
    BadDigest(String),
    #[error("invalid image reference {reference:?}: {why}")]
    BadReference { reference: String, why: String },
    #[error("blob {expected} has wrong content: read {actual} ({size} bytes)")]
    DigestMismatch {
        expected: String,
        actual: String,
        size: u64,
    },
    #[error("blob {digest}: expected {expected} bytes, got {actual}")]
    SizeMismatch {
        digest: String,
        expected: u64,
        actual: u64,
    },
    #[error("{source_name}: {what}")]
    BadArchive { source_name: String, what: String },
    #[error("{source_name}: entry {entry:?}: {what}")]
    BadEntry {
        source_name: String,
        entry: String,
        what: String,
    },
    #[error("{source_name}: {what}: unknown media type {media_type:?}")]
    UnknownMediaType {
        source_name: String,
        what: String,
        media_type: String,
    },
    #[error("{source_name}: no image for platform {platform}")]
    NoPlatform {
        source_name: String,
        platform: String,
    },
    /// Metadata (a manifest, index or config) too large to read into memory.
    #[error("{0}")]
    TooLarge(String),
    #[error("image {0:?} not found")]
    NotFound(String),
    #[error("image {image} is in use by a container")]
    InUse { image: String },
    #[error("store metadata {path}: {source}")]
    Metadata {
        path: PathBuf,
        source: serde_json::Error,
    },
}

impl Error {
    /// Wraps an I/O error with the operation and path.
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
