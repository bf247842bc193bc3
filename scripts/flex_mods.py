"""FlexAttention score_mods shared by the Flex benches (bench_flex_modifiers.py,
bench_flex_window_bwd.py, bench_flex_sm90.py): ALiBi with BLOOM's slopes, the softcap.
Make each once per configuration: a fresh closure per call would recompile."""
import torch


def bloom_slopes(heads):
    """BLOOM's ALiBi slopes 2^(-8 (i + 1) / heads), f32 on the GPU."""
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / heads) for i in range(heads)], device="cuda")


def alibi_mod(slopes):
    """score - slopes[h] * |qi - ki| (sq = sk: the diagonals align)."""
    def alibi(score, b, h, qi, ki):
        return score - slopes[h] * (qi - ki).abs()
    return alibi


def softcap_mod(cap):
    """cap * tanh(score / cap)."""
    def softcap(score, b, h, qi, ki):
        return cap * torch.tanh(score / cap)
    return softcap
