//! Small filesystem helpers for crash-safe writes (also used by the shim for
//! its sandbox and container state).

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// A name no other writer in this or another process will pick.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{:016x}",
        std::process::id(),
        rand::random::<u64>()
    )
}

/// Writes `data` to `path` atomically: temp file in the same dir, fsync,
/// rename, fsync of the directory.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    write_atomic_mode(path, data, 0o666)
}

/// [`write_atomic`] with the file created as `mode` (less the umask), so a
/// secret is never readable by others, not even before the rename.
pub fn write_atomic_mode(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    replace(path, data, mode, true)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Writes `data` to `path` atomically for every other process (temp file,
/// rename) but not durably: no fsync, so a power cut may leave the old
/// file, none, or an empty one. A crash of the writer leaves the old or the
/// new file whole. For records of what a reboot ends anyway (a pinned
/// namespace, a mount under /run): two device flushes less per write.
pub fn write_atomic_volatile(path: &Path, data: &[u8]) -> Result<()> {
    replace(path, data, 0o666, false)
}

fn replace(path: &Path, data: &[u8], mode: u32, sync: bool) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}", unique_name("tmp")));
    let res = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(data)?;
        if sync {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res.map_err(Error::io("write", path))
}

/// fsyncs a directory so a rename inside it is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("fsync dir", dir))
}

/// Flushes every dirty page of the filesystem holding `dir` (syncfs(2)):
/// one call for a tree of new files (an unpacked layer), where fsync of each
/// would cost a journal commit per file on flash.
pub fn sync_filesystem(dir: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let d = fs::File::open(dir).map_err(Error::io("open", dir))?;
    nix::unistd::syncfs(d.as_raw_fd()).map_err(|e| Error::io("syncfs", dir)(e.into()))
}

pub(crate) fn remove_file_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", path)(e)),
        _ => Ok(()),
    }
}

pub fn remove_dir_all_if_exists(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", path)(e)),
        _ => Ok(()),
    }
}

/// The entries of `dir` named by a sha256 hex digest (blobs, snapshots).
pub(crate) fn digests_in(dir: &Path) -> Result<Vec<crate::Digest>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(Error::io("list", dir))? {
        let e = e.map_err(Error::io("list", dir))?;
        if let Some(d) = e
            .file_name()
            .to_str()
            .and_then(|n| crate::Digest::parse(&format!("sha256:{n}")).ok())
        {
            out.push(d);
        }
    }
    Ok(out)
}

/// Removes everything inside `dir`, keeping `dir`.
pub(crate) fn empty_dir(dir: &Path) -> Result<()> {
    for e in fs::read_dir(dir).map_err(Error::io("list", dir))? {
        let p = e.map_err(Error::io("list", dir))?.path();
        if p.is_dir() && !p.is_symlink() {
            remove_dir_all_if_exists(&p)?;
        } else {
            remove_file_if_exists(&p)?;
        }
    }
    Ok(())
}
