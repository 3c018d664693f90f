//! Pod status as kubelet computes it (`generateAPIPodStatus`, `getPhase`):
//! phase, conditions, container statuses. Pure.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, ContainerUser, LinuxContainerUser, Pod, PodCondition,
    PodIP, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::plan::{Observed, ObservedContainer, RestartPolicy, State};
use crate::qos;
use crate::reason;

/// A reason a container is waiting, set by the worker (pull errors,
/// back-off, config errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// Inputs beyond the pod and the runtime's view.
#[derive(Clone)]
pub struct Context<'a> {
    pub waiting: &'a HashMap<String, Waiting>,
    pub host_ip: &'a str,
    pub runtime_name: &'a str,
    pub qos: &'a str,
    /// Unix nanoseconds when the agent first saw the pod.
    pub start_time: i64,
    /// Probe results by container ID.
    pub probes: &'a dyn Fn(&str) -> ProbeState,
}

/// The startup and readiness results of one running container; `None`
/// while a probe has not reached its threshold yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeState {
    pub started: Option<bool>,
    pub ready: Option<bool>,
}

/// No probe results at all.
pub fn no_probes(_: &str) -> ProbeState {
    ProbeState::default()
}

pub fn time(ns: i64) -> Option<Time> {
    if ns <= 0 {
        return None;
    }
    Timestamp::from_nanosecond(i128::from(ns)).ok().map(Time)
}

fn terminated(c: &ObservedContainer, runtime: &str) -> ContainerState {
    let reason = if !c.reason.is_empty() {
        c.reason.clone()
    } else if c.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: c.exit_code,
            reason: Some(reason),
            message: (!c.message.is_empty()).then(|| c.message.clone()),
            started_at: time(c.started_at),
            finished_at: time(c.finished_at),
            container_id: Some(format!("{runtime}://{}", c.id)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn waiting(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: (!message.is_empty()).then(|| message.into()),
        }),
        ..Default::default()
    }
}

fn container_status(
    spec: &Container,
    observed: &Observed,
    ctx: &Context<'_>,
    default_wait: &str,
) -> ContainerStatus {
    let mut all = observed.containers.iter().filter(|c| c.name == spec.name);
    let latest = all.next();
    let previous = all.next();
    let wait = ctx.waiting.get(&spec.name);
    let runtime = ctx.runtime_name;
    let (state, last_state) = match (latest, wait) {
        (Some(l), _) if l.state == State::Running => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: time(l.started_at),
                }),
                ..Default::default()
            },
            previous.map(|p| terminated(p, runtime)),
        ),
        (Some(l), Some(w)) if l.state == State::Exited => {
            (waiting(&w.reason, &w.message), Some(terminated(l, runtime)))
        }
        (Some(l), None) if l.state == State::Exited => (
            terminated(l, runtime),
            previous.map(|p| terminated(p, runtime)),
        ),
        (_, Some(w)) => (
            waiting(&w.reason, &w.message),
            latest
                .filter(|l| l.state == State::Exited)
                .or(previous)
                .map(|p| terminated(p, runtime)),
        ),
        (_, None) => (
            waiting(default_wait, ""),
            previous.map(|p| terminated(p, runtime)),
        ),
    };
    let running = state.running.is_some();
    // kubelet's prober manager `UpdatePodStatus`: started once the startup
    // probe succeeded (or there is none); ready once started and the
    // readiness probe succeeded (or there is none).
    let probed = latest.map(|l| (ctx.probes)(&l.id)).unwrap_or_default();
    let started = running && (spec.startup_probe.is_none() || probed.started == Some(true));
    let ready = started && (spec.readiness_probe.is_none() || probed.ready == Some(true));
    ContainerStatus {
        name: spec.name.clone(),
        image: latest
            .map(|l| l.image.clone())
            .filter(|i| !i.is_empty())
            .or_else(|| spec.image.clone())
            .unwrap_or_default(),
        image_id: latest.map(|l| l.image_ref.clone()).unwrap_or_default(),
        container_id: latest.map(|l| format!("{runtime}://{}", l.id)),
        restart_count: latest
            .map(|l| i32::try_from(l.restart_count).unwrap_or(i32::MAX))
            .unwrap_or(0),
        ready,
        started: Some(started),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        // kubelet's `convertToAPIContainerStatuses`: the runtime's word
        // on the running or last container.
        user: latest.and_then(|l| l.user.as_ref()).map(|u| ContainerUser {
            linux: Some(LinuxContainerUser {
                uid: u.uid,
                gid: u.gid,
                supplemental_groups: Some(u.supplemental_groups.clone()),
            }),
        }),
        // In-place resize: what was admitted (requests) and what the
        // container has (the API server refuses to resize a pod whose
        // running containers do not report it).
        allocated_resources: latest
            .and(spec.resources.as_ref())
            .and_then(|r| r.requests.clone()),
        resources: latest.map(|l| status_resources(spec, l)),
        ..Default::default()
    }
}

/// kubelet's `convertContainerStatusResources`: the allocated resources,
/// with what the runtime reports of a running container in place (CPU
/// limit above 10m, CPU request above the minimum shares, memory limit).
fn status_resources(spec: &Container, l: &ObservedContainer) -> ResourceRequirements {
    let mut r = spec.resources.clone().unwrap_or_default();
    let Some(actual) = l.resources.filter(|_| l.state == State::Running) else {
        return r;
    };
    let allocated = |kind, res| qos::quantity(spec, kind, res).unwrap_or(0);
    if let Some(lim) = r.limits.as_mut() {
        let a = u128::from(actual.cpu_limit);
        if a > 0 && (a > 10 || allocated("limits", "cpu") > 10) {
            lim.insert("cpu".into(), Quantity(qos::cpu_quantity(actual.cpu_limit)));
        }
        if actual.memory_limit > 0 {
            lim.insert(
                "memory".into(),
                Quantity(qos::memory_quantity(actual.memory_limit)),
            );
        }
    }
    let a = u128::from(actual.cpu_request);
    if let Some(req) = r.requests.as_mut()
        && a > 0
        && (a > 2 || allocated("requests", "cpu") > 2)
    {
        req.insert(
            "cpu".into(),
            Quantity(qos::cpu_quantity(actual.cpu_request)),
        );
    }
    r
}

fn condition(kind: &str, ok: bool, reason: Option<&str>) -> PodCondition {
    PodCondition {
        type_: kind.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: if ok { None } else { reason.map(String::from) },
        ..Default::default()
    }
}

/// The pod's status.
pub fn pod_status(pod: &Pod, observed: &Observed, ctx: &Context<'_>) -> PodStatus {
    let default_spec = Default::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let policy = RestartPolicy::of(Some(spec));
    let inits = spec.init_containers.as_deref().unwrap_or(&[]);
    let app_started = spec
        .containers
        .iter()
        .any(|c| observed.latest(&c.name).is_some());
    let init_statuses: Vec<ContainerStatus> = inits
        .iter()
        .map(|c| container_status(c, observed, ctx, reason::POD_INITIALIZING))
        .collect();
    // Regular init containers must have succeeded; sidecars (restartable
    // init containers) must have started.
    let initialized = app_started
        || inits.iter().zip(&init_statuses).all(|(c, s)| {
            if crate::plan::is_sidecar(c) {
                s.started == Some(true)
            } else {
                s.state
                    .as_ref()
                    .and_then(|st| st.terminated.as_ref())
                    .is_some_and(|t| t.exit_code == 0)
            }
        });
    // A failed init container that will not run again fails the pod
    // (its own restartPolicy and rules, else the pod's).
    let init_failed = !app_started
        && inits.iter().zip(&init_statuses).any(|(c, s)| {
            !crate::plan::is_sidecar(c)
                && s.state
                    .as_ref()
                    .and_then(|st| st.terminated.as_ref())
                    .is_some_and(|t| {
                        t.exit_code != 0
                            && !crate::plan::should_restart_after(c, policy, t.exit_code)
                    })
        });
    let app_wait = if initialized {
        reason::CONTAINER_CREATING
    } else {
        reason::POD_INITIALIZING
    };
    let statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(c, observed, ctx, app_wait))
        .collect();

    // kubelet's getPhase: a stopped container counts as done for good
    // unless its restart policy (its own and its rules, else the pod's)
    // runs it again.
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    let mut not_restartable = 0;
    for (c, s) in spec.containers.iter().zip(&statuses) {
        let st = s.state.clone().unwrap_or_default();
        let last_exit = s
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .map(|t| t.exit_code);
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
            if !crate::plan::should_restart_after(c, policy, t.exit_code) {
                not_restartable += 1;
            }
        } else if let Some(code) = last_exit {
            stopped += 1;
            if !crate::plan::should_restart_after(c, policy, code) {
                not_restartable += 1;
            }
        } else {
            waiting += 1;
        }
    }
    let phase = if init_failed {
        crate::phase::FAILED
    } else if !initialized || waiting > 0 {
        crate::phase::PENDING
    } else if running > 0 {
        crate::phase::RUNNING
    } else if stopped > 0 {
        if stopped != not_restartable {
            crate::phase::RUNNING
        } else if stopped == succeeded {
            crate::phase::SUCCEEDED
        } else {
            crate::phase::FAILED
        }
    } else {
        crate::phase::PENDING
    };
    // kubelet counts sidecars' readiness too.
    let containers_ready = statuses.iter().all(|s| s.ready)
        && inits
            .iter()
            .zip(&init_statuses)
            .all(|(c, s)| !crate::plan::is_sidecar(c) || s.ready);
    let sandbox = observed.sandboxes.first();
    let host_network = spec.host_network.unwrap_or(false);
    let pod_ip = if host_network {
        ctx.host_ip.to_string()
    } else {
        sandbox.map(|s| s.ip.clone()).unwrap_or_default()
    };
    let done = crate::phase::is_terminal(phase);
    // kubelet 1.36 (PodObservedGenerationTracking): the spec generation
    // this status and each condition was made from.
    let generation = pod.metadata.generation;
    let mut conditions = vec![
        // kubelet's GeneratePodReadyToStartContainersCondition: a ready
        // sandbox, networking configured, needs no new one.
        condition(
            "PodReadyToStartContainers",
            sandbox.is_some_and(|s| s.ready),
            None,
        ),
        condition("PodScheduled", true, None),
        condition("Initialized", initialized, Some("ContainersNotInitialized")),
        condition(
            "ContainersReady",
            containers_ready && !done,
            Some(if done {
                "PodCompleted"
            } else {
                "ContainersNotReady"
            }),
        ),
        condition(
            "Ready",
            containers_ready && !done,
            Some(if done {
                "PodCompleted"
            } else {
                "ContainersNotReady"
            }),
        ),
    ];
    // A static pod run in place of a newer version that was not Ready in
    // time (crate::config::rollback).
    if let Some(why) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::config::manifest::ROLLED_BACK))
    {
        conditions.push(PodCondition {
            type_: crate::config::manifest::ROLLED_BACK_CONDITION.into(),
            status: "True".into(),
            reason: Some("RolledBack".into()),
            message: Some(why.clone()),
            ..Default::default()
        });
    }
    for c in &mut conditions {
        c.observed_generation = generation;
    }
    PodStatus {
        phase: Some(phase.into()),
        observed_generation: generation,
        conditions: Some(conditions),
        host_ip: Some(ctx.host_ip.to_string()),
        pod_ip: (!pod_ip.is_empty()).then(|| pod_ip.clone()),
        pod_ips: (!pod_ip.is_empty()).then(|| vec![PodIP { ip: pod_ip }]),
        start_time: time(ctx.start_time),
        qos_class: Some(ctx.qos.into()),
        init_container_statuses: (!inits.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ObservedSandbox;

    fn pod(restart: &str) -> Pod {
        crate::config::manifest::test_pod(&format!(
            "  restartPolicy: {restart}\n  containers:\n  - {{name: a, image: 'i:1'}}\n"
        ))
    }

    fn c(state: State, exit: i32, created: i64, restarts: u32) -> ObservedContainer {
        ObservedContainer {
            id: format!("id{created}"),
            sandbox_id: "s".into(),
            name: "a".into(),
            state,
            hash: String::new(),
            restart_count: restarts,
            created_at: created,
            started_at: 1_700_000_000_000_000_000 + created,
            finished_at: 1_700_000_001_000_000_000 + created,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: "i:1".into(),
            image_ref: "sha256:x".into(),
            user: None,
            resources: None,
        }
    }

    fn observed(cs: Vec<ObservedContainer>) -> Observed {
        let mut o = Observed {
            sandboxes: vec![ObservedSandbox {
                id: "s".into(),
                attempt: 0,
                ready: true,
                created_at: 1,
                ip: "10.0.0.9".into(),
            }],
            containers: cs,
        };
        o.sort();
        o
    }

    fn status(p: &Pod, o: &Observed, waiting: &HashMap<String, Waiting>) -> PodStatus {
        let ctx = Context {
            waiting,
            host_ip: "192.168.1.2",
            runtime_name: "picolet",
            qos: "BestEffort",
            start_time: 1_700_000_000_000_000_000,
            probes: &no_probes,
        };
        pod_status(p, o, &ctx)
    }

    fn cond(s: &PodStatus, kind: &str) -> String {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == kind)
            .map(|c| c.status.clone())
            .unwrap_or_default()
    }

    #[test]
    fn ready_to_start_containers_and_the_generation_observed() {
        let mut p = pod("Always");
        p.metadata.generation = Some(3);
        let none = HashMap::new();
        let s = status(&p, &observed(vec![c(State::Running, 0, 1, 0)]), &none);
        assert_eq!(cond(&s, "PodReadyToStartContainers"), "True");
        assert_eq!(s.observed_generation, Some(3));
        assert!(
            s.conditions
                .iter()
                .flatten()
                .all(|c| c.observed_generation == Some(3))
        );
        let no_sandbox = Observed::default();
        let s = status(&p, &no_sandbox, &none);
        assert_eq!(cond(&s, "PodReadyToStartContainers"), "False");
    }

    #[test]
    fn a_rolled_back_static_pod_says_so_in_a_condition() {
        let mut p = pod("Always");
        p.metadata.generation = Some(2);
        let none = HashMap::new();
        let s = status(&p, &observed(vec![c(State::Running, 0, 1, 0)]), &none);
        assert!(
            s.conditions
                .iter()
                .flatten()
                .all(|c| c.type_ != "picolet.io/RolledBack")
        );
        p.metadata.annotations = Some(
            [(
                crate::config::manifest::ROLLED_BACK.to_string(),
                "web.yaml: this version was not Ready within 2m0s".to_string(),
            )]
            .into(),
        );
        let s = status(&p, &observed(vec![c(State::Running, 0, 1, 0)]), &none);
        let rb = s
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "picolet.io/RolledBack")
            .expect("condition");
        assert_eq!(rb.status, "True");
        assert_eq!(rb.observed_generation, Some(2));
        assert!(
            rb.message
                .as_deref()
                .unwrap_or("")
                .contains("not Ready within 2m0s")
        );
    }

    /// getPhase with containers' own restart policies: a stopped container
    /// that will run again keeps the pod Running, whatever the pod's policy.
    #[test]
    fn phases_follow_each_containers_own_restart_policy() {
        let with = |restart: &str, extra: &str| {
            crate::config::manifest::test_pod(&format!(
                "  restartPolicy: {restart}\n  containers:\n  - {{name: a, image: 'i:1'{extra}}}\n"
            ))
        };
        let none = HashMap::new();
        let phase = |p: &Pod, exit: i32| {
            status(p, &observed(vec![c(State::Exited, exit, 1, 0)]), &none)
                .phase
                .unwrap_or_default()
        };
        assert_eq!(
            phase(&with("Never", ", restartPolicy: Always"), 1),
            "Running"
        );
        assert_eq!(
            phase(&with("Always", ", restartPolicy: Never"), 0),
            "Succeeded"
        );
        assert_eq!(
            phase(&with("Always", ", restartPolicy: Never"), 1),
            "Failed"
        );
        let rules = with(
            "Never",
            ", restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]",
        );
        assert_eq!(phase(&rules, 42), "Running");
        assert_eq!(phase(&rules, 1), "Failed");
    }

    #[test]
    fn the_runtimes_user_of_the_latest_container() {
        let mut running = c(State::Running, 0, 2, 1);
        running.user = Some(crate::plan::ProcessUser {
            uid: 1000,
            gid: 1000,
            supplemental_groups: vec![1000, 1234],
        });
        let s = status(
            &pod("Always"),
            &observed(vec![running, c(State::Exited, 1, 1, 0)]),
            &HashMap::new(),
        );
        let user = s.container_statuses.expect("statuses")[0]
            .user
            .clone()
            .and_then(|u| u.linux)
            .expect("user");
        assert_eq!((user.uid, user.gid), (1000, 1000));
        assert_eq!(user.supplemental_groups, Some(vec![1000, 1234]));
    }

    #[test]
    fn phases() {
        let none = HashMap::new();
        let always = pod("Always");
        let s = status(&always, &observed(vec![]), &none);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let s = status(&always, &observed(vec![c(State::Running, 0, 1, 0)]), &none);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready"), "True");
        assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.9"));
        let onfail = pod("OnFailure");
        let s = status(&onfail, &observed(vec![c(State::Exited, 0, 1, 0)]), &none);
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(cond(&s, "Ready"), "False");
        let never = pod("Never");
        let s = status(&never, &observed(vec![c(State::Exited, 2, 1, 0)]), &none);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let t = s.container_statuses.as_ref().expect("statuses")[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .expect("terminated");
        assert_eq!((t.exit_code, t.reason.as_deref()), (2, Some("Error")));
        // Always + exited: Running (it will restart).
        let s = status(&always, &observed(vec![c(State::Exited, 1, 1, 0)]), &none);
        assert_eq!(s.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn crash_loop_back_off_shows_last_state() {
        let p = pod("Always");
        let waiting = HashMap::from([(
            "a".to_string(),
            Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 20s".into(),
            },
        )]);
        let o = observed(vec![c(State::Exited, 1, 2, 1), c(State::Exited, 1, 1, 0)]);
        let s = status(&p, &o, &waiting);
        let cs = &s.container_statuses.as_ref().expect("statuses")[0];
        assert_eq!(cs.restart_count, 1);
        let st = cs.state.as_ref().expect("state");
        assert_eq!(
            st.waiting.as_ref().and_then(|w| w.reason.as_deref()),
            Some("CrashLoopBackOff")
        );
        let last = cs
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .expect("last");
        assert_eq!(last.container_id.as_deref(), Some("picolet://id2"));
        assert!(!cs.ready);
    }

    #[test]
    fn probes_gate_started_and_ready() {
        use k8s_openapi::api::core::v1::Probe;
        let mut p = pod("Always");
        let spec = p.spec.as_mut().expect("spec");
        spec.containers[0].startup_probe = Some(Probe::default());
        spec.containers[0].readiness_probe = Some(Probe::default());
        let o = observed(vec![c(State::Running, 0, 1, 0)]);
        let none = HashMap::new();
        let with = |started, ready| {
            let f = move |_: &str| ProbeState { started, ready };
            let ctx = Context {
                waiting: &none,
                host_ip: "192.168.1.2",
                runtime_name: "picolet",
                qos: "BestEffort",
                start_time: 1,
                probes: &f,
            };
            let s = pod_status(&p, &o, &ctx);
            let cs = s.container_statuses.clone().expect("statuses")[0].clone();
            (
                cs.started,
                cs.ready,
                cond(&s, "ContainersReady"),
                cond(&s, "Ready"),
            )
        };
        let f = || "False".to_string();
        let t = || "True".to_string();
        assert_eq!(with(None, None), (Some(false), false, f(), f()));
        // Readiness is not trusted before the startup probe succeeded.
        assert_eq!(
            with(Some(false), Some(true)),
            (Some(false), false, f(), f())
        );
        assert_eq!(with(Some(true), None), (Some(true), false, f(), f()));
        assert_eq!(with(Some(true), Some(true)), (Some(true), true, t(), t()));
        assert_eq!(with(Some(true), Some(false)), (Some(true), false, f(), f()));
    }

    #[test]
    fn sidecars_count_for_initialized_and_ready_not_for_phase() {
        use k8s_openapi::api::core::v1::Probe;
        let mut p = crate::config::manifest::test_pod(
            "  restartPolicy: Never\n  initContainers:\n  - {name: side, image: 'i:1', restartPolicy: Always}\n  containers:\n  - {name: a, image: 'i:1'}\n",
        );
        let named = |name: &str, state, exit, created| ObservedContainer {
            name: name.into(),
            id: format!("{name}{created}"),
            ..c(state, exit, created, 0)
        };
        let none = HashMap::new();
        // Sidecar running (no startup probe): initialized, app still to come.
        let s = status(
            &p,
            &observed(vec![named("side", State::Running, 0, 1)]),
            &none,
        );
        assert_eq!(cond(&s, "Initialized"), "True");
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        // Both running: Running and Ready.
        let both = observed(vec![
            named("side", State::Running, 0, 1),
            named("a", State::Running, 0, 2),
        ]);
        let s = status(&p, &both, &none);
        assert_eq!(
            (s.phase.as_deref(), cond(&s, "Ready")),
            (Some(crate::phase::RUNNING), "True".into())
        );
        // A sidecar's failing readiness makes the pod unready.
        p.spec
            .as_mut()
            .expect("spec")
            .init_containers
            .as_mut()
            .expect("inits")[0]
            .readiness_probe = Some(Probe::default());
        let unready = |id: &str| ProbeState {
            started: None,
            ready: Some(!id.starts_with("side")),
        };
        let ctx = Context {
            waiting: &none,
            host_ip: "192.168.1.2",
            runtime_name: "picolet",
            qos: "BestEffort",
            start_time: 1,
            probes: &unready,
        };
        let s = pod_status(&p, &both, &ctx);
        assert_eq!(cond(&s, "ContainersReady"), "False");
        // The app finished (Never): Succeeded although the sidecar still runs.
        let done = observed(vec![
            named("side", State::Running, 0, 1),
            named("a", State::Exited, 0, 2),
        ]);
        let s = status(&p, &done, &none);
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    }
}
