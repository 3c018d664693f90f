//! Pod sources, kubelet's `pkg/kubelet/config`: the static pod folder
//! ([`file`]) and the API server ([`apiserver`]), each checked by
//! [`validate`] after [`manifest`] decoded it. Each source runs as a task
//! of its own and sends its whole set of pods, decoded, as one typed
//! [`PodUpdate`] on a channel shared by both (kubelet's `PodConfig` mux);
//! the sync loop keeps the latest set of each source in [`Pods`] and never
//! sees a manifest or the API server's JSON.

pub mod apiserver;
pub mod file;
pub mod manifest;
pub mod rollback;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// Desired pods by UID.
pub type PodSet = BTreeMap<String, Arc<Pod>>;

/// Where a pod came from (kubelet's `kubetypes.FileSource`,
/// `ApiserverSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    File,
    Api,
}

/// A source's whole set of pods (kubelet's `PodUpdate` with `SET`):
/// decoded, validated, by UID.
#[derive(Debug, Clone)]
pub struct PodUpdate {
    pub source: Source,
    pub pods: PodSet,
    /// The source has listed its pods at least once (kubelet's
    /// `sourcesReady`): a checkpoint read before the API server answered
    /// is not a listing.
    pub ready: bool,
}

/// The latest set of each source, as the sync loop keeps them.
#[derive(Debug, Clone, Default)]
pub struct Pods {
    pub file: PodSet,
    pub api: PodSet,
    /// Whether the API server's pods were listed once; true without an API
    /// server.
    api_ready: bool,
}

impl Pods {
    /// `cluster`: whether an API server is a source.
    pub fn new(cluster: bool) -> Self {
        Self {
            api_ready: !cluster,
            ..Self::default()
        }
    }

    /// Takes a source's new set; returns whether the file source's changed
    /// (their mirror pods follow it).
    pub fn apply(&mut self, u: PodUpdate) -> bool {
        match u.source {
            Source::File => {
                let changed = self.file != u.pods;
                self.file = u.pods;
                changed
            }
            Source::Api => {
                self.api = u.pods;
                self.api_ready |= u.ready;
                false
            }
        }
    }

    /// Every source has listed its pods once: a pod none of them defines is
    /// an orphan.
    pub fn ready(&self) -> bool {
        self.api_ready
    }
}

/// The static pods and the API server's (admitted) by UID; a static pod
/// wins a UID both have.
pub fn merged(file: &PodSet, api: &PodSet) -> PodSet {
    let mut all = api.clone();
    all.extend(file.iter().map(|(k, v)| (k.clone(), v.clone())));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        Arc::new(p)
    }

    fn set(pods: &[(&str, &str)]) -> PodSet {
        pods.iter()
            .map(|(uid, name)| ((*uid).to_string(), pod(name)))
            .collect()
    }

    #[test]
    fn each_source_replaces_only_its_own_set() {
        let mut p = Pods::new(true);
        assert!(!p.ready(), "the API server has not listed yet");
        let file = PodUpdate {
            source: Source::File,
            pods: set(&[("a", "static")]),
            ready: true,
        };
        assert!(p.apply(file.clone()), "the static pods changed");
        assert!(!p.apply(file), "the same set again is no change");
        let checkpoint = PodUpdate {
            source: Source::Api,
            pods: set(&[("b", "saved")]),
            ready: false,
        };
        assert!(!p.apply(checkpoint));
        assert!(!p.ready(), "a checkpoint is not a listing");
        p.apply(PodUpdate {
            source: Source::Api,
            pods: set(&[("c", "listed")]),
            ready: true,
        });
        assert!(p.ready());
        assert_eq!(p.file.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(p.api.keys().collect::<Vec<_>>(), ["c"]);
        p.apply(PodUpdate {
            source: Source::Api,
            pods: PodSet::new(),
            ready: false,
        });
        assert!(p.ready(), "listed once stays listed");
    }

    #[test]
    fn without_an_api_server_the_sources_are_ready_at_once() {
        assert!(Pods::new(false).ready());
    }

    #[test]
    fn a_static_pod_wins_its_uid() {
        let all = merged(
            &set(&[("u", "static")]),
            &set(&[("u", "api"), ("v", "api")]),
        );
        assert_eq!(all["u"].metadata.name.as_deref(), Some("static"));
        assert_eq!(all.len(), 2);
    }
}
