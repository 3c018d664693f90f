//! Content-addressed blob store: `blobs/sha256/<hex>`.
//!
//! A blob is streamed into a private temp file under `ingest/`, hashed while
//! written, fsynced, checked against the expected digest and only then renamed
//! into place. Readers therefore never see a partial or corrupt blob, and two
//! writers of the same blob each write their own temp file; the second rename
//! replaces identical content.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::digest::{Digest, HashingReader};
use crate::error::{Error, Result};
use crate::fsutil;

/// The blob directory of a store.
#[derive(Debug, Clone)]
pub struct Blobs {
    root: PathBuf,
    ingest: PathBuf,
    /// Downloads under way or interrupted: `partial/<hex>`, resumable.
    partial: PathBuf,
}

impl Blobs {
    /// Uses `<store>/blobs` and `<store>/ingest`, creating them.
    pub fn open(store: &Path) -> Result<Self> {
        let root = store.join("blobs").join("sha256");
        let ingest = store.join("ingest");
        let partial = store.join("partial");
        for d in [&root, &ingest, &partial] {
            fs::create_dir_all(d).map_err(Error::io("create", d))?;
        }
        Ok(Self {
            root,
            ingest,
            partial,
        })
    }

    /// Where a blob lives (whether or not it exists).
    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.root.join(digest.hex())
    }

    pub fn contains(&self, digest: &Digest) -> bool {
        self.path(digest).is_file()
    }

    /// Opens a stored blob.
    pub fn open_blob(&self, digest: &Digest) -> Result<File> {
        let p = self.path(digest);
        File::open(&p).map_err(Error::io("open blob", p))
    }

    /// Reads a whole (small) blob, e.g. a manifest or config; one larger
    /// than image metadata may be is an error, not a read into memory.
    pub fn read(&self, digest: &Digest) -> Result<Vec<u8>> {
        let p = self.path(digest);
        let size = fs::metadata(&p).map_err(Error::io("read blob", &p))?.len();
        if size > MAX_METADATA {
            return Err(Error::TooLarge(too_large(&format!("blob {digest}"), size)));
        }
        fs::read(&p).map_err(Error::io("read blob", p))
    }

    /// Streams `reader` into the store. With `expected`, the content must hash
    /// to it (and be `size` bytes when given); otherwise it is stored under the
    /// digest it hashes to. Returns the digest and size.
    pub fn ingest(
        &self,
        reader: impl Read,
        expected: Option<&Digest>,
        size: Option<u64>,
    ) -> Result<(Digest, u64)> {
        let mut tmp = tempfile_in(&self.ingest)?;
        let mut hashing = HashingReader::new(reader);
        let copied = io::copy(&mut hashing, &mut tmp.file);
        copied.map_err(Error::io("write blob", &tmp.path))?;
        let (digest, n) = hashing.finish();
        if let Some(expected) = expected
            && &digest != expected
        {
            return Err(Error::DigestMismatch {
                expected: expected.to_string(),
                actual: digest.to_string(),
                size: n,
            });
        }
        if let Some(size) = size
            && size != n
        {
            return Err(Error::SizeMismatch {
                digest: digest.to_string(),
                expected: size,
                actual: n,
            });
        }
        tmp.file
            .flush()
            .map_err(Error::io("write blob", &tmp.path))?;
        tmp.file
            .sync_all()
            .map_err(Error::io("fsync blob", &tmp.path))?;
        let dest = self.path(&digest);
        fs::rename(&tmp.path, &dest).map_err(Error::io("commit blob", &dest))?;
        tmp.committed = true;
        fsutil::sync_dir(&self.root)?;
        Ok((digest, n))
    }

    /// Where a download of `digest` is written until it is complete. One
    /// writer at a time (the puller serialises downloads of one digest).
    pub fn partial_path(&self, digest: &Digest) -> PathBuf {
        self.partial.join(digest.hex())
    }

    /// Makes a complete download visible as blob `digest`: the caller has
    /// verified its content hashes to `digest` while it streamed. fsync,
    /// rename, fsync of the directory.
    pub fn commit_partial(&self, digest: &Digest) -> Result<()> {
        let from = self.partial_path(digest);
        File::open(&from)
            .and_then(|f| f.sync_all())
            .map_err(Error::io("fsync blob", &from))?;
        let dest = self.path(digest);
        fs::rename(&from, &dest).map_err(Error::io("commit blob", &dest))?;
        fsutil::sync_dir(&self.root)
    }

    /// Drops partial downloads older than `max_age` (nobody resumes them).
    pub fn clean_partial(&self, max_age: std::time::Duration) -> Result<()> {
        let entries = match fs::read_dir(&self.partial) {
            Ok(e) => e,
            Err(e) => return Err(Error::io("list", &self.partial)(e)),
        };
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age > max_age);
            if old {
                fsutil::remove_file_if_exists(&e.path())?;
            }
        }
        Ok(())
    }

    /// Every stored blob.
    pub fn list(&self) -> Result<Vec<Digest>> {
        fsutil::digests_in(&self.root)
    }

    /// Deletes a blob; a missing blob is not an error.
    pub fn remove(&self, digest: &Digest) -> Result<()> {
        fsutil::remove_file_if_exists(&self.path(digest))
    }

    /// Removes temp files left by writers that died (call when no writer runs).
    pub fn clean_ingest(&self) -> Result<()> {
        fsutil::empty_dir(&self.ingest)
    }
}

/// A temp file that is removed on drop unless committed.
struct TempFile {
    file: File,
    path: PathBuf,
    committed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn tempfile_in(dir: &Path) -> Result<TempFile> {
    let path = dir.join(fsutil::unique_name("blob"));
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(Error::io("create", &path))?;
    Ok(TempFile {
        file,
        path,
        committed: false,
    })
}

/// Largest metadata file (and manifest, index or config blob) read into
/// memory; larger is an error that says so, not a truncated parse.
pub(crate) const MAX_METADATA: u64 = 16 << 20;

/// The error for metadata larger than [`MAX_METADATA`].
pub(crate) fn too_large(what: &str, size: u64) -> String {
    format!(
        "{what} is {} MiB: larger than the {} MiB allowed for image metadata",
        size >> 20,
        MAX_METADATA >> 20
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_ingest_and_wrong_digest_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::open(dir.path()).expect("open");
        let good = Digest::of(b"abc");
        let (d, n) = blobs
            .ingest(&b"abc"[..], Some(&good), Some(3))
            .expect("ingest");
        assert_eq!((d.clone(), n), (good.clone(), 3));
        assert_eq!(blobs.read(&good).expect("read"), b"abc");

        let err = blobs
            .ingest(&b"abd"[..], Some(&Digest::of(b"zzz")), None)
            .expect_err("mismatch");
        assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
        assert_eq!(blobs.list().expect("list"), vec![good]);
        assert_eq!(
            fs::read_dir(dir.path().join("ingest")).expect("ls").count(),
            0
        );
    }

    #[test]
    fn concurrent_writers_of_one_blob() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::open(dir.path()).expect("open");
        let data = vec![7u8; 1 << 20];
        let want = Digest::of(&data);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| blobs.ingest(&data[..], Some(&want), None).expect("ingest"));
            }
        });
        assert_eq!(blobs.read(&want).expect("read"), data);
        assert_eq!(blobs.list().expect("list").len(), 1);
    }

    #[test]
    fn partial_downloads_older_than_the_limit_go_and_younger_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::open(dir.path()).expect("open");
        let (old, young) = (Digest::of(b"old"), Digest::of(b"young"));
        fs::write(blobs.partial_path(&old), b"ol").expect("old");
        fs::write(blobs.partial_path(&young), b"yo").expect("young");
        let two_days_ago = filetime::FileTime::from_unix_time(
            filetime::FileTime::now().unix_seconds() - 2 * 86400,
            0,
        );
        filetime::set_file_mtime(blobs.partial_path(&old), two_days_ago).expect("mtime");
        blobs
            .clean_partial(std::time::Duration::from_secs(86400))
            .expect("clean");
        assert!(!blobs.partial_path(&old).exists());
        assert!(blobs.partial_path(&young).exists());
        // A complete download becomes the blob.
        fs::write(blobs.partial_path(&young), b"young").expect("rest");
        blobs.commit_partial(&young).expect("commit");
        assert_eq!(blobs.read(&young).expect("read"), b"young");
        assert!(!blobs.partial_path(&young).exists());
    }

    #[test]
    fn size_mismatch_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::open(dir.path()).expect("open");
        let err = blobs.ingest(&b"abc"[..], None, Some(4)).expect_err("size");
        assert!(
            matches!(
                err,
                Error::SizeMismatch {
                    expected: 4,
                    actual: 3,
                    ..
                }
            ),
            "{err}"
        );
    }
}
