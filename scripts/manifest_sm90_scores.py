#!/usr/bin/env python3
"""The sm_90a softcap and ALiBi kernels launched from manifest.json alone (scripts/
manifest_sm90.py's loader and checks), against a float64 reference of the manifest's
notes: each scaled score x becomes softcap * tanh(x / softcap), or x - slope *
|i + seqlen_k - seqlen_q - j| with the query head's slope (alibi_slopes[b *
alibi_batch_stride + h]), before the mask and the softmax; lse of the transformed scores.

Usage: python3 scripts/manifest_sm90_scores.py PTX_DIR   (emit --all [--arch sm90a])

Every softcap and ALiBi kernel of the manifest once (GQA 2:1, odd lengths), then sq < sk
and sq > sk (rows without keys), MQA and [batch, heads] slopes. o and lse start as NaN
inside guard bands; the tile counter's guard words must survive and the counter stay
zeroed. Exits non-zero on any failure; a NOTICE and 0 without an H100/H200.
"""
import math
import sys

import torch

import manifest_sm90 as m90


def slopes(b, h, per_batch):
    """BLOOM's slopes 2^(-8 (i + 1) / h), varied per batch entry ([b, h] or [h])."""
    base = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], dtype=torch.float32)
    if not per_batch:
        return base.cuda()
    return torch.stack([base * (1.0 + 0.5 * i) for i in range(b)]).cuda()


def reference(q, k, v, scale, causal, window, cap, sl):
    """o [b, sq, h, d] and lse [b, h, sq] in float64 (rows without keys: o 0, lse -inf)."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qd = q.double().transpose(1, 2)
    kd = k.double().transpose(1, 2).repeat_interleave(h // hk, dim=1)
    vd = v.double().transpose(1, 2).repeat_interleave(h // hk, dim=1)
    s = (qd @ kd.transpose(-1, -2)) * scale
    if cap is not None:
        s = cap * torch.tanh(s / cap)
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    if sl is not None:
        per = sl.double().reshape(-1, h) if sl.dim() == 2 else sl.double().reshape(1, h)
        dist = (i + (sk - sq) - j).abs().double()
        s = s - per[:, :, None, None].expand(b, h, 1, 1) * dist
    keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        keep &= j <= i + (sk - sq)
    if window is not None:
        left, right = window
        if left >= 0:
            keep &= j >= i + (sk - sq) - left
        if right >= 0:
            keep &= j <= i + (sk - sq) + right
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return (p @ vd).transpose(1, 2), lse


def case(man, b, sq, sk, h, hk, d, dt, causal, window=None, cap=None, alibi=None):
    """alibi: None, or per_batch (slopes [b, h] when true, [h] when false)."""
    dtype = m90.TORCH[dt]
    scores = "softcap" if cap is not None else "alibi" if alibi is not None else "plain"
    kern = man.pick(d, dt, causal, window, scores)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype) * 2.0  # wide scores: the cap bites
    v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
    o_full, o_pad, o = m90.guarded((b, sq, h, d), dtype)
    l_full, l_pad, lse = m90.guarded((b, h, sq), torch.float32)
    counter_full, counter = m90.guarded_counter()
    scale = 1.0 / math.sqrt(d)
    sl = None if alibi is None else slopes(b, h, alibi)
    sizes = dict(batch=b, seqlen_q=sq, seqlen_k=sk, heads=h, heads_k=hk, head_dim=d)
    scalars = dict(o=o.data_ptr(), lse=lse.data_ptr(), seqlen_q=sq, seqlen_k=sk, group=h // hk,
                   heads=h, o_row=o.stride(1), o_head=o.stride(2), o_batch=o.stride(0),
                   scale_log2=scale * m90.LOG2E, batch=b, tile_counter=counter.data_ptr())
    if window is not None:
        scalars.update(window_left=window[0] & 0xFFFFFFFF, window_right=window[1] & 0xFFFFFFFF)
    if cap is not None:
        scalars.update(softcap=cap)
    if sl is not None:
        scalars.update(alibi_slopes=sl.data_ptr(), alibi_batch_stride=h if alibi else 0)
    maps = man.launch(kern, dict(q=q, k=k, v=v, o=o), sizes, scalars)
    torch.cuda.synchronize()
    del maps
    ref_o, ref_lse = reference(q, k, v, scale, causal, window, cap, sl)
    r_o = m90.rel_l2(o, ref_o)
    empty = torch.isneginf(ref_lse)
    fin = ~empty
    r_l = m90.rel_l2(lse[fin], ref_lse[fin]) if fin.any() else 0.0
    same_empty = bool((torch.isneginf(lse) == empty).all().item())
    counter_ok = m90.counter_intact(counter_full)
    guards_ok = m90.untouched(o_full, o_pad, d) and m90.untouched(l_full, l_pad, sq)
    ok = (math.isfinite(r_o) and r_o <= m90.TOL_O[dt] and math.isfinite(r_l)
          and r_l <= m90.TOL_LSE and same_empty and counter_ok and guards_ok)
    what = f"cap {cap}" if cap is not None else f"slopes {'[b, h]' if alibi else '[h]'}"
    win = "" if window is None else f" window {window}"
    notes = ("" if same_empty else " (-inf rows differ)") + ("" if guards_ok else " (guards)")
    notes += "" if counter_ok else f" (tile_counter left {counter_full.tolist()})"
    print(f"{'ok  ' if ok else 'FAIL'} {kern['name']:52} b{b} sq{sq} sk{sk} h{h}/{hk}{win} "
          f"{what}: o rel-L2 {r_o:.2e}, lse rel-L2 {r_l:.2e}{notes}", flush=True)
    return ok


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("NOTICE: the sm_90a kernels run on compute capability 9.0 only; nothing launched")
        return 0
    man = m90.Manifest(sys.argv[1], m90.Driver(torch.cuda.current_device()))
    scored = [k for k in man.kernels if k["variant"]["scores"] != "plain"]
    if not scored:
        raise SystemExit("the manifest lists no sm90a softcap or ALiBi kernels")
    torch.manual_seed(1)
    ok = True
    for n, k in enumerate(scored):  # each kernel once
        var = k["variant"]
        window = (200, 0) if var["mask"] == "local" else None
        cap, alibi = (20.0, None) if var["scores"] == "softcap" else (None, n % 2 == 0)
        ok &= case(man, 2, 1000, 1000, 4, 2, var["head_dim"], var["dtype"],
                   var["mask"] == "causal", window, cap, alibi)
    ok &= case(man, 1, 300, 1000, 4, 4, 128, "bf16", True, cap=5.0)       # sq < sk
    ok &= case(man, 1, 1000, 300, 4, 4, 64, "f16", True, alibi=False)     # rows without keys
    ok &= case(man, 2, 513, 1031, 8, 1, 128, "f16", False, alibi=True)    # MQA, [b, h] slopes
    ok &= case(man, 1, 900, 300, 2, 2, 64, "bf16", False, (50, 20), 0.5)  # tiny cap, empty rows
    ok &= case(man, 3, 1, 1, 4, 4, 128, "bf16", False, cap=30.0)          # one query, one key
    print("ALL OK" if ok else "SOME FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
