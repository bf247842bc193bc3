//! GPU (feature `gpu`): the mma probe against a CPU matmul, JIT error reporting, every
//! kernel variant JIT-loads, and forward's checks on real device buffers.
#![cfg(feature = "gpu")]

use flash_codegen::KernelSpec;
use flash_runtime::rng::Rng;
use flash_runtime::{AttnParams, Element, FlashAttention, FlashError, Tensor4, Tensor4Mut};

fn runtime() -> FlashAttention {
    FlashAttention::on_device(0).unwrap_or_else(|e| panic!("GPU tests need a GPU: {e}"))
}

fn probe_case<T: Element>(rt: &FlashAttention, seed: u64) -> Result<f64, FlashError> {
    let stream = rt.context().default_stream();
    let mut rng = Rng::new(seed);
    let mut mat = || -> (Vec<T>, Vec<f64>) {
        let x: Vec<T> = rng.normal_vec(256).into_iter().map(T::from_f32).collect();
        let f = x.iter().map(|v| v.to_f32() as f64).collect();
        (x, f)
    };
    let ((a, af), (bt, btf), (v, vf)) = (mat(), mat(), mat());
    let (a_d, bt_d, v_d) = (
        stream.clone_htod(&a)?,
        stream.clone_htod(&bt)?,
        stream.clone_htod(&v)?,
    );
    let mut c1 = stream.clone_htod(&vec![f32::NAN; 256])?;
    let mut c2 = stream.clone_htod(&vec![f32::NAN; 256])?;
    rt.launch_probe(&stream, &a_d, &bt_d, &v_d, &mut c1, &mut c2)?;
    let (c1h, c2h) = (stream.clone_dtoh(&c1)?, stream.clone_dtoh(&c2)?);
    let mut worst = 0.0f64;
    for i in 0..16 {
        for j in 0..16 {
            let (mut r1, mut s1, mut r2, mut s2) = (0.0, 0.0, 0.0, 0.0);
            for k in 0..16 {
                r1 += af[i * 16 + k] * btf[j * 16 + k];
                s1 += (af[i * 16 + k] * btf[j * 16 + k]).abs();
                r2 += af[i * 16 + k] * vf[k * 16 + j];
                s2 += (af[i * 16 + k] * vf[k * 16 + j]).abs();
            }
            let e1 = (c1h[i * 16 + j] as f64 - r1).abs() / s1.max(1e-30);
            let e2 = (c2h[i * 16 + j] as f64 - r2).abs() / s2.max(1e-30);
            let e = if e1.is_nan() || e2.is_nan() {
                f64::INFINITY
            } else {
                e1.max(e2)
            };
            worst = worst.max(e);
        }
    }
    Ok(worst)
}

#[test]
fn mma_probe_matches_cpu_matmul() {
    let rt = runtime();
    for seed in 0..4 {
        let e16 = probe_case::<half::f16>(&rt, seed).expect("f16 probe");
        let eb16 = probe_case::<half::bf16>(&rt, 100 + seed).expect("bf16 probe");
        println!("probe seed {seed}: f16 rel err {e16:.2e}, bf16 rel err {eb16:.2e}");
        assert!(
            e16 <= 1e-3 && eb16 <= 1e-3,
            "probe error too large: {e16} {eb16}"
        );
    }
}

const HEADER: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";

#[test]
fn rejected_ptx_surfaces_the_jit_log() {
    let rt = runtime();
    let bad = format!("{HEADER}.visible .entry broken()\n{{\n\tbogus.instr.u32 %r1;\n\tret;\n}}\n");
    match rt.load_entry("broken", &bad, 0) {
        Err(FlashError::Jit { kernel, log }) => {
            println!("JIT log for `{kernel}`:\n{log}");
            assert_eq!(kernel, "broken");
            assert!(log.contains("CUDA_ERROR_INVALID_PTX"), "{log}");
            assert!(log.lines().count() >= 2, "expected the driver's log: {log}");
        }
        other => panic!("expected a Jit error, got {other:?}"),
    }
    assert!(matches!(
        rt.load_entry("nul", "a\0b", 0),
        Err(FlashError::Jit { .. })
    ));
    let ok = format!("{HEADER}.visible .entry present()\n{{\n\tret;\n}}\n");
    match rt.load_entry("absent", &ok, 0) {
        Err(FlashError::Jit { log, .. }) => assert!(log.contains("no entry `absent`"), "{log}"),
        other => panic!("expected a Jit error, got {other:?}"),
    }
    rt.load_entry("present", &ok, 0).expect("a valid PTX loads");
}

#[test]
fn every_kernel_variant_jit_loads() {
    let rt = runtime();
    let optin = rt
        .context()
        .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .expect("attribute");
    for spec in KernelSpec::all() {
        let f = rt.function(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let (regs, local) = (
            f.num_regs().unwrap_or(-1),
            f.local_size_bytes().unwrap_or(-1),
        );
        println!(
            "{spec}: smem {} (opt-in limit {optin}), {regs} regs, {local} B local",
            spec.smem_bytes()
        );
    }
    assert_eq!(rt.loaded_specs().len(), KernelSpec::all().len());
}

#[test]
fn forward_checks_real_buffers() {
    let rt = runtime();
    let stream = rt.context().default_stream();
    let (b, s, h, d) = (1, 64, 2, 64);
    let n = b * s * h * d;
    let x = stream
        .clone_htod(&vec![half::bf16::from_f32(0.5); n])
        .unwrap();
    let mut small = stream.alloc_zeros::<half::bf16>(n - 8).unwrap();
    let p = AttnParams::new();
    let t = |sh| Tensor4::contiguous(&x, sh);
    let e = rt
        .forward_into(
            &stream,
            &t([b, s, h, d]),
            &t([b, s, h, d]),
            &t([b, s, h, d]),
            &mut Tensor4Mut::contiguous(&mut small, [b, s, h, d]),
            None,
            &p,
        )
        .expect_err("o too small");
    assert!(matches!(e, FlashError::ShapeMismatch(_)), "{e}");
    // q sliced at an odd element: misaligned base pointer
    let q_odd = Tensor4::contiguous(x.slice(1..), [b, s - 1, h, d]);
    let mut o = stream.alloc_zeros::<half::bf16>(n).unwrap();
    let e = rt
        .forward_into(
            &stream,
            &q_odd,
            &t([b, s, h, d]),
            &t([b, s, h, d]),
            &mut Tensor4Mut::contiguous(&mut o, [b, s - 1, h, d]),
            None,
            &p,
        )
        .expect_err("misaligned q");
    assert!(
        matches!(e, FlashError::Misaligned { tensor: "q", .. }),
        "{e}"
    );
    // empty batch: nothing launched, Ok
    rt.forward_into(
        &stream,
        &t([0, s, h, d]),
        &t([0, s, h, d]),
        &t([0, s, h, d]),
        &mut Tensor4Mut::contiguous(&mut o, [0, s, h, d]),
        None,
        &p,
    )
    .expect("empty problem is a no-op");
    stream.synchronize().unwrap();
}
