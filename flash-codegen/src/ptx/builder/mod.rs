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
    /// Module-scope strings (symbol, text) the body names.
    strings: Vec<(String, String)>,
    /// Spins an mbarrier wait may take before it fails (debug builds), or `None`.
    wait_bound: Option<u32>,
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

    /// `trap`: aborts the kernel.
    pub fn trap(&mut self) {
        self.push(Inst::Trap);
    }

    /// Fails like device `assert`: the driver prints `text` (with the block and thread) at
    /// the next synchronisation, then the kernel traps. The text becomes a module-scope
    /// string named by its hash, so equal texts share one symbol.
    pub fn assert_fail(&mut self, text: &str) {
        assert!(
            text.is_ascii() && !text.contains('\0'),
            "generator bug: assert message {text:?}"
        );
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
            (h ^ u64::from(c)).wrapping_mul(0x1b3)
        });
        let message = format!("flash_msg_{hash:016x}");
        if !self.strings.iter().any(|(s, _)| *s == message) {
            self.strings.push((message.clone(), text.to_string()));
        }
        self.push(Inst::AssertFail { message });
        self.trap();
    }

    /// Debug builds: every later mbarrier wait fails with its barrier's name after `spins`
    /// unsuccessful `try_wait`s (each blocks for a bounded time) instead of hanging.
    pub fn bound_waits(&mut self, spins: u32) {
        assert!(spins > 0, "generator bug: a wait bound of 0 spins");
        self.wait_bound = Some(spins);
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
            strings: self.strings,
        }
    }
}
