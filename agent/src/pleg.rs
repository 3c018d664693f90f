//! PLEG: relists sandboxes and containers every second and wakes the worker
//! of every pod whose containers changed state; the runtime's
//! `GetContainerEvents` stream, when it has one, wakes them at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Shared, lock};

const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// Runs forever (until the runtime goes away for good).
pub async fn run(shared: Arc<Shared>) {
    tokio::spawn(event_stream(shared.clone()));
    let mut last: HashMap<String, (String, i32)> = HashMap::new();
    let mut sandboxes: HashMap<String, (String, bool)> = HashMap::new();
    let mut tick = tokio::time::interval(RELIST_PERIOD);
    loop {
        tick.tick().await;
        let started = Instant::now();
        let (Ok(containers), Ok(pods)) = (
            shared.cri.list_containers().await,
            shared.cri.list_pod_uids().await,
        ) else {
            continue;
        };
        shared.metrics.pleg_relist(started.elapsed());
        *lock(&shared.last_relist) = Instant::now();
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
        for (uid, id, _, ready) in pods {
            if sandboxes.get(&id).map(|(_, r)| *r) != Some(ready) {
                changed.push(uid.clone());
            }
            sb_now.insert(id, (uid, ready));
        }
        last = now;
        sandboxes = sb_now;
        changed.sort();
        changed.dedup();
        for uid in changed.iter().filter(|u| !u.is_empty()) {
            shared.notify(uid);
        }
    }
}

/// Follows GetContainerEvents; a runtime without it (UNIMPLEMENTED, as
/// containerd 1.6) leaves PLEG to the relist.
async fn event_stream(shared: Arc<Shared>) {
    loop {
        let mut stream = match shared.cri.events().await {
            Ok(s) => s,
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                tracing::info!("the runtime has no container event stream; relisting every second");
                return;
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        while let Ok(Some(ev)) = stream.message().await {
            let uid = ev
                .pod_sandbox_status
                .as_ref()
                .and_then(|s| s.metadata.as_ref())
                .map(|m| m.uid.clone())
                .unwrap_or_default();
            if !uid.is_empty() {
                shared.notify(&uid);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
