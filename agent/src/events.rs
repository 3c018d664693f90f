//! Events (Pulled, Created, Started, Killing, BackOff, Failed, ...) in a
//! bounded in-memory ring, logged as they happen and served as a v1
//! `EventList`. A repeat of the newest event for the same object and reason
//! bumps its count, as the API server's event correlator does.

use std::collections::VecDeque;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// What an event is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Object {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// e.g. `spec.containers{web}`.
    pub field_path: String,
}

/// The ring.
#[derive(Debug)]
pub struct Events {
    cap: usize,
    seq: u64,
    node: String,
    ring: VecDeque<Event>,
}

impl Events {
    pub fn new(cap: usize, node: &str) -> Self {
        Self {
            cap,
            seq: 0,
            node: node.into(),
            ring: VecDeque::new(),
        }
    }

    /// Records an event: `kind` is `Normal` or `Warning`.
    pub fn record(&mut self, obj: &Object, kind: &str, reason: &str, message: &str) {
        if kind == "Warning" {
            tracing::warn!(object = %format!("{}/{}", obj.namespace, obj.name), field = %obj.field_path, reason, "{message}");
        } else {
            tracing::info!(object = %format!("{}/{}", obj.namespace, obj.name), field = %obj.field_path, reason, "{message}");
        }
        let now = Time(crate::status::timestamp_now());
        // Same object, reason and message among the recent ones: count it.
        if let Some(e) = self.ring.iter_mut().rev().take(16).find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.message.as_deref() == Some(message)
                && e.involved_object.uid.as_deref() == Some(obj.uid.as_str())
                && e.involved_object.field_path.as_deref().unwrap_or("") == obj.field_path
        }) {
            e.count = Some(e.count.unwrap_or(1) + 1);
            e.last_timestamp = Some(now);
            return;
        }
        self.seq += 1;
        let name = format!("{}.{:x}", obj.name, self.seq);
        self.ring.push_back(Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(obj.namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some(obj.kind.into()),
                namespace: Some(obj.namespace.clone()),
                name: Some(obj.name.clone()),
                uid: (!obj.uid.is_empty()).then(|| obj.uid.clone()),
                field_path: (!obj.field_path.is_empty()).then(|| obj.field_path.clone()),
                api_version: Some("v1".into()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(kind.into()),
            count: Some(1),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            source: Some(EventSource {
                component: Some("picolet".into()),
                host: Some(self.node.clone()),
            }),
            reporting_component: Some("picolet".into()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        });
        while self.ring.len() > self.cap {
            self.ring.pop_front();
        }
    }

    /// All events, oldest first.
    pub fn list(&self) -> Vec<Event> {
        self.ring.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_counted() {
        let mut ev = Events::new(3, "n");
        let obj = Object {
            kind: "Pod",
            namespace: "default".into(),
            name: "p".into(),
            uid: "u".into(),
            field_path: String::new(),
        };
        ev.record(&obj, "Warning", "BackOff", "back-off");
        ev.record(&obj, "Warning", "BackOff", "back-off");
        assert_eq!(ev.list().len(), 1);
        assert_eq!(ev.list()[0].count, Some(2));
        for i in 0..5 {
            ev.record(&obj, "Normal", "Started", &format!("s{i}"));
        }
        let l = ev.list();
        assert_eq!(l.len(), 3);
        assert_eq!(l[2].message.as_deref(), Some("s4"));
    }
}
