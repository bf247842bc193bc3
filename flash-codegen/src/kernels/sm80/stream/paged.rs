//! Kernel layer: the rows of a paged KV cache ([`Pass::FwdPaged`](crate::spec::Pass)):
//! key `n` of a sequence sits in row `n % page_size` of page `block_table[n / page_size]`
//! of the sequence's table row, in each of the K and V pools. Every table index and every
//! page index read is clamped (to the table row and to the pools), so no table content
//! moves an address outside the pools.
//!
//! A thread's copies of a block are rows `r + k * step` (`k < count`, [`TileCopy`]). When
//! pages hold at least `G * step` rows, each run of `G` copies (`k = g*G .. g*G + G`) lies
//! in one page: one table read serves the run, whose rows then follow each other as in a
//! contiguous cache. The kernel has a path per `G` (powers of two from `count` down to 1)
//! and takes, uniformly, the largest the launch's page size allows: with pages of at least
//! a block, one read per block (a contiguous block copy); with 16-row pages, `16 / step`
//! copies per read. The reads are made a block ahead (one register per run, loop-carried)
//! so that the copies of block j never wait on the table. Where a block's runs are
//! no more than the lanes sharing a row (`TileCopy::lanes_per_row`), lane `e` of those
//! lanes reads run `e`'s entry alone and the others take it with a segmented `shfl`:
//! one read per thread per block instead of one per run.

use crate::abi::{BLOCK_TABLE, MAX_PAGES, NUM_PAGES, PAGE_SHIFT, TensorArgs};
use crate::kernels::params::Params;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, LdCache, Reg, Space, Ty};
use crate::tile::copy::TileCopy;

/// Where the rows of a sequence's pages sit.
pub struct PagedRows {
    /// Global address of the sequence's page-table row (i32 entries).
    table: Reg<B64>,
    /// The row's last entry (`max_pages - 1`) and the pools' last page (`num_pages - 1`).
    last_entry: Reg<B32>,
    last_page: Reg<B32>,
    /// `log2(page_size)`, and `page_size - 1`.
    shift: Reg<B32>,
    in_page: Reg<B32>,
    /// Per operand (K, V): the head's row 0 of page 0 plus the thread's chunk, and the
    /// byte strides of a page and of a row (the runtime keeps both below 2^32).
    heads: [Reg<B64>; 2],
    page_bytes: [Reg<B32>; 2],
    row_bytes: [Reg<B32>; 2],
    /// Copies per thread per operand, rows between them, rows per block.
    count: u32,
    step: u32,
    rows: u32,
    /// Loop-carried: the raw table entry of each run of the next block to issue, for the
    /// paths that read a block ahead.
    slots: Vec<Reg<B32>>,
    /// Runs of more than this many slots read the table as they issue (registers).
    max_slots: u32,
    /// Lanes sharing a row, and the thread's place among them (the run it reads when the
    /// lanes share their reads).
    lanes: u32,
    lane: Reg<B32>,
}

impl PagedRows {
    /// The pages of sequence `batch` for the pools `operands`, whose head `kv_head`'s
    /// row 0 of page 0 is at `heads`, copied into blocks of `rows` rows by `copy` (each
    /// operand's copies have one plan); at most `max_slots` registers hold table entries
    /// through the loop.
    pub fn new(
        b: &mut Builder,
        p: &Params,
        (batch, rows, max_slots): (Reg<B32>, u32, u32),
        (operands, heads): ([&TensorArgs; 2], [Reg<B64>; 2]),
        copy: &TileCopy,
    ) -> Self {
        let max_pages = p.get(MAX_PAGES);
        let table = b.cvta_global(p.get(BLOCK_TABLE));
        let entries = b.mul_wide_u32(batch, max_pages);
        let entries = b.shl_b64(entries, 2);
        let table = b.add_s64(table, entries);
        let one = b.max_u32(max_pages, 1u32);
        let last_entry = b.sub_u32(one, 1u32);
        let pages = b.max_u32(p.get(NUM_PAGES), 1u32);
        let last_page = b.sub_u32(pages, 1u32);
        let shift = b.min_u32(p.get(PAGE_SHIFT), 30u32);
        let size = b.shl_b32(1u32, shift);
        let in_page = b.sub_u32(size, 1u32);
        let col = copy.col_bytes_in_row(b);
        let heads = heads.map(|h| b.add_s64(h, col));
        let page_bytes = operands.map(|t| {
            let s = b.cvt_u32_u64(p.get(t.batch_stride));
            b.shl_b32(s, 1u32)
        });
        let row_bytes = operands.map(|t| b.shl_b32(p.row_stride(t), 1u32));
        let (count, step) = (copy.count(), copy.step());
        // a run of g copies spans g * step rows, aligned: inside one page of at least as
        // many rows only when both are powers of two; the shuffles stay inside a warp
        assert!(
            step.is_power_of_two() && copy.lanes_per_row() <= 32,
            "generator bug: paged copies in steps of {step} rows, {} lanes a row",
            copy.lanes_per_row()
        );
        let n_slots = max_slots.min(count);
        PagedRows {
            table,
            last_entry,
            last_page,
            shift,
            in_page,
            heads,
            page_bytes,
            row_bytes,
            count,
            step,
            rows,
            slots: (0..n_slots.max(1)).map(|_| b.mov(0u32)).collect(),
            max_slots: n_slots,
            lanes: copy.lanes_per_row(),
            lane: copy.chunk(),
        }
    }

    /// Copies per table read of each path, largest first: powers of two from `count`
    /// down to 1.
    fn runs(&self) -> Vec<u32> {
        let mut g = self.count.next_power_of_two();
        let mut v = Vec::new();
        while g >= 1 {
            if g <= self.count && self.count.is_multiple_of(g) {
                v.push(g);
            }
            g /= 2;
        }
        v
    }

    /// Runs `body(g)` for the path of run length `g` the launch's page size selects (the
    /// largest `g` with `page_size >= g * step`; 1 always fits): a chain of warp-uniform
    /// branches on `page_shift`.
    fn select(&self, b: &mut Builder, mut body: impl FnMut(&mut Builder, u32)) {
        let runs = self.runs();
        let done = b.label();
        for (i, &g) in runs.iter().enumerate() {
            if i + 1 == runs.len() {
                body(b, g);
                break;
            }
            let other = b.label();
            let fits = b.setp_u32(Cmp::Ge, self.shift, (g * self.step).trailing_zeros());
            b.bra_if(fits, true, other, true);
            body(b, g);
            b.bra(done, true);
            b.place(other);
        }
        b.place(done);
    }

    /// Whether the path of run length `g` reads its table entries a block ahead.
    fn ahead(&self, g: u32) -> bool {
        self.shares(g) || self.count / g <= self.max_slots
    }

    /// Whether the path of run length `g` has each run's entry read by one lane of the
    /// row's lanes and shuffled to the others.
    fn shares(&self, g: u32) -> bool {
        let runs = self.count / g;
        runs > 1 && runs <= self.lanes
    }

    /// The key of the run this lane reads for the shared path of run length `g`, in the
    /// block whose first key is `row0` (lanes past the last run read the last one's).
    fn own_key(&self, b: &mut Builder, copy: &TileCopy, row0: Reg<B32>, g: u32) -> Reg<B32> {
        let run = b.min_u32(self.lane, self.count / g - 1);
        let first = copy.row(b, 0);
        let row = b.mad_lo_u32(run, g * self.step, first);
        b.add_u32(row0, row)
    }

    /// A table entry clamped to the pools' pages, `[0, num_pages)`.
    fn clamp_page(&self, b: &mut Builder, entry: Reg<B32>) -> Reg<B32> {
        let page = b.max_s32(entry, 0i32);
        b.min_u32(page, self.last_page)
    }

    /// Loads the (clamped) table entry of key `key` into `slot` (read-only path): any key
    /// reads inside the table row.
    fn load_entry(&self, b: &mut Builder, key: Reg<B32>, slot: Reg<B32>) {
        let entry = b.shr_u32(key, self.shift);
        let entry = b.min_u32(entry, self.last_entry);
        let at = b.mad_wide_u32(entry, 4u32, self.table);
        let addr = Addr::Global(at, 0);
        b.ld_into(Space::Global, LdCache::NonCoherent, Ty::B32, addr, &[slot]);
    }

    /// Key of the thread's copy `k` of block `j` (`row0 = j * rows`).
    fn key(&self, b: &mut Builder, copy: &TileCopy, row0: Reg<B32>, k: u32) -> Reg<B32> {
        let row = copy.row(b, k);
        b.add_u32(row0, row)
    }

    /// Before the first block `j0` (`row0 = j0 * rows`) issues: its table entries, for
    /// the paths that read ahead (each later block's are read with the issue of the
    /// block before it).
    pub fn start(&self, b: &mut Builder, copy: &TileCopy, row0: Reg<B32>) {
        self.select(b, |b, g| {
            if self.shares(g) {
                let key = self.own_key(b, copy, row0, g);
                self.load_entry(b, key, self.slots[0]);
            } else if self.ahead(g) {
                for (s, k) in (0..self.count).step_by(g as usize).enumerate() {
                    let key = self.key(b, copy, row0, k);
                    self.load_entry(b, key, self.slots[s]);
                }
            }
        });
    }

    /// Issues block `j` (`row0 = j * rows`, `rows_left` of its rows valid) of both
    /// operands into the tiles at `smem + tile_bases[i]`, each run of copies from its
    /// page; then (reading ahead) loads the entries of block j+1's runs: blocks issue in
    /// order, so the next issue is block j+1's.
    pub fn issue(
        &self,
        b: &mut Builder,
        copies: [&TileCopy; 2],
        (smem, tile_bases): (Reg<B32>, [u32; 2]),
        row0: Reg<B32>,
        rows_left: Reg<B32>,
    ) {
        self.select(b, |b, g| {
            // shared: this lane's run's page, clamped to [0, num_pages), for the others
            let own = self.shares(g).then(|| self.clamp_page(b, self.slots[0]));
            for (s, k0) in (0..self.count).step_by(g as usize).enumerate() {
                let key = self.key(b, copies[0], row0, k0);
                let page = match (own, self.ahead(g)) {
                    (Some(own), _) => b.shfl_idx_seg_b32(own, s as u32, self.lanes),
                    (None, true) => self.clamp_page(b, self.slots[s]),
                    (None, false) => {
                        let slot = b.reg::<B32>();
                        self.load_entry(b, key, slot);
                        self.clamp_page(b, slot)
                    }
                };
                let in_row = b.and_b32(key, self.in_page);
                let srcs = [0, 1].map(|i| {
                    let at = b.mad_wide_u32(page, self.page_bytes[i], self.heads[i]);
                    b.mad_wide_u32(in_row, self.row_bytes[i], at)
                });
                let tiles = (smem, tile_bases);
                TileCopy::issue_run_pair(copies, b, tiles, srcs, (k0, g), rows_left);
                if self.ahead(g) && !self.shares(g) {
                    let next = b.add_u32(key, self.rows);
                    self.load_entry(b, next, self.slots[s]);
                }
            }
            if self.shares(g) {
                // (after every lane took its pages: the slot is overwritten)
                let next = b.add_u32(row0, self.rows);
                let key = self.own_key(b, copies[0], next, g);
                self.load_entry(b, key, self.slots[0]);
            }
        });
    }
}
