//! The rows of `bench_kvcache`: `scripts/bench_kvcache.py`'s (decode and chunked
//! prefill) and the `MODS=1` sweep's (decode with a softcap, a window and both).

use super::Row;

/// `bench_kvcache.py`'s `rows()`, in its order.
pub fn rows(quick: bool) -> Vec<Row> {
    let (batches, caches, qs): (&[usize], &[usize], &[usize]) = if quick {
        (&[1, 64], &[4096, 32768], &[1, 16])
    } else {
        (&[1, 8, 64], &[4096, 32768, 131072], &[1, 4, 16])
    };
    let mut out = Vec::new();
    for d in [128, 64] {
        for (h, hk) in [(32, 8), (8, 1)] {
            for &b in batches {
                for &l in caches {
                    if (b * l * hk * d * 4) as f64 > 40e9 {
                        continue;
                    }
                    for &sq in qs {
                        out.push(Row {
                            kind: "decode",
                            b,
                            l,
                            sq,
                            h,
                            hk,
                            d,
                            left: -1,
                            softcap: 0.0,
                            alibi: false,
                        });
                    }
                }
            }
        }
    }
    let prefill: &[usize] = if quick {
        &[8192, 32768]
    } else {
        &[8192, 16384, 32768, 65536, 131072]
    };
    for &l in prefill {
        out.push(Row {
            kind: "prefill",
            b: 1,
            l,
            sq: 512,
            h: 8,
            hk: 8,
            d: 128,
            left: -1,
            softcap: 0.0,
            alibi: false,
        });
    }
    out
}

/// The `MODS=1` sweep: decode (1 query, 32 heads on 8 KV heads, d 128) at batch 1, 8, 64
/// over caches of 8K-128K, each plain, with a softcap of 50 (Gemma 2), a 4096-key window
/// (Mistral: `(4095, 0)`) and both, ALiBi (BLOOM's slopes), then the plain row over a
/// 4096-key cache (what the window's rows should cost).
pub fn mod_rows() -> Vec<Row> {
    let mut out = Vec::new();
    for (b, l) in [(1, 32768), (1, 131072), (8, 32768), (64, 8192)] {
        let base = Row {
            kind: "decode_mods",
            b,
            l,
            sq: 1,
            h: 32,
            hk: 8,
            d: 128,
            left: -1,
            softcap: 0.0,
            alibi: false,
        };
        for (left, softcap) in [(-1, 0.0), (-1, 50.0), (4095, 0.0), (4095, 50.0)] {
            out.push(Row {
                left,
                softcap,
                ..base
            });
        }
        out.push(Row {
            alibi: true,
            ..base
        });
        out.push(Row { l: 4096, ..base });
    }
    out
}
