//! `/metrics/cadvisor` cost for N containers (default 100), in process:
//! read each container's cgroup (a cgroup v2 fixture tree with real kernel
//! file contents, so the figure does not depend on this machine's pods),
//! count threads/fds of this process as the per-container procfs part,
//! and render the exposition. Prints p50/p95 time and heap allocations
//! (a counting allocator) per scrape.
//!
//!   cargo run --release -p bench --bin scrape-bench [N]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agent::metrics::Format;
use agent::stats::cadvisor::{Entry, Labels, Snapshot, render};

fn text(snap: &Snapshot) -> String {
    Format::Text.encode(&render(snap))
}

fn openmetrics(snap: &Snapshot) -> String {
    Format::OpenMetrics.encode(&render(snap))
}
use cgroup::Hierarchy;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(l.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CPU_STAT: &str = "usage_usec 1520000\nuser_usec 1020000\nsystem_usec 500000\nnr_periods 40\nnr_throttled 7\nthrottled_usec 350000\n";
const MEMORY_STAT: &str = "anon 4096000\nfile 8192000\nkernel 385024\nfile_mapped 2048000\ninactive_anon 4096000\nactive_anon 0\ninactive_file 6144000\nactive_file 2048000\npgfault 3300\npgmajfault 7\n";

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100);
    let dir = std::env::temp_dir().join(format!("picolet-scrape-bench-{}", std::process::id()));
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("/kubepods/burstable/pod{:032x}/{:064x}", i / 2, i);
        let d = dir.join(id.trim_start_matches('/'));
        std::fs::create_dir_all(&d)?;
        for (f, t) in [
            ("cpu.stat", CPU_STAT),
            ("memory.current", "12288000\n"),
            ("memory.max", "67108864\n"),
            ("memory.stat", MEMORY_STAT),
            ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"),
            ("memory.peak", "13000000\n"),
            ("memory.swap.current", "0\n"),
            ("pids.current", "3\n"),
            ("pids.max", "max\n"),
            (
                "io.stat",
                "254:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n",
            ),
        ] {
            std::fs::write(d.join(f), t)?;
        }
        ids.push(id);
    }
    let h = Hierarchy::V2(dir.clone());
    let me = [std::process::id()];
    let snapshot = || {
        let mut snap = Snapshot::default();
        for (i, id) in ids.iter().enumerate() {
            let stats = h.stats(id).unwrap_or_default();
            let (threads, fds, sockets) = cgroup::procfs::process_counts(&me);
            snap.entries.push(Entry {
                labels: Labels {
                    container: format!("c{}", i % 2),
                    id: id.clone(),
                    image: "docker.io/library/busybox:latest".into(),
                    name: id.rsplit('/').next().unwrap_or("").into(),
                    namespace: "default".into(),
                    pod: format!("pod-{}", i / 2),
                },
                stats,
                threads,
                fds,
                sockets,
                ..Default::default()
            });
        }
        snap
    };
    let mut snap = snapshot();
    // Fixed, so two builds' pages can be compared byte for byte.
    snap.timestamp_ms = 1_700_000_000_123;
    if let Some(dir) = std::env::var_os("SCRAPE_BENCH_DUMP") {
        let dir = std::path::Path::new(&dir);
        std::fs::write(dir.join("cadvisor.txt"), text(&snap))?;
        std::fs::write(dir.join("cadvisor.om"), openmetrics(&snap))?;
    }
    let runs = 50;
    println!(
        "\n/metrics/cadvisor for {n} containers, in process, {runs} scrapes (cgroup v2 fixture tree)\n"
    );
    println!(
        "| | p50 | p95 | allocations per scrape | bytes allocated per scrape | exposition size |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let rows: [(&str, &dyn Fn() -> usize); 3] = [
        ("read cgroups + procfs + render", &|| {
            text(&snapshot()).len()
        }),
        ("render, text 0.0.4", &|| text(&snap).len()),
        ("render, OpenMetrics 1.0", &|| openmetrics(&snap).len()),
    ];
    for (what, f) in rows {
        let _ = f();
        let mut times = Vec::new();
        let (a0, b0) = (
            ALLOCS.load(Ordering::Relaxed),
            BYTES.load(Ordering::Relaxed),
        );
        let mut size = 0;
        for _ in 0..runs {
            let t = Instant::now();
            size = f();
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (a1, b1) = (
            ALLOCS.load(Ordering::Relaxed),
            BYTES.load(Ordering::Relaxed),
        );
        times.sort_by(f64::total_cmp);
        let q = |percent: usize| times[((times.len() - 1) * percent + 50) / 100];
        println!(
            "| {what} | {:.2} ms | {:.2} ms | {} | {:.1} KiB | {:.1} KiB |",
            q(50),
            q(95),
            (a1 - a0) / runs,
            (b1 - b0) as f64 / runs as f64 / 1024.0,
            size as f64 / 1024.0
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
