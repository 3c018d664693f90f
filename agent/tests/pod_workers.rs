//! Pod workers and PLEG against an in-memory CRI runtime ([`fake_cri`]):
//! no root, no containers, the real gRPC client and server. What the
//! privileged end-to-end tests show with real containers, these show for
//! the sync logic alone, in seconds, on any machine.

mod fake_cri;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::cri_config::NodeInfo;
use agent::events::Recorder;
use agent::pod_workers::{Ctx, PodWorkers};
use agent::runtime::Cri;
use agent::{metrics, pleg, prober, status};
use fake_cri::FakeCri;
use k8s_openapi::api::core::v1::Pod;

struct Setup {
    workers: PodWorkers,
    statuses: status::Manager,
    recorder: Recorder,
    dir: tempfile::TempDir,
}

async fn cri(fake: &FakeCri) -> Cri {
    let metrics = Arc::new(metrics::AgentMetrics::default());
    Cri::connect(fake.socket(), Duration::from_secs(5), metrics)
        .await
        .expect("connect to the fake")
}

async fn setup(fake: &FakeCri) -> Setup {
    setup_with(fake, None).await
}

async fn setup_with(
    fake: &FakeCri,
    objects: Option<Arc<dyn agent::volumes::objects::ApiObjects>>,
) -> Setup {
    setup_config(fake, objects, None, |_| {}).await
}

async fn setup_config(
    fake: &FakeCri,
    objects: Option<Arc<dyn agent::volumes::objects::ApiObjects>>,
    devices: Option<agent::devicemanager::Manager>,
    adjust: impl FnOnce(&mut edge_config::Config),
) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = edge_config::Config {
        cri_socket: fake.socket().to_path_buf(),
        cgroups_per_qos: false,
        data_dir: dir.path().join("data"),
        pod_logs_dir: dir.path().join("logs"),
        resolv_conf: dir.path().join("resolv.conf"),
        restart_backoff_initial: Duration::from_millis(300),
        restart_backoff_max: Duration::from_millis(600),
        ..Default::default()
    };
    adjust(&mut config);
    std::fs::write(&config.resolv_conf, "nameserver 10.0.0.1\n").expect("resolv.conf");
    let statuses = status::Manager::default();
    let recorder = Recorder::new(100, "node");
    let workers = PodWorkers::new(Ctx {
        cri: cri(fake).await,
        config: Arc::new(config),
        node: Arc::new(NodeInfo {
            name: "node".into(),
            host_ip: "10.0.0.5".into(),
            cpu_milli: 2000,
            memory_bytes: 1 << 30,
            ..Default::default()
        }),
        runtime_name: "fake".into(),
        cgroups: None,
        recorder: recorder.clone(),
        statuses: statuses.clone(),
        probe_metrics: prober::Metrics::default(),
        metrics: Arc::new(metrics::AgentMetrics::default()),
        started: Instant::now(),
        objects,
        devices,
        userns: Some(Arc::new(
            agent::userns::Manager::open(&dir.path().join("userns"), 65536).expect("userns"),
        )),
        allocatable: agent::lifecycle::predicate::Resources {
            cpu_milli: 2000,
            memory: 1 << 30,
            ephemeral: 10 << 30,
            pods: 110,
        },
    });
    // PLEG wakes the workers, wired as the sync loop wires it.
    let (changed, mut rx) = tokio::sync::mpsc::channel::<String>(64);
    tokio::spawn(pleg::run(pleg::Pleg {
        cri: cri(fake).await,
        metrics: Arc::new(metrics::AgentMetrics::default()),
        health: agent::health::Health::default(),
        changed,
        running: tokio::sync::watch::channel(Arc::default()).0,
    }));
    let w = workers.clone();
    tokio::spawn(async move {
        while let Some(uid) = rx.recv().await {
            w.notify(&uid);
        }
    });
    Setup {
        workers,
        statuses,
        recorder,
        dir,
    }
}

/// A static pod `name` with `spec` (YAML under `spec:`) as the file
/// source makes it (defaults, UID, node name).
fn static_pod(name: &str, spec: &str) -> Pod {
    let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{spec}");
    agent::config::manifest::parse(
        Path::new(&format!("/pods/{name}.yaml")),
        &text,
        "node",
        "2026-01-01T00:00:00Z",
    )
    .expect("valid pod")
    .remove(0)
}

/// A static pod whose one container `main` runs `command`.
fn pod(name: &str, restart: &str, command: &str) -> Pod {
    static_pod(
        name,
        &format!(
            "  restartPolicy: {restart}\n  containers:\n  - {{name: main, image: busybox, command: [{command}]}}\n"
        ),
    )
}

fn desired(pods: &[&Pod]) -> BTreeMap<String, Arc<Pod>> {
    pods.iter()
        .map(|p| (p.metadata.uid.clone().expect("uid"), Arc::new((*p).clone())))
        .collect()
}

/// Polls `f` every 20 ms for up to 10 s.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A pod `web` (restartPolicy Always, `sleep`) given to fresh workers,
/// once it is Running: the setup, the pod, its UID.
async fn running_web(fake: &FakeCri) -> (Setup, Pod, String) {
    let s = setup(fake).await;
    let p = pod("web", "Always", "sleep");
    let uid = p.metadata.uid.clone().expect("uid");
    s.workers.update(&desired(&[&p]));
    eventually("phase Running", || phase(&s.statuses, &uid) == "Running").await;
    (s, p, uid)
}

fn phase(s: &status::Manager, uid: &str) -> String {
    s.get(uid).and_then(|p| p.status?.phase).unwrap_or_default()
}

#[tokio::test]
async fn a_pod_gets_a_sandbox_and_its_container_and_runs() {
    let fake = FakeCri::start().await;
    let (s, _, uid) = running_web(&fake).await;
    let st = fake.state();
    assert_eq!(st.sandboxes.len(), 1, "{:?}", st.sandboxes);
    let c: Vec<_> = st.containers.values().collect();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].config.command, ["sleep"]);
    // kubelet's labels: how a restarted agent finds its containers.
    assert_eq!(c[0].config.labels["io.kubernetes.pod.uid"], uid);
    assert_eq!(c[0].config.labels["io.kubernetes.container.name"], "main");
    let order: Vec<&str> = st
        .calls
        .iter()
        .copied()
        .filter(|c| matches!(*c, "RunPodSandbox" | "CreateContainer" | "StartContainer"))
        .collect();
    assert_eq!(
        order,
        ["RunPodSandbox", "CreateContainer", "StartContainer"]
    );
    drop(st);
    let reasons: Vec<String> = s
        .recorder
        .list()
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert!(reasons.contains(&"Started".to_string()), "{reasons:?}");
}

/// Calls that make, start, stop or remove something.
fn changes(fake: &FakeCri) -> Vec<&'static str> {
    let changing = [
        "RunPodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "CreateContainer",
        "StartContainer",
        "StopContainer",
        "RemoveContainer",
        "PullImage",
    ];
    let st = fake.state();
    st.calls
        .iter()
        .copied()
        .filter(|c| changing.contains(c))
        .collect()
}

/// A sync that only the clock woke plans from the worker's last
/// observation, as kubelet's pod cache spares its periodic syncs the
/// runtime: statuses are read again only once the observation is 5 minutes
/// old, or when something wakes the worker (PLEG, here by hand). In paused
/// time: an hour of syncs.
#[tokio::test(start_paused = true)]
async fn clock_woken_syncs_read_statuses_every_five_minutes_or_when_woken() {
    let fake = FakeCri::start().await;
    let (s, _, uid) = running_web(&fake).await;
    // Only observe reads a sandbox's or a container's status (PLEG lists).
    let reads = |fake: &FakeCri| {
        fake.state()
            .calls
            .iter()
            .filter(|c| matches!(**c, "PodSandboxStatus" | "ContainerStatus"))
            .count()
    };
    // PLEG's first relists see the new container and wake the worker.
    tokio::time::sleep(Duration::from_secs(30)).await;
    fake.state().calls.clear();
    // Sixty syncs of the default syncFrequency (1 m); PLEG relists every
    // 10 s beside its event stream.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let calls = fake.state().calls.clone();
    // Twelve observations of a sandbox and a container, not sixty.
    let read = reads(&fake);
    assert!((22..=26).contains(&read), "{read} status reads in an hour");
    let relists = calls.iter().filter(|c| **c == "ListContainers").count();
    assert!(relists >= 300, "PLEG relisted {relists} times");
    assert_eq!(phase(&s.statuses, &uid), "Running");
    fake.state().calls.clear();
    s.workers.notify(&uid);
    eventually("a fresh observation", || reads(&fake) >= 2).await;
}

/// A running pod through an hour of syncs and relists (paused time): the
/// same sandbox and container, nothing made, stopped or pulled again.
#[tokio::test(start_paused = true)]
async fn a_running_pod_is_left_alone_through_an_hour_of_syncs() {
    let fake = FakeCri::start().await;
    let (s, p, uid) = running_web(&fake).await;
    let made = changes(&fake);
    let ids: Vec<String> = fake
        .containers_named("main")
        .into_iter()
        .map(|c| c.id)
        .collect();
    for minute in 0..60 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        // The desired set arrives again, as each source resends it.
        s.workers.update(&desired(&[&p]));
        assert_eq!(changes(&fake), made, "minute {minute}");
    }
    let now: Vec<String> = fake
        .containers_named("main")
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(now, ids);
    assert_eq!(phase(&s.statuses, &uid), "Running");
}

/// Completed pods through an hour of syncs (paused time): `Never` after a
/// failure and `OnFailure` after a success run nothing again and stay in
/// their final phase; `OnFailure` after a failure does restart (so the
/// hour would show a wrong rerun).
#[tokio::test(start_paused = true)]
async fn completed_pods_are_not_run_again_through_an_hour_of_syncs() {
    let fake = FakeCri::start().await;
    let s = setup(&fake).await;
    let never = pod("never", "Never", "'false'");
    let done = pod("done", "OnFailure", "'true'");
    let uids = [&never, &done].map(|p| p.metadata.uid.clone().expect("uid"));
    let pods = desired(&[&never, &done]);
    s.workers.update(&pods);
    eventually("both final", || {
        phase(&s.statuses, &uids[0]) == "Failed" && phase(&s.statuses, &uids[1]) == "Succeeded"
    })
    .await;
    let starts = || fake.state().starts.len();
    assert_eq!(starts(), 2);
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        s.workers.update(&pods);
    }
    assert_eq!(starts(), 2, "{:?}", fake.state().starts);
    assert_eq!(phase(&s.statuses, &uids[0]), "Failed");
    assert_eq!(phase(&s.statuses, &uids[1]), "Succeeded");
}

/// A pod whose sandbox cannot be made is Pending in the status with why
/// (each container ContainerCreating), not missing; it runs once the
/// runtime can make it.
#[tokio::test]
async fn a_pod_whose_sandbox_fails_is_pending_with_the_reason() {
    let fake = FakeCri::start().await;
    fake.state().sandbox_error = Some("plugin type=\"bridge\" failed (add): no IPs left".into());
    let s = setup(&fake).await;
    let p = pod("nonet", "Always", "sleep");
    let uid = p.metadata.uid.clone().expect("uid");
    s.workers.update(&desired(&[&p]));
    eventually("a Pending status", || phase(&s.statuses, &uid) == "Pending").await;
    let st = s.statuses.get(&uid).and_then(|p| p.status).expect("status");
    let waiting = st.container_statuses.expect("containers")[0]
        .state
        .clone()
        .and_then(|s| s.waiting)
        .expect("waiting");
    assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
    assert!(
        waiting.message.as_deref().is_some_and(
            |m| m.starts_with("Failed to create pod sandbox: ") && m.contains("no IPs left")
        ),
        "{waiting:?}"
    );
    fake.state().sandbox_error = None;
    eventually("Running once the runtime can", || {
        phase(&s.statuses, &uid) == "Running"
    })
    .await;
}

/// A pod of 300 containers is stopped at most 128 at a time (1,000 at once
/// starved other pods' exec probes in the runtime), all within one round of
/// the fake runtime's stop time per 128.
#[tokio::test]
async fn a_big_pods_containers_are_stopped_a_bounded_number_at_once() {
    let fake = FakeCri::start().await;
    fake.state().stop_delay = Duration::from_millis(200);
    let s = setup(&fake).await;
    let containers: Vec<_> = (0..300)
        .map(|i| {
            serde_json::json!({"name": format!("c{i}"), "image": "busybox:1",
                                    "imagePullPolicy": "IfNotPresent", "command": ["sleep"]})
        })
        .collect();
    let p = api_pod("big", serde_json::json!({"containers": containers}));
    s.workers.update(&desired(&[&p]));
    eventually("300 containers Running", || {
        phase(&s.statuses, "uid-big") == "Running"
    })
    .await;
    let t0 = Instant::now();
    s.workers.update(&desired(&[]));
    eventually("all stopped", || {
        let st = fake.state();
        !st.containers.is_empty()
            && st
                .containers
                .values()
                .all(|c| c.state == cri_proto::v1::ContainerState::ContainerExited)
    })
    .await;
    assert_eq!(fake.state().stops_most, 128);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// kubelet's image manager: a present image with `IfNotPresent` is not
/// pulled, and the event says so.
#[tokio::test]
async fn a_present_image_is_not_pulled_and_the_event_says_so() {
    let fake = FakeCri::start().await;
    let s = setup(&fake).await;
    let p = api_pod(
        "present",
        serde_json::json!({"containers": [{"name": "main", "image": "busybox:1",
                           "imagePullPolicy": "IfNotPresent", "command": ["sleep"]}]}),
    );
    s.workers.update(&desired(&[&p]));
    eventually("phase Running", || {
        phase(&s.statuses, "uid-present") == "Running"
    })
    .await;
    assert!(!fake.state().calls.contains(&"PullImage"));
    let pulled: Vec<String> = s
        .recorder
        .list()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Pulled"))
        .filter_map(|e| e.message)
        .collect();
    assert_eq!(
        pulled,
        ["Container image \"busybox:1\" already present on machine"]
    );
}

#[tokio::test]
async fn a_failing_container_is_restarted_after_its_back_off() {
    let fake = FakeCri::start().await;
    let s = setup(&fake).await;
    let p = pod("crash", "Always", "'false'");
    let uid = p.metadata.uid.clone().expect("uid");
    s.workers.update(&desired(&[&p]));
    let starts = || -> Vec<i64> {
        let st = fake.state();
        st.starts
            .iter()
            .filter(|(n, _)| n == "main")
            .map(|(_, t)| *t)
            .collect()
    };
    eventually("four attempts", || starts().len() >= 4).await;
    let starts = starts();
    // As kubelet: the first restart as soon as the exit is seen (PLEG), with
    // no back-off; then 300 ms, then 600 ms (the maximum) after each exit.
    let gaps: Vec<i64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]) / 1_000_000)
        .collect();
    assert!(gaps[1] >= 300, "first back-off: {gaps:?} ms");
    assert!(gaps[2] >= 600, "second back-off: {gaps:?} ms");
    let pod = s.statuses.get(&uid).expect("status");
    let cs = &pod
        .status
        .expect("status")
        .container_statuses
        .expect("containers")[0];
    assert!(cs.restart_count >= 1, "{cs:?}");
    // Exited instances do not pile up: the workers remove old ones.
    let kept = fake.containers_named("main").len();
    assert!(kept < starts.len(), "{kept} of {} kept", starts.len());
}

#[tokio::test]
async fn a_pod_gone_from_its_source_is_stopped_and_removed() {
    let fake = FakeCri::start().await;
    let s = setup(&fake).await;
    let p = pod("gone", "Always", "sleep");
    let uid = p.metadata.uid.clone().expect("uid");
    s.workers.update(&desired(&[&p]));
    eventually("phase Running", || phase(&s.statuses, &uid) == "Running").await;
    s.workers.update(&BTreeMap::new());
    eventually("everything removed", || {
        let st = fake.state();
        st.sandboxes.is_empty() && st.containers.is_empty()
    })
    .await;
    eventually("its status forgotten", || s.statuses.get(&uid).is_none()).await;
    let calls = fake.state().calls.clone();
    let stop = calls.iter().position(|c| *c == "StopContainer");
    let remove = calls.iter().position(|c| *c == "RemovePodSandbox");
    assert!(stop < remove && stop.is_some(), "{calls:?}");
}

#[tokio::test]
async fn pleg_reports_the_pod_of_a_container_that_exited() {
    let fake = FakeCri::start().await;
    let s = setup(&fake).await;
    let p = pod("watched", "Never", "sleep");
    let uid = p.metadata.uid.clone().expect("uid");
    s.workers.update(&desired(&[&p]));
    eventually("phase Running", || phase(&s.statuses, &uid) == "Running").await;

    let (changed, mut rx) = tokio::sync::mpsc::channel(16);
    let health = agent::health::Health::default();
    let (running, mut running_rx) = tokio::sync::watch::channel(Arc::default());
    tokio::spawn(pleg::run(pleg::Pleg {
        cri: cri(&fake).await,
        metrics: Arc::new(metrics::AgentMetrics::default()),
        health: health.clone(),
        changed,
        running,
    }));
    // The first relist sees everything as new.
    let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("first relist");
    assert_eq!(first.as_deref(), Some(uid.as_str()));
    let id = fake.containers_named("main")[0].id.clone();
    // It says which containers run (the log rotation's list), and no more
    // once one has exited.
    assert!(running_rx.borrow_and_update().contains(&id));
    fake.exit(&id, 3);
    let next = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a relist after the exit");
    assert_eq!(next.as_deref(), Some(uid.as_str()));
    // The exit's event came first; the next relist (10 s while the event
    // stream is up) drops it from the running ones.
    tokio::time::timeout(
        Duration::from_secs(15),
        running_rx.wait_for(|r| !r.contains(&id)),
    )
    .await
    .expect("a relist without it")
    .expect("PLEG runs");
    assert!(health.check().is_ok());
    // The setup's PLEG woke the worker for the same change: the pod failed
    // (restartPolicy Never).
    eventually("phase Failed", || phase(&s.statuses, &uid) == "Failed").await;
}

/// The API server's objects, in memory.
use agent::volumes::objects::FetchError;

#[derive(Debug, Default)]
struct FakeObjects {
    config_maps: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

impl agent::volumes::objects::ApiObjects for FakeObjects {
    fn config_map<'a>(
        &'a self,
        _ns: &'a str,
        name: &'a str,
    ) -> agent::volumes::objects::BoxFut<'a, Result<agent::volumes::objects::Data, FetchError>>
    {
        Box::pin(async move { Ok(self.config_maps.get(name).cloned()) })
    }
    fn secret<'a>(
        &'a self,
        _ns: &'a str,
        name: &'a str,
    ) -> agent::volumes::objects::BoxFut<'a, Result<agent::volumes::objects::Data, FetchError>>
    {
        Box::pin(async move { Ok(self.secrets.get(name).cloned()) })
    }
    fn token<'a>(
        &'a self,
        r: agent::volumes::objects::TokenRequest<'a>,
    ) -> agent::volumes::objects::BoxFut<'a, Result<String, FetchError>> {
        Box::pin(async move { Ok(format!("token-for-{}", r.pod_name)) })
    }
}

/// An API server's pod (as the source decodes it).
fn api_pod(name: &str, spec: serde_json::Value) -> Pod {
    agent::config::manifest::api_pod(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "labels": {"app": "web"}},
        "spec": spec,
    }))
    .expect("valid API pod")
}

#[tokio::test]
async fn config_maps_and_secrets_reach_the_volumes_and_env_of_an_api_pod() {
    let fake = FakeCri::start().await;
    let bytes = |s: &str| s.as_bytes().to_vec();
    let objects = FakeObjects {
        config_maps: BTreeMap::from([(
            "app".to_string(),
            BTreeMap::from([
                ("greeting".to_string(), bytes("hello")),
                ("app.conf".to_string(), bytes("port=8080")),
            ]),
        )]),
        secrets: BTreeMap::from([(
            "db".to_string(),
            BTreeMap::from([("password".to_string(), bytes("s3cr3t"))]),
        )]),
    };
    let s = setup_with(&fake, Some(Arc::new(objects))).await;
    let p = api_pod(
        "web",
        serde_json::json!({
            "volumes": [
                {"name": "conf", "configMap": {"name": "app", "items": [{"key": "app.conf", "path": "etc/app.conf", "mode": 0o600}]}},
                {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            ],
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep"],
                "envFrom": [{"configMapRef": {"name": "app"}, "prefix": "CM_"}],
                "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
                "volumeMounts": [{"name": "conf", "mountPath": "/conf"}, {"name": "info", "mountPath": "/info"}],
            }],
        }),
    );
    let broken = api_pod(
        "broken",
        serde_json::json!({
            "volumes": [{"name": "conf", "configMap": {"name": "missing"}}],
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep"],
                "volumeMounts": [{"name": "conf", "mountPath": "/conf"}]}],
        }),
    );
    s.workers.update(&desired(&[&p, &broken]));
    eventually("phase Running", || {
        phase(&s.statuses, "uid-web") == "Running"
    })
    .await;
    {
        let st = fake.state();
        let c = st
            .containers
            .values()
            .find(|c| c.config.labels["io.kubernetes.pod.name"] == "web")
            .expect("web's container");
        let env: BTreeMap<&str, &str> = c
            .config
            .envs
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(env.get("PASSWORD"), Some(&"s3cr3t"));
        assert_eq!(env.get("CM_greeting"), Some(&"hello"));
        let mount = |path: &str| {
            c.config
                .mounts
                .iter()
                .find(|m| m.container_path == path)
                .map(|m| std::path::PathBuf::from(&m.host_path))
                .expect("mounted")
        };
        let conf = mount("/conf");
        assert!(
            conf.ends_with("volumes/kubernetes.io~configmap/conf"),
            "{conf:?}"
        );
        assert_eq!(
            std::fs::read_to_string(conf.join("etc/app.conf")).expect("projected"),
            "port=8080"
        );
        assert!(!conf.join("greeting").exists(), "only the items");
        assert_eq!(
            std::fs::read_to_string(mount("/info").join("labels")).expect("downward"),
            "app=\"web\"\n"
        );
        assert!(conf.starts_with(s.dir.path()));
    }
    // The pod whose configMap does not exist waits, with kubelet's reason.
    eventually("broken waits", || {
        s.statuses
            .get("uid-broken")
            .and_then(|p| p.status?.container_statuses)
            .and_then(|cs| cs.first()?.state.clone()?.waiting)
            .is_some_and(|w| {
                w.reason.as_deref() == Some("ContainerCreating")
                    && w.message
                        .as_deref()
                        .is_some_and(|m| m.contains("configmap \"missing\" not found"))
            })
    })
    .await;
    assert!(
        !fake
            .state()
            .containers
            .values()
            .any(|c| c.config.labels["io.kubernetes.pod.name"] == "broken")
    );
}

/// Three pods whose images are pulled (`Always`) at once: how many pulls
/// the fake runtime saw at the same time.
async fn most_pulls_at_once(adjust: impl FnOnce(&mut edge_config::Config)) -> usize {
    let fake = FakeCri::start().await;
    fake.state().pull_delay = Duration::from_millis(300);
    let s = setup_config(&fake, None, None, adjust).await;
    let pods: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            api_pod(
                n,
                serde_json::json!({"containers": [{"name": "main", "image": format!("quay.io/team/{n}:v1"),
                                   "imagePullPolicy": "Always", "command": ["sleep"]}]}),
            )
        })
        .collect();
    s.workers.update(&desired(&pods.iter().collect::<Vec<_>>()));
    eventually("three pods Running", || {
        ["a", "b", "c"]
            .iter()
            .all(|n| phase(&s.statuses, &format!("uid-{n}")) == "Running")
    })
    .await;
    let most = fake.state().pulls_most;
    let pulled = s
        .recorder
        .list()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Pulled"))
        .filter_map(|e| e.message)
        .collect::<Vec<_>>();
    assert_eq!(pulled.len(), 3, "{pulled:?}");
    assert!(
        pulled.iter().all(|m| m.contains("including waiting")),
        "{pulled:?}"
    );
    most
}

#[tokio::test]
async fn image_pulls_are_serialized_unless_told_otherwise() {
    assert_eq!(most_pulls_at_once(|_| {}).await, 1);
    let parallel = most_pulls_at_once(|c| {
        c.serialize_image_pulls = false;
        c.max_parallel_image_pulls = Some(2);
    })
    .await;
    assert_eq!(parallel, 2);
}

#[tokio::test]
async fn image_pull_secrets_are_tried_in_kubelets_order() {
    let fake = FakeCri::start().await;
    let secret =
        |json: &str| BTreeMap::from([(".dockerconfigjson".to_string(), json.as_bytes().to_vec())]);
    let objects = FakeObjects {
        config_maps: BTreeMap::new(),
        secrets: BTreeMap::from([
            (
                "team".to_string(),
                secret(r#"{"auths": {"quay.io/team": {"username": "wrong", "password": "x"}}}"#),
            ),
            (
                "org".to_string(),
                // base64("right:pw")
                secret(r#"{"auths": {"https://quay.io": {"auth": "cmlnaHQ6cHc="}}}"#),
            ),
        ]),
    };
    let s = setup_with(&fake, Some(Arc::new(objects))).await;
    let p = api_pod(
        "pulled",
        serde_json::json!({
            "imagePullSecrets": [{"name": "org"}, {"name": "gone"}, {"name": "team"}],
            "containers": [{"name": "main", "image": "quay.io/team/app:v1",
                            "imagePullPolicy": "Always", "command": ["sleep"]}],
        }),
    );
    s.workers.update(&desired(&[&p]));
    eventually("phase Running", || {
        phase(&s.statuses, "uid-pulled") == "Running"
    })
    .await;
    // The most specific key first; the refused credential, then the next.
    let pulls = fake.state().pulls.clone();
    assert_eq!(
        pulls,
        [
            ("quay.io/team/app:v1".to_string(), "wrong".to_string()),
            ("quay.io/team/app:v1".to_string(), "right".to_string()),
        ]
    );
    let warned = s.recorder.list().into_iter().any(|e| {
        e.reason.as_deref() == Some("FailedToRetrieveImagePullSecret")
            && e.message.as_deref().is_some_and(|m| m.contains("(gone)"))
    });
    assert!(warned, "no FailedToRetrieveImagePullSecret event");
}

#[path = "pod_workers/devices.rs"]
mod devices;
mod fake_plugin;
#[path = "pod_workers/resize.rs"]
mod resize;
#[path = "pod_workers/userns.rs"]
mod userns;
