//! `picolet monitor exec`: runs a command inside a running container the way
//! runc's setns path does — join the init's namespaces and cgroups, take on
//! the container's user, capabilities, no_new_privs, seccomp filters, OOM
//! score and working directory, exec — without libcontainer's tenant
//! machinery (which re-reads the whole spec and mountinfo, forks twice and
//! costs the runtime ~17 ms of CPU per exec probe).
//!
//! Two processes, as before: this helper (host namespaces; it waits, enforces
//! the timeout and passes the exit code on) and its child, which becomes the
//! command. The helper enters the container's PID namespace for its
//! children only, forks, moves the child into the init's cgroups from the
//! host side, then lets it go on; the child joins the other namespaces (mount
//! last), drops privileges and execs. Everything the child needs is read
//! before the fork, so after it only syscalls run.
//!
//! The reference is the container's init itself: `e2e::isolation`'s
//! `an_exec_runs_as_the_container_does` compares /proc/1/status, namespaces,
//! cgroups and oom_score_adj of the init with the exec'd process.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, setns};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid, fork, pipe2};

use crate::process::ChildError;

/// Exit code of `monitor exec` when it killed the command on timeout.
pub const EXEC_TIMEOUT_CODE: i32 = 124 + 128;

/// What `picolet monitor exec` is given by the shim.
#[derive(Debug, Clone)]
pub struct ExecArgs {
    /// The container's bundle (its config.json is the spec it runs with).
    pub bundle: PathBuf,
    /// The container's init, and its start time against pid reuse.
    pub pid: i32,
    pub start_time: Option<u64>,
    pub timeout: Option<Duration>,
    /// A terminal: stdin is a unix socket on which the child sends the
    /// master of a pty it opens in the container's devpts; the slave is the
    /// command's stdio and controlling terminal (a new session);
    /// TERM=xterm unless the spec sets TERM.
    pub tty: bool,
    pub cmd: Vec<String>,
}

/// Namespaces an exec joins, in the order the child enters them: mount last
/// (its root becomes the container's), cgroup after the cgroup move.
const NAMESPACES: &[(&str, CloneFlags)] = &[
    ("ipc", CloneFlags::CLONE_NEWIPC),
    ("uts", CloneFlags::CLONE_NEWUTS),
    ("net", CloneFlags::CLONE_NEWNET),
    ("cgroup", CloneFlags::CLONE_NEWCGROUP),
    ("mnt", CloneFlags::CLONE_NEWNS),
];

/// Capability sets as bit masks (bit n = capability n).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Caps {
    bounding: u64,
    effective: u64,
    permitted: u64,
    inheritable: u64,
    ambient: u64,
}

/// Everything the child needs, prepared before the fork.
pub(crate) struct Plan {
    pid_ns: Option<OwnedFd>,
    namespaces: Vec<(CloneFlags, OwnedFd)>,
    cgroup_procs: Vec<PathBuf>,
    oom_score_adj: Option<i32>,
    cwd: CString,
    pub(crate) uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
    pub(crate) umask: Option<u32>,
    caps: Option<Caps>,
    no_new_privs: bool,
    filters: Vec<seccompiler::BpfProgram>,
    pub(crate) argv: Vec<CString>,
    pub(crate) env: Vec<CString>,
    pub(crate) search_path: String,
    tty: bool,
}

/// Runs the command; returns the helper's exit code (the command's, 128 +
/// signal, [`EXEC_TIMEOUT_CODE`], or 126 with a message on stderr when the
/// command could not be started).
pub fn exec(args: ExecArgs) -> i32 {
    let plan = match prepare(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("picolet exec: {e}");
            return 126;
        }
    };
    run(plan, &args)
}

fn prepare(args: &ExecArgs) -> Result<Plan, ChildError> {
    let config = args.bundle.join("config.json");
    let spec = oci_spec::runtime::Spec::load(&config)
        .map_err(|e| ChildError::detail_at("load", config.display(), e.to_string()))?;
    let filters = crate::seccomp::seccomp_filters(&args.bundle, &spec)?;
    let mut plan = process_plan(&spec, filters, &args.cmd, args.tty)?;

    let proc_dir = PathBuf::from(format!("/proc/{}", args.pid));
    // The pod's user namespace first: the others belong to it.
    if differs(&proc_dir, "user")? {
        plan.namespaces
            .push((CloneFlags::CLONE_NEWUSER, open_ns(&proc_dir, "user")?));
    }
    if differs(&proc_dir, "pid")? {
        plan.pid_ns = Some(open_ns(&proc_dir, "pid")?);
    }
    for (name, flag) in NAMESPACES {
        if differs(&proc_dir, name)? {
            plan.namespaces.push((*flag, open_ns(&proc_dir, name)?));
        }
    }
    let cgroup_file = proc_dir.join("cgroup");
    let cgroup =
        std::fs::read_to_string(&cgroup_file).map_err(ChildError::io("read", &cgroup_file))?;
    let mountinfo_file = Path::new("/proc/self/mountinfo");
    let mountinfo =
        std::fs::read_to_string(mountinfo_file).map_err(ChildError::io("read", mountinfo_file))?;
    plan.cgroup_procs = cgroup_procs(&cgroup, &mountinfo)?;
    // Checked after opening: what we hold belongs to this init, not to a
    // later process that got its pid.
    if args.start_time.is_some() && crate::host::proc_start_time(args.pid) != args.start_time {
        return Err(ChildError::detail_at(
            "find",
            format_args!("container init {}", args.pid),
            "it is gone",
        ));
    }
    Ok(plan)
}

/// The process part of a plan (user, capabilities, seccomp, environment,
/// `argv`), from the container's spec; no namespaces or cgroups to join.
/// The container's own init takes on the same with [`become_the_container`].
pub(crate) fn process_plan(
    spec: &oci_spec::runtime::Spec,
    filters: Vec<seccompiler::BpfProgram>,
    argv: &[String],
    tty: bool,
) -> Result<Plan, ChildError> {
    let process = spec
        .process()
        .clone()
        .ok_or_else(|| ChildError::invalid("process", "missing from the spec"))?;
    if process.rlimits().as_ref().is_some_and(|r| !r.is_empty()) {
        // The shim's specs set none; applying them is not implemented here.
        return Err(ChildError::invalid("process.rlimits", "not supported"));
    }
    let user = process.user();
    let mut env: Vec<String> = process.env().clone().unwrap_or_default();
    if tty && !env.iter().any(|e| e.starts_with("TERM=")) {
        env.push("TERM=xterm".into());
    }
    let search_path = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .to_string();
    Ok(Plan {
        pid_ns: None,
        namespaces: Vec::new(),
        cgroup_procs: Vec::new(),
        oom_score_adj: process.oom_score_adj(),
        cwd: cstring(process.cwd().as_os_str().as_encoded_bytes())?,
        uid: Uid::from_raw(user.uid()),
        gid: Gid::from_raw(user.gid()),
        groups: user
            .additional_gids()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(Gid::from_raw)
            .collect(),
        umask: user.umask(),
        caps: process.capabilities().as_ref().map(caps_of),
        no_new_privs: process.no_new_privileges().unwrap_or(false),
        filters,
        argv: argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<Result<_, _>>()?,
        env: env
            .iter()
            .map(|e| cstring(e.as_bytes()))
            .collect::<Result<_, _>>()?,
        search_path,
        tty,
    })
}

fn cstring(b: &[u8]) -> Result<CString, ChildError> {
    CString::new(b).map_err(|_| {
        ChildError::detail_at(
            "pass",
            format_args!("{:?}", String::from_utf8_lossy(b)),
            "contains a NUL byte",
        )
    })
}

/// Whether the init's namespace `name` is another than ours.
fn differs(proc_dir: &Path, name: &str) -> Result<bool, ChildError> {
    let theirs = proc_dir.join("ns").join(name);
    let theirs = std::fs::metadata(&theirs).map_err(ChildError::io("stat", &theirs))?;
    let ours = Path::new("/proc/self/ns").join(name);
    let ours = std::fs::metadata(&ours).map_err(ChildError::io("stat", &ours))?;
    Ok((theirs.dev(), theirs.ino()) != (ours.dev(), ours.ino()))
}

fn open_ns(proc_dir: &Path, name: &str) -> Result<OwnedFd, ChildError> {
    let path = proc_dir.join("ns").join(name);
    File::open(&path)
        .map(OwnedFd::from)
        .map_err(ChildError::io("open", &path))
}

fn caps_of(c: &oci_spec::runtime::LinuxCapabilities) -> Caps {
    let mask = |set: &Option<oci_spec::runtime::Capabilities>| {
        set.iter()
            .flatten()
            .filter_map(|cap| cap_index(&cap.to_string()))
            .fold(0u64, |m, i| m | 1 << i)
    };
    Caps {
        bounding: mask(c.bounding()),
        effective: mask(c.effective()),
        permitted: mask(c.permitted()),
        inheritable: mask(c.inheritable()),
        ambient: mask(c.ambient()),
    }
}

/// The kernel's number of a capability named as oci-spec prints it
/// (`CHOWN`, with or without `CAP_`).
fn cap_index(name: &str) -> Option<u32> {
    let name = name.strip_prefix("CAP_").unwrap_or(name);
    let full = format!("CAP_{name}");
    full.parse::<caps::Capability>()
        .ok()
        .map(|c| c.index().into())
}

/// The `cgroup.procs` files of the hierarchies /proc/<pid>/cgroup lists,
/// found through our mount table (v1 controllers, named v1 hierarchies and
/// the v2 unified one). A listed hierarchy that is not mounted is skipped:
/// nothing could limit through it.
fn cgroup_procs(cgroup: &str, mountinfo: &str) -> Result<Vec<PathBuf>, ChildError> {
    let mut out: Vec<PathBuf> = crate::host::mountinfo::cgroup_dirs(cgroup, mountinfo)?
        .into_iter()
        .map(|d| d.dir.join("cgroup.procs"))
        .collect();
    out.dedup();
    Ok(out)
}

fn run(plan: Plan, args: &ExecArgs) -> i32 {
    let (go_r, go_w) = match pipe2(OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("picolet exec: pipe: {e}");
            return 126;
        }
    };
    if let Some(fd) = &plan.pid_ns
        && let Err(e) = setns(fd.as_fd(), CloneFlags::CLONE_NEWPID)
    {
        eprintln!("picolet exec: join the container's PID namespace: {e}");
        return 126;
    }
    // Not dumpable until exec, from birth: nothing in the container may open
    // the child's /proc/<pid>/exe (the picolet binary) while it is in the
    // container's PID namespace (CVE-2019-5736). exec makes the command
    // dumpable again; the helper itself never enters the container.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("picolet exec: set dumpable: {e}");
        return 126;
    }
    // SAFETY: this helper is single-threaded (`picolet monitor exec` starts
    // no runtime or threads), so the child may run any code.
    let child = match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(go_w);
            child(plan, go_r)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => {
            eprintln!("picolet exec: fork: {e}");
            return 126;
        }
    };
    drop(go_r);
    for procs in &plan.cgroup_procs {
        if let Err(e) = std::fs::write(procs, child.as_raw().to_string()) {
            eprintln!("picolet exec: join {}: {e}", procs.display());
            let _ = kill(child, Signal::SIGKILL);
            let _ = waitpid(child, None);
            return 126;
        }
    }
    let mut go = File::from(go_w);
    if let Err(e) = go.write_all(b"x") {
        eprintln!("picolet exec: release the child: {e}");
    }
    drop(go);
    wait(child, args.timeout.map(|t| Instant::now() + t))
}

/// Waits for the command; kills it when the deadline passes.
fn wait(child: Pid, deadline: Option<Instant>) -> i32 {
    let pidfd = crate::host::pidfd::open(child.as_raw()).ok();
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, sig, _)) => return 128 + sig as i32,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                eprintln!("picolet exec: wait: {e}");
                return 126;
            }
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            let _ = kill(child, Signal::SIGKILL);
            let _ = waitpid(child, None);
            return EXEC_TIMEOUT_CODE;
        }
        match &pidfd {
            // Readable when the child exits.
            Some(fd) => {
                let ms = left.map_or(u16::MAX, |l| l.as_millis().clamp(1, 60_000) as u16);
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                let _ = poll(&mut fds, PollTimeout::from(ms));
            }
            // Kernels before 5.3.
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The child: becomes the command, or exits 126/127 saying why not.
fn child(plan: Plan, go: OwnedFd) -> ! {
    let mut byte = [0u8; 1];
    // EOF instead of a byte: the helper could not place us in the cgroups.
    if !matches!(File::from(go).read(&mut byte), Ok(1)) {
        exit_now(126);
    }
    if let Err(e) = become_the_container(&plan) {
        eprintln!("picolet exec: {e}");
        exit_now(126);
    }
    let Some(arg0) = plan.argv.first() else {
        exit_now(126);
    };
    let Some(file) = resolve(arg0, &plan.search_path) else {
        eprintln!(
            "picolet exec: {:?}: executable file not found in $PATH",
            arg0.to_string_lossy()
        );
        exit_now(127);
    };
    let env = with_home(&plan.env, plan.uid.as_raw());
    let e = nix::unistd::execve(&file, &plan.argv, &env).unwrap_err();
    eprintln!("picolet exec: exec {:?}: {e}", file.to_string_lossy());
    exit_now(if e == Errno::ENOENT { 127 } else { 126 })
}

/// The command's terminal, made as runc makes it: a pty of the
/// container's own devpts (we are in its mount namespace now), whose
/// master goes back over `console` — for an exec the socket the shim gave
/// the helper as stdin — and whose slave becomes stdio and the controlling
/// terminal of a new session. The container's init (`init`: already a
/// session leader) also gets the slave bound onto /dev/console.
pub(crate) fn container_terminal(
    console: std::os::fd::BorrowedFd<'_>,
    init: bool,
) -> Result<(), ChildError> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::fs::OpenOptionsExt;
    // /dev of a container can be a volume another container of the pod
    // writes: every node here is checked for what it is before use, and
    // nothing is reached by a name after the check (runc's CVE-2025-52565).
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .map_err(ChildError::errno_at("open", "/dev/ptmx"))?;
    let st = nix::sys::stat::fstat(master.as_raw_fd())
        .map_err(ChildError::errno_at("stat", "/dev/ptmx"))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR || st.st_rdev != nix::sys::stat::makedev(5, 2) {
        return Err(ChildError::detail_at(
            "check",
            "/dev/ptmx",
            "not the pty multiplexer (5:2)",
        ));
    }
    nix::pty::grantpt(&master).map_err(ChildError::errno("grantpt"))?;
    nix::pty::unlockpt(&master).map_err(ChildError::errno("unlockpt"))?;
    // The slave from the master itself, not from /dev/pts by name.
    // SAFETY: TIOCGPTPEER takes open flags and returns a new descriptor.
    let peer = unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if peer < 0 {
        return Err(ChildError::os("open the terminal's slave")(
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the ioctl just returned this descriptor to us.
    let slave = std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(peer) });
    if init {
        drop(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open("/dev/console")
                .map_err(ChildError::io("create", Path::new("/dev/console")))?,
        );
        let console = nix::fcntl::open(
            "/dev/console",
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(ChildError::errno_at("open", "/dev/console"))?;
        // SAFETY: open just returned this descriptor to us.
        let console = unsafe { std::os::fd::OwnedFd::from_raw_fd(console) };
        let st = nix::sys::stat::fstat(console.as_raw_fd())
            .map_err(ChildError::errno_at("stat", "/dev/console"))?;
        if !matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFCHR) {
            return Err(ChildError::detail_at(
                "check",
                "/dev/console",
                "neither a file nor a device",
            ));
        }
        let fd_path = |fd: i32| format!("/proc/self/fd/{fd}");
        nix::mount::mount(
            Some(fd_path(slave.as_raw_fd()).as_str()),
            fd_path(console.as_raw_fd()).as_str(),
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(ChildError::errno_at(
            "bind the terminal onto",
            "/dev/console",
        ))?;
    }
    // SAFETY: the master's raw fd is open for the duration of the call.
    let master_fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(master.as_raw_fd()) };
    crate::host::send_fd(console, master_fd)?;
    drop(master);
    if !init {
        nix::unistd::setsid().map_err(ChildError::errno("setsid"))?;
    }
    for n in 0..3 {
        nix::unistd::dup2(slave.as_raw_fd(), n).map_err(ChildError::errno("dup2 the terminal"))?;
    }
    drop(slave);
    // SAFETY: TIOCSCTTY takes an int argument (0: do not steal a terminal
    // another session holds); fd 0 is now the slave.
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } != 0 {
        return Err(
            ChildError::os("make the terminal the controlling terminal")(
                std::io::Error::last_os_error(),
            ),
        );
    }
    Ok(())
}

/// The environment with `HOME` set as runc sets it when the spec has none:
/// the user's directory in the container's /etc/passwd (read from inside
/// the container), else `/`.
pub(crate) fn with_home(env: &[CString], uid: u32) -> Vec<CString> {
    let mut env = env.to_vec();
    if env
        .iter()
        .any(|e| e.as_bytes().starts_with(b"HOME=") && e.as_bytes().len() > 5)
    {
        return env;
    }
    env.retain(|e| !e.as_bytes().starts_with(b"HOME="));
    let mut passwd = String::new();
    if let Ok(f) = File::open("/etc/passwd") {
        let _ = f.take(1 << 20).read_to_string(&mut passwd);
    }
    let home = home_of(&passwd, uid).unwrap_or("/");
    if let Ok(h) = CString::new(format!("HOME={home}")) {
        env.push(h);
    }
    env
}

/// The home directory of `uid` in a passwd(5) text.
fn home_of(passwd: &str, uid: u32) -> Option<&str> {
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[2].parse() == Ok(uid) && !f[5].is_empty()).then(|| f[5])
    })
}

pub(crate) fn exit_now(code: i32) -> ! {
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends this forked child without running the parent's
    // atexit handlers or destructors a second time.
    unsafe { libc::_exit(code) }
}

pub(crate) fn become_the_container(plan: &Plan) -> Result<(), ChildError> {
    if let Some(adj) = plan.oom_score_adj {
        match std::fs::write("/proc/self/oom_score_adj", adj.to_string()) {
            // Lower than the helper's (a shim restarted with a higher score):
            // only CAP_SYS_RESOURCE may lower it; stay the more killable.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
            r => r.map_err(|e| ChildError::os("set oom_score_adj")(e).at(adj.to_string()))?,
        }
    }
    for (flag, fd) in &plan.namespaces {
        setns(fd.as_fd(), *flag).map_err(ChildError::errno_at(
            "join namespace",
            format_args!("{flag:?}"),
        ))?;
    }
    let cwd = plan.cwd.to_string_lossy();
    nix::unistd::chdir(plan.cwd.as_c_str())
        .map_err(ChildError::errno_at("chdir", format_args!("{cwd:?}")))?;
    // A cwd of `/proc/self/fd/<n>` must not reach a descriptor of ours.
    crate::host::cwd_is_inside_root().map_err(|e| e.within(format_args!("chdir {cwd:?}")))?;
    if plan.tty {
        container_terminal(std::io::stdin().as_fd(), false)?;
    }
    if let Some(m) = plan.umask {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(m));
    }
    if let Some(caps) = &plan.caps {
        drop_bounding(caps.bounding)?;
        // Keep the permitted set across the change of uid; capset below
        // then sets exactly the container's.
        set_keepcaps(true)?;
    }
    nix::unistd::setgroups(&plan.groups).map_err(ChildError::errno("setgroups"))?;
    nix::unistd::setresgid(plan.gid, plan.gid, plan.gid).map_err(ChildError::errno("setgid"))?;
    nix::unistd::setresuid(plan.uid, plan.uid, plan.uid).map_err(ChildError::errno("setuid"))?;
    let has_sys_admin = match &plan.caps {
        Some(caps) => {
            set_keepcaps(false)?;
            capset(caps)?;
            for i in 0..64 {
                if caps.ambient & (1 << i) != 0 {
                    prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE as u64, i)
                        .map_err(ChildError::errno_at("raise ambient capability", i))?;
                }
            }
            caps.effective & (1 << caps::Capability::CAP_SYS_ADMIN.index()) != 0
        }
        None => plan.uid.is_root(),
    };
    if plan.no_new_privs {
        nix::sys::prctl::set_no_new_privs().map_err(ChildError::errno("set no_new_privs"))?;
    }
    // Whatever the helper or the monitor had open stays out of the
    // container; before the filters, which may not allow close_range.
    crate::host::cloexec_from(3).map_err(ChildError::os("close-on-exec"))?;
    crate::seccomp::install(&plan.filters, has_sys_admin)?;
    crate::host::reset_signals()
}

/// Drops every capability outside `keep` from the bounding set, up to the
/// last one this kernel knows.
fn drop_bounding(keep: u64) -> Result<(), ChildError> {
    for i in 0..64u64 {
        if keep & (1 << i) != 0 {
            continue;
        }
        match prctl(libc::PR_CAPBSET_DROP, i, 0) {
            Ok(()) => {}
            // Past the kernel's last capability.
            Err(Errno::EINVAL) => break,
            Err(e) => {
                return Err(ChildError::errno_at(
                    "drop capability",
                    format_args!("{i} from the bounding set"),
                )(e));
            }
        }
    }
    Ok(())
}

fn set_keepcaps(on: bool) -> Result<(), ChildError> {
    prctl(libc::PR_SET_KEEPCAPS, u64::from(on), 0).map_err(ChildError::errno("set keepcaps"))
}

fn prctl(option: libc::c_int, arg2: u64, arg3: u64) -> Result<(), Errno> {
    // SAFETY: the options used here take integer arguments only.
    let r = unsafe { libc::prctl(option, arg2 as libc::c_ulong, arg3 as libc::c_ulong, 0, 0) };
    if r < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// Sets effective, permitted and inheritable at once (capset v3: two 32-bit
/// words per set).
fn capset(caps: &Caps) -> Result<(), ChildError> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    // The kernel's capability sets are two 32-bit words: split the mask.
    let word = |m: u64, hi: bool| {
        let w = if hi { m >> 32 } else { m & 0xffff_ffff };
        u32::try_from(w).unwrap_or(u32::MAX)
    };
    let data: [Data; 2] = [false, true].map(|hi| Data {
        effective: word(caps.effective, hi),
        permitted: word(caps.permitted, hi),
        inheritable: word(caps.inheritable, hi),
    });
    // SAFETY: header and data are the kernel's v3 layout, alive for the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if r < 0 {
        return Err(ChildError::errno("capset")(Errno::last()));
    }
    Ok(())
}

/// `execvp`'s search: a name with a slash as it is, else the first
/// executable file in `path`.
pub(crate) fn resolve(arg0: &CString, path: &str) -> Option<CString> {
    let bytes = arg0.as_bytes();
    if bytes.contains(&b'/') {
        return Some(arg0.clone());
    }
    path.split(':').find_map(|dir| {
        let dir = if dir.is_empty() { "." } else { dir };
        let candidate = CString::new([dir.as_bytes(), b"/", bytes].concat()).ok()?;
        let is_file = std::fs::metadata(std::ffi::OsStr::from_bytes(candidate.as_bytes()))
            .is_ok_and(|m| m.is_file());
        (is_file
            && nix::unistd::access(candidate.as_c_str(), nix::unistd::AccessFlags::X_OK).is_ok())
        .then_some(candidate)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
50 23 0:40 / /proc rw,relatime - proc proc rw
";

    #[test]
    fn cgroup_procs_of_every_mounted_hierarchy() {
        let cgroup = "\
12:blkio:/k/pod1/c1
4:memory:/k/pod1/c1
3:cpu,cpuacct:/k/pod1/c1
2:pids:/k/pod1/c1
1:name=systemd:/
0::/
";
        let got = cgroup_procs(cgroup, HYBRID).expect("parse");
        let want: Vec<PathBuf> = [
            // blkio is not mounted here: skipped.
            "/sys/fs/cgroup/memory/k/pod1/c1/cgroup.procs",
            "/sys/fs/cgroup/cpu,cpuacct/k/pod1/c1/cgroup.procs",
            "/sys/fs/cgroup/pids/k/pod1/c1/cgroup.procs",
            "/sys/fs/cgroup/systemd/cgroup.procs",
            "/sys/fs/cgroup/unified/cgroup.procs",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn cgroup_v2_and_bind_mounted_subtrees() {
        let mountinfo = "\
29 23 0:26 /k /sys/fs/cgroup-k rw - cgroup2 cgroup2 rw
30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw
";
        // The first mount's root (/k) does not contain /other: the second one does.
        assert_eq!(
            cgroup_procs("0::/other/c\n", mountinfo).expect("parse"),
            [PathBuf::from("/sys/fs/cgroup/other/c/cgroup.procs")]
        );
        assert_eq!(
            cgroup_procs("0::/k/pod/c\n", mountinfo).expect("parse"),
            [PathBuf::from("/sys/fs/cgroup-k/pod/c/cgroup.procs")]
        );
        // /kx is not under /k.
        assert_eq!(
            cgroup_procs("0::/kx\n", mountinfo).expect("parse"),
            [PathBuf::from("/sys/fs/cgroup/kx/cgroup.procs")]
        );
        assert!(cgroup_procs("garbage\n", mountinfo).is_err());
    }

    #[test]
    fn capabilities_become_kernel_bits() {
        use oci_spec::runtime::{Capability, LinuxCapabilitiesBuilder};
        let set = |c: &[Capability]| {
            c.iter()
                .copied()
                .collect::<oci_spec::runtime::Capabilities>()
        };
        let caps = LinuxCapabilitiesBuilder::default()
            .bounding(set(&[
                Capability::Chown,
                Capability::NetBindService,
                Capability::SysAdmin,
            ]))
            .effective(set(&[Capability::Chown]))
            .permitted(set(&[Capability::Chown]))
            .inheritable(set(&[]))
            .ambient(set(&[Capability::NetBindService]))
            .build()
            .expect("caps");
        assert_eq!(
            caps_of(&caps),
            Caps {
                bounding: 1 << 0 | 1 << 10 | 1 << 21,
                effective: 1,
                permitted: 1,
                inheritable: 0,
                ambient: 1 << 10,
            }
        );
        assert_eq!(cap_index("CAP_SYS_ADMIN"), Some(21));
        assert_eq!(cap_index("NO_SUCH_CAP"), None);
    }

    #[test]
    fn commands_are_searched_like_execvp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("mkdir");
        for (name, mode) in [("tool", 0o755), ("data", 0o644)] {
            let p = bin.join(name);
            std::fs::write(&p, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .expect("chmod");
        }
        std::fs::create_dir(bin.join("adir")).expect("mkdir");
        let path = format!("/nonexistent:{}", bin.display());
        let c = |s: &str| CString::new(s).expect("cstring");
        assert_eq!(
            resolve(&c("tool"), &path),
            Some(c(&format!("{}/tool", bin.display())))
        );
        assert_eq!(resolve(&c("data"), &path), None, "not executable");
        assert_eq!(resolve(&c("adir"), &path), None, "a directory");
        assert_eq!(resolve(&c("./x/y"), &path), Some(c("./x/y")), "taken as is");
    }

    #[test]
    fn home_comes_from_the_containers_passwd() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/false\nbad line\n";
        assert_eq!(home_of(passwd, 0), Some("/root"));
        assert_eq!(home_of(passwd, 65534), Some("/nonexistent"));
        assert_eq!(home_of(passwd, 1000), None);
        let set = [CString::new("HOME=/data").expect("c")];
        assert_eq!(with_home(&set, 0), set.to_vec());
    }
}
