//! GPU (feature `gpu`, compute capability 9.0): the Hopper probe
//! (`flash_codegen::kernels::sm90::probe`) against float64 host references. It proves, on
//! the device, what the sm_90a kernels stand on: 4D tensor maps over `[b, s, h, d]`
//! (`TensorMap::encode`), TMA loads completing on an mbarrier whose `expect_tx` counts whole
//! boxes (rows past the tensor zero-filled), a second phase waited by parity 1, the
//! 128-byte swizzled image, `wgmma` SS with K-major descriptors and RS with an MN-major one
//! (`tile::desc`), the accumulator layout, `stmatrix`, and a TMA store that clips at the
//! tensor's end (poisoned outputs around the box stay untouched). Other GPUs: a notice.
#![cfg(feature = "gpu")]

use flash_codegen::DType;
use flash_runtime::rng::Rng;
use flash_runtime::{Element, FlashAttention, ProbeSm90At};

const D: usize = 64;

/// One probe run; returns (S error, O error) as max |err| / sum |terms| per element.
fn case<T: Element>(
    rt: &FlashAttention,
    shape: [usize; 4],
    at: ProbeSm90At,
    seed: u64,
) -> (f64, f64) {
    let stream = rt.context().default_stream();
    let [b, s, h, d] = shape;
    let n = b * s * h * d;
    let mut rng = Rng::new(seed);
    let mut tensor = || -> Vec<T> { rng.normal_vec(n).into_iter().map(T::from_f32).collect() };
    let (q, k, v) = (tensor(), tensor(), tensor());
    let (qd, kd, vd) = (
        stream.clone_htod(&q).unwrap(),
        stream.clone_htod(&k).unwrap(),
        stream.clone_htod(&v).unwrap(),
    );
    let mut od = stream.clone_htod(&vec![T::from_f32(f32::NAN); n]).unwrap();
    let mut sd = stream.clone_htod(&vec![f32::NAN; 64 * 64]).unwrap();
    let mut img = stream.clone_htod(&vec![0xA5u8; 8192]).unwrap();
    rt.launch_probe_sm90(
        &stream, shape, &qd, &kd, &vd, &mut od, &mut sd, &mut img, at,
    )
    .expect("probe launch");
    let (o, sg, img) = (
        stream.clone_dtoh(&od).unwrap(),
        stream.clone_dtoh(&sd).unwrap(),
        stream.clone_dtoh(&img).unwrap(),
    );
    let (hh, bb) = (at.h as usize, at.b as usize);
    // element (row r of a box starting at s0, column c): zero past the tensor's end
    let el = |x: &[T], s0: u32, r: usize, c: usize| -> f64 {
        let pos = s0 as usize + r;
        if pos >= s {
            0.0
        } else {
            x[((bb * s + pos) * h + hh) * d + c].to_f32() as f64
        }
    };
    let mut s_err = 0.0f64;
    let mut p = vec![0.0f64; 64 * 64];
    for i in 0..64 {
        for j in 0..64 {
            let (mut r, mut a) = (0.0, 0.0);
            for c in 0..D {
                let t = el(&q, at.sq0, i, c) * el(&k, at.sk0, j, c);
                r += t;
                a += t.abs();
            }
            let got = sg[i * 64 + j] as f64;
            s_err = s_err.max((got - r).abs() / a.max(1e-30));
            assert!(got.is_finite(), "S[{i}][{j}] = {got}");
            p[i * 64 + j] = T::from_f32(sg[i * 64 + j]).to_f32() as f64;
        }
    }
    let mut o_err = 0.0f64;
    for pos in 0..s {
        for c in 0..D {
            for hi in 0..h {
                for bi in 0..b {
                    let got = o[((bi * s + pos) * h + hi) * d + c].to_f32() as f64;
                    let i = pos as i64 - at.sq0 as i64;
                    let in_box = bi == bb && hi == hh && (0..64).contains(&i);
                    if !in_box {
                        assert!(
                            got.is_nan(),
                            "o[{bi}, {pos}, {hi}, {c}] written outside the box: {got}"
                        );
                        continue;
                    }
                    let (mut r, mut a) = (0.0, 0.0);
                    for j in 0..64 {
                        let t = p[i as usize * 64 + j] * el(&v, at.sk0, j, c);
                        r += t;
                        a += t.abs();
                    }
                    assert!(
                        got.is_finite(),
                        "o[{bi}, {pos}, {hi}, {c}] in the box = {got}"
                    );
                    o_err = o_err.max((got - r).abs() / a.max(1e-30));
                }
            }
        }
    }
    // the second box's swizzled image: row r, 16-byte chunk ch at (ch ^ (r % 8)) * 16
    for r in 0..64 {
        for ch in 0..8 {
            for e in 0..8 {
                let at_byte = r * 128 + ((ch ^ (r % 8)) << 4) + 2 * e;
                let bits = u16::from_le_bytes([img[at_byte], img[at_byte + 1]]);
                let got = match T::DTYPE {
                    DType::F16 => half::f16::from_bits(bits).to_f32(),
                    DType::Bf16 => half::bf16::from_bits(bits).to_f32(),
                } as f64;
                let want = el(&q, at.s1, r, 8 * ch + e);
                assert_eq!(
                    got, want,
                    "image row {r} chunk {ch} element {e} (s1 {})",
                    at.s1
                );
            }
        }
    }
    (s_err, o_err)
}

#[test]
fn hopper_probe_matches_host_references() {
    let rt = FlashAttention::on_device(0).unwrap_or_else(|e| panic!("GPU tests need a GPU: {e}"));
    if rt.compute_capability() != (9, 0) {
        println!(
            "NOTICE: the sm_90a probe needs compute capability 9.0; this GPU is {:?}",
            rt.compute_capability()
        );
        return;
    }
    let shape = [2, 200, 3, D];
    let cases = [
        // boxes inside; the second load 44 rows past the end (zero-filled, whole box counted)
        ProbeSm90At {
            h: 2,
            b: 1,
            sq0: 0,
            sk0: 64,
            s1: 180,
        },
        // Q and the stored O 24 rows past the end of batch 0 (the store must not spill into
        // batch 1), K and V 40 rows past it
        ProbeSm90At {
            h: 0,
            b: 0,
            sq0: 160,
            sk0: 176,
            s1: 0,
        },
        ProbeSm90At {
            h: 1,
            b: 1,
            sq0: 137,
            sk0: 3,
            s1: 199,
        },
    ];
    for (i, at) in cases.into_iter().enumerate() {
        let (s16, o16) = case::<half::f16>(&rt, shape, at, 10 + i as u64);
        let (sb, ob) = case::<half::bf16>(&rt, shape, at, 20 + i as u64);
        println!("{at:?}: f16 S err {s16:.2e} O err {o16:.2e}; bf16 S err {sb:.2e} O err {ob:.2e}");
        assert!(s16 <= 1e-4 && sb <= 1e-4, "S: f16 {s16:.2e} bf16 {sb:.2e}");
        assert!(o16 <= 2e-3 && ob <= 1e-2, "O: f16 {o16:.2e} bf16 {ob:.2e}");
    }
}
