//! Unpacks one layer tarball into its own snapshot directory, in the form
//! overlayfs reads as a lower layer:
//! - `.wh.<name>` becomes a 0:0 character device `<name>` (needs CAP_MKNOD),
//! - `.wh..wh..opq` sets `trusted.overlay.opaque=y` on its directory.
//!
//! Every entry path is cleaned and confined to the layer root: `..`
//! components and entries whose parent is a symlink are rejected with an
//! error naming the entry, so an archive can never write outside the root.
//! Links may point anywhere (they are resolved inside the container later).

use std::collections::HashMap;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::AtFlags;
use nix::sys::stat::{Mode, SFlag, makedev, mknod};
use nix::unistd::{Gid, Uid, fchownat};
use tar::EntryType;

use crate::digest::{Digest, HashingReader};
use crate::error::{Error, Result};

pub(crate) const WHITEOUT_PREFIX: &str = ".wh.";
pub(crate) const OPAQUE_MARKER: &str = ".wh..wh..opq";
pub(crate) const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// How a layer blob is compressed, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// Sniffs the magic number; anything else is taken as a plain tar.
    pub fn detect(head: &[u8]) -> Self {
        match head {
            [0x1f, 0x8b, ..] => Self::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Self::Zstd,
            _ => Self::None,
        }
    }
}

/// Returns a reader of the uncompressed tar stream of a layer blob.
pub fn decompress<'a>(blob: impl Read + 'a) -> io::Result<Box<dyn Read + 'a>> {
    let mut buf = BufReader::with_capacity(256 * 1024, blob);
    let head = buf.fill_buf()?;
    Ok(match Compression::detect(head) {
        Compression::None => Box::new(buf),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buf)),
        Compression::Zstd => Box::new(
            ruzstd::decoding::StreamingDecoder::new(buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?,
        ),
    })
}

/// What unpacking needs from the host.
#[derive(Debug, Clone, Copy)]
pub struct UnpackOptions {
    /// Chown entries and create device nodes (true when running as root).
    pub privileged: bool,
    /// Most bytes of file content one layer may unpack to; the free space
    /// of the store's filesystem bounds it too (see [`FREE_SPACE_RESERVE`]).
    pub max_layer_bytes: u64,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        Self {
            privileged: nix::unistd::geteuid().is_root(),
            max_layer_bytes: u64::MAX,
        }
    }
}

/// The share of its filesystem an unpack leaves free (1/20): a layer that
/// inflates past it (a 4 MB archive can hold 4 GiB of zeros) fails before
/// the device's disk is full.
pub const FREE_SPACE_RESERVE: u64 = 20;

/// Bytes free on `path`'s filesystem above the [`FREE_SPACE_RESERVE`]
/// share kept free, and that reserve; `None` when statvfs fails.
pub fn free_above_reserve(path: &Path) -> Option<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(path).ok()?;
    let frsize = st.fragment_size();
    let avail = st.blocks_available().saturating_mul(frsize);
    let reserve = st.blocks().saturating_mul(frsize) / FREE_SPACE_RESERVE;
    Some((avail.saturating_sub(reserve), reserve))
}

/// What a layer unpacked into `dest` may write: the configured limit, or
/// the free space above the reserve if that is less (and why).
fn budget(dest: &Path, max: u64) -> (u64, String) {
    match free_above_reserve(dest) {
        Some((free, reserve)) if free < max => (
            free,
            format!(
                "{} MiB are free on its filesystem above the {} MiB kept free",
                free >> 20,
                reserve >> 20
            ),
        ),
        _ => (max, format!("the limit is {} MiB", max >> 20)),
    }
}

/// Unpacks the compressed layer `blob` into the empty directory `dest`.
/// Returns the diff ID (digest of the uncompressed tar) and its size.
/// `layer` names the layer in errors.
pub fn unpack_layer(
    blob: impl Read,
    dest: &Path,
    layer: &str,
    opts: UnpackOptions,
) -> Result<(Digest, u64)> {
    let bad = |what: String| Error::BadArchive {
        source_name: format!("layer {layer}"),
        what,
    };
    let tar_stream = decompress(blob).map_err(|e| bad(format!("cannot decompress: {e}")))?;
    let mut hashing = HashingReader::new(tar_stream);
    {
        let mut archive = tar::Archive::new(&mut hashing);
        let mut unpacker = Unpacker::new(dest, layer, opts);
        unpacker.budget = budget(dest, opts.max_layer_bytes);
        let entries = archive
            .entries()
            .map_err(|e| bad(format!("corrupt tar: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| bad(format!("corrupt or truncated tar: {e}")))?;
            unpacker.entry(&mut entry)?;
        }
        unpacker.finish()?;
    }
    hashing
        .drain()
        .map_err(|e| bad(format!("corrupt or truncated stream: {e}")))?;
    Ok(hashing.finish())
}

struct Unpacker<'a> {
    root: &'a Path,
    layer: &'a str,
    opts: UnpackOptions,
    /// Directory modes and mtimes, applied last so read-only dirs can be filled.
    dirs: HashMap<PathBuf, (u32, i64)>,
    /// Bytes of file content this layer may write, and why that many.
    budget: (u64, String),
    written: u64,
}

impl<'a> Unpacker<'a> {
    fn new(root: &'a Path, layer: &'a str, opts: UnpackOptions) -> Self {
        Self {
            root,
            layer,
            opts,
            dirs: HashMap::new(),
            budget: (u64::MAX, String::new()),
            written: 0,
        }
    }

    fn err(&self, entry: &Path, what: impl Into<String>) -> Error {
        Error::BadEntry {
            source_name: format!("layer {}", self.layer),
            entry: entry.display().to_string(),
            what: what.into(),
        }
    }

    fn io_err(&self, entry: &Path, op: &str) -> impl FnOnce(io::Error) -> Error + '_ {
        let entry = entry.to_path_buf();
        let op = op.to_string();
        move |e| self.err(&entry, format!("{op}: {e}"))
    }

    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<()> {
        let raw = entry
            .path()
            .map_err(|e| self.err(Path::new("?"), format!("bad path: {e}")))?
            .into_owned();
        let rel = clean(&raw).map_err(|why| self.err(&raw, why.to_string()))?;
        let Some(name) = rel.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            // The root itself ("./"): keep our root's mode.
            return Ok(());
        };
        let parent_rel = rel.parent().unwrap_or(Path::new(""));
        self.ensure_dir(parent_rel, &raw)?;
        let parent = self.root.join(parent_rel);

        if name == OPAQUE_MARKER {
            return xattr::set(&parent, OPAQUE_XATTR, b"y")
                .map_err(self.io_err(&raw, "set opaque xattr (needs root)"));
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX) {
            if hidden.starts_with(WHITEOUT_PREFIX) {
                return Ok(()); // aufs metadata such as .wh..wh.plnk
            }
            let target = parent.join(hidden);
            self.remove_existing(&target, &raw)?;
            return mknod(&target, SFlag::S_IFCHR, Mode::empty(), makedev(0, 0))
                .map_err(|e| self.err(&raw, format!("create whiteout (needs root): {e}")));
        }

        let path = self.root.join(&rel);
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().map_err(self.io_err(&raw, "mode"))? & 0o7777;
        let uid = header.uid().map_err(self.io_err(&raw, "uid"))?;
        let gid = header.gid().map_err(self.io_err(&raw, "gid"))?;
        let mtime = header.mtime().map_err(self.io_err(&raw, "mtime"))?;
        let mtime = i64::try_from(mtime).unwrap_or(i64::MAX);

        match kind {
            EntryType::Directory => {
                match fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        self.remove_existing(&path, &raw)?;
                        fs::create_dir(&path).map_err(self.io_err(&raw, "mkdir"))?;
                    }
                    Err(_) => fs::create_dir(&path).map_err(self.io_err(&raw, "mkdir"))?,
                }
                self.dirs.insert(rel.clone(), (mode, mtime));
            }
            EntryType::Regular | EntryType::Continuous => {
                // Checked before writing: a bomb fails at its first big file.
                let size = header.size().map_err(self.io_err(&raw, "size"))?;
                self.written = self.written.saturating_add(size);
                if self.written > self.budget.0 {
                    return Err(self.err(
                        &raw,
                        format!(
                            "the layer unpacks to more than {} MiB: {}",
                            self.budget.0 >> 20,
                            self.budget.1
                        ),
                    ));
                }
                self.remove_existing(&path, &raw)?;
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(self.io_err(&raw, "create"))?;
                io::copy(entry, &mut f).map_err(self.io_err(&raw, "write"))?;
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(self.io_err(&raw, "link name"))?
                    .ok_or_else(|| self.err(&raw, "symlink without target"))?;
                self.remove_existing(&path, &raw)?;
                symlink(&target, &path).map_err(self.io_err(&raw, "symlink"))?;
            }
            EntryType::Link => {
                let target_raw = entry
                    .link_name()
                    .map_err(self.io_err(&raw, "link name"))?
                    .ok_or_else(|| self.err(&raw, "hard link without target"))?
                    .into_owned();
                let target_rel = clean(&target_raw)
                    .map_err(|why| self.err(&raw, format!("hard link target: {why}")))?;
                self.check_no_symlink_parents(&target_rel, &raw)?;
                let target = self.root.join(&target_rel);
                if !fs::symlink_metadata(&target).is_ok_and(|m| !m.is_dir()) {
                    return Err(self.err(
                        &raw,
                        format!(
                            "hard link target {} is not in this layer",
                            target_raw.display()
                        ),
                    ));
                }
                self.remove_existing(&path, &raw)?;
                fs::hard_link(&target, &path).map_err(self.io_err(&raw, "hard link"))?;
                return Ok(()); // shares the target's metadata
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                let (flag, dev) = match kind {
                    EntryType::Fifo => (SFlag::S_IFIFO, 0),
                    other => {
                        let major = header.device_major().ok().flatten().unwrap_or(0);
                        let minor = header.device_minor().ok().flatten().unwrap_or(0);
                        let flag = if other == EntryType::Char {
                            SFlag::S_IFCHR
                        } else {
                            SFlag::S_IFBLK
                        };
                        (flag, makedev(major.into(), minor.into()))
                    }
                };
                self.remove_existing(&path, &raw)?;
                match mknod(&path, flag, Mode::from_bits_truncate(mode), dev) {
                    Ok(()) => {}
                    Err(nix::errno::Errno::EPERM) if kind != EntryType::Fifo => {
                        tracing::debug!(layer = self.layer, entry = %raw.display(), "device node not permitted, skipped");
                        return Ok(());
                    }
                    Err(e) => return Err(self.err(&raw, format!("mknod: {e}"))),
                }
            }
            EntryType::XGlobalHeader
            | EntryType::XHeader
            | EntryType::GNULongName
            | EntryType::GNULongLink => return Ok(()),
            other => return Err(self.err(&raw, format!("unsupported tar entry type {other:?}"))),
        }

        self.set_xattrs(entry, &path, &raw)?;
        if self.opts.privileged {
            let id = |v: u64, what: &str| {
                u32::try_from(v).map_err(|_| self.err(&raw, format!("{what} {v} is out of range")))
            };
            fchownat(
                None,
                &path,
                Some(Uid::from_raw(id(uid, "uid")?)),
                Some(Gid::from_raw(id(gid, "gid")?)),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|e| self.err(&raw, format!("chown: {e}")))?;
        }
        if kind != EntryType::Symlink && kind != EntryType::Directory {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                .map_err(self.io_err(&raw, "chmod"))?;
        }
        if kind != EntryType::Directory {
            let t = filetime::FileTime::from_unix_time(mtime, 0);
            filetime::set_symlink_file_times(&path, t, t)
                .map_err(self.io_err(&raw, "set mtime"))?;
        }
        Ok(())
    }

    fn set_xattrs<R: Read>(
        &self,
        entry: &mut tar::Entry<'_, R>,
        path: &Path,
        raw: &Path,
    ) -> Result<()> {
        let Ok(Some(exts)) = entry.pax_extensions() else {
            return Ok(());
        };
        for ext in exts {
            let Ok(ext) = ext else { continue };
            let Ok(key) = ext.key() else { continue };
            if let Some(name) = key.strip_prefix("SCHILY.xattr.")
                && let Err(e) = xattr::set(path, name, ext.value_bytes())
            {
                // Filesystems and privileges differ: keep going, as containerd does.
                tracing::debug!(entry = %raw.display(), xattr = name, error = %e, "xattr not set");
            }
        }
        Ok(())
    }

    /// Creates the directories of `rel` that are missing; fails if any
    /// existing component is a symlink or not a directory.
    fn ensure_dir(&mut self, rel: &Path, entry: &Path) -> Result<()> {
        let mut cur = self.root.to_path_buf();
        for c in rel.components() {
            cur.push(c);
            match fs::symlink_metadata(&cur) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(self.err(
                        entry,
                        format!(
                            "parent {} is a symlink: path escapes the layer root",
                            cur.strip_prefix(self.root).unwrap_or(&cur).display()
                        ),
                    ));
                }
                Ok(_) => return Err(self.err(entry, "a parent is not a directory")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&cur).map_err(self.io_err(entry, "mkdir parent"))?;
                }
                Err(e) => return Err(self.err(entry, format!("stat parent: {e}"))),
            }
        }
        Ok(())
    }

    fn check_no_symlink_parents(&self, rel: &Path, entry: &Path) -> Result<()> {
        let mut cur = self.root.to_path_buf();
        if let Some(parent) = rel.parent() {
            for c in parent.components() {
                cur.push(c);
                if fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
                    return Err(self.err(
                        entry,
                        "hard link target goes through a symlink: path escapes the layer root",
                    ));
                }
            }
        }
        Ok(())
    }

    fn remove_existing(&self, path: &Path, entry: &Path) -> Result<()> {
        match fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => {
                fs::remove_dir_all(path).map_err(self.io_err(entry, "replace dir"))
            }
            Ok(_) => fs::remove_file(path).map_err(self.io_err(entry, "replace")),
            Err(_) => Ok(()),
        }
    }

    /// Applies directory modes and mtimes, deepest first.
    fn finish(self) -> Result<()> {
        let mut dirs: Vec<_> = self.dirs.iter().collect();
        dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        for (rel, (mode, mtime)) in dirs {
            let path = self.root.join(rel);
            fs::set_permissions(&path, fs::Permissions::from_mode(*mode))
                .map_err(self.io_err(rel, "chmod dir"))?;
            let t = filetime::FileTime::from_unix_time(*mtime, 0);
            filetime::set_file_times(&path, t, t).map_err(self.io_err(rel, "set mtime"))?;
        }
        Ok(())
    }
}

/// An entry path that does not stay under the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CleanError {
    #[error("'..' in path: path escapes the layer root")]
    ParentDir,
    #[error("unsupported path prefix")]
    Prefix,
}

/// Cleans an entry path to a relative path under the root. Leading `/` and
/// `.` are dropped; `..` anywhere is rejected.
pub(crate) fn clean(p: &Path) -> std::result::Result<PathBuf, CleanError> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir => return Err(CleanError::ParentDir),
            Component::Prefix(_) => return Err(CleanError::Prefix),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().expect("tar")
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_entry_type(EntryType::Regular);
        b.append_data(&mut h, path, data).expect("append");
    }

    fn link(b: &mut tar::Builder<Vec<u8>>, kind: EntryType, path: &str, target: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_mode(0o777);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_entry_type(kind);
        b.append_link(&mut h, path, target).expect("append link");
    }

    fn unpriv() -> UnpackOptions {
        UnpackOptions {
            privileged: false,
            max_layer_bytes: u64::MAX,
        }
    }

    #[test]
    fn regular_files_symlinks_hardlinks_and_diff_id() {
        let tar = layer(|b| {
            file(b, "bin/busybox", b"#!elf");
            link(b, EntryType::Symlink, "bin/sh", "busybox");
            link(b, EntryType::Link, "bin/ash", "bin/busybox");
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let (diff, size) = unpack_layer(&tar[..], dir.path(), "l1", unpriv()).expect("unpack");
        assert_eq!(diff, Digest::of(&tar));
        assert_eq!(size, tar.len() as u64);
        assert_eq!(
            fs::read(dir.path().join("bin/ash")).expect("read"),
            b"#!elf"
        );
        assert_eq!(
            fs::read_link(dir.path().join("bin/sh")).expect("link"),
            PathBuf::from("busybox")
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            fs::metadata(dir.path().join("bin/ash"))
                .expect("stat")
                .nlink(),
            2
        );
    }

    #[test]
    fn a_layer_that_inflates_past_its_budget_fails_before_writing_the_file() {
        // 16 MiB of zeros: a few KiB of gzip.
        let tar = layer(|b| {
            file(b, "small", b"ok");
            file(b, "zeros", &vec![0u8; 16 << 20]);
        });
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &tar).expect("gz");
        let gz = gz.finish().expect("gz");
        assert!(gz.len() < 1 << 20, "{} bytes", gz.len());
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = UnpackOptions {
            max_layer_bytes: 8 << 20,
            ..unpriv()
        };
        let err = unpack_layer(&gz[..], dir.path(), "sha256:bomb", opts).expect_err("bomb");
        let msg = err.to_string();
        assert!(
            msg.contains("sha256:bomb")
                && msg.contains("zeros")
                && msg.contains("unpacks to more than 8 MiB: the limit is 8 MiB"),
            "{msg}"
        );
        assert!(!dir.path().join("zeros").exists());
        // Without a limit, the filesystem's free space is the bound.
        let (free, why) = budget(dir.path(), u64::MAX);
        assert!(
            free < u64::MAX && why.contains("free on its filesystem"),
            "{why}"
        );
    }

    #[test]
    fn gzip_and_zstd_layers_give_the_same_diff_id() {
        let tar = layer(|b| file(b, "etc/motd", b"hi"));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &tar).expect("gz");
        let gz = gz.finish().expect("gz");
        let zst = ruzstd::encoding::compress_to_vec(
            &tar[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        for blob in [gz, zst] {
            let dir = tempfile::tempdir().expect("tempdir");
            let (diff, _) = unpack_layer(&blob[..], dir.path(), "l", unpriv()).expect("unpack");
            assert_eq!(diff, Digest::of(&tar));
            assert_eq!(fs::read(dir.path().join("etc/motd")).expect("read"), b"hi");
        }
    }

    #[test]
    fn dotdot_entry_is_rejected_by_name() {
        let mut tar = layer(|b| file(b, "aaaaaaaaaaaaaaaaaaaaa", b"x"));
        // tar::Builder refuses "..", so patch the name in the header.
        let evil = b"../../../tmp/evil";
        tar[..evil.len()].copy_from_slice(evil);
        tar[evil.len()..21].fill(0);
        let mut h = tar::Header::from_byte_slice(&tar[..512]).clone();
        h.set_cksum();
        tar[..512].copy_from_slice(h.as_bytes());
        let dir = tempfile::tempdir().expect("tempdir");
        let err =
            unpack_layer(&tar[..], &dir.path().join("root"), "l", unpriv()).expect_err("escape");
        let msg = err.to_string();
        assert!(
            msg.contains("../../../tmp/evil") && msg.contains("escapes"),
            "{msg}"
        );
    }

    #[test]
    fn write_through_symlink_is_rejected() {
        let outside = tempfile::tempdir().expect("tempdir");
        let tar = layer(|b| {
            link(
                b,
                EntryType::Symlink,
                "evil",
                outside.path().to_str().expect("utf8"),
            );
            file(b, "evil/pwned", b"x");
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let err = unpack_layer(&tar[..], dir.path(), "l", unpriv()).expect_err("escape");
        assert!(err.to_string().contains("evil/pwned"), "{err}");
        assert!(!outside.path().join("pwned").exists());
    }

    #[test]
    fn hardlink_to_outside_is_rejected() {
        let tar = layer(|b| {
            link(b, EntryType::Symlink, "etc", "/etc");
            link(b, EntryType::Link, "passwd", "etc/passwd");
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let err = unpack_layer(&tar[..], dir.path(), "l", unpriv()).expect_err("escape");
        assert!(err.to_string().contains("passwd"), "{err}");
    }

    #[test]
    fn truncated_layer_is_an_error() {
        let tar = layer(|b| file(b, "big", &[1u8; 4096]));
        let dir = tempfile::tempdir().expect("tempdir");
        let err = unpack_layer(&tar[..1000], dir.path(), "l", unpriv()).expect_err("truncated");
        assert!(err.to_string().contains("layer l"), "{err}");
    }

    #[test]
    fn clean_paths() {
        assert_eq!(
            clean(Path::new("/a/./b/")).expect("ok"),
            PathBuf::from("a/b")
        );
        assert_eq!(clean(Path::new("./")).expect("ok"), PathBuf::new());
        assert_eq!(clean(Path::new("a/../b")), Err(CleanError::ParentDir));
    }
}
