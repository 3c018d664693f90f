//! A collection as a list+watch keeps it (client-go's reflector store):
//! a LIST replaces the set and gives the resourceVersion to watch from;
//! ADDED/MODIFIED/DELETED events change it, BOOKMARKs only move the
//! resourceVersion, an ERROR (410 Gone: the version is too old) asks for a
//! new LIST. Pure: [`crate::kube::reflector`] does the HTTP.

use std::collections::BTreeMap;

use serde_json::Value;

/// What to do after an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Keep reading; `true` when the set of pods changed.
    Continue(bool),
    /// LIST again (the watch's version expired, or an error event).
    Relist(String),
}

/// The objects by UID, as the API server sent them.
#[derive(Debug, Default, Clone)]
pub struct Cache {
    pub objects: BTreeMap<String, Value>,
    /// Where the next watch starts.
    pub resource_version: String,
}

fn uid(obj: &Value) -> Option<&str> {
    obj["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
}

/// A LIST's answer that is not a list.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("a list without metadata.resourceVersion")]
    NoResourceVersion,
    #[error("a list without items")]
    NoItems,
}

impl Cache {
    /// A LIST's answer (a PodList, a ConfigMapList...) replaces everything.
    pub fn listed(&mut self, list: Value) -> Result<(), ListError> {
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .ok_or(ListError::NoResourceVersion)?
            .to_string();
        let Value::Array(items) = list["items"].clone() else {
            return Err(ListError::NoItems);
        };
        self.objects = items
            .into_iter()
            .filter_map(|p| Some((uid(&p)?.to_string(), p)))
            .collect();
        self.resource_version = rv;
        Ok(())
    }

    /// One watch event (`{"type": ..., "object": ...}`).
    pub fn event(&mut self, ev: &Value) -> Next {
        let obj = &ev["object"];
        let rv = obj["metadata"]["resourceVersion"].as_str();
        match ev["type"].as_str() {
            Some("ADDED" | "MODIFIED") => {
                let Some(u) = uid(obj) else {
                    return Next::Continue(false);
                };
                if let Some(rv) = rv {
                    self.resource_version = rv.into();
                }
                let changed = self.objects.get(u) != Some(obj);
                self.objects.insert(u.into(), obj.clone());
                Next::Continue(changed)
            }
            Some("DELETED") => {
                if let Some(rv) = rv {
                    self.resource_version = rv.into();
                }
                let removed = uid(obj).and_then(|u| self.objects.remove(u)).is_some();
                Next::Continue(removed)
            }
            Some("BOOKMARK") => {
                if let Some(rv) = rv {
                    self.resource_version = rv.into();
                }
                Next::Continue(false)
            }
            Some("ERROR") => Next::Relist(format!(
                "{} {}",
                obj["code"].as_i64().unwrap_or(0),
                obj["message"].as_str().unwrap_or("watch error")
            )),
            other => Next::Relist(format!("unknown watch event type {other:?}")),
        }
    }
}

/// What a reflector lists and watches: a collection's path and a field
/// selector (`spec.nodeName=n`, `metadata.name=x`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub collection: String,
    pub field_selector: String,
    /// BOOKMARK events (about one a minute) keep the watch's version
    /// current, so a watch resumed later is not 410 Gone and relisted:
    /// worth it for a list that is costly to send again (the node's pods),
    /// not for one object.
    pub bookmarks: bool,
}

impl Query {
    /// The pods bound to `node`.
    pub fn pods_of(node: &str) -> Self {
        Self {
            collection: "/api/v1/pods".into(),
            field_selector: format!("spec.nodeName={node}"),
            bookmarks: true,
        }
    }

    /// The object `name` of `collection` (all the Node authorizer lets a
    /// node list and watch of configMaps and secrets, and its own Node).
    pub fn named(collection: String, name: &str) -> Self {
        Self {
            collection,
            field_selector: format!("metadata.name={name}"),
            bookmarks: false,
        }
    }

    fn selector(&self) -> String {
        percent_encoding::utf8_percent_encode(&self.field_selector, SELECTOR).to_string()
    }

    /// The LIST request.
    pub fn list_path(&self) -> String {
        format!("{}?fieldSelector={}", self.collection, self.selector())
    }

    /// The watch request from `rv`; the server ends it after `timeout_s`
    /// and the reflector watches again from where it got.
    pub fn watch_path(&self, rv: &str, timeout_s: u32) -> String {
        let bookmarks = if self.bookmarks {
            "&allowWatchBookmarks=true"
        } else {
            ""
        };
        format!(
            "{}?fieldSelector={}&watch=1{bookmarks}&resourceVersion={rv}&timeoutSeconds={timeout_s}",
            self.collection,
            self.selector()
        )
    }
}

/// What a field selector's value escapes in a query.
const SELECTOR: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_');

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded by hand from the real kube-apiserver 1.26: a LIST of the
    /// pods of a node that picolet's agent runs, and the watch from its
    /// version while a pod was created there, ran (the agent's status
    /// patch), and was deleted (the agent's final DELETE), with a bookmark;
    /// then a watch from an old version (410 Gone).
    const LIST: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/pods-list.json"
    ));
    const WATCH: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/pods-watch.jsonl"
    ));
    const GONE: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/pods-watch-gone.jsonl"
    ));

    #[test]
    fn a_list_then_the_watch_of_a_pods_life() {
        let mut c = Cache::default();
        c.listed(serde_json::from_str(LIST).expect("list"))
            .expect("listed");
        let listed = c.objects.len();
        let list_rv = c.resource_version.clone();
        assert!(!list_rv.is_empty());
        let mut seen = Vec::new();
        let mut max_pods = listed;
        for line in WATCH.lines().filter(|l| !l.trim().is_empty()) {
            let ev: Value = serde_json::from_str(line).expect("event");
            seen.push(ev["type"].as_str().unwrap_or("").to_string());
            assert!(matches!(c.event(&ev), Next::Continue(_)), "{line}");
            max_pods = max_pods.max(c.objects.len());
        }
        assert!(seen.contains(&"ADDED".to_string()), "{seen:?}");
        assert!(seen.contains(&"MODIFIED".to_string()), "{seen:?}");
        assert!(seen.contains(&"DELETED".to_string()), "{seen:?}");
        assert_eq!(max_pods, listed + 1, "the new pod was there");
        assert_eq!(c.objects.len(), listed, "and is gone");
        assert_ne!(c.resource_version, list_rv);
        // A bookmark moves the version only.
        let before = c.objects.clone();
        let bm = serde_json::json!({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "999999"}}});
        assert_eq!(c.event(&bm), Next::Continue(false));
        assert_eq!(
            (c.objects == before, c.resource_version.as_str()),
            (true, "999999")
        );
    }

    #[test]
    fn an_expired_version_asks_for_a_relist() {
        let mut c = Cache::default();
        let ev: Value =
            serde_json::from_str(GONE.lines().next().expect("an event")).expect("event");
        match c.event(&ev) {
            Next::Relist(why) => assert!(why.starts_with("410 "), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn paths_select_the_node_or_one_object() {
        assert_eq!(
            Query::pods_of("pk-edge").watch_path("42", 300),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dpk-edge&watch=1&allowWatchBookmarks=true&resourceVersion=42&timeoutSeconds=300"
        );
        assert!(
            Query::pods_of("n")
                .list_path()
                .ends_with("spec.nodeName%3Dn")
        );
        let cm = Query::named("/api/v1/namespaces/web/configmaps".into(), "app.conf");
        assert_eq!(
            cm.list_path(),
            "/api/v1/namespaces/web/configmaps?fieldSelector=metadata.name%3Dapp.conf"
        );
        assert_eq!(
            cm.watch_path("7", 60),
            "/api/v1/namespaces/web/configmaps?fieldSelector=metadata.name%3Dapp.conf&watch=1&resourceVersion=7&timeoutSeconds=60"
        );
    }
}
