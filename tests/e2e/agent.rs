//! End-to-end: `picolet agent` with the real shim, real containers from the
//! project's busybox image, static pods from a folder. Root only.

use crate::common;

use std::time::{Duration, Instant};

use common::agent::{Agent, container, phase, pod, running, status_of};

const T: Duration = Duration::from_secs(30);

fn read(agent: &Agent, file: &str) -> String {
    std::fs::read_to_string(agent.host_dir().join(file)).unwrap_or_default()
}

#[test]
fn manifest_runs_is_replaced_and_terminates_with_grace() {
    require_root!();
    let agent = Agent::start("");
    let script = "trap \"echo got TERM >> /out/term; exit 0\" TERM; echo $V > /out/v; echo x > /scratch/f && cat /scratch/f >> /out/v; while true; do sleep 0.1; done";
    let t0 = Instant::now();
    agent.write_manifest(
        "web.yaml",
        &pod(&agent, "web", script, "").replace(
            "    volumeMounts:",
            "    env: [{name: V, value: one}]\n    volumeMounts:",
        ),
    );
    let p = agent.wait_pod("web", "Running", T, running);
    eprintln!("manifest written → Running in {:?}", t0.elapsed());
    agent.wait("/out/v", T, || read(&agent, "v") == "one\nx\n");
    let uid1 = p["metadata"]["uid"].as_str().expect("uid").to_string();
    assert_eq!(
        p["metadata"]["annotations"]["kubernetes.io/config.source"],
        "file"
    );
    assert_eq!(p["metadata"]["namespace"], "default");
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    let cg = format!(
        "/sys/fs/cgroup/pids{}/kubepods/besteffort/pod{uid1}",
        agent.cgroup_root()
    );
    assert_eq!(
        std::fs::read_to_string(format!("{cg}/pids.max"))
            .expect("pod cgroup")
            .trim(),
        "256",
        "podPidsLimit lands in the pod cgroup"
    );

    // Edit: a new UID replaces the pod; the old one gets TERM first.
    agent.write_manifest(
        "web.yaml",
        &pod(&agent, "web", script, "").replace(
            "    volumeMounts:",
            "    env: [{name: V, value: two}]\n    volumeMounts:",
        ),
    );
    let p2 = agent.wait_pod("web", "replaced and Running", T, |p| {
        p["metadata"]["uid"] != uid1.as_str() && running(p)
    });
    agent.wait("/out/v = two", T, || read(&agent, "v") == "two\nx\n");
    assert_eq!(
        read(&agent, "term"),
        "got TERM\n",
        "old pod stopped with TERM"
    );
    assert!(
        !std::path::Path::new(&cg).exists(),
        "the old pod's cgroup is removed"
    );

    // Delete: terminated with grace, everything removed.
    agent.remove_manifest("web.yaml");
    agent.wait("pod gone from /pods", T, || agent.pod("web").is_none());
    assert_eq!(read(&agent, "term"), "got TERM\ngot TERM\n");
    let uid2 = p2["metadata"]["uid"].as_str().expect("uid");
    assert!(
        !agent.shim.root().join("agent/pods").join(uid2).exists(),
        "pod dir (emptyDir) removed"
    );
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let left = rt.block_on(async {
        let mut c = common::cri::client(&agent.shim.socket()).await;
        c.list_pod_sandbox(cri_proto::v1::ListPodSandboxRequest::default())
            .await
            .expect("list")
            .into_inner()
            .items
    });
    assert!(left.is_empty(), "sandboxes left: {left:?}");
    let killing = agent
        .events()
        .iter()
        .filter(|e| e["reason"] == "Killing")
        .count();
    assert!(killing >= 2, "Killing events");
}

#[test]
fn crash_loop_backs_off_and_on_failure_succeeds() {
    require_root!();
    let agent = Agent::start("");
    // Always: each start appends the uptime, then fails.
    agent.write_manifest(
        "crash.yaml",
        &pod(
            &agent,
            "crash",
            "cut -d\" \" -f1 /proc/uptime >> /out/starts; exit 3",
            "",
        ),
    );
    let p = agent.wait_pod("crash", "4 restarts", Duration::from_secs(40), |p| {
        container(p, "main")["restartCount"].as_i64().unwrap_or(0) >= 4
    });
    let c = container(&p, "main");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 3);
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
    let starts: Vec<f64> = read(&agent, "starts")
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    let gaps: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("gaps between starts: {gaps:?}");
    // kubelet: first restart at once, then 1 s, 2 s, 4 s (initial 1 s, max 4 s here).
    assert!(gaps.len() >= 4, "{gaps:?}");
    assert!(
        gaps[1] >= 0.9 && gaps[2] >= 1.9 && gaps[3] >= 3.9,
        "{gaps:?}"
    );
    assert!(gaps[3] < 7.0, "the cap holds: {gaps:?}");
    assert!(
        agent
            .events()
            .iter()
            .any(|e| e["reason"] == "BackOff" && e["type"] == "Warning"),
        "BackOff event"
    );
    let backoff_seen = agent.wait_pod("crash", "CrashLoopBackOff", T, |p| {
        container(p, "main")["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    });
    assert_eq!(phase(&backoff_seen), "Running");

    // OnFailure + exit 0 → Succeeded, init containers first, in order.
    let ok = pod(&agent, "once", "echo app >> /out/order", "  restartPolicy: OnFailure\n")
        .replace(
            "  containers:\n",
            "  initContainers:\n  - {name: i1, image: busybox:latest, imagePullPolicy: Never, command: [sh, -c, 'echo i1 >> /out/order; sleep 0.3'], volumeMounts: [{name: out, mountPath: /out}]}\n  - {name: i2, image: busybox:latest, imagePullPolicy: Never, command: [sh, -c, 'echo i2 >> /out/order'], volumeMounts: [{name: out, mountPath: /out}]}\n  containers:\n",
        );
    agent.write_manifest("once.yaml", &ok);
    let p = agent.wait_pod("once", "Succeeded", T, |p| phase(p) == "Succeeded");
    assert_eq!(read(&agent, "order"), "i1\ni2\napp\n");
    assert_eq!(
        container(&p, "main")["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(container(&p, "i2")["state"]["terminated"]["exitCode"], 0);
    let init = p["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Initialized")
        .cloned()
        .expect("Initialized");
    assert_eq!(init["status"], "True");
    // Still Succeeded a few syncs later: nothing restarted.
    common::consistently(
        "once Succeeded, nothing run again",
        Duration::from_secs(3),
        || {
            agent.pod("once").is_some_and(|p| phase(&p) == "Succeeded")
                && read(&agent, "order") == "i1\ni2\napp\n"
        },
        || agent.log(),
    );
    let p = agent.pod("once").expect("pod");
    assert_eq!(phase(&p), "Succeeded");
    assert_eq!(read(&agent, "order"), "i1\ni2\napp\n");
}

#[test]
fn bad_manifests_are_reported_and_a_good_pod_keeps_running() {
    require_root!();
    let agent = Agent::start("");
    agent.write_manifest("good.yaml", &pod(&agent, "good", "sleep 1000", ""));
    let p = agent.wait_pod("good", "Running", T, running);
    let id = container(&p, "main")["containerID"].clone();
    let bad: &[(&str, &str, &str)] = &[
        (
            "yaml.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: [",
            "yaml.yaml: not valid YAML",
        ),
        (
            "kind.yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
            "kind.yaml: kind: \"Service\" is not a pod",
        ),
        (
            "port.json",
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"busybox","ports":[{"containerPort":70000}]}]}}"#,
            "port.json: spec.containers[0].ports[0].containerPort: 70000 is not between 1 and 65535",
        ),
        (
            "vol.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: v}\nspec:\n  volumes: [{name: s, secret: {secretName: x}}]\n  containers: [{name: c, image: busybox}]\n",
            "vol.yaml: spec.volumes[0].secret: not supported in a static pod",
        ),
        (
            "dup.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: d}\nspec:\n  containers: [{name: c, image: busybox}, {name: c, image: busybox}]\n",
            "dup.yaml: spec.containers[1].name: duplicate container name \"c\"",
        ),
        (
            // A name from outside must not forge a log line.
            "x.yaml\n2026-01-01T00:00:00.000000Z  INFO agent: forged.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: f}\nspec:\n  containers: [{name: c, image: busybox, imagee: x}]\n",
            "spec.containers[0].imagee: unknown field",
        ),
    ];
    for (file, text, _) in bad {
        agent.write_manifest(file, text);
    }
    agent.wait("InvalidManifest events for each file", T, || {
        let ev = agent.events();
        bad.iter().all(|(_, _, want)| {
            ev.iter().any(|e| {
                e["reason"] == "InvalidManifest"
                    && e["message"].as_str().is_some_and(|m| m.contains(want))
            })
        })
    });
    let log = agent.log();
    assert!(
        log.contains("port.json: spec.containers[0].ports[0].containerPort"),
        "logged too"
    );
    assert!(
        log.contains("x.yaml\\n2026-01-01T00:00:00.000000Z  INFO agent: forged.yaml"),
        "escaped: {log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.starts_with("2026-01-01T00:00:00.000000Z")),
        "a forged line: {log}"
    );
    // The good pod is untouched: same container, still running.
    common::consistently(
        "the good pod running, the same container, alone",
        Duration::from_secs(3),
        || {
            let pods = agent.pods();
            pods.len() == 1
                && agent
                    .pod("good")
                    .is_some_and(|p| running(&p) && container(&p, "main")["containerID"] == id)
        },
        || agent.log(),
    );
    let p = agent.pod("good").expect("good pod");
    assert!(running(&p));
    assert_eq!(container(&p, "main")["containerID"], id);
    assert_eq!(agent.pods().len(), 1, "no pod from a bad file");
    // Fixing a file makes its pod run.
    agent.write_manifest("dup.yaml", &pod(&agent, "d", "sleep 1000", ""));
    agent.wait_pod("d", "Running once fixed", T, running);
}

#[test]
fn killed_agent_restarts_nothing_and_cleans_up_orphans() {
    require_root!();
    let mut agent = Agent::start("");
    // Fails once, then runs: restartCount 1 must survive the agent's death.
    let script = "if [ -f /out/once ]; then sleep 1000; else touch /out/once; exit 1; fi";
    agent.write_manifest("flaky.yaml", &pod(&agent, "flaky", script, ""));
    agent.write_manifest("steady.yaml", &pod(&agent, "steady", "sleep 1000", ""));
    let p = agent.wait_pod("flaky", "Running after one restart", T, |p| {
        running(p) && container(p, "main")["restartCount"] == 1
    });
    let flaky_id = container(&p, "main")["containerID"].clone();
    let s = agent.wait_pod("steady", "Running", T, running);
    let steady_id = container(&s, "main")["containerID"].clone();
    let meta = |k: &str| s["metadata"][k].as_str().unwrap_or_default().to_string();
    let steady_logs = agent.dir().join("logs").join(format!(
        "{}_{}_{}",
        meta("namespace"),
        meta("name"),
        meta("uid")
    ));
    assert!(steady_logs.is_dir(), "{} missing", steady_logs.display());

    agent.kill9();
    // While the agent is down, the steady pod's file goes away.
    agent.remove_manifest("steady.yaml");
    agent.spawn();
    let p = agent.wait_pod("flaky", "seen again", T, running);
    common::consistently(
        "flaky not restarted by the new agent",
        Duration::from_secs(3),
        || {
            agent.pod("flaky").is_some_and(|q| {
                container(&q, "main")["containerID"] == flaky_id
                    && container(&q, "main")["restartCount"] == 1
            })
        },
        || agent.log(),
    );
    let p2 = agent.pod("flaky").expect("flaky");
    for q in [&p, &p2] {
        assert_eq!(
            container(q, "main")["containerID"],
            flaky_id,
            "not restarted; log:\n{}",
            agent.log()
        );
        assert_eq!(container(q, "main")["restartCount"], 1, "count kept");
    }
    // The orphan (its file removed while the agent was down) is terminated.
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let socket = agent.shim.socket();
    agent.wait("orphan removed", T, || {
        let ids: Vec<String> = rt.block_on(async {
            let mut c = common::cri::client(&socket).await;
            c.list_containers(cri_proto::v1::ListContainersRequest::default())
                .await
                .expect("list")
                .into_inner()
                .containers
                .into_iter()
                .map(|c| format!("picolet://{}", c.id))
                .collect()
        });
        !ids.iter().any(|i| steady_id == i.as_str())
    });
    assert!(agent.pod("steady").is_none());
    // Its log directory goes with it (it once stayed on this path).
    agent.wait("the orphan's log directory removed", T, || {
        !steady_logs.exists()
    });
}

#[test]
fn hooks_volumes_resources_and_image_errors() {
    require_root!();
    let agent = Agent::start("");
    let host = agent.host_dir();
    let text = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: hooks}}
spec:
  terminationGracePeriodSeconds: 5
  volumes:
  - {{name: out, hostPath: {{path: {host}, type: Directory}}}}
  - {{name: made, hostPath: {{path: {host}/made.txt, type: FileOrCreate}}}}
  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 1Mi}}}}
  containers:
  - name: main
    image: busybox:latest
    imagePullPolicy: Never
    command: [sh, -c, 'trap "echo term >> /out/order; exit 0" TERM; grep " /mem " /proc/mounts > /out/mem; echo main >> /out/order; while true; do sleep 0.1; done']
    resources:
      limits: {{cpu: 500m, memory: 64Mi}}
    lifecycle:
      postStart:
        exec: {{command: [sh, -c, 'echo poststart >> /out/order']}}
      preStop:
        exec: {{command: [sh, -c, 'echo prestop >> /out/order']}}
    volumeMounts:
    - {{name: out, mountPath: /out}}
    - {{name: made, mountPath: /made.txt}}
    - {{name: mem, mountPath: /mem}}
  - name: badhook
    image: busybox:latest
    imagePullPolicy: Never
    command: [sleep, '1000']
    resources:
      limits: {{cpu: 100m, memory: 16Mi}}
    lifecycle:
      postStart:
        exec: {{command: [sh, -c, 'echo no; exit 7']}}
"#,
        host = host.display()
    );
    agent.write_manifest("hooks.yaml", &text);
    let p = agent.wait_pod("hooks", "main Running", T, |p| {
        container(p, "main")["state"]["running"].is_object()
    });
    assert_eq!(p["status"]["qosClass"], "Guaranteed");
    agent.wait("postStart ran", T, || {
        read(&agent, "order").contains("poststart")
    });
    assert!(host.join("made.txt").is_file(), "FileOrCreate made a file");
    agent.wait("/out/mem", T, || !read(&agent, "mem").is_empty());
    let mem = read(&agent, "mem");
    assert!(mem.starts_with("tmpfs /mem tmpfs"), "{mem}");
    assert!(mem.contains("size=1024k"), "sizeLimit: {mem}");
    // Guaranteed pod cgroup: the sum of the limits.
    let uid = p["metadata"]["uid"].as_str().expect("uid");
    let pod_cg = format!("{}/kubepods/pod{uid}", agent.cgroup_root());
    let read_cg = |ctrl: &str, file: &str| {
        std::fs::read_to_string(format!("/sys/fs/cgroup/{ctrl}{pod_cg}/{file}"))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    assert_eq!(
        read_cg("memory", "memory.limit_in_bytes"),
        (80u64 << 20).to_string()
    );
    assert_eq!(read_cg("cpu", "cpu.cfs_quota_us"), "60000");
    assert_eq!(read_cg("cpu", "cpu.shares"), "614");
    // The container's own cgroup below it carries its limit.
    let cid = container(&p, "main")["containerID"]
        .as_str()
        .expect("id")
        .trim_start_matches("picolet://")
        .to_string();
    assert_eq!(
        std::fs::read_to_string(format!(
            "/sys/fs/cgroup/memory{pod_cg}/{cid}/memory.limit_in_bytes"
        ))
        .expect("container cgroup")
        .trim(),
        (64u64 << 20).to_string()
    );
    // A failing postStart hook kills the container; it is restarted.
    agent.wait_pod("hooks", "badhook restarted", T, |p| {
        container(p, "badhook")["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1
    });
    let ev = agent.events();
    let hook = ev
        .iter()
        .find(|e| e["reason"] == "FailedPostStartHook")
        .expect("FailedPostStartHook event");
    assert!(
        hook["message"]
            .as_str()
            .unwrap_or("")
            .contains("exit code 7"),
        "{hook}"
    );
    assert_eq!(
        hook["involvedObject"]["fieldPath"],
        "spec.containers{badhook}"
    );

    // Image errors, as kubelet names them.
    let img = |name: &str, policy: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - {{name: main, image: 'nothere:1', imagePullPolicy: {policy}}}\n"
        )
    };
    agent.write_manifest("never.yaml", &img("never", "Never"));
    agent.write_manifest("pull.yaml", &img("pull", "IfNotPresent"));
    agent.wait_pod("never", "ErrImageNeverPull", T, |p| {
        container(p, "main")["state"]["waiting"]["reason"] == "ErrImageNeverPull"
    });
    agent.wait_pod("pull", "ErrImagePull", T, |p| {
        container(p, "main")["state"]["waiting"]["reason"] == "ErrImagePull"
    });
    agent.wait_pod("pull", "ImagePullBackOff", T, |p| {
        container(p, "main")["state"]["waiting"]["reason"] == "ImagePullBackOff"
    });
    let p = agent.pod("pull").expect("pod");
    assert_eq!(phase(&p), "Pending");

    // A missing hostPath Directory: FailedMount, the container waits.
    let missing = pod(&agent, "nodir", "sleep 1000", "").replace(
        &format!("path: {}, type: Directory", host.display()),
        &format!("path: {}/missing, type: Directory", host.display()),
    );
    agent.write_manifest("nodir.yaml", &missing);
    agent.wait("FailedMount event", T, || {
        agent.events().iter().any(|e| {
            e["reason"] == "FailedMount"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("missing does not exist"))
        })
    });

    // preStop runs before TERM reaches the container.
    agent.remove_manifest("hooks.yaml");
    agent.wait("hooks pod gone", T, || agent.pod("hooks").is_none());
    // (postStart runs beside the entrypoint, so those two may be in either order.)
    let order = read(&agent, "order");
    assert!(order.ends_with("prestop\nterm\n"), "{order}");
    assert!(
        order.contains("main\n") && order.contains("poststart\n"),
        "{order}"
    );
}

/// The agent talks to the runtime only through CRI: the same static pod
/// runs on Debian's containerd 1.6 + runc (host network: containerd's CRI
/// needs CNI for a pod network).
#[test]
fn the_agent_drives_containerd_too() {
    require_root!();
    let mut agent = Agent::prepare("");
    let ctrd = common::containerd::Containerd::start(&agent.dir());
    agent.cri_socket = Some(ctrd.socket());
    // Image GC keeps containerd's sandbox image, which no container names;
    // the agent learns it from the verbose Status (our shim has none).
    let sandbox_images = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            let mut out = Vec::new();
            for socket in [ctrd.socket(), agent.shim.socket()] {
                let cri = agent::runtime::Cri::connect(
                    &socket,
                    Duration::from_secs(10),
                    std::sync::Arc::new(agent::metrics::AgentMetrics::default()),
                )
                .await
                .expect("connect");
                out.push(cri.sandbox_image().await);
            }
            out
        });
    assert_eq!(
        sandbox_images,
        [Some(common::containerd::PAUSE_REF.to_string()), None]
    );
    agent.spawn();
    let text = pod(
        &agent,
        "onctrd",
        "trap \"echo term >> /out/term; exit 0\" TERM; echo $((6*7)) > /out/hi; while true; do sleep 0.1; done",
        "  hostNetwork: true\n",
    )
    .replace("image: busybox:latest", "image: docker.io/library/busybox:latest");
    agent.write_manifest("p.yaml", &text);
    let p = agent.wait_pod("onctrd", "Running on containerd", T, running);
    let id = container(&p, "main")["containerID"].as_str().unwrap_or("");
    assert!(id.starts_with("containerd://"), "{id}");
    agent.wait("/out/hi", T, || read(&agent, "hi") == "42\n");
    agent.remove_manifest("p.yaml");
    agent.wait("pod gone", T, || agent.pod("onctrd").is_none());
    assert_eq!(read(&agent, "term"), "term\n", "stopped with TERM");
    agent.stop();
    drop(ctrd);
}

/// `picolet up` runs shim and agent as children and restarts either after a
/// kill -9; the pod's container lives through both, and through `up`
/// stopping.
#[test]
fn up_supervises_shim_and_agent() {
    require_root!();
    let mut up = Agent::prepare("");
    up.shim.stop();
    up.command = "up";
    up.spawn();
    up.write_manifest("p.yaml", &pod(&up, "sup", "sleep 1000", ""));
    let p = up.wait_pod("sup", "Running", T, running);
    let id = container(&p, "main")["containerID"].clone();
    for role in [" shim ", " agent "] {
        let (pid, _) = up
            .children()
            .into_iter()
            .find(|(_, cmd)| cmd.contains(role))
            .unwrap_or_else(|| panic!("no{role}child: {:?}", up.children()));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill");
        up.wait(&format!("{role} restarted"), T, || {
            up.children()
                .iter()
                .any(|(p, cmd)| cmd.contains(role) && *p != pid)
        });
        // The agent sees the same container, not restarted: whenever it
        // answers with the pod running, for a while, and then.
        common::consistently(
            format_args!("the same container after killing{role}"),
            Duration::from_secs(2),
            || {
                let pods = up.try_items("/pods").unwrap_or_default();
                let Some(p) = pods.iter().find(|p| p["metadata"]["name"] == "sup-e2e") else {
                    return true;
                };
                !running(p)
                    || (container(p, "main")["containerID"] == id
                        && container(p, "main")["restartCount"] == 0)
            },
            || up.log(),
        );
        let p = up.wait_pod("sup", "Running after the restart", T, running);
        assert_eq!(
            container(&p, "main")["containerID"],
            id,
            "after killing{role}"
        );
        assert_eq!(container(&p, "main")["restartCount"], 0);
    }
    assert!(up.log().contains("restarting in"), "up logs the restarts");
    // Stopping `up` stops both children; the container keeps running.
    let children: Vec<i32> = up.children().into_iter().map(|(p, _)| p).collect();
    up.stop();
    for pid in children {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "child {pid} still running"
        );
    }
    let uid = p["metadata"]["uid"].as_str().expect("uid");
    let cid = id.as_str().expect("id").trim_start_matches("picolet://");
    let procs = std::fs::read_to_string(format!(
        "/sys/fs/cgroup/pids{}/kubepods/besteffort/pod{uid}/{cid}/cgroup.procs",
        up.cgroup_root()
    ))
    .expect("container cgroup");
    assert!(
        !procs.trim().is_empty(),
        "the container outlives picolet up"
    );
}

/// The healthz port answers /healthz and nothing else (it served every
/// endpoint, /pods and the metrics included, on healthzBindAddress, which may
/// be wider than the API address); the API port serves them.
#[test]
fn the_healthz_port_serves_healthz_only() {
    require_root!();
    let agent = Agent::start("");
    assert_eq!(status_of(agent.healthz_port, "/healthz"), "200");
    for path in ["/pods", "/metrics", "/stats/summary", "/events"] {
        assert_eq!(
            status_of(agent.healthz_port, path),
            "404",
            "{path} on healthz"
        );
        assert_eq!(status_of(agent.port, path), "200", "{path} on the API port");
    }
}

/// `picolet up | tee log`, then Ctrl-C: tee is gone and stderr is a pipe
/// nobody reads. Logging must never end the node agent: every log line
/// failed, tracing-subscriber reported it with eprintln!, which panicked on
/// the same broken pipe and aborted up (and then shim and agent).
#[test]
fn up_survives_a_stderr_nobody_reads() {
    require_root!();
    let mut up = Agent::prepare("");
    up.shim.stop();
    up.command = "up";
    up.stderr_unread = true;
    up.spawn(); // serves /healthz: up, shim and agent logged their start
    up.write_manifest("p.yaml", &pod(&up, "epipe", "sleep 1000", ""));
    up.wait_pod("epipe", "Running", T, running);
    let children = up.children();
    for role in [" shim ", " agent "] {
        assert!(
            children.iter().any(|(_, cmd)| cmd.contains(role)),
            "no{role}child: {children:?}"
        );
    }
    let child = up.child.as_mut().expect("up");
    assert!(child.try_wait().expect("wait").is_none(), "up still runs");
}

/// An upgrade replaces the binary under a running `up` (a package manager
/// renames the new file over the old): a child that dies is started again
/// from the path, the new binary, not from `/proc/self/exe`, which then
/// names a deleted file (`up` once retried that every 2 s forever, and the
/// node had no agent until `up` itself was restarted).
#[test]
fn up_restarts_a_child_from_a_binary_replaced_on_disk() {
    require_root!();
    let mut up = Agent::prepare("");
    up.shim.stop();
    up.command = "up";
    let bin = up.dir().join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let exe = bin.join("picolet");
    std::fs::copy(common::picolet(), &exe).expect("copy the binary");
    up.binary = Some(exe.clone());
    up.spawn();
    up.write_manifest("p.yaml", &pod(&up, "upgrade", "sleep 1000", ""));
    up.wait_pod("upgrade", "Running", T, running);
    // The upgrade: a new file renamed over the old one.
    let new = bin.join("picolet.new");
    std::fs::copy(common::picolet(), &new).expect("copy the new binary");
    std::fs::rename(&new, &exe).expect("replace the binary");
    let (pid, _) = up
        .children()
        .into_iter()
        .find(|(_, cmd)| cmd.contains(" agent "))
        .unwrap_or_else(|| panic!("no agent child: {:?}", up.children()));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the agent");
    up.wait(
        "the agent started again from the replaced binary",
        T,
        || {
            up.children()
                .iter()
                .any(|(p, cmd)| cmd.contains(" agent ") && *p != pid)
        },
    );
    up.wait_pod("upgrade", "Running after the restart", T, running);
}

/// Sidecars (init containers with `restartPolicy: Always`, KEP-753): the
/// next init container starts while the sidecar runs; the sidecar is
/// restarted even in a `Never` pod; the pod succeeds when its app does
/// although the sidecar runs; on deletion the app gets TERM before the
/// sidecar.
#[test]
fn sidecars_run_beside_the_app_and_stop_after_it() {
    require_root!();
    let agent = Agent::start("");
    let host = agent.host_dir();
    let sidecar = |name: &str, app: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  volumes:
  - name: out
    hostPath: {{path: {host}, type: Directory}}
  initContainers:
  - name: side
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    restartPolicy: Always
    command: [sh, -c, 'echo up >> /out/{name}-side; trap "echo side >> /out/{name}-order; exit 0" TERM; while :; do sleep 0.1; done']
    volumeMounts: [{{name: out, mountPath: /out}}]
    startupProbe: {{exec: {{command: [test, -e, /out/{name}-side]}}, periodSeconds: 1}}
  - name: setup
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'echo setup >> /out/{name}-setup']
    volumeMounts: [{{name: out, mountPath: /out}}]
  containers:
  - name: main
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: [sh, -c, '{app}']
    volumeMounts: [{{name: out, mountPath: /out}}]
"#,
            host = host.display()
        )
    };
    // A long-running app: the sidecar is restarted when it dies, and stops
    // after the app on deletion.
    agent.write_manifest(
        "long.yaml",
        &sidecar(
            "long",
            r#"trap "sleep 0.5; echo main >> /out/long-order; exit 0" TERM; while :; do sleep 0.1; done"#,
        ),
    );
    let p = agent.wait_pod("long", "Running with its sidecar", T, |p| {
        running(p) && container(p, "side")["state"]["running"].is_object()
    });
    assert_eq!(read(&agent, "long-setup"), "setup\n");
    assert_eq!(container(&p, "side")["started"], true);
    assert_eq!(container(&p, "setup")["state"]["terminated"]["exitCode"], 0);
    let cond = |p: &serde_json::Value, kind: &str| {
        p["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
            .map(|c| c["status"].clone())
    };
    assert_eq!(cond(&p, "Initialized"), Some("True".into()));
    // Kill the sidecar's process: restarted although the pod says Never.
    let side_pid = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("echo up >> /out/long-side"))
        })
        .expect("sidecar process");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(side_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill sidecar");
    agent.wait_pod("long", "sidecar restarted", T, |p| {
        container(p, "side")["restartCount"] == 1
            && container(p, "side")["state"]["running"].is_object()
    });
    // Running is reported when StartContainer returns, before the new
    // sidecar's shell has run its first `echo` (a loaded machine showed
    // "up\n" here): wait for exactly two.
    agent.wait("the restarted sidecar's echo", T, || {
        read(&agent, "long-side") == "up\nup\n"
    });
    assert_eq!(read(&agent, "long-setup"), "setup\n", "init not rerun");
    agent.remove_manifest("long.yaml");
    agent.wait("long pod gone", T, || agent.pod("long").is_none());
    assert_eq!(
        read(&agent, "long-order"),
        "main\nside\n",
        "app stops first"
    );

    // A finite app: the pod succeeds while the sidecar still runs, then
    // the sidecar is stopped.
    agent.write_manifest("job.yaml", &sidecar("job", "sleep 1; echo done"));
    let p = agent.wait_pod("job", "Succeeded", T, |p| phase(p) == "Succeeded");
    assert_eq!(container(&p, "main")["state"]["terminated"]["exitCode"], 0);
    agent.wait("sidecar stopped after the job", T, || {
        read(&agent, "job-order") == "side\n"
    });
}

/// `seccompDefault` (picolet's default: true): a container without a
/// profile runs with the runtime's default filter (`unshare -U` refused,
/// Seccomp: 2); a pod's `Unconfined` opts out; `seccompDefault: false`
/// leaves it unconfined, as kubelet's default does.
#[test]
fn seccomp_default_confines_containers_without_a_profile() {
    require_root!();
    let script = "grep ^Seccomp: /proc/self/status > /out/$NAME; unshare -U true && echo unshared >> /out/$NAME; sleep 1000";
    let secure = Agent::start("");
    let pod_named = |agent: &Agent, name: &str, extra: &str| {
        pod(agent, name, script, extra).replace(
            "    volumeMounts:",
            &format!("    env: [{{name: NAME, value: {name}}}]\n    volumeMounts:"),
        )
    };
    secure.write_manifest("d.yaml", &pod_named(&secure, "confined", ""));
    secure.write_manifest(
        "u.yaml",
        &pod_named(
            &secure,
            "optout",
            "  securityContext: {seccompProfile: {type: Unconfined}}\n",
        ),
    );
    secure.wait("both pods wrote", T, || {
        !read(&secure, "confined").is_empty() && read(&secure, "optout").contains("unshared")
    });
    assert_eq!(read(&secure, "confined"), "Seccomp:\t2\n");
    assert_eq!(read(&secure, "optout"), "Seccomp:\t0\nunshared\n");
    drop(secure);

    let open = Agent::start("seccompDefault: false\n");
    open.write_manifest("d.yaml", &pod_named(&open, "plain", ""));
    open.wait("the pod wrote", T, || {
        read(&open, "plain").contains("unshared")
    });
    assert_eq!(read(&open, "plain"), "Seccomp:\t0\nunshared\n");
}

/// A static pod with `hostUsers: false`: its own user namespace, a range
/// of 65536 host IDs of its own; its root is root in its volumes
/// (idmapped), and what it writes there is the host's root's.
#[test]
fn a_host_users_false_pod_runs_in_its_own_user_namespace() {
    require_root!();
    let agent = Agent::start("");
    let script = "{ cat /proc/self/uid_map; id -u; touch /scratch/f; stat -c %u /scratch/f /out; } > /out/userns; sleep 1000";
    agent.write_manifest(
        "u.yaml",
        &pod(&agent, "userns", script, "  hostUsers: false\n"),
    );
    agent.wait("the pod wrote", T, || {
        read(&agent, "userns").lines().count() >= 4
    });
    let got: Vec<Vec<String>> = read(&agent, "userns")
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    let text = read(&agent, "userns");
    let host: u32 = got[0][1].parse().expect("the host ID");
    assert!(host >= 65536 && host.is_multiple_of(65536), "{text}");
    assert_eq!(
        got,
        [
            vec!["0".to_string(), host.to_string(), "65536".into()],
            vec!["0".into()],
            vec!["0".into()],
            vec!["0".into()],
        ],
        "{text}"
    );
    use std::os::unix::fs::MetadataExt;
    let on_host = std::fs::metadata(agent.host_dir().join("userns")).expect("stat");
    assert_eq!((on_host.uid(), on_host.gid()), (0, 0));
}

/// An `image` volume (kubelet 1.36's ImageVolume): the image the pod
/// names, pulled per its policy and mounted read-only by the runtime.
#[test]
fn an_image_volume_shows_the_image_read_only() {
    require_root!();
    let agent = Agent::start("");
    let script =
        "{ head -1 /iv/etc/passwd; touch /iv/x 2>&1 || echo refused; } > /out/iv; sleep 1000";
    let manifest = pod(&agent, "imgvol", script, "").replace(
        "  - name: scratch\n    emptyDir: {}\n",
        "  - name: scratch\n    emptyDir: {}\n  - name: iv\n    image: {reference: 'busybox:latest', pullPolicy: IfNotPresent}\n",
    ).replace(
        "    - {name: scratch, mountPath: /scratch}\n",
        "    - {name: scratch, mountPath: /scratch}\n    - {name: iv, mountPath: /iv}\n",
    );
    agent.write_manifest("iv.yaml", &manifest);
    agent.wait("the pod wrote", T, || {
        read(&agent, "iv").contains("refused")
    });
    let text = read(&agent, "iv");
    assert!(text.starts_with("root:x:0:0:"), "{text}");
    assert!(text.contains("Read-only file system"), "{text}");
}
