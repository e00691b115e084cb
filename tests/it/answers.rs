//! Answer quality and answer delivery end to end: `warrant eval answers`' library path on a tiny
//! two-tenant dataset written here (never the shared data), on the hashed embedder and the
//! extractive generator, through the same pipeline as `/v1/answer`.

use std::path::Path;

use warrant::answer::response::AnswerStatus;
use warrant::config::Settings;
use warrant::eval::answers::{AnswersOptions, AnswersReport, read_gold, run};
use warrant::eval::dataset::{Dataset, NoProgress};

/// Two tenants asking the same question; one question the corpus cannot answer.
fn write_dataset(dir: &Path) {
    let corpus = [
        r#"{"_id": "acme:1", "title": "Travel policy", "text": "Hotel stays are reimbursed up to 250 euros per night in London. Taxis are reimbursed with a receipt.", "tenant": "acme"}"#,
        r#"{"_id": "acme:2", "title": "Laptop guide", "text": "Laptops are replaced every three years by the helpdesk.", "tenant": "acme"}"#,
        r#"{"_id": "globex:1", "title": "Travel policy", "text": "Hotel stays are reimbursed up to 210 euros per night in London.", "tenant": "globex"}"#,
        r#"{"_id": "globex:2", "title": "Cafeteria", "text": "Lunch is served from noon in the cafeteria on the second floor.", "tenant": "globex"}"#,
    ];
    let queries = [
        r#"{"_id": "acme:q1", "text": "How much are hotel stays in London reimbursed per night?", "tenant": "acme"}"#,
        r#"{"_id": "acme:q2", "text": "How often are laptops replaced?", "tenant": "acme"}"#,
        r#"{"_id": "globex:q1", "text": "How much are hotel stays in London reimbursed per night?", "tenant": "globex"}"#,
        r#"{"_id": "globex:q2", "text": "What colour is the parking garage?", "tenant": "globex"}"#,
    ];
    let qrels = "query-id\tcorpus-id\tscore\nacme:q1\tacme:1\t1\nacme:q2\tacme:2\t1\nglobex:q1\tglobex:1\t1\nglobex:q2\tglobex:2\t1\n";
    let answers = [
        r#"{"_id": "acme:q1", "answers": ["250 euros"]}"#,
        r#"{"_id": "acme:q2", "answers": ["every three years"]}"#,
        r#"{"_id": "globex:q1", "answers": ["up to 210 euros"]}"#,
        r#"{"_id": "globex:q2", "answers": ["grey"]}"#,
    ];
    std::fs::write(dir.join("corpus.jsonl"), corpus.join("\n")).unwrap();
    std::fs::write(dir.join("queries.jsonl"), queries.join("\n")).unwrap();
    std::fs::write(dir.join("qrels.tsv"), qrels).unwrap();
    std::fs::write(dir.join("answers.jsonl"), answers.join("\n")).unwrap();
}

fn settings() -> Settings {
    let mut settings = Settings::defaults();
    settings.embedder.kind = "hashed".into();
    settings.embedder.dim = 64;
    settings
}

fn eval(dir: &Path, questions: Option<usize>, seed: u64) -> AnswersReport {
    let dataset = Dataset::load(dir, None).expect("dataset loads");
    let gold = read_gold(&dir.join("answers.jsonl")).expect("gold answers");
    let options = AnswersOptions { questions, seed, gold };
    actix_rt::System::new().block_on(async move {
        let (summary, report) = run(&settings(), &dataset, &options, &NoProgress).await.expect("evaluation runs");
        assert_eq!(summary.documents, 4);
        report
    })
}

#[test]
fn eval_answers_scores_the_pipeline_answers() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let report = eval(dir.path(), None, 7);
    assert_eq!(report.questions, 4);
    assert_eq!((report.generator.as_str(), report.embedder.starts_with("hashed")), ("extractive", true));
    let by_id = |id: &str| report.per_query.iter().find(|scores| scores.query_id == id).expect(id);
    for id in ["acme:q1", "acme:q2", "globex:q1"] {
        let scores = by_id(id);
        assert_eq!(scores.status, AnswerStatus::Answered, "{id}");
        assert_eq!(scores.correct, Some(true), "{id}");
        assert_eq!(scores.relevant_citations, scores.citations, "{id}: only its own tenant's relevant document");
    }
    let unanswerable = by_id("globex:q2");
    assert_eq!(unanswerable.status, AnswerStatus::Abstained);
    assert_eq!(unanswerable.correct, None);
    assert_eq!(report.abstentions.values().sum::<usize>(), 1);
    assert_eq!(report.answer_rate.mean, 0.75);
    assert_eq!(report.citation_precision, 1.0);
    assert_eq!(report.correct_of_answered.expect("gold answers").mean, 1.0);
    assert_eq!(report.correct_of_questions.expect("gold answers").mean, 0.75);
    assert_eq!(report.unanchored_quotes, 0);
    assert!(report.latency_ms.contains_key("total") && report.latency_ms.contains_key("generation"));
    // A fixed seed samples the same questions; --n limits them.
    let sample =
        |seed| eval(dir.path(), Some(2), seed).per_query.into_iter().map(|scores| scores.query_id).collect::<Vec<_>>();
    assert_eq!(sample(3), sample(3));
    assert_eq!(sample(3).len(), 2);
}
