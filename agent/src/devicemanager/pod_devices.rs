//! The device manager's bookkeeping, kubelet's `pod_devices.go` and the
//! parts of `manager.go` that decide: which devices each resource has and
//! which are healthy, which a container holds, what a pod asks for, and
//! what the node reports. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};
use serde::{Deserialize, Serialize};

/// The health strings of the device plugin API.
pub const HEALTHY: &str = "Healthy";
pub const UNHEALTHY: &str = "Unhealthy";

/// What one container holds of one resource: the device IDs and what the
/// plugin's Allocate answered (protobuf bytes of `ContainerAllocateResponse`,
/// replayed into each create of the container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub ids: Vec<String>,
    pub response: Vec<u8>,
}

/// What a container's creation gets from its devices' plugins.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerDevices {
    pub devices: Vec<cri_proto::deviceplugin::DeviceSpec>,
    pub mounts: Vec<cri_proto::deviceplugin::Mount>,
    pub envs: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Fully qualified CDI device names.
    pub cdi_devices: Vec<String>,
}

/// The key of an allocation: pod UID, container name, resource name.
pub type Key = (String, String, String);

/// Every resource's devices and every container's allocations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDevices {
    /// resource → device ID → healthy.
    pub devices: BTreeMap<String, BTreeMap<String, bool>>,
    pub allocated: BTreeMap<Key, Allocation>,
}

/// A container's request of one device resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub container: String,
    /// An init container's (its devices serve the app containers after).
    pub init: bool,
    pub resource: String,
    pub count: usize,
}

/// Why a pod cannot have its devices, as kubelet says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Shortage {
    /// A resource no plugin serves (the scheduler's predicate: the node has
    /// none of it).
    #[error(
        "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
    )]
    OutOf {
        resource: String,
        requested: usize,
        used: usize,
        capacity: usize,
    },
    /// The plugin's resource has too few healthy free devices.
    #[error(
        "Allocate failed due to requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}, which is unexpected"
    )]
    Unavailable {
        resource: String,
        requested: usize,
        available: usize,
    },
}

impl Shortage {
    /// kubelet's reason for the pod's status and the event.
    pub fn reason(&self) -> String {
        match self {
            Shortage::OutOf { resource, .. } => format!("OutOf{resource}"),
            Shortage::Unavailable { .. } => "UnexpectedAdmissionError".into(),
        }
    }
}

/// Whether `name` is an extended resource (kubelet's
/// `IsExtendedResourceName`): a domain-prefixed name outside
/// `kubernetes.io`, not a quota name (`requests.*`).
pub fn is_extended(name: &str) -> bool {
    let Some((domain, rest)) = name.split_once('/') else {
        return false;
    };
    !rest.is_empty()
        && !domain.is_empty()
        && !domain.starts_with("requests.")
        && domain != "kubernetes.io"
        && !domain.ends_with(".kubernetes.io")
}

/// The extended resources each container asks for (its limits: for an
/// extended resource the request must equal the limit), init containers
/// first, in kubelet's order.
pub fn requests(pod: &Pod) -> Vec<Request> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let init = spec.init_containers.iter().flatten().map(|c| (c, true));
    let app = spec.containers.iter().map(|c| (c, false));
    init.chain(app)
        .flat_map(|(c, init)| container_requests(c, init))
        .collect()
}

fn container_requests(c: &Container, init: bool) -> Vec<Request> {
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    limits
        .into_iter()
        .flatten()
        .filter(|(name, _)| is_extended(name))
        .filter_map(|(name, q)| {
            let count = q.0.trim().parse::<usize>().ok().filter(|n| *n > 0)?;
            Some(Request {
                container: c.name.clone(),
                init,
                resource: name.clone(),
                count,
            })
        })
        .collect()
}

impl PodDevices {
    /// A resource the manager serves: a plugin registered it, or a
    /// checkpoint remembers its devices.
    pub fn knows(&self, resource: &str) -> bool {
        self.devices.contains_key(resource)
    }

    /// The devices some container holds.
    pub fn in_use(&self, resource: &str) -> BTreeSet<&str> {
        self.allocated
            .iter()
            .filter(|((_, _, r), _)| r == resource)
            .flat_map(|(_, a)| a.ids.iter().map(String::as_str))
            .collect()
    }

    /// Healthy devices no container holds, in ID order.
    pub fn free(&self, resource: &str) -> Vec<String> {
        let used = self.in_use(resource);
        self.devices
            .get(resource)
            .into_iter()
            .flatten()
            .filter(|(id, healthy)| **healthy && !used.contains(id.as_str()))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// What the node reports: resource → (capacity: every device,
    /// allocatable: the healthy ones).
    pub fn capacity(&self) -> BTreeMap<String, (usize, usize)> {
        self.devices
            .iter()
            .map(|(r, ds)| (r.clone(), (ds.len(), ds.values().filter(|h| **h).count())))
            .collect()
    }

    /// Replaces a resource's devices with a plugin's list (ID → health).
    pub fn set_devices(&mut self, resource: &str, devices: BTreeMap<String, bool>) {
        self.devices.insert(resource.to_string(), devices);
    }

    /// Every device of `resource` unhealthy (its plugin went away).
    pub fn mark_unhealthy(&mut self, resource: &str) {
        for healthy in self
            .devices
            .entry(resource.into())
            .or_default()
            .values_mut()
        {
            *healthy = false;
        }
    }

    /// Forgets a resource (its plugin stayed away past the grace).
    pub fn forget_resource(&mut self, resource: &str) {
        self.devices.remove(resource);
    }

    /// The container's allocation of `resource`.
    pub fn allocation(&self, uid: &str, container: &str, resource: &str) -> Option<&Allocation> {
        self.allocated
            .get(&(uid.to_string(), container.to_string(), resource.to_string()))
    }

    /// Every allocation of a container, by resource.
    pub fn of_container(&self, uid: &str, container: &str) -> Vec<(&str, &Allocation)> {
        self.allocated
            .iter()
            .filter(|((u, c, _), _)| u == uid && c == container)
            .map(|((_, _, r), a)| (r.as_str(), a))
            .collect()
    }

    /// Gives back every device of pods not in `active`; true if any went.
    pub fn retain_pods(&mut self, active: &dyn Fn(&str) -> bool) -> bool {
        let before = self.allocated.len();
        self.allocated.retain(|(uid, _, _), _| active(uid));
        self.allocated.len() != before
    }

    /// The devices for the requests that have none yet, or the first
    /// shortage. Devices an init container of the pod holds serve its app
    /// containers too (init containers have finished by then: kubelet's
    /// `devicesToReuse`), each to one app container.
    pub fn plan(&self, uid: &str, requests: &[Request]) -> Result<Vec<Planned>, Shortage> {
        let mut out = Vec::new();
        let mut free: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        // resource → the init containers' devices not yet reused.
        let mut reusable: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for r in requests {
            let pool = free
                .entry(&r.resource)
                .or_insert_with(|| self.free(&r.resource));
            let reuse = reusable.entry(&r.resource).or_default();
            if let Some(held) = self.allocation(uid, &r.container, &r.resource) {
                if r.init {
                    reuse.extend(held.ids.iter().cloned());
                } else {
                    reuse.retain(|id| !held.ids.contains(id));
                }
                continue;
            }
            if !self.knows(&r.resource) {
                return Err(Shortage::OutOf {
                    resource: r.resource.clone(),
                    requested: r.count,
                    used: 0,
                    capacity: 0,
                });
            }
            // Init containers run one at a time: each may take what an
            // earlier one had; an app container takes it for itself.
            let n = r.count.min(reuse.len());
            let mut ids: Vec<String> = if r.init {
                reuse[..n].to_vec()
            } else {
                reuse.drain(..n).collect()
            };
            let more = r.count - ids.len();
            if pool.len() < more {
                return Err(Shortage::Unavailable {
                    resource: r.resource.clone(),
                    requested: r.count,
                    available: pool.len() + n,
                });
            }
            let fresh: Vec<String> = pool.drain(..more).collect();
            if r.init {
                reuse.extend(fresh.iter().cloned());
            }
            ids.extend(fresh);
            out.push(Planned {
                request: r.clone(),
                ids,
            });
        }
        Ok(out)
    }
}

/// Devices chosen for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub request: Request,
    pub ids: Vec<String>,
}

/// What survives a restart (kubelet's `kubelet_internal_checkpoint`, in
/// our own format): every allocation and each resource's device IDs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checkpoint {
    pub version: u32,
    /// resource → device IDs its plugin last listed.
    pub registered: BTreeMap<String, Vec<String>>,
    pub entries: Vec<Entry>,
}

/// The checkpoint's format version.
pub const CHECKPOINT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    pub pod_uid: String,
    pub container: String,
    pub resource: String,
    pub ids: Vec<String>,
    /// The plugin's `ContainerAllocateResponse`, protobuf in base64.
    #[serde(with = "bytes_base64")]
    pub response: Vec<u8>,
}

impl From<&PodDevices> for Checkpoint {
    fn from(d: &PodDevices) -> Self {
        Self {
            version: CHECKPOINT_VERSION,
            registered: d
                .devices
                .iter()
                .map(|(r, ds)| (r.clone(), ds.keys().cloned().collect()))
                .collect(),
            entries: d
                .allocated
                .iter()
                .map(|((uid, c, r), a)| Entry {
                    pod_uid: uid.clone(),
                    container: c.clone(),
                    resource: r.clone(),
                    ids: a.ids.clone(),
                    response: a.response.clone(),
                })
                .collect(),
        }
    }
}

impl From<Checkpoint> for PodDevices {
    /// Devices come back unhealthy: their plugin's next list says.
    fn from(c: Checkpoint) -> Self {
        Self {
            devices: c
                .registered
                .into_iter()
                .map(|(r, ids)| (r, ids.into_iter().map(|id| (id, false)).collect()))
                .collect(),
            allocated: c
                .entries
                .into_iter()
                .map(|e| {
                    let a = Allocation {
                        ids: e.ids,
                        response: e.response,
                    };
                    ((e.pod_uid, e.container, e.resource), a)
                })
                .collect(),
        }
    }
}

mod bytes_base64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
