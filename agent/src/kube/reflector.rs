//! client-go's reflector: LIST a [`Query`], hand the set to a sink, WATCH
//! from the list's resourceVersion and hand it again at every change; when
//! the server ends a watch, watch again from where it got; a 410 Gone or
//! an error event lists again. Failures back off from 800 ms doubling to
//! 30 s with up to 100 % jitter (client-go's reflector), so nodes that lost
//! the API server together do not come back in step; a success resets it.
//!
//! Watches last 30 to 60 minutes (client-go asks for 5 to 10): each renewal
//! is a request on a metered link, and a dead connection is found by the
//! client's PINGs (HTTP/2) or TCP keepalives, not by the watch's end.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::kube::client::{Client, Error};
use crate::kube::watch::{Cache, Next, Query};

const BACKOFF_MIN: Duration = Duration::from_millis(800);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The shortest watch; each lasts up to twice this.
const WATCH_MIN: Duration = Duration::from_secs(30 * 60);

/// What the sink is told.
#[derive(Debug)]
pub enum Seen<'a> {
    /// The set after a LIST (the first, or again after an expired watch).
    Listed(&'a BTreeMap<String, Value>),
    /// The set after a watch event changed it.
    Changed(&'a BTreeMap<String, Value>),
    /// A LIST failed; the reflector retries after its back-off.
    Failed(Arc<Error>),
}

/// A number in [0, 1) from the system's random source.
fn unit_random() -> f64 {
    let mut b = [0u8; 4];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0)
}

/// `d` plus up to `d` more, at random.
pub fn jittered(d: Duration) -> Duration {
    d + d.mul_f64(unit_random())
}

/// Exponential back-off with jitter.
#[derive(Debug)]
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Self(BACKOFF_MIN)
    }

    async fn wait(&mut self) {
        tokio::time::sleep(jittered(self.0)).await;
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
    }

    fn reset(&mut self) {
        self.0 = BACKOFF_MIN;
    }
}

/// Runs until the sink breaks; `what` names the set in logs ("the node's
/// pods").
pub async fn run<F>(client: &Client, query: &Query, what: &str, mut sink: F)
where
    F: FnMut(Seen<'_>) -> ControlFlow<()>,
{
    let mut backoff = Backoff::new();
    let mut outage = crate::kube::Outage::default();
    let list_what = format!("list {what}");
    let watch_what = format!("watch {what}");
    loop {
        let mut cache = Cache::default();
        let listed = match client.get(&query.list_path()).await {
            Ok(list) => cache.listed(list).map_err(|e| e.to_string()),
            Err(e) => {
                outage.failed(&list_what, &e);
                if sink(Seen::Failed(Arc::new(e))).is_break() {
                    return;
                }
                backoff.wait().await;
                continue;
            }
        };
        if let Err(e) = listed {
            outage.failed(&list_what, &e);
            backoff.wait().await;
            continue;
        }
        outage.ok(&list_what);
        if sink(Seen::Listed(&cache.objects)).is_break() {
            return;
        }
        'watch: loop {
            let timeout = u32::try_from(jittered(WATCH_MIN).as_secs()).unwrap_or(u32::MAX);
            let path = query.watch_path(&cache.resource_version, timeout);
            let mut lines = match client.watch(&path).await {
                Ok(l) => l,
                Err(e) if e.status() == Some(hyper::StatusCode::GONE) => {
                    // Too old a version: only a new LIST tells the set.
                    tracing::info!("{list_what} again: {e}");
                    break 'watch;
                }
                Err(e) => {
                    // No answer (an outage): watch again from the same
                    // version once it is back; the watch cache replays what
                    // changed meanwhile, or answers 410 if it cannot.
                    outage.failed(&watch_what, &e);
                    backoff.wait().await;
                    continue 'watch;
                }
            };
            backoff.reset();
            outage.ok(&watch_what);
            while let Some(line) = lines.next().await {
                let ev = match line {
                    Ok(ev) => ev,
                    Err(e) => {
                        tracing::debug!("{watch_what}: {e}");
                        continue 'watch;
                    }
                };
                match cache.event(&ev) {
                    Next::Continue(true) => {
                        if sink(Seen::Changed(&cache.objects)).is_break() {
                            return;
                        }
                    }
                    Next::Continue(false) => {}
                    Next::Relist(why) => {
                        tracing::info!("{list_what} again: {why}");
                        break 'watch;
                    }
                }
            }
            // The server ended the watch: go on from where it got.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_adds_up_to_the_delay_again() {
        let d = Duration::from_secs(10);
        let all: Vec<Duration> = (0..200).map(|_| jittered(d)).collect();
        assert!(all.iter().all(|j| *j >= d && *j < d * 2), "{all:?}");
        let first = all[0];
        assert!(
            all.iter().any(|j| *j != first),
            "200 draws are not all the same"
        );
    }
}
