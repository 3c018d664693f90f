//! CRI RuntimeService. Today only Version and Status answer; every other RPC
//! returns UNIMPLEMENTED until the runtime issue (sandboxes and containers
//! with libcontainer) lands. Status says so honestly: RuntimeReady is false.

use std::pin::Pin;

use cri_proto::v1::{
    AttachRequest, AttachResponse, CheckpointContainerRequest, CheckpointContainerResponse,
    ContainerEventResponse, ContainerStatsRequest, ContainerStatsResponse, ContainerStatusRequest,
    ContainerStatusResponse, CreateContainerRequest, CreateContainerResponse, ExecRequest,
    ExecResponse, ExecSyncRequest, ExecSyncResponse, GetEventsRequest, ListContainerStatsRequest,
    ListContainerStatsResponse, ListContainersRequest, ListContainersResponse,
    ListMetricDescriptorsRequest, ListMetricDescriptorsResponse, ListPodSandboxMetricsRequest,
    ListPodSandboxMetricsResponse, ListPodSandboxRequest, ListPodSandboxResponse,
    ListPodSandboxStatsRequest, ListPodSandboxStatsResponse, PodSandboxStatsRequest,
    PodSandboxStatsResponse, PodSandboxStatusRequest, PodSandboxStatusResponse, PortForwardRequest,
    PortForwardResponse, RemoveContainerRequest, RemoveContainerResponse, RemovePodSandboxRequest,
    RemovePodSandboxResponse, ReopenContainerLogRequest, ReopenContainerLogResponse,
    RunPodSandboxRequest, RunPodSandboxResponse, RuntimeCondition, RuntimeConfigRequest,
    RuntimeConfigResponse, RuntimeStatus, StartContainerRequest, StartContainerResponse,
    StatusRequest, StatusResponse, StopContainerRequest, StopContainerResponse,
    StopPodSandboxRequest, StopPodSandboxResponse, UpdateContainerResourcesRequest,
    UpdateContainerResourcesResponse, UpdateRuntimeConfigRequest, UpdateRuntimeConfigResponse,
    VersionRequest, VersionResponse, runtime_service_server::RuntimeService,
};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::error::Error;

/// Name reported by Version.
pub const RUNTIME_NAME: &str = "picolet";
/// CRI API version served.
pub const RUNTIME_API_VERSION: &str = "v1";

/// Serves CRI RuntimeService.
#[derive(Debug, Clone, Default)]
pub struct RuntimeSvc;

type EventStream = Pin<Box<dyn Stream<Item = Result<ContainerEventResponse, Status>> + Send>>;

fn condition(kind: &str, status: bool, reason: &str, message: &str) -> RuntimeCondition {
    RuntimeCondition {
        r#type: kind.to_string(),
        status,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

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
        let conditions = vec![
            condition(
                "RuntimeReady",
                false,
                "ContainerRuntimeNotImplemented",
                "picolet serves images only; sandboxes and containers are not implemented yet",
            ),
            condition(
                "NetworkReady",
                false,
                "NetworkNotImplemented",
                "pod networking is not implemented yet",
            ),
        ];
        Ok(Response::new(StatusResponse {
            status: Some(RuntimeStatus { conditions }),
            ..Default::default()
        }))
    }

    async fn get_container_events(
        &self,
        _req: Request<GetEventsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        Err(Error::Unimplemented("GetContainerEvents").into())
    }

    async fn run_pod_sandbox(
        &self,
        _req: Request<RunPodSandboxRequest>,
    ) -> Result<Response<RunPodSandboxResponse>, Status> {
        Err(Error::Unimplemented("RunPodSandbox").into())
    }
    async fn stop_pod_sandbox(
        &self,
        _req: Request<StopPodSandboxRequest>,
    ) -> Result<Response<StopPodSandboxResponse>, Status> {
        Err(Error::Unimplemented("StopPodSandbox").into())
    }
    async fn remove_pod_sandbox(
        &self,
        _req: Request<RemovePodSandboxRequest>,
    ) -> Result<Response<RemovePodSandboxResponse>, Status> {
        Err(Error::Unimplemented("RemovePodSandbox").into())
    }
    async fn pod_sandbox_status(
        &self,
        _req: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        Err(Error::Unimplemented("PodSandboxStatus").into())
    }
    async fn list_pod_sandbox(
        &self,
        _req: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        Err(Error::Unimplemented("ListPodSandbox").into())
    }
    async fn create_container(
        &self,
        _req: Request<CreateContainerRequest>,
    ) -> Result<Response<CreateContainerResponse>, Status> {
        Err(Error::Unimplemented("CreateContainer").into())
    }
    async fn start_container(
        &self,
        _req: Request<StartContainerRequest>,
    ) -> Result<Response<StartContainerResponse>, Status> {
        Err(Error::Unimplemented("StartContainer").into())
    }
    async fn stop_container(
        &self,
        _req: Request<StopContainerRequest>,
    ) -> Result<Response<StopContainerResponse>, Status> {
        Err(Error::Unimplemented("StopContainer").into())
    }
    async fn remove_container(
        &self,
        _req: Request<RemoveContainerRequest>,
    ) -> Result<Response<RemoveContainerResponse>, Status> {
        Err(Error::Unimplemented("RemoveContainer").into())
    }
    async fn list_containers(
        &self,
        _req: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        Err(Error::Unimplemented("ListContainers").into())
    }
    async fn container_status(
        &self,
        _req: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        Err(Error::Unimplemented("ContainerStatus").into())
    }
    async fn update_container_resources(
        &self,
        _req: Request<UpdateContainerResourcesRequest>,
    ) -> Result<Response<UpdateContainerResourcesResponse>, Status> {
        Err(Error::Unimplemented("UpdateContainerResources").into())
    }
    async fn reopen_container_log(
        &self,
        _req: Request<ReopenContainerLogRequest>,
    ) -> Result<Response<ReopenContainerLogResponse>, Status> {
        Err(Error::Unimplemented("ReopenContainerLog").into())
    }
    async fn exec_sync(
        &self,
        _req: Request<ExecSyncRequest>,
    ) -> Result<Response<ExecSyncResponse>, Status> {
        Err(Error::Unimplemented("ExecSync").into())
    }
    async fn exec(&self, _req: Request<ExecRequest>) -> Result<Response<ExecResponse>, Status> {
        Err(Error::Unimplemented("Exec").into())
    }
    async fn attach(
        &self,
        _req: Request<AttachRequest>,
    ) -> Result<Response<AttachResponse>, Status> {
        Err(Error::Unimplemented("Attach").into())
    }
    async fn port_forward(
        &self,
        _req: Request<PortForwardRequest>,
    ) -> Result<Response<PortForwardResponse>, Status> {
        Err(Error::Unimplemented("PortForward").into())
    }
    async fn container_stats(
        &self,
        _req: Request<ContainerStatsRequest>,
    ) -> Result<Response<ContainerStatsResponse>, Status> {
        Err(Error::Unimplemented("ContainerStats").into())
    }
    async fn list_container_stats(
        &self,
        _req: Request<ListContainerStatsRequest>,
    ) -> Result<Response<ListContainerStatsResponse>, Status> {
        Err(Error::Unimplemented("ListContainerStats").into())
    }
    async fn pod_sandbox_stats(
        &self,
        _req: Request<PodSandboxStatsRequest>,
    ) -> Result<Response<PodSandboxStatsResponse>, Status> {
        Err(Error::Unimplemented("PodSandboxStats").into())
    }
    async fn list_pod_sandbox_stats(
        &self,
        _req: Request<ListPodSandboxStatsRequest>,
    ) -> Result<Response<ListPodSandboxStatsResponse>, Status> {
        Err(Error::Unimplemented("ListPodSandboxStats").into())
    }
    async fn update_runtime_config(
        &self,
        _req: Request<UpdateRuntimeConfigRequest>,
    ) -> Result<Response<UpdateRuntimeConfigResponse>, Status> {
        Err(Error::Unimplemented("UpdateRuntimeConfig").into())
    }
    async fn checkpoint_container(
        &self,
        _req: Request<CheckpointContainerRequest>,
    ) -> Result<Response<CheckpointContainerResponse>, Status> {
        Err(Error::Unimplemented("CheckpointContainer").into())
    }
    async fn list_metric_descriptors(
        &self,
        _req: Request<ListMetricDescriptorsRequest>,
    ) -> Result<Response<ListMetricDescriptorsResponse>, Status> {
        Err(Error::Unimplemented("ListMetricDescriptors").into())
    }
    async fn list_pod_sandbox_metrics(
        &self,
        _req: Request<ListPodSandboxMetricsRequest>,
    ) -> Result<Response<ListPodSandboxMetricsResponse>, Status> {
        Err(Error::Unimplemented("ListPodSandboxMetrics").into())
    }
    async fn runtime_config(
        &self,
        _req: Request<RuntimeConfigRequest>,
    ) -> Result<Response<RuntimeConfigResponse>, Status> {
        Err(Error::Unimplemented("RuntimeConfig").into())
    }
}
