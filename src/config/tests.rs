//! Unit tests of `config`.

use super::*;

const DEFAULT: &str = include_str!("../../config/default.toml");

#[test]
fn defaults_are_valid() {
    Settings::defaults();
}

/// Kinds were strings matched later with a fallback, so `generator.kind = "opnai"` quietly
/// ran the extractive generator. They are enums now, and an unknown name names its key.
#[test]
fn kinds_and_formats_are_parsed_once_and_unknown_names_refused_naming_the_key() {
    let settings = Settings::from_toml(
        DEFAULT,
        [
            ("WARRANT__EMBEDDER__KIND".to_owned(), "minilm".to_owned()),
            ("WARRANT__GENERATOR__KIND".to_owned(), "openai".to_owned()),
            ("WARRANT__SERVER__LOG_FORMAT".to_owned(), "json".to_owned()),
            ("WARRANT__RETRIEVAL__RERANKER".to_owned(), "sentences".to_owned()),
        ],
    )
    .unwrap();
    assert_eq!(settings.retrieval.reranker, RerankerKind::Sentences);
    assert_eq!(Settings::defaults().retrieval.reranker, RerankerKind::Identity);
    assert_eq!(settings.embedder.kind, EmbedderKind::Minilm);
    assert_eq!(settings.generator.kind, GeneratorKind::Openai);
    assert_eq!(settings.server.log_format, LogFormat::Json);
    for (variable, key) in [
        ("WARRANT__EMBEDDER__KIND", "embedder.kind"),
        ("WARRANT__GENERATOR__KIND", "generator.kind"),
        ("WARRANT__SERVER__LOG_FORMAT", "server.log_format"),
        ("WARRANT__RETRIEVAL__RERANKER", "retrieval.reranker"),
    ] {
        let error = Settings::from_toml(DEFAULT, [(variable.to_owned(), "opnai".to_owned())]).unwrap_err();
        let message = error.to_string();
        assert!(message.contains(key) && message.contains("opnai"), "{variable}: {message}");
    }
    for kind in EmbedderKind::NAMES {
        assert_eq!(kind.parse::<EmbedderKind>().unwrap().as_str(), *kind);
    }
}

#[test]
fn environment_overrides_and_rejects_unknown_keys() {
    let settings = Settings::from_toml(DEFAULT, [("WARRANT__INDEX__SHARDS".to_owned(), "3".to_owned())]).unwrap();
    assert_eq!(settings.index.shards, 3);
    let unknown = Settings::from_toml(DEFAULT, [("WARRANT__INDEX__SHRADS".to_owned(), "3".to_owned())]);
    assert!(matches!(unknown, Err(ConfigError::Parse(message)) if message.contains("shrads")));
}

#[test]
fn out_of_range_values_are_rejected_with_the_key_named() {
    let error = Settings::from_toml(DEFAULT, [("WARRANT__INDEX__SHARDS".to_owned(), "0".to_owned())]).unwrap_err();
    assert!(error.to_string().contains("index.shards"));
    let error = Settings::from_toml(DEFAULT, [("WARRANT__VERIFIER__SENTENCE_CACHE".to_owned(), "2000000".to_owned())])
        .unwrap_err();
    assert!(error.to_string().contains("verifier.sentence_cache"));
    for bad in ["0", "600001"] {
        let variable = "WARRANT__STORAGE__POSTGRES__ACQUIRE_TIMEOUT_MS".to_owned();
        let error = Settings::from_toml(DEFAULT, [(variable, bad.to_owned())]).unwrap_err();
        assert!(error.to_string().contains("storage.postgres.acquire_timeout_ms"), "{bad}");
    }
    for bad in ["0", "2000000"] {
        let error =
            Settings::from_toml(DEFAULT, [("WARRANT__EMBEDDER__QUERY_CACHE".to_owned(), bad.to_owned())]).unwrap_err();
        assert!(error.to_string().contains("embedder.query_cache"), "{bad}");
    }
}

#[test]
fn loopback_binds_are_recognized() {
    for loopback in [
        "127.0.0.1:8080",
        "127.1.2.3:80",
        "[::1]:8080",
        "::1",
        "127.0.0.1",
        "localhost:8080",
        "LOCALHOST:1",
        "[::ffff:127.0.0.1]:80",
    ] {
        assert!(is_loopback_bind(loopback), "{loopback}");
    }
    for exposed in
        ["0.0.0.0:8080", "[::]:8080", "10.0.0.1:8080", "192.168.1.2:80", "example.com:8080", "localhost.example:80", ""]
    {
        assert!(!is_loopback_bind(exposed), "{exposed}");
    }
}

#[test]
fn the_demo_key_serves_only_on_loopback() {
    let defaults = Settings::defaults();
    assert_eq!(defaults.auth.hs256_secret, DEMO_HS256_SECRET);
    defaults.validate_for_serving().expect("the demo runs on 127.0.0.1");
    let exposed = |overrides: &[(&str, &str)]| {
        let mut environment = vec![("WARRANT__SERVER__BIND".to_owned(), "0.0.0.0:8080".to_owned())];
        environment.extend(overrides.iter().map(|(key, value)| (key.to_string(), value.to_string())));
        Settings::from_toml(DEFAULT, environment).expect("valid settings").validate_for_serving()
    };
    let message = exposed(&[]).unwrap_err().to_string();
    for named in ["auth.hs256_secret", "server.bind", "0.0.0.0:8080", "WARRANT__AUTH__HS256_SECRET"] {
        assert!(message.contains(named), "{named}: {message}");
    }
    exposed(&[("WARRANT__AUTH__HS256_SECRET", "a-secret-of-our-own-that-is-32-bytes-or-more")]).expect("own secret");
    exposed(&[("WARRANT__AUTH__RS256_PUBLIC_KEY_FILE", "/keys/idp.pem")]).expect("hs256 off with rs256");
    let both =
        [("WARRANT__AUTH__RS256_PUBLIC_KEY_FILE", "/keys/idp.pem"), ("WARRANT__AUTH__ALLOW_HS256_WITH_RS256", "true")];
    assert!(exposed(&both).is_err(), "the demo key is accepted again when hs256 is allowed beside rs256");
}

#[test]
fn a_short_hs256_secret_serves_only_on_loopback() {
    let serving = |bind: &str, secret: &str| {
        let environment = [
            ("WARRANT__SERVER__BIND".to_owned(), bind.to_owned()),
            ("WARRANT__AUTH__HS256_SECRET".to_owned(), secret.to_owned()),
        ];
        Settings::from_toml(DEFAULT, environment).expect("valid settings").validate_for_serving()
    };
    let short = "x".repeat(MIN_HS256_SECRET_BYTES - 1);
    let long = "x".repeat(MIN_HS256_SECRET_BYTES);
    for bind in ["0.0.0.0:8080", "10.0.0.1:80", "[::]:8080"] {
        let message = serving(bind, "abcde").unwrap_err().to_string();
        assert!(message.contains("auth.hs256_secret") && message.contains("32 bytes"), "{message}");
        assert!(serving(bind, &short).is_err(), "{bind}: 31 bytes");
        serving(bind, &long).expect("32 bytes serve anywhere");
    }
    serving("127.0.0.1:8080", "abcde").expect("a short secret is the operator's business on loopback");
    // Off when an RS256 key replaces HS256.
    let mut settings =
        Settings::from_toml(DEFAULT, [("WARRANT__SERVER__BIND".to_owned(), "0.0.0.0:1".to_owned())]).unwrap();
    settings.auth.hs256_secret = "abcde".into();
    settings.auth.rs256_public_key_file = "/keys/idp.pem".into();
    settings.validate_for_serving().expect("hs256 is off beside rs256");
}

/// Issue 44: a candidate budget below `top_k_max` was accepted, so a request for `top_k_max`
/// chunks could come back short though more were authorized.
#[test]
fn candidate_budgets_below_top_k_max_are_refused() {
    for key in ["WARRANT__RETRIEVAL__LEXICAL_CANDIDATES", "WARRANT__RETRIEVAL__VECTOR_CANDIDATES"] {
        let error = Settings::from_toml(DEFAULT, [(key.to_owned(), "19".to_owned())]).unwrap_err().to_string();
        assert!(error.contains("retrieval.top_k_max"), "{key}: {error}");
        Settings::from_toml(DEFAULT, [(key.to_owned(), "20".to_owned())]).expect("equal to top_k_max");
    }
}

#[test]
fn loopback_host_names_are_recognized() {
    for loopback in ["localhost", "LocalHost", "localhost.", "127.0.0.1", "127.9.9.9", "[::1]"] {
        assert!(is_loopback_host(loopback), "{loopback}");
    }
    for other in ["rebind.attacker.example", "localhost.attacker.example", "0.0.0.0", "10.0.0.1", "[::]", "", "[::1"] {
        assert!(!is_loopback_host(other), "{other}");
    }
}

#[test]
fn acl_caps_and_allowed_hosts_are_validated() {
    let with = |key: &str, value: &str| Settings::from_toml(DEFAULT, [(key.to_owned(), value.to_owned())]);
    assert!(with("WARRANT__SERVER__MAX_ACL_NAMES_PER_DOCUMENT", "0").is_err());
    let error = with("WARRANT__SERVER__MAX_ACL_NAMES_PER_CHANGE", "5000").unwrap_err().to_string();
    assert!(error.contains("server.max_acl_names_per_change"), "{error}");
    let error = with("WARRANT__SERVER__ALLOWED_HOSTS", r#"["https://x.example"]"#).unwrap_err().to_string();
    assert!(error.contains("server.allowed_hosts"), "{error}");
    with("WARRANT__SERVER__ALLOWED_HOSTS", r#"["warrant.example.com", "[::1]"]"#).expect("host names");
    let error = with("WARRANT__AUTH__REPLICA_SUBJECTS", r#"[" "]"#).unwrap_err().to_string();
    assert!(error.contains("auth.replica_subjects"), "{error}");
}

#[test]
fn hs256_is_off_beside_rs256_unless_allowed() {
    let mut auth = Settings::defaults().auth;
    assert!(auth.hs256_enabled() && !auth.allow_hs256_with_rs256);
    auth.rs256_public_key_file = "/keys/idp.pem".into();
    assert!(!auth.hs256_enabled());
    auth.allow_hs256_with_rs256 = true;
    assert!(auth.hs256_enabled());
    auth.hs256_secret.clear();
    assert!(!auth.hs256_enabled());
}

#[test]
fn sentence_cache_can_be_turned_off_from_the_environment() {
    assert_eq!(Settings::defaults().verifier.sentence_cache, 16_384);
    let settings =
        Settings::from_toml(DEFAULT, [("WARRANT__VERIFIER__SENTENCE_CACHE".to_owned(), "0".to_owned())]).unwrap();
    assert_eq!(settings.verifier.sentence_cache, 0);
}

#[test]
fn a_judge_verifier_needs_its_model_and_takes_it_from_the_environment() {
    let judge = |pairs: &[(&str, &str)]| {
        let mut environment = vec![("WARRANT__VERIFIER__KIND".to_owned(), "judge".to_owned())];
        environment.extend(pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())));
        Settings::from_toml(DEFAULT, environment)
    };
    let message = judge(&[]).unwrap_err().to_string();
    assert!(message.contains("verifier.judge.base_url") && message.contains("verifier.judge.model"), "{message}");
    let settings = judge(&[
        ("WARRANT__VERIFIER__JUDGE__BASE_URL", "http://127.0.0.1:18080/v1"),
        ("WARRANT__VERIFIER__JUDGE__MODEL", "qwen"),
    ])
    .unwrap();
    assert_eq!(settings.verifier.kind, VerifierKind::Judge);
    assert_eq!(settings.verifier.judge.model, "qwen");
    assert_eq!(settings.verifier.judge.min_coverage, 0.25);
    let message = judge(&[
        ("WARRANT__VERIFIER__JUDGE__BASE_URL", "http://127.0.0.1:18080/v1"),
        ("WARRANT__VERIFIER__JUDGE__MODEL", "qwen"),
        ("WARRANT__VERIFIER__JUDGE__MIN_COVERAGE", "1.5"),
    ])
    .unwrap_err()
    .to_string();
    assert!(message.contains("verifier.judge.min_coverage"), "{message}");
    // The default stays lexical and needs nothing.
    assert_eq!(Settings::defaults().verifier.kind, VerifierKind::Lexical);
}

/// `server.request_timeout_ms` (issue 59): 5 s by default, refused outside 100..=600000 naming
/// the key (0 would answer every read 503 at once).
#[test]
fn the_request_deadline_defaults_to_five_seconds_and_is_bounded() {
    assert_eq!(Settings::defaults().server.request_timeout_ms, 5_000);
    for wrong in ["0", "99", "600001"] {
        let error =
            Settings::from_toml(DEFAULT, [("WARRANT__SERVER__REQUEST_TIMEOUT_MS".to_owned(), wrong.to_owned())])
                .unwrap_err();
        assert!(error.to_string().contains("server.request_timeout_ms"), "{wrong}: {error}");
    }
}
