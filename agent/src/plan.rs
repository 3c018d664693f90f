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

fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// kubelet's `ShouldContainerBeRestarted` for a container that is not
/// running.
fn should_restart(policy: &str, last: Option<&ObservedContainer>) -> bool {
    let Some(last) = last else { return true };
    match last.state {
        State::Running => false,
        State::Created | State::Unknown => true,
        State::Exited => match policy {
            "Never" => false,
            "OnFailure" => last.exit_code != 0,
            _ => true,
        },
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
        reason: "CrashLoopBackOff",
        remaining,
    })
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
    let policy = restart_policy(pod);
    let inits = spec.init_containers.as_deref().unwrap_or(&[]);
    let newest = observed.sandboxes.first();
    let sandbox_ok = newest.is_some_and(|s| s.ready);

    if !sandbox_ok {
        a.kill_pod = observed.live().next().is_some() || newest.is_some();
        if policy == "Never" && newest.is_some() && !observed.containers.is_empty() {
            // The pod ran once and must not run again.
            return a;
        }
        let to_start: Vec<usize> = spec
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| !(policy == "OnFailure" && succeeded(observed.latest(&c.name))))
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
                    if policy == "Never" {
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
                let restart = changed || policy != "Never";
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
                if should_restart(policy, last) {
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
mod tests {
    use super::*;

    fn pod(restart: &str, inits: &[&str], apps: &[&str]) -> Pod {
        let mut spec = format!("  restartPolicy: {restart}\n");
        if !inits.is_empty() {
            spec.push_str("  initContainers:\n");
            for n in inits {
                // `side*`: a sidecar; `sidep*`: one with a startup probe.
                let extra = match n {
                    n if n.starts_with("sidep") => {
                        ", restartPolicy: Always, startupProbe: {exec: {command: [x]}}"
                    }
                    n if n.starts_with("side") => ", restartPolicy: Always",
                    _ => "",
                };
                spec.push_str(&format!("  - {{name: {n}, image: 'i:1'{extra}}}\n"));
            }
        }
        spec.push_str("  containers:\n");
        for n in apps {
            spec.push_str(&format!("  - {{name: {n}, image: 'i:1'}}\n"));
        }
        crate::manifest::test_pod(&spec)
    }

    fn hash_of(p: &Pod, name: &str) -> String {
        let spec = p.spec.as_ref().expect("spec");
        let c = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .find(|c| c.name == name)
            .expect("container");
        container_hash(c)
    }

    fn sb(ready: bool, attempt: u32) -> ObservedSandbox {
        ObservedSandbox {
            id: format!("sb{attempt}"),
            attempt,
            ready,
            created_at: i64::from(attempt),
            ip: String::new(),
        }
    }

    fn ctr(p: &Pod, name: &str, state: State, exit: i32, created: i64) -> ObservedContainer {
        ObservedContainer {
            id: format!("{name}-{created}"),
            sandbox_id: "sb0".into(),
            name: name.into(),
            state,
            hash: hash_of(p, name),
            restart_count: 0,
            created_at: created,
            started_at: created,
            finished_at: created + 1,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
        }
    }

    fn obs(sandboxes: Vec<ObservedSandbox>, containers: Vec<ObservedContainer>) -> Observed {
        let mut o = Observed {
            sandboxes,
            containers,
        };
        o.sort();
        o
    }

    const NO_BACKOFF: BackoffFn<'static> = &|_, _| None;

    #[test]
    fn table() {
        use State::*;
        let always = pod("Always", &[], &["a", "b"]);
        let never = pod("Never", &[], &["a"]);
        let onfail = pod("OnFailure", &[], &["a"]);
        let init = pod("Always", &["i1", "i2"], &["a"]);
        let init_never = pod("Never", &["i1"], &["a"]);
        struct Case {
            name: &'static str,
            pod: Pod,
            observed: Observed,
            want: Actions,
        }
        let sandbox0 = || Some("sb0".to_string());
        let cases = vec![
            Case {
                name: "nothing yet: sandbox then all apps",
                pod: always.clone(),
                observed: obs(vec![], vec![]),
                want: Actions {
                    create_sandbox: Some(0),
                    start: vec![0, 1],
                    ..Default::default()
                },
            },
            Case {
                name: "nothing yet with inits: sandbox then the first init",
                pod: init.clone(),
                observed: obs(vec![], vec![]),
                want: Actions {
                    create_sandbox: Some(0),
                    start_init: Some(0),
                    ..Default::default()
                },
            },
            Case {
                name: "all running: nothing",
                pod: always.clone(),
                observed: obs(
                    vec![sb(true, 0)],
                    vec![
                        ctr(&always, "a", Running, 0, 1),
                        ctr(&always, "b", Running, 0, 1),
                    ],
                ),
                want: Actions {
                    sandbox_id: sandbox0(),
                    ..Default::default()
                },
            },
            Case {
                name: "dead sandbox: kill and recreate with the next attempt",
                pod: always.clone(),
                observed: obs(vec![sb(false, 0)], vec![ctr(&always, "a", Running, 0, 1)]),
                want: Actions {
                    kill_pod: true,
                    create_sandbox: Some(1),
                    start: vec![0, 1],
                    ..Default::default()
                },
            },
            Case {
                name: "Always: exited 0 restarts",
                pod: always.clone(),
                observed: obs(
                    vec![sb(true, 0)],
                    vec![
                        ctr(&always, "a", Exited, 0, 1),
                        ctr(&always, "b", Running, 0, 1),
                    ],
                ),
                want: Actions {
                    sandbox_id: sandbox0(),
                    start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "OnFailure: exit 0 is done, the pod is killed",
                pod: onfail.clone(),
                observed: obs(vec![sb(true, 0)], vec![ctr(&onfail, "a", Exited, 0, 1)]),
                want: Actions {
                    kill_pod: true,
                    ..Default::default()
                },
            },
            Case {
                name: "OnFailure: exit 1 restarts",
                pod: onfail.clone(),
                observed: obs(vec![sb(true, 0)], vec![ctr(&onfail, "a", Exited, 1, 1)]),
                want: Actions {
                    sandbox_id: sandbox0(),
                    start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "OnFailure: succeeded and sandbox gone: nothing to recreate",
                pod: onfail.clone(),
                observed: obs(vec![sb(false, 0)], vec![ctr(&onfail, "a", Exited, 0, 1)]),
                want: Actions {
                    kill_pod: true,
                    ..Default::default()
                },
            },
            Case {
                name: "Never: exited 1 is final",
                pod: never.clone(),
                observed: obs(vec![sb(true, 0)], vec![ctr(&never, "a", Exited, 1, 1)]),
                want: Actions {
                    kill_pod: true,
                    ..Default::default()
                },
            },
            Case {
                name: "Never: sandbox died after running: no new sandbox",
                pod: never.clone(),
                observed: obs(vec![sb(false, 0)], vec![ctr(&never, "a", Exited, 0, 1)]),
                want: Actions {
                    kill_pod: true,
                    ..Default::default()
                },
            },
            Case {
                name: "init 1 done: start init 2",
                pod: init.clone(),
                observed: obs(vec![sb(true, 0)], vec![ctr(&init, "i1", Exited, 0, 1)]),
                want: Actions {
                    sandbox_id: sandbox0(),
                    start_init: Some(1),
                    ..Default::default()
                },
            },
            Case {
                name: "init running: wait",
                pod: init.clone(),
                observed: obs(vec![sb(true, 0)], vec![ctr(&init, "i1", Running, 0, 1)]),
                want: Actions {
                    sandbox_id: sandbox0(),
                    ..Default::default()
                },
            },
            Case {
                name: "inits done: apps",
                pod: init.clone(),
                observed: obs(
                    vec![sb(true, 0)],
                    vec![
                        ctr(&init, "i1", Exited, 0, 1),
                        ctr(&init, "i2", Exited, 0, 2),
                    ],
                ),
                want: Actions {
                    sandbox_id: sandbox0(),
                    start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "init failed under Always: restart it",
                pod: init.clone(),
                observed: obs(vec![sb(true, 0)], vec![ctr(&init, "i1", Exited, 1, 1)]),
                want: Actions {
                    sandbox_id: sandbox0(),
                    start_init: Some(0),
                    ..Default::default()
                },
            },
            Case {
                name: "init failed under Never: the pod fails",
                pod: init_never.clone(),
                observed: obs(
                    vec![sb(true, 0)],
                    vec![ctr(&init_never, "i1", Exited, 1, 1)],
                ),
                want: Actions {
                    kill_pod: true,
                    sandbox_id: sandbox0(),
                    ..Default::default()
                },
            },
            Case {
                name: "apps running: exited inits are not rerun",
                pod: init.clone(),
                observed: obs(vec![sb(true, 0)], vec![ctr(&init, "a", Running, 0, 3)]),
                want: Actions {
                    sandbox_id: sandbox0(),
                    ..Default::default()
                },
            },
        ];
        for c in cases {
            assert_eq!(
                plan(&c.pod, &c.observed, NO_BACKOFF, HEALTHY, STARTED),
                c.want,
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn sidecars() {
        use State::*;
        let p = pod("Never", &["side", "i1", "sidep"], &["a"]);
        let c = |name, st, exit, t| ctr(&p, name, st, exit, t);
        let run = |o: Observed, started: StartedFn<'_>| plan(&p, &o, NO_BACKOFF, HEALTHY, started);
        let with = |f: fn(&mut Actions)| {
            let mut a = Actions {
                sandbox_id: Some("sb0".into()),
                ..Default::default()
            };
            f(&mut a);
            a
        };
        // A running sidecar lets the next init start: it does not have to exit.
        let a = run(
            obs(vec![sb(true, 0)], vec![c("side", Running, 0, 1)]),
            STARTED,
        );
        assert_eq!(a, with(|a| a.start_init = Some(1)));
        // One with a startup probe holds the next back until that succeeds.
        let o = obs(
            vec![sb(true, 0)],
            vec![
                c("side", Running, 0, 1),
                c("i1", Exited, 0, 2),
                c("sidep", Running, 0, 3),
            ],
        );
        assert_eq!(run(o.clone(), &|_| false), with(|_| {}));
        assert_eq!(run(o.clone(), STARTED), with(|a| a.start = vec![0]));
        // A sidecar that exits during init is restarted even under Never.
        let a = run(
            obs(
                vec![sb(true, 0)],
                vec![c("side", Exited, 0, 1), c("i1", Running, 0, 2)],
            ),
            STARTED,
        );
        assert_eq!(a, with(|a| a.start_init = Some(0)));
        // Beside running apps: exited sidecars restart, running ones stay.
        let a = run(
            obs(
                vec![sb(true, 0)],
                vec![
                    c("side", Exited, 1, 1),
                    c("i1", Exited, 0, 2),
                    c("sidep", Running, 0, 3),
                    c("a", Running, 0, 4),
                ],
            ),
            STARTED,
        );
        assert_eq!(a, with(|a| a.restart_sidecars = vec![0]));
        // ... with back-off like any container.
        let wait: BackoffFn<'_> = &|_, _| Some(Duration::from_secs(10));
        let o = obs(
            vec![sb(true, 0)],
            vec![
                c("side", Exited, 1, 1),
                c("i1", Exited, 0, 2),
                c("sidep", Running, 0, 3),
                c("a", Running, 0, 4),
            ],
        );
        let a = plan(&p, &o, wait, HEALTHY, STARTED);
        assert_eq!((a.restart_sidecars.len(), a.waits.len()), (0, 1));
        assert_eq!(a.waits[0].name, "side");
        // The apps are done (Never): running sidecars do not keep the pod.
        let a = run(
            obs(
                vec![sb(true, 0)],
                vec![
                    c("side", Running, 0, 1),
                    c("i1", Exited, 0, 2),
                    c("sidep", Running, 0, 3),
                    c("a", Exited, 0, 4),
                ],
            ),
            STARTED,
        );
        assert!(a.kill_pod && a.restart_sidecars.is_empty(), "{a:?}");
        // A failed liveness probe restarts a sidecar whatever the policy.
        let sick: UnhealthyFn<'_> = &|id| (id == "side-1").then_some((Kind::Liveness, None));
        let o = obs(
            vec![sb(true, 0)],
            vec![
                c("side", Running, 0, 1),
                c("i1", Exited, 0, 2),
                c("sidep", Running, 0, 3),
                c("a", Running, 0, 4),
            ],
        );
        let a = plan(&p, &o, NO_BACKOFF, sick, STARTED);
        assert_eq!(a.restart_sidecars, [0]);
        assert_eq!(
            a.kill[0].why,
            "Container side failed liveness probe, will be restarted"
        );
    }

    #[test]
    fn changed_spec_restarts_the_container() {
        let old = pod("Always", &[], &["a"]);
        let mut o = obs(
            vec![sb(true, 0)],
            vec![ctr(&old, "a", State::Running, 0, 1)],
        );
        o.containers[0].hash = "0000".into();
        let a = plan(&old, &o, NO_BACKOFF, HEALTHY, STARTED);
        assert_eq!(a.kill.len(), 1);
        assert_eq!(a.kill[0].id, "a-1");
        assert_eq!(a.start, [0]);
    }

    #[test]
    fn back_off_holds_a_restart() {
        let p = pod("Always", &[], &["a"]);
        let o = obs(vec![sb(true, 0)], vec![ctr(&p, "a", State::Exited, 1, 1)]);
        let wait = |name: &str, finished: i64| {
            assert_eq!((name, finished), ("a", 2));
            Some(Duration::from_secs(7))
        };
        let a = plan(&p, &o, &wait, HEALTHY, STARTED);
        assert!(a.start.is_empty());
        assert_eq!(
            a.waits,
            [Wait {
                name: "a".into(),
                reason: "CrashLoopBackOff",
                remaining: Duration::from_secs(7)
            }]
        );
        assert!(!a.kill_pod, "a pod in back-off keeps its sandbox");
    }

    #[test]
    fn a_failed_liveness_probe_kills_and_restarts_unless_never() {
        let grace = Some(Duration::from_secs(3));
        let sick = |id: &str| (id == "a-1").then_some((Kind::Liveness, grace));
        for (policy, restart) in [("Always", true), ("OnFailure", true), ("Never", false)] {
            let p = pod(policy, &[], &["a", "b"]);
            let o = obs(
                vec![sb(true, 0)],
                vec![
                    ctr(&p, "a", State::Running, 0, 1),
                    ctr(&p, "b", State::Running, 0, 1),
                ],
            );
            let a = plan(&p, &o, NO_BACKOFF, &sick, STARTED);
            let why = if restart {
                "Container a failed liveness probe, will be restarted"
            } else {
                "Container a failed liveness probe, will not be restarted"
            };
            assert_eq!(
                a.kill,
                [Kill {
                    id: "a-1".into(),
                    name: "a".into(),
                    why: why.into(),
                    grace
                }],
                "{policy}"
            );
            assert_eq!(a.start, if restart { vec![0] } else { vec![] }, "{policy}");
            assert!(!a.kill_pod);
        }
    }
}
