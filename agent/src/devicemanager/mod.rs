//! The device manager, kubelet's `cm/devicemanager`: device plugins
//! register on `kubelet.sock` in a device-plugins directory
//! ([`registration`]); the manager dials each back on its own socket and
//! follows its devices ([`endpoint`]); a pod asking for an extended resource
//! (`resources.limits`) gets devices when its worker first syncs it, or is
//! failed with kubelet's reason; each create of its containers carries what
//! the plugin's Allocate answered (device nodes, mounts, env, annotations,
//! CDI devices). Allocations survive restarts in a checkpoint
//! (`<dir>/picolet_checkpoint`), so a restarted agent neither loses nor
//! doubles one; devices of pods that are gone are given back.

mod endpoint;
pub mod pod_devices;
pub mod registration;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cri_proto::deviceplugin::{
    ContainerAllocateResponse, device_plugin_client::DevicePluginClient,
};
use k8s_openapi::api::core::v1::Pod;
use prost::Message as _;

use crate::mutex::lock;
use pod_devices::{Checkpoint, PodDevices};
pub use pod_devices::{ContainerDevices, Shortage};

/// The checkpoint's file name in the device-plugins directory.
pub const CHECKPOINT: &str = "picolet_checkpoint";
/// The socket plugins register on, in each device-plugins directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// How long a plugin that went away keeps its resource (its devices
/// unhealthy) before the resource goes (kubelet's `endpointStopGracePeriod`).
pub const STOP_GRACE: Duration = Duration::from_secs(300);

/// What can go wrong starting the manager or giving a pod its devices.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("device manager: {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("device manager: checkpoint {}: {source}", path.display())]
    Checkpoint {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Socket(#[from] cri_proto::SocketError),
    #[error("device manager: {} is served by another process", .0.display())]
    Busy(PathBuf),
    #[error(transparent)]
    Shortage(#[from] Shortage),
    /// The plugin's Allocate (or GetPreferredAllocation) failed.
    #[error("Allocate failed due to {resource}: {source}, which is unexpected")]
    Plugin {
        resource: String,
        source: tonic::Status,
    },
    #[error("Allocate failed due to {resource}: no plugin serves it now, which is unexpected")]
    NoPlugin { resource: String },
}

impl Error {
    /// kubelet's reason for a pod refused with this error.
    pub fn reason(&self) -> String {
        match self {
            Error::Shortage(s) => s.reason(),
            _ => "UnexpectedAdmissionError".into(),
        }
    }
}

/// Devices of one resource a container holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub pod_uid: String,
    pub container: String,
    pub resource: String,
    pub ids: Vec<String>,
}

/// The device manager: a cloneable handle.
#[derive(Clone, Debug)]
pub struct Manager(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    checkpoint: PathBuf,
    state: Mutex<PodDevices>,
    /// resource → the plugin serving it now.
    endpoints: Mutex<BTreeMap<String, endpoint::Endpoint>>,
    /// One admission at a time: two pods never get the same device.
    admitting: tokio::sync::Mutex<()>,
    /// Bumped whenever a resource's devices change (node status).
    changed: tokio::sync::watch::Sender<u64>,
    /// The sockets served and the directories made for them.
    served: Mutex<Vec<registration::Served>>,
}

impl Manager {
    /// Loads the checkpoint from the first of `dirs` and serves the
    /// Registration service on `kubelet.sock` in each of them.
    pub fn start(dirs: &[PathBuf]) -> Result<Self, Error> {
        let first = dirs.first().cloned().unwrap_or_default();
        let checkpoint = first.join(CHECKPOINT);
        let state = load(&checkpoint)?;
        let manager = Self(Arc::new(Inner {
            checkpoint,
            state: Mutex::new(state),
            endpoints: Mutex::default(),
            admitting: tokio::sync::Mutex::new(()),
            changed: tokio::sync::watch::channel(0).0,
            served: Mutex::default(),
        }));
        for (i, dir) in dirs.iter().enumerate() {
            match registration::serve(manager.clone(), dir) {
                Ok(served) => {
                    tracing::info!(dir = %dir.display(), "device plugins register here");
                    lock(&manager.0.served).push(served);
                }
                // Only the first directory (our own) must be ours.
                Err(e) if i > 0 => tracing::warn!(error = %e, "device plugin directory skipped"),
                Err(e) => return Err(e),
            }
        }
        Ok(manager)
    }

    /// resource → (capacity, allocatable): every device and the healthy
    /// ones, for the Node.
    pub fn capacity(&self) -> BTreeMap<String, (usize, usize)> {
        lock(&self.0.state).capacity()
    }

    /// Every allocation.
    pub fn allocations(&self) -> Vec<Holding> {
        lock(&self.0.state)
            .allocated
            .iter()
            .map(|((u, c, r), a)| Holding {
                pod_uid: u.clone(),
                container: c.clone(),
                resource: r.clone(),
                ids: a.ids.clone(),
            })
            .collect()
    }

    /// resource → its healthy devices' IDs.
    pub fn healthy(&self) -> BTreeMap<String, Vec<String>> {
        lock(&self.0.state)
            .devices
            .iter()
            .map(|(r, ds)| {
                let ids = ds.iter().filter(|(_, h)| **h).map(|(id, _)| id.clone());
                (r.clone(), ids.collect())
            })
            .collect()
    }

    /// Wakes on each change of the devices.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.changed.subscribe()
    }

    /// Gives `pod` (UID `uid`) the devices its containers ask for that
    /// they do not hold yet: chosen among the healthy free ones (the
    /// plugin's preference when it has one), then allocated by the plugin.
    /// A pod that asks for nothing costs nothing.
    pub async fn admit(&self, uid: &str, pod: &Pod) -> Result<(), Error> {
        let requests = pod_devices::requests(pod);
        if requests.is_empty() {
            return Ok(());
        }
        let _one = self.0.admitting.lock().await;
        let (plan, free) = {
            let state = lock(&self.0.state);
            let plan = state.plan(uid, &requests)?;
            let free: BTreeMap<String, Vec<String>> = plan
                .iter()
                .map(|p| (p.request.resource.clone(), state.free(&p.request.resource)))
                .collect();
            (plan, free)
        };
        let mut made = Vec::new();
        for mut p in plan {
            let resource = p.request.resource.clone();
            let resource = &resource;
            let mut client = self.client(resource)?;
            // The plugin's preference, when it has one and the choice is
            // the pod's only one of this resource (others share the pool).
            let alone =
                !p.request.init && requests.iter().filter(|r| &r.resource == resource).count() == 1;
            let prefers = lock(&self.0.endpoints)
                .get(resource)
                .is_some_and(|e| e.options.get_preferred_allocation_available);
            if alone && prefers {
                let available = free.get(resource).cloned().unwrap_or_default();
                if let Some(ids) = preferred(&mut client, &available, p.ids.len()).await {
                    p.ids = ids;
                }
            }
            let req = cri_proto::deviceplugin::AllocateRequest {
                container_requests: vec![cri_proto::deviceplugin::ContainerAllocateRequest {
                    devices_ids: p.ids.clone(),
                }],
            };
            let answer = within(resource, client.allocate(req)).await?.into_inner();
            let response = answer
                .container_responses
                .into_iter()
                .next()
                .unwrap_or_default();
            made.push((p, response.encode_to_vec()));
        }
        if made.is_empty() {
            return Ok(());
        }
        {
            let mut state = lock(&self.0.state);
            for (p, response) in made {
                let key = (uid.to_string(), p.request.container, p.request.resource);
                let a = pod_devices::Allocation {
                    ids: p.ids,
                    response,
                };
                state.allocated.insert(key, a);
            }
        }
        self.save()
    }

    /// What the container's creation carries from its allocations.
    pub fn container(&self, uid: &str, container: &str) -> ContainerDevices {
        let state = lock(&self.0.state);
        let mut out = ContainerDevices::default();
        for (_, a) in state.of_container(uid, container) {
            let Ok(r) = ContainerAllocateResponse::decode(a.response.as_slice()) else {
                continue;
            };
            out.devices.extend(r.devices);
            out.mounts.extend(r.mounts);
            out.envs.extend(r.envs);
            out.annotations.extend(r.annotations);
            out.cdi_devices
                .extend(r.cdi_devices.into_iter().map(|d| d.name));
        }
        out
    }

    /// Calls PreStartContainer of each plugin that asked for it, with the
    /// container's devices of that plugin.
    pub async fn pre_start(&self, uid: &str, container: &str) -> Result<(), Error> {
        let held: Vec<(String, Vec<String>)> = lock(&self.0.state)
            .of_container(uid, container)
            .into_iter()
            .map(|(r, a)| (r.to_string(), a.ids.clone()))
            .collect();
        for (resource, ids) in held {
            let wanted = lock(&self.0.endpoints)
                .get(&resource)
                .filter(|e| e.options.pre_start_required)
                .map(|e| e.client.clone());
            let Some(mut client) = wanted else { continue };
            let req = cri_proto::deviceplugin::PreStartContainerRequest { devices_ids: ids };
            within(&resource, client.pre_start_container(req)).await?;
        }
        Ok(())
    }

    /// At a clean stop: removes the `kubelet.sock`s served and the
    /// directories made for them (when empty), so a stopped agent leaves
    /// nothing at kubelet's path. The checkpoint stays.
    pub fn close(&self) {
        for s in lock(&self.0.served).drain(..) {
            s.take_away();
        }
    }

    /// Gives back the devices of every pod `active` says is gone.
    pub fn retain(&self, active: &dyn Fn(&str) -> bool) {
        let changed = lock(&self.0.state).retain_pods(active);
        if changed && let Err(e) = self.save() {
            tracing::warn!(error = %e, "device manager checkpoint");
        }
    }

    /// Gives back the devices of one pod.
    pub fn release(&self, uid: &str) {
        self.retain(&|u| u != uid);
    }

    fn client(&self, resource: &str) -> Result<DevicePluginClient<cri_proto::Channel>, Error> {
        lock(&self.0.endpoints)
            .get(resource)
            .map(|e| e.client.clone())
            .ok_or_else(|| Error::NoPlugin {
                resource: resource.into(),
            })
    }

    fn save(&self) -> Result<(), Error> {
        let checkpoint = Checkpoint::from(&*lock(&self.0.state));
        let bytes = serde_json::to_vec(&checkpoint).map_err(|source| Error::Checkpoint {
            path: self.0.checkpoint.clone(),
            source,
        })?;
        edge_config::write_atomic(&self.0.checkpoint, &bytes).map_err(|source| Error::Io {
            op: "write",
            path: self.0.checkpoint.clone(),
            source,
        })
    }

    fn devices_changed(&self) {
        self.0.changed.send_modify(|n| *n += 1);
    }
}

/// The plugin's preferred `size` of `available`, if it answers with that
/// many of them (its answer is advice: anything else is not taken).
async fn preferred(
    client: &mut DevicePluginClient<cri_proto::Channel>,
    available: &[String],
    size: usize,
) -> Option<Vec<String>> {
    use cri_proto::deviceplugin::{
        ContainerPreferredAllocationRequest, PreferredAllocationRequest,
    };
    let req = PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_i_ds: available.to_vec(),
            must_include_device_i_ds: Vec::new(),
            allocation_size: i32::try_from(size).ok()?,
        }],
    };
    let answer = within("", client.get_preferred_allocation(req))
        .await
        .ok()?
        .into_inner();
    let ids = answer.container_responses.into_iter().next()?.device_i_ds;
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    (unique.len() == size && ids.iter().all(|id| available.contains(id))).then_some(ids)
}

/// How long a plugin may take to answer Allocate, GetPreferredAllocation
/// or PreStartContainer: a plugin that hangs holds up one pod's start, not
/// every admission after it.
pub const PLUGIN_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A call to `resource`'s plugin, within [`PLUGIN_CALL_TIMEOUT`].
async fn within<T>(
    resource: &str,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T, Error> {
    let source = match tokio::time::timeout(PLUGIN_CALL_TIMEOUT, call).await {
        Ok(Ok(answer)) => return Ok(answer),
        Ok(Err(status)) => status,
        Err(_) => tonic::Status::deadline_exceeded(format!(
            "no answer within {} s",
            PLUGIN_CALL_TIMEOUT.as_secs()
        )),
    };
    Err(Error::Plugin {
        resource: resource.into(),
        source,
    })
}

/// The checkpoint's state; none yet is an empty one. A checkpoint that
/// does not decode is set aside (`<file>.bad`) with a warning and the
/// manager starts empty, as kubelet does: devices are then given afresh
/// rather than not at all.
fn load(path: &Path) -> Result<PodDevices, Error> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PodDevices::default()),
        Err(source) => {
            return Err(Error::Io {
                op: "read",
                path: path.into(),
                source,
            });
        }
    };
    match serde_json::from_slice::<Checkpoint>(&bytes) {
        Ok(c) => Ok(c.into()),
        Err(source) => {
            let e = Error::Checkpoint {
                path: path.into(),
                source,
            };
            tracing::warn!(error = %e, "device manager: starting without the checkpoint");
            let aside = path.with_extension("bad");
            std::fs::rename(path, &aside).map_err(|source| Error::Io {
                op: "set aside",
                path: path.into(),
                source,
            })?;
            Ok(PodDevices::default())
        }
    }
}
