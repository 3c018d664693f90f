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
    crate::config::manifest::test_pod(&spec)
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
        user: None,
        resources: None,
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

#[test]
fn next_sync_is_the_earliest_retry() {
    let freq = Duration::from_secs(60);
    let wait = |ms| Wait {
        name: "a".into(),
        reason: crate::reason::CRASH_LOOP_BACK_OFF,
        remaining: Duration::from_millis(ms),
    };
    let none: [&str; 0] = [];
    assert_eq!(next_sync(freq, &[], none.into_iter()), freq);
    // Right after the shortest back-off ends.
    assert_eq!(
        next_sync(freq, &[wait(9_000), wait(2_000)], none.into_iter()),
        Duration::from_millis(2_050)
    );
    // A failed pull looks again within a second, other errors within 5 s;
    // a back-off's own reason adds nothing.
    let reasons = [crate::reason::ERR_IMAGE_PULL];
    assert_eq!(
        next_sync(freq, &[], reasons.into_iter()),
        Duration::from_secs(1)
    );
    let reasons = [crate::reason::CREATE_CONTAINER_ERROR];
    assert_eq!(
        next_sync(freq, &[], reasons.into_iter()),
        Duration::from_secs(5)
    );
    let reasons = [crate::reason::CRASH_LOOP_BACK_OFF];
    assert_eq!(next_sync(freq, &[], reasons.into_iter()), freq);
}

/// kubelet's ContainerRestartRules: a container's own restartPolicy
/// overrides the pod's, and its rules restart it on listed exit codes.
#[test]
fn a_containers_own_restart_policy_and_rules_decide() {
    let with = |restart: &str, extra: &str| {
        crate::config::manifest::test_pod(&format!(
            "  restartPolicy: {restart}\n  containers:\n  - {{name: a, image: 'i:1'{extra}}}\n  - {{name: b, image: 'i:1', command: [sleep]}}\n"
        ))
    };
    let run = |p: &Pod, exit: i32| {
        let o = obs(
            vec![sb(true, 0)],
            vec![
                ctr(p, "a", State::Exited, exit, 1),
                ctr(p, "b", State::Running, 0, 1),
            ],
        );
        plan(p, &o, NO_BACKOFF, HEALTHY, STARTED).start
    };
    // Pod Never, container Always: restarted.
    assert_eq!(run(&with("Never", ", restartPolicy: Always"), 1), [0]);
    // Pod Always, container Never: not.
    assert!(run(&with("Always", ", restartPolicy: Never"), 1).is_empty());
    // Rules: exit 42 restarts a Never container, exit 1 does not.
    let rules = with(
        "Always",
        ", restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]",
    );
    assert_eq!(run(&rules, 42), [0]);
    assert!(run(&rules, 1).is_empty());
    let not_in = with(
        "Never",
        ", restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: NotIn, values: [0]}}]",
    );
    assert_eq!(run(&not_in, 3), [0]);
    assert!(run(&not_in, 0).is_empty());
    // A failed init container with its own OnFailure runs again in a
    // Never pod instead of failing it.
    let p = crate::config::manifest::test_pod(
        "  restartPolicy: Never\n  initContainers:\n  - {name: i, image: 'i:1', restartPolicy: OnFailure}\n  containers:\n  - {name: a, image: 'i:1'}\n",
    );
    let o = obs(vec![sb(true, 0)], vec![ctr(&p, "i", State::Exited, 1, 1)]);
    let a = plan(&p, &o, NO_BACKOFF, HEALTHY, STARTED);
    assert_eq!((a.kill_pod, a.start_init), (false, Some(0)));
}
