//! Spec layer: the sm_80 kernels' shared-memory layouts, region by region (what
//! [`crate::spec::SmemLayout`] holds for an sm_80 tile row).

use super::Sm80Tiles;
use crate::spec::{KernelSpec, Pass, SmemLayout, StreamRegion, TileRegion};

/// The shared-memory layout of an sm_80 kernel of `spec` on tiles `t`.
pub(crate) fn layout(spec: &KernelSpec, t: &Sm80Tiles) -> SmemLayout {
    let dp = spec.smem_head_dim();
    let tile = |base, rows, cols| TileRegion { base, rows, cols };
    let stream = |base, rows, vectors| StreamRegion {
        base,
        rows,
        cols: dp,
        stages: t.stages,
        vectors,
    };
    let (fixed, stream, exchange, stats) = match spec.pass.tile_pass() {
        // Q, then `stages` K and V tiles; exchange: P [block_m][block_n, in whole panels]
        // and the row statistics of every warp, [G][block_m] f32 = 32 rows a warp
        Pass::Fwd | Pass::FwdSplit => {
            let q = tile(0, t.block_m, dp);
            let kv = stream(q.end(), t.block_n, 0);
            let p = tile(kv.base + kv.bytes(), t.block_m, t.block_n.div_ceil(64) * 64);
            match t.layout.exchange() {
                true => (vec![q], Some(kv), vec![p], Some(p.end())),
                false => (vec![q], Some(kv), vec![], None),
            }
        }
        // K, V once; Q, dO, LSE and D per stage; two [block_n][block_m, in whole panels]
        // tiles: dS^T of two successive query blocks (the atomic dQ of a block runs in
        // the next iteration), or with exchange dS^T and P^T
        Pass::Bwd => {
            let k = tile(0, t.block_n, dp);
            let v = tile(k.end(), t.block_n, dp);
            let qs = stream(v.end(), t.block_m, 2);
            let ds = tile(qs.base + qs.bytes(), t.block_n, t.block_m.div_ceil(64) * 64);
            let second = tile(ds.end(), ds.rows, ds.cols);
            (vec![k, v], Some(qs), vec![ds, second], None)
        }
        // Q, dO once; K and V per stage
        Pass::BwdDq => {
            let q = tile(0, t.block_m, dp);
            let d_o = tile(q.end(), t.block_m, dp);
            (
                vec![q, d_o],
                Some(stream(d_o.end(), t.block_n, 0)),
                vec![],
                None,
            )
        }
        // the warps' f32 sums of a row, [warps][head_dim] (as 2-byte columns: 2 d)
        Pass::FwdCombine => (
            vec![],
            None,
            vec![tile(0, t.warps, 2 * spec.head_dim)],
            None,
        ),
        Pass::BwdPre | Pass::BwdPost | Pass::BwdKvSum => (vec![], None, vec![], None),
        p => unreachable!("{p:?} is not a tile pass"),
    };
    let groups = t.warps / (t.block_m / 32).max(1);
    let end = [
        fixed.last().map(TileRegion::end),
        stream.map(|s| s.base + s.bytes()),
        exchange.last().map(TileRegion::end),
        stats.map(|s| s + 4 * groups * t.block_m),
    ];
    SmemLayout {
        bytes: end.into_iter().flatten().max().unwrap_or(0),
        fixed,
        stream,
        exchange,
        stats,
    }
}
