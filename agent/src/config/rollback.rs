//! Static pods that roll back: a static pod annotated
//! `picolet.io/rollback-after: <duration>` whose manifest changes, and
//! whose new version is not Ready within that time, is replaced by the last
//! version of it that was Ready. The manifest stays as the operator wrote
//! it; the version that failed is not tried again until the file changes.
//!
//! The guard sits between the file source and the sync loop: it sees each
//! scan's pods and the pods' readiness, and hands on the pods to run. The
//! last Ready version of each guarded pod (and which version failed) is
//! kept in `<dataDir>/agent/static-ready/<namespace>_<name>.json`, so a
//! restarted agent still knows what to return to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use super::PodSet;

use super::manifest::{ROLLED_BACK, rollback_after};

#[derive(Debug, Clone, Default)]
struct Kept {
    /// The last version that was Ready.
    last_ready: Option<Pod>,
    /// The UID of the version that was not Ready in time.
    failed: Option<String>,
}

/// [`Kept`] on disk: the pod as a JSON value, so that the binary holds no
/// second (de)serializer of the whole Pod type ([`super::manifest::kept_pod`]).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    last_ready: Option<serde_json::Value>,
    failed: Option<String>,
}

/// Why a kept file does not read.
#[derive(Debug, thiserror::Error)]
enum KeptError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("the pod: {0}")]
    Pod(#[from] super::manifest::ApiPodError),
}

fn read_kept(path: &Path) -> Result<Kept, KeptError> {
    let stored: Stored = serde_json::from_slice(&std::fs::read(path)?)?;
    let last_ready = match &stored.last_ready {
        Some(v) => Some(super::manifest::kept_pod(v)?),
        None => None,
    };
    Ok(Kept {
        last_ready,
        failed: stored.failed,
    })
}

#[derive(Debug, Default)]
struct Entry {
    kept: Kept,
    /// The version being tried and since when.
    trial: Option<(String, Instant)>,
}

/// A rollback that just happened, for the event and the metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    pub namespace: String,
    pub name: String,
    pub message: String,
}

/// What the guard hands on after a scan.
#[derive(Debug, Default)]
pub struct Guarded {
    pub pods: PodSet,
    pub rolled_back: Vec<RolledBack>,
    /// When the earliest version on trial runs out of time.
    pub next_deadline: Option<Instant>,
}

#[derive(Debug)]
pub struct Guard {
    dir: PathBuf,
    entries: BTreeMap<String, Entry>,
    /// The guarded pods handed on by the last scan, by namespace_name.
    served: BTreeMap<String, Arc<Pod>>,
}

fn uid(p: &Pod) -> &str {
    p.metadata.uid.as_deref().unwrap_or("")
}

fn key(p: &Pod) -> String {
    format!(
        "{}_{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

impl Guard {
    /// The guard with what `dir` kept; a file that does not read is
    /// reported and set aside (the pod runs as its manifest says).
    pub fn load(dir: &Path) -> Self {
        let mut entries = BTreeMap::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = e.path();
            let Some(k) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            match read_kept(&path) {
                Ok(kept) => {
                    entries.insert(k.to_string(), Entry { kept, trial: None });
                }
                Err(e) => {
                    tracing::warn!(
                        "{}: {e}: the last Ready version is forgotten",
                        path.display()
                    );
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        Self {
            dir: dir.to_path_buf(),
            entries,
            served: BTreeMap::new(),
        }
    }

    fn save(&self, k: &str) {
        let path = self.dir.join(format!("{k}.json"));
        let written = match self.entries.get(k) {
            Some(e) => serde_json::to_vec(&Stored {
                last_ready: e
                    .kept
                    .last_ready
                    .as_ref()
                    .and_then(|p| serde_json::to_value(p).ok()),
                failed: e.kept.failed.clone(),
            })
            .map_err(std::io::Error::other)
            .and_then(|b| {
                edge_config::private_dir(&self.dir)?;
                edge_config::write_atomic(&path, &b)
            }),
            None => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
        };
        if let Err(e) = written {
            tracing::warn!("{}: {e}", path.display());
        }
    }

    /// The pods to run for a scan's `desired` pods (by UID, with the file
    /// each came from), given which UIDs are Ready now.
    pub fn apply(
        &mut self,
        desired: BTreeMap<String, (PathBuf, Arc<Pod>)>,
        ready: impl Fn(&str) -> bool,
        now: Instant,
    ) -> Guarded {
        // What ran until now and is Ready is the version to return to, also
        // when this scan brings its successor (the change can come before
        // any scan saw it Ready).
        for (k, p) in std::mem::take(&mut self.served) {
            let restored = p
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(ROLLED_BACK));
            if restored || !ready(uid(&p)) {
                continue;
            }
            let e = self.entries.entry(k.clone()).or_default();
            if e.kept.last_ready.as_ref().map(uid) != Some(uid(&p)) {
                e.kept.last_ready = Some((*p).clone());
                self.save(&k);
            }
        }
        let mut out = Guarded::default();
        let mut seen = Vec::new();
        for (u, (path, pod)) in desired {
            let Some(Ok(limit)) = rollback_after(&pod) else {
                out.pods.insert(u, pod);
                continue;
            };
            let k = key(&pod);
            seen.push(k.clone());
            let e = self.entries.entry(k.clone()).or_default();
            if ready(&u) {
                e.trial = None;
                let changed = e.kept.last_ready.as_ref().map(uid) != Some(u.as_str())
                    || e.kept.failed.is_some();
                e.kept = Kept {
                    last_ready: Some((*pod).clone()),
                    failed: None,
                };
                if changed {
                    self.save(&k);
                }
                out.pods.insert(u, pod);
                continue;
            }
            let Some(last) = e.kept.last_ready.clone().filter(|l| uid(l) != u) else {
                // Nothing else was ever Ready: this version runs as it is.
                out.pods.insert(u, pod);
                continue;
            };
            let message = format!(
                "{}: this version (uid {u}) was not Ready within {}: running the last \
                 Ready version (uid {}) until the file changes",
                path.display(),
                humantime(limit),
                uid(&last)
            );
            if e.kept.failed.as_deref() == Some(u.as_str()) {
                out.pods
                    .insert(uid(&last).to_string(), restored(last, &message));
                continue;
            }
            let since = match &e.trial {
                Some((t, since)) if *t == u => *since,
                _ => {
                    e.trial = Some((u.clone(), now));
                    now
                }
            };
            let deadline = since + limit;
            if now < deadline {
                out.next_deadline = Some(out.next_deadline.map_or(deadline, |d| d.min(deadline)));
                out.pods.insert(u, pod);
                continue;
            }
            e.trial = None;
            e.kept.failed = Some(u.clone());
            self.save(&k);
            out.rolled_back.push(RolledBack {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                message: message.clone(),
            });
            out.pods
                .insert(uid(&last).to_string(), restored(last, &message));
        }
        // A guarded pod whose manifest is gone, or no longer guarded.
        let gone: Vec<String> = self
            .entries
            .keys()
            .filter(|k| !seen.contains(k))
            .cloned()
            .collect();
        for k in gone {
            self.entries.remove(&k);
            self.save(&k);
        }
        self.served = out
            .pods
            .values()
            .filter(|p| seen.contains(&key(p)))
            .map(|p| (key(p), p.clone()))
            .collect();
        out
    }
}

fn restored(mut last: Pod, message: &str) -> Arc<Pod> {
    last.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ROLLED_BACK.into(), message.into());
    Arc::new(last)
}

/// `2m0s`, `90s`, as Go prints a duration.
fn humantime(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::manifest::ROLLBACK_AFTER;

    fn pod(name: &str, uid: &str, after: Option<&str>) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        if let Some(a) = after {
            p.metadata.annotations = Some([(ROLLBACK_AFTER.to_string(), a.to_string())].into());
        }
        Arc::new(p)
    }

    fn scan(pods: &[&Arc<Pod>]) -> BTreeMap<String, (PathBuf, Arc<Pod>)> {
        pods.iter()
            .map(|p| {
                (
                    uid(p).to_string(),
                    (
                        PathBuf::from("/etc/picolet/manifests/web.yaml"),
                        (*p).clone(),
                    ),
                )
            })
            .collect()
    }

    fn uids(g: &Guarded) -> Vec<&str> {
        g.pods.keys().map(String::as_str).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_not_ready_in_time_runs_the_last_ready_version_until_the_file_changes() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut g = Guard::load(d.path());
        let v1 = pod("web", "v1", Some("2m"));
        let v2 = pod("web", "v2", Some("2m"));
        let v3 = pod("web", "v3", Some("2m"));
        let t0 = Instant::now();
        // v1 comes up Ready and is kept.
        assert_eq!(uids(&g.apply(scan(&[&v1]), |_| false, t0)), ["v1"]);
        assert_eq!(uids(&g.apply(scan(&[&v1]), |u| u == "v1", t0)), ["v1"]);
        // v2 is tried for two minutes.
        let out = g.apply(scan(&[&v2]), |_| false, t0);
        assert_eq!(uids(&out), ["v2"]);
        assert_eq!(out.next_deadline, Some(t0 + Duration::from_secs(120)));
        let out = g.apply(scan(&[&v2]), |_| false, t0 + Duration::from_secs(119));
        assert_eq!((uids(&out), out.rolled_back.len()), (vec!["v2"], 0));
        // Then v1 comes back, once, with the reason on it.
        let out = g.apply(scan(&[&v2]), |_| false, t0 + Duration::from_secs(120));
        assert_eq!(uids(&out), ["v1"]);
        assert_eq!(out.rolled_back.len(), 1);
        assert!(
            out.rolled_back[0]
                .message
                .contains("(uid v2) was not Ready within 2m0s"),
            "{}",
            out.rolled_back[0].message
        );
        let back = &out.pods["v1"];
        assert!(
            back.metadata
                .annotations
                .as_ref()
                .expect("annotations")
                .contains_key(ROLLED_BACK)
        );
        let out = g.apply(scan(&[&v2]), |u| u == "v1", t0 + Duration::from_secs(500));
        assert_eq!((uids(&out), out.rolled_back.len()), (vec!["v1"], 0));
        // A restarted agent remembers both what was Ready and what failed.
        let mut g = Guard::load(d.path());
        let out = g.apply(scan(&[&v2]), |_| false, t0 + Duration::from_secs(600));
        assert_eq!((uids(&out), out.rolled_back.len()), (vec!["v1"], 0));
        // A new change is tried again, and kept once Ready.
        assert_eq!(
            uids(&g.apply(scan(&[&v3]), |_| false, t0 + Duration::from_secs(601))),
            ["v3"]
        );
        assert_eq!(
            uids(&g.apply(scan(&[&v3]), |u| u == "v3", t0 + Duration::from_secs(602))),
            ["v3"]
        );
        let kept = read_kept(&d.path().join("default_web.json")).expect("kept");
        assert_eq!(kept.last_ready.as_ref().map(uid), Some("v3"));
        assert_eq!(kept.failed, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_version_ready_before_the_change_is_returned_to_though_no_scan_saw_it_ready() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut g = Guard::load(d.path());
        let v1 = pod("web", "v1", Some("30s"));
        let v2 = pod("web", "v2", Some("30s"));
        let t0 = Instant::now();
        // The only scan before the change saw v1 not yet Ready.
        assert_eq!(uids(&g.apply(scan(&[&v1]), |_| false, t0)), ["v1"]);
        // It is Ready when the change comes.
        assert_eq!(uids(&g.apply(scan(&[&v2]), |u| u == "v1", t0)), ["v2"]);
        let out = g.apply(scan(&[&v2]), |_| false, t0 + Duration::from_secs(30));
        assert_eq!((uids(&out), out.rolled_back.len()), (vec!["v1"], 1));
    }

    #[tokio::test(start_paused = true)]
    async fn unguarded_pods_and_first_versions_run_as_written() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut g = Guard::load(d.path());
        let plain = pod("plain", "p1", None);
        let first = pod("web", "v1", Some("10s"));
        let t0 = Instant::now();
        let out = g.apply(
            scan(&[&plain, &first]),
            |_| false,
            t0 + Duration::from_secs(3600),
        );
        assert_eq!(uids(&out), ["p1", "v1"]);
        assert!(out.rolled_back.is_empty() && out.next_deadline.is_none());
        // The guarded pod's manifest goes: so does what was kept of it.
        g.apply(scan(&[&first]), |_| true, t0);
        assert!(d.path().join("default_web.json").exists());
        g.apply(scan(&[&plain]), |_| true, t0);
        assert!(!d.path().join("default_web.json").exists());
    }

    #[test]
    fn the_annotation_must_be_a_duration_above_zero() {
        assert_eq!(
            rollback_after(&pod("a", "u", Some("90s"))),
            Some(Ok(Duration::from_secs(90)))
        );
        assert!(matches!(
            rollback_after(&pod("a", "u", Some("0s"))),
            Some(Err(_))
        ));
        assert!(matches!(
            rollback_after(&pod("a", "u", Some("soon"))),
            Some(Err(_))
        ));
        assert_eq!(rollback_after(&pod("a", "u", None)), None);
    }
}
