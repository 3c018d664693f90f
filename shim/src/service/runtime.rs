//! CRI RuntimeService: thin handlers over [`Runtime`] and the streaming
//! server. Not yet implemented (UNIMPLEMENTED): CheckpointContainer, the
//! pod sandbox stats RPCs and the metrics RPCs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use cri_proto::v1::{
    AttachRequest, AttachResponse, CgroupDriver, CheckpointContainerRequest,
    CheckpointContainerResponse, ContainerEventResponse, ContainerStatsRequest,
    ContainerStatsResponse, ContainerStatusRequest, ContainerStatusResponse,
    CreateContainerRequest, CreateContainerResponse, ExecRequest, ExecResponse, ExecSyncRequest,
    ExecSyncResponse, GetEventsRequest, LinuxRuntimeConfiguration, ListContainerStatsRequest,
    ListContainerStatsResponse, ListContainersRequest, ListContainersResponse,
    ListMetricDescriptorsRequest, ListMetricDescriptorsResponse, ListPodSandboxMetricsRequest,
    ListPodSandboxMetricsResponse, ListPodSandboxRequest, ListPodSandboxResponse,
    ListPodSandboxStatsRequest, ListPodSandboxStatsResponse, PodSandboxStatsRequest,
    PodSandboxStatsResponse, PodSandboxStatusRequest, PodSandboxStatusResponse, PortForwardRequest,
    PortForwardResponse, RemoveContainerRequest, RemoveContainerResponse, RemovePodSandboxRequest,
    RemovePodSandboxResponse, ReopenContainerLogRequest, ReopenContainerLogResponse,
    RunPodSandboxRequest, RunPodSandboxResponse, RuntimeCondition, RuntimeConfigRequest,
    RuntimeConfigResponse, RuntimeFeatures, RuntimeHandler, RuntimeHandlerFeatures, RuntimeStatus,
    StartContainerRequest, StartContainerResponse, StatusRequest, StatusResponse,
    StopContainerRequest, StopContainerResponse, StopPodSandboxRequest, StopPodSandboxResponse,
    UpdateContainerResourcesRequest, UpdateContainerResourcesResponse, UpdateRuntimeConfigRequest,
    UpdateRuntimeConfigResponse, VersionRequest, VersionResponse,
    runtime_service_server::RuntimeService,
};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::error::Error;
use crate::runtime::Runtime;
use crate::streaming::{Channels, Streaming};

/// Name reported by Version.
pub const RUNTIME_NAME: &str = "picolet";
/// CRI API version served.
pub const RUNTIME_API_VERSION: &str = "v1";

/// Serves CRI RuntimeService.
#[derive(Debug, Clone)]
pub struct RuntimeSvc {
    rt: Arc<Runtime>,
    streaming: Arc<Streaming>,
}

impl RuntimeSvc {
    pub fn new(rt: Arc<Runtime>, streaming: Arc<Streaming>) -> Self {
        Self { rt, streaming }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<ContainerEventResponse, Status>> + Send>>;

fn condition(kind: &str, status: bool, reason: &str, message: &str) -> RuntimeCondition {
    RuntimeCondition {
        r#type: kind.to_string(),
        status,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

fn id_of(id: &str, field: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::InvalidArgument(format!("{field}: required")));
    }
    Ok(())
}

/// Runs a state-changing call to its end on a task of its own. tonic drops a
/// handler's future when its client goes away, and a call cut between two
/// awaits leaves half a change: bench/faults.sh killed the agent while a
/// CreateContainer waited for its monitor's handshake, and that monitor went
/// on making a container in the pod's cgroup that no record named. Run to the
/// end, the change is whole and listed; a client that comes back reconciles it.
async fn to_completion<T: Send + 'static>(
    call: impl Future<Output = Result<T, Error>> + Send + 'static,
) -> Result<T, Status> {
    match tokio::spawn(call).await {
        Ok(r) => r.map_err(Status::from),
        Err(e) => Err(Error::task("call ended early")(e).into()),
    }
}

fn unimplemented<T>(rpc: &'static str) -> Result<Response<T>, Status> {
    Err(Error::Unimplemented(rpc).into())
}

/// What the one runtime handler does (kubelet copies it to the Node's
/// `status.runtimeHandlers`; critest runs the specs of each).
const HANDLER_FEATURES: RuntimeHandlerFeatures = RuntimeHandlerFeatures {
    recursive_read_only_mounts: true,
    user_namespaces: true,
};

#[tonic::async_trait]
impl RuntimeService for RuntimeSvc {
    type GetContainerEventsStream = EventStream;

    async fn version(
        &self,
        _req: Request<VersionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(VersionResponse {
            version: "0.1.0".to_string(),
            runtime_name: RUNTIME_NAME.to_string(),
            runtime_version: env!("CARGO_PKG_VERSION").to_string(),
            runtime_api_version: RUNTIME_API_VERSION.to_string(),
        }))
    }

    async fn status(
        &self,
        _req: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let (net_ready, reason, message) = self.rt.cni.ready();
        let conditions = vec![
            condition("RuntimeReady", true, "", ""),
            condition("NetworkReady", net_ready, reason, &message),
        ];
        Ok(Response::new(StatusResponse {
            status: Some(RuntimeStatus { conditions }),
            runtime_handlers: vec![RuntimeHandler {
                // The default handler, the only one.
                name: String::new(),
                features: Some(HANDLER_FEATURES),
            }],
            features: Some(RuntimeFeatures {
                supplemental_groups_policy: true,
            }),
            ..Default::default()
        }))
    }

    async fn run_pod_sandbox(
        &self,
        req: Request<RunPodSandboxRequest>,
    ) -> Result<Response<RunPodSandboxResponse>, Status> {
        let config = req
            .into_inner()
            .config
            .ok_or_else(|| Error::InvalidArgument("config: required".into()))?;
        let rt = self.rt.clone();
        let pod_sandbox_id = to_completion(async move { rt.run_pod_sandbox(config).await }).await?;
        Ok(Response::new(RunPodSandboxResponse { pod_sandbox_id }))
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<StopPodSandboxRequest>,
    ) -> Result<Response<StopPodSandboxResponse>, Status> {
        let id = req.into_inner().pod_sandbox_id;
        id_of(&id, "pod_sandbox_id")?;
        let rt = self.rt.clone();
        to_completion(async move { rt.stop_pod_sandbox(&id).await }).await?;
        Ok(Response::new(StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<RemovePodSandboxRequest>,
    ) -> Result<Response<RemovePodSandboxResponse>, Status> {
        let id = req.into_inner().pod_sandbox_id;
        id_of(&id, "pod_sandbox_id")?;
        let rt = self.rt.clone();
        to_completion(async move { rt.remove_pod_sandbox(&id).await }).await?;
        Ok(Response::new(RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        let req = req.into_inner();
        id_of(&req.pod_sandbox_id, "pod_sandbox_id")?;
        let (status, info) = self
            .rt
            .pod_sandbox_status(&req.pod_sandbox_id, req.verbose)?;
        Ok(Response::new(PodSandboxStatusResponse {
            status: Some(status),
            // CRI's verbose info: JSON documents by key, as containerd's.
            info: info
                .map(|i| [("info".to_string(), i.to_string())].into())
                .unwrap_or_default(),
            ..Default::default()
        }))
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        Ok(Response::new(ListPodSandboxResponse {
            items: self.rt.list_pod_sandbox(req.into_inner().filter),
        }))
    }

    async fn create_container(
        &self,
        req: Request<CreateContainerRequest>,
    ) -> Result<Response<CreateContainerResponse>, Status> {
        let req = req.into_inner();
        id_of(&req.pod_sandbox_id, "pod_sandbox_id")?;
        let config = req
            .config
            .ok_or_else(|| Error::InvalidArgument("config: required".into()))?;
        let rt = self.rt.clone();
        let container_id = to_completion(async move {
            rt.create_container(&req.pod_sandbox_id, config, req.sandbox_config)
                .await
        })
        .await?;
        Ok(Response::new(CreateContainerResponse { container_id }))
    }

    async fn start_container(
        &self,
        req: Request<StartContainerRequest>,
    ) -> Result<Response<StartContainerResponse>, Status> {
        let id = req.into_inner().container_id;
        id_of(&id, "container_id")?;
        let rt = self.rt.clone();
        to_completion(async move { rt.start_container(&id).await }).await?;
        Ok(Response::new(StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        req: Request<StopContainerRequest>,
    ) -> Result<Response<StopContainerResponse>, Status> {
        let req = req.into_inner();
        id_of(&req.container_id, "container_id")?;
        let rt = self.rt.clone();
        to_completion(async move { rt.stop_container(&req.container_id, req.timeout).await })
            .await?;
        Ok(Response::new(StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        req: Request<RemoveContainerRequest>,
    ) -> Result<Response<RemoveContainerResponse>, Status> {
        let id = req.into_inner().container_id;
        id_of(&id, "container_id")?;
        let rt = self.rt.clone();
        to_completion(async move { rt.remove_container(&id).await }).await?;
        Ok(Response::new(RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        req: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        Ok(Response::new(ListContainersResponse {
            containers: self.rt.list_containers(req.into_inner().filter),
        }))
    }

    async fn container_status(
        &self,
        req: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        let id = req.into_inner().container_id;
        id_of(&id, "container_id")?;
        Ok(Response::new(ContainerStatusResponse {
            status: Some(self.rt.container_status(&id)?),
            ..Default::default()
        }))
    }

    async fn update_container_resources(
        &self,
        req: Request<UpdateContainerResourcesRequest>,
    ) -> Result<Response<UpdateContainerResourcesResponse>, Status> {
        let req = req.into_inner();
        id_of(&req.container_id, "container_id")?;
        let linux = req
            .linux
            .ok_or_else(|| Error::InvalidArgument("linux: required".into()))?;
        self.rt
            .update_container_resources(&req.container_id, linux)?;
        Ok(Response::new(UpdateContainerResourcesResponse {}))
    }

    async fn reopen_container_log(
        &self,
        req: Request<ReopenContainerLogRequest>,
    ) -> Result<Response<ReopenContainerLogResponse>, Status> {
        let id = req.into_inner().container_id;
        id_of(&id, "container_id")?;
        let rt = self.rt.clone();
        to_completion(async move { rt.reopen_container_log(&id).await }).await?;
        Ok(Response::new(ReopenContainerLogResponse {}))
    }

    async fn exec_sync(
        &self,
        req: Request<ExecSyncRequest>,
    ) -> Result<Response<ExecSyncResponse>, Status> {
        let req = req.into_inner();
        id_of(&req.container_id, "container_id")?;
        let (stdout, stderr, exit_code) = self
            .rt
            .exec_sync(&req.container_id, req.cmd, req.timeout)
            .await?;
        Ok(Response::new(ExecSyncResponse {
            stdout,
            stderr,
            exit_code,
        }))
    }

    async fn runtime_config(
        &self,
        _req: Request<RuntimeConfigRequest>,
    ) -> Result<Response<RuntimeConfigResponse>, Status> {
        Ok(Response::new(RuntimeConfigResponse {
            linux: Some(LinuxRuntimeConfiguration {
                cgroup_driver: CgroupDriver::Cgroupfs as i32,
            }),
        }))
    }

    async fn update_runtime_config(
        &self,
        _req: Request<UpdateRuntimeConfigRequest>,
    ) -> Result<Response<UpdateRuntimeConfigResponse>, Status> {
        // The pod CIDR matters to CNI, which is not implemented yet; accept it.
        Ok(Response::new(UpdateRuntimeConfigResponse {}))
    }

    async fn get_container_events(
        &self,
        _req: Request<GetEventsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let rx = tokio_stream::wrappers::BroadcastStream::new(self.rt.subscribe());
        // A client too slow for the buffer (1024 events) gets an error that
        // ends the stream rather than a silent gap: it must relist.
        let stream = rx.map(|e| {
            e.map_err(|lag| {
                Status::resource_exhausted(format!(
                    "container events lost ({lag}): relist and subscribe again"
                ))
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn exec(&self, req: Request<ExecRequest>) -> Result<Response<ExecResponse>, Status> {
        let r = req.into_inner();
        id_of(&r.container_id, "container_id")?;
        // As containerd: the container must exist now; running is checked
        // when the client connects.
        self.rt.container_status(&r.container_id)?;
        let channels = Channels {
            stdin: r.stdin,
            stdout: r.stdout,
            stderr: r.stderr,
            tty: r.tty,
        };
        let url = self.streaming.exec_url(r.container_id, r.cmd, channels)?;
        Ok(Response::new(ExecResponse { url }))
    }

    async fn attach(
        &self,
        req: Request<AttachRequest>,
    ) -> Result<Response<AttachResponse>, Status> {
        let r = req.into_inner();
        id_of(&r.container_id, "container_id")?;
        self.rt.container_status(&r.container_id)?;
        let channels = Channels {
            stdin: r.stdin,
            stdout: r.stdout,
            stderr: r.stderr,
            tty: r.tty,
        };
        let url = self.streaming.attach_url(r.container_id, channels)?;
        Ok(Response::new(AttachResponse { url }))
    }

    async fn port_forward(
        &self,
        req: Request<PortForwardRequest>,
    ) -> Result<Response<PortForwardResponse>, Status> {
        let r = req.into_inner();
        id_of(&r.pod_sandbox_id, "pod_sandbox_id")?;
        self.rt.pod_sandbox_status(&r.pod_sandbox_id, false)?;
        let url = self.streaming.port_forward_url(r.pod_sandbox_id)?;
        Ok(Response::new(PortForwardResponse { url }))
    }

    async fn container_stats(
        &self,
        req: Request<ContainerStatsRequest>,
    ) -> Result<Response<ContainerStatsResponse>, Status> {
        let id = req.into_inner().container_id;
        id_of(&id, "container_id")?;
        Ok(Response::new(ContainerStatsResponse {
            stats: Some(self.rt.container_stats(&id)?),
        }))
    }

    async fn list_container_stats(
        &self,
        req: Request<ListContainerStatsRequest>,
    ) -> Result<Response<ListContainerStatsResponse>, Status> {
        Ok(Response::new(ListContainerStatsResponse {
            stats: self.rt.list_container_stats(req.into_inner().filter),
        }))
    }

    async fn pod_sandbox_stats(
        &self,
        req: Request<PodSandboxStatsRequest>,
    ) -> Result<Response<PodSandboxStatsResponse>, Status> {
        let id = req.into_inner().pod_sandbox_id;
        id_of(&id, "pod_sandbox_id")?;
        Ok(Response::new(PodSandboxStatsResponse {
            stats: Some(self.rt.pod_sandbox_stats(&id)?),
        }))
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: Request<ListPodSandboxStatsRequest>,
    ) -> Result<Response<ListPodSandboxStatsResponse>, Status> {
        Ok(Response::new(ListPodSandboxStatsResponse {
            stats: self.rt.list_pod_sandbox_stats(req.into_inner().filter),
        }))
    }

    async fn checkpoint_container(
        &self,
        _req: Request<CheckpointContainerRequest>,
    ) -> Result<Response<CheckpointContainerResponse>, Status> {
        unimplemented("CheckpointContainer")
    }

    async fn list_metric_descriptors(
        &self,
        _req: Request<ListMetricDescriptorsRequest>,
    ) -> Result<Response<ListMetricDescriptorsResponse>, Status> {
        Ok(Response::new(ListMetricDescriptorsResponse {
            descriptors: crate::service::metrics::descriptors(),
        }))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _req: Request<ListPodSandboxMetricsRequest>,
    ) -> Result<Response<ListPodSandboxMetricsResponse>, Status> {
        Ok(Response::new(ListPodSandboxMetricsResponse {
            pod_metrics: self.rt.list_pod_sandbox_metrics(),
        }))
    }
}
