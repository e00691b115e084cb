//! The `Host` check: which host names this server answers, so that a web page whose name was
//! rebound to this server's address (DNS rebinding) cannot drive it through a visitor's browser.
//!
//! Invariants:
//! - whenever the server accepts a published key ([`Settings::published_key`]: the demo HS256
//!   secret, or a committed test key of `fixtures/auth/`), which `serve` allows on a loopback
//!   bind only, only loopback host names are answered (`localhost`, 127.0.0.0/8, `[::1]`),
//!   whatever `demo.load`, `demo.users` and `server.allowed_hosts` say: a page at
//!   `rebind.attacker.example` resolving to 127.0.0.1 gets 421 `host_not_allowed`, never a demo
//!   token, and never an answer to an admin token it signed itself with the published key;
//! - otherwise, when `server.allowed_hosts` lists names, only those are answered; an empty list
//!   answers any host (a deployment behind its own proxy);
//! - the check reads the `Host` header (or the HTTP/2 authority) only, never `Forwarded` or
//!   `X-Forwarded-Host`, which any client may set; a request with no host at all (HTTP/1.0)
//!   is let through, since no browser sends one;
//! - a refused request reaches no handler: nothing is read, minted or changed.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::web;

use crate::config::{Settings, is_loopback_host};

use super::error::ApiError;

/// The host names one app answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPolicy {
    /// Any host.
    Any,
    /// Loopback names only (a published key is accepted).
    Loopback,
    /// These names (lowercase, without port).
    Listed(Vec<String>),
}

impl HostPolicy {
    /// The policy `settings` ask for (see the module's invariants).
    pub fn from_settings(settings: &Settings) -> Self {
        if settings.published_key().is_some() {
            Self::Loopback
        } else if settings.server.allowed_hosts.is_empty() {
            Self::Any
        } else {
            Self::Listed(settings.server.allowed_hosts.iter().map(|host| normalized(host)).collect())
        }
    }

    /// Whether a request naming `host` (a `Host` header value, port included or not) is
    /// answered; `None` is a request without a host.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let Some(host) = host else { return true };
        let name = normalized(host_name(host));
        match self {
            Self::Any => true,
            Self::Loopback => is_loopback_host(&name),
            Self::Listed(names) => names.contains(&name),
        }
    }
}

/// Lowercase, without a trailing dot (`Example.COM.` and `example.com` are one name).
fn normalized(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The host name of a `Host` value: `[v6]:port` → `[v6]`, `name:port` → `name`.
fn host_name(value: &str) -> &str {
    let value = value.trim();
    if value.starts_with('[') {
        return value.find(']').map_or(value, |end| &value[..=end]);
    }
    match value.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|byte| byte.is_ascii_digit()) => name,
        _ => value,
    }
}

/// Middleware: answers 421 `host_not_allowed` to a request whose host the app's
/// [`HostPolicy`] (app data) does not allow.
pub async fn check_host(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let allowed = match request.app_data::<web::Data<HostPolicy>>() {
        None => true,
        Some(policy) => {
            let from_header = request.headers().get(header::HOST).map(|value| value.to_str().unwrap_or("\u{0}"));
            let host = from_header.or_else(|| request.uri().authority().map(|authority| authority.as_str()));
            policy.allows(host)
        }
    };
    if !allowed {
        metrics::counter!("warrant_hosts_refused_total").increment(1);
        let response = actix_web::ResponseError::error_response(&ApiError::host_not_allowed());
        return Ok(request.into_response(response).map_into_right_body());
    }
    Ok(next.call(request).await?.map_into_left_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_lose_their_port_and_case() {
        assert_eq!(host_name("localhost:8080"), "localhost");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
        assert_eq!(host_name("Example.com"), "Example.com");
        let listed = HostPolicy::Listed(vec!["warrant.example.com".into()]);
        assert!(listed.allows(Some("Warrant.Example.COM:443")));
        assert!(listed.allows(Some("warrant.example.com.")));
        assert!(!listed.allows(Some("warrant.example.com.attacker.example")));
        assert!(!listed.allows(Some("localhost")));
    }

    #[test]
    fn demo_mode_answers_loopback_names_only() {
        let loopback = HostPolicy::Loopback;
        for host in ["localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST", "127.0.0.2"] {
            assert!(loopback.allows(Some(host)), "{host}");
        }
        for host in [
            "rebind.attacker.example",
            "rebind.attacker.example:8080",
            "localhost.attacker.example",
            "0.0.0.0",
            "\u{0}",
            "",
        ] {
            assert!(!loopback.allows(Some(host)), "{host}");
        }
        assert!(loopback.allows(None), "a request without a host is not a browser's");
        assert!(HostPolicy::Any.allows(Some("anything.example")));
    }

    /// Regression (issue 57.7): the published demo key on loopback with `demo.load = false` or
    /// `demo.users = ""` was not demo mode, so any `Host` was answered and a DNS-rebinding page
    /// could drive the server with admin tokens it signed itself with the published key.
    #[test]
    fn a_published_key_answers_loopback_names_only_whatever_the_demo_settings() {
        let mut no_corpus = Settings::defaults();
        no_corpus.demo.load = false;
        let mut no_users = Settings::defaults();
        no_users.demo.users.clear();
        let mut listed = no_corpus.clone();
        listed.server.allowed_hosts = vec!["warrant.example.com".into()];
        let mut test_key = Settings::defaults();
        test_key.auth.hs256_secret = "a-private-secret-of-this-deployment-32b".into();
        test_key.auth.rs256_public_key_file =
            format!("{}/fixtures/auth/test_rs256_public.pem", env!("CARGO_MANIFEST_DIR"));
        for (name, settings) in
            [("no corpus", no_corpus), ("no users", no_users), ("listed", listed), ("test key", test_key)]
        {
            assert_eq!(HostPolicy::from_settings(&settings), HostPolicy::Loopback, "{name}");
        }
    }

    #[test]
    fn the_policy_follows_the_settings() {
        let demo = Settings::defaults();
        assert_eq!(HostPolicy::from_settings(&demo), HostPolicy::Loopback);
        let mut private = Settings::defaults();
        private.auth.hs256_secret = "a-private-secret-of-this-deployment-32b".into();
        assert_eq!(HostPolicy::from_settings(&private), HostPolicy::Any);
        private.server.allowed_hosts = vec!["Warrant.Example.com".into()];
        assert_eq!(HostPolicy::from_settings(&private), HostPolicy::Listed(vec!["warrant.example.com".into()]));
    }
}
