//! What a sync tells: the waiting reasons and back-off events of the
//! containers the plan holds back, and the pod's status.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::clock::now_ns;
use crate::events::EventType;
use crate::events::reason as event;
use crate::mutex::lock;
use crate::plan::{self, Observed};
use crate::status::{self, Waiting};

use super::{Worker, resize};

impl Worker {
    /// CrashLoopBackOff for each container the plan holds back: an event
    /// and the waiting reason with kubelet's message.
    pub(super) fn record_waits(&mut self, pod: &Pod, waits: &[plan::Wait]) {
        let containers = || {
            pod.spec.iter().flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
        };
        for w in waits {
            let delay = {
                let backoff = lock(&self.shared.backoff);
                containers()
                    .find(|c| c.name == w.name)
                    .and_then(|c| backoff.delay(&self.backoff_key(c)))
                    .unwrap_or_default()
            };
            let msg = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                crate::backoff::humantime(delay),
                w.name,
                self.obj.name,
                self.obj.namespace,
                self.uid
            );
            self.event(
                Some(&w.name),
                EventType::Warning,
                event::BACK_OFF,
                "Back-off restarting failed container",
            );
            self.waiting.insert(
                w.name.clone(),
                Waiting {
                    reason: w.reason.into(),
                    message: msg,
                },
            );
        }
    }

    pub(super) fn publish(&mut self, pod: &Pod, observed: &Observed) {
        let p = self.with_status(pod, observed);
        self.shared.set_status(&self.uid, p);
    }

    /// The pod with its status now.
    pub(super) fn with_status(&mut self, pod: &Pod, observed: &Observed) -> Pod {
        let ctx = status::Context {
            waiting: &self.waiting,
            host_ip: &self.shared.node.host_ip,
            runtime_name: &self.shared.runtime_name,
            qos: self.qos.as_str(),
            start_time: self.start_time,
            probes: &|id| self.probes.state(id),
        };
        let mut st = status::pod_status(pod, observed, &ctx);
        if st.phase.as_deref().is_some_and(crate::phase::is_terminal) {
            // kubelet clears the resize conditions of a finished pod, and
            // it holds no resources any more.
            self.resize = resize::ResizeStatus::default();
            self.shared.allocation.forget_running(&self.uid);
        } else if let Some(conds) = st.conditions.as_mut() {
            conds.extend(self.resize.conditions());
        }
        // kubelet_pod_start_duration_seconds: first seen → every app
        // container running, once per pod.
        if !self.start_recorded
            && self.started_any
            && st.container_statuses.as_ref().is_some_and(|cs| {
                !cs.is_empty()
                    && cs
                        .iter()
                        .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            })
        {
            self.start_recorded = true;
            let took = now_ns().saturating_sub(self.start_time);
            self.shared
                .metrics
                .pod_started(Duration::from_nanos(u64::try_from(took).unwrap_or(0)));
        }
        // The spec as the source has it; the status as the pod runs.
        let mut p = self.pod.as_deref().unwrap_or(pod).clone();
        p.status = Some(st);
        p
    }
}
