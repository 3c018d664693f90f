//! Seccomp, enforced without libseccomp: containerd's RuntimeDefault profile
//! (as OCI `linux.seccomp`), compiled to BPF with the pure-Rust `seccompiler`
//! in the monitor, and installed by [`SeccompExecutor`] in the container's
//! init right before it execs the workload. (libcontainer without its
//! `libseccomp` feature ignores `linux.seccomp`.)
//!
//! One BPF filter per action: the main one returns the default action for
//! every syscall no rule names; each other action gets a filter that returns
//! it for its rules and ALLOW otherwise. The kernel applies the most
//! restrictive answer of all filters, which is OCI's semantics.
//!
//! Difference from runc: the filter goes in after libcontainer dropped the
//! capabilities, so a container without CAP_SYS_ADMIN gets no_new_privs set
//! (the kernel requires one or the other) — as if allowPrivilegeEscalation
//! were false. Containers without a seccomp profile are unaffected.

use std::collections::BTreeMap;

use libcontainer::workload::default::DefaultExecutor;
use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompOperator, Spec};
use seccompiler::{BpfProgram, TargetArch};
use serde_json::{Value, json};

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;
const AF_VSOCK: u64 = 40;
/// CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
const CLONE_NS_FLAGS: u64 = 0x7E02_0000;

/// Allowed for every container (containerd / moby default profile).
const ALLOWED: &[&str] = &[
    "accept",
    "accept4",
    "access",
    "adjtimex",
    "alarm",
    "bind",
    "brk",
    "cachestat",
    "capget",
    "capset",
    "chdir",
    "chmod",
    "chown",
    "chown32",
    "clock_adjtime",
    "clock_adjtime64",
    "clock_getres",
    "clock_getres_time64",
    "clock_gettime",
    "clock_gettime64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "creat",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_ctl_old",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "epoll_wait_old",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fadvise64_64",
    "fallocate",
    "fanotify_mark",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "fchown",
    "fchown32",
    "fchownat",
    "fcntl",
    "fcntl64",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstat64",
    "fstatat64",
    "fstatfs",
    "fstatfs64",
    "fsync",
    "ftruncate",
    "ftruncate64",
    "futex",
    "futex_requeue",
    "futex_time64",
    "futex_wait",
    "futex_waitv",
    "futex_wake",
    "futimesat",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "getegid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getgroups",
    "getgroups32",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresgid32",
    "getresuid",
    "getresuid32",
    "getrlimit",
    "get_robust_list",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "get_thread_area",
    "gettid",
    "gettimeofday",
    "getuid",
    "getuid32",
    "getxattr",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "io_cancel",
    "ioctl",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",
    "ioprio_get",
    "ioprio_set",
    "io_setup",
    "io_submit",
    "ipc",
    "kill",
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "lchown",
    "lchown32",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listxattr",
    "llistxattr",
    "_llseek",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lstat",
    "lstat64",
    "madvise",
    "map_shadow_stack",
    "membarrier",
    "memfd_create",
    "memfd_secret",
    "mincore",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mmap2",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedreceive_time64",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_unlink",
    "mremap",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "name_to_handle_at",
    "nanosleep",
    "newfstatat",
    "_newselect",
    "open",
    "openat",
    "openat2",
    "pause",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "poll",
    "ppoll",
    "ppoll_time64",
    "prctl",
    "pread64",
    "preadv",
    "preadv2",
    "prlimit64",
    "process_mrelease",
    "pselect6",
    "pselect6_time64",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readahead",
    "readlink",
    "readlinkat",
    "readv",
    "recv",
    "recvfrom",
    "recvmmsg",
    "recvmmsg_time64",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "seccomp",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "semtimedop_time64",
    "send",
    "sendfile",
    "sendfile64",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "setfsgid",
    "setfsgid32",
    "setfsuid",
    "setfsuid32",
    "setgid",
    "setgid32",
    "setgroups",
    "setgroups32",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setregid32",
    "setresgid",
    "setresgid32",
    "setresuid",
    "setresuid32",
    "setreuid",
    "setreuid32",
    "setrlimit",
    "set_robust_list",
    "setsid",
    "setsockopt",
    "set_thread_area",
    "set_tid_address",
    "setuid",
    "setuid32",
    "setxattr",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "sigprocmask",
    "sigreturn",
    "socketcall",
    "socketpair",
    "splice",
    "stat",
    "stat64",
    "statfs",
    "statfs64",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "sysinfo",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",
    "times",
    "tkill",
    "truncate",
    "truncate64",
    "ugetrlimit",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimensat_time64",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "waitpid",
    "write",
    "writev",
    "arch_prctl",
    "modify_ldt",
    "ptrace",
];

/// Syscalls allowed only with a capability.
const BY_CAP: &[(&str, &[&str])] = &[
    (
        "CAP_SYS_ADMIN",
        &[
            "bpf",
            "clone",
            "clone3",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
    ),
    ("CAP_SYS_BOOT", &["reboot"]),
    ("CAP_SYS_CHROOT", &["chroot"]),
    (
        "CAP_SYS_MODULE",
        &["delete_module", "init_module", "finit_module"],
    ),
    ("CAP_SYS_PACCT", &["acct"]),
    (
        "CAP_SYS_PTRACE",
        &[
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "process_vm_readv",
            "process_vm_writev",
        ],
    ),
    ("CAP_SYS_RAWIO", &["iopl", "ioperm"]),
    (
        "CAP_SYS_TIME",
        &["settimeofday", "stime", "clock_settime", "clock_settime64"],
    ),
    ("CAP_SYS_TTY_CONFIG", &["vhangup"]),
    (
        "CAP_SYS_NICE",
        &[
            "get_mempolicy",
            "mbind",
            "set_mempolicy",
            "set_mempolicy_home_node",
        ],
    ),
    ("CAP_SYSLOG", &["syslog"]),
    ("CAP_BPF", &["bpf"]),
    ("CAP_PERFMON", &["perf_event_open"]),
];

/// containerd's RuntimeDefault profile for a container with `caps`, as OCI
/// `linux.seccomp` JSON.
pub fn runtime_default(caps: &[String]) -> Value {
    let has = |c: &str| caps.iter().any(|x| x == c);
    let mut allowed: Vec<&str> = ALLOWED.to_vec();
    for (cap, names) in BY_CAP {
        if has(cap) {
            allowed.extend_from_slice(names);
        }
    }
    allowed.sort_unstable();
    allowed.dedup();
    let mut syscalls = vec![
        json!({"names": allowed, "action": "SCMP_ACT_ALLOW"}),
        // personality: only the harmless personas.
        json!({"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]}),
        json!({"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 8, "op": "SCMP_CMP_EQ"}]}),
        json!({"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 131072, "op": "SCMP_CMP_EQ"}]}),
        json!({"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 131080, "op": "SCMP_CMP_EQ"}]}),
        json!({"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 4294967295u64, "op": "SCMP_CMP_EQ"}]}),
        // No AF_VSOCK sockets.
        json!({"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_NE"}]}),
    ];
    if !has("CAP_SYS_ADMIN") {
        // clone without namespace flags; clone3 says ENOSYS so libc falls back to clone.
        let flags_arg = if cfg!(target_arch = "s390x") { 1 } else { 0 };
        syscalls.push(json!({"names": ["clone"], "action": "SCMP_ACT_ALLOW",
            "args": [{"index": flags_arg, "value": CLONE_NS_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}));
        syscalls.push(json!({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}));
    }
    json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": EPERM, "syscalls": syscalls})
}

fn target_arch() -> TargetArch {
    if cfg!(target_arch = "aarch64") {
        TargetArch::aarch64
    } else {
        TargetArch::x86_64
    }
}

fn action_json(action: LinuxSeccompAction, errno: Option<u32>) -> Result<Value, String> {
    Ok(match action {
        LinuxSeccompAction::ScmpActAllow | LinuxSeccompAction::ScmpActLog => json!("allow"),
        LinuxSeccompAction::ScmpActErrno => json!({"errno": errno.unwrap_or(EPERM)}),
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            json!("kill_thread")
        }
        LinuxSeccompAction::ScmpActKillProcess => json!("kill_process"),
        LinuxSeccompAction::ScmpActTrap => json!("trap"),
        other => return Err(format!("seccomp action {other:?} is not supported")),
    })
}

/// Whether seccompiler knows `name` on this architecture.
fn known(name: &str) -> bool {
    let probe = json!({"p": {"mismatch_action": "allow", "filter_action": {"errno": EPERM}, "filter": [{"syscall": name}]}});
    seccompiler::compile_from_json(probe.to_string().as_bytes(), target_arch()).is_ok()
}

fn rule_json(name: &str, args: &[oci_spec::runtime::LinuxSeccompArg]) -> Result<Value, String> {
    let mut conds = Vec::new();
    for a in args {
        let op = match a.op() {
            LinuxSeccompOperator::ScmpCmpEq => json!("eq"),
            LinuxSeccompOperator::ScmpCmpNe => json!("ne"),
            LinuxSeccompOperator::ScmpCmpLt => json!("lt"),
            LinuxSeccompOperator::ScmpCmpLe => json!("le"),
            LinuxSeccompOperator::ScmpCmpGt => json!("gt"),
            LinuxSeccompOperator::ScmpCmpGe => json!("ge"),
            LinuxSeccompOperator::ScmpCmpMaskedEq => {
                // OCI: value is the mask, valueTwo the expected result.
                conds.push(json!({"index": a.index(), "type": "qword", "op": {"masked_eq": a.value()}, "val": a.value_two().unwrap_or(0)}));
                continue;
            }
        };
        conds.push(json!({"index": a.index(), "type": "qword", "op": op, "val": a.value()}));
    }
    Ok(if conds.is_empty() {
        json!({"syscall": name})
    } else {
        json!({"syscall": name, "args": conds})
    })
}

/// Compiles an OCI seccomp section to the BPF programs to install, in order.
/// Syscall names this architecture lacks are skipped, as libseccomp does.
pub fn compile(profile: &LinuxSeccomp) -> Result<Vec<BpfProgram>, String> {
    let default = action_json(profile.default_action(), profile.default_errno_ret())?;
    let mut allow_all_named = Vec::new();
    let mut groups: BTreeMap<String, (Value, Vec<Value>)> = BTreeMap::new();
    for sc in profile.syscalls().as_deref().unwrap_or_default() {
        let action = action_json(sc.action(), sc.errno_ret())?;
        let args = sc.args().clone().unwrap_or_default();
        for name in sc.names().iter().filter(|n| known(n)) {
            let rule = rule_json(name, &args)?;
            if action == json!("allow") {
                allow_all_named.push(rule);
            } else {
                // Such a syscall must pass the main filter; its own filter decides.
                allow_all_named.push(json!({"syscall": name}));
                groups
                    .entry(action.to_string())
                    .or_insert_with(|| (action.clone(), Vec::new()))
                    .1
                    .push(rule);
            }
        }
    }
    let mut filters = json!({});
    // Under a default-allow profile (critest's "block sethostname", most
    // hand-written Localhost profiles) every syscall passes the main filter:
    // leave it out; seccompiler would refuse a filter whose match and
    // mismatch actions are the same.
    if default != json!("allow") {
        filters["main"] = json!({"mismatch_action": default, "filter_action": "allow", "filter": allow_all_named});
    }
    for (i, (_, (action, rules))) in groups.into_iter().enumerate() {
        filters[format!("g{i}")] =
            json!({"mismatch_action": "allow", "filter_action": action, "filter": rules});
    }
    let mut map = seccompiler::compile_from_json(filters.to_string().as_bytes(), target_arch())
        .map_err(|e| format!("compile seccomp profile: {e}"))?;
    let mut out = Vec::new();
    // Main first; order does not change the outcome (most restrictive wins).
    if let Some(main) = map.remove("main") {
        out.push(main);
    }
    let mut rest: Vec<_> = map.into_iter().collect();
    rest.sort_by(|a, b| a.0.cmp(&b.0));
    out.extend(rest.into_iter().map(|(_, p)| p));
    if out.is_empty() {
        // A profile that allows everything is still a profile: the process
        // runs in seccomp filter mode (`Seccomp: 2`), as under libseccomp.
        out.push(vec![ALLOW_ALL]);
    }
    Ok(out)
}

/// `ret SECCOMP_RET_ALLOW`: a one-instruction filter.
const ALLOW_ALL: seccompiler::sock_filter = seccompiler::sock_filter {
    code: 0x06, // BPF_RET | BPF_K
    jt: 0,
    jf: 0,
    k: 0x7fff_0000, // SECCOMP_RET_ALLOW
};

/// Runs the workload like libcontainer's default executor, after installing
/// the compiled seccomp filters.
#[derive(Clone)]
pub struct SeccompExecutor {
    pub filters: Vec<BpfProgram>,
}

fn has_cap_sys_admin() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
        })
        .and_then(|hex| u64::from_str_radix(&hex, 16).ok())
        .is_some_and(|eff| eff & (1 << 21) != 0)
}

/// Installs the filters in this thread; without CAP_SYS_ADMIN the kernel
/// requires no_new_privs first, so it is set.
pub fn install(filters: &[BpfProgram], has_sys_admin: bool) -> Result<(), String> {
    if filters.is_empty() {
        return Ok(());
    }
    if !has_sys_admin {
        nix::sys::prctl::set_no_new_privs().map_err(|e| format!("set no_new_privs: {e}"))?;
    }
    for f in filters {
        seccompiler::apply_filter(f).map_err(|e| format!("install seccomp filter: {e}"))?;
    }
    Ok(())
}

impl Executor for SeccompExecutor {
    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        if !self.filters.is_empty() {
            install(&self.filters, has_cap_sys_admin()).map_err(ExecutorError::Other)?;
        }
        crate::host::reset_signals().map_err(ExecutorError::Other)?;
        DefaultExecutor {}.exec(spec)
    }

    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        DefaultExecutor {}.validate(spec)
    }
}

/// The filters of a container spec's seccomp profile (none without one).
pub(crate) fn seccomp_filters(
    spec: &oci_spec::runtime::Spec,
) -> Result<Vec<seccompiler::BpfProgram>, String> {
    match spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()) {
        Some(profile) => compile(profile),
        None => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(v: Value) -> LinuxSeccomp {
        serde_json::from_value(v).expect("valid OCI seccomp")
    }

    #[test]
    fn runtime_default_compiles_for_this_arch() {
        let caps: Vec<String> = crate::spec::DEFAULT_CAPS
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = profile(runtime_default(&caps));
        let filters = compile(&p).expect("compile");
        assert_eq!(filters.len(), 2, "main + the ENOSYS group for clone3");
        assert!(filters[0].len() > 100);
    }

    #[test]
    fn capabilities_open_their_syscalls() {
        let without = runtime_default(&["CAP_CHOWN".into()]).to_string();
        let with = runtime_default(&["CAP_SYS_ADMIN".into()]).to_string();
        assert!(!without.contains("\"mount\"") && with.contains("\"mount\""));
        assert!(without.contains("SCMP_CMP_MASKED_EQ") && !with.contains("SCMP_CMP_MASKED_EQ"));
    }

    #[test]
    fn names_unknown_to_this_arch_are_skipped() {
        assert!(known("read") && known("clone3"));
        assert!(!known("no_such_syscall"));
    }

    #[test]
    fn default_allow_profiles_compile_to_their_rules_only() {
        // critest's "block sethostname" profile: seccompiler refused it
        // ("match_action and mismatch_action are equal").
        let p = profile(json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"}]
        }));
        let filters = compile(&p).expect("compile");
        assert_eq!(filters.len(), 1, "the errno group only");
        let p = profile(json!({"defaultAction": "SCMP_ACT_ALLOW"}));
        assert_eq!(compile(&p).expect("compile"), vec![vec![ALLOW_ALL]]);
    }

    #[test]
    fn unsupported_actions_are_errors() {
        let p = profile(json!({"defaultAction": "SCMP_ACT_NOTIFY"}));
        assert!(compile(&p).is_err());
    }
}
