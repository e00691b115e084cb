//! Lexical helpers shared by the embedded answer providers (extractive generator, lexical
//! support verifier): sentence splitting, content terms (stopwords removed, light suffix
//! stemming, numbers kept exact) and negation detection.
//!
//! Invariants: every function is total on arbitrary Unicode (no byte slicing inside a
//! character, no panics), and sentence spans carry both byte and character offsets that
//! delimit the same substring of the input.

pub(crate) mod instructions;

pub(crate) use crate::domain::sentences::{SentenceSpan, sentences};
use crate::domain::tokens::words;

/// Function words ignored by lexical matching (sorted, for binary search). Negations are here
/// too: they carry no topic, and [`has_negation`] looks at them separately. So is `s`, what the
/// tokenizer leaves of a possessive or a contraction (`Kublai's` is `kublai` and `s`): as a
/// term it made any two texts naming something in the possessive share a word.
#[rustfmt::skip]
const STOPWORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "cannot", "could",
    "did", "do", "does", "doing", "down", "during", "each", "either", "else", "etc", "ever", "few", "for", "from",
    "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how",
    "however", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "many", "may", "me", "might", "more",
    "most", "much", "must", "my", "myself", "neither", "never", "no", "nor", "not", "of", "off", "on", "once", "only",
    "or", "other", "our", "ours", "ourselves", "out", "over", "own", "per", "s", "same", "shall", "she", "should", "so",
    "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they",
    "this", "those", "through", "thus", "to", "too", "under", "until", "up", "upon", "us", "very", "was", "we",
    "were", "what", "when", "where", "whether", "which", "while", "who", "whom", "whose", "why", "will", "with",
    "within", "would", "yes", "you", "your", "yours", "yourself",
];

/// Whether `word` (lowercase) is a stopword.
pub(crate) fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// Light English suffix stemming of a lowercase word: plurals, `-ed`, `-ing`, `-ly` and a final
/// `-e`, so `increase`, `increases`, `increased` and `increasing` share one stem. Words holding a
/// digit are returned unchanged (numbers match exactly); short words are left alone.
pub(crate) fn stem(word: &str) -> String {
    if word.chars().any(|character| character.is_numeric()) || word.chars().count() <= 3 {
        return word.to_owned();
    }
    let long_enough = |stem: &str| stem.chars().count() >= 3;
    let mut stemmed: String = if let Some(base) = word.strip_suffix("ies").filter(|base| long_enough(base)) {
        format!("{base}y")
    } else if let Some(base) = word.strip_suffix("ied").filter(|base| long_enough(base)) {
        format!("{base}y")
    } else if let Some(base) = word.strip_suffix("sses") {
        format!("{base}ss")
    } else if let Some(base) = word.strip_suffix("ing").filter(|base| long_enough(base)) {
        undouble(base)
    } else if let Some(base) = word.strip_suffix("ed").filter(|base| long_enough(base)) {
        undouble(base)
    } else if let Some(base) = word
        .strip_suffix("es")
        .filter(|base| long_enough(base) && ["sh", "ch", "x", "ss", "z"].iter().any(|ending| base.ends_with(ending)))
    {
        base.to_owned()
    } else if let Some(base) = word
        .strip_suffix('s')
        .filter(|base| long_enough(base) && !base.ends_with('s') && !base.ends_with('u') && !base.ends_with('i'))
    {
        base.to_owned()
    } else if let Some(base) = word.strip_suffix("ly").filter(|base| base.chars().count() >= 4) {
        base.to_owned()
    } else {
        word.to_owned()
    };
    if stemmed.chars().count() > 3 && stemmed.ends_with('e') {
        stemmed.pop();
    }
    stemmed
}

/// `submitt` → `submit`, `stopp` → `stop` (a doubled final consonant left by `-ed`/`-ing`), but
/// `call`, `pass`, `buzz` stay (Porter's exceptions l, s, z).
fn undouble(base: &str) -> String {
    let mut characters = base.chars().rev();
    match (characters.next(), characters.next()) {
        (Some(last), Some(before))
            if last == before && last.is_ascii_alphabetic() && !"aeiouylsz".contains(last) && base.len() > 3 =>
        {
            base[..base.len() - last.len_utf8()].to_owned()
        }
        _ => base.to_owned(),
    }
}

/// Content terms of `text` in order of occurrence (duplicates kept): lowercased words minus
/// stopwords, stemmed.
pub(crate) fn content_terms(text: &str) -> Vec<String> {
    words(text).filter(|word| !is_stopword(word)).map(|word| stem(&word)).collect()
}

/// Whether `text` holds a negation (`not`, `no`, `never`, `cannot`, `nor`, `neither`, `none`,
/// `without`, or a contraction ending in `n't`).
pub(crate) fn has_negation(text: &str) -> bool {
    let mut previous_ends_in_n = false;
    for word in words(text) {
        if matches!(word.as_str(), "not" | "no" | "never" | "cannot" | "nor" | "neither" | "none" | "without")
            || (previous_ends_in_n && word == "t")
        {
            return true;
        }
        previous_ends_in_n = word.ends_with('n');
    }
    false
}

/// Direction of change a text states: `Some(true)` for only increase-like words, `Some(false)`
/// for only decrease-like words, `None` for neither or both. Words are stemmed with [`stem`].
pub(crate) fn direction(text: &str) -> Option<bool> {
    const UP: &[&str] = &[
        "activat",
        "elevat",
        "enhanc",
        "gain",
        "greater",
        "higher",
        "improv",
        "increas",
        "larger",
        "promot",
        "rais",
        "rise",
        "stimulat",
        "upregulat",
    ];
    const DOWN: &[&str] = &[
        "attenuat",
        "decreas",
        "diminish",
        "downregulat",
        "fewer",
        "impair",
        "inhibit",
        "less",
        "loss",
        "lower",
        "reduc",
        "smaller",
        "suppress",
        "worsen",
    ];
    let (mut up, mut down) = (false, false);
    for word in words(text) {
        let stemmed = stem(&word);
        up |= UP.iter().any(|prefix| stemmed.starts_with(prefix));
        down |= DOWN.iter().any(|prefix| stemmed.starts_with(prefix));
    }
    if up == down { None } else { Some(up) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        assert!(STOPWORDS.windows(2).all(|pair| pair[0] < pair[1]));
    }

    /// `Kublai's` is the words `kublai` and `s`: the `s` is no term, or a question and a
    /// sentence about two different things of Kublai's would share two terms, not one.
    #[test]
    fn a_possessive_leaves_no_term_of_its_own() {
        let asked = content_terms("Why did Kublai's successors lose control of the Mongol empire?");
        let held = content_terms("Kublai's government faced financial difficulties after 1279.");
        assert_eq!(held, ["kublai", "government", "fac", "financial", "difficulty", "1279"]);
        assert_eq!(asked.iter().filter(|term| held.contains(term)).count(), 1, "{asked:?}");
        assert_eq!(content_terms("It's the company’s policy"), ["company", "policy"]);
    }

    #[test]
    fn stems_inflections_together() {
        for word in ["increases", "increased", "increasing", "increase"] {
            assert_eq!(stem(word), "increas", "{word}");
        }
        assert_eq!(stem("cells"), "cell");
        assert_eq!(stem("studies"), stem("studied"));
        assert_eq!(stem("class"), "class");
        assert_eq!(stem("1990s"), "1990s");
        assert_eq!(stem("submitted"), stem("submit"));
        assert_eq!(stem("stopping"), "stop");
        assert_eq!(stem("called"), "call");
        assert_eq!(stem("passed"), "pass");
    }

    #[test]
    fn splits_sentences_with_char_offsets() {
        let text = "Ünïcode first. e.g. this stays. Second one!\nThird cells.Examples here";
        let spans = sentences(text);
        let parts: Vec<&str> = spans.iter().map(|span| span.slice(text)).collect();
        assert_eq!(parts, ["Ünïcode first. e.g. this stays.", "Second one!", "Third cells.", "Examples here"]);
        for span in &spans {
            let by_chars: String = text.chars().skip(span.char_start).take(span.char_end - span.char_start).collect();
            assert_eq!(by_chars, span.slice(text));
        }
        assert!(sentences("   \n ").is_empty());
    }

    #[test]
    fn detects_negation() {
        assert!(has_negation("It does not increase"));
        assert!(has_negation("It doesn't increase"));
        assert!(!has_negation("It increases notably"));
    }

    #[test]
    fn detects_direction_of_change() {
        assert_eq!(direction("Levels were elevated"), Some(true));
        assert_eq!(direction("Treatment reduced mortality"), Some(false));
        assert_eq!(direction("higher doses lowered risk"), None);
        assert_eq!(direction("no change"), None);
    }

    proptest! {
        #[test]
        fn sentence_spans_agree_on_any_text(text in "\\PC{0,80}") {
            for span in sentences(&text) {
                let by_chars: String = text.chars().skip(span.char_start).take(span.char_end - span.char_start).collect();
                prop_assert_eq!(by_chars.as_str(), span.slice(&text));
                prop_assert!(!span.slice(&text).trim().is_empty());
            }
            let _ = content_terms(&text);
            let _ = has_negation(&text);
        }
    }
}
