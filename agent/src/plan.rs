//! kubelet's `computePodActions`: from the desired pod and what the runtime
//! reports, what to do next. Pure; the worker applies the result over CRI.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri_config::container_hash;
use crate::probe::Kind;

/// A container's runtime state, as CRI reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Created,
    Running,
    Exited,
    Unknown,
}

/// One sandbox of the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedSandbox {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    pub created_at: i64,
    pub ip: String,
}

/// One container of the pod (any sandbox).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedContainer {
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    pub state: State,
    pub hash: String,
    pub restart_count: u32,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub image: String,
    pub image_ref: String,
    /// Who its process runs as, when the runtime says (CRI 1.31+).
    pub user: Option<ProcessUser>,
    /// Its CPU and memory as the runtime reports them (ContainerStatus
    /// `resources`), when it does.
    pub resources: Option<RuntimeResources>,
}

/// A running container's CPU and memory as the runtime reports them,
/// converted as kubelet's `toKubeContainerResources` does: millicores and
/// bytes, 0 where unset (the runtime has no memory request).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeResources {
    pub cpu_request: u64,
    pub cpu_limit: u64,
    pub memory_limit: u64,
}

/// The identity a container's process runs as: the pod status'
/// `containerStatuses[].user.linux`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessUser {
    pub uid: i64,
    pub gid: i64,
    pub supplemental_groups: Vec<i64>,
}

/// What the runtime has for one pod: sandboxes and containers, newest
/// first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub sandboxes: Vec<ObservedSandbox>,
    pub containers: Vec<ObservedContainer>,
}

impl Observed {
    /// Sorts newest first (by creation time, then attempt/restart count).
    pub fn sort(&mut self) {
        self.sandboxes
            .sort_by_key(|s| std::cmp::Reverse((s.created_at, s.attempt)));
        self.containers
            .sort_by_key(|c| std::cmp::Reverse((c.created_at, c.restart_count)));
    }

    /// The newest container with this name.
    pub fn latest(&self, name: &str) -> Option<&ObservedContainer> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// Containers that are running (or created and not yet exited).
    pub fn live(&self) -> impl Iterator<Item = &ObservedContainer> {
        self.containers
            .iter()
            .filter(|c| matches!(c.state, State::Running | State::Created | State::Unknown))
    }
}

/// Why a container is not being started now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub name: String,
    pub reason: &'static str,
    pub remaining: Duration,
}

/// The plan for one sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actions {
    /// Stop every container and the sandbox (before a new sandbox, or
    /// because the pod has finished).
    pub kill_pod: bool,
    /// Create a sandbox with this attempt number.
    pub create_sandbox: Option<u32>,
    /// The ready sandbox to use, when not creating one.
    pub sandbox_id: Option<String>,
    /// Running containers to kill.
    pub kill: Vec<Kill>,
    /// Index of the init container to start next.
    pub start_init: Option<usize>,
    /// Sidecars (restartable init containers) to start again while the app
    /// containers run, by init container index.
    pub restart_sidecars: Vec<usize>,
    /// Indexes of app containers to start.
    pub start: Vec<usize>,
    /// Containers held back by back-off.
    pub waits: Vec<Wait>,
}

/// A container to kill, why (the `Killing` event's message) and, for a
/// failed probe, the probe's own grace period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub id: String,
    pub name: String,
    pub why: String,
    pub grace: Option<Duration>,
}

impl Kill {
    fn new(id: &str, name: &str, why: String) -> Self {
        Kill {
            id: id.into(),
            name: name.into(),
            why,
            grace: None,
        }
    }
}

/// `unhealthy(container_id)` → the probe that failed (liveness or startup)
/// and its grace period.
pub type UnhealthyFn<'a> = &'a dyn Fn(&str) -> Option<(Kind, Option<Duration>)>;

/// Nobody is unhealthy.
pub const HEALTHY: UnhealthyFn<'static> = &|_| None;

/// `started(container_id)`: its startup probe has succeeded (asked only
/// for containers that have one).
pub type StartedFn<'a> = &'a dyn Fn(&str) -> bool;

/// Every startup probe has succeeded.
pub const STARTED: StartedFn<'static> = &|_| true;

/// A sidecar: an init container with `restartPolicy: Always` (KEP-753). It
/// starts in init order, lets the next one start once it has started (and
/// passed its startup probe), runs beside the app containers, is restarted
/// whatever the pod's restartPolicy, does not keep a finished pod alive, and
/// stops after the app containers.
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The pod's sidecars, in init order.
pub fn sidecars(spec: &k8s_openapi::api::core::v1::PodSpec) -> impl Iterator<Item = &Container> {
    spec.init_containers
        .iter()
        .flatten()
        .filter(|c| is_sidecar(c))
}

/// Kill and restart for a running container whose definition changed or
/// whose liveness/startup probe failed; `None` when it is fine.
fn replace(
    c: &Container,
    l: &ObservedContainer,
    restart: bool,
    unhealthy: UnhealthyFn<'_>,
) -> Option<Kill> {
    if l.hash != container_hash(c) {
        return Some(Kill::new(
            &l.id,
            &c.name,
            format!("Container {} definition changed, will be restarted", c.name),
        ));
    }
    let (kind, grace) = unhealthy(&l.id)?;
    Some(Kill {
        grace,
        ..Kill::new(
            &l.id,
            &c.name,
            format!(
                "Container {} failed {} probe, {}",
                c.name,
                kind.as_str().to_ascii_lowercase(),
                if restart {
                    "will be restarted"
                } else {
                    "will not be restarted"
                }
            ),
        )
    })
}

/// A pod's `restartPolicy` (validation admits only these three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    /// The pod's policy; `Always` when unset, as the API server defaults it.
    pub fn of(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Self {
        match spec.and_then(|s| s.restart_policy.as_deref()) {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        }
    }
}

impl RestartPolicy {
    fn parse(p: &str) -> Option<Self> {
        match p {
            "Always" => Some(RestartPolicy::Always),
            "OnFailure" => Some(RestartPolicy::OnFailure),
            "Never" => Some(RestartPolicy::Never),
            _ => None,
        }
    }

    fn restarts(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Always => true,
        }
    }
}

/// A container's own `restartPolicy` (kubelet's ContainerRestartRules, on
/// by default since 1.35), else the pod's.
pub fn container_policy(c: &Container, pod: RestartPolicy) -> RestartPolicy {
    c.restart_policy
        .as_deref()
        .and_then(RestartPolicy::parse)
        .unwrap_or(pod)
}

/// kubelet's `ContainerShouldRestart`: whether a container that exited
/// with `exit_code` runs again. Its `restartPolicyRules` first (the first
/// whose exit codes match restarts it; they count only beside its own
/// `restartPolicy`), then its own policy, then the pod's.
pub fn should_restart_after(c: &Container, pod: RestartPolicy, exit_code: i32) -> bool {
    if c.restart_policy.is_some() {
        let matched = c.restart_policy_rules.iter().flatten().find(|r| {
            r.exit_codes.as_ref().is_some_and(|e| {
                let listed = e.values.iter().flatten().any(|v| *v == exit_code);
                match e.operator.as_str() {
                    "In" => listed,
                    "NotIn" => !listed,
                    _ => false,
                }
            })
        });
        if matched.is_some_and(|r| r.action == "Restart") {
            return true;
        }
    }
    container_policy(c, pod).restarts(exit_code)
}

/// kubelet's `ShouldContainerBeRestarted` for a container that is not
/// running.
fn should_restart(c: &Container, policy: RestartPolicy, last: Option<&ObservedContainer>) -> bool {
    let Some(last) = last else { return true };
    match last.state {
        State::Running => false,
        State::Created | State::Unknown => true,
        State::Exited => should_restart_after(c, policy, last.exit_code),
    }
}

fn succeeded(c: Option<&ObservedContainer>) -> bool {
    c.is_some_and(|c| c.state == State::Exited && c.exit_code == 0)
}

/// `backoff(name, finished_at)` → how long the container must still wait.
pub type BackoffFn<'a> = &'a dyn Fn(&str, i64) -> Option<Duration>;

/// Starts `idx` unless its last exit is still in back-off.
fn start_or_wait(
    c: &Container,
    last: Option<&ObservedContainer>,
    backoff: BackoffFn<'_>,
) -> Option<Wait> {
    let last = last.filter(|l| l.state == State::Exited)?;
    backoff(&c.name, last.finished_at).map(|remaining| Wait {
        name: c.name.clone(),
        reason: crate::reason::CRASH_LOOP_BACK_OFF,
        remaining,
    })
}

/// When to sync again at the latest after a sync that left `waits` and
/// containers waiting for `waiting` reasons: right after a back-off ends;
/// within a second after a failed pull (so the status moves on to
/// ImagePullBackOff, kubelet's sequence, instead of only showing
/// ErrImagePull at each retry); within 5 s for other errors; else at
/// `syncFrequency`.
pub fn next_sync<'a>(
    sync_frequency: Duration,
    waits: &[Wait],
    waiting: impl Iterator<Item = &'a str>,
) -> Duration {
    let mut next = sync_frequency;
    for w in waits {
        next = next.min(w.remaining + Duration::from_millis(50));
    }
    for reason in waiting {
        match reason {
            crate::reason::CRASH_LOOP_BACK_OFF => {}
            crate::reason::ERR_IMAGE_PULL => next = next.min(Duration::from_secs(1)),
            _ => next = next.min(Duration::from_secs(5)),
        }
    }
    next
}

/// Computes the actions for one sync of `pod`.
pub fn plan(
    pod: &Pod,
    observed: &Observed,
    backoff: BackoffFn<'_>,
    unhealthy: UnhealthyFn<'_>,
    started: StartedFn<'_>,
) -> Actions {
    let mut a = Actions::default();
    let Some(spec) = pod.spec.as_ref() else {
        return a;
    };
    let policy = RestartPolicy::of(pod.spec.as_ref());
    let inits = spec.init_containers.as_deref().unwrap_or(&[]);
    let newest = observed.sandboxes.first();
    let sandbox_ok = newest.is_some_and(|s| s.ready);

    if !sandbox_ok {
        a.kill_pod = observed.live().next().is_some() || newest.is_some();
        if policy == RestartPolicy::Never && newest.is_some() && !observed.containers.is_empty() {
            // The pod ran once and must not run again.
            return a;
        }
        let to_start: Vec<usize> = spec
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                // kubelet's runOnce: the container's OnFailure, else the pod's.
                !(container_policy(c, policy) == RestartPolicy::OnFailure
                    && succeeded(observed.latest(&c.name)))
            })
            .map(|(i, _)| i)
            .collect();
        if to_start.is_empty() && newest.is_some() {
            return a;
        }
        a.create_sandbox = Some(newest.map(|s| s.attempt + 1).unwrap_or(0));
        if inits.is_empty() {
            a.start = to_start;
        } else {
            a.start_init = Some(0);
        }
        return a;
    }
    a.sandbox_id = newest.map(|s| s.id.clone());
    let sandbox_id = a.sandbox_id.clone().unwrap_or_default();
    // Only containers of the current sandbox count for init progress.
    let in_sandbox = |name: &str| {
        observed
            .containers
            .iter()
            .find(|c| c.name == name && c.sandbox_id == sandbox_id)
    };

    // Init containers, in order, each to success.
    let app_started = spec
        .containers
        .iter()
        .any(|c| in_sandbox(&c.name).is_some());
    if !app_started {
        for (i, c) in inits.iter().enumerate() {
            let last = in_sandbox(&c.name);
            if is_sidecar(c) {
                match last {
                    None => a.start_init = Some(i),
                    Some(l) if l.state == State::Running => {
                        if let Some(k) = replace(c, l, true, unhealthy) {
                            a.kill.push(k);
                            a.start_init = Some(i);
                        } else if c.startup_probe.is_none() || started(&l.id) {
                            continue;
                        }
                    }
                    Some(l) => {
                        if l.state != State::Exited {
                            a.kill.push(Kill::new(
                                &l.id,
                                &c.name,
                                "init container not running".into(),
                            ));
                        }
                        match start_or_wait(c, last, backoff) {
                            Some(w) => a.waits.push(w),
                            None => a.start_init = Some(i),
                        }
                    }
                }
                return a;
            }
            match last.map(|l| l.state) {
                None => {
                    a.start_init = Some(i);
                    return a;
                }
                Some(State::Running) => return a,
                Some(State::Created | State::Unknown) => {
                    let l = last.map(|l| l.id.as_str()).unwrap_or_default();
                    a.kill
                        .push(Kill::new(l, &c.name, "init container not running".into()));
                    a.start_init = Some(i);
                    return a;
                }
                Some(State::Exited) if succeeded(last) => continue,
                Some(State::Exited) => {
                    let code = last.map_or(0, |l| l.exit_code);
                    if !should_restart_after(c, policy, code) {
                        a.kill_pod = true;
                        return a;
                    }
                    match start_or_wait(c, last, backoff) {
                        Some(w) => a.waits.push(w),
                        None => a.start_init = Some(i),
                    }
                    return a;
                }
            }
        }
    }

    // App containers.
    let mut keep = 0;
    for (i, c) in spec.containers.iter().enumerate() {
        let last = observed.latest(&c.name);
        match last {
            Some(l) if l.state == State::Running => {
                // kubelet: a changed definition or a failed liveness or
                // startup probe kills the container; it starts again unless
                // restartPolicy is Never (a changed one always does).
                let changed = l.hash != container_hash(c);
                let restart = changed || container_policy(c, policy) != RestartPolicy::Never;
                match replace(c, l, restart, unhealthy) {
                    Some(k) => {
                        a.kill.push(k);
                        if restart {
                            a.start.push(i);
                        }
                    }
                    None => keep += 1,
                }
            }
            _ => {
                if let Some(l) = last
                    && matches!(l.state, State::Created | State::Unknown)
                {
                    a.kill
                        .push(Kill::new(&l.id, &c.name, "container not running".into()));
                }
                if should_restart(c, policy, last) {
                    match start_or_wait(c, last, backoff) {
                        Some(w) => a.waits.push(w),
                        None => a.start.push(i),
                    }
                }
            }
        }
    }
    if keep == 0 && a.start.is_empty() && a.waits.is_empty() {
        // Every app container has finished for good: stop the sandbox (and
        // the sidecars with it).
        a.kill_pod = true;
        a.sandbox_id = None;
        return a;
    }
    // Sidecars keep running beside the apps, restarted whatever happens.
    for (i, c) in inits.iter().enumerate().filter(|(_, c)| is_sidecar(c)) {
        let last = in_sandbox(&c.name);
        match last {
            Some(l) if l.state == State::Running => {
                if let Some(k) = replace(c, l, true, unhealthy) {
                    a.kill.push(k);
                    a.restart_sidecars.push(i);
                }
            }
            _ => {
                if let Some(l) = last
                    && l.state != State::Exited
                {
                    a.kill
                        .push(Kill::new(&l.id, &c.name, "container not running".into()));
                }
                match start_or_wait(c, last, backoff) {
                    Some(w) => a.waits.push(w),
                    None => a.restart_sidecars.push(i),
                }
            }
        }
    }
    a
}

#[cfg(test)]
mod tests;
