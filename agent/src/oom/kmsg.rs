//! `/dev/kmsg` records and the OOM-kill reports in them, matched as
//! cAdvisor's oomparser matches them. Pure: the watcher feeds it records.
//!
//! Record format (Documentation/ABI/testing/dev-kmsg):
//! `prio,seq,usec,flags[,…];message`, then optional continuation lines
//! that start with a space (`SUBSYSTEM=…`, `DEVICE=…`).

/// One kmsg record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Facility × 8 + level.
    pub prio: u32,
    pub seq: u64,
    /// Microseconds since boot (CLOCK_MONOTONIC).
    pub usec: u64,
    pub message: &'a str,
}

/// Parses one record as one `read()` of /dev/kmsg returns it.
pub fn parse_record(raw: &str) -> Option<Record<'_>> {
    let (head, rest) = raw.split_once(';')?;
    let mut f = head.split(',');
    let prio = f.next()?.parse().ok()?;
    let seq = f.next()?.parse().ok()?;
    let usec = f.next()?.parse().ok()?;
    let message = rest.split('\n').next().unwrap_or("");
    Some(Record {
        prio,
        seq,
        usec,
        message,
    })
}

/// An OOM kill.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OomKill {
    /// µs since boot of the `invoked oom-killer` line (or the kill line).
    pub usec: u64,
    pub pid: u32,
    pub process: String,
    /// The victim's memory cgroup (`task_memcg`; "/" outside any).
    pub task_memcg: String,
    /// The cgroup whose limit was hit (`oom_memcg`); "/" for a global OOM.
    pub oom_memcg: String,
    /// `CONSTRAINT_MEMCG`, `CONSTRAINT_NONE`, … ("" on old kernels).
    pub constraint: String,
}

/// Turns a stream of messages into OOM kills. Kernels ≥ 4.19 print one
/// `oom-kill:constraint=…,task_memcg=…,task=…,pid=…` line; older ones
/// print `Task in <memcg> killed as a result of limit of <memcg>` and
/// then `Killed process <pid> (<name>)`.
#[derive(Debug, Default)]
pub struct OomParser {
    pending: Option<OomKill>,
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    // Values may contain commas only in cpuset/nodemask lists; the keys we
    // read are plain. Split on ",key=" boundaries.
    let start = line.find(&format!("{key}="))? + key.len() + 1;
    let rest = &line[start..];
    Some(rest.split(',').next().unwrap_or(rest))
}

impl OomParser {
    /// Feeds one message; returns a kill when one is complete.
    pub fn feed(&mut self, usec: u64, msg: &str) -> Option<OomKill> {
        if msg.contains("invoked oom-killer:") {
            self.pending = Some(OomKill {
                usec,
                ..Default::default()
            });
            return None;
        }
        if let Some(i) = msg.find("oom-kill:") {
            let line = &msg[i + "oom-kill:".len()..];
            let at = self.pending.take().map_or(usec, |p| p.usec);
            return Some(OomKill {
                usec: at,
                pid: field(line, "pid")?.parse().ok()?,
                process: field(line, "task")?.to_string(),
                task_memcg: field(line, "task_memcg").unwrap_or("/").to_string(),
                oom_memcg: field(line, "oom_memcg").unwrap_or("/").to_string(),
                constraint: field(line, "constraint").unwrap_or("").to_string(),
            });
        }
        if let Some(rest) = msg.strip_prefix("Task in ")
            && let Some((victim, limit)) = rest.split_once(" killed as a result of limit of ")
        {
            let p = self.pending.get_or_insert_with(|| OomKill {
                usec,
                ..Default::default()
            });
            p.task_memcg = victim.trim().to_string();
            p.oom_memcg = limit.trim().to_string();
            return None;
        }
        // "Killed process 4321 (tail) total-vm:…" (also after "Memory cgroup
        // out of memory: "). On new kernels the oom-kill line came first
        // and `pending` is already gone.
        if let Some(i) = msg.find("Killed process ") {
            let rest = &msg[i + "Killed process ".len()..];
            let mut p = self.pending.take()?;
            let (pid, after) = rest.split_once(' ')?;
            p.pid = pid.parse().ok()?;
            p.process = after
                .strip_prefix('(')
                .and_then(|a| a.split_once(')'))
                .map(|(n, _)| n.to_string())
                .unwrap_or_default();
            if p.task_memcg.is_empty() {
                p.task_memcg = "/".into();
                p.oom_memcg = "/".into();
            }
            return Some(p);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str]) -> Vec<OomKill> {
        let mut p = OomParser::default();
        lines
            .iter()
            .filter_map(|l| {
                let r = parse_record(l).expect("record");
                p.feed(r.usec, r.message)
            })
            .collect()
    }

    #[test]
    fn records_parse_with_continuations() {
        let r = parse_record("6,1206,3170123999,-,caller=T42;hello: world\n SUBSYSTEM=acpi\n")
            .expect("record");
        assert_eq!(
            r,
            Record {
                prio: 6,
                seq: 1206,
                usec: 3_170_123_999,
                message: "hello: world"
            }
        );
        assert!(parse_record("garbage").is_none());
    }

    // Recorded on this project's CI kind of VM (Linux 6.18, cgroup v1): a
    // 16 MiB memcg and busybox `tail /dev/zero`, every record from
    // `invoked oom-killer` to `Killed process` (backtrace, memory.stat dump,
    // task table), as /dev/kmsg returned them.
    #[test]
    fn recorded_kernel_6_18_memcg_kill() {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/kmsg-6.18-memcg-oom.txt"
        ));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() > 80);
        let k = run(&lines);
        assert_eq!(
            k,
            [OomKill {
                usec: 3_270_913_341,
                pid: 8032,
                process: "busybox".into(),
                task_memcg: "/picolet-kmsg-rec".into(),
                oom_memcg: "/picolet-kmsg-rec".into(),
                constraint: "CONSTRAINT_MEMCG".into(),
            }]
        );
    }

    // Recorded on Debian's own 6.1 kernels (6.1.0-56-cloud-amd64 and
    // 6.1.0-56-arm64) booted under qemu by tests/vm/record-kmsg-oom.sh: a
    // 16 MiB memcg laid out like a pod's (cgroup v2), busybox `tail`.
    #[test]
    fn recorded_kernel_6_1_amd64_and_arm64_memcg_kills() {
        for (text, usec, pid) in [
            (
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/testdata/kmsg-6.1-amd64-memcg-oom.txt"
                )),
                2140018,
                93,
            ),
            (
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/testdata/kmsg-6.1-arm64-memcg-oom.txt"
                )),
                1507219,
                94,
            ),
        ] {
            let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with(' ')).collect();
            let k = run(&lines);
            let memcg = "/kubepods/besteffort/pod0a1b2c3d4e5f60718293a4b5c6d7e8f9/c0ffee";
            assert_eq!(
                k,
                [OomKill {
                    usec,
                    pid,
                    process: "tail".into(),
                    task_memcg: memcg.into(),
                    oom_memcg: memcg.into(),
                    constraint: "CONSTRAINT_MEMCG".into(),
                }]
            );
        }
    }

    // Linux 6.1 format (mm/oom_kill.c; values written for the test): a
    // memcg limit hit in a container's cgroup.
    #[test]
    fn kernel_6_1_memcg_kill() {
        let k = run(&[
            "4,1180,3170120000,-;tail invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=1000",
            "4,1181,3170120010,-;CPU: 1 PID: 4321 Comm: tail Not tainted 6.1.0-27-cloud-amd64 #1  Debian 6.1.115-1",
            "6,1205,3170120300,-;memory: usage 16384kB, limit 16384kB, failcnt 77",
            "6,1206,3170120400,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=c1,mems_allowed=0,oom_memcg=/kubepods/besteffort/pod0a1b/c1,task_memcg=/kubepods/besteffort/pod0a1b/c1,task=tail,pid=4321,uid=0",
            "3,1207,3170120500,-;Memory cgroup out of memory: Killed process 4321 (tail) total-vm:6988kB, anon-rss:15808kB, file-rss:4kB, shmem-rss:0kB, UID:0 pgtables:76kB oom_score_adj:1000",
        ]);
        assert_eq!(
            k,
            [OomKill {
                usec: 3_170_120_000,
                pid: 4321,
                process: "tail".into(),
                task_memcg: "/kubepods/besteffort/pod0a1b/c1".into(),
                oom_memcg: "/kubepods/besteffort/pod0a1b/c1".into(),
                constraint: "CONSTRAINT_MEMCG".into(),
            }]
        );
    }

    // Linux 5.10 format: a pod-level limit hit, the victim in a container below.
    #[test]
    fn kernel_5_10_pod_limit_kill() {
        let k = run(&[
            "4,900,55000000,-;sh invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=995",
            "6,920,55000300,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,oom_memcg=/kubepods/burstable/podf00,task_memcg=/kubepods/burstable/podf00/c2,task=sh,pid=77,uid=1000",
            "3,921,55000310,-;Memory cgroup out of memory: Killed process 77 (sh) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:40kB oom_score_adj:995",
        ]);
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].oom_memcg, "/kubepods/burstable/podf00");
        assert_eq!(k[0].task_memcg, "/kubepods/burstable/podf00/c2");
        assert_eq!((k[0].pid, k[0].process.as_str()), (77, "sh"));
    }

    // Linux 4.14 format (before the one-line oom-kill summary of 4.19):
    // "Task in … killed as a result of …".
    #[test]
    fn kernel_4_14_memcg_kill() {
        let k = run(&[
            "4,500,1000000,-;tail invoked oom-killer: gfp_mask=0x14000c0(GFP_KERNEL), nodemask=(null), order=0, oom_score_adj=1000",
            "6,510,1000100,-;Task in /kubepods/besteffort/pod9/c9 killed as a result of limit of /kubepods/besteffort/pod9/c9",
            "6,511,1000110,-;memory: usage 16384kB, limit 16384kB, failcnt 12",
            "3,530,1000300,-;Memory cgroup out of memory: Kill process 99 (tail) score 1999 or sacrifice child",
            "3,531,1000310,-;Killed process 99 (tail) total-vm:6988kB, anon-rss:16000kB, file-rss:4kB, shmem-rss:0kB",
        ]);
        assert_eq!(
            k,
            [OomKill {
                usec: 1_000_000,
                pid: 99,
                process: "tail".into(),
                task_memcg: "/kubepods/besteffort/pod9/c9".into(),
                oom_memcg: "/kubepods/besteffort/pod9/c9".into(),
                constraint: String::new(),
            }]
        );
    }

    // A global (system) OOM, 6.1 format: the victim's memcg outside any pod.
    #[test]
    fn system_oom() {
        let k = run(&[
            "4,10,5,-;stress invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
            "6,11,6,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/stress.service,task=stress,pid=5,uid=0",
            "3,12,7,-;Out of memory: Killed process 5 (stress) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0",
        ]);
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].constraint, "CONSTRAINT_NONE");
        assert_eq!(k[0].oom_memcg, "/", "global OOM: no oom_memcg");
        assert_eq!(k[0].task_memcg, "/system.slice/stress.service");
    }

    #[test]
    fn unrelated_lines_and_a_stray_killed_line_are_ignored() {
        let k = run(&[
            "6,1,1,-;Killed process 1 (x) is not an OOM report here",
            "6,2,2,-;eth0: link up",
        ]);
        assert!(k.is_empty());
    }
}
