//! Kernel layer: the rows of a paged KV cache ([`Pass::FwdPaged`](crate::spec::Pass)):
//! key `n` of a sequence sits in row `n % page_size` of page `block_table[n / page_size]`
//! of the sequence's table row, in each of the K and V pools. Every table index and every
//! page index read is clamped (to the table row and to the pools), so no table content
//! moves an address outside the pools. A thread's table entries are loaded one block
//! ahead of the copies that use them ([`PagedRows::fetch`], [`PagedRows::take`]): the
//! copies of block j then issue without waiting on the table.

use crate::abi::{BLOCK_TABLE, MAX_PAGES, NUM_PAGES, PAGE_SHIFT, TensorArgs};
use crate::kernels::params::Params;
use crate::ptx::{Addr, B32, B64, Builder, LdCache, Reg, Space, Ty};

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
    /// Per operand (K, V): the head's row 0 of page 0, and the byte strides of a page and
    /// of a row.
    heads: [Reg<B64>; 2],
    page_bytes: [Reg<B64>; 2],
    row_bytes: [Reg<B32>; 2],
    /// Loop-carried: the raw table entry of each of the thread's copies of the next block
    /// to issue (loaded by `fetch`, used by `take`); empty: no lookahead, `take` reads
    /// the table itself.
    pending: Vec<Reg<B32>>,
}

/// One row's place: its page (clamped) and its row within the page.
#[derive(Clone, Copy)]
pub struct PageRow {
    page: Reg<B32>,
    row: Reg<B32>,
}

impl PagedRows {
    /// The pages of sequence `batch`, for operands `operands` (the pools) whose head
    /// `kv_head`'s row 0 of page 0 is at `heads`, read by a thread making `copies` copies
    /// of each block, its table entries loaded a block ahead (`copies` registers through
    /// the loop; 0: each read when its copy issues).
    pub fn new(
        b: &mut Builder,
        p: &Params,
        (batch, copies): (Reg<B32>, u32),
        operands: [&TensorArgs; 2],
        heads: [Reg<B64>; 2],
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
        let page_bytes = operands.map(|t| {
            let s = p.get(t.batch_stride);
            b.add_s64(s, s)
        });
        let row_bytes = operands.map(|t| b.shl_b32(p.row_stride(t), 1u32));
        PagedRows {
            table,
            last_entry,
            last_page,
            shift,
            in_page,
            heads,
            page_bytes,
            row_bytes,
            pending: (0..copies).map(|_| b.mov(0u32)).collect(),
        }
    }

    /// Whether the table entries are loaded a block ahead (`fetch` does anything).
    pub fn looks_ahead(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Loads the table entry of key `key` into copy `k`'s slot (read-only path), for the
    /// next [`PagedRows::take`] of that copy. The entry index is clamped to the table row,
    /// so any key reads inside the table.
    pub fn fetch(&self, b: &mut Builder, k: usize, key: Reg<B32>) {
        if let Some(&slot) = self.pending.get(k) {
            self.load_entry(b, key, slot);
        }
    }

    /// Loads the (clamped) table entry of key `key` into `slot`.
    fn load_entry(&self, b: &mut Builder, key: Reg<B32>, slot: Reg<B32>) {
        let entry = b.shr_u32(key, self.shift);
        let entry = b.min_u32(entry, self.last_entry);
        let at = b.mad_wide_u32(entry, 4u32, self.table);
        let addr = Addr::Global(at, 0);
        b.ld_into(Space::Global, LdCache::NonCoherent, Ty::B32, addr, &[slot]);
    }

    /// The page (the fetched entry clamped to the pools) and in-page row of key `key`,
    /// whose entry the last `fetch` of copy `k` loaded (without lookahead: read now).
    pub fn take(&self, b: &mut Builder, k: usize, key: Reg<B32>) -> PageRow {
        let entry = match self.pending.get(k) {
            Some(&slot) => slot,
            None => {
                let slot = b.reg::<B32>();
                self.load_entry(b, key, slot);
                slot
            }
        };
        let page = b.max_s32(entry, 0i32);
        let page = b.min_u32(page, self.last_page);
        let row = b.and_b32(key, self.in_page);
        PageRow { page, row }
    }

    /// Global byte address of row `at` of operand `i` (0: K, 1: V), column 0.
    pub fn addr(&self, b: &mut Builder, i: usize, at: PageRow) -> Reg<B64> {
        let page = b.cvt_u64_u32(at.page);
        let off = b.mul_lo_u64(page, self.page_bytes[i]);
        let off = b.mad_wide_u32(at.row, self.row_bytes[i], off);
        b.add_s64(self.heads[i], off)
    }

    /// Operand `i`'s head at row 0 of page 0: the zero-fill source of rows past the end.
    pub fn head(&self, i: usize) -> Reg<B64> {
        self.heads[i]
    }
}
