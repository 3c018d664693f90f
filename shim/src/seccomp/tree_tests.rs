//! The search gives every syscall and argument the answer seccompiler's row
//! of comparisons gives, in a few steps: both run on a small interpreter of
//! the instructions either uses.

use super::*;
use crate::seccomp::{compile_with, runtime_default};
use oci_spec::runtime::LinuxSeccomp;
use serde_json::json;

/// Runs `p` on a `struct seccomp_data`: (return value, instructions run).
fn run(p: &[sock_filter], nr: u32, arch: u32, args: &[u64; 6]) -> (u32, usize) {
    let word = |off: u32| -> u32 {
        match off {
            0 => nr,
            4 => arch,
            8 | 12 => 0,
            16..=63 => {
                let a = args[((off - 16) / 8) as usize].to_le_bytes();
                let half = if (off - 16).is_multiple_of(8) {
                    &a[..4]
                } else {
                    &a[4..]
                };
                u32::from_le_bytes([half[0], half[1], half[2], half[3]])
            }
            _ => panic!("load of offset {off}"),
        }
    };
    let (mut acc, mut pc, mut steps) = (0u32, 0usize, 0usize);
    loop {
        let i = &p[pc];
        steps += 1;
        pc += 1;
        let cond = |c: bool| usize::from(if c { i.jt } else { i.jf });
        match i.code {
            LD_W_ABS => acc = word(i.k),
            0x54 => acc &= i.k,
            JA => pc += i.k as usize,
            JEQ_K => pc += cond(acc == i.k),
            0x25 => pc += cond(acc > i.k),
            JGE_K => pc += cond(acc >= i.k),
            0x45 => pc += cond(acc & i.k != 0),
            RET_K => return (i.k, steps),
            c => panic!("instruction {c:#x} at {}", pc - 1),
        }
    }
}

fn profile(v: serde_json::Value) -> LinuxSeccomp {
    serde_json::from_value(v).expect("valid OCI seccomp")
}

/// Arguments that reach each condition of RuntimeDefault (clone's
/// namespace flags, personality's values, socket's AF_VSOCK) and miss it.
fn argument_sets() -> Vec<[u64; 6]> {
    let mut out = vec![[0; 6], [u64::MAX; 6]];
    for v in [
        0x10000000u64, // CLONE_NEWUSER
        0x7E020000,
        0x0100,
        0x8,
        0x20000,
        0x20008,
        0xffffffff,
        40, // AF_VSOCK
        2,
        1 << 32,
        (1 << 32) | 8,
    ] {
        for i in 0..3 {
            let mut a = [0; 6];
            a[i] = v;
            out.push(a);
        }
    }
    out
}

fn same_answers(p: &LinuxSeccomp) {
    let row = compile_with(p, false).expect("row");
    let tree = compile_with(p, true).expect("tree");
    assert_eq!(row.len(), tree.len());
    let arch = prefix_of(&row[0]).expect("prefix")[1].k;
    for (r, t) in row.iter().zip(&tree) {
        for a in [arch, arch ^ 1] {
            for nr in 0..=600 {
                for args in argument_sets() {
                    assert_eq!(
                        run(r, nr, a, &args).0,
                        run(t, nr, a, &args).0,
                        "syscall {nr}, arch {a:#x}, args {args:x?}"
                    );
                }
            }
        }
    }
}

#[test]
fn runtime_default_gives_the_same_answers_in_a_few_steps() {
    for caps in [vec![], vec!["CAP_SYS_ADMIN".to_string()]] {
        let p = profile(runtime_default(&caps));
        same_answers(&p);
        let row = &compile_with(&p, false).expect("row")[0];
        let tree = &compile_with(&p, true).expect("tree")[0];
        let arch = prefix_of(row).expect("prefix")[1].k;
        let worst = |prog: &[sock_filter]| {
            (0..=600)
                .map(|nr| run(prog, nr, arch, &[0; 6]).1)
                .max()
                .unwrap_or(0)
        };
        // What the kernel's cache emulation walks per syscall number.
        assert!(worst(row) > 300, "row: {}", worst(row));
        assert!(worst(tree) <= 40, "tree: {}", worst(tree));
        assert!(tree.len() < row.len(), "{} vs {}", tree.len(), row.len());
    }
}

#[test]
fn profiles_with_other_actions_and_argument_rules_give_the_same_answers() {
    let names = [
        "read",
        "write",
        "openat",
        "close",
        "fstat",
        "mmap",
        "mprotect",
        "munmap",
        "brk",
        "rt_sigaction",
        "rt_sigprocmask",
        "ioctl",
        "pread64",
        "pwrite64",
        "readv",
        "writev",
        "pipe2",
        "dup3",
        "nanosleep",
        "getpid",
        "exit_group",
        "futex",
        "execve",
        "wait4",
    ];
    same_answers(&profile(json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "syscalls": [
            {"names": names, "action": "SCMP_ACT_ALLOW"},
            {"names": ["socket"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 40, "op": "SCMP_CMP_NE"}]},
            {"names": ["socket"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 1, "value": 2, "op": "SCMP_CMP_EQ"}]},
            {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 8, "op": "SCMP_CMP_LE"}]},
            {"names": ["kill"], "action": "SCMP_ACT_KILL_PROCESS"},
            {"names": ["uname"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
            {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}
        ]
    })));
}

#[test]
fn duplicate_numbers_and_oversized_programs_are_refused() {
    let ret = Arm::Ret(0x7fff_0000);
    assert!(dispatch(&[], vec![(1, ret.clone()), (1, ret.clone())], 0).is_err());
    let big = Arm::Rules(vec![stmt(RET_K, 0); 3000]);
    assert!(dispatch(&[], vec![(1, big.clone()), (2, big)], 0).is_err());
    let p = dispatch(&[], vec![(5, ret)], 7).expect("one arm");
    assert_eq!(run(&p, 5, 0, &[0; 6]).0, 0x7fff_0000);
    assert_eq!(run(&p, 6, 0, &[0; 6]).0, 7);
}
