//! In-place pod resize in the worker ([`crate::allocation`] has the
//! model): admit what the spec asks for (or say why it waits), restart the
//! containers whose resize policy asks for it, and give the others their
//! new CPU and memory through CRI `UpdateContainerResources` in kubelet's
//! order — memory before CPU, the pod cgroup grown before its containers
//! and shrunk after them, shrinking containers first — after checking no
//! memory limit goes below what is in use.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::allocation::{
    self, Actuated, POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING, PodCgroup, PodState,
    REASON_DEFERRED, REASON_ERROR, Values,
};
use crate::cri_config::{container_hash, legacy_container_hash, linux_resources};
use crate::events::EventType;
use crate::events::reason as event;
use crate::plan::{self, Kill, Observed, ObservedContainer, State};
use crate::qos;

use super::Worker;

/// A resize condition the worker holds: reason, message, generation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Cond {
    pub reason: String,
    pub message: String,
    pub generation: Option<i64>,
}

/// The pod's resize conditions now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ResizeStatus {
    pub pending: Option<Cond>,
    pub in_progress: Option<Cond>,
}

impl ResizeStatus {
    /// The conditions for the pod status.
    pub fn conditions(&self) -> Vec<PodCondition> {
        let mut out = Vec::new();
        for (kind, c) in [
            (POD_RESIZE_PENDING, &self.pending),
            (POD_RESIZE_IN_PROGRESS, &self.in_progress),
        ] {
            if let Some(c) = c {
                out.push(PodCondition {
                    type_: kind.into(),
                    status: "True".into(),
                    reason: (!c.reason.is_empty()).then(|| c.reason.clone()),
                    message: (!c.message.is_empty()).then(|| c.message.clone()),
                    observed_generation: c.generation,
                    ..Default::default()
                });
            }
        }
        out
    }
}

/// kubelet's resize event message: the prefix, then the pod's container
/// resources and generation as JSON.
fn resize_message(prefix: &str, pod: &Pod, error: Option<&str>) -> String {
    let containers: Vec<serde_json::Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| serde_json::json!({"name": c.name, "resources": c.resources}))
        .collect();
    let mut v =
        serde_json::json!({"containers": containers, "generation": pod.metadata.generation});
    if let Some(e) = error {
        v["error"] = e.into();
    }
    format!("{prefix}: {v}")
}

fn requirements(v: &Values) -> ResourceRequirements {
    let mut limits = BTreeMap::new();
    let mut requests = BTreeMap::new();
    let put = |m: &mut BTreeMap<String, Quantity>, k: &str, s: Option<String>| {
        if let Some(s) = s {
            m.insert(k.to_string(), Quantity(s));
        }
    };
    let cpu = |n: u64| (n > 0).then(|| qos::cpu_quantity(n));
    let mem = |n: u64| (n > 0).then(|| qos::memory_quantity(n));
    put(&mut limits, "cpu", cpu(v.cpu_limit));
    put(&mut limits, "memory", mem(v.memory_limit));
    put(&mut requests, "cpu", cpu(v.cpu_request));
    put(&mut requests, "memory", mem(v.memory_request));
    ResourceRequirements {
        limits: (!limits.is_empty()).then_some(limits),
        requests: (!requests.is_empty()).then_some(requests),
        ..Default::default()
    }
}

/// Why a resize in progress stopped short (the `PodResizeInProgress`
/// Error condition's message); the next sync tries again.
#[derive(Debug, thiserror::Error)]
enum ResizeError {
    #[error(transparent)]
    Cri(#[from] crate::runtime::CriError),
    #[error("pod cgroup {path}: {source}")]
    PodCgroup {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// kubelet's words, each limit that would go below what is in use.
    #[error("cannot decrease memory limits: {}", .0.join(", "))]
    MemoryInUse(Vec<String>),
}

/// One container to update in place.
struct Update {
    name: String,
    id: String,
    have: Values,
    want: Values,
    /// The container as allocated (for the rest of its resources).
    c: Container,
}

impl Worker {
    fn save_allocation(&self) {
        if let Some(st) = &self.alloc
            && let Err(e) = self.shared.allocation.save(&self.uid, st)
        {
            tracing::warn!(pod = %self.obj.name, "{e}");
        }
    }

    /// The pod to run: the source's, with the resources admitted on this
    /// node. A spec asking for others is a resize: admitted when it fits
    /// beside the other pods' allocations, else pending (Deferred).
    pub(super) fn allocate(&mut self, desired: &Arc<Pod>) -> Arc<Pod> {
        let Some(spec) = desired.spec.as_ref() else {
            return desired.clone();
        };
        let generation = desired.metadata.generation;
        if self.alloc.is_none() {
            let loaded = match self.shared.allocation.load(&self.uid) {
                Ok(st) => st,
                Err(e) => {
                    tracing::warn!(pod = %self.obj.name, "{e}; allocating from the spec");
                    None
                }
            };
            // Nothing is written for a pod that was never resized: with no
            // file the pod runs as its spec says, and the runtime's own
            // report stands for what it was given (a pod start costs no
            // extra write to the disk).
            let mut st = loaded.unwrap_or_else(|| PodState {
                allocated: allocation::allocation_of(spec),
                ..Default::default()
            });
            if st.pod_cgroup.is_none() {
                // Made from the allocated pod when its sandbox was made.
                let run = allocation::allocated_pod(desired, &st.allocated);
                st.pod_cgroup = run
                    .spec
                    .as_ref()
                    .map(|s| PodCgroup::from(qos::pod_resources(s)));
            }
            self.alloc = Some(st);
        }
        let st = self.alloc.as_ref().expect("set above");
        if !allocation::wants_resize(spec, &st.allocated) {
            self.resize.pending = None;
        } else {
            let want = allocation::allocated_pod(desired, &allocation::allocation_of(spec));
            let others = self.shared.allocation.others(&self.uid);
            let others: Vec<&Pod> = others.iter().map(|p| &**p).collect();
            match crate::lifecycle::predicate::check_resources(
                &self.shared.allocatable,
                &others,
                &want,
            ) {
                None => {
                    let st = self.alloc.as_mut().expect("set above");
                    st.allocated = allocation::allocation_of(spec);
                    self.save_allocation();
                    self.resize.pending = None;
                    self.resize.in_progress = Some(Cond {
                        generation,
                        ..Default::default()
                    });
                    self.event(
                        None,
                        EventType::Normal,
                        event::RESIZE_STARTED,
                        &resize_message("Pod resize started", desired, None),
                    );
                }
                Some(r) => {
                    let cond = Cond {
                        reason: REASON_DEFERRED.into(),
                        message: r.message.clone(),
                        generation,
                    };
                    if self.resize.pending.is_none() {
                        // The allocation it waits beside must survive a
                        // restart: else the spec would be taken as admitted.
                        self.save_allocation();
                    }
                    if self.resize.pending.as_ref() != Some(&cond) {
                        self.event(
                            None,
                            EventType::Warning,
                            event::RESIZE_DEFERRED,
                            &resize_message(&format!("Pod resize {}", r.reason), desired, None),
                        );
                    }
                    self.resize.pending = Some(cond);
                }
            }
        }
        let st = self.alloc.as_ref().expect("set above");
        let run = Arc::new(allocation::allocated_pod(desired, &st.allocated));
        self.shared.allocation.set_running(&self.uid, run.clone());
        run
    }

    /// The hash each observed container is to be planned with: a
    /// container this agent resized or adopted keeps the hash it was
    /// recorded with; one an agent before in-place resize made (whose
    /// hash covered its resources) is adopted when that hash matches its
    /// allocated spec, instead of being restarted for a new hash scheme.
    pub(super) fn adopt(&mut self, pod: &Pod, observed: &mut Observed) {
        let (Some(spec), Some(st)) = (pod.spec.as_ref(), self.alloc.as_mut()) else {
            return;
        };
        let mut adopted = false;
        for l in &mut observed.containers {
            if let Some(a) = st.actuated.get(&l.name)
                && a.container_id == l.id
            {
                l.hash.clone_from(&a.hash);
                continue;
            }
            let Some(c) = allocation::resizable(spec).find(|c| c.name == l.name) else {
                continue;
            };
            if l.state == State::Running && l.hash == legacy_container_hash(c) {
                let hash = container_hash(c);
                st.actuated.insert(
                    l.name.clone(),
                    Actuated {
                        container_id: l.id.clone(),
                        hash: hash.clone(),
                        values: Values::of(c),
                    },
                );
                l.hash = hash;
                adopted = true;
            }
        }
        if adopted {
            self.save_allocation();
        }
    }

    /// Containers whose resize needs a restart (a changed resource whose
    /// policy is RestartContainer) are killed and started again, their
    /// restart count one more.
    pub(super) fn plan_restarts(&self, pod: &Pod, observed: &Observed, a: &mut plan::Actions) {
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        if a.sandbox_id.is_none() {
            return;
        }
        let inits = spec.init_containers.as_deref().unwrap_or(&[]);
        for c in allocation::resizable(spec) {
            let Some(l) = observed
                .latest(&c.name)
                .filter(|l| l.state == State::Running)
            else {
                continue;
            };
            let want = Values::of(c);
            let have = self.have(spec, c, l, want);
            if have == want
                || !allocation::needs_restart(c, &have, &want)
                || a.kill.iter().any(|k| k.id == l.id)
            {
                continue;
            }
            a.kill.push(Kill {
                id: l.id.clone(),
                name: c.name.clone(),
                why: format!("Container {} resize requires restart", c.name),
                grace: None,
            });
            if let Some(i) = spec.containers.iter().position(|x| x.name == c.name) {
                if !a.start.contains(&i) {
                    a.start.push(i);
                }
            } else if let Some(i) = inits.iter().position(|x| x.name == c.name)
                && !a.restart_sidecars.contains(&i)
            {
                a.restart_sidecars.push(i);
            }
        }
    }

    /// A container was created with the allocated resources.
    pub(super) fn created(&mut self, c: &Container, id: &str) {
        let Some(st) = self.alloc.as_mut() else {
            return;
        };
        if !st.allocated.contains_key(&c.name) {
            return;
        }
        st.actuated.insert(
            c.name.clone(),
            Actuated {
                container_id: id.to_string(),
                hash: container_hash(c),
                values: Values::of(c),
            },
        );
    }

    /// The pod cgroup was made with the allocated resources.
    pub(super) fn pod_cgroup_made(&mut self, r: qos::PodResources) {
        if let Some(st) = self.alloc.as_mut() {
            st.pod_cgroup = Some(r.into());
        }
    }

    /// What container `l` (running `c` as allocated, `want`) was given:
    /// this agent's record of it, else what the runtime reports (a
    /// container of a pod never resized, or of an agent before this one):
    /// in step when it is what `c` would be created with.
    fn have(&self, spec: &PodSpec, c: &Container, l: &ObservedContainer, want: Values) -> Values {
        if let Some(a) = self
            .alloc
            .as_ref()
            .and_then(|st| st.actuated.get(&c.name))
            .filter(|a| a.container_id == l.id)
        {
            return a.values;
        }
        let Some(rt) = l.resources else {
            return want; // the runtime does not say: take it as given
        };
        let expected =
            crate::runtime::resources_of(&linux_resources(spec, c, self.qos, &self.shared.node));
        if rt == expected {
            return want;
        }
        Values {
            cpu_request: rt.cpu_request,
            cpu_limit: rt.cpu_limit,
            memory_limit: rt.memory_limit,
            memory_request: want.memory_request,
        }
    }

    /// Gives running containers whose allocation changed their new CPU
    /// and memory (those that need a restart were planned:
    /// [`Worker::plan_restarts`]); `killed`: containers this sync stopped.
    /// Whether it changed anything.
    pub(super) async fn actuate(
        &mut self,
        pod: &Pod,
        observed: &Observed,
        killed: &[String],
    ) -> bool {
        let (Some(spec), Some(st)) = (pod.spec.as_ref(), self.alloc.as_ref()) else {
            return false;
        };
        let mut updates = Vec::new();
        for c in allocation::resizable(spec) {
            let Some(l) = observed
                .latest(&c.name)
                .filter(|l| l.state == State::Running && !killed.contains(&l.id))
            else {
                continue;
            };
            let want = Values::of(c);
            let have = self.have(spec, c, l, want);
            if have != want && !allocation::needs_restart(c, &have, &want) {
                updates.push(Update {
                    name: c.name.clone(),
                    id: l.id.clone(),
                    have,
                    want,
                    c: c.clone(),
                });
            }
        }
        let target = PodCgroup::from(qos::pod_resources(spec));
        let cgroup_now = st.pod_cgroup;
        let cgroup_differs = self.shared.cgroups.is_some()
            && self.shared.config.cgroups_per_qos
            && cgroup_now != Some(target);
        if updates.is_empty() && !cgroup_differs {
            self.resize_done(pod);
            return false;
        }
        let result = match self
            .memory_guard(observed, &updates, cgroup_now, target)
            .await
        {
            Err(e) => Err(e),
            Ok(()) => {
                self.resize_in_order(spec, updates, cgroup_now, target)
                    .await
            }
        };
        match result {
            Ok(()) => self.resize_done(pod),
            Err(e) => {
                let msg = e.to_string();
                let cond = Cond {
                    reason: REASON_ERROR.into(),
                    message: msg.clone(),
                    generation: self
                        .resize
                        .in_progress
                        .as_ref()
                        .and_then(|c| c.generation)
                        .or(pod.metadata.generation),
                };
                if self.resize.in_progress.as_ref() != Some(&cond) {
                    tracing::warn!(pod = %self.obj.name, "resize: {msg}");
                    self.event(
                        None,
                        EventType::Warning,
                        event::RESIZE_ERROR,
                        &resize_message("Pod resize error", pod, Some(&msg)),
                    );
                }
                self.resize.in_progress = Some(cond);
            }
        }
        true
    }

    /// Everything allocated is actuated: the resize in progress is done.
    fn resize_done(&mut self, pod: &Pod) {
        if self.resize.in_progress.take().is_some() {
            self.event(
                None,
                EventType::Normal,
                event::RESIZE_COMPLETED,
                &resize_message("Pod resize completed", pod, None),
            );
        }
    }

    /// kubelet's `validateMemoryResizeAction`: no memory limit, the pod's
    /// or a container's, may go (or be set) below what is in use.
    async fn memory_guard(
        &self,
        observed: &Observed,
        updates: &[Update],
        cgroup_now: Option<PodCgroup>,
        target: PodCgroup,
    ) -> Result<(), ResizeError> {
        let lowers = |have: u64, want: u64| want > 0 && (have == 0 || want < have);
        let mut errors = Vec::new();
        for u in updates {
            if !lowers(u.have.memory_limit, u.want.memory_limit) {
                continue;
            }
            match self.shared.cri.memory_usage(&u.id).await {
                Ok(Some(used)) if used >= u.want.memory_limit => errors.push(format!(
                    "attempting to set container {:?} memory limit ({}) below current usage ({used})",
                    u.name, u.want.memory_limit
                )),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => errors.push(format!("missing container {:?} memory usage", u.name)),
            }
        }
        let pod_cgroups = self.shared.cgroups.is_some() && self.shared.config.cgroups_per_qos;
        let pod_lowers = pod_cgroups
            && cgroup_now.is_some_and(|now| {
                lowers(
                    now.memory_limit.unwrap_or(0),
                    target.memory_limit.unwrap_or(0),
                )
            });
        if pod_lowers && let Some(limit) = target.memory_limit {
            let mut sum = 0u64;
            for l in observed.live() {
                match self.shared.cri.memory_usage(&l.id).await {
                    Ok(Some(used)) => sum += used,
                    Ok(None) | Err(_) => errors.push("missing pod memory usage".to_string()),
                }
            }
            if sum >= limit {
                errors.push(format!(
                    "attempting to set pod memory limit ({limit}) below current usage ({sum})"
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ResizeError::MemoryInUse(errors))
        }
    }

    /// Memory, then CPU: for each, the pod cgroup grows first, shrinking
    /// containers are updated before growing ones, the pod cgroup shrinks
    /// last. Each container's new values are recorded as it is done.
    async fn resize_in_order(
        &mut self,
        spec: &PodSpec,
        mut updates: Vec<Update>,
        cgroup_now: Option<PodCgroup>,
        target: PodCgroup,
    ) -> Result<(), ResizeError> {
        let mut now = cgroup_now.unwrap_or(target);
        // Memory.
        let mem_grows =
            target.memory_limit.unwrap_or(u64::MAX) > now.memory_limit.unwrap_or(u64::MAX);
        let with_memory = PodCgroup {
            memory_limit: target.memory_limit.or(now.memory_limit),
            ..now
        };
        if mem_grows {
            self.write_pod_cgroup(with_memory)?;
            now = with_memory;
        }
        updates.sort_by_key(|u| u.want.memory_limit >= u.have.memory_limit);
        for u in &mut updates {
            if (u.have.memory_limit, u.have.memory_request)
                == (u.want.memory_limit, u.want.memory_request)
            {
                continue;
            }
            let step = Values {
                memory_limit: u.want.memory_limit,
                memory_request: u.want.memory_request,
                ..u.have
            };
            self.update_container(spec, u, step).await?;
        }
        if now != with_memory {
            self.write_pod_cgroup(with_memory)?;
            now = with_memory;
        }
        // CPU.
        let cpu_grows = target.cpu_quota.unwrap_or(-1) > now.cpu_quota.unwrap_or(-1)
            || target.cpu_shares > now.cpu_shares;
        let with_cpu = PodCgroup {
            cpu_quota: target.cpu_quota.or(now.cpu_quota),
            cpu_shares: target.cpu_shares,
            ..now
        };
        if cpu_grows {
            self.write_pod_cgroup(with_cpu)?;
            now = with_cpu;
        }
        updates.sort_by_key(|u| {
            (u.want.cpu_limit, u.want.cpu_request) >= (u.have.cpu_limit, u.have.cpu_request)
        });
        for u in &mut updates {
            if u.have == u.want {
                continue;
            }
            self.update_container(spec, u, u.want).await?;
        }
        if now != with_cpu {
            self.write_pod_cgroup(with_cpu)?;
        }
        Ok(())
    }

    async fn update_container(
        &mut self,
        spec: &PodSpec,
        u: &mut Update,
        step: Values,
    ) -> Result<(), ResizeError> {
        let c = Container {
            resources: Some(requirements(&step)),
            ..u.c.clone()
        };
        let r = linux_resources(spec, &c, self.qos, &self.shared.node);
        self.shared.cri.update_container_resources(&u.id, r).await?;
        u.have = step;
        if let Some(st) = self.alloc.as_mut() {
            st.actuated.insert(
                u.name.clone(),
                Actuated {
                    container_id: u.id.clone(),
                    hash: container_hash(&u.c),
                    values: step,
                },
            );
        }
        self.save_allocation();
        Ok(())
    }

    fn write_pod_cgroup(&mut self, r: PodCgroup) -> Result<(), ResizeError> {
        self.ensure_pod_cgroup(qos::PodResources {
            cpu_shares: r.cpu_shares,
            cpu_quota: r.cpu_quota,
            memory_limit: r.memory_limit,
        })
        .map_err(|(path, source)| ResizeError::PodCgroup { path, source })?;
        if let Some(st) = self.alloc.as_mut() {
            st.pod_cgroup = Some(r);
        }
        self.save_allocation();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_become_the_quantities_they_came_from() {
        let v = Values {
            cpu_request: 250,
            cpu_limit: 1000,
            memory_request: 32 << 20,
            memory_limit: 64 << 20,
        };
        let c = Container {
            resources: Some(requirements(&v)),
            ..Default::default()
        };
        assert_eq!(Values::of(&c), v);
        assert_eq!(
            requirements(&Values::default()),
            ResourceRequirements::default()
        );
    }

    #[test]
    fn conditions_carry_their_generation_and_only_a_set_reason() {
        let s = ResizeStatus {
            pending: Some(Cond {
                reason: REASON_DEFERRED.into(),
                message: "Node didn't have enough resource: cpu".into(),
                generation: Some(3),
            }),
            in_progress: Some(Cond {
                generation: Some(2),
                ..Default::default()
            }),
        };
        let c = s.conditions();
        assert_eq!(c[0].type_, POD_RESIZE_PENDING);
        assert_eq!(c[0].reason.as_deref(), Some("Deferred"));
        assert_eq!(c[0].observed_generation, Some(3));
        assert_eq!(c[1].type_, POD_RESIZE_IN_PROGRESS);
        assert_eq!(
            (c[1].reason.as_ref(), c[1].observed_generation),
            (None, Some(2))
        );
    }
}
