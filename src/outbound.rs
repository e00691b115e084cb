//! Outbound HTTP for OpenAI-compatible providers (generators, embedders, the verifier's judge):
//! one way to build a `reqwest` client, to read API keys and to read a chat completion, shared so
//! that all get the same TLS setup and the same care with provider bodies.
//!
//! Invariants: the rustls crypto provider (ring) is installed before any client is built
//! (reqwest is compiled without a provider of its own and panics otherwise); API keys are only
//! ever sent as a sensitive `Authorization` header, never logged or put into error messages;
//! error descriptions never carry the request URL (it may hold credentials).

use std::time::Duration;

/// Installs ring as the process's rustls crypto provider (once; later calls do nothing). Every
/// TLS client of the process (outbound HTTP, PostgreSQL) needs it before its first handshake.
pub(crate) fn install_crypto_provider() {
    // `Err` means a provider is already installed, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Builds a client with `connect_timeout`; the total timeout is set per request by the caller.
pub(crate) fn client(connect_timeout: Duration) -> Result<reqwest::Client, String> {
    install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .build()
        .map_err(|error| format!("cannot build http client: {}", describe(error)))
}

/// The API key held by the environment variable `variable`: `None` when the name is empty, the
/// variable is unset or empty.
pub(crate) fn api_key_from_env(variable: &str) -> Option<String> {
    if variable.is_empty() {
        return None;
    }
    std::env::var(variable).ok().filter(|key| !key.is_empty())
}

/// An API key: sent as a bearer token ([`authorize`]), never printed (its `Debug` form is
/// `<redacted>`, so a provider deriving `Debug` cannot leak it into logs).
#[derive(Clone)]
pub(crate) struct ApiKey(String);

impl ApiKey {
    /// The key, if there is one.
    pub(crate) fn from(key: Option<String>) -> Option<Self> {
        key.map(Self)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("<redacted>")
    }
}

/// `request` with `key` as its bearer token; unchanged without a key (no `Authorization`).
pub(crate) fn authorize(request: reqwest::RequestBuilder, key: Option<&ApiKey>) -> reqwest::RequestBuilder {
    match key {
        Some(ApiKey(key)) => request.bearer_auth(key),
        None => request,
    }
}

/// `{base_url}/{path}` with one slash between them.
pub(crate) fn endpoint(base_url: &str, path: &str) -> String {
    format!("{}/{path}", base_url.trim_end_matches('/'))
}

#[derive(serde::Deserialize)]
struct Completion {
    choices: Vec<Choice>,
}

#[derive(serde::Deserialize)]
struct Choice {
    message: Message,
}

#[derive(serde::Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
}

/// `choices[0].message.content` of a chat-completions body, or why there is none (a fixed
/// reason: provider bodies may echo prompt text, so none of theirs is ever copied).
pub(crate) fn chat_content(body: &[u8]) -> Result<String, &'static str> {
    let completion: Completion = serde_json::from_slice(body).map_err(|_| "malformed response body")?;
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err("response has no choices");
    };
    if choice.message.refusal.is_some_and(|refusal| !refusal.is_empty()) {
        return Err("model refused the request");
    }
    match choice.message.content {
        Some(content) if !content.trim().is_empty() => Ok(content),
        _ => Err("response has no content"),
    }
}

/// The error and its causes on one line, without the URL.
pub(crate) fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_joins_with_one_slash() {
        assert_eq!(endpoint("http://host/v1/", "embeddings"), "http://host/v1/embeddings");
        assert_eq!(endpoint("http://host/v1", "chat/completions"), "http://host/v1/chat/completions");
    }

    #[test]
    fn empty_variable_name_means_no_key() {
        assert_eq!(api_key_from_env(""), None);
        let key = ApiKey::from(Some("sk-secret".into()));
        assert_eq!(format!("{key:?}"), "Some(<redacted>)");
    }
}
