//! PTX IR layer: the builder, the only maker of registers and labels.
//!
//! Methods read like the instructions they append and return fresh typed registers.
//! Loop-carried values (running max, accumulators) are updated with [`Builder::assign`]
//! or in place by `mma`; ptxas coalesces the copies.

use super::inst::{AluOp, AnyOperand, AnyReg, Inst, Special, Stmt, Ty};
use super::module::{Entry, LaunchBounds, Param, ParamTy};
use super::types::{B32, Guard, Kind, Operand, Pred, Reg, RegClass};

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

mod alu;
mod control;
mod mem;
mod sm90;

pub use control::Loop;

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
        assert!(
            op.legal_for(ty),
            "generator bug: {op:?}.{ty:?} is not a PTX instruction"
        );
        self.push(Inst::Alu { op, ty, d, src });
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

    /// Ends the kernel: appends `ret` and declares every register family used.
    /// `params` are scalar ([`Param`]) or any ([`Param<ParamTy>`]) parameters.
    pub fn finish<T: Into<ParamTy>>(
        mut self,
        name: impl Into<String>,
        params: Vec<Param<T>>,
        bounds: LaunchBounds,
    ) -> Entry {
        self.ret();
        let params = params
            .into_iter()
            .map(|p| Param {
                name: p.name,
                ty: p.ty.into(),
            })
            .collect();
        Entry {
            name: name.into(),
            params,
            bounds,
            reg_counts: self.counts,
            body: self.body,
        }
    }
}
