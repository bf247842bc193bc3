//! ABI layer: the types of kernel parameters ([`AbiTy`]) and the typed handles kernels
//! read them through ([`Arg`], [`TensorArgs`]): a parameter's name is written once, in its
//! handle, and its PTX type, manifest type, numpy type and size follow from its [`AbiTy`].

use std::fmt;
use std::marker::PhantomData;

use serde::{Serialize, Serializer};

use super::ParamDesc;
use crate::ptx::{AnyReg, B32, B64, F32, Kind, ParamTy, Reg, Ty};

/// The type of a kernel parameter, as the caller passes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbiTy {
    /// A device pointer (`.param .u64`, 8 bytes; 0 where the parameter is optional).
    Ptr,
    /// An unsigned 64-bit integer (`.param .u64`: batch strides).
    U64,
    /// An unsigned 32-bit integer (`.param .u32`: lengths, head counts, row/head strides).
    U32,
    /// A 32-bit float (`.param .f32`: scales).
    F32,
    /// A `CUtensorMap` passed by value: 128 bytes, 64-byte aligned
    /// (`.param .align 64 .b8 NAME[128]`), read through its address. For the Hopper
    /// kernels; no kernel takes one yet.
    TensorMap,
}

impl AbiTy {
    /// Every parameter type.
    pub const ALL: [AbiTy; 5] = [
        AbiTy::Ptr,
        AbiTy::U64,
        AbiTy::U32,
        AbiTy::F32,
        AbiTy::TensorMap,
    ];

    /// What the entry declares: `.u64`, `.u32`, `.f32`, or `.align 64 .b8 [128]`.
    pub const fn param_ty(self) -> ParamTy {
        match self {
            AbiTy::Ptr | AbiTy::U64 => ParamTy::Scalar(Ty::U64),
            AbiTy::U32 => ParamTy::Scalar(Ty::U32),
            AbiTy::F32 => ParamTy::Scalar(Ty::F32),
            AbiTy::TensorMap => ParamTy::Bytes {
                align: 64,
                size: 128,
            },
        }
    }

    /// The scalar PTX type of a parameter read with `ld.param`; `None` for a by-value
    /// struct ([`AbiTy::TensorMap`]).
    pub const fn scalar(self) -> Option<Ty> {
        match self.param_ty() {
            ParamTy::Scalar(t) => Some(t),
            ParamTy::Bytes { .. } => None,
        }
    }

    /// The manifest's `type`: the PTX `.param` type without its dot (`u64` for pointers
    /// and 64-bit integers, `u32`, `f32`), `b8[128]` for a tensor map.
    pub const fn name(self) -> &'static str {
        match self {
            AbiTy::Ptr | AbiTy::U64 => "u64",
            AbiTy::U32 => "u32",
            AbiTy::F32 => "f32",
            AbiTy::TensorMap => "b8[128]",
        }
    }

    /// The manifest's `numpy`: a `numpy.dtype` string of exactly [`AbiTy::size`] bytes
    /// (`uint64`, `uint32`, `float32`; `V128`, 128 raw bytes, for a tensor map: pass
    /// `numpy.void(the_128_bytes)`).
    pub const fn numpy(self) -> &'static str {
        match self {
            AbiTy::Ptr | AbiTy::U64 => "uint64",
            AbiTy::U32 => "uint32",
            AbiTy::F32 => "float32",
            AbiTy::TensorMap => "V128",
        }
    }

    /// Bytes the argument occupies (8, 4, 4; 128 for a tensor map).
    pub const fn size(self) -> u32 {
        match self {
            AbiTy::Ptr | AbiTy::U64 => 8,
            AbiTy::U32 | AbiTy::F32 => 4,
            AbiTy::TensorMap => 128,
        }
    }

    /// The type in words, for messages (`a u64 device pointer`, `an f32`, ...).
    pub const fn what(self) -> &'static str {
        match self {
            AbiTy::Ptr => "a u64 device pointer",
            AbiTy::U64 => "a u64",
            AbiTy::U32 => "a u32",
            AbiTy::F32 => "an f32",
            AbiTy::TensorMap => "a 128-byte CUtensorMap (by value, 64-byte aligned)",
        }
    }
}

/// The manifest name ([`AbiTy::name`]).
impl fmt::Display for AbiTy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Serialized as its manifest name ([`AbiTy::name`]).
impl Serialize for AbiTy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The register classes a scalar parameter is loaded into: [`B32`] (`u32`), [`B64`]
/// (pointers, `u64`), [`F32`] (`f32`).
pub trait ArgKind: Kind {
    /// `r` as a register of this class, if it is one.
    fn reg(r: AnyReg) -> Option<Reg<Self>>;
}

macro_rules! arg_kinds {
    ($($k:ident),*) => {$(
        impl ArgKind for $k {
            fn reg(r: AnyReg) -> Option<Reg<$k>> {
                match r {
                    AnyReg::$k(r) => Some(r),
                    _ => None,
                }
            }
        }
    )*};
}
arg_kinds!(B32, B64, F32);

/// A scalar kernel parameter: its name and type, with the register class `K` a kernel
/// reads it into (`Arg<B32>` for `u32`, `Arg<B64>` for pointers and `u64`, `Arg<F32>` for
/// `f32`). Built only by [`Arg::ptr`], [`Arg::u64`], [`Arg::u32`] and [`Arg::f32`], so
/// the class always fits the type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Arg<K> {
    name: &'static str,
    ty: AbiTy,
    _k: PhantomData<K>,
}

impl<K: Kind> Arg<K> {
    const fn of(name: &'static str, ty: AbiTy) -> Self {
        Arg {
            name,
            ty,
            _k: PhantomData,
        }
    }
    /// The parameter's name in the PTX entry and the manifest.
    pub const fn name(&self) -> &'static str {
        self.name
    }
    /// The parameter's type.
    pub const fn ty(&self) -> AbiTy {
        self.ty
    }
    /// The parameter's row in a pass's table, with what the caller passes.
    pub const fn desc(&self, meaning: &'static str) -> ParamDesc {
        ParamDesc::new(self.name, self.ty, meaning)
    }
}

impl Arg<B64> {
    /// A device pointer parameter.
    pub const fn ptr(name: &'static str) -> Self {
        Arg::of(name, AbiTy::Ptr)
    }
    /// A `u64` parameter.
    pub const fn u64(name: &'static str) -> Self {
        Arg::of(name, AbiTy::U64)
    }
}

impl Arg<B32> {
    /// A `u32` parameter.
    pub const fn u32(name: &'static str) -> Self {
        Arg::of(name, AbiTy::U32)
    }
}

impl Arg<F32> {
    /// An `f32` parameter.
    pub const fn f32(name: &'static str) -> Self {
        Arg::of(name, AbiTy::F32)
    }
}

/// The four parameters of a `[batch, seqlen, heads, head_dim]` tensor `t`: its pointer
/// `t` and its strides `t_batch_stride` (`u64`), `t_row_stride` and `t_head_stride`
/// (`u32`), in elements (head_dim is contiguous). Built by `tensor!` in [`super::args`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorArgs {
    /// The device pointer (its meaning differs per pass, so each table writes it).
    pub ptr: Arg<B64>,
    /// Elements between batches.
    pub batch_stride: Arg<B64>,
    /// Elements between sequence positions.
    pub row_stride: Arg<B32>,
    /// Elements between heads.
    pub head_stride: Arg<B32>,
    /// The meanings of the three strides, in that order.
    stride_meanings: [&'static str; 3],
}

impl TensorArgs {
    /// The handle of tensor `ptr` with strides named `strides` and meaning `meanings`
    /// (batch, row, head).
    pub(super) const fn new(
        ptr: &'static str,
        strides: [&'static str; 3],
        meanings: [&'static str; 3],
    ) -> Self {
        TensorArgs {
            ptr: Arg::ptr(ptr),
            batch_stride: Arg::u64(strides[0]),
            row_stride: Arg::u32(strides[1]),
            head_stride: Arg::u32(strides[2]),
            stride_meanings: meanings,
        }
    }
    /// The tensor's name (its pointer parameter's).
    pub const fn name(&self) -> &'static str {
        self.ptr.name()
    }
    /// The rows of its three strides: batch, row, head (how every table lists them).
    pub const fn strides(&self) -> [ParamDesc; 3] {
        let m = self.stride_meanings;
        [
            self.batch_stride.desc(m[0]),
            self.row_stride.desc(m[1]),
            self.head_stride.desc(m[2]),
        ]
    }
    /// The rows of its row and head strides: a packed (varlen) tensor `[total, heads,
    /// head_dim]` has no batch dim.
    pub const fn packed_strides(&self) -> [ParamDesc; 2] {
        let m = self.stride_meanings;
        [self.row_stride.desc(m[1]), self.head_stride.desc(m[2])]
    }
}
