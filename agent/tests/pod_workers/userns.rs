//! `hostUsers: false` pods against the fake CRI: refused with kubelet's
//! words while the runtime cannot make user namespaces; else each pod's
//! sandbox and containers get the pod's own range, kept while it lives
//! and given back when it is gone.

use std::collections::BTreeMap;

use cri_proto::v1::NamespaceMode;
use k8s_openapi::api::core::v1::Pod;

use super::fake_cri::FakeCri;
use super::{desired, eventually, phase, setup};

/// A static pod of its own user namespace.
fn own_users(name: &str) -> Pod {
    super::static_pod(
        name,
        "  hostUsers: false\n  containers:\n  - {name: main, image: busybox, command: [sleep]}\n",
    )
}

/// The host ID the static pod's sandbox and its container were given
/// (inner None: the node's user namespace), and that both agree; None
/// only while the pod has no sandbox with a container. What the agent
/// sent must be there: a missing field fails the test, not "no pod".
fn host_id(fake: &FakeCri, pod: &str) -> Option<Option<u32>> {
    let st = fake.state();
    let sb = st.sandboxes.values().find(|s| {
        s.config
            .metadata
            .as_ref()
            .is_some_and(|m| m.name == format!("{pod}-node"))
    })?;
    let ctr = st.containers.values().find(|c| c.sandbox_id == sb.id)?;
    let of = |ns: Option<&cri_proto::v1::NamespaceOption>| {
        let u = ns
            .and_then(|n| n.userns_options.clone())
            .unwrap_or_else(|| panic!("{pod}: no userns_options"));
        if u.mode == NamespaceMode::Node as i32 {
            return None;
        }
        assert_eq!(u.uids, u.gids);
        assert_eq!((u.uids[0].container_id, u.uids[0].length), (0, 65536));
        Some(u.uids[0].host_id)
    };
    let sandbox = of(sb
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref()));
    let container = of(ctr
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref()));
    assert_eq!(sandbox, container, "{pod}: sandbox and container differ");
    Some(sandbox)
}

/// Whether the static pod has a sandbox at all.
fn has_sandbox(fake: &FakeCri, pod: &str) -> bool {
    fake.state().sandboxes.values().any(|s| {
        s.config
            .metadata
            .as_ref()
            .is_some_and(|m| m.name == format!("{pod}-node"))
    })
}

#[tokio::test]
async fn host_users_false_pods_get_ranges_of_their_own() {
    let fake = FakeCri::start().await;
    let s = setup(&fake).await;
    let a = own_users("a");
    let a_uid = a.metadata.uid.clone().expect("uid");
    s.workers.update(&desired(&[&a]));
    eventually("kubelet's refusal", || {
        s.recorder.list().iter().any(|e| {
            e.reason.as_deref() == Some("FailedCreatePodSandBox")
                && e.message.as_deref().is_some_and(|m| {
                    m.contains("can't set `spec.hostUsers: false`, runtime does not support user namespaces")
                })
        })
    })
    .await;
    assert!(fake.state().sandboxes.is_empty());

    fake.state().user_namespaces = true;
    eventually("a Running", || phase(&s.statuses, &a_uid) == "Running").await;
    let a_id = host_id(&fake, "a").flatten().expect("a's own range");
    let b = own_users("b");
    let shared = super::pod("node-users", "Always", "sleep");
    s.workers.update(&desired(&[&a, &b, &shared]));
    eventually("b and the node's pod made", || {
        host_id(&fake, "b").is_some() && host_id(&fake, "node-users").is_some()
    })
    .await;
    let b_id = host_id(&fake, "b").flatten().expect("b's own range");
    assert!(a_id >= 65536 && b_id >= 65536 && a_id != b_id && a_id.is_multiple_of(65536));
    // kubelet 1.36 says NODE for a pod without hostUsers: false.
    assert_eq!(host_id(&fake, "node-users"), Some(None));

    // a goes: its range is given back.
    s.workers.update(&desired(&[&b, &shared]));
    eventually("a removed", || !has_sandbox(&fake, "a")).await;
    eventually("a's range given back", || {
        !s.dir.path().join("data/userns").join(&a_uid).exists()
    })
    .await;
    s.workers.update(&BTreeMap::new());
}

/// kubelet's admission: `supplementalGroupsPolicy: Strict` on a runtime
/// that does not say it has it is refused (Failed, kubelet's reason), not
/// run with the image's groups; where it has it, the pod runs.
#[tokio::test]
async fn a_strict_groups_pod_is_refused_where_the_runtime_lacks_it() {
    let fake = FakeCri::start().await;
    let s = setup(&fake).await;
    let strict = |name: &str| {
        super::static_pod(
            name,
            "  securityContext: {supplementalGroupsPolicy: Strict}\n  \
             containers:\n  - {name: main, image: busybox, command: [sleep]}\n",
        )
    };
    let refused = strict("refused");
    let uid = refused.metadata.uid.clone().expect("uid");
    s.workers.update(&desired(&[&refused]));
    eventually("Failed", || phase(&s.statuses, &uid) == "Failed").await;
    let st = s.statuses.get(&uid).and_then(|p| p.status).expect("status");
    assert_eq!(
        st.reason.as_deref(),
        Some("SupplementalGroupsPolicyNotSupported")
    );
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node")
    );
    assert!(fake.state().sandboxes.is_empty());

    fake.state().supplemental_groups_policy = true;
    let runs = strict("runs");
    let uid = runs.metadata.uid.clone().expect("uid");
    s.workers.update(&desired(&[&refused, &runs]));
    eventually("Running", || phase(&s.statuses, &uid) == "Running").await;
    s.workers.update(&BTreeMap::new());
}
