//! Container cgroups, written by the runtime: made and limited by the
//! container's monitor before its init joins, changed by the shim on
//! UpdateContainerResources, removed by the shim once empty. One owner per
//! directory (the agent owns the pod cgroups above).
//!
//! The files, the values and the order of writes are runc's (and youki's
//! libcgroups', which wrote them before): v1 `memory.limit_in_bytes`
//! before or after `memory.memsw.limit_in_bytes` as the kernel's check
//! needs, `cpuset.cpus`/`mems` copied down from the parent so a process may
//! join, v2 controllers enabled down the chain of parents, the v1 device
//! list written rule by rule with the runtime's defaults after the spec's.
//! The machine's mount table comes from the caller's [`Hierarchy`], learned
//! once (libcgroups' v1 manager read it once per controller per create,
//! the largest single cost of a cold start of 100 pods).
//!
//! [`plan`] is pure: the writes for a set of limits, given what is in the
//! files now.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Component, Path, PathBuf};

use crate::devices::{Kind, Rule, runtime_defaults};
use crate::{Hierarchy, WrappedIoError};

/// A container's limits as OCI `linux.resources` states them: `swap` is
/// memory plus swap (v1's unit), `-1` is no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub memory: Option<i64>,
    pub swap: Option<i64>,
    pub cpu_shares: Option<u64>,
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub cpus: Option<String>,
    pub mems: Option<String>,
    pub pids: Option<i64>,
    /// (page size as the files name it, `2MB`; bytes).
    pub hugepages: Vec<(String, i64)>,
    /// v2 files by name (`memory.high`), written last.
    pub unified: Vec<(String, String)>,
    /// v1's device list, before the runtime's defaults (on v2 the monitor
    /// attaches a program instead: [`crate::devices`]).
    pub devices: Vec<Rule>,
}

/// One write: `value` to `file` in the container's directory of the
/// hierarchy that has `controller` (v2: its one directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub controller: &'static str,
    pub file: String,
    pub value: String,
}

/// Limits that cannot be written as they are stated; the message names the
/// `linux.resources` field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `memory.limit` or `memory.swap` below -1.
    #[error("linux.resources.{field}: {value:?} is below -1")]
    BelowMinusOne {
        field: &'static str,
        value: Option<i64>,
    },
    #[error("linux.resources.unified[{key}]: this machine's cgroups are v1 (unified needs v2)")]
    UnifiedOnV1 { key: String },
    #[error(
        "linux.resources.memory: swap ({swap}) is below the limit ({limit}); it counts memory plus swap"
    )]
    SwapBelowLimit { swap: i64, limit: i64 },
    #[error("linux.resources.memory.swap: set without a memory limit")]
    SwapWithoutLimit,
    #[error("linux.resources.unified[{key}]: not a file name")]
    UnifiedNotAFile { key: String },
}

/// What a plan reads first: a file of the container's directory.
pub type Read<'a> = &'a dyn Fn(&'static str, &str) -> Option<String>;

fn w(controller: &'static str, file: impl Into<String>, value: impl ToString) -> Write {
    Write {
        controller,
        file: file.into(),
        value: value.to_string(),
    }
}

/// The writes for `r`, in order. `create`: a new cgroup (the device list
/// is written only then). `read` gives a file's current content where the
/// order or the value depends on it.
pub fn plan(
    r: &Resources,
    v2: bool,
    create: bool,
    read: Read<'_>,
) -> Result<Vec<Write>, PlanError> {
    for (field, value) in [("memory.limit", r.memory), ("memory.swap", r.swap)] {
        if value.is_some_and(|v| v < -1) {
            return Err(PlanError::BelowMinusOne { field, value });
        }
    }
    let mut out = Vec::new();
    if v2 {
        plan_v2(r, read, &mut out)?;
    } else {
        plan_v1(r, create, read, &mut out)?;
    }
    Ok(out)
}

fn plan_v1(
    r: &Resources,
    create: bool,
    read: Read<'_>,
    out: &mut Vec<Write>,
) -> Result<(), PlanError> {
    if let Some(s) = r.cpu_shares.filter(|s| *s != 0) {
        out.push(w("cpu", "cpu.shares", s));
    }
    if let Some(p) = r.cpu_period.filter(|p| *p != 0) {
        out.push(w("cpu", "cpu.cfs_period_us", p));
    }
    if let Some(q) = r.cpu_quota.filter(|q| *q != 0) {
        out.push(w("cpu", "cpu.cfs_quota_us", q));
    }
    cpuset(r, out);
    let limit = r.memory.filter(|m| *m != 0);
    let swap = match (limit, r.swap) {
        (Some(-1), None) => Some(-1),
        (_, s) => s.filter(|s| *s != 0),
    };
    let memory = limit.map(|l| w("memory", "memory.limit_in_bytes", l));
    let memsw = swap.map(|s| w("memory", "memory.memsw.limit_in_bytes", s));
    // The kernel keeps memsw ≥ memory at every step: raise memsw first
    // when it grows past the current memory limit.
    let current =
        || read("memory", "memory.limit_in_bytes").and_then(|t| t.trim().parse::<i64>().ok());
    let swap_first =
        swap.is_some_and(|s| s == -1 || limit.is_some() && current().is_some_and(|c| c < s));
    if swap_first {
        out.extend(memsw.into_iter().chain(memory));
    } else {
        out.extend(memory.into_iter().chain(memsw));
    }
    pids(r, out);
    for (size, limit) in &r.hugepages {
        out.push(w(
            "hugetlb",
            format!("hugetlb.{size}.limit_in_bytes"),
            limit,
        ));
    }
    if let Some((k, _)) = r.unified.first() {
        return Err(PlanError::UnifiedOnV1 { key: k.clone() });
    }
    if create {
        for d in r.devices.iter().chain(&runtime_defaults()) {
            let file = if d.allow {
                "devices.allow"
            } else {
                "devices.deny"
            };
            out.push(w("devices", file, v1_line(d)));
        }
    }
    Ok(())
}

fn plan_v2(r: &Resources, read: Read<'_>, out: &mut Vec<Write>) -> Result<(), PlanError> {
    if let Some(weight) = r.cpu_shares.map(shares_to_weight).filter(|w| *w != 0) {
        out.push(w("cpu", "cpu.weight", weight));
    }
    let quota = |q: i64| if q > 0 { q.to_string() } else { "max".into() };
    let max = match (r.cpu_quota, r.cpu_period) {
        (Some(q), Some(p)) => Some(format!("{} {p}", quota(q))),
        (Some(q), None) => Some(quota(q)),
        // A new period keeps the quota there is.
        (None, Some(p)) => read("cpu", "cpu.max")
            .and_then(|t| t.split_whitespace().next().map(str::to_string))
            .map(|q| format!("{q} {p}")),
        (None, None) => None,
    };
    if let Some(m) = max {
        out.push(w("cpu", "cpu.max", m));
    }
    cpuset(r, out);
    let v2 = |v: i64| if v == -1 { "max".into() } else { v.to_string() };
    match (r.memory, r.swap) {
        (Some(l), Some(s)) => {
            if s == -1 || l == -1 {
                out.push(w("memory", "memory.swap.max", v2(s)));
            } else if s < l {
                return Err(PlanError::SwapBelowLimit { swap: s, limit: l });
            } else {
                // v1's memory + swap is v2's swap alone.
                out.push(w("memory", "memory.swap.max", s - l));
            }
            out.push(w("memory", "memory.max", v2(l)));
        }
        (Some(l), None) => {
            if l == -1 {
                out.push(w("memory", "memory.swap.max", "max"));
            }
            out.push(w("memory", "memory.max", v2(l)));
        }
        (None, Some(_)) => {
            return Err(PlanError::SwapWithoutLimit);
        }
        (None, None) => {}
    }
    pids(r, out);
    for (size, limit) in &r.hugepages {
        out.push(w("hugetlb", format!("hugetlb.{size}.max"), limit));
    }
    for (k, v) in &r.unified {
        let plain = !k.is_empty() && !k.contains('/') && !k.starts_with('.');
        if !plain {
            return Err(PlanError::UnifiedNotAFile { key: k.clone() });
        }
        out.push(Write {
            controller: "",
            file: k.clone(),
            value: v.clone(),
        });
    }
    Ok(())
}

fn cpuset(r: &Resources, out: &mut Vec<Write>) {
    if let Some(c) = &r.cpus {
        out.push(w("cpuset", "cpuset.cpus", c));
    }
    if let Some(m) = &r.mems {
        out.push(w("cpuset", "cpuset.mems", m));
    }
}

fn pids(r: &Resources, out: &mut Vec<Write>) {
    match r.pids {
        Some(p) if p > 0 => out.push(w("pids", "pids.max", p)),
        Some(p) if p < 0 => out.push(w("pids", "pids.max", "max")),
        _ => {}
    }
}

/// A rule as v1's `devices.allow` takes it: `c 1:3 rwm`, `a *:* rwm`.
pub fn v1_line(d: &Rule) -> String {
    let kind = match d.kind {
        None => 'a',
        Some(Kind::Block) => 'b',
        Some(Kind::Char) => 'c',
    };
    let n = |v: Option<u32>| v.map_or("*".to_string(), |v| v.to_string());
    format!("{kind} {}:{} {}", n(d.major), n(d.minor), d.access)
}

/// cpu.shares → cpu.weight for container cgroups as runc 1.3 converts
/// (a quadratic fit in log space that keeps 2 → 1, 1024 → 100 and
/// 262144 → 10000). Pod cgroups use kubelet's linear
/// [`crate::shares_to_weight`], as kubelet does.
// The float is in [1, 10000] after the clamp: the cast neither truncates
// nor loses a sign.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn shares_to_weight(shares: u64) -> u64 {
    match shares {
        0 => 0,
        1..=2 => 1,
        262_144.. => 10_000,
        s => {
            let l = (s as f64).log2();
            let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
            10f64.powf(exponent).ceil().clamp(1.0, 10_000.0) as u64
        }
    }
}

/// A path below the hierarchy's root, with no `..`.
fn rel(path: &str) -> io::Result<&Path> {
    let p = Path::new(path.trim_start_matches('/'));
    if p.as_os_str().is_empty() || p.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cgroup path {path:?}: want /a/b/c, without .."),
        ));
    }
    Ok(p)
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(WrappedIoError::write(path, value))
}

impl Hierarchy {
    /// The container's directory in each mounted hierarchy, with its mount
    /// point (v1: one per mount, co-mounted controllers share it).
    pub fn container_dirs(&self, path: &str) -> io::Result<Vec<(PathBuf, PathBuf)>> {
        let rel = rel(path)?;
        Ok(match self {
            Hierarchy::V1(m) => {
                let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
                for (_, mp) in m {
                    if !out.iter().any(|(p, _)| p == mp) {
                        out.push((mp.clone(), mp.join(rel)));
                    }
                }
                out
            }
            Hierarchy::V2(root) => vec![(root.clone(), root.join(rel))],
        })
    }

    fn dir_of(&self, controller: &str, rel: &Path) -> Option<PathBuf> {
        match self {
            Hierarchy::V1(m) => m
                .iter()
                .find(|(c, _)| c == controller)
                .map(|(_, mp)| mp.join(rel)),
            Hierarchy::V2(root) => Some(root.join(rel)),
        }
    }

    /// Makes container cgroup `path` in every hierarchy and writes `r`;
    /// a process joins with [`Hierarchy::join_container`].
    pub fn make_container(&self, path: &str, r: &Resources) -> io::Result<()> {
        let rel = rel(path)?;
        match self {
            Hierarchy::V1(m) => {
                for (_, dir) in self.container_dirs(path)? {
                    fs::create_dir_all(&dir).map_err(WrappedIoError::op("mkdir", &dir))?;
                }
                if let Some((_, mp)) = m.iter().find(|(c, _)| c == "cpuset") {
                    fill_cpuset(mp, rel)?;
                }
            }
            Hierarchy::V2(root) => make_v2(root, rel)?,
        }
        self.write_plan(rel, r, true)
    }

    /// Writes changed limits to a container's existing cgroup.
    pub fn update_container(&self, path: &str, r: &Resources) -> io::Result<()> {
        self.write_plan(rel(path)?, r, false)
    }

    /// Moves process `pid` into container cgroup `path` of every hierarchy.
    pub fn join_container(&self, path: &str, pid: i32) -> io::Result<()> {
        for (_, dir) in self.container_dirs(path)? {
            write_file(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    fn write_plan(&self, rel: &Path, r: &Resources, create: bool) -> io::Result<()> {
        let v2 = matches!(self, Hierarchy::V2(_));
        let read = |c: &'static str, f: &str| fs::read_to_string(self.dir_of(c, rel)?.join(f)).ok();
        let writes = plan(r, v2, create, &read)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // A file written more than once (v1's device list, rule by rule:
        // each write(2) is one rule) is opened once.
        let mut open: Vec<(PathBuf, fs::File)> = Vec::new();
        for wr in writes {
            let dir = self.dir_of(wr.controller, rel).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{}: no {} cgroup controller mounted",
                        wr.file, wr.controller
                    ),
                )
            })?;
            let path = dir.join(&wr.file);
            let at = match open.iter().position(|(p, _)| *p == path) {
                Some(at) => at,
                None => {
                    let f = fs::OpenOptions::new()
                        .write(true)
                        .truncate(true)
                        .open(&path)
                        .map_err(WrappedIoError::write(&path, &wr.value))?;
                    open.push((path, f));
                    open.len() - 1
                }
            };
            let (path, f) = &mut open[at];
            f.write_all(wr.value.as_bytes())
                .map_err(WrappedIoError::write(path, &wr.value))?;
        }
        Ok(())
    }
}

/// v1 cpuset: a cgroup whose `cpuset.cpus` or `cpuset.mems` is empty takes
/// no process (ENOSPC). Each empty one on the way down gets the value of
/// the nearest filled one above; only as far up as needed is read (a new
/// container's pod directory is filled already).
fn fill_cpuset(mount: &Path, rel: &Path) -> io::Result<()> {
    let dir = mount.join(rel);
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let mut empty = Vec::new();
        let mut value = None;
        for d in dir.ancestors() {
            let here = fs::read_to_string(d.join(file))?;
            if !here.trim().is_empty() {
                value = Some(here);
                break;
            }
            if d == mount {
                break;
            }
            empty.push(d);
        }
        let Some(value) = value else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: empty up to the hierarchy's root",
                    dir.join(file).display()
                ),
            ));
        };
        for d in empty.iter().rev() {
            write_file(&d.join(file), value.trim())?;
        }
    }
    Ok(())
}

/// v2: each directory down to the container's, and every controller the
/// root offers enabled in each parent's `cgroup.subtree_control` (best
/// effort, as runc: a limit that needs a missing one fails when written).
fn make_v2(root: &Path, rel: &Path) -> io::Result<()> {
    let offered = fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let mut dir = root.to_path_buf();
    for part in rel.components() {
        let control = dir.join("cgroup.subtree_control");
        let on = fs::read_to_string(&control).unwrap_or_default();
        let missing: Vec<String> = offered
            .split_whitespace()
            .filter(|c| !on.split_whitespace().any(|o| o == *c))
            .map(|c| format!("+{c}"))
            .collect();
        if !missing.is_empty() && write_file(&control, &missing.join(" ")).is_err() {
            for one in &missing {
                let _ = write_file(&control, one);
            }
        }
        dir.push(part);
        match fs::create_dir(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(WrappedIoError::op("mkdir", &dir)(e));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
