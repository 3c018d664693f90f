//! In-place pod resize (kubelet's allocation manager and the actuated
//! state of kuberuntime). A pod's container resources exist three times:
//! as its source wants them (the spec, changed through the API server's
//! `resize` subresource), as admitted on this node (**allocated**: the
//! pod the worker runs), and as last given to the runtime and the pod
//! cgroup (**actuated**). Spec ≠ allocated is a pending resize (the
//! `PodResizePending` condition, Deferred while it does not fit);
//! allocated ≠ actuated is one in progress (`PodResizeInProgress`).
//! Both survive an agent restart in `<dataDir>/allocation/<pod uid>`,
//! written before the runtime is told, given back when the pod is gone.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use serde::{Deserialize, Serialize};

use crate::mutex::lock;
use crate::qos::quantity;

/// kubelet's condition types and reasons.
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";
pub const REASON_DEFERRED: &str = "Deferred";
pub const REASON_ERROR: &str = "Error";

/// A resize policy's values (`resizePolicy[].restartPolicy`).
pub const NOT_REQUIRED: &str = "NotRequired";
pub const RESTART_CONTAINER: &str = "RestartContainer";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pod resources {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pod resources {}: {source}", path.display())]
    Decode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// One container's resources reduced as kubelet compares them: millicores
/// and bytes, 0 where none is set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Values {
    pub cpu_request: u64,
    pub cpu_limit: u64,
    pub memory_request: u64,
    pub memory_limit: u64,
}

impl Values {
    pub fn of(c: &Container) -> Self {
        let q = |kind, res| u64::try_from(quantity(c, kind, res).unwrap_or(0)).unwrap_or(u64::MAX);
        Values {
            cpu_request: q("requests", "cpu"),
            cpu_limit: q("limits", "cpu"),
            memory_request: q("requests", "memory"),
            memory_limit: q("limits", "memory"),
        }
    }

    /// Which resources differ from `other`: (cpu, memory).
    pub fn differs(&self, other: &Values) -> (bool, bool) {
        (
            self.cpu_request != other.cpu_request || self.cpu_limit != other.cpu_limit,
            self.memory_request != other.memory_request || self.memory_limit != other.memory_limit,
        )
    }
}

/// What the runtime was last given for a container of the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Actuated {
    pub container_id: String,
    /// The container's definition hash as the planner is to see it: its
    /// own annotation, or for a container an older agent made (whose hash
    /// covered the resources) the hash it was adopted under.
    pub hash: String,
    pub values: Values,
}

/// A pod's allocation and actuated state, as written to disk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodState {
    /// Admitted resources, by container name.
    pub allocated: BTreeMap<String, ResourceRequirements>,
    /// Last given to the runtime, by container name.
    #[serde(default)]
    pub actuated: BTreeMap<String, Actuated>,
    /// The pod cgroup's values as last written.
    #[serde(default)]
    pub pod_cgroup: Option<PodCgroup>,
}

/// The pod cgroup's limits as written ([`crate::qos::PodResources`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCgroup {
    pub cpu_shares: u64,
    pub cpu_quota: Option<i64>,
    pub memory_limit: Option<u64>,
}

impl From<crate::qos::PodResources> for PodCgroup {
    fn from(r: crate::qos::PodResources) -> Self {
        PodCgroup {
            cpu_shares: r.cpu_shares,
            cpu_quota: r.cpu_quota,
            memory_limit: r.memory_limit,
        }
    }
}

/// The containers whose resources can change in place: app containers
/// and sidecars (kubelet 1.36 also resizes running init containers behind
/// a beta gate and the node's declared features; picolet does not declare
/// it, so the API server refuses such a resize).
pub fn resizable(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.containers.iter().chain(crate::plan::sidecars(spec))
}

/// The allocation of a pod as its spec has it now.
pub fn allocation_of(spec: &PodSpec) -> BTreeMap<String, ResourceRequirements> {
    resizable(spec)
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// Whether the spec asks for other resources than `allocated`.
pub fn wants_resize(spec: &PodSpec, allocated: &BTreeMap<String, ResourceRequirements>) -> bool {
    resizable(spec).any(|c| {
        let have = allocated.get(&c.name).map(Values::of_requirements);
        have.is_some_and(|h| h != Values::of(c))
    })
}

impl Values {
    fn of_requirements(r: &ResourceRequirements) -> Self {
        Values::of(&Container {
            resources: Some(r.clone()),
            ..Default::default()
        })
    }
}

/// `pod` with the allocated resources in place of the spec's: the pod the
/// worker runs and reports.
pub fn allocated_pod(pod: &Pod, allocated: &BTreeMap<String, ResourceRequirements>) -> Pod {
    let mut p = pod.clone();
    if let Some(spec) = p.spec.as_mut() {
        let sidecar = crate::plan::is_sidecar;
        for c in spec.containers.iter_mut().chain(
            spec.init_containers
                .iter_mut()
                .flatten()
                .filter(|c| sidecar(c)),
        ) {
            if let Some(r) = allocated.get(&c.name) {
                c.resources = Some(r.clone());
            }
        }
    }
    p
}

/// The restart policy of `resource` ("cpu", "memory") for `c`.
pub fn policy<'a>(c: &'a Container, resource: &str) -> &'a str {
    c.resize_policy
        .iter()
        .flatten()
        .find(|p| p.resource_name == resource)
        .map(|p| p.restart_policy.as_str())
        .unwrap_or(NOT_REQUIRED)
}

/// Whether going from `have` to `want` needs `c` restarted (a changed
/// resource whose policy is RestartContainer).
pub fn needs_restart(c: &Container, have: &Values, want: &Values) -> bool {
    let (cpu, memory) = have.differs(want);
    (cpu && policy(c, "cpu") == RESTART_CONTAINER)
        || (memory && policy(c, "memory") == RESTART_CONTAINER)
}

/// The allocation store: one file per pod, and every pod's allocated
/// requests for admitting a resize beside the others.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    /// The pods the workers run, with their allocated resources, by UID.
    running: Mutex<HashMap<String, Arc<Pod>>>,
}

impl Store {
    pub fn new(dir: PathBuf) -> Self {
        Store {
            dir,
            running: Mutex::new(HashMap::new()),
        }
    }

    fn path(&self, uid: &str) -> PathBuf {
        self.dir.join(uid)
    }

    /// The pod's state; None when it has none yet.
    pub fn load(&self, uid: &str) -> Result<Option<PodState>, Error> {
        let path = self.path(uid);
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|source| Error::Decode { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io {
                op: "read",
                path,
                source,
            }),
        }
    }

    /// Writes the pod's state: temp, fsync, rename.
    pub fn save(&self, uid: &str, st: &PodState) -> Result<(), Error> {
        let path = self.path(uid);
        let io = |op| {
            let path = path.clone();
            move |source| Error::Io { op, path, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(io("create the directory of"))?;
        let data = serde_json::to_vec(st).map_err(|source| Error::Decode {
            path: path.clone(),
            source,
        })?;
        edge_config::write_atomic(&path, &data).map_err(io("write"))
    }

    /// The pod is gone: its state goes.
    pub fn remove(&self, uid: &str) -> Result<(), Error> {
        lock(&self.running).remove(uid);
        let path = self.path(uid);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
                op: "remove",
                path,
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// Records the pod a worker runs (its allocated resources).
    pub fn set_running(&self, uid: &str, pod: Arc<Pod>) {
        lock(&self.running).insert(uid.to_string(), pod);
    }

    /// The pod no longer holds resources (finished).
    pub fn forget_running(&self, uid: &str) {
        lock(&self.running).remove(uid);
    }

    /// Every other running pod, as allocated.
    pub fn others(&self, uid: &str) -> Vec<Arc<Pod>> {
        lock(&self.running)
            .iter()
            .filter(|(u, _)| u.as_str() != uid)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Removes the state of pods not in `keep` (left by a pod that ended
    /// while the agent was down).
    pub fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(uid) = name.to_str() else { continue };
            if !uid.starts_with('.') && !keep(uid) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(yaml: &str) -> Container {
        serde_yaml::from_str(yaml).expect("container")
    }

    #[test]
    fn a_resource_restarts_the_container_only_when_its_policy_says_so() {
        let c = container(
            "name: app\nresizePolicy:\n- {resourceName: memory, restartPolicy: RestartContainer}\n",
        );
        let have = Values {
            cpu_limit: 500,
            memory_limit: 64 << 20,
            ..Default::default()
        };
        let more_cpu = Values {
            cpu_limit: 800,
            ..have
        };
        let more_memory = Values {
            memory_limit: 128 << 20,
            ..have
        };
        assert!(!needs_restart(&c, &have, &more_cpu));
        assert!(needs_restart(&c, &have, &more_memory));
        assert_eq!(policy(&c, "cpu"), NOT_REQUIRED);
    }

    #[test]
    fn the_allocated_pod_has_the_admitted_resources_and_only_those() {
        let pod: Pod = serde_yaml::from_str(
            "metadata: {name: p}\nspec:\n  initContainers:\n  - {name: init, image: i, resources: {limits: {cpu: 100m}}}\n  - {name: side, image: s, restartPolicy: Always, resources: {limits: {cpu: 200m}}}\n  containers:\n  - {name: app, image: a, resources: {limits: {cpu: 300m, memory: 64Mi}}}\n",
        )
        .expect("pod");
        let spec = pod.spec.as_ref().expect("spec");
        let before = allocation_of(spec);
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            ["app", "side"],
            "init containers are not resizable"
        );
        assert!(!wants_resize(spec, &before));
        let mut resized = pod.clone();
        resized.spec.as_mut().expect("spec").containers[0].resources =
            Some(serde_yaml::from_str("limits: {cpu: 600m, memory: 64Mi}").expect("r"));
        assert!(wants_resize(resized.spec.as_ref().expect("spec"), &before));
        let run = allocated_pod(&resized, &before);
        assert_eq!(
            Values::of(&run.spec.as_ref().expect("spec").containers[0]).cpu_limit,
            300,
            "the admitted value, until the resize is admitted"
        );
    }

    #[test]
    fn the_state_survives_a_restart_and_goes_with_the_pod() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::new(dir.path().join("allocation"));
        assert!(store.load("u1").expect("load").is_none());
        let mut st = PodState {
            ..Default::default()
        };
        st.actuated.insert(
            "app".into(),
            Actuated {
                container_id: "c1".into(),
                hash: "h".into(),
                values: Values {
                    cpu_limit: 300,
                    ..Default::default()
                },
            },
        );
        store.save("u1", &st).expect("save");
        assert_eq!(
            Store::new(dir.path().join("allocation"))
                .load("u1")
                .expect("load"),
            Some(st)
        );
        std::fs::write(dir.path().join("allocation/u2"), b"{").expect("write");
        let bad = store.load("u2").expect_err("a bad file");
        assert!(bad.to_string().contains("allocation/u2"), "named: {bad}");
        store.retain(&|uid| uid == "u1");
        assert!(!dir.path().join("allocation/u2").exists());
        store.remove("u1").expect("remove");
        assert!(store.load("u1").expect("load").is_none());
    }
}
