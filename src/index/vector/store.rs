//! The flat vector storage of a [`VectorIndex`](super::VectorIndex): every slot's vector in one
//! array of 64-byte aligned rows of binary16 components ([`Half`]: half the bytes of f32, and
//! the walk's cost is reading rows), its document ordinal, and the slots of every ordinal.
//!
//! Invariants kept by this module:
//! - slots are dense and append-only (`0..len`): slot `s` owns the first `dimension` values of
//!   row `s` (`vectors[s * stride..(s + 1) * stride]`, the rest of the row is zero padding) and
//!   `ordinals[s]`;
//! - `slots_by_ordinal` and `present` hold exactly the ordinals of `ordinals`, each with its slots
//!   in ascending order.

use std::collections::HashMap;

use roaring::RoaringBitmap;

use crate::domain::DocOrdinal;
use crate::index::Slot;
use crate::index::distance::{Half, to_half};

/// Components in one cache line of binary16: the vector store's unit of alignment.
const BLOCK_LANES: usize = 32;

/// 64 bytes of binary16 components, aligned to a cache line: vectors start on a cache line and
/// never straddle one more than they must.
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(super) struct Block([Half; BLOCK_LANES]);

/// Bytes of a transparent huge page on Linux (x86-64 and arm64: 2 MiB).
const HUGE_PAGE: usize = 2 << 20;

/// Makes room for `additional` more blocks in `rows`. Growth allocates anew (at least doubling),
/// asks the kernel for transparent huge pages over the new allocation before anything is written
/// to it ([`advise_huge_pages`]), then copies the rows over: the walk reads rows at random, and
/// with 4 KiB pages every few rows cost a TLB miss. The allocator does not ask for huge pages
/// (jemalloc by default, so that partly used pages of small objects are never 2 MiB each); rows
/// are dense, so their huge pages cost no resident memory a 4 KiB page would not.
fn grow_rows(rows: &mut Vec<Block>, additional: usize) {
    let needed = rows.len() + additional;
    if needed <= rows.capacity() {
        return;
    }
    let mut grown = Vec::with_capacity(needed.max(rows.capacity() * 2));
    advise_huge_pages(&grown);
    grown.extend_from_slice(rows);
    *rows = grown;
}

/// `blocks` zeroed blocks in an allocation advised for huge pages before it is written, for
/// rows about to be filled in place (a decoded index image's, [`VectorStore::from_rows`]).
pub(super) fn advised_rows(blocks: usize) -> Vec<Block> {
    let mut rows = Vec::new();
    grow_rows(&mut rows, blocks);
    rows.resize(blocks, Block::default());
    rows
}

/// Advises `MADV_HUGEPAGE` over the whole 2 MiB pages inside `rows`' allocation (Linux; a no-op
/// elsewhere, for allocations smaller than two huge pages and where the kernel refuses).
fn advise_huge_pages(rows: &Vec<Block>) {
    let bytes = rows.capacity() * size_of::<Block>();
    if bytes < 2 * HUGE_PAGE {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let start = rows.as_ptr() as usize;
        let first = start.next_multiple_of(HUGE_PAGE);
        let last = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
        if first < last {
            // SAFETY: `madvise(MADV_HUGEPAGE)` only tells the kernel how to back pages: it keeps
            // their contents and mappings, so no memory a Rust reference sees changes. The range
            // lies inside the live allocation `rows` owns. A failure (no THP support) is ignored.
            #[allow(unsafe_code)]
            unsafe {
                libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_HUGEPAGE);
            }
        }
    }
}

/// How many of a store's documents a scope allows, against how many it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ScopeReach {
    /// Documents present and allowed.
    pub(super) allowed: u64,
    /// Documents present.
    pub(super) present: u64,
}

impl ScopeReach {
    /// Whether every document present is allowed (a filter would then be a no-op).
    pub(super) fn everything(self) -> bool {
        self.allowed == self.present
    }

    /// Fraction of the documents present that are allowed (0 when none is present).
    pub(super) fn selectivity(self) -> f64 {
        if self.present == 0 { 0.0 } else { self.allowed as f64 / self.present as f64 }
    }
}

/// The vectors and ordinals of one index's slots.
pub(super) struct VectorStore {
    /// Components of every vector.
    dimension: usize,
    /// Contiguous cache-line-aligned storage: slot `s` is the first `dimension` values of
    /// `vectors[s * stride..(s + 1) * stride]` (the rest of the row is zero padding).
    vectors: Vec<Block>,
    /// Blocks per vector.
    stride: usize,
    /// Document ordinal of every slot.
    ordinals: Vec<DocOrdinal>,
    /// Slots of every document ordinal present (a document has several chunks).
    slots_by_ordinal: HashMap<DocOrdinal, Vec<Slot>>,
    /// The ordinals present, for cheap intersection with `allowed`.
    present: RoaringBitmap,
}

impl VectorStore {
    /// An empty store of `dimension`-component vectors.
    pub(super) fn new(dimension: usize) -> Self {
        Self {
            dimension,
            vectors: Vec::new(),
            stride: Self::stride(dimension),
            ordinals: Vec::new(),
            slots_by_ordinal: HashMap::new(),
            present: RoaringBitmap::new(),
        }
    }

    /// The store of decoded rows: `vectors` holds [`Self::stride`] blocks per slot, `ordinals`
    /// one ordinal per slot (rows made with [`advised_rows`] keep their huge-page advice).
    pub(super) fn from_rows(dimension: usize, vectors: Vec<Block>, ordinals: Vec<DocOrdinal>) -> Self {
        debug_assert_eq!(vectors.len(), ordinals.len() * Self::stride(dimension), "one row per slot");
        let mut slots_by_ordinal: HashMap<DocOrdinal, Vec<Slot>> = HashMap::new();
        for (slot, ordinal) in ordinals.iter().enumerate() {
            slots_by_ordinal.entry(*ordinal).or_default().push(slot as Slot);
        }
        let present = ordinals.iter().copied().collect::<RoaringBitmap>();
        Self { dimension, vectors, stride: Self::stride(dimension), ordinals, slots_by_ordinal, present }
    }

    /// Blocks per row of a `dimension`-component vector.
    pub(super) fn stride(dimension: usize) -> usize {
        dimension.div_ceil(BLOCK_LANES)
    }

    /// Number of slots.
    pub(super) fn len(&self) -> usize {
        self.ordinals.len()
    }

    /// Number of distinct document ordinals.
    pub(super) fn documents(&self) -> usize {
        self.slots_by_ordinal.len()
    }

    /// Document ordinal of every slot.
    pub(super) fn ordinals(&self) -> &[DocOrdinal] {
        &self.ordinals
    }

    /// Reserves room for `additional` more slots.
    pub(super) fn reserve(&mut self, additional: usize) {
        grow_rows(&mut self.vectors, additional * self.stride);
        self.ordinals.reserve(additional);
    }

    /// Appends `vector` (exactly `dimension` components, each within
    /// [`HALF_MAX`](crate::index::distance::HALF_MAX)) of a chunk of `ordinal` as slot `len()`,
    /// rounded to binary16.
    pub(super) fn push(&mut self, ordinal: DocOrdinal, vector: &[f32]) {
        let slot = Slot::try_from(self.len()).expect("slot space exhausted");
        let row = self.vectors.len();
        grow_rows(&mut self.vectors, self.stride);
        self.vectors.resize(row + self.stride, Block::default());
        let values: &mut [Half] = bytemuck::cast_slice_mut(&mut self.vectors[row..]);
        to_half(vector, &mut values[..self.dimension]);
        self.ordinals.push(ordinal);
        self.slots_by_ordinal.entry(ordinal).or_default().push(slot);
        self.present.insert(ordinal);
    }

    /// Appends an already rounded row (`dimension` finite binary16 components) of a chunk of
    /// `ordinal` as slot `len()`.
    pub(super) fn push_row(&mut self, ordinal: DocOrdinal, row: &[Half]) {
        debug_assert_eq!(row.len(), self.dimension, "one full row");
        let slot = Slot::try_from(self.len()).expect("slot space exhausted");
        let start = self.vectors.len();
        grow_rows(&mut self.vectors, self.stride);
        self.vectors.resize(start + self.stride, Block::default());
        let values: &mut [Half] = bytemuck::cast_slice_mut(&mut self.vectors[start..]);
        values[..self.dimension].copy_from_slice(row);
        self.ordinals.push(ordinal);
        self.slots_by_ordinal.entry(ordinal).or_default().push(slot);
        self.present.insert(ordinal);
    }

    /// The stored row of `slot`: `dimension` binary16 components (panics when out of range).
    #[inline]
    pub(super) fn row(&self, slot: Slot) -> &[Half] {
        let start = slot as usize * self.stride;
        let row: &[Half] = bytemuck::cast_slice(&self.vectors[start..start + self.stride]);
        &row[..self.dimension]
    }

    /// The document ordinal of `slot` (panics when out of range).
    #[inline]
    pub(super) fn ordinal(&self, slot: Slot) -> DocOrdinal {
        self.ordinals[slot as usize]
    }

    /// How much of this store `allowed` reaches: one count of `allowed ∩ present` on the
    /// bitmaps' containers, taken once per search and read by every decision after it.
    pub(super) fn reach(&self, allowed: &RoaringBitmap) -> ScopeReach {
        ScopeReach { allowed: allowed.intersection_len(&self.present), present: self.present.len() }
    }

    /// The reach of a scope holding every document present (an unfiltered search).
    pub(super) fn reach_everything(&self) -> ScopeReach {
        ScopeReach { allowed: self.present.len(), present: self.present.len() }
    }

    /// Collects the allowed slots while there are at most `limit` of them; `None` once the
    /// count exceeds `limit` (the search then walks the graph). `reach` is `allowed`'s.
    pub(super) fn allowed_slots_up_to(
        &self,
        allowed: &RoaringBitmap,
        reach: ScopeReach,
        limit: usize,
    ) -> Option<Vec<Slot>> {
        #[cfg(test)]
        SLOT_COLLECTIONS.with(|count| count.set(count.get() + 1));
        debug_assert_eq!(reach, self.reach(allowed), "the reach of another scope");
        // Every present ordinal has at least one slot, so more allowed ordinals than `limit`
        // means more allowed slots than `limit`: decided on the bitmaps' containers alone.
        // (Collecting first cost a hash lookup, a cache miss, per allowed document up to the
        // limit: 42 % of a /v1/retrieve's CPU at 100,000 chunks, see BENCHMARKS.md.)
        if reach.allowed > limit as u64 {
            return None;
        }
        let mut slots = Vec::new();
        let mut push = |ordinal_slots: &Vec<Slot>| {
            slots.extend_from_slice(ordinal_slots);
            slots.len() <= limit
        };
        // Iterate the smaller side of `allowed ∩ present`.
        let within_limit = if allowed.len() <= self.present.len() {
            allowed.iter().filter_map(|ordinal| self.slots_by_ordinal.get(&ordinal)).all(&mut push)
        } else {
            self.present
                .iter()
                .filter(|ordinal| allowed.contains(*ordinal))
                .filter_map(|ordinal| self.slots_by_ordinal.get(&ordinal))
                .all(&mut push)
        };
        within_limit.then_some(slots)
    }

    /// Bytes held by the vector rows and the ordinals (not the per-document maps).
    pub(super) fn heap_bytes(&self) -> usize {
        self.vectors.capacity() * std::mem::size_of::<Block>()
            + self.ordinals.capacity() * std::mem::size_of::<DocOrdinal>()
    }
}

#[cfg(test)]
thread_local! {
    /// Calls of [`VectorStore::allowed_slots_up_to`] on this thread (tests: the planner's
    /// calibration must time the slot collection a search's exact scan pays for).
    pub(super) static SLOT_COLLECTIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distinct values that binary16 holds exactly (integers up to 2048, in sixteenths).
    fn row(slot: usize, dimension: usize) -> Vec<f32> {
        (0..dimension).map(|component| ((slot * 7 + component) % 2048) as f32 / 16.0).collect()
    }

    /// Growth past two huge pages (rows moved into fresh, advised allocations) and a decoded
    /// store of that size (filled into one in place) keep every row and ordinal where it was.
    #[test]
    fn rows_moved_into_huge_page_allocations_keep_their_values() {
        let dimension = 384;
        let slots = 2 * HUGE_PAGE / (dimension * size_of::<Half>()) + 500;
        let mut store = VectorStore::new(dimension);
        store.reserve(3);
        for slot in 0..slots {
            store.push(slot as DocOrdinal / 2, &row(slot, dimension));
        }
        assert!(store.vectors.capacity() * size_of::<Block>() >= 2 * HUGE_PAGE);
        let mut rows = advised_rows(store.vectors.len());
        assert!(rows.iter().all(|block| block.0 == [0; BLOCK_LANES]), "zeroed");
        rows.copy_from_slice(&store.vectors);
        let decoded = VectorStore::from_rows(dimension, rows, store.ordinals.clone());
        for check in [&store, &decoded] {
            assert_eq!(check.len(), slots);
            assert_eq!(check.documents(), slots.div_ceil(2));
            for slot in 0..slots {
                let widened = crate::index::distance::from_half(check.row(slot as Slot));
                assert_eq!(widened, row(slot, dimension), "slot {slot}");
                assert_eq!(check.ordinal(slot as Slot), slot as DocOrdinal / 2);
            }
        }
    }
}
