//! PTX IR layer: modules and kernel entries (what the printer turns into a `.ptx` file).

use serde::{Deserialize, Serialize};

use super::inst::{Stmt, Ty};
use super::types::RegClass;

/// The `.target` of a module, with the lowest `.version` its features need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Target {
    /// mma.sync, ldmatrix, cp.async: JIT-compiled by the driver for sm_80 and every later GPU.
    Sm80,
    /// wgmma, setmaxnreg (the `a` features), TMA, mbarrier: compute capability 9.0 only.
    Sm90a,
}

impl Target {
    /// The `.target` directive's argument.
    pub fn name(self) -> &'static str {
        match self {
            Target::Sm80 => "sm_80",
            Target::Sm90a => "sm_90a",
        }
    }
    /// The PTX ISA version (major, minor) the module declares.
    pub fn ptx_version(self) -> (u32, u32) {
        match self {
            Target::Sm80 => (7, 0),
            // wgmma, setmaxnreg, elect.sync, fence.proxy.async, expect_tx: 8.0; driver
            // r525 (CUDA 12.0) and newer load it (ptx-reference.md section 1.1).
            Target::Sm90a => (8, 0),
        }
    }
    /// Whether the target takes the sm_90 instruction families ([`Inst::needs_sm90`]).
    ///
    /// [`Inst::needs_sm90`]: super::inst::Inst::needs_sm90
    pub fn has_sm90(self) -> bool {
        matches!(self, Target::Sm90a)
    }
}

/// The type of a kernel parameter: what its `.param` line declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamTy {
    /// A scalar read with `ld.param` (`.param .u64 q`, `.param .u32 n`, `.param .f32 s`).
    Scalar(Ty),
    /// A by-value struct of `size` bytes aligned to `align` (`.param .align 64 .b8 tm[128]`,
    /// a `CUtensorMap`): used through its address ([`Builder::param_addr`]).
    ///
    /// [`Builder::param_addr`]: super::Builder::param_addr
    Bytes {
        /// Alignment in bytes (a power of two).
        align: u32,
        /// Size in bytes.
        size: u32,
    },
}

impl From<Ty> for ParamTy {
    fn from(t: Ty) -> Self {
        ParamTy::Scalar(t)
    }
}

/// One `.param` of an entry.
///
/// `Param` (that is, `Param<Ty>`) is a scalar parameter, built as `Param { name, ty: Ty::U64 }`
/// or [`Param::scalar`]; `Param<ParamTy>` is any parameter, scalar or [`ParamTy::Bytes`]
/// ([`Param::bytes`]), and what an [`Entry`] declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param<T = Ty> {
    /// The parameter's name (`.param .u64 NAME`).
    pub name: String,
    /// Its type: a PTX scalar type ([`Ty`]) or any parameter type ([`ParamTy`]).
    pub ty: T,
}

impl Param<Ty> {
    /// A scalar parameter (`.param .u64 NAME`), read with `ld.param`.
    pub fn scalar(name: impl Into<String>, ty: Ty) -> Self {
        Param {
            name: name.into(),
            ty,
        }
    }
}

impl Param<ParamTy> {
    /// A by-value struct of `size` bytes aligned to `align` (`.param .align A .b8 NAME[S]`).
    pub fn bytes(name: impl Into<String>, align: u32, size: u32) -> Self {
        let name = name.into();
        assert!(
            align.is_power_of_two() && size > 0,
            "generator bug: parameter {name}: {size} bytes aligned to {align}"
        );
        Param {
            name,
            ty: ParamTy::Bytes { align, size },
        }
    }
}

impl<T: Copy + Into<ParamTy>> Param<T> {
    /// The parameter's type as a [`ParamTy`].
    pub fn param_ty(&self) -> ParamTy {
        self.ty.into()
    }
}

impl From<Param<Ty>> for Param<ParamTy> {
    fn from(p: Param<Ty>) -> Self {
        Param {
            name: p.name,
            ty: p.ty.into(),
        }
    }
}

/// Performance directives of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LaunchBounds {
    /// `.maxntid`: the CTA size the kernel is launched with.
    pub max_threads: Option<u32>,
    /// `.minnctapersm`: resident CTAs per SM the register budget must allow.
    pub min_ctas_per_sm: Option<u32>,
    /// The CTA size is exactly `max_threads` (`.reqntid`, not `.maxntid`): a launch with
    /// another fails, and ptxas may treat `%tid.x`-derived warp and warpgroup indices as
    /// warp-uniform (the uniform datapath).
    pub exact_threads: bool,
}

/// A `.visible .entry` function.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The entry name (the kernel name, e.g. `fa2_fwd_d128_bf16_causal_sm80`).
    pub name: String,
    /// Parameters in launch order.
    pub params: Vec<Param<ParamTy>>,
    /// `.maxntid` (or `.reqntid`) / `.minnctapersm` directives.
    pub bounds: LaunchBounds,
    /// Registers of each class, in `RegClass::ALL` order, the body uses.
    pub reg_counts: [u32; 5],
    /// The instructions, labels and comments of the body, in order.
    pub body: Vec<Stmt>,
    /// Module-scope NUL-terminated strings the body names (the messages of
    /// [`Inst::AssertFail`](super::inst::Inst::AssertFail)), by symbol.
    pub strings: Vec<(String, String)>,
}

impl Entry {
    /// How many registers of `class` the entry declares (`.reg .b32 %r<N>;`).
    pub fn declared(&self, class: RegClass) -> u32 {
        self.reg_counts[RegClass::ALL
            .iter()
            .position(|c| *c == class)
            .expect("class")]
    }
}

/// A PTX module: header plus entries, all using the dynamic shared memory symbol.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// The `.target` (and with it the `.version`) of the module.
    pub target: Target,
    /// The kernels of the module (flash-ptx writes one per module).
    pub entries: Vec<Entry>,
}
