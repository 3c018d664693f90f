//! An in-memory CRI runtime for root-free tests of the agent's pod
//! workers and PLEG, as kubelet tests against its `FakeRuntimeService`:
//! the real gRPC server on a temporary unix socket, sandboxes and
//! containers as records, no processes. A container whose command is
//! `false` exits with 1 when started, `true` with 0; anything else runs
//! until it is stopped or [`FakeCri::exit`] ends it. `GetContainerEvents`
//! streams STARTED and STOPPED events, as picolet's shim does, so PLEG
//! wakes workers at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use cri_proto::v1::image_service_server::{ImageService, ImageServiceServer};
use cri_proto::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use cri_proto::v1::*;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

type Reply<T> = Result<Response<T>, Status>;

#[derive(Debug, Clone)]
pub struct Sandbox {
    pub id: String,
    pub config: PodSandboxConfig,
    pub ready: bool,
    pub created_at: i64,
}

#[derive(Debug, Clone)]
pub struct Ctr {
    pub id: String,
    pub sandbox_id: String,
    pub config: ContainerConfig,
    pub state: ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
}

#[derive(Debug, Default)]
pub struct State {
    pub sandboxes: HashMap<String, Sandbox>,
    pub containers: HashMap<String, Ctr>,
    /// Every call, by method name, in order.
    pub calls: Vec<&'static str>,
    /// Every container start: (container name, when in Unix ns).
    pub starts: Vec<(String, i64)>,
    /// Every PullImage: (image, the credential's username or "").
    pub pulls: Vec<(String, String)>,
    /// How long each PullImage takes.
    pub pull_delay: std::time::Duration,
    /// PullImage calls under way now, and the most at once so far.
    pub pulls_now: usize,
    pub pulls_most: usize,
    /// How long each StopContainer takes; those under way now, the most at
    /// once so far.
    pub stop_delay: std::time::Duration,
    pub stops_now: usize,
    pub stops_most: usize,
    /// RunPodSandbox fails with this (as a CNI plugin's error would).
    pub sandbox_error: Option<String>,
    /// Status says the default handler makes user namespaces.
    pub user_namespaces: bool,
    /// Status says the runtime does SupplementalGroupsPolicy.
    pub supplemental_groups_policy: bool,
    /// Every UpdateContainerResources: (container name, what it was sent).
    pub updates: Vec<(String, LinuxContainerResources)>,
    /// Memory each container uses (ContainerStats), by name; none: 1 MiB.
    pub memory_usage: HashMap<String, u64>,
    events: Option<tokio::sync::broadcast::Sender<ContainerEventResponse>>,
    seq: u64,
}

impl State {
    /// Streams a container event to every GetContainerEvents client.
    fn emit(&self, container_id: &str, kind: ContainerEventType) {
        let Some(tx) = &self.events else { return };
        let Some(c) = self.containers.get(container_id) else {
            return;
        };
        let sandbox = self
            .sandboxes
            .get(&c.sandbox_id)
            .map(|sb| PodSandboxStatus {
                id: sb.id.clone(),
                metadata: sb.config.metadata.clone(),
                ..Default::default()
            });
        let _ = tx.send(ContainerEventResponse {
            container_id: container_id.to_string(),
            container_event_type: kind as i32,
            created_at: now_ns(),
            pod_sandbox_status: sandbox,
            containers_statuses: vec![container_status(c)],
        });
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.seq += 1;
        format!("{prefix}{:016x}", self.seq)
    }
}

/// The fake and the server serving it; the server stops on drop.
pub struct FakeCri {
    pub state: Arc<Mutex<State>>,
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeCri {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn lock(s: &Mutex<State>) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn selected(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl FakeCri {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("fake.sock");
        let (events, _) = tokio::sync::broadcast::channel(256);
        let state = Arc::new(Mutex::new(State {
            events: Some(events),
            ..Default::default()
        }));
        let incoming = cri_proto::listen(socket.clone()).expect("listen");
        let svc = Svc(state.clone());
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(RuntimeServiceServer::new(svc.clone()))
                .add_service(ImageServiceServer::new(svc))
                .serve_with_incoming(incoming)
                .await;
        });
        Self {
            state,
            socket,
            _dir: dir,
            server,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Ends a running container as if its process exited with `code`.
    pub fn exit(&self, id: &str, code: i32) {
        let mut s = self.state();
        let c = s.containers.get_mut(id).expect("container");
        c.state = ContainerState::ContainerExited;
        c.exit_code = code;
        c.finished_at = now_ns();
        s.emit(id, ContainerEventType::ContainerStoppedEvent);
    }

    /// The containers named `name`, oldest first.
    pub fn containers_named(&self, name: &str) -> Vec<Ctr> {
        let mut v: Vec<Ctr> = self
            .state()
            .containers
            .values()
            .filter(|c| c.config.metadata.as_ref().is_some_and(|m| m.name == name))
            .cloned()
            .collect();
        v.sort_by_key(|c| c.created_at);
        v
    }
}

#[derive(Clone)]
struct Svc(Arc<Mutex<State>>);

impl Svc {
    fn with<T>(
        &self,
        call: &'static str,
        f: impl FnOnce(&mut State) -> Result<T, Status>,
    ) -> Reply<T> {
        let mut s = lock(&self.0);
        s.calls.push(call);
        f(&mut s).map(Response::new)
    }
}

fn sandbox_view(s: &Sandbox) -> PodSandbox {
    PodSandbox {
        id: s.id.clone(),
        metadata: s.config.metadata.clone(),
        state: if s.ready {
            PodSandboxState::SandboxReady
        } else {
            PodSandboxState::SandboxNotready
        } as i32,
        created_at: s.created_at,
        labels: s.config.labels.clone(),
        annotations: s.config.annotations.clone(),
        runtime_handler: String::new(),
    }
}

fn container_view(c: &Ctr) -> Container {
    Container {
        id: c.id.clone(),
        pod_sandbox_id: c.sandbox_id.clone(),
        metadata: c.config.metadata.clone(),
        image: c.config.image.clone(),
        image_ref: "sha256:fake".into(),
        state: c.state as i32,
        created_at: c.created_at,
        labels: c.config.labels.clone(),
        annotations: c.config.annotations.clone(),
        ..Default::default()
    }
}

fn container_status(c: &Ctr) -> ContainerStatus {
    ContainerStatus {
        id: c.id.clone(),
        metadata: c.config.metadata.clone(),
        state: c.state as i32,
        created_at: c.created_at,
        started_at: c.started_at,
        finished_at: c.finished_at,
        exit_code: c.exit_code,
        image: c.config.image.clone(),
        image_ref: "sha256:fake".into(),
        reason: if c.state == ContainerState::ContainerExited {
            if c.exit_code == 0 {
                "Completed"
            } else {
                "Error"
            }
            .into()
        } else {
            String::new()
        },
        labels: c.config.labels.clone(),
        annotations: c.config.annotations.clone(),
        log_path: c.config.log_path.clone(),
        resources: c
            .config
            .linux
            .as_ref()
            .and_then(|l| l.resources.clone())
            .map(|r| ContainerResources {
                linux: Some(r),
                ..Default::default()
            }),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RuntimeService for Svc {
    async fn version(&self, _: Request<VersionRequest>) -> Reply<VersionResponse> {
        self.with("Version", |_| {
            Ok(VersionResponse {
                version: "0.1.0".into(),
                runtime_name: "fake".into(),
                runtime_version: "0".into(),
                runtime_api_version: "v1".into(),
            })
        })
    }

    async fn run_pod_sandbox(
        &self,
        r: Request<RunPodSandboxRequest>,
    ) -> Reply<RunPodSandboxResponse> {
        let config = r.into_inner().config.unwrap_or_default();
        self.with("RunPodSandbox", |s| {
            if let Some(e) = &s.sandbox_error {
                return Err(Status::unknown(e.clone()));
            }
            let id = s.next_id("sb");
            let sb = Sandbox {
                id: id.clone(),
                config,
                ready: true,
                created_at: now_ns(),
            };
            s.sandboxes.insert(id.clone(), sb);
            Ok(RunPodSandboxResponse { pod_sandbox_id: id })
        })
    }

    async fn stop_pod_sandbox(
        &self,
        r: Request<StopPodSandboxRequest>,
    ) -> Reply<StopPodSandboxResponse> {
        let id = r.into_inner().pod_sandbox_id;
        self.with("StopPodSandbox", |s| {
            let now = now_ns();
            for c in s.containers.values_mut().filter(|c| c.sandbox_id == id) {
                if c.state == ContainerState::ContainerRunning {
                    c.state = ContainerState::ContainerExited;
                    c.exit_code = 137;
                    c.finished_at = now;
                }
            }
            if let Some(sb) = s.sandboxes.get_mut(&id) {
                sb.ready = false;
            }
            Ok(StopPodSandboxResponse {})
        })
    }

    async fn remove_pod_sandbox(
        &self,
        r: Request<RemovePodSandboxRequest>,
    ) -> Reply<RemovePodSandboxResponse> {
        let id = r.into_inner().pod_sandbox_id;
        self.with("RemovePodSandbox", |s| {
            s.containers.retain(|_, c| c.sandbox_id != id);
            s.sandboxes.remove(&id);
            Ok(RemovePodSandboxResponse {})
        })
    }

    async fn pod_sandbox_status(
        &self,
        r: Request<PodSandboxStatusRequest>,
    ) -> Reply<PodSandboxStatusResponse> {
        let id = r.into_inner().pod_sandbox_id;
        self.with("PodSandboxStatus", |s| {
            let sb = s
                .sandboxes
                .get(&id)
                .ok_or_else(|| Status::not_found(format!("sandbox {id}")))?;
            let v = sandbox_view(sb);
            Ok(PodSandboxStatusResponse {
                status: Some(PodSandboxStatus {
                    id: v.id,
                    metadata: v.metadata,
                    state: v.state,
                    created_at: v.created_at,
                    network: Some(PodSandboxNetworkStatus {
                        ip: "10.88.0.2".into(),
                        ..Default::default()
                    }),
                    labels: v.labels,
                    annotations: v.annotations,
                    ..Default::default()
                }),
                ..Default::default()
            })
        })
    }

    async fn list_pod_sandbox(
        &self,
        r: Request<ListPodSandboxRequest>,
    ) -> Reply<ListPodSandboxResponse> {
        let f = r.into_inner().filter.unwrap_or_default();
        self.with("ListPodSandbox", |s| {
            let items = s
                .sandboxes
                .values()
                .filter(|sb| f.id.is_empty() || sb.id == f.id)
                .filter(|sb| selected(&sb.config.labels, &f.label_selector))
                .map(sandbox_view)
                .collect();
            Ok(ListPodSandboxResponse { items })
        })
    }

    async fn create_container(
        &self,
        r: Request<CreateContainerRequest>,
    ) -> Reply<CreateContainerResponse> {
        let r = r.into_inner();
        self.with("CreateContainer", |s| {
            if !s.sandboxes.contains_key(&r.pod_sandbox_id) {
                return Err(Status::not_found(format!("sandbox {}", r.pod_sandbox_id)));
            }
            let id = s.next_id("c");
            let c = Ctr {
                id: id.clone(),
                sandbox_id: r.pod_sandbox_id,
                config: r.config.unwrap_or_default(),
                state: ContainerState::ContainerCreated,
                created_at: now_ns(),
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
            };
            s.containers.insert(id.clone(), c);
            Ok(CreateContainerResponse { container_id: id })
        })
    }

    async fn start_container(
        &self,
        r: Request<StartContainerRequest>,
    ) -> Reply<StartContainerResponse> {
        let id = r.into_inner().container_id;
        self.with("StartContainer", |s| {
            let c = s
                .containers
                .get_mut(&id)
                .ok_or_else(|| Status::not_found(format!("container {id}")))?;
            let now = now_ns();
            c.started_at = now;
            c.state = ContainerState::ContainerRunning;
            let exit = match c.config.command.first().map(String::as_str) {
                Some("false") => Some(1),
                Some("true") => Some(0),
                _ => None,
            };
            if let Some(code) = exit {
                c.state = ContainerState::ContainerExited;
                c.exit_code = code;
                c.finished_at = now;
            }
            let name = c.config.metadata.as_ref().map(|m| m.name.clone());
            s.starts.push((name.unwrap_or_default(), now));
            s.emit(&id, ContainerEventType::ContainerStartedEvent);
            if exit.is_some() {
                s.emit(&id, ContainerEventType::ContainerStoppedEvent);
            }
            Ok(StartContainerResponse {})
        })
    }

    async fn stop_container(
        &self,
        r: Request<StopContainerRequest>,
    ) -> Reply<StopContainerResponse> {
        let id = r.into_inner().container_id;
        let delay = {
            let mut s = lock(&self.0);
            s.stops_now += 1;
            s.stops_most = s.stops_most.max(s.stops_now);
            s.stop_delay
        };
        tokio::time::sleep(delay).await;
        lock(&self.0).stops_now -= 1;
        self.with("StopContainer", |s| {
            if let Some(c) = s.containers.get_mut(&id)
                && c.state == ContainerState::ContainerRunning
            {
                c.state = ContainerState::ContainerExited;
                c.exit_code = 137;
                c.finished_at = now_ns();
            }
            Ok(StopContainerResponse {})
        })
    }

    async fn remove_container(
        &self,
        r: Request<RemoveContainerRequest>,
    ) -> Reply<RemoveContainerResponse> {
        let id = r.into_inner().container_id;
        self.with("RemoveContainer", |s| {
            s.containers.remove(&id);
            Ok(RemoveContainerResponse {})
        })
    }

    async fn list_containers(
        &self,
        r: Request<ListContainersRequest>,
    ) -> Reply<ListContainersResponse> {
        let f = r.into_inner().filter.unwrap_or_default();
        self.with("ListContainers", |s| {
            let containers = s
                .containers
                .values()
                .filter(|c| f.id.is_empty() || c.id == f.id)
                .filter(|c| f.pod_sandbox_id.is_empty() || c.sandbox_id == f.pod_sandbox_id)
                .filter(|c| f.state.as_ref().is_none_or(|st| st.state == c.state as i32))
                .filter(|c| selected(&c.config.labels, &f.label_selector))
                .map(container_view)
                .collect();
            Ok(ListContainersResponse { containers })
        })
    }

    async fn container_status(
        &self,
        r: Request<ContainerStatusRequest>,
    ) -> Reply<ContainerStatusResponse> {
        let id = r.into_inner().container_id;
        self.with("ContainerStatus", |s| {
            let c = s
                .containers
                .get(&id)
                .ok_or_else(|| Status::not_found(format!("container {id}")))?;
            Ok(ContainerStatusResponse {
                status: Some(container_status(c)),
                ..Default::default()
            })
        })
    }

    async fn update_container_resources(
        &self,
        r: Request<UpdateContainerResourcesRequest>,
    ) -> Reply<UpdateContainerResourcesResponse> {
        let r = r.into_inner();
        self.with("UpdateContainerResources", |s| {
            let c = s
                .containers
                .get_mut(&r.container_id)
                .ok_or_else(|| Status::not_found(format!("container {}", r.container_id)))?;
            let linux = r.linux.unwrap_or_default();
            c.config.linux.get_or_insert_default().resources = Some(linux.clone());
            let name = c.config.metadata.as_ref().map(|m| m.name.clone());
            s.updates.push((name.unwrap_or_default(), linux));
            Ok(UpdateContainerResourcesResponse {})
        })
    }

    async fn reopen_container_log(
        &self,
        _: Request<ReopenContainerLogRequest>,
    ) -> Reply<ReopenContainerLogResponse> {
        self.with("ReopenContainerLog", |_| Ok(ReopenContainerLogResponse {}))
    }

    async fn exec_sync(&self, _: Request<ExecSyncRequest>) -> Reply<ExecSyncResponse> {
        self.with("ExecSync", |_| Ok(ExecSyncResponse::default()))
    }

    async fn exec(&self, _: Request<ExecRequest>) -> Reply<ExecResponse> {
        Err(Status::unimplemented("Exec"))
    }

    async fn attach(&self, _: Request<AttachRequest>) -> Reply<AttachResponse> {
        Err(Status::unimplemented("Attach"))
    }

    async fn port_forward(&self, _: Request<PortForwardRequest>) -> Reply<PortForwardResponse> {
        Err(Status::unimplemented("PortForward"))
    }

    async fn container_stats(
        &self,
        r: Request<ContainerStatsRequest>,
    ) -> Reply<ContainerStatsResponse> {
        let id = r.into_inner().container_id;
        self.with("ContainerStats", |s| {
            let c = s
                .containers
                .get(&id)
                .ok_or_else(|| Status::not_found(format!("container {id}")))?;
            let name = c
                .config
                .metadata
                .as_ref()
                .map(|m| m.name.as_str())
                .unwrap_or("");
            let used = s.memory_usage.get(name).copied().unwrap_or(1 << 20);
            Ok(ContainerStatsResponse {
                stats: Some(ContainerStats {
                    memory: Some(MemoryUsage {
                        usage_bytes: Some(UInt64Value { value: used }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            })
        })
    }

    async fn list_container_stats(
        &self,
        _: Request<ListContainerStatsRequest>,
    ) -> Reply<ListContainerStatsResponse> {
        self.with("ListContainerStats", |_| {
            Ok(ListContainerStatsResponse::default())
        })
    }

    async fn pod_sandbox_stats(
        &self,
        _: Request<PodSandboxStatsRequest>,
    ) -> Reply<PodSandboxStatsResponse> {
        Err(Status::unimplemented("PodSandboxStats"))
    }

    async fn list_pod_sandbox_stats(
        &self,
        _: Request<ListPodSandboxStatsRequest>,
    ) -> Reply<ListPodSandboxStatsResponse> {
        Err(Status::unimplemented("ListPodSandboxStats"))
    }

    async fn update_runtime_config(
        &self,
        _: Request<UpdateRuntimeConfigRequest>,
    ) -> Reply<UpdateRuntimeConfigResponse> {
        Err(Status::unimplemented("UpdateRuntimeConfig"))
    }

    async fn status(&self, _: Request<StatusRequest>) -> Reply<StatusResponse> {
        let st = lock(&self.0);
        let ready = |kind: &str| cri_proto::v1::RuntimeCondition {
            r#type: kind.into(),
            status: true,
            ..Default::default()
        };
        Ok(Response::new(StatusResponse {
            status: Some(cri_proto::v1::RuntimeStatus {
                conditions: vec![ready("RuntimeReady"), ready("NetworkReady")],
            }),
            runtime_handlers: vec![cri_proto::v1::RuntimeHandler {
                name: String::new(),
                features: Some(cri_proto::v1::RuntimeHandlerFeatures {
                    recursive_read_only_mounts: false,
                    user_namespaces: st.user_namespaces,
                }),
            }],
            features: Some(cri_proto::v1::RuntimeFeatures {
                supplemental_groups_policy: st.supplemental_groups_policy,
            }),
            ..Default::default()
        }))
    }

    async fn checkpoint_container(
        &self,
        _: Request<CheckpointContainerRequest>,
    ) -> Reply<CheckpointContainerResponse> {
        Err(Status::unimplemented("CheckpointContainer"))
    }

    type GetContainerEventsStream =
        Pin<Box<dyn tokio_stream::Stream<Item = Result<ContainerEventResponse, Status>> + Send>>;

    async fn get_container_events(
        &self,
        _: Request<GetEventsRequest>,
    ) -> Reply<Self::GetContainerEventsStream> {
        let rx = lock(&self.0)
            .events
            .as_ref()
            .map(|tx| tx.subscribe())
            .ok_or_else(|| Status::unavailable("no events"))?;
        let stream =
            tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(|e| e.ok().map(Ok));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<ListMetricDescriptorsRequest>,
    ) -> Reply<ListMetricDescriptorsResponse> {
        Err(Status::unimplemented("ListMetricDescriptors"))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<ListPodSandboxMetricsRequest>,
    ) -> Reply<ListPodSandboxMetricsResponse> {
        Err(Status::unimplemented("ListPodSandboxMetrics"))
    }

    async fn runtime_config(
        &self,
        _: Request<RuntimeConfigRequest>,
    ) -> Reply<RuntimeConfigResponse> {
        Err(Status::unimplemented("RuntimeConfig"))
    }
}

#[tonic::async_trait]
impl ImageService for Svc {
    async fn list_images(&self, _: Request<ListImagesRequest>) -> Reply<ListImagesResponse> {
        self.with("ListImages", |_| Ok(ListImagesResponse::default()))
    }

    /// Every image is present (the workers' pull path is not what these
    /// tests are about).
    async fn image_status(&self, r: Request<ImageStatusRequest>) -> Reply<ImageStatusResponse> {
        let image = r.into_inner().image.map(|i| i.image).unwrap_or_default();
        self.with("ImageStatus", |_| {
            Ok(ImageStatusResponse {
                image: Some(Image {
                    id: "sha256:fake".into(),
                    repo_tags: vec![image],
                    ..Default::default()
                }),
                ..Default::default()
            })
        })
    }

    /// Refuses the user "wrong", as a registry refuses a bad credential.
    async fn pull_image(&self, r: Request<PullImageRequest>) -> Reply<PullImageResponse> {
        let r = r.into_inner();
        let image = r.image.map(|i| i.image).unwrap_or_default();
        let user = r.auth.map(|a| a.username).unwrap_or_default();
        let delay = {
            let mut s = lock(&self.0);
            s.pulls_now += 1;
            s.pulls_most = s.pulls_most.max(s.pulls_now);
            s.pull_delay
        };
        tokio::time::sleep(delay).await;
        lock(&self.0).pulls_now -= 1;
        self.with("PullImage", |s| {
            s.pulls.push((image, user.clone()));
            if user == "wrong" {
                return Err(Status::unauthenticated("401 Unauthorized"));
            }
            Ok(PullImageResponse {
                image_ref: "sha256:fake".into(),
            })
        })
    }

    async fn remove_image(&self, _: Request<RemoveImageRequest>) -> Reply<RemoveImageResponse> {
        self.with("RemoveImage", |_| Ok(RemoveImageResponse {}))
    }

    async fn image_fs_info(&self, _: Request<ImageFsInfoRequest>) -> Reply<ImageFsInfoResponse> {
        Err(Status::unimplemented("ImageFsInfo"))
    }
}
