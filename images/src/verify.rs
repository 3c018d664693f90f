//! `picolet check --store`: proves a store on disk is what its metadata
//! says, without changing anything (a shim open would clean up first and
//! hide what a crash left). Every blob is re-hashed; every image's manifest,
//! config and layers must be there with their sizes; with `deep`, every
//! snapshot is compared entry by entry with its layer blob (and the layer's
//! diff ID recomputed), which is what shows a power cut that lost file data
//! of an unpacked layer whose directory entries survived.
//!
//! Two kinds of findings: *problems* (the store is damaged: an image that
//! claims to be there cannot be used as it is) and *leftovers* (what a writer
//! that died left behind: temp files, half-unpacked layers, unreferenced
//! blobs; the next shim start removes them, so they are not damage).

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use oci_spec::image::ImageManifest;
use tar::EntryType;

use crate::digest::{Digest, HashingReader};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::store::{ImageRecord, METADATA_FILE, Metadata};
use crate::unpack::{OPAQUE_MARKER, OPAQUE_XATTR, WHITEOUT_PREFIX, clean, decompress};

/// What [`verify`] found.
#[derive(Debug, Default)]
pub struct Verification {
    pub images: usize,
    pub blobs: usize,
    pub snapshots: usize,
    /// Blob bytes hashed.
    pub bytes: u64,
    pub problems: Vec<String>,
    pub leftovers: Vec<String>,
}

/// Checks the store at `root` (read-only). Errors only when the store
/// cannot be read at all; damage is reported in the result.
pub fn verify(root: &Path, deep: bool) -> Result<Verification> {
    let mut v = Verification::default();
    let meta_path = root.join(METADATA_FILE);
    let images: Vec<ImageRecord> = match fs::read(&meta_path) {
        Ok(raw) => match serde_json::from_slice::<Metadata>(&raw) {
            Ok(m) => m.images,
            Err(e) => {
                v.problems
                    .push(format!("{}: not valid metadata: {e}", meta_path.display()));
                return Ok(v);
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io("read", &meta_path)(e)),
    };
    v.images = images.len();

    let blob_dir = root.join("blobs").join("sha256");
    let snap_dir = root.join("snapshots").join("sha256");
    let mut good_blobs = HashSet::new();
    for d in list(&blob_dir)? {
        v.blobs += 1;
        let path = blob_dir.join(d.hex());
        let mut r = HashingReader::new(File::open(&path).map_err(Error::io("open", &path))?);
        r.drain().map_err(Error::io("read", &path))?;
        let (actual, n) = r.finish();
        v.bytes += n;
        if actual == d {
            good_blobs.insert(d);
        } else {
            v.problems
                .push(format!("blob {d}: content hashes to {actual} ({n} bytes)"));
        }
    }
    let snapshots: HashSet<Digest> = list(&snap_dir)?.into_iter().collect();
    v.snapshots = snapshots.len();

    let mut used_blobs = HashSet::new();
    let mut used_snaps = HashSet::new();
    for img in &images {
        let name = img
            .repo_tags
            .first()
            .map_or(img.id.as_str(), String::as_str);
        let mut need = |d: &Digest, size: Option<u64>, what: &str, v: &mut Verification| {
            used_blobs.insert(d.clone());
            let path = blob_dir.join(d.hex());
            match fs::metadata(&path) {
                Err(_) => v
                    .problems
                    .push(format!("image {name}: {what} blob {d} is missing")),
                Ok(m) if size.is_some_and(|s| s != m.len()) => v.problems.push(format!(
                    "image {name}: {what} blob {d} is {} bytes, the record says {}",
                    m.len(),
                    size.unwrap_or_default()
                )),
                Ok(_) => {}
            }
        };
        need(&img.manifest, Some(img.manifest_size), "manifest", &mut v);
        need(&img.id, Some(img.config_size), "config", &mut v);
        for l in &img.layers {
            need(&l.digest, Some(l.size), "layer", &mut v);
            used_snaps.insert(l.diff_id.clone());
            if !snapshots.contains(&l.diff_id) {
                v.problems.push(format!(
                    "image {name}: snapshot of layer {} (diff id {}) is missing",
                    l.digest, l.diff_id
                ));
            }
        }
        let manifest_path = blob_dir.join(img.manifest.hex());
        let manifest_size = fs::metadata(&manifest_path).map_or(0, |m| m.len());
        if manifest_size > crate::blobs::MAX_METADATA {
            // Bounded as the store's own reads are: said, not read into memory.
            v.problems.push(format!(
                "image {name}: {}",
                crate::blobs::too_large(&format!("manifest {}", img.manifest), manifest_size)
            ));
        } else if good_blobs.contains(&img.manifest) {
            let raw = fs::read(&manifest_path).map_err(Error::io("read", &manifest_path))?;
            match serde_json::from_slice::<ImageManifest>(&raw) {
                Ok(m) => {
                    let layers: Vec<&str> =
                        m.layers().iter().map(|l| l.digest().as_ref()).collect();
                    let ours: Vec<&str> = img.layers.iter().map(|l| l.digest.as_str()).collect();
                    if m.config().digest().as_ref() != img.id.as_str() || layers != ours {
                        v.problems.push(format!(
                            "image {name}: manifest {} names other config or layers than the record",
                            img.manifest
                        ));
                    }
                }
                Err(e) => v
                    .problems
                    .push(format!("image {name}: manifest {}: {e}", img.manifest)),
            }
        }
    }
    if deep {
        let mut done = HashSet::new();
        for l in images.iter().flat_map(|i| &i.layers) {
            if !done.insert(&l.diff_id)
                || !snapshots.contains(&l.diff_id)
                || !good_blobs.contains(&l.digest)
            {
                continue;
            }
            let blob = blob_dir.join(l.digest.hex());
            let file = File::open(&blob).map_err(Error::io("open", &blob))?;
            for p in compare_snapshot(file, &snap_dir.join(l.diff_id.hex()), &l.diff_id) {
                v.problems.push(format!("snapshot {}: {p}", l.diff_id));
            }
        }
    }

    for d in good_blobs.iter().filter(|d| !used_blobs.contains(*d)) {
        v.leftovers
            .push(format!("blob {d} is not referenced by any image"));
    }
    for d in snapshots.iter().filter(|d| !used_snaps.contains(*d)) {
        v.leftovers
            .push(format!("snapshot {d} is not referenced by any image"));
    }
    for dir in [root.join("ingest"), root.join("snapshots").join("tmp")] {
        if let Ok(entries) = fs::read_dir(&dir) {
            for e in entries.flatten() {
                v.leftovers.push(format!(
                    "{}: left by a writer that died",
                    e.path().display()
                ));
            }
        }
    }
    v.problems.sort();
    v.leftovers.sort();
    Ok(v)
}

fn list(dir: &Path) -> Result<Vec<Digest>> {
    match fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        _ => fsutil::digests_in(dir),
    }
}

/// Differences between an unpacked snapshot and its layer: every entry of
/// the tar is looked up (the last entry of a path decides), regular files
/// byte by byte. Device nodes and xattrs an unprivileged unpack skips are
/// not required.
fn compare_snapshot(blob: File, dir: &Path, diff_id: &Digest) -> Vec<String> {
    let mut found: BTreeMap<PathBuf, Option<String>> = BTreeMap::new();
    let tar = match decompress(blob) {
        Ok(t) => t,
        Err(e) => return vec![format!("layer blob cannot be decompressed: {e}")],
    };
    let mut hashing = HashingReader::new(tar);
    let root = nix::unistd::geteuid().is_root();
    let read = (|| -> io::Result<()> {
        let mut archive = tar::Archive::new(&mut hashing);
        for entry in archive.entries()? {
            let mut entry = entry?;
            let raw = entry.path()?.into_owned();
            let Ok(rel) = clean(&raw) else { continue };
            let Some(name) = rel.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
                continue;
            };
            let parent = dir.join(rel.parent().unwrap_or(Path::new("")));
            let problem = if name == OPAQUE_MARKER {
                (root && xattr::get(&parent, OPAQUE_XATTR).ok().flatten().as_deref() != Some(b"y"))
                    .then(|| "opaque marker missing".to_string())
            } else if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX) {
                let m = fs::symlink_metadata(parent.join(hidden));
                (!hidden.starts_with(WHITEOUT_PREFIX)
                    && !m.is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == 0))
                .then(|| "whiteout missing".to_string())
            } else {
                check_entry(&mut entry, &dir.join(&rel), dir, root)
            };
            found.insert(rel, problem);
        }
        hashing.drain()
    })();
    let mut out: Vec<String> = found
        .into_iter()
        .filter_map(|(p, e)| e.map(|e| format!("{}: {e}", p.display())))
        .collect();
    match read {
        Err(e) => out.push(format!("layer blob is not a readable tar: {e}")),
        Ok(()) => {
            let (actual, _) = hashing.finish();
            if &actual != diff_id {
                out.push(format!("layer content hashes to {actual}"));
            }
        }
    }
    out
}

fn check_entry<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    path: &Path,
    dir: &Path,
    root: bool,
) -> Option<String> {
    let meta = fs::symlink_metadata(path);
    let kind = entry.header().entry_type();
    let ft = match &meta {
        Ok(m) => m.file_type(),
        Err(_) if !root && matches!(kind, EntryType::Char | EntryType::Block) => return None,
        Err(e) => return Some(format!("missing ({e})")),
    };
    match kind {
        EntryType::Directory => (!ft.is_dir()).then(|| "not a directory".into()),
        EntryType::Symlink => {
            let want = entry.link_name().ok().flatten().map(|l| l.into_owned());
            let have = fs::read_link(path).ok();
            (want.is_none() || have != want)
                .then(|| format!("symlink to {have:?}, the layer says {want:?}"))
        }
        EntryType::Link => {
            let target = entry
                .link_name()
                .ok()
                .flatten()
                .and_then(|t| clean(&t).ok())
                .map(|t| dir.join(t));
            let same = target
                .and_then(|t| fs::symlink_metadata(t).ok())
                .zip(meta.as_ref().ok())
                .is_some_and(|(t, m)| t.ino() == m.ino());
            (!same).then(|| "not a hard link of its target".into())
        }
        EntryType::Regular | EntryType::Continuous => {
            let len = meta.as_ref().map(|m| m.len()).unwrap_or_default();
            let want = entry.header().size().unwrap_or_default();
            if !ft.is_file() || len != want {
                return Some(format!("{len} bytes on disk, {want} in the layer"));
            }
            match same_content(entry, path) {
                Ok(true) => None,
                Ok(false) => Some("content differs from the layer".into()),
                Err(e) => Some(format!("cannot compare: {e}")),
            }
        }
        EntryType::Fifo => (!ft.is_fifo()).then(|| "not a fifo".into()),
        EntryType::Char => (!ft.is_char_device()).then(|| "not a character device".into()),
        EntryType::Block => (!ft.is_block_device()).then(|| "not a block device".into()),
        _ => None,
    }
}

fn same_content(a: &mut impl Read, path: &Path) -> io::Result<bool> {
    let mut b = File::open(path)?;
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(a, &mut x)?;
        let m = read_full(&mut b, &mut y[..n.max(1)])?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ImageStore;

    fn store_with_image() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let images = xtask::build_test_images(Path::new("/bin/busybox"), &dir.path().join("in"))
            .expect("test images");
        let root = dir.path().join("store");
        let store = ImageStore::open(&root).expect("open");
        store
            .import(&images.busybox_layout, &|_, _| {})
            .expect("import");
        // Whiteouts and opaque directories need root to unpack.
        if nix::unistd::geteuid().is_root() {
            store
                .import(&images.layered_layout, &|_, _| {})
                .expect("import layered");
        }
        (dir, root)
    }

    #[test]
    fn a_fresh_import_verifies_and_damage_is_named() {
        if !Path::new("/bin/busybox").exists() {
            eprintln!("skipped: needs /bin/busybox (busybox-static) to build the test image");
            assert!(std::env::var("CI").is_err(), "CI must have busybox-static");
            return;
        }
        let (_dir, root) = store_with_image();
        let v = verify(&root, true).expect("verify");
        assert!(v.problems.is_empty() && v.leftovers.is_empty(), "{v:?}");
        assert!(v.images >= 1 && v.blobs >= 3 && v.snapshots >= 1, "{v:?}");

        // A power cut that kept a snapshot's names but not its data.
        let snap = fs::read_dir(root.join("snapshots/sha256"))
            .expect("ls")
            .next()
            .expect("a snapshot")
            .expect("entry")
            .path();
        let victim = walk_files(&snap).into_iter().next().expect("a file");
        fs::OpenOptions::new()
            .write(true)
            .open(&victim)
            .and_then(|f| f.set_len(0))
            .expect("truncate");
        let shallow = verify(&root, false).expect("verify");
        assert!(shallow.problems.is_empty(), "{shallow:?}");
        let v = verify(&root, true).expect("verify");
        let rel = victim
            .strip_prefix(&snap)
            .expect("rel")
            .display()
            .to_string();
        assert!(
            v.problems
                .iter()
                .any(|p| p.contains(&rel) && p.contains("0 bytes on disk")),
            "{v:?}"
        );

        // A corrupt blob, a leftover temp file, and metadata that is not JSON.
        let blob = fs::read_dir(root.join("blobs/sha256"))
            .expect("ls")
            .next()
            .expect("blob")
            .expect("e")
            .path();
        fs::write(&blob, b"garbage").expect("write");
        fs::write(root.join("ingest/blob-1-2"), b"half").expect("write");
        let v = verify(&root, false).expect("verify");
        assert!(
            v.problems.iter().any(|p| p.contains("content hashes to")),
            "{v:?}"
        );
        assert!(
            v.leftovers
                .iter()
                .any(|p| p.contains("left by a writer that died")),
            "{v:?}"
        );
        // A manifest blob past the metadata bound is named, not read whole.
        let meta: Metadata =
            serde_json::from_slice(&fs::read(root.join(METADATA_FILE)).expect("read"))
                .expect("metadata");
        let manifest = root
            .join("blobs/sha256")
            .join(meta.images[0].manifest.hex());
        fs::write(&manifest, vec![b' '; 17 << 20]).expect("write");
        let v = verify(&root, false).expect("verify");
        assert!(
            v.problems
                .iter()
                .any(|p| p.contains("is 17 MiB: larger than the 16 MiB allowed")),
            "{v:?}"
        );
        fs::write(root.join(METADATA_FILE), b"{").expect("write");
        let v = verify(&root, false).expect("verify");
        assert!(v.problems[0].contains("not valid metadata"), "{v:?}");
    }

    fn walk_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).expect("ls").flatten() {
            let m = e.metadata().expect("stat");
            if m.is_dir() {
                out.extend(walk_files(&e.path()));
            } else if m.is_file() && m.len() > 0 {
                out.push(e.path());
            }
        }
        out.sort();
        out
    }
}
