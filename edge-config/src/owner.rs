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

/// Takes `path` (created with its folder) for this process; `who` names
/// the role in the error ("shim", "agent").
pub fn claim(path: &Path, who: &str, wait: Duration) -> Result<Owner, String> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    let deadline = Instant::now() + wait;
    loop {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| format!("open {}: {e}", path.display()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                let pid = format!("{}\n", std::process::id());
                lock.set_len(0)
                    .and_then(|()| lock.rewind())
                    .and_then(|()| lock.write_all(pid.as_bytes()))
                    .map_err(|e| format!("write {}: {e}", path.display()))?;
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
                return Err(format!(
                    "another picolet {who} owns this state root: {} is locked by pid {} \
                     (waited {}s); stop that one first",
                    path.display(),
                    if holder.is_empty() { "?" } else { holder },
                    wait.as_secs()
                ));
            }
            Err((_, e)) => return Err(format!("lock {}: {e}", path.display())),
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
        let e = claim(&path, "shim", Duration::from_millis(200)).expect_err("second");
        assert!(
            e.contains(&format!("locked by pid {}", std::process::id()))
                && e.contains("picolet shim"),
            "{e}"
        );
        drop(first);
        let again = claim(&path, "shim", Duration::ZERO).expect("free again");
        assert_eq!(
            fs::read_to_string(&again.path).expect("pid"),
            format!("{}\n", std::process::id())
        );
        drop(again);
        let _ = fs::remove_dir_all(&dir);
    }
}
