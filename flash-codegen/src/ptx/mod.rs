//! PTX IR layer: typed registers, instructions, builder, modules and the printer.

pub mod builder;
pub mod inst;
pub mod modifiers;
pub mod module;
pub mod operand;
pub mod print;
pub mod regs;
pub mod sm90;
pub mod types;

pub use builder::{Builder, Loop};
pub use inst::{AluOp, AnyOperand, AnyReg, Cmp, HalfFmt, Inst, LdCache, Space, Special, Stmt, Ty};
pub use module::{Entry, LaunchBounds, Module, Param, ParamTy, Target};
pub use types::{Addr, B16, B32, B64, F32, Guard, Kind, Label, Operand, Pred, Reg, RegClass};
