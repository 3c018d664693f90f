//! Stopping a pod's containers: preStop hooks within the grace period, the
//! `Killing` events, app containers before sidecars; an evicted pod.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::super::{Eviction, SyncError};
use super::{MIN_GRACE, Worker};
use crate::clock::now_ns;
use crate::events::EventType;
use crate::events::reason as event;
use crate::lifecycle::handlers;
use crate::plan::{self, ObservedContainer, State};
use crate::status;

/// Containers of one pod stopped at once (preStop hook and StopContainer).
/// kubelet stops them all at once; 1,000 at once kept the runtime so busy
/// that other pods' exec probes timed out. The grace period runs from when
/// the pod's teardown began, not from a container's turn (at least
/// [`MIN_GRACE`] each, as after a preStop hook that used up the period), so
/// a pod of many containers still stops within about its grace period.
const STOPS_AT_ONCE: usize = 128;

/// A container to stop, the `Killing` event's message, and a grace period
/// other than the pod's (a failed probe's own).
pub(super) type Stop<'a> = (&'a ObservedContainer, String, Option<Duration>);

pub(super) fn stopping<'a>(list: &[&'a ObservedContainer]) -> Vec<Stop<'a>> {
    list.iter()
        .map(|c| (*c, format!("Stopping container {}", c.name), None))
        .collect()
}

impl Worker {
    /// Stops containers in parallel, each with its preStop hook and the
    /// pod's grace period (or the one given).
    /// Stops a pod's containers: the app (and regular init) containers
    /// together, then the sidecars one by one in reverse order (KEP-753), so
    /// a log shipper or proxy outlives what it serves.
    pub(super) async fn kill_pod_containers(&self, live: &[&ObservedContainer]) {
        let inits = self
            .pod
            .as_ref()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or(&[]);
        let sidecar_rank = |c: &ObservedContainer| {
            inits
                .iter()
                .position(|i| i.name == c.name && plan::is_sidecar(i))
        };
        let (mut sidecars, apps): (Vec<&ObservedContainer>, Vec<&ObservedContainer>) =
            live.iter().partition(|c| sidecar_rank(c).is_some());
        if !apps.is_empty() {
            self.kill_containers(&stopping(&apps)).await;
        }
        sidecars.sort_by_key(|c| std::cmp::Reverse(sidecar_rank(c)));
        for c in sidecars {
            self.kill_containers(&stopping(&[c])).await;
        }
    }

    pub(super) async fn kill_containers(&self, list: &[Stop<'_>]) {
        let mut set = tokio::task::JoinSet::new();
        let turns = std::sync::Arc::new(tokio::sync::Semaphore::new(STOPS_AT_ONCE));
        let started = tokio::time::Instant::now();
        for (c, why, own_grace) in list {
            let grace = own_grace.unwrap_or_else(|| self.grace());
            let spec_c = self.pod.as_ref().and_then(|p| {
                let s = p.spec.as_ref()?;
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
                    .find(|x| x.name == c.name)
                    .cloned()
            });
            let grace = if self.pod.is_some() {
                grace
            } else {
                // Orphan: the grace its container was created with.
                self.shared.orphan_grace(&c.id).unwrap_or(grace)
            };
            self.event(
                Some(&c.name),
                EventType::Normal,
                event::KILLING_CONTAINER,
                why,
            );
            let cri = self.shared.cri.clone();
            let shared = self.shared.clone();
            let obj = self.obj.clone();
            let id = c.id.clone();
            let running = c.state == State::Running;
            let pod_ip = self.pod_ip_hint();
            let turns = turns.clone();
            set.spawn(async move {
                let _turn = turns.acquire_owned().await;
                if running
                    && let Some(sc) = &spec_c
                    && let Some(h) = sc.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
                    && let Err(e) = handlers::run(&cri, h, sc, &id, &pod_ip, grace).await
                {
                    let mut o = obj.clone();
                    o.field_path = format!("spec.containers{{{}}}", sc.name);
                    shared.event(
                        &o,
                        EventType::Warning,
                        event::FAILED_PRE_STOP_HOOK,
                        &e.to_string(),
                    );
                }
                // As kubelet: whole seconds the hook took come off the grace
                // (CRI's timeout is in seconds; 3 s less a few ms of hook
                // truncated to 2 s, and a TERM handler lost its third second),
                // and here the wait for a turn too.
                let left = grace.saturating_sub(Duration::from_secs(started.elapsed().as_secs()));
                let left = if left < MIN_GRACE && !grace.is_zero() {
                    MIN_GRACE
                } else {
                    left
                };
                if let Err(e) = cri.stop_container(&id, left).await {
                    tracing::warn!(container = %id, "stop: {e}");
                }
            });
        }
        while set.join_next().await.is_some() {}
    }

    pub(super) fn pod_ip_hint(&self) -> String {
        self.shared
            .status_of(&self.uid)
            .and_then(|p| p.status.and_then(|s| s.pod_ip))
            .unwrap_or_default()
    }

    /// An evicted pod: its containers stop with the eviction's grace, its
    /// sandbox stops, and it is Failed with reason Evicted and the
    /// DisruptionTarget condition (kubelet 1.26+); nothing starts again.
    pub(super) async fn sync_evicted(
        &mut self,
        pod: &Pod,
        e: &Eviction,
    ) -> Result<Duration, SyncError> {
        self.stop_pod().await?;
        let observed = self.shared.cri.observe(&self.uid).await?;
        const DISRUPTION: &str = "DisruptionTarget";
        let since = self
            .shared
            .status_of(&self.uid)
            .and_then(|p| p.status?.conditions)
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == DISRUPTION))
            .and_then(|c| c.last_transition_time);
        let mut p = self.with_status(pod, &observed);
        let st = p.status.get_or_insert_with(Default::default);
        st.phase = Some(crate::phase::FAILED.into());
        st.reason = Some(crate::reason::EVICTED.into());
        st.message = Some(e.message.clone());
        st.conditions
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::PodCondition {
                type_: DISRUPTION.into(),
                status: "True".into(),
                reason: Some("TerminationByKubelet".into()),
                message: Some(e.message.clone()),
                last_transition_time: since.or_else(|| status::time(now_ns())),
                ..Default::default()
            });
        self.shared.set_status(&self.uid, p);
        Ok(Duration::from_secs(3600))
    }
}
