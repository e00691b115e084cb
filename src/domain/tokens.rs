//! The one token-counting rule used everywhere (chunking, context budgets, prompt budgets).
//!
//! A token is either a maximal run of alphanumeric characters or a single other non-whitespace
//! character. It is deterministic, model-independent, and over-counts relative to BPE tokenizers
//! for ordinary English prose (about 1.1-1.3 of our tokens per BPE token), so a budget met under
//! this rule is met by real model tokenizers with a margin.

/// Counts tokens in `text` under the rule above.
pub fn count_tokens(text: &str) -> usize {
    let mut count = 0;
    let mut in_word = false;
    for character in text.chars() {
        if character.is_alphanumeric() {
            if !in_word {
                count += 1;
                in_word = true;
            }
        } else {
            in_word = false;
            if !character.is_whitespace() {
                count += 1;
            }
        }
    }
    count
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
}
