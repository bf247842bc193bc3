//! The sliding window and the softcap in the KV-cache forwards (contiguous and paged),
//! through the pure validate layer (no GPU): a window plans the split kernel's `_local`
//! variant with its bounds (-1 as `u32::MAX`) and sizes its splits for the keys the window
//! reaches, not the cache's capacity; a cap plans the `_softcap` variant with the cap
//! bound; `(-1, 0)` and `(-1, -1)` are the causal and plain kernels; bad windows, bad caps
//! and lengths the kernel's i32 window sums cannot hold are typed errors.

mod kvcache_support;

use flash_codegen::abi::params_of;
use flash_codegen::{Arch, Mask, Pass, Scores};
use flash_runtime::validate::{KvArgs, LaunchPlan, PagedDesc, ParamValue, kvcache_splits};
use flash_runtime::{AttnParams, FlashError};
use kvcache_support::{BF, H200, args, buf, err, plan, t};

/// The launch binds `abi::params_of(spec)`, in order, each of its ABI type.
fn assert_binds_its_spec(l: &LaunchPlan) {
    let abi = params_of(&l.spec);
    let names: Vec<&str> = l.params.iter().map(|(n, _)| *n).collect();
    let want: Vec<&str> = abi.iter().map(|d| d.name).collect();
    assert_eq!(names, want, "{}", l.spec);
    for ((name, v), desc) in l.params.iter().zip(&abi) {
        assert!(v.fits(desc.ty), "{name}: {v:?} for {:?}", desc.ty);
    }
}

fn with(mut a: KvArgs<'static>, p: AttnParams<'static>) -> KvArgs<'static> {
    a.params = p;
    a
}

fn paged(mut a: KvArgs<'static>, page: usize) -> KvArgs<'static> {
    let [b, cap, hk, d] = a.k.shape;
    let pages = b * cap / page;
    a.k = t([pages, page, hk, d], 0x2000_0000);
    a.v = t([pages, page, hk, d], 0x3000_0000);
    a.paged = Some(PagedDesc {
        block_table: buf(0xc000_0000, b * (cap / page)),
        shape: [b, cap / page],
    });
    a
}

#[test]
fn windows_and_caps_plan_their_split_kernels() {
    for (params, mask, scores, window, cap) in [
        (
            AttnParams::new().with_window(4095, 0),
            Mask::Local,
            Scores::Plain,
            Some((4095, 0)),
            None,
        ),
        (
            AttnParams::new().with_window(-1, 7),
            Mask::Local,
            Scores::Plain,
            Some((u32::MAX, 7)),
            None,
        ),
        (
            AttnParams::new().with_window(1023, 0).with_softcap(50.0),
            Mask::Local,
            Scores::Softcap,
            Some((1023, 0)),
            Some(50.0),
        ),
        (
            AttnParams::causal().with_softcap(30.0),
            Mask::Causal,
            Scores::Softcap,
            None,
            Some(30.0),
        ),
        (
            AttnParams::new().with_window(-1, 0),
            Mask::Causal,
            Scores::Plain,
            None,
            None,
        ),
        (
            AttnParams::new().with_window(-1, -1),
            Mask::None,
            Scores::Plain,
            None,
            None,
        ),
    ] {
        for (a, pass) in [
            (args(2, 1, 32768, 32, 8, 128), Pass::FwdSplit),
            (paged(args(2, 1, 32768, 32, 8, 128), 256), Pass::FwdPaged),
        ] {
            let p = plan(&with(a, params)).unwrap();
            let s = &p.split;
            assert_eq!(
                (s.spec.pass, s.spec.mask, s.spec.scores),
                (pass, mask, scores)
            );
            assert_binds_its_spec(s);
            assert_eq!(
                (s.param("window_left"), s.param("window_right")),
                match window {
                    Some((l, r)) => (Some(ParamValue::U32(l)), Some(ParamValue::U32(r))),
                    None => (None, None),
                },
                "{}",
                s.spec
            );
            assert_eq!(s.param("softcap"), cap.map(ParamValue::F32));
            if let Some(c) = &p.combine {
                assert_eq!((c.spec.mask, c.spec.scores), (Mask::None, Scores::Plain));
                assert_binds_its_spec(c);
            }
        }
    }
}

/// A 4K window over a 128K cache splits as a 4K cache does (the split rule sees the keys
/// the window reaches), a window wider than the cache as the cache.
#[test]
fn a_window_splits_for_the_keys_it_reaches() {
    let splits = |cap: usize, p: AttnParams<'static>| {
        let a = with(args(1, 1, cap, 8, 1, 128), p);
        let n = plan(&a).unwrap().num_splits;
        // the shapes-only count agrees
        let q = a.q.shape;
        let shapes = (a.k.shape, None);
        let m = kvcache_splits(q, shapes, (BF, &a.params), None, Arch::Sm80, H200);
        assert_eq!(m.unwrap(), n);
        n
    };
    let window = AttnParams::new().with_window(4095, 0);
    assert_eq!(splits(131072, window), splits(4096, AttnParams::new()));
    assert!(splits(131072, window) < splits(131072, AttnParams::new()));
    let wide = AttnParams::new().with_window(1 << 20, 0);
    assert_eq!(splits(8192, wide), splits(8192, AttnParams::new()));
}

#[test]
fn bad_windows_caps_and_lengths_are_errors() {
    for p in [
        AttnParams::new().with_window(-2, 0),
        AttnParams::new().with_window(16, -9),
    ] {
        let (e, m) = err(&with(args(2, 1, 4096, 8, 2, 64), p));
        assert!(matches!(e, FlashError::InvalidParam(_)), "{m}");
        assert!(m.contains("-1 (unbounded)"), "{m}");
    }
    for cap in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let p = AttnParams::new().with_softcap(cap);
        let (e, m) = err(&with(args(2, 1, 4096, 8, 2, 64), p));
        assert!(matches!(e, FlashError::InvalidParam(_)), "{m}");
        assert!(m.contains("finite and > 0"), "{m}");
        // ... also when there is nothing to compute
        let (e, _) = err(&with(args(0, 1, 4096, 8, 2, 64), p));
        assert!(matches!(e, FlashError::InvalidParam(_)));
    }
    // seqlen_q + capacity must stay below 2^31 - 256 under a window
    let w = AttnParams::new().with_window(100, 0);
    let a = with(args(1, 1 << 20, (1 << 31) - (1 << 20) - 200, 1, 1, 32), w);
    let (e, m) = err(&a);
    assert!(matches!(e, FlashError::InvalidParam(_)), "{m}");
    assert!(m.contains("below 2^31"), "{m}");
}
