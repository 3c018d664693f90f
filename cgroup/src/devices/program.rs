//! The eBPF device program for a [`Policy`]: one block per exception, in the
//! order the kernel's v1 controller would check them, each returning the
//! opposite of the default; the default at the end.
//!
//! The kernel passes `struct bpf_cgroup_dev_ctx { u32 access_type; u32 major;
//! u32 minor; }` in r1, with `access_type = access << 16 | type`; r0 = 1
//! allows, 0 denies.

use super::{Access, Kind, Policy};

/// One eBPF instruction, laid out as the kernel's `struct bpf_insn`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// dst_reg:4, src_reg:4 (bit-field order follows the byte order).
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

pub(crate) const LDX_MEM_W: u8 = 0x61;
pub(crate) const ALU32_AND_K: u8 = 0x54;
pub(crate) const ALU32_RSH_K: u8 = 0x74;
pub(crate) const ALU32_MOV_K: u8 = 0xb4;
pub(crate) const ALU32_MOV_X: u8 = 0xbc;
pub(crate) const JNE_K: u8 = 0x55;
pub(crate) const JEQ_K: u8 = 0x15;
pub(crate) const JSET_K: u8 = 0x45;
pub(crate) const JA: u8 = 0x05;
pub(crate) const EXIT: u8 = 0x95;

const R0: u8 = 0;
const R1: u8 = 1;
const TYPE: u8 = 2;
const ACCESS: u8 = 3;
const MAJOR: u8 = 4;
const MINOR: u8 = 5;

/// `BPF_DEVCG_DEV_BLOCK` / `BPF_DEVCG_DEV_CHAR`.
pub(crate) fn type_bits(kind: Kind) -> u32 {
    match kind {
        Kind::Block => 1,
        Kind::Char => 2,
    }
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    #[cfg(target_endian = "little")]
    let regs = (src << 4) | (dst & 0x0f);
    #[cfg(target_endian = "big")]
    let regs = (dst << 4) | (src & 0x0f);
    Insn {
        code,
        regs,
        off,
        imm,
    }
}

/// Splits `Insn::regs` into (dst, src).
#[cfg(test)]
pub(crate) fn regs(i: &Insn) -> (usize, usize) {
    #[cfg(target_endian = "little")]
    return ((i.regs & 0x0f) as usize, (i.regs >> 4) as usize);
    #[cfg(target_endian = "big")]
    return ((i.regs >> 4) as usize, (i.regs & 0x0f) as usize);
}

/// An instruction of a block; `skip` ones jump to the next block.
struct Step {
    insn: Insn,
    skip: bool,
}

fn step(code: u8, dst: u8, src: u8, imm: i32) -> Step {
    Step {
        insn: insn(code, dst, src, 0, imm),
        skip: false,
    }
}

fn skip_unless_eq(reg: u8, value: u32) -> Step {
    // Majors and minors are at most 12 and 20 bits; a value that does not
    // fit the sign-extended immediate can never match: skip unconditionally.
    match i32::try_from(value) {
        Ok(v) => Step {
            insn: insn(JNE_K, reg, 0, 0, v),
            skip: true,
        },
        Err(_) => Step {
            insn: insn(JA, 0, 0, 0, 0),
            skip: true,
        },
    }
}

/// The program for `policy`.
pub fn program(policy: &Policy) -> Vec<Insn> {
    let mut out = vec![
        insn(LDX_MEM_W, TYPE, R1, 0, 0),
        insn(ALU32_AND_K, TYPE, 0, 0, 0xffff),
        insn(LDX_MEM_W, ACCESS, R1, 0, 0),
        insn(ALU32_RSH_K, ACCESS, 0, 0, 16),
        insn(LDX_MEM_W, MAJOR, R1, 4, 0),
        insn(LDX_MEM_W, MINOR, R1, 8, 0),
    ];
    let verdict = i32::from(!policy.default_allow);
    for e in &policy.exceptions {
        let mut block = vec![skip_unless_eq(TYPE, type_bits(e.kind))];
        if let Some(m) = e.major {
            block.push(skip_unless_eq(MAJOR, m));
        }
        if let Some(m) = e.minor {
            block.push(skip_unless_eq(MINOR, m));
        }
        if policy.default_allow {
            // Deny list: matches when the access asked for names any of it.
            if e.access != Access::ALL {
                block.push(step(ALU32_MOV_X, R1, ACCESS, 0));
                block.push(step(ALU32_AND_K, R1, 0, i32::from(e.access.bits())));
                block.push(Step {
                    insn: insn(JEQ_K, R1, 0, 0, 0),
                    skip: true,
                });
            }
        } else {
            // Allow list: matches when it grants all of the access asked for.
            let missing = Access::ALL.without(e.access);
            if !missing.is_empty() {
                block.push(Step {
                    insn: insn(JSET_K, ACCESS, 0, 0, i32::from(missing.bits())),
                    skip: true,
                });
            }
        }
        block.push(step(ALU32_MOV_K, R0, 0, verdict));
        block.push(step(EXIT, 0, 0, 0));
        let len = block.len();
        for (i, s) in block.into_iter().enumerate() {
            let mut insn = s.insn;
            if s.skip {
                // Relative to the next instruction; blocks are a handful long.
                insn.off =
                    i16::try_from(len - i - 1).expect("a block is a handful of instructions");
            }
            out.push(insn);
        }
    }
    out.push(insn(ALU32_MOV_K, R0, 0, 0, i32::from(policy.default_allow)));
    out.push(insn(EXIT, 0, 0, 0, 0));
    out
}
