//! Reviewed items as answer fixtures (`warrant review export-fixtures`), so that a human verdict
//! becomes a regression test: the file is one case of the answer fixture runner
//! (`tests/it/answer_fixtures.rs`, the format of `fixtures/answer/*.json`).
//!
//! A fixture replays the item:
//! - its documents are the item's sources, one document per source (`<doc_id>#<label>`, the
//!   stored chunk text and title) in a tenant of their own, [`TENANT`], readable by the fixture's
//!   principal only, so retrieval sees exactly the item's context and nothing else;
//! - its generator is scripted with the generator's recorded raw output of each attempt (an
//!   attempt without one, a generator failure, replays as a timeout); every label the output
//!   cites (a JSON string `"S3"`) becomes `"@{snippet}"`, a run of words of that source found in
//!   no other, which the fixture generator resolves to whatever label the source has in the
//!   replay;
//! - `claim_policy` and `claim_text` are the configuration's (what the server ran with);
//! - the expected outcome comes from the verdicts (each claim's and the abstention's first
//!   label, as `warrant eval reviews` counts them): a claim of the last attempt judged
//!   `supported` must be returned, a claim judged `unsupported` or `wrong_citation` must not be
//!   (`partially_supported` asks nothing); an abstention judged `correct_abstention` must
//!   abstain with its reason, one judged `should_have_answered` must answer; with no such
//!   verdict, a supported claim means answered, every claim of the last attempt judged out means
//!   abstained, and otherwise the server's recorded outcome stands.
//!
//! Items whose text was purged (a source's document was deleted since) or that have no verdict
//! are skipped, counted by reason. The files hold the item's question, sources and outputs: the
//! tenant's text, to be kept like the data directory. So the directories the export creates are
//! mode 0700 and its files 0600, each written under a temporary name (`O_EXCL | O_NOFOLLOW`,
//! never through a link) and renamed over its own.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::item::{AbstentionLabel, ClaimLabel, StoredItem};
use crate::config::{ClaimPolicy, Settings};

/// The tenant of an exported fixture's documents and principal.
pub const TENANT: &str = "review-replay";
/// The user of an exported fixture's principal (the only reader of its documents).
pub const USER: &str = "replayer";

/// Words in a label's placeholder snippet, at most.
const SNIPPET_WORDS: usize = 8;

/// Why an item was not exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skipped {
    /// No verdict yet.
    Unreviewed,
    /// A source's text or the generated text was purged (its document was deleted).
    Purged,
}

impl Skipped {
    /// Name in the summary.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Unreviewed => "unreviewed",
            Self::Purged => "text_purged",
        }
    }
}

/// What [`write_fixtures`] wrote and skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Exported {
    /// The files written, in item order.
    pub written: Vec<std::path::PathBuf>,
    /// Items skipped, by reason.
    pub skipped: BTreeMap<&'static str, usize>,
}

/// Writes the fixture of each of `items` to `directory/review-<review id>.json` (created if
/// missing, with any missing parent, mode 0700; a file of the same item is replaced), skipping
/// what [`fixture`] skips. Each file is written whole under a temporary name and renamed over
/// its own (see [`replace_privately`]).
pub fn write_fixtures(
    items: &[StoredItem],
    settings: &Settings,
    directory: &std::path::Path,
) -> std::io::Result<Exported> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(directory)?;
    let mut exported = Exported::default();
    for stored in items {
        match fixture(stored, settings) {
            Ok(fixture) => {
                let name = format!("review-{}.json", stored.item.review_id);
                let text = serde_json::to_string_pretty(&fixture).map_err(std::io::Error::other)?;
                exported.written.push(replace_privately(directory, &name, (text + "\n").as_bytes())?);
            }
            Err(skipped) => *exported.skipped.entry(skipped.as_str()).or_insert(0) += 1,
        }
    }
    Ok(exported)
}

/// Replaces `directory/name` with `bytes`, readable by the owner alone (0600): written and
/// fsynced under a temporary name of its own (`O_EXCL | O_NOFOLLOW`, so never through a link
/// planted there), then renamed over `name` (a link at `name` is replaced, its target
/// untouched). The temporary file is removed when a step fails. Returns the path written.
fn replace_privately(directory: &std::path::Path, name: &str, bytes: &[u8]) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = directory.join(name);
    let temporary = directory.join(format!(".{name}.{}-{:016x}.tmp", std::process::id(), rand::random::<u64>()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temporary)
        .and_then(|mut file| {
            let written = file.write_all(bytes).and_then(|()| file.sync_all());
            written.and_then(|()| std::fs::rename(&temporary, &path))
        });
    match written {
        Ok(()) => Ok(path),
        Err(error) => {
            // Nothing of ours to remove when the open itself failed (it may be another's file).
            if error.kind() != std::io::ErrorKind::AlreadyExists {
                let _ = std::fs::remove_file(&temporary);
            }
            Err(error)
        }
    }
}

/// The first label each reviewer-judged unit got: claims by index, and the abstention.
struct FirstLabels {
    claims: BTreeMap<usize, ClaimLabel>,
    abstention: Option<AbstentionLabel>,
}

impl FirstLabels {
    fn of(stored: &StoredItem) -> Self {
        let mut claims = BTreeMap::new();
        let mut abstention = None;
        for verdict in &stored.verdicts {
            for judged in &verdict.claims {
                claims.entry(judged.index as usize).or_insert(judged.label);
            }
            if let (None, Some(judged)) = (abstention, &verdict.abstention) {
                abstention = Some(judged.label);
            }
        }
        Self { claims, abstention }
    }
}

/// The answer fixture of `stored` (see the module's documentation), run with `settings`'
/// claim policy and claim text.
pub fn fixture(stored: &StoredItem, settings: &Settings) -> Result<Value, Skipped> {
    if stored.verdicts.is_empty() {
        return Err(Skipped::Unreviewed);
    }
    let item = &stored.item;
    let generated = stored.generated.as_ref().ok_or(Skipped::Purged)?;
    let mut texts: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    for source in &item.sources {
        let stored_texts = stored.sources.get(&source.doc_id).ok_or(Skipped::Purged)?;
        let text = stored_texts.iter().find(|text| text.label == source.label).ok_or(Skipped::Purged)?;
        texts.insert(source.label.as_str(), (text.title.as_str(), text.text.as_str()));
    }
    let documents: Vec<Value> = item
        .sources
        .iter()
        .map(|source| {
            let (title, text) = texts[source.label.as_str()];
            json!({
                "tenant": TENANT,
                "doc_id": format!("{}#{}", source.doc_id, source.label),
                "title": title,
                "text": text,
                "acl": {"groups": [], "users": [USER]},
            })
        })
        .collect();
    let placeholders: Vec<(String, String)> = item
        .sources
        .iter()
        .filter_map(|source| {
            let others: Vec<&str> =
                texts.iter().filter(|(label, _)| **label != source.label).map(|(_, (_, text))| *text).collect();
            let snippet = snippet(texts[source.label.as_str()].1, &others)?;
            Some((format!("\"{}\"", source.label), format!("\"@{{{snippet}}}\"")))
        })
        .collect();
    let outputs: BTreeMap<u32, &str> = generated.outputs.iter().map(|(number, raw)| (*number, raw.as_str())).collect();
    let generator: Vec<Value> = item
        .attempts
        .iter()
        .map(|attempt| match outputs.get(&attempt.number) {
            Some(raw) => {
                let replayed = placeholders
                    .iter()
                    .fold((*raw).to_owned(), |text, (label, placeholder)| text.replace(label.as_str(), placeholder));
                json!({"output": replayed})
            }
            None => json!({"error": "timeout"}),
        })
        .collect();
    let mut fixture = json!({
        "name": format!("review-{}", item.review_id),
        "about": about(stored),
        "settings": {
            "claim_policy": match settings.answer.claim_policy {
                ClaimPolicy::DropClaim => "drop_claim",
                ClaimPolicy::FailAnswer => "fail_answer",
            },
            "claim_text": settings.generator.claim_text,
        },
        "documents": documents,
        "principal": {"tenant": TENANT, "user": USER, "groups": []},
        "question": item.question,
        "generator": generator,
        "expect": expectation(stored),
    });
    if item.attempts.is_empty() {
        // No generator call (no evidence): the script still needs a step, never played.
        fixture["generator"] = json!([{"error": "timeout"}]);
    }
    Ok(fixture)
}

/// The expected outcome of `stored` from its verdicts (see the module's documentation).
fn expectation(stored: &StoredItem) -> Value {
    let item = &stored.item;
    let labels = FirstLabels::of(stored);
    let texts = stored.generated.as_ref().map(|generated| generated.claims.as_slice()).unwrap_or_default();
    let last_attempt = item.claims.iter().map(|claim| claim.attempt).max();
    let text_of = |index: usize| texts.get(index).and_then(|claim| claim.text.clone());
    let mut include = BTreeSet::new();
    let mut exclude = BTreeSet::new();
    for (&index, label) in &labels.claims {
        let (Some(claim), Some(text)) = (item.claims.get(index), text_of(index)) else { continue };
        match label {
            ClaimLabel::Supported if Some(claim.attempt) == last_attempt => {
                include.insert(text);
            }
            ClaimLabel::Unsupported | ClaimLabel::WrongCitation => {
                exclude.insert(text);
            }
            _ => {}
        }
    }
    let conflicting: Vec<String> = include.intersection(&exclude).cloned().collect();
    for text in conflicting {
        include.remove(&text);
        exclude.remove(&text);
    }
    let last_claims: Vec<usize> =
        (0..item.claims.len()).filter(|&index| Some(item.claims[index].attempt) == last_attempt).collect();
    let all_judged_out = !last_claims.is_empty()
        && last_claims
            .iter()
            .all(|index| matches!(labels.claims.get(index), Some(ClaimLabel::Unsupported | ClaimLabel::WrongCitation)));
    let reason = item.abstention.as_ref().map(|abstention| abstention.reason.clone());
    let (status, reason) = match labels.abstention {
        Some(AbstentionLabel::CorrectAbstention) => ("abstained", reason),
        Some(AbstentionLabel::ShouldHaveAnswered) => ("answered", None),
        None if !include.is_empty() => ("answered", None),
        None if all_judged_out => ("abstained", None),
        None if item.answered => ("answered", None),
        None => ("abstained", reason),
    };
    let mut expect = json!({"status": status});
    if let Some(reason) = reason {
        expect["reason"] = json!(reason);
    }
    if !include.is_empty() {
        expect["returned_claims_include"] = json!(include);
    }
    if !exclude.is_empty() {
        expect["returned_claims_exclude"] = json!(exclude);
    }
    expect
}

/// One line saying where the fixture came from and what the verdicts said.
fn about(stored: &StoredItem) -> String {
    let item = &stored.item;
    let labels = FirstLabels::of(stored);
    let claims: Vec<String> =
        labels.claims.iter().map(|(index, label)| format!("claim {index}: {}", label.as_str())).collect();
    let abstention = labels.abstention.map(|label| format!("abstention: {}", label.as_str()));
    let judged: Vec<String> = claims.into_iter().chain(abstention).collect();
    format!(
        "Exported from review {} (request {}, routed as {}, created {} ms), {} verdict(s): {}.",
        item.review_id,
        item.request_id,
        item.route.as_str(),
        item.created_ms,
        stored.verdicts.len(),
        if judged.is_empty() { "nothing judged".to_owned() } else { judged.join(", ") }
    )
}

/// The earliest run of up to [`SNIPPET_WORDS`] words of `text` (as it stands in `text`) that
/// holds no character a fixture placeholder or a JSON string would need escaped, and that no
/// text of `others` contains; `None` when there is none.
fn snippet(text: &str, others: &[&str]) -> Option<String> {
    let words: Vec<(usize, usize)> = text
        .split_whitespace()
        .map(|word| {
            let start = word.as_ptr() as usize - text.as_ptr() as usize;
            (start, start + word.len())
        })
        .collect();
    let plain = |candidate: &str| {
        !candidate.chars().any(|character| {
            matches!(character, '"' | '\\' | '{' | '}' | '@' | '#') || (character.is_whitespace() && character != ' ')
        })
    };
    for length in (1..=SNIPPET_WORDS.min(words.len())).rev() {
        for window in words.windows(length) {
            let candidate = &text[window[0].0..window[length - 1].1];
            if plain(candidate) && others.iter().all(|other| !other.contains(candidate)) {
                return Some(candidate.to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::item::{ClaimVerdict, Verdict};

    fn stored(verdicts: Vec<Verdict>) -> StoredItem {
        let new = crate::review::item::tests::sample();
        StoredItem { seq: 1, item: new.item, sources: new.sources, generated: Some(new.generated), verdicts }
    }

    fn verdict(claims: &[(u32, ClaimLabel)]) -> Verdict {
        Verdict {
            reviewer: "rita".into(),
            at_ms: 1,
            claims: claims.iter().map(|&(index, label)| ClaimVerdict { index, label }).collect(),
            abstention: None,
            note: None,
        }
    }

    #[test]
    fn snippets_are_unique_plain_and_found_in_their_text() {
        let text = "Hotel stays are reimbursed up to 250 GBP per night in London.";
        let others = ["London: 250 GBP"];
        let found = snippet(text, &others).unwrap();
        assert!(text.contains(&found) && !others[0].contains(&found), "{found}");
        assert_eq!(found.split(' ').count(), SNIPPET_WORDS);
        assert_eq!(snippet("say \"x\" {y}", &[]), Some("say".into()));
        assert_eq!(snippet("same", &["the same"]), None);
        assert_eq!(snippet("line one\nline two", &["line one", "line two"]), None, "a newline is never part of one");
    }

    #[test]
    fn verdicts_become_expectations_and_labels_placeholders() {
        let settings = Settings::defaults();
        // The sample: claim 0 returned, claim 1 withheld, both of attempt 1.
        let judged = stored(vec![verdict(&[(0, ClaimLabel::Supported), (1, ClaimLabel::Unsupported)])]);
        let fixture = fixture(&judged, &settings).unwrap();
        assert_eq!(fixture["expect"]["status"], "answered");
        assert_eq!(
            fixture["expect"]["returned_claims_include"],
            json!(["Hotel stays in London are reimbursed up to 250 GBP per night."])
        );
        assert_eq!(fixture["expect"]["returned_claims_exclude"], json!(["Breakfast is included."]));
        assert_eq!(fixture["principal"]["tenant"], TENANT);
        assert_eq!(fixture["documents"].as_array().unwrap().len(), 2);
        assert_eq!(fixture["documents"][0]["doc_id"], "travel-policy#S1");
        assert_eq!(fixture["settings"]["claim_policy"], "drop_claim");
        assert_eq!(fixture["generator"].as_array().unwrap().len(), 1);
        // Every claim judged out: abstained, whatever the server did.
        let out = stored(vec![verdict(&[(0, ClaimLabel::WrongCitation), (1, ClaimLabel::Unsupported)])]);
        assert_eq!(
            super::fixture(&out, &settings).unwrap()["expect"],
            json!({
                "status": "abstained",
                "returned_claims_exclude": ["Breakfast is included.", "Hotel stays in London are reimbursed up to 250 GBP per night."],
            })
        );
        // Only a partial judgement: the server's own outcome, nothing asked of the claims.
        let partial = stored(vec![verdict(&[(0, ClaimLabel::PartiallySupported)])]);
        assert_eq!(super::fixture(&partial, &settings).unwrap()["expect"], json!({"status": "answered"}));
        // Unreviewed or purged: skipped.
        assert_eq!(super::fixture(&stored(vec![]), &settings), Err(Skipped::Unreviewed));
        let mut purged = judged.clone();
        purged.generated = None;
        assert_eq!(super::fixture(&purged, &settings), Err(Skipped::Purged));
        let mut purged = judged;
        purged.sources.remove("london-rates");
        assert_eq!(super::fixture(&purged, &settings), Err(Skipped::Purged));
    }

    /// Issue 57.10: `review export-fixtures` wrote its directory 0755 and its files 0644, though
    /// they hold the tenant's text. The directories it creates are its owner's alone (0700), each
    /// file is 0600, and a link planted at a file's name is replaced, never written through.
    #[test]
    fn fixtures_are_their_owners_alone_and_never_written_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &std::path::Path| std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777;
        let parent = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let directory = parent.path().join("fixtures/reviews");
        let judged = stored(vec![verdict(&[(0, ClaimLabel::Supported)])]);
        let exported = write_fixtures(std::slice::from_ref(&judged), &Settings::defaults(), &directory).unwrap();
        assert_eq!(exported.written.len(), 1);
        assert_eq!((mode(&parent.path().join("fixtures")), mode(&directory)), (0o700, 0o700));
        let file = &exported.written[0];
        assert_eq!(mode(file), 0o600);
        let written = std::fs::read_to_string(file).unwrap();

        let victim = outside.path().join("warrant.toml");
        std::fs::write(&victim, "an operator's file").unwrap();
        std::fs::remove_file(file).unwrap();
        std::os::unix::fs::symlink(&victim, file).unwrap();
        write_fixtures(std::slice::from_ref(&judged), &Settings::defaults(), &directory).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "an operator's file", "written through the link");
        assert!(std::fs::symlink_metadata(file).unwrap().file_type().is_file());
        assert_eq!((mode(file), std::fs::read_to_string(file).unwrap()), (0o600, written));
        let names: Vec<String> = std::fs::read_dir(&directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "no temporary file is left: {names:?}");
    }

    #[test]
    fn cited_labels_of_the_raw_output_become_placeholders() {
        let mut judged = stored(vec![verdict(&[(0, ClaimLabel::Supported)])]);
        judged.generated.as_mut().unwrap().outputs =
            vec![(1, r#"{"answerable": true, "claims": [{"text": "S1 says", "citations": ["S1", "S2"]}]}"#.into())];
        let fixture = fixture(&judged, &Settings::defaults()).unwrap();
        let output = fixture["generator"][0]["output"].as_str().unwrap();
        assert!(!output.contains("\"S1\"") && !output.contains("\"S2\""), "{output}");
        assert!(output.contains("\"S1 says\""), "only whole label strings: {output}");
        assert_eq!(output.matches("@{").count(), 2, "{output}");
        assert!(serde_json::from_str::<Value>(output).is_ok(), "still JSON: {output}");
    }
}
