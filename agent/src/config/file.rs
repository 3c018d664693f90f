//! The static pod folder: every non-hidden file is one `v1/Pod` (or a
//! `PodList`), YAML or JSON. Rescanned on inotify events and every
//! `fileCheckFrequency`. A file that fails to parse or validate is
//! reported once per change (naming the file and field); the last good
//! version of its pods keeps running (kubelet would drop them — on a
//! device nobody watches, a typo should not take a workload down); every
//! other file is untouched.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;

use crate::config::manifest::{self, ManifestError};
use crate::config::{PodSet, PodUpdate, Source};
use crate::events::{EventType, Object, Recorder};

/// A manifest file larger than this is refused without being read whole
/// (a 50 MB file took the agent from 11 to 114 MB). The API server refuses
/// objects over ~1.5 MiB; a pod is a few KiB.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// The current manifest errors, for `/manifests`.
#[derive(Debug, Clone, Default)]
pub struct ManifestErrors(Arc<Mutex<Vec<String>>>);

impl ManifestErrors {
    pub fn set(&self, errors: Vec<String>) {
        *crate::mutex::lock(&self.0) = errors;
    }

    pub fn get(&self) -> Vec<String> {
        crate::mutex::lock(&self.0).clone()
    }
}

#[derive(Debug)]
struct FileEntry {
    text: String,
    error: Option<ManifestError>,
    /// The pods of the last good version.
    good: Vec<Arc<Pod>>,
}

/// The folder and what was last read from it.
#[derive(Debug)]
pub struct FileSource {
    dir: PathBuf,
    node_name: String,
    files: BTreeMap<PathBuf, FileEntry>,
    /// Files that could not be read, with the error last reported.
    unreadable: HashMap<PathBuf, String>,
    dir_error: Option<String>,
}

/// The outcome of one scan.
#[derive(Debug, Default)]
pub struct Scan {
    /// Desired pods by UID, with the file each came from.
    pub pods: BTreeMap<String, (PathBuf, Arc<Pod>)>,
    /// Errors that are new since the last scan (to report once).
    pub new_errors: Vec<String>,
    /// Every current error (for status pages).
    pub errors: Vec<String>,
}

fn full_name(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

impl FileSource {
    pub fn new(dir: &Path, node_name: &str) -> Self {
        Self {
            dir: dir.to_path_buf(),
            node_name: node_name.to_string(),
            files: BTreeMap::new(),
            unreadable: HashMap::new(),
            dir_error: None,
        }
    }

    /// Reads the folder and returns the desired pods.
    pub fn scan(&mut self) -> Scan {
        let mut scan = Scan::default();
        let mut present: Vec<PathBuf> = Vec::new();
        let mut skipped: Vec<(PathBuf, String)> = Vec::new();
        match std::fs::read_dir(&self.dir) {
            Ok(rd) => {
                self.dir_error = None;
                for entry in rd.flatten() {
                    let name = entry.file_name();
                    if name.to_string_lossy().starts_with('.') {
                        continue;
                    }
                    // Regular files, or links to them. Anything else is
                    // reported (once per change), never ignored silently.
                    let path = entry.path();
                    match std::fs::metadata(&path) {
                        Ok(m) if m.is_file() => present.push(path),
                        Ok(m) => {
                            let what = if m.is_dir() {
                                "a directory: static pods are read from the folder's files, not from subfolders"
                            } else {
                                "not a regular file"
                            };
                            skipped.push((path, what.to_string()));
                        }
                        // A dangling link, a link loop (ELOOP).
                        Err(e) => skipped.push((path, format!("cannot read: {e}"))),
                    }
                }
            }
            Err(e) => {
                let msg = format!(
                    "{}: cannot read the static pod folder: {e}",
                    self.dir.display()
                );
                if self.dir_error.as_deref() != Some(msg.as_str()) {
                    scan.new_errors.push(msg.clone());
                }
                scan.errors.push(msg.clone());
                self.dir_error = Some(msg);
            }
        }
        present.sort();
        skipped.sort();
        self.files.retain(|p, _| present.contains(p));
        self.unreadable
            .retain(|p, _| present.contains(p) || skipped.iter().any(|(s, _)| s == p));
        for (path, what) in skipped {
            let msg = format!("{}: {what}", path.display());
            scan.errors.push(msg.clone());
            if self.unreadable.get(&path) != Some(&msg) {
                scan.new_errors.push(msg.clone());
                self.unreadable.insert(path, msg);
            }
        }
        let seen = crate::clock::timestamp_now().to_string();
        for path in &present {
            let text = match read_manifest(path) {
                Ok(t) => {
                    self.unreadable.remove(path);
                    t
                }
                Err(e) => {
                    let mut msg = e.to_string();
                    if let Some(f) = self.files.get_mut(path) {
                        // What was read before is stale: its parse error
                        // would be listed beside this one, and the same text
                        // coming back must be parsed (and reported) again.
                        f.error = None;
                        f.text.clear();
                        if !f.good.is_empty() {
                            msg.push_str(" (the previous version keeps running)");
                        }
                    }
                    scan.errors.push(msg.clone());
                    // Once per change, not at every rescan.
                    if self.unreadable.get(path) != Some(&msg) {
                        scan.new_errors.push(msg.clone());
                        self.unreadable.insert(path.clone(), msg);
                    }
                    continue;
                }
            };
            if self.files.get(path).is_some_and(|f| f.text == text) {
                continue;
            }
            let parsed = manifest::parse(path, &text, &self.node_name, &seen);
            let entry = self.files.entry(path.clone()).or_insert(FileEntry {
                text: String::new(),
                error: None,
                good: Vec::new(),
            });
            entry.text = text;
            match parsed {
                Ok(pods) => {
                    entry.error = None;
                    entry.good = pods.into_iter().map(Arc::new).collect();
                }
                Err(e) => {
                    let mut msg = e.to_string();
                    if !entry.good.is_empty() {
                        msg.push_str(" (the previous version keeps running)");
                    }
                    scan.new_errors.push(msg);
                    entry.error = Some(e);
                }
            }
        }
        // Collect; a full name used by two files: the first file wins.
        let mut names: HashMap<String, PathBuf> = HashMap::new();
        for (path, entry) in &self.files {
            if let Some(e) = &entry.error {
                scan.errors.push(e.to_string());
            }
            for pod in &entry.good {
                let name = full_name(pod);
                if let Some(other) = names.get(&name) {
                    let msg = format!(
                        "{}: metadata.name: pod {name} is already defined in {}",
                        path.display(),
                        other.display()
                    );
                    scan.errors.push(msg);
                    continue;
                }
                names.insert(name, path.clone());
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                scan.pods.insert(uid, (path.clone(), pod.clone()));
            }
        }
        scan
    }
}

/// Why a manifest file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {size} bytes: a manifest may be at most {MAX_MANIFEST_BYTES} bytes (1 MiB)", path.display())]
    TooLarge { path: PathBuf, size: u64 },
}

/// Reads a manifest file, at most [`MAX_MANIFEST_BYTES`] of it.
fn read_manifest(path: &Path) -> Result<String, ReadError> {
    use std::io::Read;
    let cannot = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    let read = u64::try_from(text.len()).unwrap_or(u64::MAX);
    if read > MAX_MANIFEST_BYTES {
        let size = std::fs::metadata(path).map_or(read, |m| m.len());
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            size,
        });
    }
    Ok(text)
}

/// The file source as the sync loop gets it: rescans, reports new errors
/// as events and the current ones for `/manifests`, and applies maxPods.
pub struct Scanner {
    pub folder: FileSource,
    pub recorder: Recorder,
    pub manifest_errors: ManifestErrors,
    pub node_name: String,
    pub max_pods: usize,
    /// Static pods that roll back (`picolet.io/rollback-after`).
    pub guard: super::rollback::Guard,
    /// Whether a pod (by UID) is Ready now: what the guard decides on.
    pub is_ready: Box<dyn Fn(&str) -> bool + Send>,
    /// Called for each rollback (the metric).
    pub on_rollback: Box<dyn Fn(&super::rollback::RolledBack) + Send>,
    /// When the guard next needs a scan (a version on trial runs out).
    pub next_deadline: Option<tokio::time::Instant>,
}

impl Scanner {
    /// Rescans the folder: the desired pods by UID (maxPods applied).
    pub fn scan(&mut self) -> PodSet {
        let scan = self.folder.scan();
        let node = Object::node(&self.node_name);
        for e in &scan.new_errors {
            self.recorder.event(
                &node,
                EventType::Warning,
                crate::events::reason::INVALID_MANIFEST,
                e,
            );
        }
        self.manifest_errors.set(scan.errors.clone());
        let mut admitted = BTreeMap::new();
        for (uid, (path, pod)) in scan.pods {
            if admitted.len() >= self.max_pods {
                self.recorder.event(
                    &node,
                    EventType::Warning,
                    crate::events::reason::OUT_OF_PODS,
                    &format!(
                        "{}: not admitted: the node already runs maxPods={} pods",
                        path.display(),
                        self.max_pods
                    ),
                );
                continue;
            }
            admitted.insert(uid, (path, pod));
        }
        let guarded = self
            .guard
            .apply(admitted, &self.is_ready, tokio::time::Instant::now());
        for r in &guarded.rolled_back {
            tracing::warn!(pod = %format!("{}/{}", r.namespace, r.name), "{}", r.message);
            let obj = Object {
                kind: "Pod",
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                ..Default::default()
            };
            self.recorder.event(
                &obj,
                EventType::Warning,
                crate::events::reason::STATIC_POD_ROLLED_BACK,
                &r.message,
            );
            (self.on_rollback)(r);
        }
        self.next_deadline = guarded.next_deadline;
        guarded.pods
    }

    /// A rescan as the sync loop takes it.
    pub fn update(&mut self) -> PodUpdate {
        PodUpdate {
            source: Source::File,
            pods: self.scan(),
            ready: true,
        }
    }
}

/// Rescans at every batch of inotify events (`wake`) and every `every`
/// (fileCheckFrequency), sending each set; ends when the sync loop is
/// gone.
pub fn spawn(
    mut scanner: Scanner,
    every: std::time::Duration,
    mut wake: mpsc::Receiver<()>,
    updates: mpsc::Sender<PodUpdate>,
) {
    tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        let mut tick = tokio::time::interval_at(start + every, every);
        loop {
            // A static pod's version on trial runs out: scan then too.
            let deadline = scanner.next_deadline;
            let trial_ends = async {
                match deadline {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tick.tick() => {}
                Some(()) = wake.recv() => while wake.try_recv().is_ok() {},
                _ = trial_ends => {}
            }
            if updates.send(scanner.update()).await.is_err() {
                return;
            }
        }
    });
}

/// Watches `dir` with inotify on a thread of its own; every batch of
/// events sends one wake-up. The folder is created if missing.
pub fn watch(dir: &Path, tx: mpsc::Sender<()>) -> std::io::Result<()> {
    use inotify::{Inotify, WatchMask};
    std::fs::create_dir_all(dir)?;
    let mut ino = Inotify::init()?;
    ino.watches().add(
        dir,
        // Complete files only: CLOSE_WRITE after a write, MOVED_TO after a
        // rename (CREATE would show a file still being written).
        WatchMask::CLOSE_WRITE | WatchMask::MOVED_TO | WatchMask::MOVED_FROM | WatchMask::DELETE,
    )?;
    std::thread::Builder::new()
        .name("static-pods".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match ino.read_events_blocking(&mut buf) {
                    Ok(_) => {
                        if tx.blocking_send(()).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!("inotify: {e}; relying on the periodic rescan");
                        return;
                    }
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: NAME}\nspec:\n  containers:\n  - {name: c, image: 'i:1'}\n";

    #[test]
    fn scan_rules() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        std::fs::write(d.join("a.yaml"), POD.replace("NAME", "a")).expect("w");
        std::fs::write(d.join(".hidden.yaml"), POD.replace("NAME", "h")).expect("w");
        std::fs::write(d.join("bad.yaml"), "kind: [").expect("w");
        std::fs::create_dir(d.join("sub")).expect("mkdir");
        let mut src = FileSource::new(d, "n");
        let s = src.scan();
        assert_eq!(s.pods.len(), 1);
        assert_eq!(s.new_errors.len(), 2, "{:?}", s.new_errors);
        assert!(s.new_errors[0].ends_with(
            "sub: a directory: static pods are read from the folder's files, not from subfolders"
        ));
        assert!(s.new_errors[1].contains("bad.yaml: not valid YAML"));
        // Unchanged: the error is not new any more, the UID and seen stay.
        let uid = s.pods.keys().next().cloned().expect("uid");
        let s2 = src.scan();
        assert!(s2.new_errors.is_empty());
        assert_eq!(s2.errors.len(), 2);
        std::fs::remove_dir(d.join("sub")).expect("rmdir");
        assert_eq!(s2.pods.keys().next(), Some(&uid));
        // A good file turning bad keeps its last good pod.
        std::fs::write(d.join("a.yaml"), "apiVersion: v1\nkind: Pod\n").expect("w");
        let s3 = src.scan();
        assert_eq!(s3.pods.keys().next(), Some(&uid));
        assert!(s3.new_errors[0].contains("previous version keeps running"));
        // A duplicate name in another file is an error; the first wins.
        std::fs::write(d.join("a.yaml"), POD.replace("NAME", "a")).expect("w");
        std::fs::write(
            d.join("b.yaml"),
            POD.replace("NAME", "a").replace("i:1", "i:2"),
        )
        .expect("w");
        let s4 = src.scan();
        assert_eq!(s4.pods.len(), 1);
        assert!(s4.errors.iter().any(|e| e.contains("already defined in")));
        // Removed file: its pod is gone.
        std::fs::remove_file(d.join("a.yaml")).expect("rm");
        let s5 = src.scan();
        assert_eq!(s5.pods.len(), 1);
        assert_ne!(s5.pods.keys().next(), Some(&uid));
    }

    #[test]
    fn symlinks_loops_dangling_and_to_directories_are_reported_once() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        let elsewhere = tempfile::tempdir().expect("tmp");
        std::fs::write(elsewhere.path().join("p.yaml"), POD.replace("NAME", "l")).expect("w");
        symlink(elsewhere.path().join("p.yaml"), d.join("link.yaml")).expect("ln");
        symlink(d.join("loop2.yaml"), d.join("loop1.yaml")).expect("ln");
        symlink(d.join("loop1.yaml"), d.join("loop2.yaml")).expect("ln");
        symlink(d.join("gone.yaml"), d.join("dangling.yaml")).expect("ln");
        symlink(elsewhere.path(), d.join("dir.yaml")).expect("ln");
        let mut src = FileSource::new(d, "n");
        let s = src.scan();
        assert_eq!(s.pods.len(), 1, "a link to a file is read");
        // The OS's wording of ENOENT and ELOOP is not ours to test (qemu-user
        // words a loop otherwise): that they are reported, by name.
        let want = [
            "dangling.yaml: cannot read: ",
            "dir.yaml: a directory",
            "loop1.yaml: cannot read: ",
            "loop2.yaml: cannot read: ",
        ];
        assert_eq!(s.new_errors.len(), want.len(), "{:?}", s.new_errors);
        for (got, want) in s.new_errors.iter().zip(want) {
            assert!(got.contains(want), "{got} lacks {want}");
        }
        let s = src.scan();
        assert!(s.new_errors.is_empty(), "once: {:?}", s.new_errors);
        assert_eq!(s.errors.len(), 4);
        for f in ["loop1.yaml", "loop2.yaml", "dangling.yaml", "dir.yaml"] {
            std::fs::remove_file(d.join(f)).expect("rm");
        }
        assert!(src.scan().errors.is_empty());
    }

    #[test]
    fn oversize_and_unreadable_files_are_refused_and_reported_once() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        std::fs::write(d.join("a.yaml"), POD.replace("NAME", "a")).expect("w");
        let mut src = FileSource::new(d, "n");
        let uid = src.scan().pods.keys().next().cloned().expect("uid");
        // Grows past the limit (a comment, so it would parse): refused,
        // named, and the last good pod keeps running.
        let big = format!("{}#{}\n", POD.replace("NAME", "a"), "x".repeat(1 << 20));
        std::fs::write(d.join("a.yaml"), &big).expect("w");
        let s = src.scan();
        assert_eq!(s.pods.keys().next(), Some(&uid));
        assert_eq!(s.new_errors.len(), 1, "{:?}", s.new_errors);
        assert!(
            s.new_errors[0].contains(&format!(
                "a.yaml: {} bytes: a manifest may be at most 1048576 bytes",
                big.len()
            )) && s.new_errors[0].contains("previous version keeps running"),
            "{}",
            s.new_errors[0]
        );
        // Binary garbage: not UTF-8.
        std::fs::write(d.join("junk"), [0xff, 0xfe, 0x00, 0x80]).expect("w");
        let s = src.scan();
        assert_eq!(s.new_errors.len(), 1, "{:?}", s.new_errors);
        assert!(
            s.new_errors[0].contains("junk: cannot read"),
            "{}",
            s.new_errors[0]
        );
        assert_eq!(s.errors.len(), 2);
        // Rescans report nothing new while nothing changes.
        let s = src.scan();
        assert!(s.new_errors.is_empty(), "{:?}", s.new_errors);
        assert_eq!(s.errors.len(), 2);
        // A file that failed to parse, then grew too large: one error, the
        // read one; back to the bad text: its parse error again.
        std::fs::write(d.join("bad.yaml"), "kind: [").expect("w");
        assert_eq!(src.scan().new_errors.len(), 1);
        std::fs::write(d.join("bad.yaml"), &big).expect("w");
        let s = src.scan();
        assert_eq!(
            s.errors.iter().filter(|e| e.contains("bad.yaml")).count(),
            1,
            "{:?}",
            s.errors
        );
        std::fs::write(d.join("bad.yaml"), "kind: [").expect("w");
        let s = src.scan();
        assert!(
            s.new_errors
                .iter()
                .any(|e| e.contains("bad.yaml: not valid YAML")),
            "{:?}",
            s.new_errors
        );
        std::fs::remove_file(d.join("bad.yaml")).expect("rm");
        // Fixed: read again, no errors left.
        std::fs::write(d.join("a.yaml"), POD.replace("NAME", "a")).expect("w");
        std::fs::remove_file(d.join("junk")).expect("rm");
        let s = src.scan();
        assert!(s.errors.is_empty(), "{:?}", s.errors);
        assert_eq!(s.pods.keys().next(), Some(&uid));
    }
}
