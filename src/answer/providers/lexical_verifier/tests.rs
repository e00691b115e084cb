//! Unit tests of `answer/lexical_verifier`.

use futures::executor::block_on;
use proptest::prelude::*;

use super::*;
use crate::answer::providers::extractive::ExtractiveGenerator;
use crate::embed::{EmbedError, EmbedResult, HashedEmbedder};

/// How [`FakeCountingEmbedder`] answers.
#[derive(Clone, Copy, PartialEq)]
enum FakeMode {
    /// The hashed embedder's vectors.
    Answer,
    /// A provider error.
    Fail,
    /// One vector too few.
    DropLast,
}

/// FAKE embedder: the hashed embedder, recording the number of texts of every call.
struct FakeCountingEmbedder {
    inner: HashedEmbedder,
    mode: FakeMode,
    calls: std::sync::Mutex<Vec<usize>>,
}

impl FakeCountingEmbedder {
    fn new(mode: FakeMode) -> Arc<Self> {
        Arc::new(Self { inner: HashedEmbedder::new(64), mode, calls: std::sync::Mutex::new(Vec::new()) })
    }

    /// Texts per call since the last `take`.
    fn take(&self) -> Vec<usize> {
        std::mem::take(&mut self.calls.lock().expect("calls"))
    }
}

#[async_trait]
impl Embedder for FakeCountingEmbedder {
    fn name(&self) -> &str {
        "fake-counting"
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        self.calls.lock().expect("calls").push(texts.len());
        let mut vectors = self.inner.embed(texts).await?;
        match self.mode {
            FakeMode::Answer => Ok(vectors),
            FakeMode::Fail => Err(EmbedError::Provider("fake failure".into())),
            FakeMode::DropLast => {
                vectors.pop();
                Ok(vectors)
            }
        }
    }
}

#[test]
fn stored_sentence_vectors_leave_only_the_claim_to_embed_and_nothing_for_a_verbatim_claim() {
    let fake = FakeCountingEmbedder::new(FakeMode::Answer);
    let verifier = counted(&fake, 0);
    let text = "Hotel stays are reimbursed up to 180 euros per night. Taxis need a receipt.";
    let split: Vec<String> = sentences(text).iter().map(|span| span.slice(text).to_owned()).collect();
    let vectors = block_on(fake.inner.embed(&split)).expect("embeds");
    let stored = SentenceVectors::quantize(split.iter().map(String::as_str).zip(vectors.iter().map(Vec::as_slice)));
    let chunk = ChunkId::derive("tenant", "doc", 1, 0, text.len(), text);
    let plain = [CitedText { chunk, text, sentence_vectors: None }];
    let kept = [CitedText { chunk, text, sentence_vectors: Some(&stored) }];

    let claim = "Hotel stays are reimbursed up to 180 euros.";
    let embedded = block_on(verifier.verify(claim, &plain));
    assert_eq!(fake.take(), vec![3], "claim and both sentences");
    let from_store = block_on(verifier.verify(claim, &kept));
    assert_eq!(fake.take(), vec![1], "the claim alone");
    assert!(embedded.supported && from_store.supported);
    assert!((embedded.score - from_store.score).abs() < 0.01, "{} vs {}", embedded.score, from_store.score);
    assert_eq!(embedded.sources[0].quote, from_store.sources[0].quote);

    let verbatim = block_on(verifier.verify("Taxis need a receipt.", &kept));
    assert!(fake.take().is_empty(), "a claim that is a cited sentence needs no embedding");
    assert!(verbatim.supported);

    // Vectors of other sentences never stand in: lookups are by the exact text's digest.
    let other = SentenceVectors::quantize([("Another sentence.", vectors[0].as_slice())]);
    block_on(verifier.verify(claim, &[CitedText { chunk, text, sentence_vectors: Some(&other) }]));
    assert_eq!(fake.take(), vec![3]);
}

/// A verifier over `embedder` with a sentence cache of `capacity`.
fn counted(embedder: &Arc<FakeCountingEmbedder>, capacity: usize) -> LexicalSupportVerifier {
    let embedder: Arc<dyn Embedder> = Arc::clone(embedder) as Arc<dyn Embedder>;
    LexicalSupportVerifier::new(0.6, 0.2, Some(embedder)).with_sentence_cache(capacity)
}

/// `texts` as cited chunks of one tenant's document, one chunk each.
fn cited<'a>(texts: &[&'a str]) -> Vec<CitedText<'a>> {
    texts
        .iter()
        .enumerate()
        .map(|(index, text)| CitedText {
            chunk: ChunkId::derive("tenant", "doc", 1, index, index, text),
            text,
            sentence_vectors: None,
        })
        .collect()
}

const POLICY: &str = "The office closes in December. Engineers receive 25 days of paid vacation per year. \
                      Requests go to the team lead.";

#[test]
fn supports_a_verbatim_sentence_and_quotes_it_by_chars() {
    let verifier = LexicalSupportVerifier::new(0.6, 0.35, None);
    let verdict = block_on(verifier.verify("Engineers receive 25 days of paid vacation per year.", &cited(&[POLICY])));
    assert!(verdict.supported);
    let (start, end) = verdict.sources[0].quote;
    let quote: String = POLICY.chars().skip(start).take(end - start).collect();
    assert_eq!(quote, "Engineers receive 25 days of paid vacation per year.");
}

#[test]
fn rejects_unrelated_and_wrong_number_claims() {
    let verifier = LexicalSupportVerifier::new(0.8, 0.35, None);
    assert!(!block_on(verifier.verify("Revenue grew in Europe last quarter.", &cited(&[POLICY]))).supported);
    assert!(!block_on(verifier.verify("Engineers receive 30 days of paid vacation.", &cited(&[POLICY]))).supported);
    assert!(!block_on(verifier.verify("", &cited(&[POLICY]))).supported);
    assert!(!block_on(verifier.verify("Engineers receive vacation.", &cited(&[]))).supported);
}

#[test]
fn polarity_mismatch_rejects_when_checked() {
    let claim = "Engineers do not receive paid vacation.";
    let strict = LexicalSupportVerifier::new(0.6, 0.35, None);
    assert!(!block_on(strict.verify(claim, &cited(&[POLICY]))).supported);
    let lenient = strict.clone().with_polarity_check(false);
    assert!(block_on(lenient.verify(claim, &cited(&[POLICY]))).supported);
    let reversed = "Paid vacation for engineers decreased to 25 days per year.";
    let cited_text = "Paid vacation for engineers increased to 25 days per year.";
    assert!(!block_on(strict.verify(reversed, &cited(&[cited_text]))).supported);
    assert!(block_on(lenient.verify(reversed, &cited(&[cited_text]))).supported);
}

/// A verbatim quote was rejected when an earlier sentence with the same words had other polarity.
#[test]
fn verbatim_quote_passes_despite_earlier_negated_near_copy() {
    let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
    let text = "Aspirin did not lower fever in adults? Aspirin lowered fever in adults.";
    assert!(block_on(verifier.verify("Aspirin lowered fever in adults.", &cited(&[text]))).supported);
}

#[test]
fn extractive_claims_pass_the_default_thresholds() {
    let generator = ExtractiveGenerator::new(3);
    let sources = [("S1", POLICY), ("S2", "Vacation requests are approved within two days by the team lead.")];
    let answer = generator.answer("Who approves vacation requests and how fast?", &sources);
    assert!(answer.answerable);
    let verifier = LexicalSupportVerifier::new(0.9, 0.2, Some(Arc::new(HashedEmbedder::new(384))));
    for claim in &answer.claims {
        let texts: Vec<&str> = claim
            .citations
            .iter()
            .map(|citation| sources.iter().find(|(known, _)| *known == citation.label).expect("known label").1)
            .collect();
        assert!(block_on(verifier.verify(&claim.text, &cited(&texts))).supported, "{}", claim.text);
    }
}

#[test]
fn coverage_combines_several_cited_texts() {
    let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
    let claim = "The office closes in December and engineers receive paid vacation.";
    let verdict = block_on(
        verifier.verify(claim, &cited(&["The office closes in December.", "Engineers receive paid vacation."])),
    );
    assert!(verdict.supported);
    assert_eq!(verdict.sources.len(), 2);
    assert!(verdict.sources.iter().all(|source| source.score < 0.9 && source.supports));
}

/// An unrelated extra citation rode along: the claim was judged against all cited texts together.
#[test]
fn an_unrelated_co_citation_supports_nothing_and_is_marked() {
    let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
    let claim = "Engineers receive 25 days of paid vacation per year.";
    let verdict = block_on(verifier.verify(claim, &cited(&[POLICY, "Quarterly revenue grew in Europe last year."])));
    assert!(verdict.supported);
    assert_eq!(verdict.sources.iter().map(|source| source.supports).collect::<Vec<_>>(), [true, false]);
}

/// One shared word made a co-citation count, so it could supply the term the real source lacked.
#[test]
fn a_co_citation_sharing_one_word_cannot_complete_the_support() {
    let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
    let claim = "Engineers receive 25 days of paid vacation in Lisbon.";
    let verdict = block_on(verifier.verify(claim, &cited(&[POLICY, "The Lisbon office opened."])));
    assert!(!verdict.supported);
    assert_eq!(verdict.sources.iter().map(|source| source.supports).collect::<Vec<_>>(), [true, false]);
    let alone = block_on(verifier.verify(claim, &cited(&[POLICY])));
    assert!(!alone.supported && !alone.sources[0].supports);
}

#[test]
fn a_lone_citation_supports_exactly_when_the_claim_is_supported() {
    let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
    for claim in ["Engineers receive 25 days of paid vacation per year.", "Revenue grew in Europe."] {
        let verdict = block_on(verifier.verify(claim, &cited(&[POLICY])));
        assert_eq!(verdict.sources[0].supports, verdict.supported, "{claim}");
    }
}

#[test]
fn embedder_similarity_gates_support() {
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(256));
    let claim = "Engineers receive 25 days of paid vacation per year.";
    let loose = LexicalSupportVerifier::new(0.6, 0.5, Some(embedder.clone()));
    let verdict = block_on(loose.verify(claim, &cited(&[POLICY])));
    assert!(verdict.supported);
    let signals = block_on(loose.signals(claim, &cited(&[POLICY])));
    assert!(signals.similarity.expect("embedder answered") > 0.99);
    let impossible = LexicalSupportVerifier::new(0.6, 1.01, Some(embedder));
    assert!(!block_on(impossible.verify(claim, &cited(&[POLICY]))).supported);
}

/// A short answer stated word for word in its quote is judged on its words, not on a cosine
/// with the whole sentence (which a few words never reach), and nothing is embedded for it; an
/// answer the quote does not say, or with another number, is still rejected.
#[test]
fn an_answer_is_found_in_its_quote_by_its_words_and_numbers() {
    let embedder = FakeCountingEmbedder::new(FakeMode::Answer);
    let embedded: Arc<dyn Embedder> = Arc::clone(&embedder) as Arc<dyn Embedder>;
    let verifier = LexicalSupportVerifier::new(0.9, 0.99, Some(embedded));
    let quote = cited(&["Engineers receive 25 days of paid vacation per year."]);
    assert!(!block_on(verifier.verify("25 days of paid vacation", &quote)).supported, "as a claim: the cosine");
    embedder.take();
    for answer in ["25 days of paid vacation", "25 days", "engineers"] {
        assert!(block_on(verifier.verify_answer(answer, &quote)).supported, "{answer}");
    }
    assert!(embedder.take().is_empty(), "nothing embedded for an answer");
    for answer in ["30 days", "25 days of sick leave", "the team lead", "", "the"] {
        assert!(!block_on(verifier.verify_answer(answer, &quote)).supported, "{answer:?}");
    }
}

/// Three claims citing one chunk (3 sentences) used to embed its sentences three times.
#[test]
fn claims_citing_one_chunk_embed_each_sentence_once() {
    let embedder = FakeCountingEmbedder::new(FakeMode::Answer);
    let verifier = counted(&embedder, 64);
    let policy = cited(&[POLICY]);
    for claim in ["Engineers get 25 days of vacation.", "The office is closed in December.", "Team leads get requests."]
    {
        block_on(verifier.verify(claim, &policy));
    }
    assert_eq!(embedder.take(), [1 + 3, 1, 1], "the claim and each uncached sentence, once in total");
    assert_eq!(verifier.cached_sentences(), 3);
}

#[test]
fn a_sentence_shared_by_two_cited_texts_is_embedded_once_per_call() {
    let first = "The office closes in December. Engineers receive paid vacation.";
    let second = "The office closes in December. Requests go to the team lead.";
    for capacity in [0, 64] {
        let embedder = FakeCountingEmbedder::new(FakeMode::Answer);
        let verifier = counted(&embedder, capacity);
        block_on(verifier.verify("The office closes for engineers.", &cited(&[first, second])));
        assert_eq!(embedder.take(), [1 + 3], "capacity {capacity}");
    }
}

/// Identical text in two tenants' chunks: a vector is never served under another chunk id.
#[test]
fn the_same_sentence_under_another_chunk_id_is_embedded_again() {
    let embedder = FakeCountingEmbedder::new(FakeMode::Answer);
    let verifier = counted(&embedder, 64);
    let of_tenant = |tenant: &str| {
        [CitedText { chunk: ChunkId::derive(tenant, "policy", 1, 0, 80, POLICY), text: POLICY, sentence_vectors: None }]
    };
    let claim = "Engineers get 25 days of vacation.";
    block_on(verifier.verify(claim, &of_tenant("acme")));
    block_on(verifier.verify(claim, &of_tenant("globex")));
    block_on(verifier.verify(claim, &of_tenant("acme")));
    assert_eq!(embedder.take(), [1 + 3, 1 + 3, 1]);
    assert_eq!(verifier.cached_sentences(), 6);
}

#[test]
fn capacity_zero_disables_the_cache() {
    let embedder = FakeCountingEmbedder::new(FakeMode::Answer);
    let verifier = counted(&embedder, 0);
    for _ in 0..3 {
        block_on(verifier.verify("Engineers get 25 days of vacation.", &cited(&[POLICY])));
    }
    assert_eq!(embedder.take(), [1 + 3, 1 + 3, 1 + 3]);
    assert_eq!(verifier.cached_sentences(), 0);
}

/// A failed or short embedder answer falls back to coverage alone and caches nothing.
#[test]
fn embedder_faults_fall_back_to_coverage_and_cache_nothing() {
    let lexical = LexicalSupportVerifier::new(0.6, 0.2, None);
    let claim = "Engineers receive 25 days of paid vacation.";
    let expected = block_on(lexical.verify(claim, &cited(&[POLICY])));
    assert!(expected.supported);
    for mode in [FakeMode::Fail, FakeMode::DropLast] {
        let embedder = FakeCountingEmbedder::new(mode);
        let verifier = counted(&embedder, 64);
        let verdict = block_on(verifier.verify(claim, &cited(&[POLICY])));
        assert_eq!(verdict, expected);
        assert_eq!(block_on(verifier.signals(claim, &cited(&[POLICY]))).similarity, None);
        assert_eq!(verifier.cached_sentences(), 0);
        assert_eq!(embedder.take(), [1 + 3, 1 + 3], "nothing was served from the cache");
    }
}

/// Sentences from a small vocabulary, so texts share sentences and claims hit the cache.
fn small_text() -> impl Strategy<Value = String> {
    let sentence = "(Office|Engineers|Vacation|Requests) (not )?(closes|receive|increased|decreased|go)( (december|25|paid|lead|days|per|year)){0,4}[.!?]";
    proptest::collection::vec(sentence, 0..4).prop_map(|sentences| sentences.join(" "))
}

proptest! {
    /// The cache changes no verdict or score: cached vs uncached over the same call sequence,
    /// with chunk ids reused for different texts and texts reused under different ids.
    #[test]
    fn the_cache_changes_no_verdict(
        capacity in 1usize..8,
        calls in proptest::collection::vec(
            (small_text(), proptest::collection::vec((0usize..3, small_text()), 0..4)),
            1..6,
        ),
    ) {
        let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(32));
        let plain = LexicalSupportVerifier::new(0.5, 0.2, Some(Arc::clone(&embedder)));
        let cached = plain.clone().with_sentence_cache(capacity);
        for (claim, sources) in &calls {
            let cited: Vec<CitedText<'_>> = sources
                .iter()
                .map(|(chunk, text)| CitedText { chunk: ChunkId::from_bytes([*chunk as u8; 16]), text, sentence_vectors: None })
                .collect();
            prop_assert_eq!(block_on(cached.verify(claim, &cited)), block_on(plain.verify(claim, &cited)));
            prop_assert_eq!(block_on(cached.signals(claim, &cited)), block_on(plain.signals(claim, &cited)));
        }
        prop_assert!(cached.cached_sentences() <= capacity);
    }

    #[test]
    fn never_panics_and_quotes_stay_inside(
        claim in "(\\PC|\\s|[.!?]){0,60}",
        texts in proptest::collection::vec("(\\PC|\\s|[.!?]){0,120}", 0..4),
    ) {
        let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(32));
        let verifier = LexicalSupportVerifier::new(0.5, 0.2, Some(embedder));
        let borrowed: Vec<&str> = texts.iter().map(String::as_str).collect();
        let verdict = block_on(verifier.verify(&claim, &cited(&borrowed)));
        prop_assert_eq!(verdict.sources.len(), texts.len());
        prop_assert!((0.0..=1.0).contains(&verdict.score));
        for (source, text) in verdict.sources.iter().zip(&texts) {
            prop_assert!(source.quote.0 <= source.quote.1);
            prop_assert!(source.quote.1 <= text.chars().count());
        }
    }
}

#[test]
fn each_texts_own_signals_are_those_it_has_alone_and_the_verdict_is_verifys() {
    let verifier = LexicalSupportVerifier::new(0.9, 0.2, None);
    let claim = "Aspirin lowers the risk of heart attacks in adults by 40 percent.";
    let texts = cited(&[
        "In adults, aspirin cut the risk of a heart attack.",
        "The weather was mild. Aspirin lowered heart attack risk by 40 percent in adults.",
    ]);
    let (verdict, each) = block_on(verifier.verify_each(claim, &texts));
    assert_eq!(verdict, block_on(verifier.verify(claim, &texts)));
    assert_eq!(each.len(), 2);
    for (index, signals) in each.iter().enumerate() {
        let alone = block_on(verifier.signals(claim, &texts[index..=index]));
        assert_eq!(signals.coverage, alone.coverage, "text {index}");
        assert_eq!(signals.missing_number, alone.missing_number, "text {index}");
        assert_eq!(signals.sources[index].quote, alone.sources[0].quote, "text {index}");
    }
    // The first text lacks the claim's number, the second has it.
    assert!(each[0].missing_number && !each[1].missing_number);
}
