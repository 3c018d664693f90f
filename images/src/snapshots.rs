//! Unpacked layers: `snapshots/sha256/<diff-id hex>/`, one per distinct layer
//! content, shared by every image that uses it. Each is unpacked into a temp
//! directory under `snapshots/tmp/`, flushed to disk (syncfs) and renamed
//! into place once complete, so a snapshot that exists is whole, also after
//! a power cut.

use std::fs;
use std::path::{Path, PathBuf};

use crate::blobs::Blobs;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::unpack::{UnpackOptions, unpack_layer};

#[derive(Debug, Clone)]
pub struct Snapshots {
    root: PathBuf,
    tmp: PathBuf,
    opts: UnpackOptions,
}

impl Snapshots {
    pub fn open(store: &Path, opts: UnpackOptions) -> Result<Self> {
        let root = store.join("snapshots").join("sha256");
        let tmp = store.join("snapshots").join("tmp");
        for d in [&root, &tmp] {
            fs::create_dir_all(d).map_err(Error::io("create", d))?;
        }
        Ok(Self { root, tmp, opts })
    }

    /// The directory of the layer with this diff ID.
    pub fn path(&self, diff_id: &Digest) -> PathBuf {
        self.root.join(diff_id.hex())
    }

    /// Unpacks blob `layer` unless a snapshot of `diff_id` exists already.
    /// Fails when the uncompressed content does not hash to `diff_id`.
    pub fn ensure(&self, blobs: &Blobs, layer: &Digest, diff_id: &Digest) -> Result<PathBuf> {
        let dest = self.path(diff_id);
        if dest.is_dir() {
            return Ok(dest);
        }
        let work = self.tmp.join(fsutil::unique_name("unpack"));
        fs::create_dir(&work).map_err(Error::io("create", &work))?;
        fs::set_permissions(&work, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(Error::io("chmod", &work))?;
        let result = (|| {
            let (actual, _) =
                unpack_layer(blobs.open_blob(layer)?, &work, layer.as_str(), self.opts)?;
            if &actual != diff_id {
                return Err(Error::DigestMismatch {
                    expected: format!("{diff_id} (diff id of layer {layer})"),
                    actual: actual.to_string(),
                    size: 0,
                });
            }
            // The files' data must be on disk before the rename makes the
            // snapshot count as whole: a power cut after an import returned
            // left ext4 with the names and 0-byte files (tests/vm/run.sh).
            fsutil::sync_filesystem(&work)?;
            match fs::rename(&work, &dest) {
                Ok(()) => Ok(()),
                // Another writer finished the same layer first.
                Err(_) if dest.is_dir() => fsutil::remove_dir_all_if_exists(&work),
                Err(e) => Err(Error::io("commit snapshot", &dest)(e)),
            }
        })();
        if result.is_err() {
            let _ = fsutil::remove_dir_all_if_exists(&work);
        }
        result?;
        fsutil::sync_dir(&self.root)?;
        Ok(dest)
    }

    /// Every complete snapshot, by diff ID.
    pub fn list(&self) -> Result<Vec<Digest>> {
        fsutil::digests_in(&self.root)
    }

    pub fn remove(&self, diff_id: &Digest) -> Result<()> {
        fsutil::remove_dir_all_if_exists(&self.path(diff_id))
    }

    /// Removes half-unpacked layers of writers that died.
    pub fn clean_tmp(&self) -> Result<()> {
        fsutil::empty_dir(&self.tmp)
    }
}

/// overlayfs mount options for a container rootfs: `lowers` top-most first.
pub fn overlay_options(lowers: &[PathBuf], upper: &Path, work: &Path) -> String {
    let lower = lowers
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    format!(
        "lowerdir={lower},upperdir={},workdir={}",
        upper.display(),
        work.display()
    )
}
