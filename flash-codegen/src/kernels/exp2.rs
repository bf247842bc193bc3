//! Kernel layer: 2^x on the FMA pipe, for kernels whose `ex2` load is the bottleneck.
//!
//! `ex2.approx` runs on the multi-function unit (16 results per clock per SM on sm_80 and
//! sm_90), beside `tanh.approx` under a softcap: at d128 a softcapped key block's softmax
//! needs two MUFU results per score, about as many clocks as the tensor cores spend on
//! the block's two products. [`exp2_fma`] computes 2^x with adds, four FMAs and an
//! integer add instead (Cody and Waite's reduction): x = n + f with n = round(x) (the
//! 1.5 * 2^23 trick: adding it leaves n in the low mantissa bits), f in [-1/2, 1/2];
//! 2^f by a degree-4 polynomial; n added to the result's exponent field as an integer.

use crate::ptx::{Builder, F32, Reg};

/// 1.5 * 2^23: `x + ROUND` (|x| < 2^22) is exact up to rounding x to an integer, which
/// the sum's low mantissa bits then hold (two's complement, offset by 2^22).
const ROUND: f32 = 12_582_912.0;
/// Inputs are clamped here: n = -127 takes the exponent field to 0, so -inf (a masked
/// score) and anything at most -127 give exactly 0.
const LOWEST: f32 = -127.0;
/// 2^f ~ 1 + f (C1 + f (C2 + f (C3 + f C4))) on [-1/2, 1/2]: relative error below
/// 3e-6 in f32 (a least-squares fit weighted to the relative error; `ex2.approx` is
/// within 2^-22, and the probabilities are rounded to f16 or bf16 for P V anyway).
const C: [f32; 4] = [0.693_124_2, 0.240_241, 0.055_905_97, 0.009_582_663];

/// 2^x for x at most 2^22 (the online softmax's exponents are at most 8, a fixed
/// reference's 64: `OnlineSoftmax::fixed`): exactly 0 for
/// x <= -127 and -inf; subnormal just above -127 (where `ex2.approx.ftz` gives 0).
pub fn exp2_fma(b: &mut Builder, x: Reg<F32>) -> Reg<F32> {
    let r = b.max_f32(x, LOWEST);
    let t = b.add_f32(r, ROUND);
    let n = b.sub_f32(t, ROUND);
    let f = b.sub_f32(r, n);
    let p = b.fma_f32(f, C[3], C[2]);
    let p = b.fma_f32(p, f, C[1]);
    let p = b.fma_f32(p, f, C[0]);
    let p = b.fma_f32(p, f, 1.0f32);
    // n << 23 from t's low bits (the 2^22 offset shifts out), added to p's exponent
    let tb = b.f32_bits(t);
    let e = b.shl_b32(tb, 23u32);
    let pb = b.f32_bits(p);
    let y = b.add_u32(pb, e);
    b.bits_f32(y)
}

#[cfg(test)]
mod tests {
    use super::{C, LOWEST, ROUND, exp2_fma};
    use crate::ptx::{Builder, LaunchBounds, Module, Param, Target, print};

    /// [`exp2_fma`]'s instructions in f32 on the CPU, step for step.
    fn model(x: f32) -> f32 {
        let r = x.max(LOWEST);
        let t = r + ROUND;
        let n = t - ROUND;
        let f = r - n;
        let p = f.mul_add(C[3], C[2]);
        let p = p.mul_add(f, C[1]);
        let p = p.mul_add(f, C[0]);
        let p = p.mul_add(f, 1.0);
        f32::from_bits(p.to_bits().wrapping_add(t.to_bits() << 23))
    }

    /// Within 3e-6 of 2^x (relative) from -126 to 64 (the softmax's range: p <= 2^8 on
    /// the running max, <= 2^64 on a fixed reference), exact at the integers, exactly 0
    /// at and below -127 and at -inf.
    #[test]
    fn the_model_is_2_to_the_x() {
        let mut worst = 0.0f64;
        for i in 0..=1_900_000 {
            let x = -126.0 + i as f32 * 1e-4;
            let want = (x as f64).exp2();
            let got = model(x) as f64;
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 3e-6, "relative error {worst:e}");
        for n in -126..=64 {
            assert_eq!(model(n as f32), (n as f32).exp2(), "2^{n}");
        }
        for x in [-127.0, -127.5, -200.0, -1e30, f32::NEG_INFINITY] {
            assert_eq!(model(x).to_bits(), 0, "2^{x}");
        }
    }

    /// The PTX: a max, three adds, four FMAs, a shift and an integer add; no `ex2`.
    #[test]
    fn it_emits_no_ex2() {
        let mut b = Builder::new();
        let x = b.mov(0.5f32);
        let _ = exp2_fma(&mut b, x);
        let entry = b.finish("t", Vec::<Param>::new(), LaunchBounds::default());
        let text = print::module(&Module {
            target: Target::Sm90a,
            entries: vec![entry],
        });
        assert!(!text.contains("ex2"), "{text}");
        for op in [
            "max.f32",
            "add.f32",
            "sub.f32",
            "fma.rn.f32",
            "shl.b32",
            "add.u32",
        ] {
            assert!(text.contains(op), "{op} missing:\n{text}");
        }
    }

    /// In the sm_90a softcap kernel, `fma_exp2 = k` moves k of every 4 n-tiles'
    /// probabilities off `ex2` (the rescale's `ex2`s stay): the `ex2`s dropped at 2 are
    /// half those dropped at 4, and 4 keeps only the rescale's.
    #[test]
    fn the_share_moves_that_many_probabilities() {
        use crate::kernels::sm90::fwd::{Variant, module};
        use crate::spec::{DType, Mask, Scores};
        let ex2 = |k: u32| {
            let var = Variant {
                fma_exp2: k,
                ..Variant::shipping_scored(DType::Bf16, 128, Mask::Causal, Scores::Softcap)
            };
            print::module(&module(var)).matches("ex2.approx").count()
        };
        let (e0, e1, e2, e4) = (ex2(0), ex2(1), ex2(2), ex2(4));
        assert!(e0 > e1 && e1 > e2 && e2 > e4, "{e0} {e1} {e2} {e4}");
        assert_eq!(e0 - e4, 2 * (e0 - e2));
        assert_eq!(e0 - e4, 4 * (e0 - e1));
        // the rescale's: one per thread row (2) at each softmax step's new reference
        assert_eq!(e4 % 2, 0);
    }
}
