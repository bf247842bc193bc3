//! PTX IR layer: the builder's arithmetic, comparison, selection and conversion helpers.

use super::Builder;
use crate::ptx::inst::{AluOp, AnyOperand, Cmp, HalfFmt, Inst, PredOp, Ty};
use crate::ptx::types::{B16, B32, B64, F32, Operand, Pred, Reg};

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
        /// `or.b64`.
        or_b64(a, b) -> B64 = Or.B64;
        /// `sub.s64`: a - b.
        sub_s64(a, b) -> B64 = Sub.S64;
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
        /// `abs.f32`: |a| (ptxas folds it into the operand of the instruction using it).
        abs_f32(a) -> F32 = Abs.F32;
        /// 2^a, approximate (2 ulp), flushes subnormals.
        ex2(a) -> F32 = Ex2.F32;
        /// log2(a), approximate.
        lg2(a) -> F32 = Lg2.F32;
        /// 1/a, approximate (1 ulp).
        rcp(a) -> F32 = Rcp.F32;
        /// tanh(a), approximate (`tanh.approx.f32`, sm_75+).
        tanh(a) -> F32 = Tanh.F32;
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

    /// `vote.sync.any.pred` over the whole warp: true in every lane when `a` is true in
    /// any lane (a warp-uniform predicate, for `bra.uni`).
    pub fn vote_any(&mut self, a: Reg<Pred>) -> Reg<Pred> {
        let d = self.reg();
        self.push(Inst::VoteAny { d, a });
        d
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

    /// Reinterprets the bits of an f32 as a 32-bit word (`mov.b32`).
    pub fn f32_bits(&mut self, a: Reg<F32>) -> Reg<B32> {
        let d = self.reg::<B32>();
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
    /// `cvt.u32.u64`: the low 32 bits.
    pub fn cvt_u32_u64(&mut self, a: Reg<B64>) -> Reg<B32> {
        let d = self.reg::<B32>();
        self.push(Inst::Cvt {
            d_ty: Ty::U32,
            s_ty: Ty::U64,
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
}
