use super::program::*;
use super::*;

fn rule(
    allow: bool,
    kind: Option<Kind>,
    major: Option<u32>,
    minor: Option<u32>,
    access: &str,
) -> Rule {
    Rule {
        allow,
        kind,
        major,
        minor,
        access: access.parse().expect("access"),
    }
}
const C: Option<Kind> = Some(Kind::Char);
const B: Option<Kind> = Some(Kind::Block);
const R: Access = Access::READ;
const W: Access = Access::WRITE;
const M: Access = Access::MKNOD;
const RW: Access = Access(6);

/// The shim's unprivileged spec: deny all, the standard nodes, then the
/// runtime's defaults.
fn container_policy() -> Policy {
    let mut rules = vec![rule(false, None, None, None, "rwm")];
    rules.push(rule(true, C, Some(1), Some(3), "rwm"));
    rules.extend(runtime_defaults());
    Policy::from_rules(&rules)
}

#[test]
fn access_parses_and_prints() {
    assert_eq!("rwm".parse::<Access>(), Ok(Access::ALL));
    assert_eq!("mr".parse::<Access>(), Ok(Access(3)));
    assert_eq!("".parse::<Access>(), Ok(Access::default()));
    assert_eq!(
        "rx".parse::<Access>()
            .expect_err("x is no access")
            .to_string(),
        "access \"rx\": want letters of \"rwm\""
    );
    assert_eq!(Access(5).to_string(), "wm");
}

#[test]
fn unprivileged_container_gets_the_standard_nodes_and_mknod_only() {
    let p = container_policy();
    assert!(!p.default_allow);
    assert!(p.allows(Kind::Char, 1, 3, RW));
    assert!(p.allows(Kind::Char, 136, 7, RW), "any pts");
    assert!(p.allows(Kind::Char, 10, 200, RW), "tun");
    assert!(
        p.allows(Kind::Char, 1, 1, M),
        "mknod of /dev/mem is allowed"
    );
    assert!(!p.allows(Kind::Char, 1, 1, R), "opening it is not");
    assert!(!p.allows(Kind::Block, 8, 0, R));
    assert!(p.allows(Kind::Block, 8, 0, M));
    assert!(!p.allows(Kind::Block, 1, 3, R), "type matters");
    // c 1:3 appears twice (spec and defaults): one exception.
    let nulls = p
        .exceptions
        .iter()
        .filter(|e| e.major == Some(1) && e.minor == Some(3))
        .count();
    assert_eq!(nulls, 1);
}

#[test]
fn privileged_allows_everything_with_no_exceptions() {
    let mut rules = vec![rule(true, None, None, None, "rwm")];
    rules.extend(runtime_defaults());
    let p = Policy::from_rules(&rules);
    assert!(p.default_allow);
    assert!(p.exceptions.is_empty());
    assert!(p.allows(Kind::Block, 8, 0, RW));
}

#[test]
fn kernel_v1_semantics() {
    // An agreeing rule takes access out of the matching exception.
    let p = Policy::from_rules(&[
        rule(true, None, None, None, "rwm"),
        rule(false, C, Some(1), Some(5), "rw"),
        rule(true, C, Some(1), Some(5), "w"),
    ]);
    assert_eq!(p.exceptions.len(), 1);
    assert_eq!(p.exceptions[0].access, R);
    assert!(p.allows(Kind::Char, 1, 5, W));
    assert!(!p.allows(Kind::Char, 1, 5, R));
    assert!(
        !p.allows(Kind::Char, 1, 5, RW),
        "a deny list denies on any overlap"
    );
    // An allow list must grant all of it; a wildcard matches any number.
    let p = Policy::from_rules(&[
        rule(false, None, None, None, "rwm"),
        rule(true, C, Some(1), Some(5), "r"),
        rule(true, C, Some(4), None, "rw"),
    ]);
    assert!(p.allows(Kind::Char, 1, 5, R));
    assert!(!p.allows(Kind::Char, 1, 5, RW));
    assert!(p.allows(Kind::Char, 4, 64, RW));
    assert!(!p.allows(Kind::Char, 5, 64, R));
    // The same device twice widens one exception; type a resets everything.
    let mut p = Policy::from_rules(&[
        rule(false, None, None, None, "rwm"),
        rule(true, C, Some(1), Some(5), "r"),
        rule(true, C, Some(1), Some(5), "w"),
    ]);
    assert_eq!(p.exceptions.len(), 1);
    assert_eq!(p.exceptions[0].access, RW);
    p.apply(&rule(false, None, None, None, "rwm"));
    assert_eq!(p, Policy::default());
    // Empty access changes nothing; the fold starts from deny-all.
    p.apply(&rule(true, C, Some(1), Some(5), ""));
    assert_eq!(p, Policy::default());
    assert!(!Policy::from_rules(&[]).allows(Kind::Char, 1, 3, R));
}

/// Runs a device program the way the kernel would (only the instructions we
/// emit), checking that r1 is still the context when it is read.
fn run(prog: &[Insn], ctx: [u32; 3]) -> u64 {
    let mut r = [0u64; 11];
    let mut ctx_in_r1 = true;
    let mut pc = 0usize;
    for _ in 0..10_000 {
        let i = prog[pc];
        let (d, s) = regs(&i);
        pc += 1;
        let imm = i64::from(i.imm) as u64;
        let jump = |cond: bool, pc: &mut usize| {
            if cond {
                *pc = (*pc as isize + i.off as isize) as usize;
            }
        };
        if d == 1
            && matches!(
                i.code,
                ALU32_AND_K | ALU32_RSH_K | ALU32_MOV_K | ALU32_MOV_X
            )
        {
            ctx_in_r1 = false;
        }
        match i.code {
            LDX_MEM_W => {
                assert!(s == 1 && ctx_in_r1, "ctx read through r{s} at {}", pc - 1);
                r[d] = u64::from(ctx[(i.off / 4) as usize]);
            }
            ALU32_AND_K => r[d] = u64::from(r[d] as u32 & i.imm as u32),
            ALU32_RSH_K => r[d] = u64::from((r[d] as u32) >> i.imm),
            ALU32_MOV_K => r[d] = u64::from(i.imm as u32),
            ALU32_MOV_X => r[d] = u64::from(r[s] as u32),
            JNE_K => jump(r[d] != imm, &mut pc),
            JEQ_K => jump(r[d] == imm, &mut pc),
            JSET_K => jump(r[d] & imm != 0, &mut pc),
            JA => jump(true, &mut pc),
            EXIT => return r[0],
            c => panic!("opcode {c:#x}"),
        }
    }
    panic!("program did not exit");
}

fn policies() -> Vec<Policy> {
    let mut out = vec![
        container_policy(),
        Policy::default(),
        Policy::from_rules(&[rule(true, None, None, None, "rwm")]),
        Policy::from_rules(&[
            rule(true, None, None, None, "rwm"),
            rule(false, C, Some(1), Some(5), "w"),
            rule(false, B, None, None, "m"),
            rule(false, C, Some(136), None, "rwm"),
            rule(false, C, None, Some(7), "r"),
        ]),
    ];
    // A pseudo-random mix of both defaults and all rule shapes.
    let mut seed = 0x2545_f491_u32;
    let mut next = |n: u32| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed % n
    };
    for _ in 0..200 {
        let mut rules = Vec::new();
        for _ in 0..next(12) {
            let kind = [None, C, B, C][next(4) as usize];
            let num = |v: u32| (v < 3).then_some(v);
            rules.push(Rule {
                allow: next(2) == 0,
                kind: if next(6) == 0 { kind } else { kind.or(C) },
                major: num(next(4)),
                minor: num(next(4)),
                access: Access(next(8) as u8),
            });
        }
        out.push(Policy::from_rules(&rules));
    }
    out
}

#[test]
fn program_decides_like_the_policy() {
    let mut checked = 0;
    for p in policies() {
        let prog = program(&p);
        for kind in [Kind::Block, Kind::Char] {
            for major in [0, 1, 2, 5, 136, 4095] {
                for minor in [0, 1, 2, 3, 5, 7, 1 << 19] {
                    for access in 1..8u8 {
                        let ctx = [u32::from(access) << 16 | type_bits(kind), major, minor];
                        let want = p.allows(kind, major, minor, Access(access));
                        assert_eq!(
                            run(&prog, ctx) == 1,
                            want,
                            "{p:?}: {kind:?} {major}:{minor} {}",
                            Access(access)
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 100_000);
}

#[test]
fn program_is_small() {
    // Header (6) + at most 7 per exception + 2.
    let p = container_policy();
    let n = program(&p).len();
    assert!(n <= 8 + 7 * p.exceptions.len(), "{n}");
    // 12 exceptions: nine whole nodes rwm (5 each), pts (4), c/b mknod (4 each).
    assert_eq!((p.exceptions.len(), n), (12, 65));
    assert_eq!(program(&Policy::default()).len(), 8);
}

/// The real kernel: a cgroup v2 directory with the program attached, a
/// shell moved into it opening and creating device nodes. On this project's
/// v1 hybrid machines the empty unified hierarchy at /sys/fs/cgroup/unified
/// is enough — device programs there apply to every process in the cgroup.
#[test]
fn kernel_enforces_the_program() {
    let Some(root) = cgroup2_mount() else {
        return skip("no cgroup2 mount");
    };
    if !is_root() {
        return skip("needs root (bpf, mknod, cgroup writes)");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    for (name, minor) in [("null", 3), ("zero", 5), ("full", 7)] {
        run_ok(
            "mknod",
            &[
                d.join(name).to_str().expect("utf8"),
                "c",
                "1",
                &minor.to_string(),
            ],
        );
    }
    // Allow list: null rwm, zero r, mknod of char nodes only.
    let allow_list = Policy::from_rules(&[
        rule(false, None, None, None, "rwm"),
        rule(true, C, Some(1), Some(3), "rwm"),
        rule(true, C, Some(1), Some(5), "r"),
        rule(true, C, None, None, "m"),
    ]);
    // Deny list: everything but writes to zero and any block node.
    let deny_list = Policy::from_rules(&[
        rule(true, None, None, None, "rwm"),
        rule(false, C, Some(1), Some(5), "w"),
        rule(false, B, None, None, "rwm"),
    ]);
    for (name, policy) in [("allow-list", &allow_list), ("deny-list", &deny_list)] {
        let cg = root.join(format!("picolet-devtest-{}-{name}", std::process::id()));
        std::fs::create_dir(&cg).expect("mkdir cgroup");
        attach(&cg, policy).expect("attach");
        let script = format!(
            "echo $$ > {procs}; cd {d}
             t() {{ if ( eval \"$2\" ) 2>/dev/null; then echo \"$1 yes\"; else echo \"$1 no\"; fi; }}
             t null-r ': < null'; t null-w ': > null'; t zero-r ': < zero'; t zero-w ': > zero'
             t full-r ': < full'; t mknod-c 'mknod c c 1 7'; t mknod-b 'mknod b b 7 0'",
            procs = cg.join("cgroup.procs").display(),
            d = d.display()
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .expect("sh");
        let text = String::from_utf8_lossy(&out.stdout);
        let got: Vec<&str> = text.lines().collect();
        let want: Vec<String> = [
            ("null-r", Kind::Char, 3, R),
            ("null-w", Kind::Char, 3, W),
            ("zero-r", Kind::Char, 5, R),
            ("zero-w", Kind::Char, 5, W),
            ("full-r", Kind::Char, 7, R),
            ("mknod-c", Kind::Char, 7, M),
            ("mknod-b", Kind::Block, 0, M),
        ]
        .iter()
        .map(|&(what, kind, minor, access)| {
            let major = if kind == Kind::Block { 7 } else { 1 };
            let yes = policy.allows(kind, major, minor, access);
            format!("{what} {}", if yes { "yes" } else { "no" })
        })
        .collect();
        let _ = std::fs::remove_dir(&cg);
        let _ = std::fs::remove_file(d.join("c"));
        let _ = std::fs::remove_file(d.join("b"));
        assert_eq!(
            got,
            want,
            "{name}; stderr {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The models above, written out, so a wrong model fails too.
    assert!(!allow_list.allows(Kind::Char, 1, 5, W) && !deny_list.allows(Kind::Char, 1, 5, W));
    assert!(deny_list.allows(Kind::Char, 1, 7, R) && !allow_list.allows(Kind::Char, 1, 7, R));
}

fn run_ok(cmd: &str, args: &[&str]) {
    let st = std::process::Command::new(cmd)
        .args(args)
        .status()
        .expect(cmd);
    assert!(st.success(), "{cmd} {args:?}: {st}");
}

fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mount_point = left.split(' ').nth(4)?;
        right
            .starts_with("cgroup2 ")
            .then(|| std::path::PathBuf::from(mount_point))
    })
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn skip(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "kernel_enforces_the_program may not skip in CI: {why}"
    );
    eprintln!("skipped: {why}");
}
