//! Seccomp, enforced without libseccomp: containerd's RuntimeDefault profile
//! (as OCI `linux.seccomp`), compiled to BPF with the pure-Rust `seccompiler`
//! in the monitor, and installed by [`install`] in the container's init (and
//! the exec helper's child) right before it execs the workload.
//!
//! One BPF filter per action: the main one returns the default action for
//! every syscall no rule names; each other action gets a filter that returns
//! it for its rules and ALLOW otherwise. The kernel applies the most
//! restrictive answer of all filters, which is OCI's semantics.
//!
//! Difference from runc: the filter goes in after the capabilities are
//! dropped, so a container without CAP_SYS_ADMIN gets no_new_privs set
//! (the kernel requires one or the other) — as if allowPrivilegeEscalation
//! were false. Containers without a seccomp profile are unaffected.

use std::borrow::Cow;
use std::collections::BTreeMap;

use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompOperator};
use seccompiler::{BpfProgram, TargetArch};
use serde_json::{Value, json};

mod default_profile;
mod tree;

pub use default_profile::runtime_default;

use crate::host::ChildError;

/// Why a seccomp profile does not compile, or compiled filters do not
/// decode. Post-fork code reports it as a [`ChildError`] of step `seccomp`.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp action {0} is not supported")]
    Action(String),
    #[error("compile seccomp profile: {0}")]
    Compile(#[source] seccompiler::Error),
    #[error("compile seccomp rules of {name}: {source}")]
    Rules {
        name: String,
        #[source]
        source: seccompiler::Error,
    },
    /// seccompiler's program is not what the binary search expects, or
    /// the search does not fit the kernel.
    #[error("compile seccomp profile: {0}")]
    Program(Cow<'static, str>),
    #[error("compile seccomp profile: {0}")]
    Tree(#[from] tree::TreeError),
    #[error("seccomp filter: {0}")]
    Filter(#[source] seccompiler::BackendError),
    #[error("seccomp profile: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("{0}")]
    Decode(Cow<'static, str>),
}

impl From<SeccompError> for ChildError {
    fn from(e: SeccompError) -> ChildError {
        ChildError::detail("seccomp", e.to_string())
    }
}

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;
const AF_VSOCK: u64 = 40;
/// CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
const CLONE_NS_FLAGS: u64 = 0x7E02_0000;

fn target_arch() -> TargetArch {
    if cfg!(target_arch = "aarch64") {
        TargetArch::aarch64
    } else {
        TargetArch::x86_64
    }
}

fn action_json(action: LinuxSeccompAction, errno: Option<u32>) -> Result<Value, SeccompError> {
    Ok(match action {
        LinuxSeccompAction::ScmpActAllow | LinuxSeccompAction::ScmpActLog => json!("allow"),
        LinuxSeccompAction::ScmpActErrno => json!({"errno": errno.unwrap_or(EPERM)}),
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            json!("kill_thread")
        }
        LinuxSeccompAction::ScmpActKillProcess => json!("kill_process"),
        LinuxSeccompAction::ScmpActTrap => json!("trap"),
        other => return Err(SeccompError::Action(format!("{other:?}"))),
    })
}

/// Whether seccompiler knows `name` on this architecture.
fn known(name: &str) -> bool {
    let probe = json!({"p": {"mismatch_action": "allow", "filter_action": {"errno": EPERM}, "filter": [{"syscall": name}]}});
    seccompiler::compile_from_json(probe.to_string().as_bytes(), target_arch()).is_ok()
}

fn rule_json(
    name: &str,
    args: &[oci_spec::runtime::LinuxSeccompArg],
) -> Result<Value, SeccompError> {
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
/// The main filter dispatches by a binary search over syscall numbers
/// (tree.rs says why).
pub fn compile(profile: &LinuxSeccomp) -> Result<Vec<BpfProgram>, SeccompError> {
    compile_with(profile, true)
}

/// Below this many named syscalls the main filter stays seccompiler's row.
const TREE_FROM: usize = 16;

fn compile_with(profile: &LinuxSeccomp, as_tree: bool) -> Result<Vec<BpfProgram>, SeccompError> {
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
        .map_err(SeccompError::Compile)?;
    let mut out = Vec::new();
    // Main first; order does not change the outcome (most restrictive wins).
    if let Some(main) = map.remove("main") {
        if as_tree && allow_all_named.len() >= TREE_FROM {
            out.push(main_as_tree(&main, &allow_all_named, &default)?);
        } else {
            out.push(main);
        }
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

/// The main filter (`compiled` by seccompiler from `rules`, which allow)
/// as a binary search: each syscall's number, and its own program where
/// its rules have argument conditions (one unconditional rule allows it
/// whatever the others say).
fn main_as_tree(
    compiled: &BpfProgram,
    rules: &[Value],
    default: &Value,
) -> Result<BpfProgram, SeccompError> {
    let bad = |what: &str| SeccompError::Program(format!("seccompiler's program {what}").into());
    let prefix = tree::prefix_of(compiled).ok_or_else(|| bad("loads no syscall number"))?;
    let mismatch = compiled
        .last()
        .filter(|i| i.code == 0x06)
        .map(|i| i.k)
        .ok_or_else(|| bad("does not end in a return"))?;
    let mut by_name: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for r in rules {
        let name = r["syscall"]
            .as_str()
            .ok_or_else(|| bad("rule without a name"))?;
        by_name.entry(name).or_default().push(r);
    }
    let mut arms = Vec::with_capacity(by_name.len());
    for (name, rs) in by_name {
        let always = rs.iter().any(|r| r.get("args").is_none());
        let filter = if always {
            json!([{ "syscall": name }])
        } else {
            json!(rs)
        };
        let one = json!({"one": {"mismatch_action": default, "filter_action": "allow", "filter": filter}});
        let alone = seccompiler::compile_from_json(one.to_string().as_bytes(), target_arch())
            .map_err(|source| SeccompError::Rules {
                name: name.to_string(),
                source,
            })?
            .remove("one")
            .ok_or_else(|| bad("is missing"))?;
        let nr = tree::number_of(&alone).ok_or_else(|| bad(&format!("for {name}: no number")))?;
        let arm = if always {
            tree::Arm::Ret(libc::SECCOMP_RET_ALLOW)
        } else {
            tree::Arm::Rules(
                tree::rules_of(&alone).ok_or_else(|| bad(&format!("for {name}: no rules")))?,
            )
        };
        arms.push((nr, arm));
    }
    Ok(tree::dispatch(prefix, arms, mismatch)?)
}

/// `ret SECCOMP_RET_ALLOW`: a one-instruction filter.
const ALLOW_ALL: seccompiler::sock_filter = seccompiler::sock_filter {
    code: 0x06, // BPF_RET | BPF_K
    jt: 0,
    jf: 0,
    k: 0x7fff_0000, // SECCOMP_RET_ALLOW
};

/// A filter that lets through only `syscalls` and fails every other call
/// with EPERM (for picolet's own processes in a pod, not for containers).
pub(crate) fn allow_only(syscalls: &[i64]) -> Result<BpfProgram, SeccompError> {
    let rules = syscalls.iter().map(|n| (*n, Vec::new())).collect();
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Errno(EPERM),
        seccompiler::SeccompAction::Allow,
        target_arch(),
    )
    .map_err(SeccompError::Filter)?;
    BpfProgram::try_from(filter).map_err(SeccompError::Filter)
}

/// Installs the filters in this thread; without CAP_SYS_ADMIN the kernel
/// requires no_new_privs first, so it is set.
pub fn install(filters: &[BpfProgram], has_sys_admin: bool) -> Result<(), ChildError> {
    if filters.is_empty() {
        return Ok(());
    }
    if !has_sys_admin {
        nix::sys::prctl::set_no_new_privs().map_err(ChildError::errno("set no_new_privs"))?;
    }
    let step = "install a seccomp filter";
    for f in filters {
        seccompiler::apply_filter(f).map_err(|e| match e {
            seccompiler::Error::Prctl(io) | seccompiler::Error::Seccomp(io) => {
                ChildError::os(step)(io)
            }
            other => ChildError::detail(step, other.to_string()),
        })?;
    }
    Ok(())
}

/// The bundle file holding a container's compiled filters ([`encode`]d),
/// written by the shim beside `config.json`.
pub(crate) const BUNDLE_FILE: &str = "seccomp.bpf";

/// The filters of a container's seccomp profile (none without one): the
/// shim's compiled ones from the bundle when it wrote them, else compiled
/// from the spec (a bundle made before the shim wrote the file).
pub(crate) fn seccomp_filters(
    bundle: &std::path::Path,
    spec: &oci_spec::runtime::Spec,
) -> Result<Vec<seccompiler::BpfProgram>, ChildError> {
    let Some(profile) = spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()) else {
        return Ok(Vec::new());
    };
    let file = bundle.join(BUNDLE_FILE);
    match std::fs::read(&file) {
        Ok(raw) => {
            decode(&raw).map_err(|e| ChildError::detail_at("decode", file.display(), e.to_string()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(compile(profile)?),
        Err(e) => Err(ChildError::io("read", &file)(e)),
    }
}

/// Compiled profiles, kept by the shim: compiling costs ~5–10 ms of CPU
/// (seccompiler builds its syscall table for every name it is asked about),
/// once per create and exec when the monitor and the exec helper compiled;
/// now once per distinct profile per shim.
#[derive(Debug, Default)]
pub(crate) struct Cache(std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<[u8]>>>);

/// Distinct profiles kept; past it the cache starts again (a node has a few:
/// RuntimeDefault per capability set, and its Localhost profiles).
const CACHE_MAX: usize = 64;

impl Cache {
    /// `profile` compiled and [`encode`]d.
    pub(crate) fn encoded(
        &self,
        profile: &LinuxSeccomp,
    ) -> Result<std::sync::Arc<[u8]>, SeccompError> {
        let key = serde_json::to_string(profile).map_err(SeccompError::Encode)?;
        // Held while compiling: 100 pods created at once compile the
        // profile once, the others wait for it, rather than 100 times.
        // Post-fork code's module: std's lock, not crate::mutex (a panic
        // here cannot leave the map half-written).
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(hit) = map.get(&key) {
            return Ok(hit.clone());
        }
        let bytes: std::sync::Arc<[u8]> = encode(&compile(profile)?).into();
        if map.len() >= CACHE_MAX {
            map.clear();
        }
        map.insert(key, bytes.clone());
        Ok(bytes)
    }
}

/// Programs as bytes: per program its instruction count (u32), then each
/// instruction as the kernel's `struct sock_filter` (u16 code, u8 jt, u8 jf,
/// u32 k), little-endian.
pub(crate) fn encode(programs: &[BpfProgram]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in programs {
        // Longer than the kernel takes: decode refuses it, by its length.
        let len = u32::try_from(p.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        for i in p {
            out.extend_from_slice(&i.code.to_le_bytes());
            out.extend_from_slice(&[i.jt, i.jf]);
            out.extend_from_slice(&i.k.to_le_bytes());
        }
    }
    out
}

/// The kernel takes at most this many instructions per program (BPF_MAXINSNS).
const MAX_INSNS: usize = 4096;

/// Reads what [`encode`] wrote; anything else is an error.
pub(crate) fn decode(mut raw: &[u8]) -> Result<Vec<BpfProgram>, SeccompError> {
    let bad = |why: &'static str| SeccompError::Decode(why.into());
    let mut out = Vec::new();
    while !raw.is_empty() {
        let (len, rest) = raw
            .split_at_checked(4)
            .ok_or_else(|| bad("truncated program length"))?;
        let n = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if n == 0 || n > MAX_INSNS {
            return Err(SeccompError::Decode(
                format!("a program of {n} instructions").into(),
            ));
        }
        let (body, rest) = rest
            .split_at_checked(n * 8)
            .ok_or_else(|| bad("truncated program"))?;
        out.push(
            body.chunks_exact(8)
                .map(|c| seccompiler::sock_filter {
                    code: u16::from_le_bytes([c[0], c[1]]),
                    jt: c[2],
                    jf: c[3],
                    k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                })
                .collect(),
        );
        raw = rest;
    }
    if out.is_empty() {
        return Err(bad("no program"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_filters_survive_the_bundle_file_and_bad_files_are_refused() {
        let spec = profile(runtime_default(&[]));
        let cache = Cache::default();
        let bytes = cache.encoded(&spec).expect("compile");
        let again = cache.encoded(&spec).expect("cached");
        assert!(std::sync::Arc::ptr_eq(&bytes, &again), "compiled once");
        let programs = compile(&spec).expect("compile");
        assert_eq!(decode(&bytes).expect("decode"), programs);
        assert!(decode(&[]).is_err());
        assert!(decode(&bytes[..bytes.len() - 3]).is_err());
        assert!(decode(&0u32.to_le_bytes()).is_err());
        assert!(decode(&5000u32.to_le_bytes()).is_err());
    }

    fn profile(v: Value) -> LinuxSeccomp {
        serde_json::from_value(v).expect("valid OCI seccomp")
    }

    #[test]
    fn runtime_default_compiles_for_this_arch() {
        let caps: Vec<String> = crate::spec::caps::DEFAULT_CAPS
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
