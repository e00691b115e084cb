//! Placeholder so the crate compiles on branch `lexical`; the HNSW vector index lands on branch
//! `vector`, whose version of this file replaces this one on merge.
