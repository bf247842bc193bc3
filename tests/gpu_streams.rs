//! GPU (feature `gpu`): the buffers the runtime keeps per stream (the sm_90a dynamic
//! scheduler's tile counter, the split-KV forward's partials) under concurrent streams
//! and CUDA-graph capture. Each result is compared bit for bit with the same call run
//! alone (the kernels are deterministic: a tile's arithmetic does not depend on which CTA
//! runs it), into NaN-poisoned outputs:
//! - the dynamic sm_90a forward launched in turn on two streams, many times, without a
//!   synchronisation between (each stream's counter its own: a shared one would hand the
//!   tiles of one launch to the other's CTAs, leaving poisoned rows);
//! - the same forward captured into a graph (its counter then the launch's own) and the
//!   graph replayed between direct launches on the same stream (the cached counter left
//!   zeroed by both);
//! - the split-KV forward captured and replayed likewise (its partials the call's own).
//!
//! The sm_90a cases need compute capability 9.0 (other GPUs: a notice).
#![cfg(feature = "gpu")]

mod gpu_support;

use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, CudaStream};
use flash_runtime::rng::Rng;
use flash_runtime::{FlashAttention, KvOptions, Sm90FwdShape, Tensor4, Tensor4Mut};
use gpu_support::{attn_params, rounded};
use half::bf16;

/// The dynamic-scheduler forward of these sizes (the shipping schedule).
fn shape(batch: usize, seqlen: usize, heads: usize, causal: bool) -> Sm90FwdShape {
    Sm90FwdShape {
        batch,
        seqlen_q: seqlen,
        seqlen_k: seqlen,
        heads,
        heads_k: heads / 2,
        head_dim: 64,
        causal,
        window: None,
        scores: flash_codegen::Scores::Plain,
        fma_exp2: None,
        overlap: true,
        pingpong: true,
        consumers: None,
        persistent: true,
        dynamic: true,
        chained: false,
        tma_store: true,
        q_ahead: false,
        fixed_ref: false,
        edge_masks: false,
        debug: false,
    }
}

/// q, k, v of `sh` on `stream`, fresh random values.
fn inputs(stream: &Arc<CudaStream>, sh: Sm90FwdShape, seed: u64) -> [CudaSlice<bf16>; 3] {
    let (b, sq, sk, h, hk, d) = sh.sizes();
    let mut rng = Rng::new(seed);
    [b * sq * h * d, b * sk * hk * d, b * sk * hk * d]
        .map(|n| stream.clone_htod(&rounded::<bf16>(&mut rng, n).0).unwrap())
}

fn poisoned(stream: &Arc<CudaStream>, n: usize) -> CudaSlice<bf16> {
    stream.clone_htod(&vec![bf16::NAN; n]).unwrap()
}

fn launch(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    sh: Sm90FwdShape,
    qkv: &[CudaSlice<bf16>; 3],
    o: &mut CudaSlice<bf16>,
) {
    let [q, k, v] = qkv;
    rt.launch_fwd_sm90(stream, sh, q, k, v, o, None)
        .unwrap_or_else(|e| panic!("{sh:?}: {e}"));
}

/// Bit patterns (NaN-safe equality).
fn bits(stream: &Arc<CudaStream>, o: &CudaSlice<bf16>) -> Vec<u16> {
    let h: Vec<bf16> = stream.clone_dtoh(o).unwrap();
    h.iter().map(|x| x.to_bits()).collect()
}

fn assert_same(what: &str, got: &[u16], want: &[u16]) {
    let bad = got.iter().zip(want).filter(|(a, b)| a != b).count();
    let nan = got.iter().filter(|&&x| bf16::from_bits(x).is_nan()).count();
    assert_eq!(
        bad,
        0,
        "{what}: {bad} of {} elements differ ({nan} NaN)",
        got.len()
    );
}

fn hopper() -> Option<FlashAttention> {
    let rt = gpu_support::device();
    if rt.compute_capability() != (9, 0) {
        println!(
            "NOTICE: the sm_90a forward needs compute capability 9.0; this GPU is {:?}",
            rt.compute_capability()
        );
        return None;
    }
    Some(rt)
}

#[test]
fn sm90_tile_counters_are_per_stream() {
    let Some(rt) = hopper() else { return };
    let ctx = rt.context().clone();
    let streams = [ctx.new_stream().unwrap(), ctx.new_stream().unwrap()];
    // different problems on the two streams: long enough that their CTAs overlap
    let shapes = [shape(2, 2048, 16, true), shape(4, 1000, 8, false)];
    let qkv: Vec<_> = (0..2)
        .map(|i| inputs(&streams[i], shapes[i], 7 + i as u64))
        .collect();
    let n = |i: usize| shapes[i].batch * shapes[i].seqlen_q * shapes[i].heads * 64;
    let want: Vec<Vec<u16>> = (0..2)
        .map(|i| {
            let mut o = poisoned(&streams[i], n(i));
            launch(&rt, &streams[i], shapes[i], &qkv[i], &mut o);
            streams[i].synchronize().unwrap();
            bits(&streams[i], &o)
        })
        .collect();
    const ROUNDS: usize = 12;
    let mut outs: Vec<Vec<CudaSlice<bf16>>> = vec![Vec::new(), Vec::new()];
    for (i, s) in streams.iter().enumerate() {
        outs[i] = (0..ROUNDS).map(|_| poisoned(s, n(i))).collect();
        s.synchronize().unwrap();
    }
    for r in 0..ROUNDS {
        for i in 0..2 {
            launch(&rt, &streams[i], shapes[i], &qkv[i], &mut outs[i][r]);
        }
    }
    for i in 0..2 {
        streams[i].synchronize().unwrap();
        for (r, o) in outs[i].iter().enumerate() {
            let what = format!("stream {i}, launch {r} of {ROUNDS}: {:?}", shapes[i]);
            assert_same(&what, &bits(&streams[i], o), &want[i]);
        }
    }
}

/// cudarc's per-slice events off for the capture tests (created after this): a capture
/// may not wait on events recorded outside it. Each test runs on one stream and
/// synchronises it before it reads or frees a buffer.
fn untracked(rt: &FlashAttention) {
    // SAFETY: no slice of this context object exists yet, and every buffer is used on
    // one stream only, synchronised before any host read or free.
    unsafe { rt.context().disable_event_tracking() };
}

/// Captures `call` on `stream` (global mode) into an instantiated graph.
fn capture(stream: &Arc<CudaStream>, call: impl FnOnce()) -> cudarc::driver::CudaGraph {
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    call();
    stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("the capture recorded the launch")
}

#[test]
fn sm90_forward_replays_from_a_graph() {
    let Some(rt) = hopper() else { return };
    untracked(&rt);
    let stream = rt.context().new_stream().unwrap();
    let sh = shape(2, 1536, 8, true);
    let qkv = inputs(&stream, sh, 11);
    let n = sh.batch * sh.seqlen_q * sh.heads * 64;
    // the direct launch first: it loads the kernel (no module load inside the capture)
    let mut o = poisoned(&stream, n);
    launch(&rt, &stream, sh, &qkv, &mut o);
    stream.synchronize().unwrap();
    let want = bits(&stream, &o);
    let mut og = poisoned(&stream, n);
    stream.synchronize().unwrap();
    let graph = capture(&stream, || launch(&rt, &stream, sh, &qkv, &mut og));
    for round in 0..3 {
        stream.memcpy_htod(&vec![bf16::NAN; n], &mut og).unwrap();
        graph.launch().unwrap();
        // a direct launch between replays, on the stream's cached counter
        let mut od = poisoned(&stream, n);
        launch(&rt, &stream, sh, &qkv, &mut od);
        stream.synchronize().unwrap();
        assert_same(&format!("replay {round}"), &bits(&stream, &og), &want);
        assert_same(
            &format!("direct launch after replay {round}"),
            &bits(&stream, &od),
            &want,
        );
    }
}

#[test]
fn split_kv_forward_replays_from_a_graph() {
    let rt = gpu_support::device();
    untracked(&rt);
    let stream = rt.context().new_stream().unwrap();
    let (b, cap, h, hk, d) = (2, 3000, 8, 2, 128);
    let mut rng = Rng::new(5);
    let q = stream
        .clone_htod(&rounded::<bf16>(&mut rng, b * h * d).0)
        .unwrap();
    let kc = stream
        .clone_htod(&rounded::<bf16>(&mut rng, b * cap * hk * d).0)
        .unwrap();
    let vc = stream
        .clone_htod(&rounded::<bf16>(&mut rng, b * cap * hk * d).0)
        .unwrap();
    let params = attn_params(false, None);
    let opts = KvOptions::with_splits(6);
    let run = |o: &mut CudaSlice<bf16>| {
        let mut o_t = Tensor4Mut::contiguous(o, [b, 1, h, d]);
        rt.forward_kvcache_into(
            &stream,
            &Tensor4::contiguous(&q, [b, 1, h, d]),
            &Tensor4::contiguous(&kc, [b, cap, hk, d]),
            &Tensor4::contiguous(&vc, [b, cap, hk, d]),
            None,
            &mut o_t,
            None,
            &params,
            &opts,
        )
        .unwrap_or_else(|e| panic!("split-KV forward: {e}"));
    };
    let n = b * h * d;
    let mut o = poisoned(&stream, n);
    run(&mut o);
    stream.synchronize().unwrap();
    let want = bits(&stream, &o);
    let mut og = poisoned(&stream, n);
    stream.synchronize().unwrap();
    let graph = capture(&stream, || run(&mut og));
    for round in 0..3 {
        stream.memcpy_htod(&vec![bf16::NAN; n], &mut og).unwrap();
        graph.launch().unwrap();
        let mut od = poisoned(&stream, n);
        run(&mut od);
        stream.synchronize().unwrap();
        assert_same(&format!("replay {round}"), &bits(&stream, &og), &want);
        assert_same(
            &format!("direct call after replay {round}"),
            &bits(&stream, &od),
            &want,
        );
    }
}
