//! Container log rotation, as kubelet's container log manager: every
//! `containerLogMonitorInterval` (10 s), each running container whose log
//! file reached `containerLogMaxSize` gets it renamed to
//! `<log>.<YYYYMMDD-hhmmss>` and the runtime is asked (CRI
//! `ReopenContainerLog`) to start a new one. Older rotated files are
//! gzip-compressed, and the oldest removed so that a container never has
//! more than `containerLogMaxFiles` files. The newest rotated file stays
//! uncompressed: the runtime may still be writing its last lines to it.
//!
//! Without this an edge device's disk (often flash) fills with one chatty
//! container's log.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use flate2::Compression;
use flate2::write::GzEncoder;
use tokio::sync::watch;

use crate::runtime::Cri;

const COMPRESSED: &str = ".gz";
const TMP: &str = ".tmp";

/// The limits of one container's log files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub max_bytes: u64,
    /// Including the live file; at least 2.
    pub max_files: usize,
}

/// What to do with one container's log files, decided from names alone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Leftovers of an interrupted pass, and the oldest rotated files.
    pub remove: Vec<PathBuf>,
    /// Rotated files to gzip (each becomes `<file>.gz`).
    pub compress: Vec<PathBuf>,
}

/// Plans the housekeeping before a log is rotated; `rotated` are the files
/// named `<log>.*` next to it.
pub fn plan(rotated: &[PathBuf], policy: Policy) -> Plan {
    let mut plan = Plan::default();
    let name = |p: &Path| p.to_string_lossy().into_owned();
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in rotated {
        let n = name(p);
        if n.ends_with(TMP) {
            // A compression that did not finish.
            plan.remove.push(p.clone());
        } else if !n.ends_with(COMPRESSED)
            && rotated.iter().any(|q| name(q) == n.clone() + COMPRESSED)
        {
            // Compressed, but the original was not removed yet.
            plan.remove.push(p.clone());
        } else {
            kept.push(p.clone());
        }
    }
    // Timestamps sort as text. After this pass the live file becomes one
    // more rotated file, and a new live one appears.
    kept.sort();
    let keep = policy.max_files.saturating_sub(2);
    let excess = kept.len().saturating_sub(keep);
    plan.remove.extend(kept.drain(..excess));
    plan.compress = kept
        .into_iter()
        .filter(|p| !name(p).ends_with(COMPRESSED))
        .collect();
    plan
}

/// `<log>.<YYYYMMDD-hhmmss>` (UTC), the name the live file is rotated to.
pub fn rotated_name(log: &Path, now: SystemTime) -> PathBuf {
    let t = jiff::Timestamp::try_from(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let mut name = log.as_os_str().to_owned();
    name.push(t.strftime(".%Y%m%d-%H%M%S").to_string());
    PathBuf::from(name)
}

/// The files named `<log>.*` beside `log`.
fn rotated_files(log: &Path) -> std::io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(base)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let mut prefix = base.to_owned();
    prefix.push(".");
    let prefix = prefix.to_string_lossy().into_owned();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// gzips `path` to `<path>.gz` (through a temporary file, so a crash
/// leaves either the original or both), then removes `path`.
fn compress(path: &Path) -> std::io::Result<()> {
    let mut gz_name = path.as_os_str().to_owned();
    gz_name.push(COMPRESSED);
    let mut tmp_name = gz_name.clone();
    tmp_name.push(TMP);
    let (gz, tmp) = (PathBuf::from(gz_name), PathBuf::from(tmp_name));
    let mut input = std::fs::File::open(path)?;
    let mut enc = GzEncoder::new(std::fs::File::create(&tmp)?, Compression::default());
    std::io::copy(&mut input, &mut enc)?;
    let file = enc.finish()?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, &gz)?;
    std::fs::remove_file(path)
}

/// The housekeeping before a rotation: removals and compression.
fn tidy(log: &Path, policy: Policy) -> std::io::Result<()> {
    let p = plan(&rotated_files(log)?, policy);
    for f in &p.remove {
        match std::fs::remove_file(f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    for f in &p.compress {
        compress(f)?;
    }
    Ok(())
}

/// One pass over the `running` containers; `known` keeps their log paths
/// between passes.
pub async fn rotate_all(
    cri: &Cri,
    policy: Policy,
    running: &HashSet<String>,
    known: &mut HashMap<String, PathBuf>,
) {
    let logs = cri.running_log_paths(running, known).await;
    // Every log's size in one trip to a blocking thread (one each was a
    // handoff per container every pass: most of an idle agent's wakeups).
    let sized = tokio::task::spawn_blocking(move || {
        logs.into_iter()
            .map(|(id, log)| {
                let size = std::fs::metadata(&log).map(|m| m.len());
                (id, log, size)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    for (id, log, size) in sized {
        if let Err(e) = rotate(cri, &id, &log, size, policy).await {
            tracing::warn!(container = %id, log = %log.display(), error = %e, "cannot rotate the container log");
        }
    }
}

/// Why a log was not rotated.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error(transparent)]
    Cri(#[from] crate::runtime::CriError),
    #[error("{}: {source}", path.display())]
    Stat {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tidy rotated logs: {0}")]
    Tidy(std::io::Error),
    #[error("rename to {}: {source}", path.display())]
    Rename {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Rotates `log`, whose size (or why there is none) is `size`, if it has
/// reached the policy's limit.
async fn rotate(
    cri: &Cri,
    id: &str,
    log: &Path,
    size: std::io::Result<u64>,
    policy: Policy,
) -> Result<(), RotateError> {
    let size = match size {
        Ok(n) => n,
        // Lost (a reopen that failed after a rename): have the runtime make
        // a new one, as kubelet does.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(cri.reopen_container_log(id).await?);
        }
        Err(source) => {
            return Err(RotateError::Stat {
                path: log.to_path_buf(),
                source,
            });
        }
    };
    if size < policy.max_bytes {
        return Ok(());
    }
    let owned = log.to_path_buf();
    tokio::task::spawn_blocking(move || tidy(&owned, policy))
        .await
        .map_err(|e| RotateError::Tidy(std::io::Error::other(e)))?
        .map_err(RotateError::Tidy)?;
    let rotated = rotated_name(log, SystemTime::now());
    tokio::fs::rename(log, &rotated)
        .await
        .map_err(|source| RotateError::Rename {
            path: rotated.clone(),
            source,
        })?;
    if let Err(e) = cri.reopen_container_log(id).await {
        // Put it back: the runtime still writes to it.
        let _ = tokio::fs::rename(&rotated, log).await;
        return Err(e.into());
    }
    tracing::info!(container = %id, to = %rotated.display(), bytes = size, "rotated the container log");
    Ok(())
}

/// Runs [`rotate_all`] every `interval` until the agent stops, over the
/// containers PLEG's last relist found running.
pub fn spawn(
    cri: Cri,
    policy: Policy,
    interval: std::time::Duration,
    running: watch::Receiver<Arc<HashSet<String>>>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut known = HashMap::new();
        loop {
            tick.tick().await;
            let now = running.borrow().clone();
            rotate_all(&cri, policy, &now, &mut known).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names
            .iter()
            .map(|n| PathBuf::from(format!("/l/c/{n}")))
            .collect()
    }

    const POLICY: Policy = Policy {
        max_bytes: 100,
        max_files: 4,
    };

    #[test]
    fn keeps_max_files_minus_two_rotated_and_compresses_all_but_none_newer() {
        let rotated = paths(&[
            "0.log.20261123-100000.gz",
            "0.log.20261123-090000.gz",
            "0.log.20261123-110000",
            "0.log.20261123-080000.gz",
        ]);
        let p = plan(&rotated, POLICY);
        // 4 files allowed: after this rotation, live + the file rotated now
        // + 2 older ones.
        assert_eq!(
            p.remove,
            paths(&["0.log.20261123-080000.gz", "0.log.20261123-090000.gz"])
        );
        assert_eq!(p.compress, paths(&["0.log.20261123-110000"]));
    }

    #[test]
    fn leftovers_of_an_interrupted_pass_go() {
        let rotated = paths(&[
            "0.log.20261123-110000",
            "0.log.20261123-110000.gz",
            "0.log.20261123-120000.gz.tmp",
        ]);
        let p = plan(&rotated, POLICY);
        assert_eq!(
            p.remove,
            paths(&["0.log.20261123-110000", "0.log.20261123-120000.gz.tmp"])
        );
        assert!(p.compress.is_empty());
    }

    #[test]
    fn two_files_means_no_rotated_file_is_kept() {
        let p = plan(
            &paths(&["0.log.20261123-110000"]),
            Policy {
                max_bytes: 1,
                max_files: 2,
            },
        );
        assert_eq!(p.remove, paths(&["0.log.20261123-110000"]));
        assert!(p.compress.is_empty());
    }

    #[test]
    fn rotated_names_carry_the_utc_time() {
        // 2026-11-23T04:05:06Z
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_795_406_706);
        assert_eq!(
            rotated_name(Path::new("/l/c/0.log"), t),
            PathBuf::from("/l/c/0.log.20261123-040506")
        );
        let leap = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(
            rotated_name(Path::new("0.log"), leap),
            PathBuf::from("0.log.20000229-000000")
        );
    }

    #[test]
    fn compress_replaces_the_file_with_its_gzip() {
        use std::io::Read;
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("0.log.20261123-110000");
        std::fs::write(&f, "line\n".repeat(1000)).expect("write");
        compress(&f).expect("compress");
        assert!(!f.exists());
        let gz = dir.path().join("0.log.20261123-110000.gz");
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&gz).expect("open"))
            .read_to_string(&mut text)
            .expect("gunzip");
        assert_eq!(text, "line\n".repeat(1000));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
