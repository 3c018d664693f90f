//! PLEG: relists sandboxes and containers and sends the UID of every pod
//! whose containers changed state on its channel (kubelet's `pleg.Watch()`;
//! the sync loop wakes that pod's worker). The runtime's `GetContainerEvents`
//! stream, when it has one, wakes them at once; while that stream is up the
//! relist is only a safety net and runs every 10 s (kubelet's evented PLEG
//! relists every 300 s), otherwise every second (kubelet's generic PLEG;
//! containerd 1.6 has no stream). Each relist makes the runtime look at every
//! container: at 30 pods the 1 s relist was a third of the shim's idle CPU.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cri_proto::v1::ContainerState;
use tokio::sync::{Notify, mpsc, watch};

use crate::health::Health;
use crate::metrics::AgentMetrics;
use crate::runtime::Cri;

/// What PLEG needs, and where it sends pod UIDs.
#[derive(Debug, Clone)]
pub struct Pleg {
    pub cri: Cri,
    pub metrics: Arc<AgentMetrics>,
    pub health: Health,
    pub changed: mpsc::Sender<String>,
    /// The containers the last relist found running (the log rotation's).
    pub running: watch::Sender<Arc<HashSet<String>>>,
}

const RELIST_PERIOD: Duration = Duration::from_secs(1);
const EVENTED_RELIST_PERIOD: Duration = Duration::from_secs(10);

/// Runs forever (until the runtime goes away for good).
pub async fn run(shared: Pleg) {
    let streaming = Arc::new(AtomicBool::new(false));
    // The stream's end: relist at once, then every second until it is back.
    let broke = Arc::new(Notify::new());
    tokio::spawn(event_stream(
        shared.clone(),
        streaming.clone(),
        broke.clone(),
    ));
    let mut last: HashMap<String, (String, i32)> = HashMap::new();
    let mut sandboxes: HashMap<String, (String, bool)> = HashMap::new();
    let mut first = true;
    loop {
        // Asleep until the next relist is due: no wakeup a second to find
        // that the stream is still up.
        if !first {
            let period = if streaming.load(Ordering::Relaxed) {
                EVENTED_RELIST_PERIOD
            } else {
                RELIST_PERIOD
            };
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                () = broke.notified() => {}
            }
        }
        first = false;
        let started = Instant::now();
        let (Ok(containers), Ok(pods)) = (
            shared.cri.list_containers().await,
            shared.cri.list_pod_uids().await,
        ) else {
            continue;
        };
        shared.metrics.pleg_relist(started.elapsed());
        shared.health.relisted();
        let running: HashSet<String> = containers
            .iter()
            .filter(|(_, _, state)| *state == ContainerState::ContainerRunning as i32)
            .map(|(id, _, _)| id.clone())
            .collect();
        shared.running.send_if_modified(|r| {
            let changed = **r != running;
            if changed {
                *r = Arc::new(running);
            }
            changed
        });
        let mut now: HashMap<String, (String, i32)> = HashMap::new();
        let mut changed: Vec<String> = Vec::new();
        for (id, uid, state) in containers {
            if last.get(&id).map(|(_, s)| *s) != Some(state) {
                changed.push(uid.clone());
            }
            now.insert(id, (uid, state));
        }
        for (id, (uid, _)) in &last {
            if !now.contains_key(id) {
                changed.push(uid.clone());
            }
        }
        let mut sb_now = HashMap::new();
        for s in pods {
            if sandboxes.get(&s.id).map(|(_, r)| *r) != Some(s.ready) {
                changed.push(s.uid.clone());
            }
            sb_now.insert(s.id, (s.uid, s.ready));
        }
        last = now;
        sandboxes = sb_now;
        changed.sort();
        changed.dedup();
        for uid in changed.into_iter().filter(|u| !u.is_empty()) {
            if shared.changed.send(uid).await.is_err() {
                return;
            }
        }
    }
}

/// Follows GetContainerEvents; a runtime without it (UNIMPLEMENTED, as
/// containerd 1.6) leaves PLEG to the relist.
async fn event_stream(shared: Pleg, streaming: Arc<AtomicBool>, broke: Arc<Notify>) {
    loop {
        let mut stream = match shared.cri.events().await {
            Ok(s) => {
                streaming.store(true, Ordering::Relaxed);
                s
            }
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                tracing::info!("the runtime has no container event stream; relisting every second");
                return;
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            let ev = match stream.message().await {
                Ok(Some(ev)) => ev,
                // The stream ended or broke: events may be lost until it is
                // back, so relist every second meanwhile, and once now.
                _ => {
                    streaming.store(false, Ordering::Relaxed);
                    broke.notify_one();
                    break;
                }
            };
            let uid = ev
                .pod_sandbox_status
                .as_ref()
                .and_then(|s| s.metadata.as_ref())
                .map(|m| m.uid.clone())
                .unwrap_or_default();
            if !uid.is_empty() && shared.changed.send(uid).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
