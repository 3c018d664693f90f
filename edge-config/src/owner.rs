//! One live owner per state root. A shim or agent takes an exclusive
//! `flock` on a file in its root before it touches anything there, and
//! writes its pid into it; a second one on the same root waits a moment
//! (the previous owner may be finishing its SIGTERM) and then fails,
//! naming the holder. The kernel drops the lock when the holder dies, so a
//! `kill -9` never leaves a stale lock behind.

use std::fs::{self, File, OpenOptions};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

/// Held while the process owns the root.
#[derive(Debug)]
pub struct Owner {
    _lock: Flock<File>,
    pub path: PathBuf,
}

/// How long a second owner waits for the first to let go.
pub const WAIT: Duration = Duration::from_secs(5);

/// Why the root could not be taken; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// `create` (the folder), `open`, `write` (the pid).
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "another picolet {who} owns this state root: {} is locked by pid {holder} \
         (waited {}s); stop that one first",
        path.display(),
        waited.as_secs()
    )]
    Held {
        who: String,
        path: PathBuf,
        /// The pid in the file, `?` when it names none.
        holder: String,
        waited: Duration,
    },
    #[error("lock {}: {source}", path.display())]
    Lock {
        path: PathBuf,
        source: nix::errno::Errno,
    },
}

/// Takes `path` (created with its folder) for this process; `who` names
/// the role in the error ("shim", "agent").
pub fn claim(path: &Path, who: &str, wait: Duration) -> Result<Owner, OwnerError> {
    let io = |op, path: &Path| {
        let path = path.to_path_buf();
        move |source| OwnerError::Io { op, path, source }
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io("create", dir))?;
    }
    let deadline = Instant::now() + wait;
    loop {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(io("open", path))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                let pid = format!("{}\n", std::process::id());
                lock.set_len(0)
                    .and_then(|()| lock.rewind())
                    .and_then(|()| lock.write_all(pid.as_bytes()))
                    .map_err(io("write", path))?;
                return Ok(Owner {
                    _lock: lock,
                    path: path.to_path_buf(),
                });
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = fs::read_to_string(path).unwrap_or_default();
                let holder = holder.trim();
                return Err(OwnerError::Held {
                    who: who.to_string(),
                    path: path.to_path_buf(),
                    holder: if holder.is_empty() { "?" } else { holder }.to_string(),
                    waited: wait,
                });
            }
            Err((_, source)) => {
                return Err(OwnerError::Lock {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_with_the_holders_pid_and_the_lock_goes_with_the_first() {
        let dir = std::env::temp_dir().join(format!("picolet-owner-{}", std::process::id()));
        let path = dir.join("sub/shim.lock");
        let first = claim(&path, "shim", Duration::ZERO).expect("first");
        let e = claim(&path, "shim", Duration::from_millis(200))
            .expect_err("second")
            .to_string();
        assert!(
            e.contains(&format!("locked by pid {}", std::process::id()))
                && e.contains("picolet shim"),
            "{e}"
        );
        assert_eq!(
            e,
            format!(
                "another picolet shim owns this state root: {} is locked by pid {} \
                 (waited 0s); stop that one first",
                path.display(),
                std::process::id()
            )
        );
        let held = claim(&path, "agent", Duration::ZERO).expect_err("typed");
        assert!(
            matches!(&held, OwnerError::Held { who, holder, .. }
                if who == "agent" && *holder == std::process::id().to_string()),
            "{held:?}"
        );
        drop(first);
        let again = claim(&path, "shim", Duration::ZERO).expect("free again");
        assert_eq!(
            fs::read_to_string(&again.path).expect("pid"),
            format!("{}\n", std::process::id())
        );
        drop(again);
        // A file where the folder goes: the I/O error and its kind stay whole.
        let e = claim(&path.join("x.lock"), "shim", Duration::ZERO).expect_err("not a dir");
        assert!(
            matches!(&e, OwnerError::Io { op: "create", path: p, source }
                if *p == path && source.kind() == std::io::ErrorKind::AlreadyExists),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("create {}: ", path.display())),
            "{e}"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
