//! The agent's CRI client: RuntimeService + ImageService over the unix
//! socket, every call bounded by `runtimeRequestTimeout`, and the
//! translation of CRI listings into [`Observed`] for one pod.

use std::collections::HashMap;

use crate::statsapi::DiskUsage;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cri_proto::Channel;
use cri_proto::v1::image_service_client::ImageServiceClient;
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::{
    ContainerConfig, ContainerFilter, ContainerStatsRequest, ContainerStatusRequest,
    CreateContainerRequest, ExecSyncRequest, LinuxContainerResources, ListContainerStatsRequest,
    ListContainersRequest, ListPodSandboxRequest, PodSandboxConfig, PodSandboxFilter,
    PodSandboxStatusRequest, RemoveContainerRequest, RemovePodSandboxRequest,
    ReopenContainerLogRequest, RunPodSandboxRequest, StartContainerRequest, StopContainerRequest,
    StopPodSandboxRequest, VersionRequest,
};
use std::sync::Arc;

use tonic::codegen::http;
use tonic::{Request, Status};

use crate::metrics::{self, AgentMetrics};

use crate::cri_config::{
    ANN_CONTAINER_HASH, ANN_GRACE, ANN_RESTART_COUNT, LABEL_CONTAINER_NAME, LABEL_POD_NAME,
    LABEL_POD_NAMESPACE, LABEL_POD_UID,
};
use crate::plan::{Observed, ObservedContainer, ObservedSandbox, State};

mod images;
mod resources;
pub use resources::of as resources_of;
mod status;

pub use status::RuntimeReport;

/// The CRI channel, timing every call into kubelet's
/// `kubelet_runtime_operations_*` metrics by operation.
#[derive(Clone)]
pub struct Timed {
    inner: Channel,
    metrics: Arc<AgentMetrics>,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for Timed {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = BoxFuture<std::result::Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let op = metrics::operation_type(req.uri().path());
        let m = self.metrics.clone();
        let fut = self.inner.call(req);
        let start = std::time::Instant::now();
        Box::pin(async move {
            let r = fut.await;
            // gRPC errors of unary calls come as trailers-only responses:
            // the status is in the headers.
            let failed = match &r {
                Err(_) => true,
                Ok(resp) => resp
                    .headers()
                    .get("grpc-status")
                    .is_some_and(|v| v.as_bytes() != b"0"),
            };
            m.runtime_op(&op, start.elapsed(), failed);
            r
        })
    }
}

/// One image as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    /// Tags and digests it is known by.
    pub names: Vec<String>,
    pub size: u64,
    pub pinned: bool,
}

/// A sandbox as `ListPodSandbox` shows it, by its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedSandbox {
    pub uid: String,
    pub id: String,
    pub namespace: String,
    pub name: String,
    pub ready: bool,
}

/// A CRI connection (cheap to clone: one HTTP/2 channel underneath).
#[derive(Clone)]
pub struct Cri {
    rt: RuntimeServiceClient<Timed>,
    img: ImageServiceClient<Timed>,
    timeout: Duration,
}

impl std::fmt::Debug for Cri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cri")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What an ExecSync gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    pub exit_code: i32,
    /// stdout, then stderr, as text.
    pub output: String,
}

/// A CRI call failed: which call, and the status.
#[derive(Debug, thiserror::Error)]
#[error("CRI {call}: {}", .status.message())]
pub struct CriError {
    pub call: &'static str,
    pub status: Status,
}

pub type Result<T> = std::result::Result<T, CriError>;

fn e(call: &'static str) -> impl FnOnce(Status) -> CriError {
    move |status| CriError { call, status }
}

fn uid_filter(uid: &str) -> HashMap<String, String> {
    HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())])
}

impl Cri {
    /// Connects to the CRI socket; every call is timed into `metrics`.
    pub async fn connect(
        socket: &Path,
        timeout: Duration,
        metrics: Arc<AgentMetrics>,
    ) -> std::io::Result<Self> {
        let ch = cri_proto::connect(socket)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let timed = Timed { inner: ch, metrics };
        Ok(Self {
            rt: RuntimeServiceClient::new(timed.clone()),
            img: ImageServiceClient::new(timed),
            timeout,
        })
    }

    fn req<T>(&self, msg: T) -> Request<T> {
        self.req_for(msg, self.timeout)
    }

    fn req_for<T>(&self, msg: T, timeout: Duration) -> Request<T> {
        let mut r = Request::new(msg);
        r.set_timeout(timeout);
        r
    }

    async fn version(&self) -> Result<cri_proto::v1::VersionResponse> {
        Ok(self
            .rt
            .clone()
            .version(self.req(VersionRequest::default()))
            .await
            .map_err(e("Version"))?
            .into_inner())
    }

    /// The runtime's name (`picolet`, `containerd`), for container IDs.
    pub async fn runtime_name(&self) -> Result<String> {
        Ok(self.version().await?.runtime_name)
    }

    /// `<runtime>://<version>`, as the node's containerRuntimeVersion.
    pub async fn runtime_version(&self) -> Result<String> {
        let v = self.version().await?;
        Ok(format!("{}://{}", v.runtime_name, v.runtime_version))
    }

    /// Every sandbox and container the runtime has for the pod `uid`.
    pub async fn observe(&self, uid: &str) -> Result<Observed> {
        let sandboxes = self
            .rt
            .clone()
            .list_pod_sandbox(self.req(ListPodSandboxRequest {
                filter: Some(PodSandboxFilter {
                    label_selector: uid_filter(uid),
                    ..Default::default()
                }),
            }))
            .await
            .map_err(e("ListPodSandbox"))?
            .into_inner()
            .items;
        let mut o = Observed::default();
        for s in sandboxes {
            let ready = s.state == cri_proto::v1::PodSandboxState::SandboxReady as i32;
            let ip = if ready {
                self.sandbox_ip(&s.id).await?
            } else {
                String::new()
            };
            o.sandboxes.push(ObservedSandbox {
                id: s.id,
                attempt: s.metadata.map(|m| m.attempt).unwrap_or(0),
                ready,
                created_at: s.created_at,
                ip,
            });
        }
        for c in self.pod_containers(uid).await? {
            // Removed between the list and the status: skip it.
            let Some(st) = self.container_status(&c.id).await? else {
                continue;
            };
            let state = match st.state {
                0 => State::Created,
                1 => State::Running,
                2 => State::Exited,
                _ => State::Unknown,
            };
            let name = st
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .or_else(|| c.labels.get(LABEL_CONTAINER_NAME).cloned())
                .unwrap_or_default();
            o.containers.push(ObservedContainer {
                id: st.id,
                sandbox_id: c.pod_sandbox_id,
                name,
                state,
                hash: st
                    .annotations
                    .get(ANN_CONTAINER_HASH)
                    .cloned()
                    .unwrap_or_default(),
                restart_count: st
                    .annotations
                    .get(ANN_RESTART_COUNT)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                created_at: st.created_at,
                started_at: st.started_at,
                finished_at: st.finished_at,
                exit_code: st.exit_code,
                reason: st.reason,
                message: st.message,
                image: st.image.map(|i| i.image).unwrap_or_default(),
                image_ref: st.image_ref,
                resources: st
                    .resources
                    .and_then(|r| r.linux)
                    .map(|l| resources::of(&l)),
                user: st
                    .user
                    .and_then(|u| u.linux)
                    .map(|l| crate::plan::ProcessUser {
                        uid: l.uid,
                        gid: l.gid,
                        supplemental_groups: l.supplemental_groups,
                    }),
            });
        }
        o.sort();
        Ok(o)
    }

    /// The containers of the pod `uid`, as ListContainers gives them.
    async fn pod_containers(&self, uid: &str) -> Result<Vec<cri_proto::v1::Container>> {
        Ok(self
            .rt
            .clone()
            .list_containers(self.req(ListContainersRequest {
                filter: Some(ContainerFilter {
                    label_selector: uid_filter(uid),
                    ..Default::default()
                }),
            }))
            .await
            .map_err(e("ListContainers"))?
            .into_inner()
            .containers)
    }

    /// Every sandbox that carries a pod UID.
    pub async fn list_pod_uids(&self) -> Result<Vec<ListedSandbox>> {
        let items = self
            .rt
            .clone()
            .list_pod_sandbox(self.req(ListPodSandboxRequest::default()))
            .await
            .map_err(e("ListPodSandbox"))?
            .into_inner()
            .items;
        Ok(items
            .into_iter()
            .filter_map(|s| {
                let uid = s.labels.get(LABEL_POD_UID)?.clone();
                let label = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
                Some(ListedSandbox {
                    uid,
                    id: s.id.clone(),
                    namespace: label(LABEL_POD_NAMESPACE),
                    name: label(LABEL_POD_NAME),
                    ready: s.state == cri_proto::v1::PodSandboxState::SandboxReady as i32,
                })
            })
            .collect())
    }

    /// (container id, pod uid, state) of every container (PLEG relist).
    pub async fn list_containers(&self) -> Result<Vec<(String, String, i32)>> {
        let items = self
            .rt
            .clone()
            .list_containers(self.req(ListContainersRequest::default()))
            .await
            .map_err(e("ListContainers"))?
            .into_inner()
            .containers;
        Ok(items
            .into_iter()
            .map(|c| {
                let uid = c.labels.get(LABEL_POD_UID).cloned().unwrap_or_default();
                (c.id, uid, c.state)
            })
            .collect())
    }

    /// The log files of the `running` containers (PLEG's last relist).
    /// kubelet's log manager asks ListContainers, then each one's status,
    /// every time; a container's log path never changes, so `known` keeps
    /// each one after its first status (pruned to the running containers),
    /// and the running ones come from the relist PLEG made anyway: at 30
    /// idle pods each 10 s round was 31 calls, then one, now none.
    pub async fn running_log_paths(
        &self,
        running: &std::collections::HashSet<String>,
        known: &mut HashMap<String, PathBuf>,
    ) -> Vec<(String, PathBuf)> {
        known.retain(|id, _| running.contains(id));
        let mut out = Vec::new();
        for id in running {
            if let Some(log) = known.get(id) {
                out.push((id.clone(), log.clone()));
                continue;
            }
            // Gone since the relist: nothing to rotate.
            if let Ok(Some(st)) = self.container_status(id).await
                && !st.log_path.is_empty()
            {
                let log = PathBuf::from(st.log_path);
                known.insert(id.clone(), log.clone());
                out.push((id.clone(), log));
            }
        }
        out
    }

    /// The labels the container was created with; None once it is gone.
    pub async fn container_labels(&self, id: &str) -> Result<Option<HashMap<String, String>>> {
        Ok(self.container_status(id).await?.map(|s| s.labels))
    }

    /// A container's status; None once it is gone (NotFound).
    async fn container_status(&self, id: &str) -> Result<Option<cri_proto::v1::ContainerStatus>> {
        match self
            .rt
            .clone()
            .container_status(self.req(ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            }))
            .await
        {
            Ok(r) => Ok(r.into_inner().status),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(e("ContainerStatus")(s)),
        }
    }

    /// A container's log file and whether it is running; None once the
    /// container is gone (kubelet's `GetContainerLogs` reads the file the
    /// runtime names).
    pub async fn log_file(&self, id: &str) -> Result<Option<(PathBuf, bool)>> {
        Ok(self.container_status(id).await?.map(|s| {
            (
                PathBuf::from(s.log_path),
                s.state == cri_proto::v1::ContainerState::ContainerRunning as i32,
            )
        }))
    }

    /// The streaming URL of an exec session (CRI Exec).
    pub async fn exec_url(&self, req: cri_proto::v1::ExecRequest) -> Result<String> {
        Ok(self
            .rt
            .clone()
            .exec(self.req(req))
            .await
            .map_err(e("Exec"))?
            .into_inner()
            .url)
    }

    /// The streaming URL of an attach session (CRI Attach).
    pub async fn attach_url(&self, req: cri_proto::v1::AttachRequest) -> Result<String> {
        Ok(self
            .rt
            .clone()
            .attach(self.req(req))
            .await
            .map_err(e("Attach"))?
            .into_inner()
            .url)
    }

    /// The streaming URL of a port-forward session (CRI PortForward).
    pub async fn port_forward_url(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        Ok(self
            .rt
            .clone()
            .port_forward(self.req(cri_proto::v1::PortForwardRequest {
                pod_sandbox_id: sandbox_id.into(),
                port: ports,
            }))
            .await
            .map_err(e("PortForward"))?
            .into_inner()
            .url)
    }

    /// Has the runtime reopen the container's log file (after a rotation).
    pub async fn reopen_container_log(&self, id: &str) -> Result<()> {
        self.rt
            .clone()
            .reopen_container_log(self.req(ReopenContainerLogRequest {
                container_id: id.into(),
            }))
            .await
            .map_err(e("ReopenContainerLog"))?;
        Ok(())
    }

    /// Writable layer usage by container id, from the runtime's
    /// ListContainerStats (kubelet's container `rootfs`).
    pub async fn writable_layers(&self) -> Result<HashMap<String, DiskUsage>> {
        let stats = self
            .rt
            .clone()
            .list_container_stats(self.req(ListContainerStatsRequest::default()))
            .await
            .map_err(e("ListContainerStats"))?
            .into_inner()
            .stats;
        Ok(stats
            .into_iter()
            .filter_map(|s| {
                let id = s.attributes?.id;
                let w = s.writable_layer?;
                Some((
                    id,
                    DiskUsage {
                        bytes: w.used_bytes.map(|v| v.value).unwrap_or(0),
                        inodes: w.inodes_used.map(|v| v.value).unwrap_or(0),
                    },
                ))
            })
            .collect())
    }

    /// (container id, grace period) of the pod's containers, from the
    /// grace annotation they were created with.
    pub async fn list_container_graces(&self, uid: &str) -> Result<Vec<(String, Duration)>> {
        Ok(self
            .pod_containers(uid)
            .await?
            .into_iter()
            .filter_map(|c| {
                let secs: u64 = c.annotations.get(ANN_GRACE)?.parse().ok()?;
                Some((c.id, Duration::from_secs(secs)))
            })
            .collect())
    }

    pub async fn run_pod_sandbox(&self, config: PodSandboxConfig) -> Result<String> {
        Ok(self
            .rt
            .clone()
            .run_pod_sandbox(self.req(RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            }))
            .await
            .map_err(e("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id)
    }

    pub async fn sandbox_ip(&self, id: &str) -> Result<String> {
        let st = self
            .rt
            .clone()
            .pod_sandbox_status(self.req(PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose: false,
            }))
            .await
            .map_err(e("PodSandboxStatus"))?
            .into_inner();
        Ok(st
            .status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .unwrap_or_default())
    }

    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.rt
            .clone()
            .stop_pod_sandbox(self.req(StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            }))
            .await
            .map_err(e("StopPodSandbox"))?;
        Ok(())
    }

    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.rt
            .clone()
            .remove_pod_sandbox(self.req(RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            }))
            .await
            .map_err(e("RemovePodSandbox"))?;
        Ok(())
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String> {
        Ok(self
            .rt
            .clone()
            .create_container(self.req(CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            }))
            .await
            .map_err(e("CreateContainer"))?
            .into_inner()
            .container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<()> {
        self.rt
            .clone()
            .start_container(self.req(StartContainerRequest {
                container_id: id.into(),
            }))
            .await
            .map_err(e("StartContainer"))?;
        Ok(())
    }

    /// Changes a running container's CPU and memory (in-place resize).
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: LinuxContainerResources,
    ) -> Result<()> {
        self.rt
            .clone()
            .update_container_resources(self.req(cri_proto::v1::UpdateContainerResourcesRequest {
                container_id: id.into(),
                linux: Some(linux),
                ..Default::default()
            }))
            .await
            .map_err(e("UpdateContainerResources"))?;
        Ok(())
    }

    /// A container's memory usage in bytes (ContainerStats), if reported.
    pub async fn memory_usage(&self, id: &str) -> Result<Option<u64>> {
        let st = self
            .rt
            .clone()
            .container_stats(self.req(ContainerStatsRequest {
                container_id: id.into(),
            }))
            .await
            .map_err(e("ContainerStats"))?
            .into_inner()
            .stats;
        Ok(st
            .and_then(|s| s.memory)
            .and_then(|m| m.usage_bytes)
            .map(|u| u.value))
    }

    /// Stops with `grace` before SIGKILL; the call may take that long.
    pub async fn stop_container(&self, id: &str, grace: Duration) -> Result<()> {
        let timeout = grace + self.timeout;
        self.rt
            .clone()
            .stop_container(self.req_for(
                StopContainerRequest {
                    container_id: id.into(),
                    timeout: i64::try_from(grace.as_secs()).unwrap_or(i64::MAX),
                },
                timeout,
            ))
            .await
            .map_err(e("StopContainer"))?;
        Ok(())
    }

    pub async fn remove_container(&self, id: &str) -> Result<()> {
        self.rt
            .clone()
            .remove_container(self.req(RemoveContainerRequest {
                container_id: id.into(),
            }))
            .await
            .map_err(e("RemoveContainer"))?;
        Ok(())
    }

    /// Runs `cmd` in the container.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecResult> {
        let r = self
            .rt
            .clone()
            .exec_sync(self.req_for(
                ExecSyncRequest {
                    container_id: id.into(),
                    cmd,
                    timeout: i64::try_from(timeout.as_secs().max(1)).unwrap_or(i64::MAX),
                },
                timeout + Duration::from_secs(2),
            ))
            .await
            .map_err(e("ExecSync"))?
            .into_inner();
        let mut output = String::from_utf8_lossy(&r.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&r.stderr));
        Ok(ExecResult {
            exit_code: r.exit_code,
            output,
        })
    }

    /// The runtime's container event stream, if it has one.
    pub async fn events(
        &self,
    ) -> std::result::Result<tonic::Streaming<cri_proto::v1::ContainerEventResponse>, Status> {
        Ok(self
            .rt
            .clone()
            .get_container_events(Request::new(cri_proto::v1::GetEventsRequest {}))
            .await?
            .into_inner())
    }
}
