//! The HTTP contract types: the wire shapes of the values other layers produce or consume (answer
//! and retrieve responses, document inputs, a replica's freshness), with their OpenAPI schema
//! (`utoipa` derives), and the JSON Schema fragments of the input rules ([`schema`]). The OpenAPI
//! document is this layer's concern, so the answer, retrieval, domain and replica types carry no
//! schema; handlers convert between them and these with `From`. Bodies that exist only on the
//! wire (`AnswerBodyIn`, `UpsertBody`, `EpochOut`…) stay beside their handlers, and the review
//! views, which exist only to be sent, carry their schema where they are defined
//! ([`crate::review::view`]): no mirror of them here.
//!
//! Invariants: a mirror type serializes (or deserializes) exactly as the layer type it mirrors,
//! with the same field names, order and serde attributes, and keeps the same Rust name, which is
//! its schema name in the document; every conversion destructures its source and builds its
//! target without `..` and matches enums without `_`, so a field or variant added to a layer type
//! fails to compile until the contract follows; the tests below compare the JSON of both for
//! realistic values, so a conversion that moves a value cannot pass silently.

pub mod admin;
pub mod answer;
pub mod replica;
pub mod schema;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;
    use serde_json::json;

    use crate::answer::grounding::validate::AbstentionReason;
    use crate::answer::pipeline::response::{
        Abstention, AnswerBody, AnswerMetrics, AnswerResponse, AnswerStatus, ChunkRef, CitationOut, ClaimOut,
        RetrieveResponse, RetrievedChunk, ReviewTicket, Withheld,
    };

    use super::{admin, answer};

    /// Asserts that the mirror of `value` serializes to the same JSON as `value`.
    fn assert_same_json<Layer, Contract>(value: Layer)
    where
        Layer: Serialize + Clone,
        Contract: Serialize + From<Layer>,
    {
        let layer = serde_json::to_value(&value).unwrap();
        let contract = serde_json::to_value(Contract::from(value)).unwrap();
        assert_eq!(contract, layer);
    }

    /// Every number differs from every other, so a conversion that swaps two fields shows.
    fn chunk(doc_id: &str, start: usize) -> ChunkRef {
        ChunkRef {
            chunk_id: format!("{doc_id}#{start}"),
            doc_id: doc_id.to_owned(),
            doc_version: 3,
            start,
            end: start + 80,
            title: format!("{doc_id} (title)"),
            // Half the chunks carry a location, so both shapes are compared.
            location: start.is_multiple_of(2).then(|| crate::domain::Location {
                page: Some(4),
                pages: vec![4, 5],
                section: vec!["Travel".to_owned(), "Hotels".to_owned()],
            }),
        }
    }

    fn metrics() -> AnswerMetrics {
        AnswerMetrics {
            stages_ms: BTreeMap::from([("generation".to_owned(), 12.5), ("retrieval".to_owned(), 3.25)]),
            retrieved: 8,
            context: 4,
            generator_attempts: 2,
            citations_rejected: BTreeMap::from([("unknown_label".to_owned(), 1)]),
            claims_anchored: 5,
        }
    }

    #[test]
    fn an_answered_response_is_sent_as_the_answer_layer_serializes_it() {
        let citation = |label: &str, chunk: ChunkRef, quote: &str, offset: usize| CitationOut {
            label: label.to_owned(),
            quote_start: chunk.start + offset,
            quote_end: chunk.start + offset + quote.chars().count(),
            quote: quote.to_owned(),
            chunk,
        };
        let response = AnswerResponse {
            request_id: "request-1".to_owned(),
            status: AnswerStatus::Answered,
            answer: Some(AnswerBody {
                partial: true,
                withheld: vec![Withheld { reason: "unsupported_claim".to_owned() }],
                claims: vec![
                    ClaimOut {
                        text: "Hotel stays in London are reimbursed up to 250 GBP per night.".to_owned(),
                        citations: vec![
                            citation("S1", chunk("travel-policy", 120), "up to 250 GBP per night", 14),
                            citation("S3", chunk("london-rates", 7), "London: 250 GBP", 2),
                        ],
                    },
                    ClaimOut {
                        text: "Receipts are required.".to_owned(),
                        citations: vec![citation("S2", chunk("travel-policy", 400), "receipts are required", 31)],
                    },
                ],
            }),
            abstention: None,
            acl_epoch: 17,
            metrics: metrics(),
            review: Some(ReviewTicket { queued: true, review_id: "0b7e3c1a-5d2f-4e8a-9c6b-1f2e3d4c5b6a".to_owned() }),
        };
        assert_same_json::<_, answer::AnswerResponse>(response.clone());
        // A whole answer carries neither `partial` nor `withheld`.
        let mut whole = response.clone();
        whole.answer = whole.answer.map(|body| AnswerBody { partial: false, withheld: vec![], ..body });
        whole.review = None;
        let sent = serde_json::to_value(answer::AnswerResponse::from(whole.clone())).unwrap();
        assert!(sent["answer"].get("partial").is_none() && sent["answer"].get("withheld").is_none(), "{sent}");
        assert!(sent.get("review").is_none(), "an answer not routed to review carries no review: {sent}");
        assert_same_json::<_, answer::AnswerResponse>(whole);
        let claim = response.answer.iter().flat_map(|answer| answer.claims.clone()).next().unwrap();
        assert_same_json::<_, answer::ClaimOut>(claim);
    }

    #[test]
    fn an_abstained_response_is_sent_as_the_answer_layer_serializes_it() {
        let reasons = [
            AbstentionReason::NoAuthorizedEvidence,
            AbstentionReason::InsufficientEvidence,
            AbstentionReason::InvalidOutput,
            AbstentionReason::UnsupportedCitation,
            AbstentionReason::MissingCitation,
            AbstentionReason::SourceRevoked,
            AbstentionReason::GeneratorTimeout,
            AbstentionReason::GeneratorError,
            AbstentionReason::ContextOverflow,
            AbstentionReason::DeadlineExceeded,
            AbstentionReason::MaterialClaimUnsupported,
        ];
        for reason in reasons {
            let response = AnswerResponse {
                request_id: "request-2".to_owned(),
                status: AnswerStatus::Abstained,
                answer: None,
                abstention: Some(Abstention { reason, diagnostics: vec![reason.as_str().to_owned()] }),
                acl_epoch: 18,
                metrics: metrics(),
                review: None,
            };
            assert_same_json::<_, answer::AnswerResponse>(response);
        }
    }

    #[test]
    fn a_retrieve_response_is_sent_as_the_answer_layer_serializes_it() {
        let retrieved = |chunk: ChunkRef, score: f64, retrievers: &[&str]| RetrievedChunk {
            text: format!("text of {}", chunk.chunk_id),
            chunk,
            score,
            retrievers: retrievers.iter().map(|retriever| retriever.to_string()).collect(),
        };
        let response = RetrieveResponse {
            chunks: vec![
                retrieved(chunk("travel-policy", 120), 0.0325, &["lexical", "vector"]),
                retrieved(chunk("london-rates", 7), 0.0161, &["vector"]),
            ],
            acl_epoch: 19,
            short: true,
        };
        assert_same_json::<_, answer::RetrieveResponse>(response);
    }

    /// Reads `body` as the contract's document input and as the engine's; both read it alike.
    fn read_document_input(
        body: serde_json::Value,
    ) -> (Result<crate::retrieval::DocumentInput, String>, Result<crate::retrieval::DocumentInput, String>) {
        let contract = serde_json::from_value::<admin::DocumentInput>(body.clone())
            .map_err(|error| error.to_string())
            .and_then(|input| input.into_parts().map(|(input, _)| input));
        let layer = serde_json::from_value::<crate::retrieval::DocumentInput>(body).map_err(|error| error.to_string());
        (contract, layer)
    }

    #[test]
    fn a_document_input_is_read_as_the_engine_reads_it() {
        let full = json!({
            "doc_id": "travel-policy",
            "title": "Travel policy",
            "text": "Hotel stays in London are reimbursed up to 250 GBP per night.",
            "acl": {"groups": ["engineering", "finance"], "users": ["bob"]},
            "version": 4.0,
        });
        let (contract, layer) = read_document_input(full);
        assert_eq!(contract, layer);
        let read = contract.unwrap();
        assert_eq!((read.acl.groups.len(), read.acl.users.len(), read.version), (2, 1, Some(4)));

        let minimal = json!({"doc_id": "minimal", "text": "Only the required fields."});
        let (contract, layer) = read_document_input(minimal);
        assert_eq!(contract, layer);
        assert!(contract.is_ok());

        for refused in [
            json!({"doc_id": "a", "text": "b", "tenant": "other"}),
            json!({"doc_id": "a", "text": "b", "acl": {"roles": ["admin"]}}),
            json!({"doc_id": "a", "text": "b", "version": "3"}),
            json!({"doc_id": "a", "text": "b", "version": 2.5}),
            json!({"text": "b"}),
        ] {
            let (contract, layer) = read_document_input(refused.clone());
            assert!(contract.is_err() && layer.is_err(), "{refused}: {contract:?} / {layer:?}");
        }
    }
}
