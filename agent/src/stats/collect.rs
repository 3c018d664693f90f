//! Reading a [`Snapshot`] now: the root cgroup, each pod cgroup and each
//! running container from cgroupfs, their processes, sockets and network
//! devices from /proc.

use super::Stats as Readers;
use super::cadvisor::{Entry, Labels, Machine, Snapshot};
use cgroup::procfs::{self};

/// Reads the root cgroup now and, with `pods`, each pod cgroup and each
/// running container.
pub(crate) fn collect(shared: &Readers, pods: bool) -> Snapshot {
    let mut snap = Snapshot {
        machine: shared.machine().clone(),
        entries: Vec::new(),
        timestamp_ms: i64::try_from(crate::clock::now().as_millis()).unwrap_or(0),
        scrape_error: false,
    };
    let Some(h) = shared.cgroups.as_ref() else {
        snap.scrape_error = true;
        return snap;
    };
    let ooms = shared.ooms.snapshot();
    // `pids`: the processes to count and whose network namespace to read
    // (none for the root cgroup).
    let mut push = |labels: Labels, start_time: f64, pids: &[u32]| {
        if let Some(stats) = h.stats(&labels.id) {
            // Kills in this cgroup or below it (a pod counts its
            // containers'; the root only kills outside any cgroup).
            let below = format!("{}/", labels.id);
            let oom_events = ooms
                .iter()
                .filter(|(m, _)| **m == labels.id || (labels.id != "/" && m.starts_with(&below)))
                .map(|(_, n)| n)
                .sum();
            let (threads, fds, sockets) = procfs::process_counts(pids);
            // Network: the node's for the root, the pod namespace's for a
            // pod cgroup; none per app container (kubelet's cAdvisor puts
            // it on the sandbox, so sums by pod count it once).
            let network = if labels.id == "/" {
                procfs::net_dev(1)
            } else if labels.container.is_empty() {
                pids.first()
                    .map(|p| procfs::net_dev(*p))
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            snap.entries.push(Entry {
                labels,
                stats,
                oom_events,
                start_time,
                network,
                threads,
                fds,
                sockets,
            });
        }
    };
    push(
        Labels {
            id: "/".into(),
            ..Default::default()
        },
        0.0,
        &[],
    );
    if !pods || !shared.config.cgroups_per_qos {
        return snap;
    }
    for pod in shared.statuses.pods() {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(status) = pod.status.as_ref() else {
            continue;
        };
        let qos = match status.qos_class.as_deref() {
            Some("Guaranteed") => crate::qos::Qos::Guaranteed,
            Some("Burstable") => crate::qos::Qos::Burstable,
            _ => crate::qos::Qos::BestEffort,
        };
        let parent = crate::qos::pod_cgroup_parent(&shared.config.cgroup_root, qos, &uid);
        let spec_images: std::collections::HashMap<&str, String> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .filter_map(|c| Some((c.name.as_str(), c.image.clone()?)))
            .collect();
        let mut containers = Vec::new();
        for cs in status.container_statuses.iter().flatten() {
            let Some(running) = cs.state.as_ref().and_then(|s| s.running.as_ref()) else {
                continue;
            };
            let Some(id) = cs
                .container_id
                .as_deref()
                .and_then(|c| c.split_once("://"))
                .map(|(_, id)| id.to_string())
            else {
                continue;
            };
            let start = running
                .started_at
                .as_ref()
                .map(|t| t.0.as_second() as f64)
                .unwrap_or(0.0);
            let path = format!("{parent}/{id}");
            let pids = h.procs(&path);
            containers.push((
                Labels {
                    container: cs.name.clone(),
                    id: path,
                    // The image as the pod names it (the status holds the
                    // runtime's image ID).
                    image: spec_images
                        .get(cs.name.as_str())
                        .cloned()
                        .unwrap_or_else(|| cs.image.clone()),
                    name: id,
                    namespace: namespace.clone(),
                    pod: name.clone(),
                },
                start,
                pids,
            ));
        }
        // The pod cgroup: every container's processes (and their netns).
        let all: Vec<u32> = containers.iter().flat_map(|c| c.2.clone()).collect();
        push(
            Labels {
                id: parent.clone(),
                namespace: namespace.clone(),
                pod: name.clone(),
                ..Default::default()
            },
            0.0,
            &all,
        );
        for (labels, start, pids) in containers {
            push(labels, start, &pids);
        }
    }
    snap
}

/// What the node is, read once: cores and sockets from /proc/cpuinfo (whose
/// read makes the kernel ask every CPU its clock), swap, the boot ID, the
/// machine's UUID.
pub(crate) fn machine(shared: &Readers) -> Machine {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let (physical_cores, sockets) = procfs::parse_cpuinfo(&read("/proc/cpuinfo"));
    Machine {
        physical_cores,
        sockets,
        swap_bytes: procfs::meminfo_bytes(&read("/proc/meminfo"), "SwapTotal"),
        cores: u64::try_from(shared.node.cpu_milli / 1000).unwrap_or(0),
        memory_bytes: u64::try_from(shared.node.memory_bytes).unwrap_or(0),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        system_uuid: read("/sys/class/dmi/id/product_uuid"),
    }
}
