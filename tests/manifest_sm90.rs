//! The manifest's sm_90a section against the kernels and the runtime (no GPU): every
//! entry's parameters are its PTX entry's (names, order, types, sizes, the tensor maps'
//! 64-byte alignment, offsets by the PTX parameter layout), its launch is its variant's
//! (and `.reqntid` in the PTX: the block size exact), and its tensor-map descriptions, evaluated for sample
//! shapes and strides, are the maps flash-runtime encodes (`TensorMapLayout::bhsd` with
//! the boxes `launch_sm90_call` gives q, k and v), the driver limits included.

use std::collections::BTreeMap;

use flash_codegen::kernels::sm90::fwd;
use flash_codegen::manifest::sm90a::{self, Sm90aKernel, maps};
use flash_codegen::{DType, Tuning, manifest};
use flash_runtime::tensor_map::{TensorMapLayout, TmaSwizzle};
use flash_runtime::{FlashError, tensor::contiguous_strides};

/// The manifest `emit --all` writes, read back as a user would.
fn entries() -> Vec<(fwd::Variant, Sm90aKernel)> {
    let e = entries_of(sm90a::shipping());
    assert_eq!(e.len(), 32);
    assert!(
        e.iter()
            .all(|(v, k)| v.tma_store && k.tensor_maps.len() == 4)
    );
    e
}

/// A manifest of `vars`, read back.
fn entries_of(vars: Vec<fwd::Variant>) -> Vec<(fwd::Variant, Sm90aKernel)> {
    let json = manifest::manifest_with_sm90a(&[], &vars, &Tuning::NONE).to_json();
    let m = manifest::Manifest::from_json(&json).expect("the manifest reads back");
    vars.into_iter().zip(m.sm90a.kernels).collect()
}

/// The plain shipping kernels with the pair stores instead of the TMA epilogue
/// (`tma_store` unset: three maps, o only through its pointer and strides), as a manifest
/// of other variants would describe them.
fn pair_entries() -> Vec<(fwd::Variant, Sm90aKernel)> {
    let vars = sm90a::shipping()
        .into_iter()
        .filter(|v| v.scores == flash_codegen::Scores::Plain)
        .map(|v| fwd::Variant {
            tma_store: false,
            ..v
        })
        .collect();
    entries_of(vars)
}

/// A `.param` declaration of the PTX entry: (name, type as the manifest writes it, size,
/// alignment).
fn entry_params(ptx: &str, name: &str) -> Vec<(String, String, u32, u32)> {
    let head = format!(".visible .entry {name}(");
    let start = ptx.find(&head).expect("the entry") + head.len();
    let body = &ptx[start..start + ptx[start..].find(')').unwrap()];
    body.split(',')
        .map(|decl| {
            let words: Vec<&str> = decl.split_whitespace().collect();
            match words[..] {
                [".param", ".align", align, ".b8", named] => {
                    let (n, size) = named.trim_end_matches(']').split_once('[').unwrap();
                    let size: u32 = size.parse().unwrap();
                    (
                        n.into(),
                        format!("b8[{size}]"),
                        size,
                        align.parse().unwrap(),
                    )
                }
                [".param", ty, n] => {
                    let ty = ty.trim_start_matches('.');
                    let size = match ty {
                        "u64" => 8,
                        "u32" | "f32" => 4,
                        other => panic!("{name}: unexpected parameter type {other}"),
                    };
                    (n.into(), ty.into(), size, size)
                }
                _ => panic!("{name}: unexpected declaration `{decl}`"),
            }
        })
        .collect()
}

#[test]
fn every_entry_has_its_ptx_entrys_parameters() {
    // the shipping kernels, and a dynamic-scheduler one (its `tile_counter` last)
    let mut dynamic = fwd::Variant::shipping(flash_codegen::DType::Bf16, 64, true);
    (dynamic.persistent, dynamic.dynamic) = (true, true);
    let extra = (dynamic, sm90a::kernel(&dynamic));
    assert_eq!(extra.1.params.last().unwrap().name, "tile_counter");
    for (var, k) in entries().into_iter().chain([extra]).chain(pair_entries()) {
        let ptx = sm90a::ptx(var);
        let decls = entry_params(&ptx, &k.name);
        assert_eq!(decls.len(), k.params.len(), "{}", k.name);
        let mut end = 0;
        for (p, (name, ty, size, align)) in k.params.iter().zip(&decls) {
            assert_eq!(
                (&p.name, &p.ty, p.size, p.align),
                (name, ty, *size, *align),
                "{}",
                k.name
            );
            // by the PTX rules: each parameter at the next multiple of its alignment
            let offset = u32::next_multiple_of(end, *align);
            assert_eq!(p.offset, offset, "{}: {name}", k.name);
            end = offset + size;
        }
        assert_eq!(k.tensor_maps.len(), var.maps().len(), "{}", k.name);
        for (i, map) in var.maps().iter().enumerate() {
            let p = &k.params[i];
            assert_eq!((p.name.as_str(), p.align, p.size), (*map, 64, 128));
            assert_eq!(p.numpy, "V128");
            assert_eq!(k.tensor_maps[i].param, *map);
        }
        let names: Vec<&str> = k.params.iter().map(|p| p.name.as_str()).collect();
        let want: Vec<&str> = var
            .maps()
            .iter()
            .copied()
            .chain(var.scalars().iter().map(|s| s.0))
            .collect();
        assert_eq!(names, want);
        let [x, ..] = k.launch.block;
        assert!(ptx.contains(&format!(".reqntid {x}, 1, 1")), "{}", k.name);
        assert!(ptx.contains(&format!(".target {}\n", k.target)));
        assert!(ptx.contains(&format!(".version {}\n", k.ptx_version)));
        assert_eq!(k.launch.block, [var.threads(), 1, 1]);
        assert_eq!(k.launch.dynamic_smem_bytes, var.smem_bytes());
        let mask = var.mask();
        assert_eq!(
            (k.variant.dtype, k.variant.head_dim, k.variant.mask),
            (var.dtype, var.head_dim, mask)
        );
    }
}

/// A formula of the manifest (`ceil(seqlen_q / block_m)`, `2 * q_row_stride`, `heads_k`)
/// evaluated over `names`: integers, names, `+ - * /`, parentheses, `ceil()` and
/// `min(a, b)`.
/// An H100 SXM's multiprocessors, for the persistent kernels' grid formula.
const SMS: u32 = 132;

fn eval(formula: &str, names: &BTreeMap<String, u64>) -> u64 {
    fn expr(t: &[String], i: &mut usize, n: &BTreeMap<String, u64>) -> f64 {
        let mut v = term(t, i, n);
        while *i < t.len() && (t[*i] == "+" || t[*i] == "-") {
            let plus = t[*i] == "+";
            *i += 1;
            let r = term(t, i, n);
            v = if plus { v + r } else { v - r };
        }
        v
    }
    fn term(t: &[String], i: &mut usize, n: &BTreeMap<String, u64>) -> f64 {
        let mut v = atom(t, i, n);
        while *i < t.len() && (t[*i] == "*" || t[*i] == "/") {
            let op = t[*i].clone();
            *i += 1;
            let r = atom(t, i, n);
            v = if op == "*" { v * r } else { v / r };
        }
        v
    }
    fn atom(t: &[String], i: &mut usize, n: &BTreeMap<String, u64>) -> f64 {
        let tok = t[*i].clone();
        *i += 1;
        if tok == "min" {
            assert_eq!(t[*i], "(");
            *i += 1;
            let a = expr(t, i, n);
            assert_eq!(t[*i], ",");
            *i += 1;
            let b = expr(t, i, n);
            assert_eq!(t[*i], ")");
            *i += 1;
            return a.min(b);
        }
        if tok == "(" || tok == "ceil" {
            if tok == "ceil" {
                assert_eq!(t[*i], "(");
                *i += 1;
            }
            let v = expr(t, i, n);
            assert_eq!(t[*i], ")");
            *i += 1;
            return if tok == "ceil" { v.ceil() } else { v };
        }
        match tok.parse::<u64>() {
            Ok(x) => x as f64,
            Err(_) => *n.get(&tok).unwrap_or_else(|| panic!("unknown name {tok}")) as f64,
        }
    }
    let spaced = formula
        .replace('(', " ( ")
        .replace(')', " ) ")
        .replace(',', " , ");
    let toks: Vec<String> = spaced.split_whitespace().map(str::to_string).collect();
    let mut i = 0;
    let v = expr(&toks, &mut i, names);
    assert_eq!(i, toks.len(), "{formula}");
    assert!(v >= 0.0 && v.fract() == 0.0, "{formula} = {v}");
    v as u64
}

/// A call: sizes, and q, k, v strides (elements) of tensors laid out `[b, s, h, d]`.
struct Call {
    b: usize,
    sq: usize,
    sk: usize,
    h: usize,
    hk: usize,
    q: [usize; 3],
    kv: [usize; 3],
    /// o's (the TMA epilogue's map): contiguous `[b, sq, h, d]`.
    o: [usize; 3],
}

impl Call {
    fn names(&self, d: usize, k: &Sm90aKernel) -> BTreeMap<String, u64> {
        let mut n: BTreeMap<String, u64> = [
            ("batch", self.b),
            ("seqlen_q", self.sq),
            ("seqlen_k", self.sk),
            ("heads", self.h),
            ("heads_k", self.hk),
            ("head_dim", d),
            ("block_m", k.tiles.block_m as usize),
            ("block_n", k.tiles.block_n as usize),
            ("multiprocessors", SMS as usize),
        ]
        .into_iter()
        .map(|(a, x)| (a.to_string(), x as u64))
        .collect();
        for (t, st) in [("q", self.q), ("k", self.kv), ("v", self.kv), ("o", self.o)] {
            for (dim, s) in ["batch", "row", "head"].iter().zip(st) {
                n.insert(format!("{t}_{dim}_stride"), s as u64);
            }
        }
        n
    }
}

/// Contiguous, GQA with sq != sk, and q, k, v as views of one packed `[b, s, 3, h, d]`
/// buffer (row stride 3 h d).
fn calls(d: usize) -> Vec<Call> {
    let c = |s: [usize; 4]| {
        let st = contiguous_strides(s);
        [st[0], st[1], st[2]]
    };
    let packed = |s: usize, h: usize| [s * 3 * h * d, 3 * h * d, d];
    vec![
        Call {
            b: 2,
            sq: 1000,
            sk: 1000,
            h: 4,
            hk: 4,
            q: c([2, 1000, 4, d]),
            kv: c([2, 1000, 4, d]),
            o: c([2, 1000, 4, d]),
        },
        Call {
            b: 3,
            sq: 77,
            sk: 1031,
            h: 8,
            hk: 2,
            q: c([3, 77, 8, d]),
            kv: c([3, 1031, 2, d]),
            o: c([3, 77, 8, d]),
        },
        Call {
            b: 1,
            sq: 513,
            sk: 513,
            h: 6,
            hk: 6,
            q: packed(513, 6),
            kv: packed(513, 6),
            o: c([1, 513, 6, d]),
        },
    ]
}

#[test]
fn every_map_description_is_the_runtimes_map() {
    for (var, k) in entries().into_iter().chain(pair_entries()) {
        let d = var.head_dim as usize;
        for call in calls(d) {
            let names = call.names(d, &k);
            let Call {
                b, sq, sk, h, hk, ..
            } = call;
            // what `launch_sm90_call` encodes
            let mut want = vec![
                TensorMapLayout::bhsd(var.dtype, [b, sq, h, d], call.q, var.block_m(), 64),
                TensorMapLayout::bhsd(var.dtype, [b, sk, hk, d], call.kv, fwd::BLOCK_N, 64),
                TensorMapLayout::bhsd(var.dtype, [b, sk, hk, d], call.kv, fwd::BLOCK_N, 64),
            ];
            if var.tma_store {
                let o =
                    TensorMapLayout::bhsd(var.dtype, [b, sq, h, d], call.o, fwd::O_BOX_ROWS, 64);
                want.push(o);
            }
            assert_eq!(k.tensor_maps.len(), want.len());
            for (m, w) in k.tensor_maps.iter().zip(&want) {
                let at = format!("{} {}", k.name, m.param);
                let dims: Vec<u64> = m.global_dim.iter().map(|f| eval(f, &names)).collect();
                let strides: Vec<u64> = m.global_strides.iter().map(|f| eval(f, &names)).collect();
                assert_eq!(m.rank as usize, w.dims.len(), "{at}");
                assert_eq!(dims, w.dims, "{at}");
                assert_eq!(strides, w.strides, "{at}");
                assert_eq!(m.box_dim, w.box_dims, "{at}");
                assert_eq!(m.element_strides, vec![1; w.dims.len()], "{at}");
                assert_eq!(w.swizzle, TmaSwizzle::B128);
                assert_eq!(m.swizzle.value, w.swizzle.code(), "{at}");
                assert_eq!(m.data_type, maps::data_type(w.dtype).into(), "{at}");
                let name = match w.dtype {
                    DType::F16 => "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
                    DType::Bf16 => "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
                };
                assert_eq!(m.data_type.name, name);
                // the limits the manifest states are the ones the runtime checks
                let base = 0x7f00_0000_0000u64;
                w.check(base).unwrap_or_else(|e| panic!("{at}: {e}"));
                let off = base + u64::from(m.global_address_align) / 2;
                assert!(
                    matches!(w.check(off), Err(FlashError::TensorMap(_))),
                    "{at}"
                );
                let bad = |s: u64| TensorMapLayout {
                    strides: vec![w.strides[0], s, w.strides[2]],
                    ..w.clone()
                };
                let mult = u64::from(m.global_strides_multiple);
                assert!(w.check(base).is_ok() && bad(mult).check(base).is_ok());
                for s in [0, mult / 2 * 3, m.global_strides_below] {
                    assert!(bad(s).check(base).is_err(), "{at}: stride {s}");
                }
                assert!(
                    bad(m.global_strides_below - mult).check(base).is_ok(),
                    "{at}"
                );
            }
            let grid: Vec<u64> = k.launch.grid.iter().map(|f| eval(f, &names)).collect();
            let want = var.grid(sq as u64, h as u64, b as u64, SMS).unwrap();
            assert_eq!(grid, [want.0, want.1, want.2].map(u64::from), "{}", k.name);
        }
    }
}
