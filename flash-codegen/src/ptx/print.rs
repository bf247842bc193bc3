//! PTX IR layer: the printer, the only place that knows PTX syntax.
//!
//! Output is deterministic: registers are numbered per class in creation order, labels
//! in creation order, floats are written as exact hex (`0f3FB8AA3B`).

use std::fmt::{self, Write};

use super::inst::{
    AluOp, AnyOperand, AnyReg, Cmp, CpCache, HalfFmt, Inst, LdCache, MmaKind, PredOp, ShflMode,
    Space, Special, Stmt, Ty, VecWidth,
};
use super::module::{Entry, Module};
use super::types::{Addr, Guard, Kind, Label, Operand, Reg, RegClass};

/// The name of the dynamic shared memory symbol every module declares.
pub const SMEM_SYMBOL: &str = "smem";

/// Prints a whole module.
pub fn module(m: &Module) -> String {
    let mut s = String::new();
    write_module(&mut s, m).expect("writing to a String cannot fail");
    s
}

/// Prints one instruction (no guard, no indentation, with the `;`).
pub fn inst(i: &Inst) -> String {
    let mut s = String::new();
    write_inst(&mut s, i).expect("writing to a String cannot fail");
    s
}

fn prefix(c: RegClass) -> &'static str {
    match c {
        RegClass::Pred => "%p",
        RegClass::B32 => "%r",
        RegClass::F32 => "%f",
        RegClass::B64 => "%rd",
        RegClass::B16 => "%h",
    }
}

fn decl_ty(c: RegClass) -> &'static str {
    match c {
        RegClass::Pred => ".pred",
        RegClass::B32 => ".b32",
        RegClass::F32 => ".f32",
        RegClass::B64 => ".b64",
        RegClass::B16 => ".b16",
    }
}

struct R<K: Kind>(Reg<K>);
impl<K: Kind> fmt::Display for R<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", prefix(K::CLASS), self.0.id())
    }
}

struct A(AnyReg);
impl fmt::Display for A {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", prefix(self.0.class()), self.0.id())
    }
}

/// An operand: register, integer (hex when large) or exact hex f32.
struct O(AnyOperand);
impl fmt::Display for O {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            AnyOperand::Reg(r) => A(r).fmt(f),
            AnyOperand::Int(v) if (-(1 << 31)..(1 << 31)).contains(&v) => write!(f, "{v}"),
            AnyOperand::Int(v) => write!(f, "0x{v:X}"),
            AnyOperand::F32(v) => write!(f, "0f{:08X}", v.to_bits()),
        }
    }
}

struct Ad(Addr);
impl fmt::Display for Ad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (base, off) = match self.0 {
            Addr::Global(r, o) => (A(r.into()), o),
            Addr::Shared(r, o) => (A(r.into()), o),
        };
        match off {
            0 => write!(f, "[{base}]"),
            o => write!(f, "[{base}+{o}]"),
        }
    }
}

struct L(Label);
impl fmt::Display for L {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L{}", self.0.0)
    }
}

/// `{a, b, c}` or a single register.
fn list<T: fmt::Display>(items: impl IntoIterator<Item = T>, braces: bool) -> String {
    let v: Vec<String> = items.into_iter().map(|x| x.to_string()).collect();
    if braces {
        format!("{{{}}}", v.join(", "))
    } else {
        v.join(", ")
    }
}

fn ty(t: Ty) -> &'static str {
    match t {
        Ty::Pred => "pred",
        Ty::B16 => "b16",
        Ty::B32 => "b32",
        Ty::U32 => "u32",
        Ty::S32 => "s32",
        Ty::F32 => "f32",
        Ty::F16 => "f16",
        Ty::B64 => "b64",
        Ty::U64 => "u64",
        Ty::S64 => "s64",
    }
}

fn alu_op(op: AluOp) -> &'static str {
    match op {
        AluOp::Add => "add",
        AluOp::Sub => "sub",
        AluOp::Mul => "mul",
        AluOp::MulLo => "mul.lo",
        AluOp::MulWide => "mul.wide",
        AluOp::MadLo => "mad.lo",
        AluOp::MadWide => "mad.wide",
        AluOp::Fma => "fma.rn",
        AluOp::Min => "min",
        AluOp::Max => "max",
        AluOp::Neg => "neg",
        AluOp::And => "and",
        AluOp::Or => "or",
        AluOp::Xor => "xor",
        AluOp::Not => "not",
        AluOp::Shl => "shl",
        AluOp::Shr => "shr",
        AluOp::Div => "div",
        AluOp::Rem => "rem",
        AluOp::Ex2 => "ex2.approx.ftz",
        AluOp::Lg2 => "lg2.approx.ftz",
        AluOp::Rcp => "rcp.approx.ftz",
    }
}

fn cmp(c: Cmp) -> &'static str {
    match c {
        Cmp::Eq => "eq",
        Cmp::Ne => "ne",
        Cmp::Lt => "lt",
        Cmp::Le => "le",
        Cmp::Gt => "gt",
        Cmp::Ge => "ge",
    }
}

fn special(s: Special) -> &'static str {
    match s {
        Special::TidX => "%tid.x",
        Special::CtaIdX => "%ctaid.x",
        Special::CtaIdY => "%ctaid.y",
        Special::CtaIdZ => "%ctaid.z",
        Special::NCtaIdX => "%nctaid.x",
        Special::NCtaIdY => "%nctaid.y",
        Special::NCtaIdZ => "%nctaid.z",
        Special::LaneId => "%laneid",
    }
}

fn space(s: Space) -> &'static str {
    match s {
        Space::Global => "global",
        Space::Shared => "shared",
    }
}

fn vec_suffix(n: usize) -> &'static str {
    match VecWidth::of(n) {
        VecWidth::V1 => "",
        VecWidth::V2 => ".v2",
        VecWidth::V4 => ".v4",
    }
}

fn half(h: HalfFmt) -> &'static str {
    match h {
        HalfFmt::F16 => "f16",
        HalfFmt::Bf16 => "bf16",
    }
}

fn is_float(t: Ty) -> bool {
    matches!(t, Ty::F32 | Ty::F16)
}

/// Writes one instruction.
pub fn write_inst<W: Write>(w: &mut W, i: &Inst) -> fmt::Result {
    match i {
        Inst::Alu { op, ty: t, d, src } => {
            write!(
                w,
                "{}.{} {}, {};",
                alu_op(*op),
                ty(*t),
                A(*d),
                list(src.iter().map(|s| O(*s)), false)
            )
        }
        Inst::Setp {
            cmp: c,
            ty: t,
            p,
            a,
            b,
        } => {
            write!(
                w,
                "setp.{}.{} {}, {}, {};",
                cmp(*c),
                ty(*t),
                R(*p),
                O(*a),
                O(*b)
            )
        }
        Inst::Selp { ty: t, d, a, b, p } => write!(
            w,
            "selp.{} {}, {}, {}, {};",
            ty(*t),
            A(*d),
            O(*a),
            O(*b),
            R(*p)
        ),
        Inst::PredLogic { op, d, a, b } => {
            let o = match op {
                PredOp::And => "and",
                PredOp::Or => "or",
            };
            write!(w, "{o}.pred {}, {}, {};", R(*d), R(*a), R(*b))
        }
        Inst::VoteAny { d, a } => {
            write!(w, "vote.sync.any.pred {}, {}, 0xffffffff;", R(*d), R(*a))
        }
        Inst::Mov { ty: t, d, a } => write!(w, "mov.{} {}, {};", ty(*t), A(*d), O(*a)),
        Inst::MovSpecial { d, s } => write!(w, "mov.u32 {}, {};", R(*d), special(*s)),
        Inst::MovSmemBase { d } => write!(w, "mov.u32 {}, {SMEM_SYMBOL};", R(*d)),
        Inst::Cvt { d_ty, s_ty, d, a } => {
            let rnd = match (is_float(*d_ty), is_float(*s_ty)) {
                (true, false) => ".rn",
                (false, true) => ".rzi",
                _ => "",
            };
            write!(
                w,
                "cvt{rnd}.{}.{} {}, {};",
                ty(*d_ty),
                ty(*s_ty),
                A(*d),
                A(*a)
            )
        }
        Inst::CvtPack { fmt, d, hi, lo } => write!(
            w,
            "cvt.rn.{}x2.f32 {}, {}, {};",
            half(*fmt),
            R(*d),
            R(*hi),
            R(*lo)
        ),
        Inst::Unpack { lo, hi, a } => write!(w, "mov.b32 {{{}, {}}}, {};", R(*lo), R(*hi), R(*a)),
        Inst::CvtaGlobal { d, a } => write!(w, "cvta.to.global.u64 {}, {};", R(*d), R(*a)),
        Inst::LdParam { ty: t, d, param } => write!(w, "ld.param.{} {}, [{param}];", ty(*t), A(*d)),
        Inst::Ld {
            space: s,
            cache,
            ty: t,
            d,
            addr,
        } => {
            let nc = if *cache == LdCache::NonCoherent {
                ".nc"
            } else {
                ""
            };
            let dst = list(d.iter().map(|r| A(*r)), d.len() > 1);
            write!(
                w,
                "ld.{}{nc}{}.{} {dst}, {};",
                space(*s),
                vec_suffix(d.len()),
                ty(*t),
                Ad(*addr)
            )
        }
        Inst::St {
            space: s,
            ty: t,
            src,
            addr,
        } => {
            let v = list(src.iter().map(|r| A(*r)), src.len() > 1);
            write!(
                w,
                "st.{}{}.{} {}, {v};",
                space(*s),
                vec_suffix(src.len()),
                ty(*t),
                Ad(*addr)
            )
        }
        Inst::CpAsync {
            cache,
            size,
            dst,
            src,
            src_size,
        } => {
            let c = match cache {
                CpCache::Ca => "ca",
                CpCache::Cg => "cg",
            };
            write!(
                w,
                "cp.async.{c}.shared.global {}, {}, {}",
                Ad(*dst),
                Ad(*src),
                size.bytes()
            )?;
            if let Some(n) = src_size {
                write!(w, ", {}", O((*n).into()))?;
            }
            w.write_char(';')
        }
        Inst::CpAsyncCommit => w.write_str("cp.async.commit_group;"),
        Inst::CpAsyncWait { pending } => write!(w, "cp.async.wait_group {pending};"),
        Inst::Ldmatrix {
            num,
            trans,
            d,
            addr,
        } => {
            let t = if *trans { ".trans" } else { "" };
            let dst = list(d.iter().map(|r| R(*r)), true);
            write!(
                w,
                "ldmatrix.sync.aligned.m8n8.x{}{t}.shared.b16 {dst}, {};",
                num.count(),
                Ad(*addr)
            )
        }
        Inst::Mma(m) => {
            let MmaKind::M16N8K16F32(h) = m.kind;
            let h = half(h);
            write!(
                w,
                "mma.sync.aligned.m16n8k16.row.col.f32.{h}.{h}.f32 {}, {}, {}, {};",
                list(m.d.iter().map(|r| R(*r)), true),
                list(m.a.iter().map(|r| R(*r)), true),
                list(m.b.iter().map(|r| R(*r)), true),
                list(m.c.iter().map(|r| R(*r)), true)
            )
        }
        Inst::Shfl {
            mode,
            d,
            a,
            lane,
            clamp,
            mask,
        } => {
            let m = match mode {
                ShflMode::Bfly => "bfly",
                ShflMode::Idx => "idx",
            };
            write!(
                w,
                "shfl.sync.{m}.b32 {}, {}, {lane}, 0x{clamp:x}, 0x{mask:x};",
                A(*d),
                A(*a)
            )
        }
        Inst::BarSync { id, threads } => match threads {
            None => write!(w, "bar.sync {};", O((*id).into())),
            Some(n) => write!(w, "bar.sync {}, {n};", O((*id).into())),
        },
        Inst::BarWarpSync { mask } => write!(w, "bar.warp.sync {mask:#010x};"),
        Inst::RedAddF32 { addr, v } => write!(w, "red.global.add.f32 {}, {};", Ad(*addr), R(*v)),
        Inst::Bra { target, uni } => {
            write!(w, "bra{} {};", if *uni { ".uni" } else { "" }, L(*target))
        }
        Inst::Ret => w.write_str("ret;"),
    }
}

fn write_guard<W: Write>(w: &mut W, g: &Option<Guard>) -> fmt::Result {
    match g {
        Some(g) => write!(w, "@{}{} ", if g.negate { "!" } else { "" }, R(g.pred)),
        None => Ok(()),
    }
}

/// Writes one kernel entry.
pub fn write_entry<W: Write>(w: &mut W, e: &Entry) -> fmt::Result {
    writeln!(w, ".visible .entry {}(", e.name)?;
    for (i, p) in e.params.iter().enumerate() {
        let sep = if i + 1 < e.params.len() { "," } else { "" };
        writeln!(w, "    .param .{} {}{sep}", ty(p.ty), p.name)?;
    }
    writeln!(w, ")")?;
    if let Some(n) = e.bounds.max_threads {
        writeln!(w, ".maxntid {n}, 1, 1")?;
    }
    if let Some(n) = e.bounds.min_ctas_per_sm {
        writeln!(w, ".minnctapersm {n}")?;
    }
    writeln!(w, "{{")?;
    for c in RegClass::ALL {
        let n = e.declared(c);
        if n > 0 {
            writeln!(w, "    .reg {} {}<{n}>;", decl_ty(c), prefix(c))?;
        }
    }
    for s in &e.body {
        match s {
            Stmt::Inst { guard, inst } => {
                w.write_str("    ")?;
                write_guard(w, guard)?;
                write_inst(w, inst)?;
                w.write_char('\n')?;
            }
            Stmt::Label(l) => writeln!(w, "{}:", L(*l))?,
            Stmt::Comment(c) => writeln!(w, "    // {c}")?,
        }
    }
    writeln!(w, "}}")
}

/// Writes a module: header, the dynamic shared memory symbol, entries.
pub fn write_module<W: Write>(w: &mut W, m: &Module) -> fmt::Result {
    let (major, minor) = m.target.ptx_version();
    writeln!(
        w,
        "// Generated by flash-ptx {}. Do not edit.",
        env!("CARGO_PKG_VERSION")
    )?;
    writeln!(w, ".version {major}.{minor}")?;
    writeln!(w, ".target {}", m.target.name())?;
    writeln!(w, ".address_size 64")?;
    writeln!(w)?;
    writeln!(w, ".extern .shared .align 1024 .b8 {SMEM_SYMBOL}[];")?;
    for e in &m.entries {
        writeln!(w)?;
        write_entry(w, e)?;
    }
    Ok(())
}

/// The register operand text for a typed register (for tests and comments).
pub fn reg_name<K: Kind>(r: Reg<K>) -> String {
    R(r).to_string()
}

/// The operand text of an immediate f32 (exact hex).
pub fn f32_literal(v: f32) -> String {
    O(Operand::<super::types::F32>::Imm(v).into()).to_string()
}
