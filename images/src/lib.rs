//! picolet's offline OCI image store.
//!
//! - [`blobs`]: content-addressed blobs, verified while written, never partial.
//! - [`source`] + [`import`]: OCI layout directories, oci-archive and
//!   docker-archive tarballs (several images and tags, multi-arch indexes
//!   resolved to the host platform, gzip/zstd/plain layers).
//! - [`unpack`] + [`snapshots`]: each distinct layer unpacked once, in
//!   overlayfs lower-layer form (whiteouts as 0:0 devices, opaque xattrs),
//!   confined to its root. A container rootfs is an overlay of
//!   [`ImageStore::layer_dirs`] plus its own upper/work dirs
//!   ([`overlay_options`]).
//! - [`store`]: image metadata (IDs, tags, repo digests), removal, GC, usage.
//! - [`preload`]: the folder whose archives are imported automatically.
//! - [`verify`]: `picolet check --store`, a read-only proof the store is whole.
//!
//! Unpacking whiteouts, ownership and device nodes needs root (CAP_MKNOD,
//! CAP_CHOWN, trusted.* xattrs); everything else works unprivileged.

pub mod blobs;
pub mod digest;
mod error;
pub mod fsutil;
mod import;
pub mod platform;
pub mod preload;
mod record;
pub mod reference;
pub mod snapshots;
pub mod source;
pub mod store;
pub mod unpack;
pub mod verify;

pub use digest::Digest;
pub use error::{Error, Result};
pub use platform::Platform;
pub use preload::Preloader;
pub use reference::Reference;
pub use snapshots::overlay_options;
pub use store::{ImageRecord, ImageStore, LayerRecord, Lease, StoreOptions, Usage};
