//! Criterion benchmarks of the retrieval hot paths, on seeded data, each asserting its result
//! inside the loop so a broken path cannot be measured: filtered vector search at low and high
//! selectivity (exact scan vs graph walk), filtered BM25, RRF fusion and context selection;
//! and the write path's ACL step: preparing a batch of upserts in a tenant of 100,000 documents.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roaring::RoaringBitmap;
use warrant::acl::{AclMutation, AclStore};
use warrant::bench::filtered::{FilteredBenchConfig, build_data};
use warrant::domain::{ChunkingConfig, DocAcl, Document, chunk_document};
use warrant::index::lexical::LexicalIndex;
use warrant::index::vector::VectorParams;
use warrant::retrieval::fusion::{Retriever, ScoredChunk, reciprocal_rank_fusion};
use warrant::retrieval::{SelectionLimits, select_context};

fn bitmap(count: usize, fraction: f64, seed: u64) -> RoaringBitmap {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count as u32).filter(|_| rng.gen_bool(fraction)).collect()
}

fn vector_search(criterion: &mut Criterion) {
    let config = FilteredBenchConfig {
        vectors: 20_000,
        dim: 128,
        queries: 64,
        k: 10,
        seed: 11,
        selectivities: vec![],
        params: VectorParams::with_dimension(128),
        clusters: 64,
    };
    let (index, queries) = build_data(&config);
    for (name, fraction) in [("vector_filtered_0.01", 0.01), ("vector_filtered_0.5", 0.5), ("vector_filtered_1.0", 1.0)]
    {
        let allowed = bitmap(config.vectors, fraction, 3);
        let mut query = 0;
        criterion.bench_function(name, |bencher| {
            bencher.iter(|| {
                query = (query + 1) % queries.len();
                let search = index.search(black_box(&queries[query]), 10, &allowed);
                assert!(search.hits.iter().all(|hit| allowed.contains(hit.slot)));
                assert_eq!(search.hits.len(), 10);
            })
        });
    }
}

fn lexical_search(criterion: &mut Criterion) {
    const WORDS: &[&str] = &["alpha", "beta", "gamma", "delta", "omega", "river", "stone", "cloud", "ember", "frost"];
    let mut rng = SmallRng::seed_from_u64(5);
    let texts: Vec<String> = (0..20_000)
        .map(|_| (0..12).map(|_| WORDS[rng.gen_range(0..WORDS.len())]).collect::<Vec<_>>().join(" "))
        .collect();
    let mut index = LexicalIndex::new().expect("index");
    let items: Vec<(u32, u32, &str, &str)> =
        texts.iter().enumerate().map(|(i, t)| (i as u32, i as u32, "", t.as_str())).collect();
    index.add_batch(&items).expect("indexed");
    for (name, fraction) in
        [("lexical_filtered_0.01", 0.01), ("lexical_filtered_0.5", 0.5), ("lexical_filtered_1.0", 1.0)]
    {
        let allowed = bitmap(texts.len(), fraction, 9);
        criterion.bench_function(name, |bencher| {
            bencher.iter(|| {
                let search = index.search(black_box("river stone ember"), 10, &allowed).expect("search");
                assert!(!search.hits.is_empty());
                assert!(search.hits.iter().all(|hit| allowed.contains(hit.slot)));
            })
        });
    }
}

fn fusion_and_selection(criterion: &mut Criterion) {
    let chunks: Vec<Arc<warrant::domain::Chunk>> = (0..240)
        .map(|i| {
            let document = Document {
                tenant: "t".into(),
                doc_id: format!("d{}", i / 3),
                version: 1,
                title: String::new(),
                text: format!("chunk number {i} with some words to count"),
                acl: DocAcl::default(),
                layout: None,
            };
            Arc::new(chunk_document(&document, i / 3, &ChunkingConfig::default()).remove(0))
        })
        .collect();
    let lexical: Vec<ScoredChunk> = chunks[..120]
        .iter()
        .enumerate()
        .map(|(i, c)| ScoredChunk { chunk: Arc::clone(c), score: 100.0 - i as f32 })
        .collect();
    let vector: Vec<ScoredChunk> = chunks[60..180]
        .iter()
        .enumerate()
        .map(|(i, c)| ScoredChunk { chunk: Arc::clone(c), score: 1.0 - i as f32 / 200.0 })
        .collect();
    criterion.bench_function("rrf_fuse_120x120_and_select", |bencher| {
        bencher.iter(|| {
            let fused = reciprocal_rank_fusion(
                vec![(Retriever::Lexical, lexical.clone()), (Retriever::Vector, vector.clone())],
                60.0,
            );
            assert_eq!(fused.len(), 180);
            let selection =
                select_context(&fused, SelectionLimits { top_k: 8, token_budget: 1500, max_chunks_per_doc: 2 });
            assert_eq!(selection.chosen.len(), 8);
            black_box(selection);
        })
    });
}

fn upsert(doc: u32, ordinal: u32) -> AclMutation {
    AclMutation::Upsert {
        tenant: "bench".into(),
        doc_id: format!("doc-{doc:06}"),
        version: 1,
        ordinal,
        title: format!("Document {doc}"),
        acl: DocAcl { groups: vec![format!("group-{}", doc % 16)], users: vec![] },
    }
}

/// One ingestion batch (500 new documents) prepared against a tenant that already holds 100,000:
/// the next snapshot shares the tenant's entries instead of copying them, so this costs the
/// batch, not the tenant.
fn acl_batch(criterion: &mut Criterion) {
    let store = AclStore::new();
    for batch in 0..200u32 {
        store.apply((batch * 500..(batch + 1) * 500).map(|doc| upsert(doc, doc)).collect()).expect("seeded batch");
    }
    criterion.bench_function("acl_prepare_500_upserts_in_100k", |bencher| {
        bencher.iter(|| {
            let prepared = store.prepare((100_000..100_500).map(|doc| upsert(doc, doc)).collect()).expect("prepares");
            assert_eq!(prepared.changes().len(), 500);
            black_box(prepared);
        })
    });
}

criterion_group!(benches, vector_search, lexical_search, fusion_and_selection, acl_batch);
criterion_main!(benches);
