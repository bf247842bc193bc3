//! PTX IR layer: the builder, the only maker of registers and labels.
//!
//! Methods read like the instructions they append and return fresh typed registers.
//! Loop-carried values (running max, accumulators) are updated with [`Builder::assign`]
//! or in place by `mma`; ptxas coalesces the copies.

use super::inst::{
    AluOp, AnyOperand, AnyReg, Cmp, CpCache, CpSize, HalfFmt, Inst, LdCache, LdmNum, Mma, MmaKind,
    PredOp, ShflMode, Space, Special, Stmt, Ty,
};
use super::module::{Entry, LaunchBounds, Param};
use super::types::{Addr, B16, B32, B64, F32, Guard, Kind, Label, Operand, Pred, Reg, RegClass};

/// Builds one kernel body.
#[derive(Default)]
pub struct Builder {
    counts: [u32; 5],
    labels: u32,
    body: Vec<Stmt>,
    guard: Option<Guard>,
}

fn slot(c: RegClass) -> usize {
    RegClass::ALL
        .iter()
        .position(|x| *x == c)
        .expect("every class is in ALL")
}

macro_rules! alu {
    ($($(#[$doc:meta])* $name:ident($($a:ident),+) -> $k:ident = $op:ident . $ty:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(&mut self, $($a: impl Into<Operand<$k>>),+) -> Reg<$k> {
            let d = self.reg::<$k>();
            self.alu(AluOp::$op, Ty::$ty, d.into(), vec![$(AnyOperand::from($a.into())),+]);
            d
        }
    )*};
}

impl Builder {
    /// An empty body with no registers or labels.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh register of class `K`.
    pub fn reg<K: Kind>(&mut self) -> Reg<K> {
        let n = &mut self.counts[slot(K::CLASS)];
        *n += 1;
        Reg::new(*n - 1)
    }

    /// A fresh label (place it with [`Builder::place`]).
    pub fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    /// Places label `l` here (the next instruction is its target).
    pub fn place(&mut self, l: Label) {
        self.body.push(Stmt::Label(l));
    }

    /// A `// text` comment line in the PTX.
    pub fn comment(&mut self, text: impl Into<String>) {
        self.body.push(Stmt::Comment(text.into()));
    }

    /// Appends one instruction, under the current guard.
    pub fn push(&mut self, inst: Inst) {
        self.body.push(Stmt::Inst {
            guard: self.guard,
            inst,
        });
    }

    /// Runs `f` with every instruction it appends predicated on `p` (or `!p`).
    pub fn when<R>(&mut self, p: Reg<Pred>, negate: bool, f: impl FnOnce(&mut Self) -> R) -> R {
        assert!(self.guard.is_none(), "generator bug: nested guards");
        self.guard = Some(Guard { pred: p, negate });
        let r = f(self);
        self.guard = None;
        r
    }

    fn alu(&mut self, op: AluOp, ty: Ty, d: AnyReg, src: Vec<AnyOperand>) {
        debug_assert_eq!(src.len(), op.arity(), "generator bug: {op:?} arity");
        self.push(Inst::Alu { op, ty, d, src });
    }

    alu! {
        /// `add.u32`: a + b.
        add_u32(a, b) -> B32 = Add.U32;
        /// `sub.u32`: a - b.
        sub_u32(a, b) -> B32 = Sub.U32;
        /// `add.s32`: a + b.
        add_s32(a, b) -> B32 = Add.S32;
        /// `sub.s32`: a - b.
        sub_s32(a, b) -> B32 = Sub.S32;
        /// `mul.lo.u32`: the low 32 bits of a * b.
        mul_lo_u32(a, b) -> B32 = MulLo.U32;
        /// `mad.lo.u32`: the low 32 bits of a * b, plus c.
        mad_lo_u32(a, b, c) -> B32 = MadLo.U32;
        /// `min.u32`.
        min_u32(a, b) -> B32 = Min.U32;
        /// `max.u32`.
        max_u32(a, b) -> B32 = Max.U32;
        /// `min.s32`.
        min_s32(a, b) -> B32 = Min.S32;
        /// `max.s32`.
        max_s32(a, b) -> B32 = Max.S32;
        /// `div.u32`: a / b, rounded down.
        div_u32(a, b) -> B32 = Div.U32;
        /// `rem.u32`: a mod b.
        rem_u32(a, b) -> B32 = Rem.U32;
        /// `and.b32`.
        and_b32(a, b) -> B32 = And.B32;
        /// `or.b32`.
        or_b32(a, b) -> B32 = Or.B32;
        /// `xor.b32`.
        xor_b32(a, b) -> B32 = Xor.B32;
        /// `shl.b32`: a << b.
        shl_b32(a, b) -> B32 = Shl.B32;
        /// `shr.u32`: a >> b (logical).
        shr_u32(a, b) -> B32 = Shr.U32;
        /// `add.s64`: a + b.
        add_s64(a, b) -> B64 = Add.S64;
        /// `mul.lo.u64`: the low 64 bits of a * b.
        mul_lo_u64(a, b) -> B64 = MulLo.U64;
        /// `add.f32`: a + b, round to nearest.
        add_f32(a, b) -> F32 = Add.F32;
        /// `sub.f32`: a - b, round to nearest.
        sub_f32(a, b) -> F32 = Sub.F32;
        /// `mul.f32`: a * b, round to nearest.
        mul_f32(a, b) -> F32 = Mul.F32;
        /// `max.f32`.
        max_f32(a, b) -> F32 = Max.F32;
        /// `min.f32`.
        min_f32(a, b) -> F32 = Min.F32;
        /// `fma.rn.f32`: a * b + c, rounded once.
        fma_f32(a, b, c) -> F32 = Fma.F32;
        /// `neg.f32`: -a.
        neg_f32(a) -> F32 = Neg.F32;
        /// 2^a, approximate (2 ulp), flushes subnormals.
        ex2(a) -> F32 = Ex2.F32;
        /// log2(a), approximate.
        lg2(a) -> F32 = Lg2.F32;
        /// 1/a, approximate (1 ulp).
        rcp(a) -> F32 = Rcp.F32;
    }

    /// `shl.b64` by a constant (the shift amount of PTX `shl` is always 32-bit).
    pub fn shl_b64(&mut self, a: Reg<B64>, by: u32) -> Reg<B64> {
        let d = self.reg::<B64>();
        self.alu(
            AluOp::Shl,
            Ty::B64,
            d.into(),
            vec![a.into(), AnyOperand::Int(by as i64)],
        );
        d
    }

    /// `mul.wide.u32`: 32 x 32 -> 64-bit product.
    pub fn mul_wide_u32(
        &mut self,
        a: impl Into<Operand<B32>>,
        b: impl Into<Operand<B32>>,
    ) -> Reg<B64> {
        let d = self.reg::<B64>();
        self.alu(
            AluOp::MulWide,
            Ty::U32,
            d.into(),
            vec![a.into().into(), b.into().into()],
        );
        d
    }

    /// `mad.wide.u32`: a * b + c with a 64-bit result.
    pub fn mad_wide_u32(
        &mut self,
        a: impl Into<Operand<B32>>,
        b: impl Into<Operand<B32>>,
        c: impl Into<Operand<B64>>,
    ) -> Reg<B64> {
        let d = self.reg::<B64>();
        let src = vec![a.into().into(), b.into().into(), c.into().into()];
        self.alu(AluOp::MadWide, Ty::U32, d.into(), src);
        d
    }

    /// `d = a` for a loop-carried register.
    pub fn assign<K: Kind>(&mut self, d: Reg<K>, a: impl Into<Operand<K>>) -> Reg<K>
    where
        AnyReg: From<Reg<K>>,
        AnyOperand: From<Operand<K>>,
    {
        let ty = match K::CLASS {
            RegClass::Pred => Ty::Pred,
            RegClass::B32 => Ty::B32,
            RegClass::F32 => Ty::F32,
            RegClass::B64 => Ty::B64,
            RegClass::B16 => Ty::B16,
        };
        self.push(Inst::Mov {
            ty,
            d: d.into(),
            a: a.into().into(),
        });
        d
    }

    /// A fresh register holding `a`.
    pub fn mov<K: Kind>(&mut self, a: impl Into<Operand<K>>) -> Reg<K>
    where
        AnyReg: From<Reg<K>>,
        AnyOperand: From<Operand<K>>,
    {
        let d = self.reg::<K>();
        self.assign(d, a)
    }

    /// Reads a special register (`%tid.x`, `%ctaid.y`, `%laneid`, ...).
    pub fn special(&mut self, s: Special) -> Reg<B32> {
        let d = self.reg();
        self.push(Inst::MovSpecial { d, s });
        d
    }

    /// The shared-window address of the kernel's dynamic shared memory.
    pub fn smem_base(&mut self) -> Reg<B32> {
        let d = self.reg();
        self.push(Inst::MovSmemBase { d });
        d
    }

    /// `setp.CMP.u32`: the predicate `a CMP b`, unsigned.
    pub fn setp_u32(
        &mut self,
        cmp: Cmp,
        a: impl Into<Operand<B32>>,
        b: impl Into<Operand<B32>>,
    ) -> Reg<Pred> {
        self.setp(cmp, Ty::U32, a.into().into(), b.into().into())
    }
    /// `setp.CMP.s32`: the predicate `a CMP b`, signed.
    pub fn setp_s32(
        &mut self,
        cmp: Cmp,
        a: impl Into<Operand<B32>>,
        b: impl Into<Operand<B32>>,
    ) -> Reg<Pred> {
        self.setp(cmp, Ty::S32, a.into().into(), b.into().into())
    }
    /// `setp.CMP.f32`: the predicate `a CMP b` (false when either is NaN, except `ne`).
    pub fn setp_f32(
        &mut self,
        cmp: Cmp,
        a: impl Into<Operand<F32>>,
        b: impl Into<Operand<F32>>,
    ) -> Reg<Pred> {
        self.setp(cmp, Ty::F32, a.into().into(), b.into().into())
    }
    /// `setp.CMP.u64`: the predicate `a CMP b`, unsigned 64-bit.
    pub fn setp_u64(
        &mut self,
        cmp: Cmp,
        a: impl Into<Operand<B64>>,
        b: impl Into<Operand<B64>>,
    ) -> Reg<Pred> {
        self.setp(cmp, Ty::U64, a.into().into(), b.into().into())
    }
    fn setp(&mut self, cmp: Cmp, ty: Ty, a: AnyOperand, b: AnyOperand) -> Reg<Pred> {
        let p = self.reg();
        self.push(Inst::Setp { cmp, ty, p, a, b });
        p
    }

    /// `and.pred`: a && b.
    pub fn and_pred(&mut self, a: Reg<Pred>, b: Reg<Pred>) -> Reg<Pred> {
        let d = self.reg();
        self.push(Inst::PredLogic {
            op: PredOp::And,
            d,
            a,
            b,
        });
        d
    }
    /// `or.pred`: a || b.
    pub fn or_pred(&mut self, a: Reg<Pred>, b: Reg<Pred>) -> Reg<Pred> {
        let d = self.reg();
        self.push(Inst::PredLogic {
            op: PredOp::Or,
            d,
            a,
            b,
        });
        d
    }

    /// `p ? a : b`.
    pub fn selp_b32(
        &mut self,
        a: impl Into<Operand<B32>>,
        b: impl Into<Operand<B32>>,
        p: Reg<Pred>,
    ) -> Reg<B32> {
        let d = self.reg::<B32>();
        self.push(Inst::Selp {
            ty: Ty::B32,
            d: d.into(),
            a: a.into().into(),
            b: b.into().into(),
            p,
        });
        d
    }
    /// `p ? a : b`.
    pub fn selp_f32(
        &mut self,
        a: impl Into<Operand<F32>>,
        b: impl Into<Operand<F32>>,
        p: Reg<Pred>,
    ) -> Reg<F32> {
        let d = self.reg::<F32>();
        self.push(Inst::Selp {
            ty: Ty::F32,
            d: d.into(),
            a: a.into().into(),
            b: b.into().into(),
            p,
        });
        d
    }
    /// `p ? a : b`.
    pub fn selp_b64(
        &mut self,
        a: impl Into<Operand<B64>>,
        b: impl Into<Operand<B64>>,
        p: Reg<Pred>,
    ) -> Reg<B64> {
        let d = self.reg::<B64>();
        self.push(Inst::Selp {
            ty: Ty::B64,
            d: d.into(),
            a: a.into().into(),
            b: b.into().into(),
            p,
        });
        d
    }

    /// Splits a packed 16x2 word into its low and high halves.
    pub fn unpack(&mut self, a: Reg<B32>) -> (Reg<B16>, Reg<B16>) {
        let (lo, hi) = (self.reg::<B16>(), self.reg::<B16>());
        self.push(Inst::Unpack { lo, hi, a });
        (lo, hi)
    }

    /// Reinterprets the bits of a 32-bit word as an f32 (`mov.b32`).
    pub fn bits_f32(&mut self, a: Reg<B32>) -> Reg<F32> {
        let d = self.reg::<F32>();
        self.push(Inst::Mov {
            ty: Ty::B32,
            d: d.into(),
            a: a.into(),
        });
        d
    }

    /// Exact f16 -> f32.
    pub fn cvt_f32_f16(&mut self, a: Reg<B16>) -> Reg<F32> {
        let d = self.reg::<F32>();
        self.push(Inst::Cvt {
            d_ty: Ty::F32,
            s_ty: Ty::F16,
            d: d.into(),
            a: a.into(),
        });
        d
    }

    /// `cvt.u64.u32`: zero-extends to 64 bits.
    pub fn cvt_u64_u32(&mut self, a: Reg<B32>) -> Reg<B64> {
        let d = self.reg::<B64>();
        self.push(Inst::Cvt {
            d_ty: Ty::U64,
            s_ty: Ty::U32,
            d: d.into(),
            a: a.into(),
        });
        d
    }
    /// `cvt.rn.f32.s32`: a signed integer as f32.
    pub fn cvt_f32_s32(&mut self, a: Reg<B32>) -> Reg<F32> {
        let d = self.reg::<F32>();
        self.push(Inst::Cvt {
            d_ty: Ty::F32,
            s_ty: Ty::S32,
            d: d.into(),
            a: a.into(),
        });
        d
    }

    /// Packs two f32 into a 16x2 word: `lo` into the low half (lower column/k index).
    pub fn pack(&mut self, fmt: HalfFmt, lo: Reg<F32>, hi: Reg<F32>) -> Reg<B32> {
        let d = self.reg();
        self.push(Inst::CvtPack { fmt, d, hi, lo });
        d
    }

    /// `ld.param`: loads kernel parameter `p` into a fresh register of its class.
    pub fn ld_param(&mut self, p: &Param) -> AnyReg {
        let d: AnyReg = match p.ty.class() {
            RegClass::Pred | RegClass::B16 => panic!("generator bug: {:?} parameter", p.ty),
            RegClass::B32 => self.reg::<B32>().into(),
            RegClass::F32 => self.reg::<F32>().into(),
            RegClass::B64 => self.reg::<B64>().into(),
        };
        self.push(Inst::LdParam {
            ty: p.ty,
            d,
            param: p.name.clone(),
        });
        d
    }

    /// `cvta.to.global.u64`: a generic address as a global one.
    pub fn cvta_global(&mut self, a: Reg<B64>) -> Reg<B64> {
        let d = self.reg();
        self.push(Inst::CvtaGlobal { d, a });
        d
    }

    /// Loads `N` 32-bit words (`.v2`/`.v4` when N > 1) of type `ty` (B32 or F32 class).
    pub fn ld<K: Kind, const N: usize>(
        &mut self,
        space: Space,
        cache: LdCache,
        ty: Ty,
        addr: Addr,
    ) -> [Reg<K>; N]
    where
        AnyReg: From<Reg<K>>,
    {
        assert_eq!(
            ty.class(),
            K::CLASS,
            "generator bug: ld type/class mismatch"
        );
        let d: [Reg<K>; N] = std::array::from_fn(|_| self.reg::<K>());
        self.push(Inst::Ld {
            space,
            cache,
            ty,
            d: d.iter().map(|r| (*r).into()).collect(),
            addr,
        });
        d
    }

    /// Stores `src` (`.v2`/`.v4` when more than one).
    pub fn st<K: Kind>(&mut self, space: Space, ty: Ty, addr: Addr, src: &[Reg<K>])
    where
        AnyReg: From<Reg<K>>,
    {
        assert_eq!(
            ty.class(),
            K::CLASS,
            "generator bug: st type/class mismatch"
        );
        self.push(Inst::St {
            space,
            ty,
            src: src.iter().map(|r| (*r).into()).collect(),
            addr,
        });
    }

    /// `cp.async` of `size` bytes; with `src_size`, bytes past it are zero-filled.
    pub fn cp_async(&mut self, size: CpSize, dst: Addr, src: Addr, src_size: Option<Operand<B32>>) {
        let cache = if size == CpSize::B16 {
            CpCache::Cg
        } else {
            CpCache::Ca
        };
        self.push(Inst::CpAsync {
            cache,
            size,
            dst,
            src,
            src_size,
        });
    }
    /// `cp.async.commit_group`: closes the group of `cp.async` issued since the last commit.
    pub fn cp_async_commit(&mut self) {
        self.push(Inst::CpAsyncCommit);
    }
    /// Waits until at most `pending` committed groups are in flight.
    pub fn cp_async_wait(&mut self, pending: u32) {
        self.push(Inst::CpAsyncWait { pending });
    }

    /// `ldmatrix` of N 8x8 b16 matrices (N = 1, 2 or 4).
    pub fn ldmatrix<const N: usize>(&mut self, trans: bool, addr: Addr) -> [Reg<B32>; N] {
        let num = match N {
            1 => LdmNum::X1,
            2 => LdmNum::X2,
            4 => LdmNum::X4,
            _ => panic!("generator bug: ldmatrix .x{N}"),
        };
        let d: [Reg<B32>; N] = std::array::from_fn(|_| self.reg::<B32>());
        self.push(Inst::Ldmatrix {
            num,
            trans,
            d: d.to_vec(),
            addr,
        });
        d
    }

    /// `acc += a * b` with one m16n8k16 tensor-core instruction.
    pub fn mma(&mut self, fmt: HalfFmt, acc: [Reg<F32>; 4], a: [Reg<B32>; 4], b: [Reg<B32>; 2]) {
        self.push(Inst::Mma(Mma {
            kind: MmaKind::M16N8K16F32(fmt),
            d: acc,
            a,
            b,
            c: acc,
        }));
    }

    /// Butterfly shuffle of an f32 across lanes `lane ^ mask` (full warp).
    pub fn shfl_bfly_f32(&mut self, a: Reg<F32>, lane_mask: u32) -> Reg<F32> {
        let d = self.reg::<F32>();
        self.push(Inst::Shfl {
            mode: ShflMode::Bfly,
            d: d.into(),
            a: a.into(),
            lane: lane_mask,
            clamp: 0x1f,
            mask: u32::MAX,
        });
        d
    }

    /// `bar.sync 0`: every thread of the CTA waits here.
    pub fn bar_sync(&mut self) {
        self.push(Inst::BarSync { id: 0 });
    }

    /// `red.global.add.f32`: atomically adds `v` at `addr` (no return value).
    pub fn red_add_f32(&mut self, addr: Addr, v: Reg<F32>) {
        self.push(Inst::RedAddF32 { addr, v });
    }

    /// Unconditional branch; `uni` when every thread of the warp takes it together.
    pub fn bra(&mut self, target: Label, uni: bool) {
        self.push(Inst::Bra { target, uni });
    }

    /// Branch when `p` (or `!p`) holds.
    pub fn bra_if(&mut self, p: Reg<Pred>, negate: bool, target: Label, uni: bool) {
        self.when(p, negate, |b| b.bra(target, uni));
    }

    /// `ret`: the thread exits.
    pub fn ret(&mut self) {
        self.push(Inst::Ret);
    }

    /// Ends the kernel: appends `ret` and declares every register family used.
    pub fn finish(
        mut self,
        name: impl Into<String>,
        params: Vec<Param>,
        bounds: LaunchBounds,
    ) -> Entry {
        self.ret();
        Entry {
            name: name.into(),
            params,
            bounds,
            reg_counts: self.counts,
            body: self.body,
        }
    }
}
