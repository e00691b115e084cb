//! The global allocator of warrant's binaries (`warrant`, `warrant-bench`): jemalloc (feature
//! `jemalloc`, the default), or mimalloc (`--no-default-features --features mimalloc`) for
//! side-by-side measurements.

/// jemalloc as the global allocator (feature `jemalloc`, on by default): a node that ingests
/// holds ~1.2 KB less per chunk than on mimalloc (whose partly used pages stayed resident after
/// the ingestion peak), at the same CPU per retrieve (BENCHMARKS.md, "jemalloc").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// mimalloc instead (feature `mimalloc` without `jemalloc`), for side-by-side measurements: the
/// retrieval path takes 0.77x the time of the system allocator (BENCHMARKS.md, "mimalloc").
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option: its position in `mi_option_t`, the same in mimalloc 2 and 3
/// (libmimalloc-sys names no constant for it).
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// On mimalloc, pages the allocator frees go back to the OS 100 ms after they empty instead of
/// mimalloc's 1 s: a node that ingests holds ~45 MiB less at 50,000 chunks, at no measured cost
/// per retrieve (BENCHMARKS.md, "Where an ingesting node's memory goes"). `MIMALLOC_PURGE_DELAY`
/// in the environment still overrides it.
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[allow(unsafe_code)]
pub fn defaults() {
    // SAFETY: sets the default of one integer option before any thread but this one runs;
    // mimalloc reads its options lazily and an option set in the environment keeps its value.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, 100) }
}

/// Nothing to set on jemalloc or the system allocator.
#[cfg(not(all(feature = "mimalloc", not(feature = "jemalloc"))))]
pub fn defaults() {}
