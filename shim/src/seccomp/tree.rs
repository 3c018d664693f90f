//! A filter's syscall dispatch as a binary search over syscall numbers, as
//! libseccomp does with `SCMP_FLTATR_CTL_OPTIMIZE` 2.
//!
//! seccompiler emits one comparison per syscall, in a row: RuntimeDefault's
//! ~350 allowed syscalls made a program of ~1,750 instructions that a
//! syscall it does not name walks to the end. The kernel walks it too when
//! the filter is installed: it emulates the program for every syscall
//! number to find those it may always allow (its action cache), with the
//! process's signal lock held and interrupts off. That was ~0.6 ms of each
//! container init's CPU at a cold start of 100 pods (`do_seccomp` in
//! `perf`). Here a syscall number reaches its rules after ~9 comparisons,
//! and the program is about half as long (less for the JIT to translate).
//!
//! The rules of one syscall with argument conditions are seccompiler's own
//! program for that syscall alone, embedded whole: its jumps are relative
//! and only go forward, so none leave it.

use seccompiler::{BpfProgram, sock_filter};

/// Why the search cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("syscall number {0} has two arms")]
    TwoArms(u32),
    #[error("{0} instructions: more than the kernel's {MAX_INSNS}")]
    TooLong(usize),
    #[error("a jump of {0} instructions: too far")]
    TooFar(usize),
}

const LD_W_ABS: u16 = 0x20;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
/// `offsetof(struct seccomp_data, nr)`.
const NR: u32 = 0;
/// Keys compared one by one at a leaf of the search.
const LEAF: usize = 4;
/// BPF_MAXINSNS.
const MAX_INSNS: usize = 4096;

/// What a syscall number leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arm {
    /// This return value (`SECCOMP_RET_*`).
    Ret(u32),
    /// A whole program for this syscall alone (seccompiler's, from its
    /// load of the syscall number on): argument conditions.
    Rules(Vec<sock_filter>),
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Where a `JA` must go, patched once everything is placed.
enum Target {
    Arm(usize),
    Mismatch,
    At(usize),
}

/// The program: `prefix` (the architecture check), then the search over
/// `arms` (by syscall number; numbers unique), then `mismatch` for every
/// number without an arm.
pub fn dispatch(
    prefix: &[sock_filter],
    mut arms: Vec<(u32, Arm)>,
    mismatch: u32,
) -> Result<BpfProgram, TreeError> {
    arms.sort_by_key(|(nr, _)| *nr);
    if let Some(w) = arms.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(TreeError::TwoArms(w[0].0));
    }
    let mut out: Vec<sock_filter> = prefix.to_vec();
    out.push(stmt(LD_W_ABS, NR));
    let mut patches: Vec<(usize, Target)> = Vec::new();
    search(&arms, 0, arms.len(), &mut out, &mut patches);
    let mismatch_at = out.len();
    out.push(stmt(RET_K, mismatch));
    // One return per distinct value, then each syscall's own rules.
    let mut rets: Vec<(u32, usize)> = Vec::new();
    let mut arm_at = Vec::with_capacity(arms.len());
    for (_, arm) in &arms {
        arm_at.push(match arm {
            Arm::Ret(k) => match rets.iter().find(|(v, _)| v == k) {
                Some((_, at)) => *at,
                None => {
                    rets.push((*k, out.len()));
                    out.push(stmt(RET_K, *k));
                    out.len() - 1
                }
            },
            Arm::Rules(body) => {
                out.extend_from_slice(body);
                out.len() - body.len()
            }
        });
    }
    if out.len() > MAX_INSNS {
        return Err(TreeError::TooLong(out.len()));
    }
    for (at, target) in patches {
        let to = match target {
            Target::Arm(i) => arm_at[i],
            Target::Mismatch => mismatch_at,
            Target::At(to) => to,
        };
        // Forward only: every target is placed after its jump.
        out[at].k = u32::try_from(to - at - 1).map_err(|_| TreeError::TooFar(to - at - 1))?;
    }
    Ok(out)
}

/// Code for `arms[lo..hi]`, the syscall number in the accumulator.
fn search(
    arms: &[(u32, Arm)],
    lo: usize,
    hi: usize,
    out: &mut Vec<sock_filter>,
    patches: &mut Vec<(usize, Target)>,
) {
    if hi - lo <= LEAF {
        for (i, (nr, _)) in arms.iter().enumerate().take(hi).skip(lo) {
            out.push(jump(JEQ_K, *nr, 0, 1));
            patches.push((out.len(), Target::Arm(i)));
            out.push(stmt(JA, 0));
        }
        patches.push((out.len(), Target::Mismatch));
        out.push(stmt(JA, 0));
        return;
    }
    let mid = lo + (hi - lo) / 2;
    // nr >= arms[mid]: the jump to the upper half; else fall past it.
    out.push(jump(JGE_K, arms[mid].0, 0, 1));
    let upper = out.len();
    out.push(stmt(JA, 0));
    search(arms, lo, mid, out, patches);
    patches.push((upper, Target::At(out.len())));
    search(arms, mid, hi, out, patches);
}

/// The architecture check at the head of a seccompiler program: all
/// before its first load of the syscall number.
pub fn prefix_of(program: &[sock_filter]) -> Option<&[sock_filter]> {
    let at = program
        .iter()
        .position(|i| i.code == LD_W_ABS && i.k == NR)?;
    Some(&program[..at])
}

/// seccompiler's program for one syscall, from its load of the number on
/// (for [`Arm::Rules`]).
pub fn rules_of(program: &[sock_filter]) -> Option<Vec<sock_filter>> {
    let prefix = prefix_of(program)?.len();
    Some(program[prefix..].to_vec())
}

/// The syscall number a one-syscall seccompiler program compares with.
pub fn number_of(program: &[sock_filter]) -> Option<u32> {
    let prefix = prefix_of(program)?.len();
    program
        .get(prefix + 1)
        .filter(|i| i.code == JEQ_K)
        .map(|i| i.k)
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
