//! In-place pod resize against the fake CRI: an API pod whose resources
//! change (the `resize` subresource) gets them through
//! UpdateContainerResources in kubelet's order, without a restart unless
//! its resize policy asks for one; a resize that does not fit waits
//! (Deferred), one that would put a memory limit under what is in use is
//! refused (Error); and containers an older agent made are adopted, not
//! restarted for the new hash.

use k8s_openapi::api::core::v1::{Pod, PodCondition};

use super::fake_cri::FakeCri;
use super::{Setup, api_pod, desired, eventually, phase, setup};

fn web(generation: i64, cpu: &str, memory: &str, policy: serde_json::Value) -> Pod {
    let mut p = api_pod(
        "web",
        serde_json::json!({
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep"],
                "resources": {
                    "limits": {"cpu": cpu, "memory": memory},
                    "requests": {"cpu": cpu, "memory": memory},
                },
                "resizePolicy": policy,
            }],
        }),
    );
    p.metadata.generation = Some(generation);
    p
}

fn no_policy() -> serde_json::Value {
    serde_json::json!([])
}

fn condition(s: &Setup, uid: &str, kind: &str) -> Option<PodCondition> {
    s.statuses
        .get(uid)
        .and_then(|p| p.status?.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == kind))
}

fn events(s: &Setup) -> Vec<String> {
    s.recorder
        .list()
        .into_iter()
        .filter_map(|e| e.reason)
        .filter(|r| r.starts_with("Resize"))
        .collect()
}

/// `main`'s status resources: (limits cpu, limits memory, allocated cpu).
fn reported(s: &Setup, uid: &str) -> (String, String, String) {
    let st = s
        .statuses
        .get(uid)
        .and_then(|p| p.status?.container_statuses)
        .expect("statuses")
        .remove(0);
    let r = st.resources.expect("resources");
    let lim = r.limits.expect("limits");
    let alloc = st.allocated_resources.expect("allocatedResources");
    (
        lim["cpu"].0.clone(),
        lim["memory"].0.clone(),
        alloc["cpu"].0.clone(),
    )
}

async fn running(fake: &FakeCri, p: &Pod) -> (Setup, String) {
    let s = setup(fake).await;
    let uid = p.metadata.uid.clone().expect("uid");
    s.workers.update(&desired(&[p]));
    eventually("Running", || phase(&s.statuses, &uid) == "Running").await;
    (s, uid)
}

#[tokio::test]
async fn a_resized_pod_gets_its_new_cpu_and_memory_in_place_memory_first() {
    let fake = FakeCri::start().await;
    let p = web(1, "500m", "64Mi", no_policy());
    let (s, uid) = running(&fake, &p).await;
    assert_eq!(
        reported(&s, &uid),
        ("500m".into(), "64Mi".into(), "500m".into())
    );
    let id = fake.containers_named("main")[0].id.clone();
    let state = s.dir.path().join("data/allocation").join(&uid);
    assert!(!state.exists(), "nothing written for a pod never resized");

    s.workers
        .update(&desired(&[&web(2, "800m", "128Mi", no_policy())]));
    eventually("both updates", || fake.state().updates.len() == 2).await;
    let updates = fake.state().updates.clone();
    // Memory first (CPU as it was), then CPU.
    assert_eq!(
        (updates[0].1.memory_limit_in_bytes, updates[0].1.cpu_quota),
        (128 << 20, 50_000)
    );
    assert_eq!(
        (
            updates[1].1.memory_limit_in_bytes,
            updates[1].1.cpu_quota,
            updates[1].1.cpu_shares
        ),
        (128 << 20, 80_000, 819)
    );
    // The sync that resized publishes the new allocation and what the
    // runtime reports after the update together (it observes again).
    eventually("the new allocation published", || {
        reported(&s, &uid).2 == "800m"
    })
    .await;
    assert_eq!(
        reported(&s, &uid),
        ("800m".into(), "128Mi".into(), "800m".into())
    );
    eventually("the resize done", || {
        condition(&s, &uid, "PodResizeInProgress").is_none()
    })
    .await;
    assert_eq!(events(&s), ["ResizeStarted", "ResizeCompleted"]);
    let now: Vec<String> = fake
        .containers_named("main")
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(now, [id], "resized in place, not restarted");
    // The generation observed is the resized spec's.
    let st = s.statuses.get(&uid).and_then(|p| p.status).expect("status");
    assert_eq!(st.observed_generation, Some(2));
    assert!(state.exists(), "the resize is kept");
    // An agent that lost that state (its own data dir) finds the runtime
    // in step with the spec: nothing to update, nothing restarted.
    drop(s);
    let (_s, _) = running(&fake, &web(2, "800m", "128Mi", no_policy())).await;
    assert_eq!(fake.state().updates.len(), 2);
    assert_eq!(fake.containers_named("main").len(), 1);
}

#[tokio::test]
async fn a_resize_that_does_not_fit_waits_deferred_until_it_is_taken_back() {
    let fake = FakeCri::start().await;
    let p = web(1, "500m", "64Mi", no_policy());
    let (s, uid) = running(&fake, &p).await;
    // Allocatable is 2000m.
    s.workers
        .update(&desired(&[&web(2, "3", "64Mi", no_policy())]));
    eventually("pending", || {
        condition(&s, &uid, "PodResizePending").is_some()
    })
    .await;
    let c = condition(&s, &uid, "PodResizePending").expect("pending");
    assert_eq!(c.reason.as_deref(), Some("Deferred"));
    assert_eq!(
        c.message.as_deref(),
        Some("Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000")
    );
    assert_eq!(c.observed_generation, Some(2));
    assert!(fake.state().updates.is_empty(), "nothing was changed");
    assert_eq!(reported(&s, &uid).2, "500m", "still the admitted value");
    assert_eq!(events(&s), ["ResizeDeferred"]);
    // Taken back: nothing pending.
    s.workers
        .update(&desired(&[&web(3, "500m", "64Mi", no_policy())]));
    eventually("not pending", || {
        condition(&s, &uid, "PodResizePending").is_none()
    })
    .await;
    assert_eq!(fake.containers_named("main").len(), 1);
}

#[tokio::test]
async fn a_resource_whose_policy_says_restart_restarts_the_container() {
    let fake = FakeCri::start().await;
    let policy =
        serde_json::json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
    let p = web(1, "500m", "64Mi", policy.clone());
    let (s, uid) = running(&fake, &p).await;
    // CPU: in place.
    s.workers
        .update(&desired(&[&web(2, "600m", "64Mi", policy.clone())]));
    eventually("cpu updated", || fake.state().updates.len() == 1).await;
    assert_eq!(fake.containers_named("main").len(), 1);
    // Memory: a new container with the new limit, restart count 1.
    s.workers
        .update(&desired(&[&web(3, "600m", "128Mi", policy)]));
    eventually("restarted", || fake.containers_named("main").len() == 2).await;
    let new = fake.containers_named("main").remove(1);
    let r = new
        .config
        .linux
        .and_then(|l| l.resources)
        .expect("resources");
    assert_eq!(r.memory_limit_in_bytes, 128 << 20);
    assert_eq!(new.config.metadata.map(|m| m.attempt), Some(1));
    assert_eq!(fake.state().updates.len(), 1, "no in-place memory update");
    eventually("Running, resize done", || {
        phase(&s.statuses, &uid) == "Running"
            && condition(&s, &uid, "PodResizeInProgress").is_none()
            && reported(&s, &uid).1 == "128Mi"
    })
    .await;
}

#[tokio::test]
async fn a_memory_limit_below_what_is_in_use_is_refused_with_the_reason() {
    let fake = FakeCri::start().await;
    let p = web(1, "500m", "128Mi", no_policy());
    let (s, uid) = running(&fake, &p).await;
    fake.state().memory_usage.insert("main".into(), 100 << 20);
    s.workers
        .update(&desired(&[&web(2, "500m", "64Mi", no_policy())]));
    eventually("an error", || {
        condition(&s, &uid, "PodResizeInProgress")
            .is_some_and(|c| c.reason.as_deref() == Some("Error"))
    })
    .await;
    let c = condition(&s, &uid, "PodResizeInProgress").expect("in progress");
    assert_eq!(
        c.message.as_deref(),
        Some(
            "cannot decrease memory limits: attempting to set container \"main\" memory limit (67108864) below current usage (104857600)"
        )
    );
    assert!(fake.state().updates.is_empty());
    assert_eq!(events(&s), ["ResizeStarted", "ResizeError"]);
    // Once the usage drops, the next sync applies it.
    fake.state().memory_usage.insert("main".into(), 10 << 20);
    s.workers
        .update(&desired(&[&web(3, "500m", "64Mi", no_policy())]));
    eventually("applied", || {
        condition(&s, &uid, "PodResizeInProgress").is_none()
    })
    .await;
    assert_eq!(fake.state().updates[0].1.memory_limit_in_bytes, 64 << 20);
}

/// A container an agent before in-place resize made carries the hash of
/// its whole spec: adopted (same spec), not restarted; one whose hash
/// matches neither scheme is.
#[tokio::test]
async fn containers_an_older_agent_made_are_adopted_not_restarted() {
    let fake = FakeCri::start().await;
    let p = web(1, "500m", "64Mi", no_policy());
    let (s, _) = running(&fake, &p).await;
    drop(s);
    let spec = p.spec.as_ref().expect("spec");
    let legacy = agent::cri_config::legacy_container_hash(&spec.containers[0]);
    let set_hash = |h: &str| {
        for c in fake.state().containers.values_mut() {
            c.config
                .annotations
                .insert("io.kubernetes.container.hash".into(), h.into());
        }
    };
    set_hash(&legacy);
    // A new agent (its own data dir: no allocation state). Its first
    // sync, before the pod is reported Running, would have replaced it.
    let (s, _) = running(&fake, &p).await;
    assert_eq!(fake.containers_named("main").len(), 1, "adopted");
    // And resizable afterwards, in place.
    s.workers
        .update(&desired(&[&web(2, "700m", "64Mi", no_policy())]));
    eventually("updated", || fake.state().updates.len() == 1).await;
    assert_eq!(fake.containers_named("main").len(), 1);
    drop(s);
    // A hash of neither scheme: a changed definition, restarted.
    set_hash("0000000000000000");
    let (_s, _) = running(&fake, &p).await;
    eventually("restarted", || fake.containers_named("main").len() == 2).await;
}
