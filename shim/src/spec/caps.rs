//! Capabilities as containerd sets them: the default set, ALL, names with
//! or without `CAP_`, and the bounding set the shim itself holds.

use crate::error::Error;

use super::invalid;

/// containerd's default capability set.
pub const DEFAULT_CAPS: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Every capability up to CAP_CHECKPOINT_RESTORE (Linux 5.9), for privileged.
pub const ALL_CAPS: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// Normalises a CRI capability name (`NET_ADMIN` or `CAP_NET_ADMIN`).
pub(super) fn cap_name(c: &str) -> String {
    let up = c.to_ascii_uppercase();
    if up.starts_with("CAP_") {
        up
    } else {
        format!("CAP_{up}")
    }
}

/// Every capability in `bounding` (a `CapBnd` mask: bit n is capability n,
/// the order of [`ALL_CAPS`]).
fn all_caps(bounding: u64) -> Vec<String> {
    ALL_CAPS
        .iter()
        .enumerate()
        .filter(|(bit, _)| bounding & (1 << bit) != 0)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// The capability set: containerd's defaults, then drops and adds; `ALL`
/// works in either list. Privileged (or adding `ALL`) means every
/// capability the shim itself holds (`bounding`), as containerd's
/// `WithAllCurrentCapabilities`: asking the kernel for more fails the create.
pub fn capabilities(
    add: &[String],
    drop: &[String],
    privileged: bool,
    bounding: u64,
) -> Result<Vec<String>, Error> {
    if privileged {
        return Ok(all_caps(bounding));
    }
    let known = |c: &str| ALL_CAPS.contains(&c);
    let mut caps: Vec<String> = DEFAULT_CAPS.iter().map(|s| s.to_string()).collect();
    for d in drop {
        if d.eq_ignore_ascii_case("ALL") {
            caps.clear();
            continue;
        }
        let d = cap_name(d);
        if !known(&d) {
            return Err(invalid(
                "linux.security_context.capabilities.drop_capabilities",
                format!("unknown capability {d}"),
            ));
        }
        caps.retain(|c| c != &d);
    }
    for a in add {
        if a.eq_ignore_ascii_case("ALL") {
            return Ok(all_caps(bounding));
        }
        let a = cap_name(a);
        if !known(&a) {
            return Err(invalid(
                "linux.security_context.capabilities.add_capabilities",
                format!("unknown capability {a}"),
            ));
        }
        if !caps.contains(&a) {
            caps.push(a);
        }
    }
    Ok(caps)
}
