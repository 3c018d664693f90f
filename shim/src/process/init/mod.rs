//! A container's create: the monitor (single-threaded)
//! forks the container's init once, places it in its cgroup, and the init
//! joins the pod's namespaces, makes its root ([`rootfs`]), says it is ready
//! and waits for StartContainer on `notify.sock` in the container's folder
//! under the state root (where the shim's start connects for
//! either kind of create). On the start it takes on the container's user,
//! capabilities and seccomp filters with the exec path's own code
//! ([`crate::process::nsexec::become_the_container`]) and execs.
//!
//! libcontainer, which made containers before, forks twice (an intermediate
//! process, then the init), re-validates its procfs handle ~23 times and
//! resolves each of ~40 mount operations through pathrs: ~2,700 syscalls
//! and ~9 ms of the 15 ms a create and start took. This path makes the same
//! container with a few hundred, and is the only one: a spec asking for
//! what it does not make is refused by name ([`supported`]).
#![allow(unsafe_code)]

mod dev;
mod outside;
pub(crate) mod plan;
mod rootfs;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork, pipe2};
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::host::mountinfo::CgroupDir;
use crate::process::ChildError;

/// Refuses, naming it, what of a spec this create does not make: a new
/// user namespace (a pod's is joined), hooks, rlimits, sysctls (pod sysctls go on the pod's
/// namespaces, `crate::runtime::namespaces`), AppArmor or SELinux labels, a
/// hostname (the pod's UTS namespace has it), namespaces other than ours,
/// or cgroup limits `cgroup::container` does not write. The shim's spec
/// builder writes none of them.
pub(crate) fn supported(spec: &Spec) -> Result<(), ChildError> {
    let no = |field: &'static str, what: &str| {
        Err(ChildError::invalid(
            field,
            format!("the spec asks for {what}, which picolet does not make"),
        ))
    };
    let process = spec.process().as_ref().ok_or_else(|| missing("process"))?;
    if process.rlimits().as_ref().is_some_and(|r| !r.is_empty()) {
        return no("process.rlimits", "rlimits");
    }
    if process.apparmor_profile().is_some() {
        return no("process.apparmorProfile", "an AppArmor profile");
    }
    if process.selinux_label().is_some() {
        return no("process.selinuxLabel", "an SELinux label");
    }
    let linux = spec.linux().as_ref().ok_or_else(|| missing("linux"))?;
    for n in linux.namespaces().iter().flatten() {
        match n.typ() {
            LinuxNamespaceType::Mount if n.path().is_some() => {
                return no("linux.namespaces", "joining an existing mount namespace");
            }
            LinuxNamespaceType::User if n.path().is_none() => {
                return no(
                    "linux.namespaces",
                    "a new user namespace (the pod's is joined)",
                );
            }
            LinuxNamespaceType::Mount
            | LinuxNamespaceType::Pid
            | LinuxNamespaceType::Network
            | LinuxNamespaceType::Ipc
            | LinuxNamespaceType::Uts
            | LinuxNamespaceType::User => {}
            other => return no("linux.namespaces", &format!("a {other:?} namespace")),
        }
    }
    if linux.sysctl().as_ref().is_some_and(|s| !s.is_empty()) {
        return no("linux.sysctl", "sysctls");
    }
    if let Some(r) = linux.resources() {
        crate::host::cgroupfs::resources(r)?;
    }
    if spec.hooks().is_some() {
        return no("hooks", "hooks");
    }
    if spec.hostname().is_some() {
        return no("hostname", "a hostname");
    }
    Ok(())
}

/// The spec has no `field`.
fn missing(field: &'static str) -> ChildError {
    ChildError::invalid(field, "missing from the spec")
}

/// The container's standard streams, as the init gets them.
pub(crate) struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// A created container: its init, and how to take it back.
pub(crate) struct Created {
    pub pid: Pid,
    cgroup: String,
    dir: PathBuf,
}

impl Created {
    /// Kills the init (during the create its cgroup and folder go with the
    /// [`Unmade`]).
    fn kill(&self) {
        let _ = kill(self.pid, Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }

    /// Kills the init and removes its cgroup and folder.
    pub(crate) fn undo(&self) {
        self.kill();
        if let Some(h) = crate::host::cgroupfs::hierarchy() {
            let _ = h.remove_pod(&self.cgroup);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The container's folder and cgroup while a create may still fail:
/// removed when dropped unless the create succeeded (`made` set). The
/// forked init never returns, so never drops it.
struct Unmade<'a> {
    dir: PathBuf,
    cgroup: (&'a cgroup::Hierarchy, &'a str),
    made: bool,
}

impl Drop for Unmade<'_> {
    fn drop(&mut self) {
        if self.made {
            return;
        }
        let (h, path) = self.cgroup;
        let _ = h.remove_pod(path);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Namespaces of the spec: joined by path, or made new (`None`).
struct Namespaces {
    pid: Option<Option<OwnedFd>>,
    /// The pod's user namespace, joined before the others: they belong to
    /// it, and so do the ones made new.
    user: Option<OwnedFd>,
    join: Vec<(CloneFlags, OwnedFd)>,
    new: CloneFlags,
}

fn namespaces(spec: &Spec) -> Result<Namespaces, ChildError> {
    let mut ns = Namespaces {
        pid: None,
        user: None,
        join: Vec::new(),
        new: CloneFlags::empty(),
    };
    for n in spec
        .linux()
        .as_ref()
        .and_then(|l| l.namespaces().as_ref())
        .into_iter()
        .flatten()
    {
        let flag = match n.typ() {
            LinuxNamespaceType::Mount => CloneFlags::CLONE_NEWNS,
            LinuxNamespaceType::Network => CloneFlags::CLONE_NEWNET,
            LinuxNamespaceType::Ipc => CloneFlags::CLONE_NEWIPC,
            LinuxNamespaceType::Uts => CloneFlags::CLONE_NEWUTS,
            LinuxNamespaceType::Pid => CloneFlags::CLONE_NEWPID,
            LinuxNamespaceType::User => CloneFlags::CLONE_NEWUSER,
            other => {
                return Err(ChildError::invalid(
                    "linux.namespaces",
                    format!("a {other:?} namespace is not supported here"),
                ));
            }
        };
        let fd = match n.path() {
            Some(p) => Some(
                File::open(p)
                    .map(OwnedFd::from)
                    .map_err(ChildError::io("open namespace", p))?,
            ),
            None => None,
        };
        match (flag, fd) {
            (CloneFlags::CLONE_NEWPID, fd) => ns.pid = Some(fd),
            (CloneFlags::CLONE_NEWUSER, Some(fd)) => ns.user = Some(fd),
            (CloneFlags::CLONE_NEWUSER, None) => {
                return Err(ChildError::invalid(
                    "linux.namespaces",
                    "a new user namespace (the pod's is joined)",
                ));
            }
            (f, Some(fd)) => ns.join.push((f, fd)),
            (f, None) => ns.new |= f,
        }
    }
    if !ns.new.contains(CloneFlags::CLONE_NEWNS) {
        return Err(ChildError::invalid(
            "linux.namespaces",
            "no new mount namespace",
        ));
    }
    Ok(ns)
}

/// Makes the container: returns once its init waits for the start.
pub(crate) fn create(
    id: &str,
    spec: &Spec,
    filters: Vec<seccompiler::BpfProgram>,
    state_root: &Path,
    stdio: Stdio,
    console: Option<&Path>,
) -> Result<Created, ChildError> {
    let root = plan::root(spec)?;
    let args = spec
        .process()
        .as_ref()
        .and_then(|p| p.args().clone())
        .filter(|a| !a.is_empty())
        .ok_or_else(|| missing("process.args"))?;
    let process = crate::process::nsexec::process_plan(spec, filters, &args, false)?;
    let ns = namespaces(spec)?;
    let linux = spec.linux().as_ref().ok_or_else(|| missing("linux"))?;
    let cgroup_path = linux
        .cgroups_path()
        .as_ref()
        .and_then(|p| p.to_str())
        .ok_or_else(|| missing("linux.cgroupsPath"))?;
    let resources =
        crate::host::cgroupfs::resources(&linux.resources().clone().unwrap_or_default())?;
    let h = crate::host::cgroupfs::hierarchy()
        .ok_or_else(|| ChildError::detail("find the cgroup filesystem", "none is mounted"))?;
    let cgroups: Vec<CgroupDir> = h
        .container_dirs(cgroup_path)
        .map_err(ChildError::os("find the container's cgroup"))?
        .into_iter()
        .map(|(mount_point, dir)| CgroupDir {
            v2: matches!(h, cgroup::Hierarchy::V2(_)),
            mount_point,
            dir,
        })
        .collect();

    std::fs::create_dir_all(state_root).map_err(ChildError::io("create", state_root))?;
    let dir = state_root.join(id);
    std::fs::create_dir(&dir).map_err(ChildError::io("create", &dir))?;
    let mut unmade = Unmade {
        dir: dir.clone(),
        cgroup: (h, cgroup_path),
        made: false,
    };
    // Limits in force before the init joins.
    h.make_container(cgroup_path, &resources)
        .map_err(ChildError::os("make the container's cgroup"))?;
    let sock = dir.join("notify.sock");
    let listener = crate::host::via_dir_fd(&sock)
        .and_then(|(_dir, via)| UnixListener::bind(via))
        .map_err(ChildError::io("bind", &sock))?;
    let ((go_r, go_w), (status_r, status_w)) = pipe2(OFlag::O_CLOEXEC)
        .and_then(|go| Ok((go, pipe2(OFlag::O_CLOEXEC)?)))
        .map_err(ChildError::errno("pipe"))?;
    // The PID namespace is the one the monitor's next child gets: the
    // monitor forks nothing else.
    // A new one in a pod's user namespace must be the pod root's (else the
    // container may not mount its /proc): the init makes it there and
    // its child goes on as the init; the monitor becomes that child's
    // parent when the init exits, as a subreaper.
    let pid_in_user = matches!((&ns.pid, &ns.user), (Some(None), Some(_)));
    let entered = match &ns.pid {
        Some(Some(fd)) => setns(fd.as_fd(), CloneFlags::CLONE_NEWPID),
        Some(None) if pid_in_user => nix::sys::prctl::set_child_subreaper(true),
        Some(None) => unshare(CloneFlags::CLONE_NEWPID),
        None => Ok(()),
    };
    if let Err(e) = entered {
        return Err(ChildError::errno("enter the PID namespace")(e));
    }
    // Not dumpable from birth to exec: nothing in the container (a pod's
    // shared PID namespace has other processes) may open the child's
    // /proc/<pid>/exe, the picolet binary (CVE-2019-5736). The monitor is
    // dumpable again right after the fork.
    nix::sys::prctl::set_dumpable(false).map_err(ChildError::errno("set dumpable"))?;
    // SAFETY: the monitor is single-threaded: the child may run any code.
    let forked = unsafe { fork() };
    if matches!(forked, Ok(ForkResult::Parent { .. }) | Err(_)) {
        let _ = nix::sys::prctl::set_dumpable(true);
    }
    let pid = match forked {
        Ok(ForkResult::Child) => {
            drop((go_w, status_r));
            let child = Child {
                root: &root,
                process: &process,
                ns: &ns,
                stdio: &stdio,
                listener: &listener,
                console,
                cgroups: &cgroups,
                pid_in_user,
            };
            child.run(go_r, status_w)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => return Err(ChildError::errno("fork")(e)),
    };
    drop((go_r, status_w, stdio, listener));
    let created = Created {
        pid,
        cgroup: cgroup_path.to_string(),
        dir,
    };
    let placed = h
        .join_container(cgroup_path, pid.as_raw())
        .map_err(ChildError::os("place the init in its cgroup"));
    if let Err(e) = placed.and_then(|()| {
        File::from(go_w)
            .write_all(b"g")
            .map_err(ChildError::os("release the init"))
    }) {
        created.kill();
        return Err(e);
    }
    // One byte for ready; a ChildError (JSON) when the init failed (then EOF).
    let mut said = Vec::new();
    let _ = File::from(status_r)
        .take(crate::host::child_error::WIRE_MAX)
        .read_to_end(&mut said);
    let mut created = created;
    if pid_in_user {
        // `p<pid>\n` first: the init's child, now the init. The first one
        // has exited; reaped here, its child is the monitor's.
        let _ = waitpid(created.pid, None);
        match said_pid(&said) {
            Some((pid, rest)) => {
                created.pid = pid;
                said = rest.to_vec();
            }
            None if said.is_empty() => {
                return Err(ChildError::detail(
                    "wait for the container's init",
                    "it exited before it was ready",
                ));
            }
            None => return Err(ChildError::from_wire("the container's init said", &said)),
        }
    }
    if said.as_slice() == b"r" {
        unmade.made = true;
        return Ok(created);
    }
    created.kill();
    if said.is_empty() {
        return Err(ChildError::detail(
            "wait for the container's init",
            "it exited before it was ready",
        ));
    }
    Err(ChildError::from_wire("the container's init said", &said))
}

/// `p<pid>\n` at the start of what the init said, and the rest.
fn said_pid(said: &[u8]) -> Option<(Pid, &[u8])> {
    let rest = said.strip_prefix(b"p")?;
    let end = rest.iter().position(|&b| b == b'\n')?;
    let pid = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    Some((Pid::from_raw(pid), &rest[end + 1..]))
}

/// What the forked init works with (borrowed from the monitor's copy).
struct Child<'a> {
    root: &'a plan::RootPlan,
    process: &'a crate::process::nsexec::Plan,
    ns: &'a Namespaces,
    stdio: &'a Stdio,
    listener: &'a UnixListener,
    /// The monitor's console socket, for a container with a terminal.
    console: Option<&'a Path>,
    /// The container's cgroup in each hierarchy (for `/sys/fs/cgroup`).
    cgroups: &'a [CgroupDir],
    /// The container's new PID namespace is made by the init itself, in
    /// the pod's user namespace ([`Child::new_pid_namespace`]).
    pid_in_user: bool,
}

impl Child<'_> {
    fn run(&self, go: OwnedFd, status: OwnedFd) -> ! {
        let mut status = File::from(status);
        let mut byte = [0u8; 1];
        // EOF: the monitor could not place us in the cgroup.
        if !matches!(File::from(go).read(&mut byte), Ok(1)) {
            crate::process::nsexec::exit_now(1);
        }
        let file = match self.prepare(&mut status) {
            Ok(f) => f,
            Err(e) => {
                let _ = status.write_all(&e.to_wire());
                crate::process::nsexec::exit_now(1);
            }
        };
        if status.write_all(b"r").is_err() {
            crate::process::nsexec::exit_now(1);
        }
        drop(status);
        // Wait for StartContainer: a connection that says its message and
        // closes. A connection that closes at once (a probe) is no start.
        loop {
            match self.listener.accept() {
                Ok((mut s, _)) => {
                    let mut msg = Vec::new();
                    if Read::by_ref(&mut s).take(64).read_to_end(&mut msg).is_ok()
                        && !msg.is_empty()
                    {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    eprintln!("picolet init: wait for the start: {e}");
                    crate::process::nsexec::exit_now(1);
                }
            }
        }
        if let Err(e) = crate::process::nsexec::become_the_container(self.process) {
            eprintln!("picolet init: {e}");
            crate::process::nsexec::exit_now(126);
        }
        let env = crate::process::nsexec::with_home(&self.process.env, self.process.uid.as_raw());
        let e = nix::unistd::execve(&file, &self.process.argv, &env).unwrap_err();
        eprintln!("picolet init: exec {:?}: {e}", file.to_string_lossy());
        crate::process::nsexec::exit_now(if e == nix::errno::Errno::ENOENT {
            127
        } else {
            126
        })
    }

    /// Joins the pod's user namespace (after taking from the host what is
    /// out of reach there) and becomes its root; nothing without one.
    fn enter_user(&self) -> Result<Option<outside::Outside>, ChildError> {
        let Some(user) = &self.ns.user else {
            return Ok(None);
        };
        let outside = outside::take_outside(self.root, user)?;
        setns(user.as_fd(), CloneFlags::CLONE_NEWUSER)
            .map_err(ChildError::errno("join the pod's user namespace"))?;
        // The host's root is nobody there: become the namespace's root
        // (what the init makes is then the pod root's, as runc's).
        let root = (nix::unistd::Gid::from_raw(0), nix::unistd::Uid::from_raw(0));
        nix::unistd::setresgid(root.0, root.0, root.0)
            .and_then(|()| nix::unistd::setresuid(root.1, root.1, root.1))
            .map_err(ChildError::errno("become the user namespace's root"))?;
        Ok(Some(outside))
    }

    /// A PID namespace of the pod root's for the container: made here, in
    /// the user namespace, and entered by a child, which goes on as the
    /// init (its pid 1). This process says the child's pid on `status`
    /// (`p<pid>\n`) and exits; the monitor, a subreaper, gets the child.
    fn new_pid_namespace(&self, status: &mut File) -> Result<(), ChildError> {
        unshare(CloneFlags::CLONE_NEWPID).map_err(ChildError::errno("make the PID namespace"))?;
        // The child waits for the pid to be said: nothing it says may come
        // first on the pipe.
        let (said_r, said_w) = pipe2(OFlag::O_CLOEXEC).map_err(ChildError::errno("pipe"))?;
        // SAFETY: this process is single-threaded (the monitor's child).
        match unsafe { fork() }.map_err(ChildError::errno("fork the init"))? {
            ForkResult::Child => {
                drop(said_w);
                // EOF once this process has said it (or is gone).
                let _ = File::from(said_r).read(&mut [0u8; 1]);
                Ok(())
            }
            ForkResult::Parent { child } => {
                let said = status.write_all(format!("p{child}\n").as_bytes());
                drop((said_r, said_w));
                crate::process::nsexec::exit_now(i32::from(said.is_err()))
            }
        }
    }

    /// Everything up to the wait for the start; returns the program to exec.
    fn prepare(&self, status: &mut File) -> Result<std::ffi::CString, ChildError> {
        // Device nodes get the spec's modes, not the monitor's umask ones.
        let umask = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        // Connected while the host's paths are in reach; the master goes
        // over it once the pty is made in the container's devpts.
        let console = match self.console {
            Some(p) => Some(
                crate::host::via_dir_fd(p)
                    .and_then(|(_dir, via)| std::os::unix::net::UnixStream::connect(via))
                    .map_err(ChildError::io("connect to the console socket", p))?,
            ),
            None => None,
        };
        let outside = self.enter_user()?;
        if self.pid_in_user {
            self.new_pid_namespace(status)?;
        }
        nix::unistd::setsid().map_err(ChildError::errno("setsid"))?;
        for (fd, n) in [
            (&self.stdio.stdin, 0),
            (&self.stdio.stdout, 1),
            (&self.stdio.stderr, 2),
        ] {
            nix::unistd::dup2(fd.as_raw_fd(), n).map_err(ChildError::errno("dup2 stdio"))?;
        }
        for (flag, fd) in &self.ns.join {
            setns(fd.as_fd(), *flag).map_err(ChildError::errno_at(
                "join namespace",
                format_args!("{flag:?}"),
            ))?;
        }
        unshare(self.ns.new).map_err(ChildError::errno_at(
            "make new namespaces",
            format_args!("{:?}", self.ns.new),
        ))?;
        rootfs::prepare(self.root, self.cgroups, outside.as_ref())?;
        if let Some(c) = &console {
            crate::process::nsexec::container_terminal(c.as_fd(), true)?;
        }
        let arg0 = self
            .process
            .argv
            .first()
            .ok_or_else(|| missing("process.args"))?;
        let file = crate::process::nsexec::resolve(arg0, &self.process.search_path)
            .filter(|f| {
                std::fs::metadata(std::ffi::OsStr::from_bytes(f.as_bytes()))
                    .is_ok_and(|m| m.is_file())
            })
            .ok_or_else(|| {
                ChildError::detail_at(
                    "exec",
                    format_args!("{:?}", arg0.to_string_lossy()),
                    "executable file not found in $PATH",
                )
            })?;
        nix::sys::stat::umask(match self.process.umask {
            Some(m) => nix::sys::stat::Mode::from_bits_truncate(m),
            None => umask,
        });
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(process: serde_json::Value, linux: serde_json::Value) -> Spec {
        let mut s = serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "/r"},
            "process": {"cwd": "/", "args": ["sh"], "user": {"uid": 0, "gid": 0}},
            "linux": {"namespaces": [{"type": "mount"}, {"type": "pid"}]},
        });
        for (k, v) in [("process", process), ("linux", linux)] {
            if let (Some(to), Some(from)) = (s[k].as_object_mut(), v.as_object()) {
                to.extend(from.clone());
            }
        }
        serde_json::from_value(s).expect("spec")
    }

    #[test]
    fn the_pid_said_before_ready_or_an_error() {
        assert_eq!(
            said_pid(b"p4242\nr"),
            Some((Pid::from_raw(4242), &b"r"[..]))
        );
        assert_eq!(said_pid(b"p7\n"), Some((Pid::from_raw(7), &b""[..])));
        for bad in [&b"r"[..], b"{\"step\":\"x\"}", b"p\n", b"p12", b"px\nr"] {
            assert_eq!(said_pid(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn what_the_init_does_not_make_is_refused_by_name() {
        let none = serde_json::json!({});
        assert_eq!(supported(&spec(none.clone(), none.clone())), Ok(()));
        for (process, linux, named) in [
            (
                serde_json::json!({"rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1, "soft": 1}]}),
                none.clone(),
                "process.rlimits",
            ),
            (
                none.clone(),
                serde_json::json!({"namespaces": [{"type": "mount"}, {"type": "user"}]}),
                "a new user namespace",
            ),
            (
                none.clone(),
                serde_json::json!({"sysctl": {"net.ipv4.ip_forward": "1"}}),
                "linux.sysctl",
            ),
            (
                none.clone(),
                serde_json::json!({"namespaces": [{"type": "mount"}, {"type": "cgroup"}]}),
                "Cgroup namespace",
            ),
            (
                none.clone(),
                serde_json::json!({"resources": {"blockIO": {"weight": 10}}}),
                "linux.resources.blockIO",
            ),
        ] {
            let err = supported(&spec(process, linux))
                .expect_err(named)
                .to_string();
            assert!(err.contains(named), "{err}");
        }
    }
}
