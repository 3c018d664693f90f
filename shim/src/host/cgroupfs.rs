//! cgroupfs: the machine's hierarchy, the OCI resources as the `cgroup`
//! crate writes them ([`resources`]), parsers of its files, and the one
//! kernel flag the shim sets (`favor_dynmods`). Container cgroups are made
//! and limited through `cgroup::container` by the monitor (`init`),
//! changed by `container/update.rs` and removed by the shim once nothing
//! runs in them; libcontainer writes its own only for a spec `init` does
//! not take. Pod cgroups are the agent's.

/// This machine's cgroup mounts, found once per process; the spawner
/// finds them before it forks, so a monitor and its init inherit them.
pub(crate) fn hierarchy() -> Option<&'static cgroup::Hierarchy> {
    static H: std::sync::OnceLock<Option<cgroup::Hierarchy>> = std::sync::OnceLock::new();
    H.get_or_init(|| cgroup::Hierarchy::detect().ok()).as_ref()
}

/// `linux.resources` as `cgroup::container` writes them: what the shim's
/// spec builder sets (memory and swap, CPU, cpuset, hugepages, unified,
/// devices) and pids. Anything else is refused, naming the field
/// (`init::supported`).
pub(crate) fn resources(
    r: &oci_spec::runtime::LinuxResources,
) -> Result<cgroup::container::Resources, super::ChildError> {
    let mut out = cgroup::container::Resources::default();
    let refuse = |field: &str| {
        Err(super::ChildError::invalid(
            format!("linux.resources.{field}"),
            "not written by picolet",
        ))
    };
    if r.block_io().is_some() {
        return refuse("blockIO");
    }
    if r.network().is_some() {
        return refuse("network");
    }
    if r.rdma().as_ref().is_some_and(|m| !m.is_empty()) {
        return refuse("rdma");
    }
    if let Some(m) = r.memory() {
        let other = m.reservation().is_some()
            || m.kernel().is_some()
            || m.kernel_tcp().is_some()
            || m.swappiness().is_some()
            || m.disable_oom_killer() == Some(true)
            || m.use_hierarchy().is_some()
            || m.check_before_update().is_some();
        if other {
            return refuse("memory (other than limit and swap)");
        }
        out.memory = m.limit();
        out.swap = m.swap();
    }
    if let Some(c) = r.cpu() {
        let other = c.realtime_runtime().is_some()
            || c.realtime_period().is_some()
            || c.burst().is_some()
            || c.idle().is_some();
        if other {
            return refuse("cpu (realtime, burst or idle)");
        }
        out.cpu_shares = c.shares();
        out.cpu_quota = c.quota();
        out.cpu_period = c.period();
        out.cpus = c.cpus().clone();
        out.mems = c.mems().clone();
    }
    out.pids = r.pids().as_ref().map(|p| p.limit());
    for h in r.hugepage_limits().iter().flatten() {
        let size = h.page_size();
        if size.is_empty() || !size.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(super::ChildError::invalid(
                "linux.resources.hugepageLimits",
                format!("page size {size:?}"),
            ));
        }
        out.hugepages.push((size.clone(), h.limit()));
    }
    let mut unified: Vec<(String, String)> = r
        .unified()
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    unified.sort();
    out.unified = unified;
    for (i, d) in r.devices().iter().flatten().enumerate() {
        out.devices.extend(crate::host::devices::rule(i, d)?);
    }
    Ok(out)
}

/// `picolet.cgroupFavorDynmods`: sets the cgroup2 root's `favordynmods`
/// (see `cgroup::favor`) by mounting cgroup2 on a scratch directory under
/// `run_dir` for as long as it takes to read the result back. Said in the
/// log either way; a kernel without the flag only stays slower.
pub fn favor_dynmods(run_dir: &std::path::Path) {
    use cgroup::favor::Favor;
    // A shim killed between its mount and unmount (microseconds) left one.
    for stale in std::fs::read_dir(run_dir).into_iter().flatten().flatten() {
        if stale
            .file_name()
            .as_encoded_bytes()
            .starts_with(b"cgroup2-favor.")
        {
            let _ = nix::mount::umount2(&stale.path(), nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_dir(stale.path());
        }
    }
    let scratch = run_dir.join(format!("cgroup2-favor.{}", std::process::id()));
    match set_favor_dynmods(&scratch) {
        Ok(Favor::TurnedOn) => tracing::info!(
            "cgroup2 favordynmods set: moving processes into cgroups no longer waits for an RCU grace period"
        ),
        Ok(Favor::AlreadyOn) => tracing::info!("cgroup2 favordynmods already set"),
        Ok(Favor::NotTaken) => tracing::info!(
            "cgroup2 favordynmods not taken (kernel older than 6.0, or not the host's cgroup namespace): every create and exec waits for an RCU grace period"
        ),
        Err(e) => tracing::warn!(
            dir = %scratch.display(),
            error = %e,
            "cannot set cgroup2 favordynmods"
        ),
    }
}

fn set_favor_dynmods(scratch: &std::path::Path) -> std::io::Result<cgroup::favor::Favor> {
    use cgroup::favor::{Favor, cgroup2_options, mount_data};
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    let mountinfo = || std::fs::read_to_string("/proc/self/mountinfo");
    let Some(data) = mount_data(cgroup2_options(&mountinfo()?)) else {
        return Ok(Favor::AlreadyOn);
    };
    std::fs::create_dir_all(scratch)?;
    let mounted = mount(
        Some("cgroup2"),
        scratch,
        Some("cgroup2"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(data.as_str()),
    );
    let result = match mounted {
        Err(nix::errno::Errno::EINVAL) => Ok(Favor::NotTaken),
        Err(e) => Err(e.into()),
        Ok(()) => {
            let after = mountinfo();
            let _ = umount2(scratch, MntFlags::MNT_DETACH);
            after.map(|text| match mount_data(cgroup2_options(&text)) {
                None => Favor::TurnedOn,
                Some(_) => Favor::NotTaken,
            })
        }
    };
    let _ = std::fs::remove_dir(scratch);
    result
}

/// The value of `key` in a flat keyed file (`key value` lines), e.g.
/// `oom_kill 1` in memory.oom_control or memory.events.
pub fn flat_key(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oci(v: serde_json::Value) -> oci_spec::runtime::LinuxResources {
        serde_json::from_value(v).expect("LinuxResources")
    }

    #[test]
    fn what_the_spec_builder_writes_converts_and_other_limits_are_named() {
        let r = resources(&oci(serde_json::json!({
            "memory": {"limit": 1024, "swap": 2048},
            "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0-1"},
            "pids": {"limit": 64},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 4096}],
            "unified": {"memory.high": "max"},
            "devices": [{"allow": false, "access": "rwm"}],
        })))
        .expect("converts");
        assert_eq!((r.memory, r.swap), (Some(1024), Some(2048)));
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period),
            (Some(512), Some(50_000), Some(100_000))
        );
        assert_eq!(r.cpus.as_deref(), Some("0-1"));
        assert_eq!(r.pids, Some(64));
        assert_eq!(r.hugepages, vec![("2MB".to_string(), 4096)]);
        assert_eq!(
            r.unified,
            vec![("memory.high".to_string(), "max".to_string())]
        );
        assert_eq!(r.devices.len(), 1);
        for (v, field) in [
            (serde_json::json!({"blockIO": {"weight": 10}}), "blockIO"),
            (serde_json::json!({"memory": {"reservation": 1}}), "memory"),
            (serde_json::json!({"cpu": {"realtimeRuntime": 1}}), "cpu"),
            (
                serde_json::json!({"hugepageLimits": [{"pageSize": "../x", "limit": 1}]}),
                "hugepageLimits",
            ),
        ] {
            let e = resources(&oci(v)).expect_err(field).to_string();
            assert!(e.contains(field), "{e}");
        }
    }

    #[test]
    fn oom_counters_v1_and_v2() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        let v2 = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(flat_key(v1, "oom_kill"), Some(2));
        assert_eq!(flat_key(v2, "oom_kill"), Some(1));
        assert_eq!(flat_key(v2, "oom"), Some(1));
        assert_eq!(flat_key("", "oom_kill"), None);
    }
}
