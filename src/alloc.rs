//! The static (musl) builds' allocator: dlmalloc in the shim and the agent,
//! musl's own mallocng in every other process (monitors, the spawner, exec
//! helpers, `up`, `ctl`, the CNI plugin).
//!
//! At a cold start of 100 pods a third of the shim's user time was
//! mallocng: its one lock, its meta-area bookkeeping, its eager `munmap`s
//! and their TLB shootdowns. dlmalloc is several times cheaper per call
//! (one lock as well), but it keeps what a process freed: in each
//! container's monitor, which allocates for the create and then idles for
//! the container's life, that was ~0.07 MiB more PSS per pod
//! (`bench/footprint.sh`). So the role decides, once, at the process's
//! first allocation (one thread then), from `argv[1]` as the kernel has
//! it; a fork keeps its parent's choice (the spawner's monitors keep
//! mallocng). glibc builds use glibc's malloc.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

pub struct ByRole;

const UNDECIDED: u8 = 0;
const DLMALLOC: u8 = 1;
const SYSTEM: u8 = 2;

static MODE: AtomicU8 = AtomicU8::new(UNDECIDED);
static DL: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// Whether this process is the shim or the agent: `argv[1]`, read from
/// `/proc/self/cmdline` into the stack (no allocation in here). A binary
/// path longer than the buffer gets mallocng: slower, never wrong.
fn decide() -> u8 {
    let mut buf = [0u8; 1024];
    // SAFETY: a NUL-terminated path; `buf` outlives the read, which is
    // bounded by its length; the descriptor is closed once.
    let n = unsafe {
        let fd = libc::open(
            c"/proc/self/cmdline".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return SYSTEM;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let Ok(n) = usize::try_from(n) else {
        return SYSTEM;
    };
    match buf[..n].split(|b| *b == 0).nth(1) {
        Some(b"shim" | b"agent") => DLMALLOC,
        _ => SYSTEM,
    }
}

#[inline]
fn fast() -> bool {
    match MODE.load(Ordering::Relaxed) {
        UNDECIDED => {
            let m = decide();
            MODE.store(m, Ordering::Relaxed);
            m == DLMALLOC
        }
        m => m == DLMALLOC,
    }
}

// An explicit branch in each method, not a `&dyn GlobalAlloc` chosen per
// call: under LTO the dyn form made the static x86_64 binary 90,688 B
// larger (12,043,672 -> 12,133,912; aarch64 +98 KB).
//
// SAFETY: every call goes to the allocator chosen before the first
// allocation and never changed after, so each block is freed, zeroed and
// grown by the allocator that made it; both uphold GlobalAlloc's contract.
unsafe impl GlobalAlloc for ByRole {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if fast() {
                DL.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above; `ptr` came from the same allocator.
        unsafe {
            if fast() {
                DL.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        unsafe {
            if fast() {
                DL.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above; `ptr` came from the same allocator.
        unsafe {
            if fast() {
                DL.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

/// dlmalloc's lock taken around `fork(2)` (as musl does for its own), so a
/// child forked while another thread allocates can still allocate. Call
/// first thing in `main`.
pub fn fork_safe() {
    if fast() {
        // SAFETY: called once, before the process starts a thread.
        unsafe { dlmalloc::enable_alloc_after_fork() }
    }
}
