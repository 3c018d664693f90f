//! The two `bpf(2)` commands a device program needs, on the raw syscall:
//! `BPF_PROG_LOAD` and `BPF_PROG_ATTACH`. Each attr struct is the prefix of
//! the kernel's `union bpf_attr` for that command; the kernel zero-fills the
//! part it knows and we do not pass.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::Insn;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;

#[repr(C, align(8))]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
}

#[repr(C, align(8))]
#[derive(Default)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
}

fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is an initialised #[repr(C)] prefix of `union bpf_attr`
    // for `cmd`, alive for the call; the kernel reads (and for some commands
    // writes) at most `size_of::<T>()` bytes of it. Pointers inside it point
    // at buffers the caller keeps alive across the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            libc::c_uint::try_from(std::mem::size_of::<T>()).unwrap_or(libc::c_uint::MAX),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn load(insns: &[Insn], log: Option<&mut Vec<u8>>) -> io::Result<OwnedFd> {
    let license = b"Apache-2.0\0";
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: u32::try_from(insns.len()).unwrap_or(u32::MAX),
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    if let Some(buf) = log {
        attr.log_level = 1;
        attr.log_size = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        attr.log_buf = buf.as_mut_ptr() as u64;
    }
    let fd = sys_bpf(BPF_PROG_LOAD, &mut attr)?;
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("bpf: fd out of range"))?;
    // SAFETY: BPF_PROG_LOAD returned a new file descriptor that nothing else
    // owns (close-on-exec, as every bpf fd).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Loads a `BPF_PROG_TYPE_CGROUP_DEVICE` program. Kernels before 5.11
/// charge programs to RLIMIT_MEMLOCK: on EPERM the soft limit is raised to
/// the hard one and the load tried once more. On a verifier rejection the
/// error carries the end of the verifier's log.
pub(super) fn load_device_program(insns: &[Insn]) -> io::Result<OwnedFd> {
    match load(insns, None) {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) && raise_memlock() => load(insns, None),
        Err(e)
            if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::EACCES) =>
        {
            let mut log = vec![0u8; 64 * 1024];
            let again = load(insns, Some(&mut log));
            let text = String::from_utf8_lossy(&log);
            let text = text.trim_end_matches('\0').trim();
            let tail: Vec<&str> = text.lines().rev().take(6).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            match again {
                Ok(fd) => Ok(fd),
                Err(_) => Err(io::Error::new(
                    e.kind(),
                    format!("load device program: {e}: verifier: {}", tail.join(" / ")),
                )),
            }
        }
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("load device program: {e}"),
        )),
    }
}

fn raise_memlock() -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into our local.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0
        || lim.rlim_cur >= lim.rlim_max
    {
        return false;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads one initialised rlimit.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) == 0 }
}

/// Attaches `prog` to the cgroup directory `cgroup` with `BPF_F_ALLOW_MULTI`.
pub(super) fn attach_device_program(cgroup: &File, prog: &OwnedFd) -> io::Result<()> {
    let fd = |raw: i32| u32::try_from(raw).map_err(|_| io::Error::other("bad fd"));
    let mut attr = ProgAttach {
        target_fd: fd(cgroup.as_raw_fd())?,
        attach_bpf_fd: fd(prog.as_raw_fd())?,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
    };
    sys_bpf(BPF_PROG_ATTACH, &mut attr).map(|_| ())
}
