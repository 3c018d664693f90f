//! kubelet's pod-resources API (`pkg/kubelet/apis/podresources`, v1) on
//! `<dataDir>/pod-resources/kubelet.sock`: List (every pod the agent runs,
//! each container with the devices it holds), Get (one pod by name and
//! namespace) and GetAllocatableResources (the healthy devices of each
//! resource) — what monitoring agents read to put a device's metrics on
//! the pod that holds it.

use std::collections::BTreeMap;
use std::path::Path;

use cri_proto::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use cri_proto::podresources::*;
use k8s_openapi::api::core::v1::Pod;
use tonic::{Request, Response, Status};

use crate::devicemanager::{Holding, Manager};
use crate::status;

/// The socket's name in its directory, as kubelet's.
pub const SOCKET: &str = "kubelet.sock";

/// Serves the API on `<dir>/kubelet.sock` from now on.
pub fn serve(
    dir: &Path,
    devices: Manager,
    statuses: status::Manager,
) -> Result<(), cri_proto::SocketError> {
    let incoming = cri_proto::listen(dir.join(SOCKET))?;
    let service = Lister { devices, statuses };
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(service))
            .serve_with_incoming(incoming)
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "pod-resources API");
        }
    });
    Ok(())
}

struct Lister {
    devices: Manager,
    statuses: status::Manager,
}

impl Lister {
    /// What `pod` holds, every container listed (kubelet lists those with
    /// no device too).
    fn resources_of(&self, pod: &Pod, held: &BTreeMap<String, Vec<Holding>>) -> PodResources {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let names = spec.into_iter().flat_map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
                .map(|c| c.name.clone())
        });
        let mine = held.get(uid);
        PodResources {
            name: pod.metadata.name.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            containers: names
                .map(|name| ContainerResources {
                    devices: mine
                        .into_iter()
                        .flatten()
                        .filter(|h| h.container == name)
                        .map(|h| ContainerDevices {
                            resource_name: h.resource.clone(),
                            device_ids: h.ids.clone(),
                            topology: None,
                        })
                        .collect(),
                    name,
                })
                .collect(),
        }
    }

    /// Allocations by pod UID.
    fn held(&self) -> BTreeMap<String, Vec<Holding>> {
        let mut by_pod: BTreeMap<String, Vec<Holding>> = BTreeMap::new();
        for h in self.devices.allocations() {
            by_pod.entry(h.pod_uid.clone()).or_default().push(h);
        }
        by_pod
    }

    /// The pods that hold resources: not finished ones (kubelet lists
    /// active pods).
    fn active(&self) -> Vec<Pod> {
        self.statuses
            .pods()
            .into_iter()
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                !phase.is_some_and(crate::phase::is_terminal)
            })
            .collect()
    }
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        let held = self.held();
        let pod_resources = self
            .active()
            .iter()
            .map(|p| self.resources_of(p, &held))
            .collect();
        Ok(Response::new(ListPodResourcesResponse { pod_resources }))
    }

    async fn get(
        &self,
        req: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        let r = req.into_inner();
        let pod = self.active().into_iter().find(|p| {
            p.metadata.name.as_deref() == Some(&r.pod_name)
                && p.metadata.namespace.as_deref() == Some(&r.pod_namespace)
        });
        let Some(pod) = pod else {
            return Err(Status::not_found(format!(
                "pod {} in namespace {} not found",
                r.pod_name, r.pod_namespace
            )));
        };
        Ok(Response::new(GetPodResourcesResponse {
            pod_resources: Some(self.resources_of(&pod, &self.held())),
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        let devices = self
            .devices
            .healthy()
            .into_iter()
            .map(|(resource_name, device_ids)| ContainerDevices {
                resource_name,
                device_ids,
                topology: None,
            })
            .collect();
        Ok(Response::new(AllocatableResourcesResponse { devices }))
    }
}
