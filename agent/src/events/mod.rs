//! Events (Pulled, Created, Started, Killing, BackOff, Failed, ...) in a
//! bounded in-memory ring, served as a v1 `EventList`. A repeat of a recent
//! event for the same object, reason and message bumps its count, as the
//! API server's event correlator does. Logging comes after that
//! de-duplication and is rate-limited: a repeat is logged at counts 1, 2,
//! 4, 8, ... only, so a probe failing every 10 s for a year writes 22 log
//! lines, not 3 million (workloads trigger these; the device logs to flash).

pub mod reason;
pub mod sink;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

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

impl Object {
    /// The node itself (kubelet's node reference: its UID is its name).
    pub fn node(name: &str) -> Self {
        Self {
            kind: "Node",
            name: name.to_string(),
            uid: name.to_string(),
            ..Default::default()
        }
    }
}

/// `Normal` or `Warning`, as the API's `Event.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The handle every manager records events through.
#[derive(Debug, Clone)]
pub struct Recorder(Arc<Mutex<Events>>);

impl Recorder {
    pub fn new(cap: usize, node: &str) -> Self {
        Self(Arc::new(Mutex::new(Events::new(cap, node))))
    }

    pub fn event(&self, obj: &Object, kind: EventType, reason: &str, message: &str) {
        crate::mutex::lock(&self.0).record(obj, kind, reason, message);
    }

    /// Also hands every event, as it is after counting (count 1: new),
    /// to `sink` (cluster mode: the API server). Never blocks: when the
    /// sink is full the event stays in the ring only.
    pub fn forward(&self, sink: tokio::sync::mpsc::Sender<Event>) {
        crate::mutex::lock(&self.0).sink = Some(sink);
    }

    /// All events, oldest first.
    pub fn list(&self) -> Vec<Event> {
        crate::mutex::lock(&self.0).list()
    }
}

/// The ring.
#[derive(Debug)]
pub struct Events {
    cap: usize,
    node: String,
    ring: VecDeque<Event>,
    sink: Option<tokio::sync::mpsc::Sender<Event>>,
    /// Events the sink had no room for.
    pub dropped: u64,
}

impl Events {
    pub fn new(cap: usize, node: &str) -> Self {
        Self {
            cap,
            node: node.into(),
            ring: VecDeque::new(),
            sink: None,
            dropped: 0,
        }
    }

    /// Records an event; returns its count (1 for a new one).
    pub fn record(&mut self, obj: &Object, kind: EventType, reason: &str, message: &str) -> i32 {
        let (count, event) = self.count(obj, kind, reason, message);
        if let (Some(sink), Some(event)) = (&self.sink, event)
            && sink.try_send(event).is_err()
        {
            self.dropped += 1;
        }
        if u32::try_from(count).is_ok_and(u32::is_power_of_two) {
            let object = format!("{}/{}", obj.namespace, obj.name);
            let field = &obj.field_path;
            match kind {
                EventType::Warning => {
                    tracing::warn!(object, field, reason, count, "{message}");
                }
                EventType::Normal => {
                    tracing::info!(object, field, reason, count, "{message}");
                }
            }
        }
        count
    }

    /// Counts a repeat or adds a new event; the count and, when there is
    /// a sink to hand it to, the event as it is now.
    fn count(
        &mut self,
        obj: &Object,
        kind: EventType,
        reason: &str,
        message: &str,
    ) -> (i32, Option<Event>) {
        let want = self.sink.is_some();
        let stamp = crate::clock::timestamp_now();
        let now = Time(stamp);
        // Same object, reason and message among the recent ones: count it.
        if let Some(e) = self.ring.iter_mut().rev().take(16).find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.message.as_deref() == Some(message)
                && e.involved_object.uid.as_deref() == Some(obj.uid.as_str())
                && e.involved_object.field_path.as_deref().unwrap_or("") == obj.field_path
        }) {
            let count = e.count.unwrap_or(1).saturating_add(1);
            e.count = Some(count);
            e.last_timestamp = Some(now);
            return (count, want.then(|| e.clone()));
        }
        // client-go's naming: unique across restarts, as the API server
        // keeps events for an hour.
        let name = format!("{}.{:x}", obj.name, stamp.as_nanosecond());
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
            type_: Some(kind.as_str().into()),
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
        let event = if want {
            self.ring.back().cloned()
        } else {
            None
        };
        while self.ring.len() > self.cap {
            self.ring.pop_front();
        }
        (1, event)
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
        ev.record(&obj, EventType::Warning, "BackOff", "back-off");
        ev.record(&obj, EventType::Warning, "BackOff", "back-off");
        assert_eq!(ev.list().len(), 1);
        assert_eq!(ev.list()[0].count, Some(2));
        for i in 0..5 {
            ev.record(&obj, EventType::Normal, "Started", &format!("s{i}"));
        }
        let l = ev.list();
        assert_eq!(l.len(), 3);
        assert_eq!(l[2].message.as_deref(), Some("s4"));
    }

    #[test]
    fn repeats_are_logged_at_powers_of_two_only() {
        let mut ev = Events::new(8, "n");
        let obj = Object {
            kind: "Pod",
            uid: "u".into(),
            ..Default::default()
        };
        let counts: Vec<i32> = (0..10)
            .map(|_| ev.record(&obj, EventType::Warning, "Unhealthy", "probe failed"))
            .collect();
        assert_eq!(counts, (1..=10).collect::<Vec<_>>());
        let logged: Vec<i32> = counts
            .into_iter()
            .filter(|c| u32::try_from(*c).is_ok_and(u32::is_power_of_two))
            .collect();
        assert_eq!(logged, [1, 2, 4, 8]);
        assert_eq!(ev.list().len(), 1);
    }
}
