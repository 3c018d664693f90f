//! The preload folder (default `/var/lib/picolet/images/`): every image
//! archive there is imported when the shim starts and whenever one is written
//! or moved in while it runs (inotify). Archives already imported are skipped
//! by their (size, mtime, inode), recorded in `<store>/preload.json`; a bad
//! archive is logged once, naming the file, and retried only once it changes.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use inotify::{Inotify, WatchMask};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsutil;
use crate::store::ImageStore;

const STATE_FILE: &str = "preload.json";

/// What was last seen of one archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    size: u64,
    mtime_ns: i128,
    ino: u64,
    /// `None` when imported, else the error.
    error: Option<String>,
}

/// Outcome of looking at one archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Imported(Vec<String>),
    Unchanged,
    Failed(String),
}

/// Imports archives from one folder into a store.
#[derive(Debug)]
pub struct Preloader {
    store: Arc<ImageStore>,
    dir: PathBuf,
    state_path: PathBuf,
}

/// Whether a file name is an archive the preloader picks up.
pub fn is_archive(name: &str) -> bool {
    !name.starts_with('.')
        && [".tar", ".tar.gz", ".tgz", ".tar.zst"]
            .iter()
            .any(|s| name.ends_with(s))
}

impl Preloader {
    pub fn new(store: Arc<ImageStore>, dir: impl Into<PathBuf>) -> Self {
        let state_path = store.root().join(STATE_FILE);
        Self {
            store,
            dir: dir.into(),
            state_path,
        }
    }

    fn load_state(&self) -> BTreeMap<String, Seen> {
        std::fs::read(&self.state_path)
            .ok()
            .and_then(|raw| serde_json::from_slice(&raw).ok())
            .unwrap_or_default()
    }

    fn save_state(&self, state: &BTreeMap<String, Seen>) -> Result<()> {
        let raw = serde_json::to_vec_pretty(state).map_err(|source| Error::Metadata {
            path: self.state_path.clone(),
            source,
        })?;
        fsutil::write_atomic(&self.state_path, &raw)
    }

    /// Imports every new or changed archive in the folder (creating it).
    pub fn scan(&self) -> Result<Vec<(PathBuf, Outcome)>> {
        std::fs::create_dir_all(&self.dir).map_err(Error::io("create", &self.dir))?;
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .map_err(Error::io("list", &self.dir))?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| is_archive(n))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for n in names {
            let p = self.dir.join(&n);
            let outcome = self.consider(&p)?;
            out.push((p, outcome));
        }
        Ok(out)
    }

    /// Imports one archive unless it was seen unchanged.
    pub fn consider(&self, path: &Path) -> Result<Outcome> {
        let Ok(meta) = std::fs::metadata(path) else {
            return Ok(Outcome::Unchanged); // gone meanwhile
        };
        if !meta.is_file() {
            return Ok(Outcome::Unchanged);
        }
        let key = path.display().to_string();
        let now = Seen {
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ino: meta.ino(),
            error: None,
        };
        let mut state = self.load_state();
        if state.get(&key).is_some_and(|s| {
            Seen {
                error: None,
                ..s.clone()
            } == now
        }) {
            return Ok(Outcome::Unchanged);
        }
        let outcome = match self.store.import(path, &|_, _| {}) {
            Ok(images) => {
                let names: Vec<String> = images
                    .iter()
                    .map(|i| {
                        i.repo_tags
                            .first()
                            .cloned()
                            .unwrap_or_else(|| i.id.to_string())
                    })
                    .collect();
                tracing::info!(archive = %path.display(), images = ?names, "preloaded");
                state.insert(key, now);
                Outcome::Imported(names)
            }
            Err(e) => {
                let msg = e.to_string();
                tracing::error!(archive = %path.display(), error = %msg, "cannot import preload archive");
                state.insert(
                    key,
                    Seen {
                        error: Some(msg.clone()),
                        ..now
                    },
                );
                Outcome::Failed(msg)
            }
        };
        self.save_state(&state)?;
        Ok(outcome)
    }

    /// Scans once, then watches the folder until the process ends. Blocking:
    /// run it on its own thread.
    pub fn watch(&self) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(Error::io("create", &self.dir))?;
        let mut inotify = Inotify::init().map_err(Error::io("inotify init", &self.dir))?;
        inotify
            .watches()
            .add(&self.dir, WatchMask::CLOSE_WRITE | WatchMask::MOVED_TO)
            .map_err(Error::io("inotify watch", &self.dir))?;
        // Scan after the watch is in place so nothing falls between the two.
        self.scan()?;
        let mut buf = [0u8; 4096];
        loop {
            let events = inotify
                .read_events_blocking(&mut buf)
                .map_err(Error::io("inotify read", &self.dir))?;
            let names: Vec<String> = events
                .filter_map(|e| e.name.and_then(|n| n.to_str()).map(str::to_string))
                .filter(|n| is_archive(n))
                .collect();
            for n in names {
                if let Err(e) = self.consider(&self.dir.join(&n)) {
                    tracing::error!(archive = %n, error = %e, "preload failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names() {
        assert!(is_archive("busybox.tar"));
        assert!(is_archive("app.tar.gz"));
        assert!(!is_archive(".busybox.tar"));
        assert!(!is_archive("busybox.tar.part"));
        assert!(!is_archive("notes.txt"));
    }
}
