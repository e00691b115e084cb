//! [`OpenAiCompatibleGenerator`]: structured generation over the OpenAI chat-completions wire
//! format (spec: API.md, "Generator wire format"), spoken by OpenAI, vLLM, the llama.cpp server
//! and Ollama alike.
//!
//! Invariants: every call asks for `temperature: 0`, at most `max_tokens` tokens and strict
//! `cited_answer` JSON; the call
//! never outlives `request.timeout`; the API key travels only in the `Authorization` header and
//! never appears in logs, `Debug` output or errors; provider response bodies are never copied
//! into errors (they may echo prompt text).

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use super::generator::{GenerationRequest, Generator, GeneratorError};
use crate::config::GeneratorSettings;
use crate::outbound;

/// Generator calling `POST {base_url}/chat/completions` of an OpenAI-compatible server.
/// `Debug` prints the API key as `<redacted>`.
#[derive(Debug)]
pub struct OpenAiCompatibleGenerator {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<outbound::ApiKey>,
    max_tokens: u32,
    name: String,
}

/// `max_tokens` sent when none is configured.
pub const DEFAULT_MAX_TOKENS: u32 = 384;

impl OpenAiCompatibleGenerator {
    /// A generator for `model` at `base_url` (e.g. `http://127.0.0.1:8000/v1`). Without
    /// `api_key` no `Authorization` header is sent.
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        connect_timeout: Duration,
    ) -> Result<Self, GeneratorError> {
        let client = outbound::client(connect_timeout).map_err(GeneratorError::Connection)?;
        Ok(Self {
            client,
            url: outbound::endpoint(base_url, "chat/completions"),
            model: model.to_owned(),
            api_key: outbound::ApiKey::from(api_key),
            max_tokens: DEFAULT_MAX_TOKENS,
            name: format!("openai:{model}"),
        })
    }

    /// The same generator asking for at most `max_tokens` tokens per call (at least 1).
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens.max(1);
        self
    }

    /// A generator configured by `settings`; the API key is read from the environment variable
    /// named by `settings.api_key_env` (unset or empty: no key).
    pub fn from_settings(settings: &GeneratorSettings) -> Result<Self, GeneratorError> {
        Self::new(
            &settings.base_url,
            &settings.model,
            outbound::api_key_from_env(&settings.api_key_env),
            Duration::from_millis(settings.connect_timeout_ms),
        )
        .map(|generator| generator.with_max_tokens(settings.max_tokens))
    }

    fn body(&self, request: &GenerationRequest) -> serde_json::Value {
        let mut messages = vec![
            json!({"role": "system", "content": request.system}),
            json!({"role": "user", "content": request.user}),
        ];
        if let Some(problems) = &request.repair {
            if let Some(previous) = &request.previous {
                messages.push(json!({"role": "assistant", "content": previous}));
            }
            messages.push(json!({"role": "user", "content": repair_message(problems)}));
        }
        json!({
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "cited_answer", "strict": true, "schema": request.schema},
            },
        })
    }

    async fn call(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
        let builder = outbound::authorize(
            self.client.post(&self.url).timeout(request.timeout).json(&self.body(request)),
            self.api_key.as_ref(),
        );
        let response = builder.send().await.map_err(transport_error)?;
        let status = response.status();
        if !status.is_success() {
            tracing::debug!(generator = %self.name, status = status.as_u16(), "generator returned an error status");
            return Err(GeneratorError::Status { status: status.as_u16() });
        }
        let bytes = response.bytes().await.map_err(transport_error)?;
        content_of(&bytes)
    }
}

/// The final user message of a repair attempt: what to fix, then a reminder that an answer the
/// sources support is still wanted. (Written because repairs almost always came back
/// `answerable: false`; on Qwen2.5-1.5B this wording and the rejected output shown back did not
/// change that, BENCHMARKS.md "The held-out slice on a quiet machine".)
fn repair_message(problems: &str) -> String {
    format!(
        "{problems}\n\
         Answer the question again with JSON matching the schema, citing only the source labels given above. \
         If a source answers the question, set answerable to true and give claims whose quotes are copied \
         word for word from the source they cite; set answerable to false only if no source answers it."
    )
}

fn transport_error(error: reqwest::Error) -> GeneratorError {
    if error.is_timeout() {
        GeneratorError::Timeout
    } else if error.is_connect() {
        GeneratorError::Connection(outbound::describe(error))
    } else {
        GeneratorError::Refused(format!("unusable response: {}", outbound::describe(error)))
    }
}

/// `choices[0].message.content` of a chat-completions body.
fn content_of(body: &[u8]) -> Result<String, GeneratorError> {
    outbound::chat_content(body).map_err(|reason| GeneratorError::Refused(reason.into()))
}

#[async_trait]
impl Generator for OpenAiCompatibleGenerator {
    fn name(&self) -> &str {
        &self.name
    }

    async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
        // reqwest's per-request timeout covers the body too; the outer one is the contract.
        tokio::time::timeout(request.timeout, self.call(request)).await.unwrap_or(Err(GeneratorError::Timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_read_from_the_first_choice() {
        let body =
            br#"{"choices":[{"message":{"role":"assistant","content":"{\"answerable\":false,\"claims\":[]}"}}]}"#;
        assert_eq!(content_of(body).unwrap(), r#"{"answerable":false,"claims":[]}"#);
    }

    #[test]
    fn a_repair_shows_the_rejected_answer_as_the_assistant_turn_before_the_problems() {
        let generator =
            OpenAiCompatibleGenerator::new("http://127.0.0.1:9", "model", None, Duration::from_secs(1)).unwrap();
        let mut request = GenerationRequest {
            system: "system".into(),
            user: "sources and question".into(),
            question: "question".into(),
            sources: Vec::new(),
            schema: serde_json::json!({}),
            repair: Some("- claim 1 has no citation.".into()),
            previous: Some(r#"{"answerable":true,"claims":[]}"#.into()),
            timeout: Duration::from_secs(1),
        };
        let roles = |body: &serde_json::Value| -> Vec<String> {
            body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_owned()).collect()
        };
        let body = generator.body(&request);
        assert_eq!(roles(&body), ["system", "user", "assistant", "user"]);
        assert_eq!(body["messages"][2]["content"], r#"{"answerable":true,"claims":[]}"#);
        let last = body["messages"][3]["content"].as_str().unwrap();
        assert!(last.starts_with("- claim 1 has no citation.") && last.contains("set answerable to true"), "{last}");
        // Withheld (a source it saw was revoked): the problems alone.
        request.previous = None;
        assert_eq!(roles(&generator.body(&request)), ["system", "user", "user"]);
        // A first attempt carries neither.
        request.repair = None;
        assert_eq!(roles(&generator.body(&request)), ["system", "user"]);
    }

    #[test]
    fn refusal_null_content_and_garbage_are_refused() {
        let refusal = br#"{"choices":[{"message":{"content":null,"refusal":"I can't help with that"}}]}"#;
        let empty = br#"{"choices":[{"message":{"content":""}}]}"#;
        let no_choices = br#"{"choices":[]}"#;
        for body in [&refusal[..], &empty[..], &no_choices[..], b"<html>oops</html>"] {
            assert!(matches!(content_of(body), Err(GeneratorError::Refused(_))));
        }
    }
}
