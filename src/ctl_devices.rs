//! `picolet ctl devices`: each device the node has (the pod-resources
//! API's allocatable devices) and which pod's container holds it, read
//! from the agent's pod-resources socket.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use cri_proto::podresources::pod_resources_lister_client::PodResourcesListerClient;
use cri_proto::podresources::{AllocatableResourcesRequest, ListPodResourcesRequest};

use crate::ctl_out::stdout_error;

/// One row: resource, device, holder (`namespace/pod container`).
pub type Row = (String, String, Option<(String, String)>);

pub async fn devices(socket: &Path) -> Result<()> {
    let channel = cri_proto::connect(socket).await.with_context(|| {
        format!(
            "is the agent running? (pod-resources at {})",
            socket.display()
        )
    })?;
    let mut client = PodResourcesListerClient::new(channel);
    let allocatable = client
        .get_allocatable_resources(AllocatableResourcesRequest {})
        .await
        .context("GetAllocatableResources")?
        .into_inner();
    let listed = client
        .list(ListPodResourcesRequest {})
        .await
        .context("List")?
        .into_inner();
    let mut rows: BTreeMap<(String, String), Option<(String, String)>> = BTreeMap::new();
    for d in allocatable.devices {
        for id in d.device_ids {
            rows.insert((d.resource_name.clone(), id), None);
        }
    }
    for p in listed.pod_resources {
        for c in p.containers {
            for d in c.devices {
                for id in d.device_ids {
                    let pod = format!("{}/{}", p.namespace, p.name);
                    rows.insert((d.resource_name.clone(), id), Some((pod, c.name.clone())));
                }
            }
        }
    }
    let rows: Vec<Row> = rows.into_iter().map(|((r, id), h)| (r, id, h)).collect();
    print!("{}", table(&rows));
    std::io::stdout().flush().map_err(stdout_error)
}

/// The table `ctl devices` prints.
pub fn table(rows: &[Row]) -> String {
    let w = |f: &dyn Fn(&Row) -> usize, head: &str| {
        rows.iter().map(f).max().unwrap_or(0).max(head.len())
    };
    let (wr, wd, wp) = (
        w(&|r| r.0.len(), "RESOURCE"),
        w(&|r| r.1.len(), "DEVICE"),
        w(&|r| r.2.as_ref().map_or(1, |h| h.0.len()), "POD"),
    );
    let mut out = format!(
        "{:wr$}  {:wd$}  {:wp$}  CONTAINER\n",
        "RESOURCE", "DEVICE", "POD"
    );
    for (r, id, holder) in rows {
        let (pod, c) = holder
            .as_ref()
            .map_or(("-", "-"), |(p, c)| (p.as_str(), c.as_str()));
        out.push_str(&format!("{r:wr$}  {id:wd$}  {pod:wp$}  {c}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_devices_show_no_holder() {
        let rows = vec![
            (
                "devices.picolet.io/serial".to_string(),
                "ttyUSB0-1a2b".to_string(),
                Some(("default/gps".to_string(), "reader".to_string())),
            ),
            (
                "devices.picolet.io/serial".to_string(),
                "ttyUSB1-3c4d".to_string(),
                None,
            ),
        ];
        assert_eq!(
            table(&rows),
            "RESOURCE                   DEVICE        POD          CONTAINER\n\
             devices.picolet.io/serial  ttyUSB0-1a2b  default/gps  reader\n\
             devices.picolet.io/serial  ttyUSB1-3c4d  -            -\n"
        );
    }
}
