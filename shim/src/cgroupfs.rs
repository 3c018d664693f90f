//! cgroupfs, read only: the machine's hierarchy and parsers of its files.
//! Container cgroups are written by libcgroups alone (libcontainer at
//! create, `container/update.rs` for UpdateContainerResources); pod cgroups
//! by the agent through the `cgroup` crate.

/// This machine's cgroup mounts, found once.
pub(crate) fn hierarchy() -> Option<&'static cgroup::Hierarchy> {
    static H: std::sync::OnceLock<Option<cgroup::Hierarchy>> = std::sync::OnceLock::new();
    H.get_or_init(|| cgroup::Hierarchy::detect().ok()).as_ref()
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
