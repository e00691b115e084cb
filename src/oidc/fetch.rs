//! The provider's documents over HTTP: OpenID Connect discovery (`{issuer}/.well-known/
//! openid-configuration`) and the JWKS it names, with the `Cache-Control` lifetime of the JWKS.
//!
//! Invariants: the discovery document must name exactly the configured issuer (OpenID Connect
//! Discovery 1.0 §4.3) and a `jwks_uri` that is https (http only to loopback); bodies are read to
//! at most [`MAX_BODY_BYTES`]; every request has the configured time limit; error texts carry no
//! URL query (it may hold credentials) and no body.

use std::time::Duration;

use super::OidcError;

/// Largest discovery or JWKS body read.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Fetches the provider's keys document.
pub struct Fetcher {
    client: reqwest::Client,
    issuer: String,
    /// `auth.oidc.jwks_url` (no discovery) when set.
    configured_jwks: Option<String>,
    /// The `jwks_uri` of the last discovery; cleared when a JWKS fetch fails, so the next attempt
    /// discovers again.
    discovered_jwks: std::sync::Mutex<Option<String>>,
    timeout: Duration,
}

/// A fetched JWKS body and how long the provider says it stays fresh.
pub struct Fetched {
    /// The body.
    pub body: Vec<u8>,
    /// `Cache-Control: max-age` (zero for `no-cache`/`no-store`), when given.
    pub max_age: Option<Duration>,
}

#[derive(serde::Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

impl Fetcher {
    /// A fetcher of `issuer`'s keys (from `jwks_url` when not empty, else by discovery).
    pub fn new(issuer: &str, jwks_url: &str, timeout: Duration) -> Result<Self, OidcError> {
        let client = crate::outbound::client(timeout).map_err(|reason| OidcError::Fetch { what: "client", reason })?;
        Ok(Self {
            client,
            issuer: issuer.to_owned(),
            configured_jwks: (!jwks_url.is_empty()).then(|| jwks_url.to_owned()),
            discovered_jwks: std::sync::Mutex::new(None),
            timeout,
        })
    }

    /// The discovery document's URL.
    pub fn discovery_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.issuer.trim_end_matches('/'))
    }

    /// Fetches the JWKS (discovering its URL first when needed).
    pub async fn fetch(&self) -> Result<Fetched, OidcError> {
        let url = match self.jwks_url() {
            Some(url) => url,
            None => {
                let url = self.discover().await?;
                *self.discovered_jwks.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(url.clone());
                url
            }
        };
        let fetched = self.get("jwks", &url).await;
        if fetched.is_err() {
            self.discovered_jwks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        }
        let (body, headers) = fetched?;
        Ok(Fetched { body, max_age: max_age(&headers) })
    }

    fn jwks_url(&self) -> Option<String> {
        self.configured_jwks
            .clone()
            .or_else(|| self.discovered_jwks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }

    async fn discover(&self) -> Result<String, OidcError> {
        let (body, _) = self.get("discovery", &self.discovery_url()).await?;
        let document: Discovery = serde_json::from_slice(&body)
            .map_err(|error| OidcError::Document { what: "discovery", reason: error.to_string() })?;
        if document.issuer != self.issuer {
            return Err(OidcError::IssuerMismatch { configured: self.issuer.clone(), advertised: document.issuer });
        }
        if !crate::config::is_secure_url(&document.jwks_uri) {
            return Err(OidcError::Document {
                what: "discovery",
                reason: "jwks_uri is not an https url (http only to a loopback host)".into(),
            });
        }
        Ok(document.jwks_uri)
    }

    async fn get(&self, what: &'static str, url: &str) -> Result<(Vec<u8>, reqwest::header::HeaderMap), OidcError> {
        let fetch_error = |error: reqwest::Error| OidcError::Fetch { what, reason: crate::outbound::describe(error) };
        let mut response = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(self.timeout)
            .send()
            .await
            .map_err(fetch_error)?;
        if !response.status().is_success() {
            return Err(OidcError::Status { what, status: response.status().as_u16() });
        }
        if response.content_length().is_some_and(|length| length > MAX_BODY_BYTES as u64) {
            return Err(OidcError::TooLarge { what });
        }
        let headers = response.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(fetch_error)? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(OidcError::TooLarge { what });
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, headers))
    }
}

/// The freshness lifetime a `Cache-Control` header gives (RFC 9111 §5.2.2): `max-age=N`, or zero
/// for `no-cache`/`no-store`; `None` without one.
pub fn max_age(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let mut found = None;
    for value in headers.get_all(reqwest::header::CACHE_CONTROL) {
        let Ok(text) = value.to_str() else { continue };
        for directive in text.split(',').map(str::trim) {
            let (name, argument) = directive.split_once('=').map_or((directive, ""), |(name, arg)| (name.trim(), arg));
            if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
                return Some(Duration::ZERO);
            }
            if name.eq_ignore_ascii_case("max-age")
                && let Ok(seconds) = argument.trim().trim_matches('"').parse::<u64>()
            {
                found = Some(Duration::from_secs(seconds));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use reqwest::header::{CACHE_CONTROL, HeaderMap, HeaderValue};

    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(CACHE_CONTROL, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn cache_control_gives_the_freshness_lifetime() {
        assert_eq!(max_age(&headers(&[])), None);
        assert_eq!(max_age(&headers(&["public, max-age=3600"])), Some(Duration::from_secs(3600)));
        assert_eq!(max_age(&headers(&["Max-Age = \"120\", must-revalidate"])), Some(Duration::from_secs(120)));
        assert_eq!(max_age(&headers(&["public", "max-age=60"])), Some(Duration::from_secs(60)));
        assert_eq!(max_age(&headers(&["max-age=60, no-cache"])), Some(Duration::ZERO));
        assert_eq!(max_age(&headers(&["no-store"])), Some(Duration::ZERO));
        assert_eq!(max_age(&headers(&["max-age=soon"])), None);
    }

    #[test]
    fn discovery_lives_under_the_issuer() {
        let fetcher = Fetcher::new("https://idp.example.com/realms/acme/", "", Duration::from_secs(1)).unwrap();
        assert_eq!(fetcher.discovery_url(), "https://idp.example.com/realms/acme/.well-known/openid-configuration");
    }
}
