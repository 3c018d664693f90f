//! The picolet binary as the processes that come near a container run it:
//! a sealed memfd copy made once per shim, as runc 1.2+ runs `runc init`
//! (CVE-2019-5736). The spawner, and through its forks every monitor and
//! container init, the exec helpers and a pod's init are started from it,
//! so whatever a container reaches through `/proc/<pid>/exe` or a
//! `#!/proc/self/exe` script is this copy: no write, truncate or grow
//! reaches it (the seals are checked by the kernel for every opener, root
//! included), and the binary on disk is never exposed to a container.
//!
//! Cost: one copy of the binary in memory (10.3 MiB for the static x86_64
//! build), made at the shim's start with copy_file_range; the processes
//! started from it share its pages as they shared the file's.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// `MFD_EXEC` (Linux 6.3+): executable even where `vm.memfd_noexec` asks
/// for non-executable memfds by default.
const MFD_EXEC: libc::c_uint = 0x10;

#[derive(Debug, Error)]
pub enum ExeError {
    #[error("memfd_create: {0}")]
    Create(#[source] std::io::Error),
    #[error("copy {path} into the sealed copy: {source}")]
    Copy {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("seal the copy of {path}: {source}")]
    Seal {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A sealed, executable copy of a binary. Children exec it by
/// [`Self::path`], which names it through this process's descriptor.
#[derive(Debug)]
pub struct SealedExe {
    fd: OwnedFd,
}

impl SealedExe {
    /// Copies `binary` into a new memfd and seals it against any change.
    pub fn copy_of(binary: &Path) -> Result<Self, ExeError> {
        let name = c"picolet";
        let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: memfd_create reads the NUL-terminated name; flags only.
        let mut raw = unsafe { libc::memfd_create(name.as_ptr(), base | MFD_EXEC) };
        if raw < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // Kernels before 6.3 know no MFD_EXEC: their memfds are executable.
            // SAFETY: as above.
            raw = unsafe { libc::memfd_create(name.as_ptr(), base) };
        }
        if raw < 0 {
            return Err(ExeError::Create(std::io::Error::last_os_error()));
        }
        // SAFETY: memfd_create just returned this descriptor to us.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let copy = |e| ExeError::Copy {
            path: binary.to_path_buf(),
            source: e,
        };
        let mut src = File::open(binary).map_err(copy)?;
        let mut dst = File::from(fd.try_clone().map_err(copy)?);
        std::io::copy(&mut src, &mut dst).map_err(copy)?;
        drop(dst);
        let seals =
            libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
        // SAFETY: F_ADD_SEALS takes an int of seal bits.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(ExeError::Seal {
                path: binary.to_path_buf(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(Self { fd })
    }

    /// The copy as a path a child can exec (`/proc/self/fd/<n>`: the
    /// child, between fork and exec, still holds the descriptor; exec
    /// opens the file before it closes the close-on-exec ones).
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_copy_runs_and_refuses_every_write() {
        let exe = SealedExe::copy_of(Path::new("/bin/true")).expect("copy");
        let st = std::process::Command::new(exe.path())
            .status()
            .expect("run the copy");
        assert!(st.success());
        // Reopened for write through its path, as a container would
        // through /proc/<pid>/exe: no byte goes in, no size changes.
        let mut f = File::options()
            .write(true)
            .open(exe.path())
            .expect("open for write");
        let err = f.write_all(b"x").expect_err("a write into a sealed copy");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
        let err = f.set_len(0).expect_err("a sealed copy truncated");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    }
}
