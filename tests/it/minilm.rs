//! `MiniLmEmbedder` against sentence-transformers reference vectors
//! (fixtures/embeddings/minilm_reference.json; its `how` field says how they were made).

use std::path::Path;

use serde::Deserialize;
use warrant::embed::{Embedder, MiniLmEmbedder, dot, model};

#[derive(Deserialize)]
struct Reference {
    sentences: Vec<String>,
    vectors: Vec<Vec<f32>>,
}

#[tokio::test]
async fn minilm_matches_sentence_transformers_reference_vectors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model_dir = root.join("models").join("all-MiniLM-L6-v2");
    if !model_dir.join("model.safetensors").exists() {
        eprintln!(
            "skipped minilm reference test: no model in {} (install it with warrant::embed::model::fetch)",
            model_dir.display()
        );
        return;
    }
    model::verify(&model_dir).expect("model files match their pinned checksums");
    let reference_text =
        std::fs::read_to_string(root.join("fixtures/embeddings/minilm_reference.json")).expect("reference file");
    let reference: Reference = serde_json::from_str(&reference_text).expect("reference parses");
    assert_eq!(reference.sentences.len(), reference.vectors.len());

    let embedder = MiniLmEmbedder::load(&model_dir).expect("model loads");
    assert_eq!(embedder.name(), "minilm:all-MiniLM-L6-v2");
    assert_eq!(embedder.dimension(), 384);
    // One batch: sentences of different lengths are padded together.
    let vectors = embedder.embed(&reference.sentences).await.expect("embeds");
    assert_eq!(vectors.len(), reference.sentences.len());
    let mut lowest = f32::INFINITY;
    for ((sentence, expected), actual) in reference.sentences.iter().zip(&reference.vectors).zip(&vectors) {
        assert_eq!(actual.len(), expected.len());
        let cosine = dot(actual, expected) / dot(expected, expected).sqrt();
        assert!(cosine >= 0.9999, "cosine {cosine} for {sentence:?}");
        lowest = lowest.min(cosine);
    }
    eprintln!("lowest cosine to the reference: {lowest:.7}");
}
