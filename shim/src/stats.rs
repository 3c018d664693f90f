//! CRI container stats from the container's cgroup and writable layer.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cri_proto::v1::{
    ContainerAttributes, ContainerStats, ContainerStatsFilter, CpuUsage, FilesystemIdentifier,
    FilesystemUsage, MemoryUsage, UInt64Value,
};

use crate::cgroupfs;
use crate::error::Error;
use crate::runtime::Runtime;
use crate::state::{self, ContainerRecord};

fn u(value: u64) -> Option<UInt64Value> {
    Some(UInt64Value { value })
}

/// Bytes (allocated blocks) and inodes under a directory, hard links once.
fn disk_usage(dir: &Path) -> (u64, u64) {
    let mut seen = std::collections::HashSet::new();
    let (mut bytes, mut inodes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if seen.insert((m.dev(), m.ino())) {
                bytes += m.blocks() * 512;
                inodes += 1;
            }
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    (bytes, inodes)
}

impl Runtime {
    fn stats_of(
        &self,
        rec: &ContainerRecord,
        last: &mut HashMap<String, (i64, u64)>,
    ) -> ContainerStats {
        let now = state::now_nanos();
        let attributes = Some(ContainerAttributes {
            id: rec.id.clone(),
            metadata: rec.config.metadata.clone(),
            labels: rec.config.labels.clone(),
            annotations: rec.config.annotations.clone(),
        });
        let (cpu, memory) = match cgroupfs::sample(&rec.cgroup) {
            Some(s) => {
                // usage_nano_cores needs two samples: rate since the last one.
                let nano_cores = last.get(&rec.id).and_then(|(t, c)| {
                    let dt = now.checked_sub(*t).filter(|d| *d > 0)? as u128;
                    Some((u128::from(s.cpu_ns.saturating_sub(*c)) * 1_000_000_000 / dt) as u64)
                });
                last.insert(rec.id.clone(), (now, s.cpu_ns));
                (
                    Some(CpuUsage {
                        timestamp: now,
                        usage_core_nano_seconds: u(s.cpu_ns),
                        usage_nano_cores: nano_cores.and_then(u),
                    }),
                    Some(MemoryUsage {
                        timestamp: now,
                        working_set_bytes: u(s.working_set),
                        available_bytes: s
                            .memory_limit
                            .and_then(|l| u(l.saturating_sub(s.working_set))),
                        usage_bytes: u(s.memory_usage),
                        rss_bytes: u(s.rss),
                        page_faults: u(s.page_faults),
                        major_page_faults: u(s.major_page_faults),
                    }),
                )
            }
            None => (None, None),
        };
        let upper = rec.dir.join("upper");
        let (bytes, inodes) = disk_usage(&upper);
        ContainerStats {
            attributes,
            cpu,
            memory,
            writable_layer: Some(FilesystemUsage {
                timestamp: now,
                fs_id: Some(FilesystemIdentifier {
                    mountpoint: upper.display().to_string(),
                }),
                used_bytes: u(bytes),
                inodes_used: u(inodes),
            }),
            swap: None,
        }
    }

    pub fn container_stats(&self, id: &str) -> Result<ContainerStats, Error> {
        let rec = self.container(id)?;
        let mut last = self.cpu_samples.lock().unwrap_or_else(|p| p.into_inner());
        Ok(self.stats_of(&rec, &mut last))
    }

    pub fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Vec<ContainerStats> {
        let f = filter.unwrap_or_default();
        let recs: Vec<ContainerRecord> = self
            .all_containers()
            .into_iter()
            .filter(|c| c.matches(&f.id, &f.pod_sandbox_id, &f.label_selector))
            .collect();
        let mut last = self.cpu_samples.lock().unwrap_or_else(|p| p.into_inner());
        recs.iter()
            .filter(|r| self.state_of(r).0 == cri_proto::v1::ContainerState::ContainerRunning)
            .map(|r| self.stats_of(r, &mut last))
            .collect()
    }
}
