//! Small filesystem helpers for crash-safe writes (also used by the shim for
//! its sandbox and container state).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

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
    stage(path, data, mode)?.commit()
}

/// Writes `data` to `path` atomically for every other process (temp file,
/// rename) but not durably: no fsync, so a power cut may leave the old
/// file, none, or an empty one. A crash of the writer leaves the old or the
/// new file whole. For records of what a reboot ends anyway (a pinned
/// namespace, a mount under /run): two device flushes less per write.
pub fn write_atomic_volatile(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = write_temp(path, data, 0o666, false)?;
    // Swapped in, not renamed over, when there is a file to replace: ext4
    // (auto_da_alloc) starts writing a file's data back when a rename
    // replaces another, a device write per record that "volatile" is meant
    // to spare (a sandbox's record is replaced three times in as many ms
    // while it is made). The swap is as atomic; the old content, now at
    // `tmp`, goes. No file there yet, or a filesystem without the swap:
    // a rename.
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, &tmp, CWD, path, RenameFlags::EXCHANGE) {
        Ok(()) => match fs::remove_file(&tmp) {
            // A swap also trades a file for a folder, which a rename
            // refuses: put the folder back and fail as a rename would.
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
                let back = renameat_with(CWD, &tmp, CWD, path, RenameFlags::EXCHANGE);
                let _ = fs::remove_file(&tmp);
                back.map_err(std::io::Error::from)
                    .and(Err(e))
                    .map_err(Error::io("write", path))
            }
            _ => Ok(()),
        },
        Err(_) => rename_into_place(&tmp, path),
    }
}

/// Renames `tmp` over `path`; on failure `tmp` goes.
fn rename_into_place(tmp: &Path, path: &Path) -> Result<()> {
    fs::rename(tmp, path).map_err(|e| {
        let _ = fs::remove_file(tmp);
        Error::io("write", path)(e)
    })
}

/// Writes `data` to a new temp file beside `path` (fsynced when `sync`) and
/// returns its path; on failure nothing is left behind.
fn write_temp(path: &Path, data: &[u8], mode: u32, sync: bool) -> Result<PathBuf> {
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
        Ok(())
    })();
    match res {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(Error::io("write", path)(e))
        }
    }
}

/// [`write_atomic`] in two halves, so its slow half can run beside work
/// whose outcome decides whether the file should appear at all: the data
/// goes to a temp file and is flushed now; [`Staged::commit`] renames it into
/// place and fsyncs the folder. Dropped uncommitted, the temp file goes.
pub fn stage_atomic(path: &Path, data: &[u8]) -> Result<Staged> {
    stage(path, data, 0o666)
}

fn stage(path: &Path, data: &[u8], mode: u32) -> Result<Staged> {
    Ok(Staged {
        tmp: Some(write_temp(path, data, mode, true)?),
        path: path.to_path_buf(),
    })
}

/// A durable write waiting for its rename ([`stage_atomic`]).
#[derive(Debug)]
pub struct Staged {
    tmp: Option<PathBuf>,
    path: PathBuf,
}

impl Staged {
    /// Renames the flushed file into place and makes the rename durable.
    pub fn commit(mut self) -> Result<()> {
        if let Some(tmp) = self.tmp.take() {
            rename_into_place(&tmp, &self.path)?;
        }
        sync_dir(self.path.parent().unwrap_or(Path::new(".")))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = fs::remove_file(tmp);
        }
    }
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

/// Removes a file; none there is fine.
pub fn remove_file_if_exists(path: &Path) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_staged_write_appears_only_when_committed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec.json");
        fs::write(&path, b"old").expect("write");
        let staged = stage_atomic(&path, b"new").expect("stage");
        // Flushed aside; the old file is still what readers see.
        assert_eq!(fs::read(&path).expect("read"), b"old");
        assert_eq!(names(dir.path()).len(), 2);
        staged.commit().expect("commit");
        assert_eq!(fs::read(&path).expect("read"), b"new");
        assert_eq!(names(dir.path()), ["rec.json"]);
    }

    #[test]
    fn a_staged_write_dropped_uncommitted_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec.json");
        fs::write(&path, b"old").expect("write");
        drop(stage_atomic(&path, b"new").expect("stage"));
        assert_eq!(fs::read(&path).expect("read"), b"old");
        assert_eq!(names(dir.path()), ["rec.json"]);
        // And a folder that is not there is an error naming the file.
        let err = stage_atomic(&dir.path().join("gone/rec.json"), b"x").expect_err("no folder");
        assert!(err.to_string().contains("gone/rec.json"), "{err}");
    }

    #[test]
    fn a_volatile_write_creates_then_swaps_in_and_leaves_one_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec.json");
        write_atomic_volatile(&path, b"first").expect("create");
        assert_eq!(fs::read(&path).expect("read"), b"first");
        let before = fs::metadata(&path).expect("stat");
        write_atomic_volatile(&path, b"second").expect("replace");
        assert_eq!(fs::read(&path).expect("read"), b"second");
        use std::os::unix::fs::MetadataExt as _;
        let after = fs::metadata(&path).expect("stat");
        assert_ne!(before.ino(), after.ino(), "a new file, swapped in");
        assert_eq!(names(dir.path()), ["rec.json"]);
        let err =
            write_atomic_volatile(&dir.path().join("gone/rec.json"), b"x").expect_err("no folder");
        assert!(err.to_string().contains("gone/rec.json"), "{err}");
        // A folder where the record goes is refused, as a rename refuses it,
        // and stays where it was.
        let folder = dir.path().join("d");
        fs::create_dir(&folder).expect("mkdir");
        fs::write(folder.join("x"), b"keep").expect("write");
        let err = write_atomic_volatile(&folder, b"x").expect_err("a folder");
        assert!(err.to_string().contains("d"), "{err}");
        assert_eq!(fs::read(folder.join("x")).expect("kept"), b"keep");
        assert_eq!(names(dir.path()), ["d", "rec.json"]);
    }
}
