use super::*;

#[test]
fn squad_normalization_matches_the_official_script() {
    assert_eq!(squad_normalize("The Denver  Broncos!"), "denver broncos");
    assert_eq!(squad_normalize("Levi's Stadium"), "levis stadium");
    assert_eq!(squad_normalize("U.S. an apple"), "us apple");
    assert!(contains_gold("The game was won by the Denver Broncos, 24-10.", &["Denver Broncos".into()]));
    assert!(!contains_gold("Denverite Broncosville.", &["Denver Broncos".into()]));
    assert!(!contains_gold("anything", &["the".into()]));
}

fn request_showing(texts: &[&str]) -> GenerationRequest {
    GenerationRequest {
        system: String::new(),
        user: String::new(),
        question: "?".into(),
        sources: texts
            .iter()
            .enumerate()
            .map(|(index, text)| crate::answer::providers::generator::SourceForModel {
                label: format!("S{}", index + 1),
                text: (*text).into(),
            })
            .collect(),
        schema: serde_json::Value::Null,
        repair: None,
        previous: None,
        timeout: std::time::Duration::from_secs(1),
    }
}

#[test]
fn the_recorder_keeps_the_first_attempts_sources_until_taken() {
    let recorder = ContextRecorder::new(Arc::new(crate::answer::providers::extractive::ExtractiveGenerator::new(1)));
    assert_eq!(recorder.name(), "extractive");
    assert_eq!(recorder.take(), None, "no call, no context");
    futures::executor::block_on(async {
        let _ = recorder.generate(&request_showing(&["The first attempt's source."])).await;
        let _ = recorder.generate(&request_showing(&["The repair attempt's source."])).await;
    });
    assert_eq!(recorder.take(), Some(vec!["The first attempt's source.".to_owned()]));
    assert_eq!(recorder.take(), None, "taken");
    let gold = ["250 euros".to_owned()];
    let shown = ["Hotels: up to 250 Euros a night.".to_owned()];
    let scored = |sources: Option<&[String]>, gold: Option<&[String]>| {
        let response = AnswerResponse {
            request_id: "q".into(),
            status: AnswerStatus::Abstained,
            answer: None,
            abstention: Some(crate::answer::pipeline::response::Abstention {
                reason: crate::answer::grounding::validate::AbstentionReason::InsufficientEvidence,
                diagnostics: Vec::new(),
            }),
            acl_epoch: 0,
            metrics: Default::default(),
            review: None,
        };
        QuestionScores::of("q", &response, &HashMap::new(), gold, 0.0).with_context(sources, gold)
    };
    let held = |sources: Option<&[String]>, gold: Option<&[String]>| {
        let scores = scored(sources, gold);
        assert_eq!(scores.context_holds_gold.unwrap_or_default(), !scores.gold_sources.is_empty());
        scores.context_holds_gold
    };
    assert_eq!(held(Some(&shown), Some(&gold)), Some(true));
    let sources = ["No price here.".to_owned(), shown[0].clone()];
    assert_eq!(scored(Some(&sources), Some(&gold)).gold_sources, vec![2], "by label number");
    assert_eq!(held(Some(&["Hotels: up to 25 euros.".to_owned()]), Some(&gold)), Some(false));
    assert_eq!(held(None, Some(&gold)), Some(false), "no generator call: nothing was shown");
    assert_eq!(held(Some(&shown), None), None, "no gold answers: not scored");
}

/// A dataset of `count` judged questions and no corpus.
fn judged_questions(count: usize) -> Dataset {
    let queries: Vec<super::super::dataset::EvalQuery> = (0..count)
        .map(|index| super::super::dataset::EvalQuery { id: format!("q{index}"), text: "?".into(), tenant: None })
        .collect();
    let qrels = queries.iter().map(|query| (query.id.clone(), HashMap::from([("d".to_owned(), 1)]))).collect();
    Dataset { name: "test".into(), corpus_path: PathBuf::new(), corpus: Vec::new(), queries, qrels }
}

#[test]
fn tuning_and_held_out_windows_of_one_seed_are_disjoint_slices_of_one_shuffle() {
    let dataset = judged_questions(500);
    let ids = |questions, offset| -> Vec<String> {
        sample_queries(&dataset, questions, 7, offset).into_iter().map(|query| query.id.clone()).collect()
    };
    let everything = ids(None, 0);
    let tuning = ids(Some(30), 0);
    let held_out = ids(Some(100), 100);
    assert_eq!(tuning, everything[..30]);
    assert_eq!(held_out, everything[100..200]);
    assert!(tuning.iter().all(|id| !held_out.contains(id)));
    // The whole shuffle is a permutation: every question once.
    let mut sorted = everything.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 500);
    // A window past the end is short or empty, never wrapped around.
    assert_eq!(ids(Some(100), 450), everything[450..]);
    assert!(ids(Some(10), 600).is_empty());
}

#[test]
fn scores_are_rewritten_whole_through_a_renamed_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("per-query.jsonl");
    std::fs::write(&path, "stale\nstale\nstale\n").unwrap();
    write_scores(&path, &[1, 2]).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n2\n");
    write_scores(&path, &[1, 2, 3]).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n2\n3\n");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert_eq!(names, ["per-query.jsonl"]);
}

#[test]
fn percentiles_are_nearest_rank() {
    let values: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(Percentiles::of(&values), Percentiles { p50: 50.0, p95: 95.0 });
    assert_eq!(Percentiles::of(&[7.0]), Percentiles { p50: 7.0, p95: 7.0 });
    assert_eq!(Percentiles::of(&[]), Percentiles::default());
}

/// A partial answer is counted as one (a whole one and an abstention are not), and a material
/// claim's abstention is counted by its reason.
#[test]
fn the_report_counts_partial_answers_and_material_abstentions() {
    use crate::answer::grounding::validate::AbstentionReason;
    use crate::answer::pipeline::response::{Abstention, AnswerBody, Withheld};
    let response = |answer: Option<AnswerBody>, reason: Option<AbstentionReason>| AnswerResponse {
        request_id: "q".into(),
        status: if answer.is_some() { AnswerStatus::Answered } else { AnswerStatus::Abstained },
        answer,
        abstention: reason.map(|reason| Abstention { reason, diagnostics: vec!["unsupported_claim".into()] }),
        acl_epoch: 0,
        metrics: Default::default(),
        review: None,
    };
    let partial = AnswerBody {
        claims: Vec::new(),
        partial: true,
        withheld: vec![Withheld { reason: "unsupported_claim".into() }],
    };
    let whole = AnswerBody { claims: Vec::new(), partial: false, withheld: Vec::new() };
    let responses = [
        response(Some(partial), None),
        response(Some(whole), None),
        response(None, Some(AbstentionReason::MaterialClaimUnsupported)),
    ];
    let scores: Vec<QuestionScores> =
        responses.iter().map(|response| QuestionScores::of("q", response, &HashMap::new(), None, 0.0)).collect();
    assert_eq!(scores.iter().map(|scores| scores.partial).collect::<Vec<_>>(), [true, false, false]);
    let report = AnswersReport::of("d", "g", "e", 1, scores);
    assert_eq!(report.partial_answers, 1);
    assert_eq!(report.abstentions, BTreeMap::from([("material_claim_unsupported".to_owned(), 1)]));
}
