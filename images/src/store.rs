//! The image store: images (by ID = config digest) with their tags and repo
//! digests, on top of [`Blobs`] and [`Snapshots`].
//!
//! Metadata is one JSON file, `images.json`, rewritten atomically on every
//! change, so an image is either fully there or not at all: an import writes
//! blobs and snapshots first and the record last. Writers (import, remove,
//! GC) are serialised by one lock; readers see the last committed state.
//! What a crashed writer left (temp files, half-unpacked layers, unreferenced
//! blobs) is removed by [`ImageStore::open`].

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use oci_spec::image::ImageConfiguration;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::blobs::Blobs;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::import::{Candidate, Importer};
use crate::platform::Platform;
pub use crate::record::{ImageRecord, LayerRecord};
use crate::reference::Reference;
use crate::snapshots::Snapshots;
use crate::source::{Progress, Source};
use crate::unpack::UnpackOptions;

pub(crate) const METADATA_FILE: &str = "images.json";
/// The key of [`ImageStore::grant`], beside the metadata.
const GRANT_KEY_FILE: &str = "grant.key";
/// Credentials kept per image: the most recent win.
const MAX_GRANTS: usize = 16;
/// Partly downloaded blobs untouched this long are dropped by GC (at open,
/// after imports and removals); younger ones let a pull resume.
const PARTIAL_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Metadata {
    version: u32,
    pub(crate) images: Vec<ImageRecord>,
}

/// Options for [`ImageStore::open_with`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Platform chosen from multi-arch indexes; the host's by default.
    pub platform: Platform,
    pub unpack: UnpackOptions,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            platform: Platform::host(),
            unpack: UnpackOptions::default(),
        }
    }
}

/// Bytes and inodes the store uses on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub inodes: u64,
}

/// The image store. Thread-safe; share it in an `Arc`.
#[derive(Debug)]
pub struct ImageStore {
    root: PathBuf,
    blobs: Blobs,
    snapshots: Snapshots,
    platform: Platform,
    images: RwLock<Vec<ImageRecord>>,
    /// Serialises writers.
    write: Mutex<()>,
    /// In-use counts by image ID (containers using the image).
    pins: Mutex<HashMap<Digest, usize>>,
    /// Blobs and snapshots (by diff ID) of pulls under way, with counts:
    /// GC spares them although no image references them yet.
    leases: Arc<Mutex<HashMap<Digest, usize>>>,
    /// The secret [`ImageStore::grant`] keys its digests with.
    grant_key: Mutex<Option<[u8; 32]>>,
}

/// Keeps blobs and snapshots a pull is writing from GC until dropped.
#[derive(Debug)]
pub struct Lease {
    held: Vec<Digest>,
    leases: Arc<Mutex<HashMap<Digest, usize>>>,
}

impl Lease {
    /// Adds a digest (a blob or a diff ID) to the lease.
    pub fn add(&mut self, digest: &Digest) {
        *self
            .leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(digest.clone())
            .or_default() += 1;
        self.held.push(digest.clone());
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        for d in self.held.drain(..) {
            if let Some(n) = leases.get_mut(&d) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    leases.remove(&d);
                }
            }
        }
    }
}

impl ImageStore {
    /// Opens (creating) a store at `root` with default options.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(root, StoreOptions::default())
    }

    /// Opens a store, loads its metadata and removes what crashed writers left.
    /// Must not run while another process writes the same store.
    pub fn open_with(root: impl AsRef<Path>, opts: StoreOptions) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        fs::create_dir_all(&root).map_err(Error::io("create", &root))?;
        let meta_path = root.join(METADATA_FILE);
        let meta: Metadata = match fs::read(&meta_path) {
            Ok(raw) => serde_json::from_slice(&raw).map_err(|source| Error::Metadata {
                path: meta_path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Metadata::default(),
            Err(e) => return Err(Error::io("read", &meta_path)(e)),
        };
        let store = Self {
            blobs: Blobs::open(&root)?,
            snapshots: Snapshots::open(&root, opts.unpack)?,
            root,
            platform: opts.platform,
            images: RwLock::new(meta.images),
            write: Mutex::new(()),
            pins: Mutex::new(HashMap::new()),
            leases: Arc::default(),
            grant_key: Mutex::new(None),
        };
        store.blobs.clean_ingest()?;
        store.snapshots.clean_tmp()?;
        store.gc()?;
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Imports every image of an OCI layout directory or image archive.
    /// Tags an image brings move to it from any image that had them.
    pub fn import(&self, path: &Path, progress: Progress<'_>) -> Result<Vec<ImageRecord>> {
        let _w = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let result = (|| {
            let source = Source::open(path, &self.blobs, progress)?;
            let importer = Importer {
                source: &source,
                blobs: &self.blobs,
                snapshots: &self.snapshots,
                platform: &self.platform,
            };
            let new = importer.run()?;
            self.commit(|images| {
                for rec in &new {
                    merge(images, rec.clone());
                }
            })?;
            Ok(new)
        })();
        // Drop what the archive brought but no image references (other
        // platforms, replaced manifests) or what a failed import stored.
        self.gc_locked()?;
        result
    }

    /// The content-addressed blobs (a registry pull writes them).
    pub fn blobs(&self) -> &Blobs {
        &self.blobs
    }

    /// The platform multi-arch indexes are resolved to.
    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    /// An empty lease; what is added to it GC leaves alone until it drops.
    pub fn lease(&self) -> Lease {
        Lease {
            held: Vec::new(),
            leases: self.leases.clone(),
        }
    }

    /// Unpacks a complete layer blob into its snapshot (once per diff ID),
    /// so a pull unpacks each layer as it arrives.
    pub fn unpack_layer(&self, blob: &Digest, diff_id: &Digest) -> Result<()> {
        self.snapshots.ensure(&self.blobs, blob, diff_id).map(drop)
    }

    /// Records an image whose manifest, config and layers are all in the
    /// blob store (a registry pull fetched them), named `name`; its repo
    /// digest is `name@points_at` (the digest the tag resolved to, an index
    /// for a multi-arch image). `source_name` is shown in errors.
    pub fn commit_pulled(
        &self,
        source_name: String,
        manifest: &Digest,
        name: &Reference,
        points_at: &Digest,
        grant: Option<String>,
    ) -> Result<ImageRecord> {
        let _w = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let source = Source::in_store(source_name);
        let importer = Importer {
            source: &source,
            blobs: &self.blobs,
            snapshots: &self.snapshots,
            platform: &self.platform,
        };
        let mut name = name.clone();
        name.digest = None;
        let mut rec = importer.image(Candidate {
            manifest: manifest.clone(),
            names: vec![name],
            repo_digest: Some(points_at.clone()),
        })?;
        rec.pulled_with.extend(grant);
        self.commit(|images| merge(images, rec.clone()))?;
        Ok(self.get(rec.id.as_str()).unwrap_or(rec))
    }

    /// A digest of `secrets` (a credential's parts) keyed with a random
    /// secret kept in the store (`grant.key`, mode 0600): tells credentials
    /// apart without keeping them, and a copy of the metadata alone does
    /// not let anyone guess a weak password offline.
    pub fn grant(&self, secrets: &[&str]) -> Result<String> {
        let mut cached = self.grant_key.lock().unwrap_or_else(|p| p.into_inner());
        let key = match *cached {
            Some(k) => k,
            None => *cached.insert(load_or_create_key(&self.root.join(GRANT_KEY_FILE))?),
        };
        drop(cached);
        let mut h = Sha256::new();
        h.update(key);
        for s in secrets {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Ok(hex::encode(h.finalize()))
    }

    /// All images.
    pub fn list(&self) -> Vec<ImageRecord> {
        self.images
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Finds an image by ID (`sha256:<hex>` or `<hex>`), tag (`busybox`,
    /// `docker.io/library/busybox:1`) or repo digest (`name@sha256:...`).
    pub fn get(&self, reference: &str) -> Option<ImageRecord> {
        let images = self.images.read().unwrap_or_else(|p| p.into_inner());
        find(&images, reference).map(|i| images[i].clone())
    }

    /// The image's config (for entrypoint, env, user, ...).
    pub fn config(&self, image: &ImageRecord) -> Result<ImageConfiguration> {
        let raw = self.blobs.read(&image.id)?;
        serde_json::from_slice(&raw).map_err(|source| Error::Metadata {
            path: self.blobs.path(&image.id),
            source,
        })
    }

    /// Raw config JSON.
    pub fn config_json(&self, image: &ImageRecord) -> Result<Vec<u8>> {
        self.blobs.read(&image.id)
    }

    /// Snapshot directories of an image's layers, top-most first (overlayfs
    /// `lowerdir` order).
    pub fn layer_dirs(&self, image: &ImageRecord) -> Vec<PathBuf> {
        image
            .layers
            .iter()
            .rev()
            .map(|l| self.snapshots.path(&l.diff_id))
            .collect()
    }

    /// Removes an image with all its tags, then frees blobs and snapshots no
    /// other image references. Fails with [`Error::InUse`] while pinned.
    /// Returns `Ok(false)` when there was no such image (idempotent).
    pub fn remove(&self, reference: &str) -> Result<bool> {
        let _w = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let Some(id) = self.get(reference).map(|r| r.id) else {
            return Ok(false);
        };
        if self
            .pins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .is_some_and(|n| *n > 0)
        {
            return Err(Error::InUse {
                image: id.to_string(),
            });
        }
        self.commit(|images| images.retain(|i| i.id != id))?;
        self.gc_locked()?;
        Ok(true)
    }

    /// Marks an image as used by a container: it cannot be removed until unpinned.
    pub fn pin(&self, id: &Digest) {
        *self
            .pins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.clone())
            .or_default() += 1;
    }

    pub fn unpin(&self, id: &Digest) {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = pins.get_mut(id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                pins.remove(id);
            }
        }
    }

    /// Frees every blob and snapshot no image references.
    pub fn gc(&self) -> Result<()> {
        let _w = self.write.lock().unwrap_or_else(|p| p.into_inner());
        self.gc_locked()
    }

    fn gc_locked(&self) -> Result<()> {
        let images = self.list();
        let leased = self
            .leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut blobs: HashSet<&Digest> = leased.keys().collect();
        let mut snaps: HashSet<&Digest> = leased.keys().collect();
        for i in &images {
            blobs.insert(&i.id);
            blobs.insert(&i.manifest);
            for l in &i.layers {
                blobs.insert(&l.digest);
                snaps.insert(&l.diff_id);
            }
        }
        for d in self.blobs.list()? {
            if !blobs.contains(&d) {
                self.blobs.remove(&d)?;
            }
        }
        // Downloads nobody resumed for a day (one being written is younger).
        self.blobs.clean_partial(PARTIAL_MAX_AGE)?;
        for d in self.snapshots.list()? {
            if !snaps.contains(&d) {
                tracing::debug!(diff_id = %d, "removing unreferenced snapshot");
                self.snapshots.remove(&d)?;
            }
        }
        Ok(())
    }

    /// Disk bytes (allocated blocks) and inodes under the store, hard links counted once.
    pub fn usage(&self) -> Result<Usage> {
        let mut seen = HashSet::new();
        let mut usage = Usage {
            bytes: 0,
            inodes: 0,
        };
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("list", &dir)(e)),
            };
            for e in entries.flatten() {
                let Ok(m) = e.metadata() else { continue };
                if seen.insert((m.dev(), m.ino())) {
                    usage.bytes += m.blocks() * 512;
                    usage.inodes += 1;
                }
                if m.is_dir() {
                    stack.push(e.path());
                }
            }
        }
        Ok(usage)
    }

    /// Applies `change` to the image list and persists it atomically.
    fn commit(&self, change: impl FnOnce(&mut Vec<ImageRecord>)) -> Result<()> {
        let mut next = self.list();
        change(&mut next);
        let meta = Metadata {
            version: 1,
            images: next,
        };
        let raw = serde_json::to_vec_pretty(&meta).map_err(|source| Error::Metadata {
            path: self.root.join(METADATA_FILE),
            source,
        })?;
        fsutil::write_atomic(&self.root.join(METADATA_FILE), &raw)?;
        *self.images.write().unwrap_or_else(|p| p.into_inner()) = meta.images;
        Ok(())
    }
}

/// Reads the 32-byte key at `path`, or makes one: random, written
/// atomically with mode 0600.
fn load_or_create_key(path: &Path) -> Result<[u8; 32]> {
    match fs::read(path) {
        Ok(raw) => {
            return raw.try_into().map_err(|raw: Vec<u8>| {
                Error::io("read", path)(std::io::Error::other(format!(
                    "{} bytes, not 32: remove it to make a new key (images pulled with credentials then ask their registry again)",
                    raw.len()
                )))
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("read", path)(e)),
    }
    let key: [u8; 32] = rand::random();
    fsutil::write_atomic_mode(path, &key, 0o600)?;
    Ok(key)
}

/// Adds or updates `rec`, moving its tags away from other images.
fn merge(images: &mut Vec<ImageRecord>, rec: ImageRecord) {
    for other in images.iter_mut().filter(|i| i.id != rec.id) {
        other.repo_tags.retain(|t| !rec.repo_tags.contains(t));
    }
    match images.iter_mut().find(|i| i.id == rec.id) {
        Some(existing) => {
            // The newest manifest and layer blobs win; names accumulate.
            existing.manifest = rec.manifest;
            existing.manifest_size = rec.manifest_size;
            existing.config_size = rec.config_size;
            existing.layers = rec.layers;
            existing.imported_at = rec.imported_at;
            // Fetched or imported without credentials: it is public. With
            // credentials: one more that may use it, unless already public.
            if rec.pulled_with.is_empty() {
                existing.pulled_with.clear();
            } else if !existing.pulled_with.is_empty() {
                for g in rec.pulled_with {
                    existing.pulled_with.retain(|e| *e != g);
                    existing.pulled_with.push(g);
                }
                let excess = existing.pulled_with.len().saturating_sub(MAX_GRANTS);
                existing.pulled_with.drain(..excess);
            }
            for t in rec.repo_tags {
                if !existing.repo_tags.contains(&t) {
                    existing.repo_tags.push(t);
                }
            }
            for d in rec.repo_digests {
                if !existing.repo_digests.contains(&d) {
                    existing.repo_digests.push(d);
                }
            }
            existing.repo_tags.sort();
            existing.repo_digests.sort();
        }
        None => images.push(rec),
    }
}

fn find(images: &[ImageRecord], reference: &str) -> Option<usize> {
    let as_id = if reference.len() == 64 && !reference.contains(':') {
        format!("sha256:{reference}")
    } else {
        reference.to_string()
    };
    if let Some(i) = images.iter().position(|i| i.id.as_str() == as_id) {
        return Some(i);
    }
    let r = Reference::parse(reference).ok()?;
    match &r.digest {
        Some(d) => {
            let want = r.with_digest(d);
            images.iter().position(|i| i.repo_digests.contains(&want))
        }
        None => {
            let want = r.to_string();
            images.iter().position(|i| i.repo_tags.contains(&want))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &[u8], tags: &[&str]) -> ImageRecord {
        ImageRecord {
            id: Digest::of(id),
            manifest: Digest::of(&[id, b"m"].concat()),
            manifest_size: 1,
            config_size: 1,
            repo_tags: tags.iter().map(|t| t.to_string()).collect(),
            repo_digests: vec![],
            layers: vec![],
            imported_at: 0,
            pulled_with: vec![],
        }
    }

    #[test]
    fn grants_accumulate_until_a_pull_without_credentials_makes_it_public() {
        let granted = |g: &[&str]| {
            let mut r = rec(b"a", &["r.example/x:1"]);
            r.pulled_with = g.iter().map(|s| s.to_string()).collect();
            r
        };
        let mut images = vec![granted(&["k1"])];
        merge(&mut images, granted(&["k2"]));
        merge(&mut images, granted(&["k1"]));
        assert_eq!(
            images[0].pulled_with,
            vec!["k2", "k1"],
            "the latest last, once"
        );
        for i in 0..MAX_GRANTS {
            merge(&mut images, granted(&[&format!("n{i}")]));
        }
        assert_eq!(images[0].pulled_with.len(), MAX_GRANTS);
        assert!(!images[0].pulled_with.contains(&"k1".to_string()));
        merge(&mut images, granted(&[]));
        assert!(images[0].pulled_with.is_empty(), "public now");
        merge(&mut images, granted(&["k3"]));
        assert!(images[0].pulled_with.is_empty(), "public stays public");
    }

    #[test]
    fn grant_keys_credentials_with_a_private_key_kept_across_opens() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ImageStore::open(dir.path()).expect("open");
        let a = store.grant(&["edge", "pull-me"]).expect("grant");
        assert_eq!(a, store.grant(&["edge", "pull-me"]).expect("grant"));
        assert_ne!(a, store.grant(&["edgep", "ull-me"]).expect("grant"));
        let key = dir.path().join(GRANT_KEY_FILE);
        let mode = fs::metadata(&key).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(store);
        let again = ImageStore::open(dir.path()).expect("open");
        assert_eq!(a, again.grant(&["edge", "pull-me"]).expect("grant"));
        let other = tempfile::tempdir().expect("tempdir");
        let other = ImageStore::open(other.path()).expect("open");
        assert_ne!(
            a,
            other.grant(&["edge", "pull-me"]).expect("grant"),
            "keyed"
        );
        fs::write(&key, b"short").expect("write");
        let broken = ImageStore::open(dir.path()).expect("open");
        let err = broken.grant(&["edge"]).expect_err("a short key");
        assert!(err.to_string().contains("grant.key"), "{err}");
    }

    #[test]
    fn merge_moves_tags() {
        let mut images = vec![rec(
            b"a",
            &["docker.io/library/x:latest", "docker.io/library/x:1"],
        )];
        merge(&mut images, rec(b"b", &["docker.io/library/x:latest"]));
        assert_eq!(images[0].repo_tags, vec!["docker.io/library/x:1"]);
        assert_eq!(images[1].repo_tags, vec!["docker.io/library/x:latest"]);
    }

    #[test]
    fn find_by_id_hex_tag_and_short_name() {
        let images = vec![rec(b"a", &["docker.io/library/busybox:latest"])];
        let id = images[0].id.clone();
        assert_eq!(find(&images, id.as_str()), Some(0));
        assert_eq!(find(&images, id.hex()), Some(0));
        assert_eq!(find(&images, "busybox"), Some(0));
        assert_eq!(find(&images, "busybox:latest"), Some(0));
        assert_eq!(find(&images, "busybox:2"), None);
    }
}
