//! Property-based fuzzing of the HTTP surface in-process: arbitrary bodies, content types,
//! tokens and paths never produce a 5xx or a panic, and every error is a JSON `{code, message}`.
//! (cargo-fuzz needs a nightly toolchain, which this project's machines do not have; proptest
//! drives the same entry points with shrinking.)

use std::sync::Arc;

use actix_web::test::{TestRequest, call_service, init_service, read_body};
use proptest::prelude::*;
use warrant::answer::providers::extractive::ExtractiveGenerator;
use warrant::answer::providers::lexical_verifier::LexicalSupportVerifier;
use warrant::app::build_state;
use warrant::config::Settings;
use warrant::embed::{Embedder, HashedEmbedder};
use warrant::http::auth::{Claims, mint_hs256};
use warrant::http::server::app;
use warrant::providers::Providers;

fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        "\\PC{0,120}".prop_map(String::into_bytes),
        (any::<String>(), any::<i64>(), proptest::option::of(any::<bool>())).prop_map(|(text, number, flag)| {
            serde_json::json!({"question": text, "top_k": number, "deadline_ms": flag.map(|_| number)})
                .to_string()
                .into_bytes()
        }),
        (any::<String>(), any::<String>()).prop_map(|(doc_id, text)| {
            serde_json::json!({"documents": [{"doc_id": doc_id, "text": text, "acl": {"groups": [text.clone()]}}]})
                .to_string()
                .into_bytes()
        }),
        any::<String>().prop_map(|doc_id| serde_json::json!({"doc_id": doc_id, "groups": [doc_id.clone()]})
            .to_string()
            .into_bytes()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_input_makes_the_server_fail_or_panic(
        route in 0usize..6,
        body in body_strategy(),
        token_kind in 0usize..4,
        garbage in "\\PC{0,40}",
        json_type in any::<bool>(),
    ) {
        actix_rt::System::new().block_on(async move {
            let mut settings = Settings::defaults();
            settings.embedder.dim = 32;
            settings.index.shards = 2;
            settings.server.max_body_bytes = 4096;
            let settings = Arc::new(settings);
            let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(32));
            let providers = Providers {
                embedder: Arc::clone(&embedder),
                generator: Arc::new(ExtractiveGenerator::new(3)),
                verifier: Arc::new(LexicalSupportVerifier::new(0.9, 0.2, None)),
            };
            let state = build_state(Arc::clone(&settings), providers).await.unwrap();
            let service = init_service(app(state)).await;
            let claims = |roles: Vec<String>| Claims {
                sub: "fuzzer".into(), tenant: "acme".into(), groups: vec!["everyone".into()], roles,
                exp: 4_000_000_000, iss: None, aud: None,
            };
            let token = match token_kind {
                0 => None,
                1 => Some(garbage.clone()),
                2 => Some(mint_hs256(&settings.auth.hs256_secret, &claims(vec![])).unwrap()),
                _ => Some(mint_hs256(&settings.auth.hs256_secret, &claims(vec!["admin".into()])).unwrap()),
            };
            let (method, path) = [
                ("POST", "/v1/answer".to_owned()),
                ("POST", "/v1/retrieve".to_owned()),
                ("PUT", "/v1/admin/documents".to_owned()),
                ("POST", "/v1/admin/acl/revoke".to_owned()),
                ("DELETE", format!("/v1/admin/documents/{}", urlencode(&garbage))),
                ("GET", format!("/v1/admin/acl/changes?since={}", urlencode(&garbage))),
            ][route].clone();
            let mut request = TestRequest::default().method(method.parse().unwrap()).uri(&path).set_payload(body);
            if json_type {
                request = request.insert_header(("content-type", "application/json"));
            }
            if let Some(token) = token {
                request = request.insert_header(("authorization", format!("Bearer {token}")));
            }
            let response = call_service(&service, request.to_request()).await;
            let status = response.status().as_u16();
            assert!(status < 500, "{method} {path} gave {status}");
            let bytes = read_body(response).await;
            if status >= 400 {
                let value: serde_json::Value = serde_json::from_slice(&bytes).expect("json error body");
                assert!(value["code"].as_str().is_some_and(|code| !code.is_empty()));
                assert!(value["message"].as_str().is_some());
            }
        });
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|byte| if byte.is_ascii_alphanumeric() { (byte as char).to_string() } else { format!("%{byte:02X}") })
        .collect()
}
