//! The cgroup2 root's `favordynmods` flag (Linux ≥ 6.0).
//!
//! Every move of a process into a cgroup (a write to `cgroup.procs`, v1 or
//! v2) takes the kernel's global cgroup threadgroup rwsem for writing. That
//! is a per-CPU rwsem tuned for readers (fork, exit): a writer first waits
//! for an RCU grace period, 7–27 ms on this project's 2-core VMs, and all
//! writers queue behind it. A container runtime moves a process on every
//! create and every exec, so that wait was most of ExecSync (BENCHMARKS.md).
//! `favordynmods` turns the trade around: migrations stop waiting, forks and
//! exits pay a few atomic operations more. The flag belongs to the cgroup2 root and
//! governs the rwsem whether the machine uses v1 or v2 hierarchies; it is
//! set by any cgroup2 mount in the initial cgroup namespace, with the
//! root's other options kept, since a mount replaces them all. The shim
//! sets it (`shim::cgroupfs::favor_dynmods`); this holds the pure part.

const FLAG: &str = "favordynmods";

/// What setting the flag found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Favor {
    /// The root had the flag already (a mount option, or the kernel's
    /// `CONFIG_CGROUP_FAVOR_DYNMODS`).
    AlreadyOn,
    /// Set now.
    TurnedOn,
    /// The kernel refused the option (older than 6.0) or ignored it (we are
    /// not in the initial cgroup namespace).
    NotTaken,
}

/// The super-block options of the first cgroup2 mount in mountinfo `text`
/// (`rw,nsdelegate,memory_recursiveprot`), if any is mounted.
pub fn cgroup2_options(text: &str) -> Option<&str> {
    text.lines().find_map(|line| {
        let (_, right) = line.split_once(" - ")?;
        let mut r = right.split(' ');
        (r.next()? == "cgroup2").then_some(())?;
        r.nth(1)
    })
}

/// The options a cgroup2 mount needs to set the flag and keep the root's
/// others (`current`: [`cgroup2_options`]; `None` when no cgroup2 is
/// mounted); `None` when the flag is on already.
pub fn mount_data(current: Option<&str>) -> Option<String> {
    let current = current.unwrap_or("");
    if current.split(',').any(|o| o == FLAG) {
        return None;
    }
    let mut opts: Vec<&str> = current
        .split(',')
        .filter(|o| !o.is_empty() && !matches!(*o, "rw" | "ro"))
        .collect();
    opts.push(FLAG);
    Some(opts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_keeps_its_other_options() {
        let systemd = "25 30 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
        assert_eq!(
            cgroup2_options(systemd),
            Some("rw,nsdelegate,memory_recursiveprot")
        );
        assert_eq!(
            mount_data(cgroup2_options(systemd)).as_deref(),
            Some("nsdelegate,memory_recursiveprot,favordynmods")
        );
        let hybrid = "\
28 25 0:25 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,favordynmods
";
        assert_eq!(mount_data(cgroup2_options(hybrid)), None);
        // Pure v1: no cgroup2 mount, the root has no options yet.
        assert_eq!(
            cgroup2_options("28 25 0:25 / /x rw - cgroup cgroup rw,cpu\n"),
            None
        );
        assert_eq!(mount_data(None).as_deref(), Some("favordynmods"));
    }
}
