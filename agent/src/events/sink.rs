//! Events to the API server, as kubelet's recorder sends them (client-go's
//! broadcaster): the agent's ring ([`crate::events`]) already counts a
//! repeat of an event (same object, reason, message), so a new event is
//! POSTed and a repeat PATCHes the same Event's count, last timestamp and
//! message. client-go's spam filter limits each object (by source and
//! involved object) to a burst of 25 events, then one per 5 minutes; the
//! ring keeps every event whatever the filter drops. The queue is bounded
//! and never blocks the recorder; an event that fails is tried 12 times,
//! 10 s apart (client-go), then dropped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};
use k8s_openapi::api::core::v1::Event;
use serde_json::{Value, json};

use crate::kube::client::Client;

/// client-go's `EventSourceObjectSpamFilter`: burst and refill period.
const BURST: f64 = 25.0;
const REFILL: Duration = Duration::from_secs(300);
/// Objects whose buckets are remembered (client-go's LRU: 4096).
const MAX_KEYS: usize = 4096;
const TRIES: u32 = 12;
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// A token bucket per (source, involved object).
#[derive(Debug, Default)]
pub struct SpamFilter {
    buckets: HashMap<String, (f64, tokio::time::Instant)>,
}

impl SpamFilter {
    /// Whether an event about `key` may go now.
    pub fn allow(&mut self, key: &str, now: tokio::time::Instant) -> bool {
        if self.buckets.len() >= MAX_KEYS && !self.buckets.contains_key(key) {
            // Forget the buckets that have refilled: they are as new ones.
            self.buckets.retain(|_, (tokens, at)| {
                *tokens + now.duration_since(*at).as_secs_f64() / REFILL.as_secs_f64() < BURST
            });
            if self.buckets.len() >= MAX_KEYS {
                return false;
            }
        }
        let (tokens, at) = self.buckets.entry(key.to_string()).or_insert((BURST, now));
        *tokens =
            (*tokens + now.duration_since(*at).as_secs_f64() / REFILL.as_secs_f64()).min(BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// client-go's spam key: the source and the involved object.
pub fn spam_key(e: &Event) -> String {
    let o = &e.involved_object;
    let s = e.source.clone().unwrap_or_default();
    [
        s.component.as_deref(),
        s.host.as_deref(),
        o.kind.as_deref(),
        o.namespace.as_deref(),
        o.name.as_deref(),
        o.uid.as_deref(),
        o.api_version.as_deref(),
    ]
    .map(Option::unwrap_or_default)
    .join("\u{0}")
}

/// The namespace an Event goes to: its object's, or `default` for a
/// cluster-scoped object (a Node), as client-go does.
pub fn namespace(e: &Event) -> String {
    match e.involved_object.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => "default".into(),
    }
}

/// The Event to POST: the ring's, in the namespace it goes to.
pub fn body(e: &Event) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or_default();
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Event");
    v["metadata"]["namespace"] = json!(namespace(e));
    if let Some(o) = v["involvedObject"].as_object_mut()
        && o.get("namespace").and_then(Value::as_str) == Some("")
    {
        o.remove("namespace");
    }
    v
}

/// What a repeat changes (client-go's patch of a correlated event).
pub fn repeat_patch(e: &Event) -> Value {
    json!({
        "count": e.count,
        "lastTimestamp": e.last_timestamp,
        "message": e.message,
    })
}

/// Sends the recorder's events until the channel closes.
pub fn spawn(client: Arc<Client>, mut rx: tokio::sync::mpsc::Receiver<Event>) {
    tokio::spawn(async move {
        let mut spam = SpamFilter::default();
        let mut outage = crate::kube::Outage::default();
        while let Some(e) = rx.recv().await {
            if !spam.allow(&spam_key(&e), tokio::time::Instant::now()) {
                tracing::debug!(reason = ?e.reason, "event not sent: over the object's rate");
                continue;
            }
            for attempt in 1..=TRIES {
                match send(&client, &e).await {
                    Ok(()) => {
                        outage.ok("send events");
                        break;
                    }
                    // Refused for good (invalid, forbidden): never again.
                    Err(err) if err.status().is_some_and(|s| s.is_client_error()) => {
                        tracing::warn!("send an event: {err}");
                        break;
                    }
                    Err(err) => {
                        outage.failed("send events", &err);
                        if attempt < TRIES {
                            tokio::time::sleep(RETRY_AFTER).await;
                        }
                    }
                }
            }
        }
    });
}

/// POSTs a new event, PATCHes a repeat (POSTs it when the API server no
/// longer has it: events live an hour there).
async fn send(client: &Client, e: &Event) -> Result<(), crate::kube::client::Error> {
    let ns = namespace(e);
    let name = e.metadata.name.clone().unwrap_or_default();
    let create = async {
        match client
            .json(
                Method::POST,
                &format!("/api/v1/namespaces/{ns}/events"),
                Some(&body(e)),
                None,
            )
            .await
        {
            // Sent before (an earlier try got through).
            Err(err) if err.status() == Some(StatusCode::CONFLICT) => Ok(()),
            r => r.map(|_| ()),
        }
    };
    if e.count.unwrap_or(1) <= 1 {
        return create.await;
    }
    match client
        .json(
            Method::PATCH,
            &format!("/api/v1/namespaces/{ns}/events/{name}"),
            Some(&repeat_patch(e)),
            Some("application/strategic-merge-patch+json"),
        )
        .await
    {
        Err(err) if err.status() == Some(StatusCode::NOT_FOUND) => create.await,
        r => r.map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventType, Events, Object};

    #[test]
    fn an_object_gets_a_burst_of_25_then_one_per_five_minutes() {
        let mut f = SpamFilter::default();
        let t0 = tokio::time::Instant::now();
        let sent = (0..40).filter(|_| f.allow("pod-a", t0)).count();
        assert_eq!(sent, 25);
        assert!(f.allow("pod-b", t0), "another object has its own bucket");
        assert!(!f.allow("pod-a", t0 + Duration::from_secs(200)));
        assert!(f.allow("pod-a", t0 + Duration::from_secs(301)));
        assert!(!f.allow("pod-a", t0 + Duration::from_secs(302)));
    }

    #[test]
    fn the_buckets_are_bounded() {
        let mut f = SpamFilter::default();
        let t0 = tokio::time::Instant::now();
        for i in 0..MAX_KEYS {
            assert!(f.allow(&i.to_string(), t0));
        }
        assert!(!f.allow("one more", t0), "none refilled yet");
        // Once they refilled, they make room.
        assert!(f.allow("one more", t0 + REFILL));
        assert!(f.buckets.len() <= 2);
    }

    /// What we send matches what the real API server stored of the events
    /// picolet sent it (recorded by hand, kube-apiserver v1.26.5 with
    /// Node,RBAC and NodeRestriction): every field we set, as stored.
    #[test]
    fn the_api_server_stored_what_we_send() {
        for (stored, obj, kind, reason) in [
            (
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/testdata/event-backoff-stored.json"
                )),
                Object {
                    kind: "Pod",
                    namespace: "default".into(),
                    name: "crasher".into(),
                    uid: "cd3697f7-8ed2-474b-896a-e06a3297d583".into(),
                    field_path: "spec.containers{c}".into(),
                },
                EventType::Warning,
                "BackOff",
            ),
            (
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/testdata/event-node-stored.json"
                )),
                Object::node("pk-edge"),
                EventType::Warning,
                "InvalidManifest",
            ),
        ] {
            let stored: Value = serde_json::from_str(stored).expect("recorded");
            let mut ring = Events::new(8, "pk-edge");
            let message = stored["message"].as_str().expect("message");
            ring.record(&obj, kind, reason, message);
            let sent = body(&ring.list()[0]);
            for key in [
                "apiVersion",
                "kind",
                "involvedObject",
                "reason",
                "message",
                "type",
                "source",
                "reportingComponent",
                "reportingInstance",
            ] {
                assert_eq!(sent[key], stored[key], "{reason}: {key}");
            }
            assert_eq!(
                sent["metadata"]["namespace"],
                stored["metadata"]["namespace"]
            );
            let name = sent["metadata"]["name"].as_str().expect("name");
            let prefix = |n: &str| n.rsplit_once('.').map(|(p, _)| p.to_string());
            assert_eq!(
                prefix(name),
                prefix(stored["metadata"]["name"].as_str().expect("name"))
            );
        }
    }

    #[test]
    fn node_events_go_to_default_and_pod_events_to_the_pods_namespace() {
        let mut ring = Events::new(8, "pk-edge");
        let node = Object::node("pk-edge");
        ring.record(&node, EventType::Warning, "InvalidManifest", "bad.yaml: x");
        let pod = Object {
            kind: "Pod",
            namespace: "shop".into(),
            name: "web-1".into(),
            uid: "u1".into(),
            field_path: "spec.containers{web}".into(),
        };
        ring.record(&pod, EventType::Normal, "Started", "Started container web");
        ring.record(&pod, EventType::Normal, "Started", "Started container web");
        let l = ring.list();
        let n = body(&l[0]);
        assert_eq!(n["metadata"]["namespace"], "default");
        assert!(n["involvedObject"].get("namespace").is_none());
        assert_eq!(n["kind"], "Event");
        assert_eq!(n["type"], "Warning");
        let p = body(&l[1]);
        assert_eq!(p["metadata"]["namespace"], "shop");
        assert_eq!(p["involvedObject"]["fieldPath"], "spec.containers{web}");
        assert!(
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("web-1."))
        );
        assert_eq!(repeat_patch(&l[1])["count"], 2);
        assert_ne!(spam_key(&l[0]), spam_key(&l[1]));
    }
}
