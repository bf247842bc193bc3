//! A case's paged cache on the host: the logical `[b, cap, hk, d]` caches scattered into
//! page pools through a randomly permuted page table (never the identity), pages shared
//! between sequences where the case asks, NaN in every pool row no sequence holds, and
//! garbage in the table entries past each sequence's pages.

use flash_runtime::Element;
use flash_runtime::rng::Rng;

use super::{Case, Layout};
use crate::gpu_support::Placed;

/// How a case pages its cache.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paging {
    /// Rows per page (a power of two; the case's `cap` a multiple of it).
    pub page: usize,
    /// Sequences after the first reuse its first `shared` pages (a common prefix).
    pub shared: usize,
    /// Pool pages no table points at (with NaN rows).
    pub spare: usize,
}

/// The pools and the table, ready to upload.
pub struct Pools<T> {
    pub k: Vec<T>,
    pub v: Vec<T>,
    /// `[b, max_pages]`, row-major.
    pub table: Vec<i32>,
    pub max_pages: usize,
    /// Where a `[num_pages, page, hk, d]` pool sits in its buffer.
    pub place: Placed,
}

/// Table entries past a sequence's pages: the kernel must never use them (they clamp
/// into the pools if it did).
const GARBAGE: [i32; 4] = [i32::MAX, -1, i32::MIN, 1 << 24];

/// Scatter the logical caches `k`, `v` (`[b, cap, hk, d]`, row-major) into pools for case
/// `c` paged as `p`, with sequence `s` holding `lens[s]` keys. Returns the pools and the
/// logical caches as the kernel will see them (a shared page holds the last writer's
/// rows, and every sequence sharing it reads those).
pub fn scatter<T: Element>(
    c: &Case,
    p: &Paging,
    lens: &[usize],
    (k, v): (&[T], &[T]),
    rng: &mut Rng,
) -> (Pools<T>, Vec<f64>, Vec<f64>) {
    assert!(
        c.cap % p.page == 0 && p.page.is_power_of_two(),
        "case bug: {c:?}"
    );
    let (b, page, row) = (c.b, p.page, c.hk * c.d);
    let max_pages = c.cap / page;
    let num_pages = (b * max_pages + p.spare).max(1);
    // a random permutation of the pool's pages, never the identity
    let mut perm: Vec<usize> = (0..num_pages).collect();
    for i in (1..num_pages).rev() {
        perm.swap(i, rng.below(i as u64 + 1) as usize);
    }
    if num_pages > 1 && perm.iter().enumerate().all(|(i, &x)| i == x) {
        perm.swap(0, 1);
    }
    let mut table = vec![0i32; b * max_pages];
    let first_used = lens.first().map_or(0, |&l| l.div_ceil(page));
    for s in 0..b {
        let used = lens[s].div_ceil(page);
        for i in 0..max_pages {
            table[s * max_pages + i] = match (i < used, s > 0 && i < p.shared.min(first_used)) {
                (true, true) => table[i], // sequence 0's page i
                (true, false) => perm[s * max_pages + i] as i32,
                (false, _) => GARBAGE[(s + i) % GARBAGE.len()],
            };
        }
    }
    let place = match c.layout {
        Layout::Contiguous => Placed::new([num_pages, page, c.hk, c.d], false),
        // two layers of pools in one buffer, 2 more heads, a padded head stride; this
        // layer the second
        Layout::Strided => {
            let (heads, ds) = (c.hk + 2, c.d + 8);
            let layer = page * heads * ds;
            Placed {
                shape: [num_pages, page, c.hk, c.d],
                strides: [2 * layer, heads * ds, ds, 1],
                offset: layer + ds,
            }
        }
    };
    let pos = place.positions();
    let len = place.buffer_len();
    let (mut kp, mut vp) = (
        vec![T::from_f32(f32::NAN); len],
        vec![T::from_f32(f32::NAN); len],
    );
    // the pool element of (sequence s, key j, element e of the row)
    let at = |s: usize, j: usize, e: usize| {
        let pg = table[s * max_pages + j / page] as usize;
        pos[(pg * page + j % page) * row + e]
    };
    for s in 0..b {
        for j in 0..lens[s] {
            for e in 0..row {
                let l = (s * c.cap + j) * row + e;
                kp[at(s, j, e)] = k[l];
                vp[at(s, j, e)] = v[l];
            }
        }
    }
    let (mut kf, mut vf) = (vec![0.0; b * c.cap * row], vec![0.0; b * c.cap * row]);
    for s in 0..b {
        for j in 0..lens[s] {
            for e in 0..row {
                let l = (s * c.cap + j) * row + e;
                kf[l] = kp[at(s, j, e)].to_f32() as f64;
                vf[l] = vp[at(s, j, e)].to_f32() as f64;
            }
        }
    }
    let pools = Pools {
        k: kp,
        v: vp,
        table,
        max_pages,
        place,
    };
    (pools, kf, vf)
}
