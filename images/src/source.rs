//! Reading what an import brings: an OCI image layout directory, or a tarball
//! (`oci-archive` as skopeo writes it, or `docker save` / `podman save`
//! docker-archive; optionally gzip/zstd compressed as a whole).
//!
//! A tarball is read once, front to back: every file is streamed into the
//! blob store (files named `blobs/sha256/<hex>` are verified against their
//! name), and the small metadata files are kept in memory. A layout directory
//! is read lazily: only the blobs the chosen manifests reference are copied.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::blobs::Blobs;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::unpack::{clean, decompress};

/// Metadata files kept in memory (by archive path).
const METADATA: [&str; 4] = ["index.json", "oci-layout", "manifest.json", "repositories"];

/// Progress callback: (bytes read, total bytes or 0).
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// An opened import source.
pub(crate) struct Source {
    /// Shown in errors: the file or directory imported.
    pub name: String,
    /// `index.json`, `manifest.json`, `repositories`, `oci-layout` contents.
    pub metadata: HashMap<String, Vec<u8>>,
    /// Tarball files already in the blob store, by cleaned archive path.
    files: HashMap<String, (Digest, u64)>,
    /// Symlinked tarball entries (old docker archives): path → target path.
    links: HashMap<String, String>,
    /// OCI layout directory, read lazily.
    dir: Option<PathBuf>,
}

impl Source {
    /// Opens a layout directory or streams a tarball into `blobs`.
    pub fn open(path: &Path, blobs: &Blobs, progress: Progress<'_>) -> Result<Self> {
        let name = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(Error::io("open", path))?;
        if meta.is_dir() {
            let mut metadata = HashMap::new();
            for m in METADATA {
                let p = path.join(m);
                if p.is_file() {
                    let size = std::fs::metadata(&p).map_or(0, |m| m.len());
                    if size > crate::blobs::MAX_METADATA {
                        return Err(Error::BadArchive {
                            source_name: name,
                            what: crate::blobs::too_large(m, size),
                        });
                    }
                    metadata.insert(
                        m.to_string(),
                        std::fs::read(&p).map_err(Error::io("read", &p))?,
                    );
                }
            }
            if !metadata.contains_key("index.json") {
                return Err(Error::BadArchive {
                    source_name: name,
                    what: "directory has no index.json: not an OCI image layout".into(),
                });
            }
            progress(meta.len(), meta.len());
            return Ok(Self {
                name,
                metadata,
                files: HashMap::new(),
                links: HashMap::new(),
                dir: Some(path.to_path_buf()),
            });
        }
        let file = File::open(path).map_err(Error::io("open", path))?;
        let counting = CountingReader {
            inner: file,
            read: 0,
            total: meta.len(),
            reported: 0,
            progress,
        };
        let mut src = Self {
            name,
            metadata: HashMap::new(),
            files: HashMap::new(),
            links: HashMap::new(),
            dir: None,
        };
        src.stream_tarball(counting, blobs)?;
        progress(meta.len(), meta.len());
        Ok(src)
    }

    /// A source whose blobs are all in the store already (a registry pull
    /// fetched them): `name` is shown in errors.
    pub fn in_store(name: String) -> Self {
        Self {
            name,
            metadata: HashMap::new(),
            files: HashMap::new(),
            links: HashMap::new(),
            dir: None,
        }
    }

    fn bad(&self, what: impl Into<String>) -> Error {
        Error::BadArchive {
            source_name: self.name.clone(),
            what: what.into(),
        }
    }

    fn stream_tarball(&mut self, reader: impl Read, blobs: &Blobs) -> Result<()> {
        let stream = decompress(reader).map_err(|e| self.bad(format!("cannot read: {e}")))?;
        let mut archive = tar::Archive::new(stream);
        let entries = archive
            .entries()
            .map_err(|e| self.bad(format!("not a tar archive: {e}")))?;
        let mut seen = 0usize;
        for entry in entries {
            let mut entry =
                entry.map_err(|e| self.bad(format!("truncated or corrupt archive: {e}")))?;
            seen += 1;
            let raw = entry
                .path()
                .map_err(|e| self.bad(format!("bad entry path: {e}")))?
                .into_owned();
            let path = clean(&raw)
                .map_err(|why| self.entry_err(&raw.display().to_string(), why.to_string()))?
                .to_string_lossy()
                .into_owned();
            match entry.header().entry_type() {
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    let target = entry
                        .link_name()
                        .ok()
                        .flatten()
                        .map(|t| t.into_owned())
                        .ok_or_else(|| self.entry_err(&path, "link without target"))?;
                    let base = Path::new(&path).parent().unwrap_or(Path::new(""));
                    let joined = if entry.header().entry_type() == tar::EntryType::Link {
                        target
                    } else {
                        base.join(target)
                    };
                    let resolved = normalise(&joined)
                        .ok_or_else(|| self.entry_err(&path, "link escapes the archive"))?;
                    self.links.insert(path, resolved);
                    continue;
                }
                tar::EntryType::Regular | tar::EntryType::Continuous => {}
                _ => continue,
            }
            if METADATA.contains(&path.as_str()) {
                let size = entry.header().size().unwrap_or(0);
                if size > crate::blobs::MAX_METADATA {
                    return Err(self.entry_err(&path, crate::blobs::too_large(&path, size)));
                }
                let mut buf = Vec::new();
                (&mut entry)
                    .take(crate::blobs::MAX_METADATA)
                    .read_to_end(&mut buf)
                    .map_err(|e| self.entry_err(&path, format!("read: {e}")))?;
                self.metadata.insert(path, buf);
                continue;
            }
            let expected = path
                .strip_prefix("blobs/sha256/")
                .map(|hex| {
                    Digest::parse(&format!("sha256:{hex}"))
                        .map_err(|_| self.entry_err(&path, "blob name is not a sha256 digest"))
                })
                .transpose()?;
            let size = entry.header().size().ok();
            let stored = match &expected {
                Some(d) if blobs.contains(d) => {
                    io::copy(&mut entry, &mut io::sink())
                        .map_err(|e| self.entry_err(&path, format!("read: {e}")))?;
                    (d.clone(), size.unwrap_or(0))
                }
                _ => blobs
                    .ingest(&mut entry, expected.as_ref(), None)
                    .map_err(|e| match e {
                        Error::DigestMismatch { .. } | Error::SizeMismatch { .. } => {
                            self.entry_err(&path, e.to_string())
                        }
                        Error::Io { source, .. } if source.kind() != io::ErrorKind::StorageFull => {
                            self.entry_err(&path, format!("truncated or unreadable: {source}"))
                        }
                        other => other,
                    })?,
            };
            self.files.insert(path, stored);
        }
        if seen == 0 {
            return Err(self.bad("empty or not a tar archive"));
        }
        Ok(())
    }

    fn entry_err(&self, entry: &str, what: impl Into<String>) -> Error {
        Error::BadEntry {
            source_name: self.name.clone(),
            entry: entry.to_string(),
            what: what.into(),
        }
    }

    /// Makes sure blob `digest` is in the store (copying it from a layout
    /// directory, verified) and returns its size.
    pub fn fetch(&self, digest: &Digest, blobs: &Blobs) -> Result<u64> {
        if let Some(dir) = &self.dir {
            if !blobs.contains(digest) {
                let p = dir.join("blobs/sha256").join(digest.hex());
                let f =
                    File::open(&p).map_err(|_| self.bad(format!("blob {digest} is missing")))?;
                blobs.ingest(f, Some(digest), None).map_err(|e| match e {
                    Error::DigestMismatch { .. } => {
                        self.entry_err(&format!("blobs/sha256/{}", digest.hex()), e.to_string())
                    }
                    other => other,
                })?;
            }
        } else if !blobs.contains(digest) {
            return Err(self.bad(format!("blob {digest} is missing from the archive")));
        }
        std::fs::metadata(blobs.path(digest))
            .map(|m| m.len())
            .map_err(Error::io("stat", blobs.path(digest)))
    }

    /// The blob a tarball path (e.g. `abc/layer.tar`) was stored as.
    pub fn file(&self, path: &str) -> Result<(Digest, u64)> {
        let mut p = normalise(Path::new(path))
            .ok_or_else(|| self.entry_err(path, "path escapes the archive"))?;
        for _ in 0..16 {
            if let Some(found) = self.files.get(&p) {
                return Ok(found.clone());
            }
            match self.links.get(&p) {
                Some(next) => p = next.clone(),
                None => break,
            }
        }
        Err(self.bad(format!("file {path} named in manifest.json is missing")))
    }
}

/// Lexically normalises an archive path; `None` if it climbs above the root.
fn normalise(p: &Path) -> Option<String> {
    let mut out: Vec<&std::ffi::OsStr> = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => {
                out.pop()?;
            }
            _ => {}
        }
    }
    Some(
        out.iter()
            .map(|s| s.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
    )
}

struct CountingReader<'a, R> {
    inner: R,
    read: u64,
    total: u64,
    reported: u64,
    progress: Progress<'a>,
}

impl<R: Read> Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read - self.reported >= 1 << 20 {
            self.reported = self.read;
            (self.progress)(self.read, self.total);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_paths() {
        assert_eq!(normalise(Path::new("a/../b/./c")).as_deref(), Some("b/c"));
        assert_eq!(normalise(Path::new("../x")), None);
    }
}
