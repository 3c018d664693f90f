//! Containers: CRI config → OCI spec → `picolet monitor` (`crate::process::init`
//! create) → start on the init's notify socket, stop by a pidfd of the
//! init, remove by the cgroup and folders.

use cri_proto::v1::{
    Container, ContainerFilter, ContainerState, ContainerStatus, ContainerUser, ImageSpec,
    LinuxContainerUser,
};
use nix::sys::signal::Signal;

use crate::error::Error;
use crate::host::proc_start_time;
use crate::mutex::lock;
use crate::runtime::{ContainerEntry, Runtime};
use crate::state::{self, ContainerRecord, EXIT, ExitRecord, META};

mod create;
mod remove;
mod rootfs;
mod start;
mod stop;
mod update;

impl Runtime {
    /// A snapshot of every container record.
    pub(crate) fn all_containers(&self) -> Vec<ContainerRecord> {
        lock(&self.containers)
            .values()
            .map(|e| e.record.clone())
            .collect()
    }

    pub(crate) fn container(&self, id: &str) -> Result<ContainerRecord, Error> {
        lock(&self.containers)
            .get(id)
            .map(|e| e.record.clone())
            .ok_or_else(|| Error::NotFound(format!("container {id:?} not found")))
    }

    /// Runs `f` on the container's entry, if it is still there.
    pub(crate) fn with_entry<R>(
        &self,
        id: &str,
        f: impl FnOnce(&mut ContainerEntry) -> R,
    ) -> Option<R> {
        lock(&self.containers).get_mut(id).map(f)
    }

    fn put(&self, rec: ContainerRecord) -> Result<(), Error> {
        state::save(&rec.dir, META, &rec)?;
        self.keep(rec);
        Ok(())
    }

    /// Makes `rec` the container's record in memory (what the shim
    /// learned of it stays); its file is written.
    fn keep(&self, rec: ContainerRecord) {
        match lock(&self.containers).entry(rec.id.clone()) {
            std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().record = rec,
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(ContainerEntry::new(rec));
            }
        }
    }

    /// The exit record, if the container has exited.
    fn exit_of(&self, rec: &ContainerRecord) -> Option<ExitRecord> {
        let cached = self.with_entry(&rec.id, |e| e.exit.clone()).flatten();
        if cached.is_some() {
            return cached;
        }
        let exit = state::load::<ExitRecord>(&rec.dir.join(EXIT))
            .ok()
            .flatten()?;
        self.remember_exit(&rec.id, &exit);
        Some(exit)
    }

    fn remember_exit(&self, id: &str, exit: &ExitRecord) {
        self.with_entry(id, |e| e.exit = Some(exit.clone()));
    }

    /// Current state; repairs the record when the monitor died unseen.
    pub(crate) fn state_of(&self, rec: &ContainerRecord) -> (ContainerState, Option<ExitRecord>) {
        if !rec.complete {
            return (ContainerState::ContainerUnknown, None);
        }
        let started = || {
            if rec.started_at.is_some() {
                ContainerState::ContainerRunning
            } else {
                ContainerState::ContainerCreated
            }
        };
        // Its monitor is alive and we hear when it exits. It records the
        // exit first (and then ends an attach), so while it is watched the
        // record's absence, one stat, says the container still runs: no
        // /proc reads. Once the record is there a status says Exited, as
        // before, not only once the monitor is reaped.
        if self.monitors.is_watched(&rec.id)
            && std::fs::symlink_metadata(rec.dir.join(EXIT)).is_err()
        {
            return (started(), None);
        }
        if let Some(exit) = self.exit_of(rec) {
            return (ContainerState::ContainerExited, Some(exit));
        }
        // A pid counts only with the start time we recorded: pids get reused.
        let alive = |pid: Option<i32>, start: Option<u64>| {
            pid.is_some_and(|p| start.is_some() && proc_start_time(p) == start)
        };
        let init_alive = alive(rec.init_pid, rec.init_start_time);
        let monitor_alive = alive(rec.monitor_pid, rec.monitor_start_time);
        if !init_alive && !monitor_alive {
            // Nobody will ever record this exit: do it ourselves.
            let exit = ExitRecord {
                exit_code: 255,
                finished_at: state::now_nanos(),
                oom_killed: false,
                reason: Some("the container's monitor exited without recording its exit".into()),
            };
            let _ = state::save(&rec.dir, EXIT, &exit);
            self.remember_exit(&rec.id, &exit);
            return (ContainerState::ContainerExited, Some(exit));
        }
        (started(), None)
    }

    pub(crate) fn container_status_of(&self, rec: &ContainerRecord) -> ContainerStatus {
        let (st, exit) = self.state_of(rec);
        let (reason, message) = match &exit {
            Some(e) if e.oom_killed => ("OOMKilled".to_string(), String::new()),
            Some(e) if e.exit_code == 0 => ("Completed".to_string(), String::new()),
            Some(e) => ("Error".to_string(), e.reason.clone().unwrap_or_default()),
            None => (String::new(), String::new()),
        };
        ContainerStatus {
            id: rec.id.clone(),
            metadata: rec.config.metadata.clone(),
            state: st as i32,
            created_at: rec.created_at,
            started_at: rec.started_at.unwrap_or(0),
            finished_at: exit.as_ref().map_or(0, |e| e.finished_at),
            exit_code: exit.as_ref().map_or(0, |e| e.exit_code),
            // As containerd: the image's tag (kubelet shows it as the
            // container status' image), its ID when it has none.
            image: Some(ImageSpec {
                image: if rec.image_name.is_empty() {
                    rec.image_id.clone()
                } else {
                    rec.image_name.clone()
                },
                user_specified_image: rec
                    .config
                    .image
                    .as_ref()
                    .map(|i| i.image.clone())
                    .unwrap_or_default(),
                ..Default::default()
            }),
            image_ref: rec.image_ref.clone(),
            image_id: rec.image_id.clone(),
            reason,
            message,
            labels: rec.config.labels.clone(),
            annotations: rec.config.annotations.clone(),
            mounts: rec.config.mounts.clone(),
            log_path: rec
                .log_path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            resources: rec
                .config
                .linux
                .as_ref()
                .and_then(|l| l.resources.clone())
                .map(|r| cri_proto::v1::ContainerResources {
                    linux: Some(r),
                    ..Default::default()
                }),
            // As containerd: the spec's process user, its additional gids
            // as the supplemental groups.
            user: rec.user.as_ref().map(|u| ContainerUser {
                linux: Some(LinuxContainerUser {
                    uid: i64::from(u.uid),
                    gid: i64::from(u.gid),
                    supplemental_groups: u.additional_gids.iter().map(|&g| i64::from(g)).collect(),
                }),
            }),
        }
    }

    pub fn container_status(&self, id: &str) -> Result<ContainerStatus, Error> {
        Ok(self.container_status_of(&self.container(id)?))
    }

    pub fn list_containers(&self, filter: Option<ContainerFilter>) -> Vec<Container> {
        let f = filter.unwrap_or_default();
        // Only the matches are copied: a pod worker's list of its own
        // containers copied every record (configs and all) of every pod,
        // at 100 pods starting at once ~1.5 ms of the shim's CPU per pod.
        let recs: Vec<ContainerRecord> = lock(&self.containers)
            .values()
            .map(|e| &e.record)
            .filter(|c| c.matches(&f.id, &f.pod_sandbox_id, &f.label_selector))
            .cloned()
            .collect();
        let mut out: Vec<Container> = recs
            .iter()
            .map(|c| (c, self.state_of(c).0))
            .filter(|(_, st)| f.state.as_ref().is_none_or(|s| s.state == *st as i32))
            .map(|(c, st)| listed(c, st))
            .collect();
        out.sort_by_key(|c| c.created_at);
        out
    }
}

/// A container as ListContainers shows it, as containerd's: the image spec
/// the client gave, and the image's ID as `image_ref` (the kubelet's image
/// GC counts an image as in use by that ID).
fn listed(c: &ContainerRecord, st: ContainerState) -> Container {
    Container {
        id: c.id.clone(),
        pod_sandbox_id: c.sandbox_id.clone(),
        metadata: c.config.metadata.clone(),
        image: c.config.image.clone(),
        image_ref: c.image_id.clone(),
        state: st as i32,
        created_at: c.created_at,
        labels: c.config.labels.clone(),
        annotations: c.config.annotations.clone(),
        image_id: c.image_id.clone(),
    }
}

fn state_name(s: ContainerState) -> &'static str {
    match s {
        ContainerState::ContainerCreated => "created",
        ContainerState::ContainerRunning => "running",
        ContainerState::ContainerExited => "exited",
        ContainerState::ContainerUnknown => "unknown",
    }
}

/// `SIGTERM`, `TERM` or `15`.
pub fn parse_signal(s: &str) -> Option<Signal> {
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n).ok();
    }
    let up = s.to_ascii_uppercase();
    let name = if up.starts_with("SIG") {
        up
    } else {
        format!("SIG{up}")
    };
    name.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use cri_proto::v1::ContainerConfig;

    use super::*;

    #[test]
    fn signals() {
        assert_eq!(parse_signal("SIGTERM"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("quit"), Some(Signal::SIGQUIT));
        assert_eq!(parse_signal("9"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("SIGNOPE"), None);
    }

    #[test]
    fn listed_containers_carry_the_clients_image_spec_and_the_image_id_as_ref() {
        let rec = ContainerRecord {
            id: "c1".into(),
            sandbox_id: "p1".into(),
            config: ContainerConfig {
                // The kubelet creates containers with the image's ID.
                image: Some(ImageSpec {
                    image: "sha256:5818ef".into(),
                    user_specified_image: "busybox:latest".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            image_id: "sha256:5818ef".into(),
            image_ref: "docker.io/library/busybox@sha256:eaace9".into(),
            image_name: "docker.io/library/busybox:latest".into(),
            created_at: 1,
            started_at: None,
            log_path: None,
            stop_signal: None,
            cgroup: String::new(),
            monitor_pid: None,
            monitor_start_time: None,
            init_pid: None,
            init_start_time: None,
            dir: PathBuf::new(),
            rootfs: PathBuf::new(),
            user: None,
            image_volumes: Vec::new(),
            complete: true,
        };
        let c = listed(&rec, ContainerState::ContainerRunning);
        assert_eq!(c.image_ref, "sha256:5818ef");
        assert_eq!(c.image, rec.config.image);
        assert_eq!(c.state, ContainerState::ContainerRunning as i32);
    }
}
