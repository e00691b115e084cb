//! Settings of the answer pipeline (`[answer]`), the embedder (`[embedder]`), the generator
//! (`[generator]`), the support verifier (`[verifier]`) and its model judge (`[verifier.judge]`).

use super::*;

/// Answer pipeline settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerSettings {
    /// Default request deadline, ms.
    pub deadline_ms: u64,
    /// Cap on a requested deadline, ms.
    pub max_deadline_ms: u64,
    /// Budget of the retrieval stage, ms.
    pub retrieval_budget_ms: u64,
    /// Minimum time left (ms) to attempt one repair generation.
    pub min_repair_ms: u64,
    /// Token budget of the whole prompt (instructions + question + sources).
    pub prompt_token_budget: usize,
    /// Smallest useful source (tokens) when trimming to the prompt budget.
    pub min_source_tokens: usize,
    /// `fail_answer`: any bad claim fails the attempt; `drop_claim`: bad claims are dropped and
    /// the answer stands when at least one valid claim remains.
    pub claim_policy: ClaimPolicy,
    /// Under `drop_claim`: when a claim validation withheld is material to the question (it
    /// holds as many of the question's content terms as every claim that stands, and one none of
    /// them holds; see `crate::answer::pipeline`), the attempt fails as under `fail_answer` (one
    /// repair, then the abstention `material_claim_unsupported`) instead of answering with what
    /// stands. `false`: answer with what stands, marked `partial`.
    #[serde(default = "default_true")]
    pub abstain_on_material_withheld: bool,
    /// Candidates found only by vector search count as evidence only at or above this cosine.
    pub min_vector_score: f32,
}

/// What happens to an answer with one invalid claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimPolicy {
    /// The attempt fails (repair or abstain).
    FailAnswer,
    /// The claim is dropped; the answer stands if valid claims remain.
    DropClaim,
}

/// Embedding provider settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedderSettings {
    /// `hashed`, `minilm` or `openai`.
    pub kind: EmbedderKind,
    /// Vector dimension (hashed: any; others: checked against the model).
    pub dim: usize,
    /// Directory of a sentence-transformers BERT model (minilm).
    pub model_dir: String,
    /// OpenAI-compatible base URL (openai).
    #[serde(default)]
    pub base_url: String,
    /// Model name (openai).
    #[serde(default)]
    pub model: String,
    /// Name of the environment variable holding the API key (openai).
    #[serde(default)]
    pub api_key_env: String,
    /// Total timeout per call, ms.
    pub timeout_ms: u64,
    /// Texts per embedding call when ingesting.
    pub batch_size: usize,
    /// Query vectors kept in the LRU cache.
    pub query_cache: usize,
}

/// Generation provider settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorSettings {
    /// `extractive` or `openai`.
    pub kind: GeneratorKind,
    /// OpenAI-compatible base URL, e.g. `http://127.0.0.1:8000/v1`.
    #[serde(default)]
    pub base_url: String,
    /// Model name.
    #[serde(default)]
    pub model: String,
    /// Name of the environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: String,
    /// Connect timeout, ms.
    pub connect_timeout_ms: u64,
    /// Largest number of claims the extractive generator emits.
    pub max_claims: usize,
    /// Most tokens an OpenAI-compatible generator may produce per call (`max_tokens`).
    #[serde(default = "default_generator_max_tokens")]
    pub max_tokens: u32,
    /// Send an OpenAI-compatible generator a schema whose quotes are chosen, not written: at
    /// most this many sentences of each source (those sharing the most content terms with the
    /// question) as an `enum`, so a model decoding under it cannot quote what its source does not
    /// say. 0: quotes written freely (for a provider that rejects such schemas).
    #[serde(default = "default_quote_choices")]
    pub quote_choices: usize,
    /// What the text of a claim is: `written` by the model in the words of its quotes, or
    /// `quoted`: the model states a short answer and chooses the sentences that say it, and the
    /// claim's text is those sentences verbatim, given only when the verifier finds the answer in
    /// them (for small models whose paraphrases the verifier rejects).
    #[serde(default)]
    pub claim_text: ClaimText,
    /// With `quoted` claims: when the sentences the model picked do not state its answer, the
    /// server looks for one that does among the sentences of the final context the caller may
    /// read, and the claim cites that one instead, after the same verification (for small models
    /// that state the answer but pick the wrong sentence). `false`: such a claim is unsupported.
    #[serde(default = "default_true")]
    pub anchor_answers: bool,
    /// With `quoted` claims that cite only sources below the best-ranked one (`S1`): the fewest
    /// distinct content terms of the question their sentences must hold together (all of the
    /// question's when it has fewer), so a sentence that states the model's answer but is not
    /// about what was asked is not cited (`off_question`). 0: no such check.
    #[serde(default = "default_min_question_terms")]
    pub min_question_terms: usize,
}

/// What the text of a claim sent by an OpenAI-compatible generator is (`generator.claim_text`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimText {
    /// The model writes each claim in the words of its quotes (the schema asks for `text`).
    #[default]
    Written,
    /// The model states a short `answer` and quotes; a claim's text is its supporting quotes
    /// joined (the schema has no `text`).
    Quoted,
}

fn default_generator_max_tokens() -> u32 {
    384
}

fn default_quote_choices() -> usize {
    2
}

fn default_min_question_terms() -> usize {
    MIN_QUESTION_TERMS
}

/// Default of `generator.min_question_terms` (BENCHMARKS.md: tuned on the SQuAD slice at
/// offset 300, measured on the one at offset 400).
pub const MIN_QUESTION_TERMS: usize = 2;

/// Support verifier thresholds.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifierSettings {
    /// Minimum fraction of the claim's content words found in the cited text.
    pub min_coverage: f64,
    /// Minimum embedding cosine between claim and cited text (used with an embedder).
    pub min_similarity: f64,
    /// Sentence vectors of cited chunks kept in the verifier's LRU cache across requests
    /// (keyed by chunk id, so never shared across tenants); 0 turns the cache off. Each entry
    /// holds one vector (`embedder.dim` × 4 bytes).
    pub sentence_cache: usize,
    /// Embed every chunk's sentences at ingestion and keep their vectors with the chunk (in
    /// memory, the store and snapshots, `i8`: `embedder.dim` + 20 bytes a sentence), so an
    /// answer embeds only its claims. Only with a semantic embedder (the verifier uses none
    /// with the hashed one). Costs about one more embedding pass over the text at ingestion.
    #[serde(default = "default_true")]
    pub sentence_vectors: bool,
    /// `lexical` (the checks above alone) or `judge` (those first; a cited text they do not
    /// find supporting, but whose coverage reaches `judge.min_coverage`, is put to a language
    /// model).
    #[serde(default = "default_verifier_kind")]
    pub kind: VerifierKind,
    /// The model a `judge` verifier asks.
    #[serde(default)]
    pub judge: JudgeSettings,
}

/// The language model of `verifier.kind = "judge"`: an OpenAI-compatible chat completions API.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSettings {
    /// OpenAI-compatible base URL, e.g. `http://127.0.0.1:18080/v1`.
    #[serde(default)]
    pub base_url: String,
    /// Model name.
    #[serde(default)]
    pub model: String,
    /// Name of the environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: String,
    /// Most time one judgement may take, ms; a judgement not back by then is a rejection.
    #[serde(default = "default_judge_timeout_ms")]
    pub timeout_ms: u64,
    /// Least fraction of the claim's content words a cited text must hold before the model is
    /// asked about it (a floor that no wording of the source can talk the model past).
    #[serde(default = "default_judge_min_coverage")]
    pub min_coverage: f64,
    /// Least probability of "yes" the model must give a text for it to support the claim,
    /// read from the verdict token's log-probabilities (`logprobs` on the chat completions
    /// request), in 0.5..1. At 0.5 (the default) the model's verdict alone decides and no
    /// log-probabilities are asked for; above it, an answer without them is a rejection.
    #[serde(default = "default_judge_min_yes_probability")]
    pub min_yes_probability: f64,
}

impl Default for JudgeSettings {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            model: String::new(),
            api_key_env: String::new(),
            timeout_ms: default_judge_timeout_ms(),
            min_coverage: default_judge_min_coverage(),
            min_yes_probability: default_judge_min_yes_probability(),
        }
    }
}

fn default_verifier_kind() -> VerifierKind {
    VerifierKind::Lexical
}

fn default_judge_timeout_ms() -> u64 {
    10_000
}

fn default_judge_min_coverage() -> f64 {
    0.25
}

fn default_judge_min_yes_probability() -> f64 {
    0.5
}
