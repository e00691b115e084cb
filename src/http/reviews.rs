//! `/v1/reviews` (role `reviewer`, acting only inside the token's own tenant): the review queue,
//! one item as the reviewer may see it now, and verdicts. Extract, check the role, call the
//! review layer, map errors.
//!
//! Invariants: every item is looked up in the caller's tenant, so another tenant's review id is
//! the same 404 `review_not_found` as a missing or malformed one; what a reviewer is shown of an
//! item is decided by [`crate::review::view`] under the reviewer's own current access, and sent as
//! that layer's views (which carry their schema); a verdict that fails any check
//! ([`crate::review::judge`]) stores nothing.

use futures::future::LocalBoxFuture;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::schema::integer;
use crate::domain::{Principal, Role};
use crate::retrieval::MAX_DOC_ID_CHARS;
use crate::review::item::{AbstentionLabel, ClaimLabel};
use crate::review::judge::{self, VerdictInput};
use crate::review::view::{self, PageView, ReviewView};
use crate::review::{ReviewError, ReviewStatus, canonical_review_id, now_ms};

use super::auth::Authenticated;
use super::contract::schema;
use super::error::{ApiError, ErrorBody, Forbidden, JsonBodyRejected, Unauthenticated};
use super::{AppState, json};

/// Most items on one page.
pub const MAX_PAGE: usize = 100;
/// Items on a page when `limit` is not given.
const DEFAULT_PAGE: usize = 20;

/// A verified caller holding the `reviewer` role (403 otherwise). Acts only in its own tenant.
pub struct Reviewer(pub Principal);

impl FromRequest for Reviewer {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let authenticated = Authenticated::from_request(request, payload);
        Box::pin(async move {
            let Authenticated(principal) = authenticated.await?;
            if principal.has_role(Role::Reviewer) {
                Ok(Reviewer(principal))
            } else {
                Err(ApiError::forbidden("reviewer role required"))
            }
        })
    }
}

/// `pending` or `reviewed`.
#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusFilter {
    /// Items without a verdict.
    Pending,
    /// Items with at least one verdict.
    Reviewed,
}

/// Query of `GET /v1/reviews`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Only items of this status (all when absent).
    #[serde(default)]
    #[param(inline)]
    pub status: Option<StatusFilter>,
    /// `next_cursor` of the previous page (absent: the newest items).
    #[serde(default)]
    pub cursor: Option<String>,
    /// Items per page.
    #[serde(default, deserialize_with = "optional_query_integer")]
    #[param(schema_with = limit_schema)]
    pub limit: Option<u64>,
}

fn optional_query_integer<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    crate::domain::schema::query_integer(deserializer).map(Some)
}

fn limit_schema() -> utoipa::openapi::Object {
    schema::unsigned(0, false, "items per page (default 20); any value is clamped to 1..=100")
}

/// Pages through the tenant's review queue, newest first. 400 codes: `invalid_query`,
/// `invalid_cursor`.
#[utoipa::path(get, path = "/v1/reviews", params(PageQuery),
    responses((status = 200, description = "a page of the queue, newest first", body = PageView),
              (status = 400, description = "`invalid_query` (an unknown parameter, a status other than pending or reviewed, a limit that is not an unsigned integer) or `invalid_cursor`", body = ErrorBody),
              Unauthenticated, Forbidden,
              (status = 503, description = "`reviews_unavailable`: the review store cannot be read", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn page(
    state: web::Data<AppState>,
    Reviewer(principal): Reviewer,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let query = query.into_inner();
    let before = query.cursor.as_deref().map(view::parse_cursor).transpose()?;
    let limit = query.limit.map_or(DEFAULT_PAGE, |limit| usize::try_from(limit).unwrap_or(MAX_PAGE)).clamp(1, MAX_PAGE);
    let status = query.status.map(|status| match status {
        StatusFilter::Pending => ReviewStatus::Pending,
        StatusFilter::Reviewed => ReviewStatus::Reviewed,
    });
    let summaries = state.reviews.page(&principal.tenant, status, before, limit).await?;
    Ok(json(&view::page(summaries, limit)))
}

/// The item `review_id` of the caller's tenant (canonical), or 404.
async fn stored(
    state: &AppState,
    principal: &Principal,
    request: &HttpRequest,
) -> Result<crate::review::StoredItem, ApiError> {
    let raw = request.match_info().get("review_id").unwrap_or_default();
    let review_id = canonical_review_id(raw).ok_or(ReviewError::NotFound)?;
    Ok(state.reviews.get(&principal.tenant, &review_id).await?.ok_or(ReviewError::NotFound)?)
}

/// One review item as the caller may see it now: each source under the caller's own access
/// (withheld, with nothing but its label, when not readable), the generator's text only when
/// every source is readable.
#[utoipa::path(get, path = "/v1/reviews/{review_id}",
    params(("review_id" = String, Path, description = "review id (a UUID)", example = "0b7e3c1a-5d2f-4e8a-9c6b-1f2e3d4c5b6a")),
    responses((status = 200, description = "the item as the caller may see it", body = ReviewView),
              Unauthenticated, Forbidden,
              (status = 404, description = "`review_not_found`: no such item in the caller's tenant (another tenant's id, a malformed one, one expired, or one whose write failed)", body = ErrorBody),
              (status = 503, description = "`reviews_unavailable`, or the backend cannot tell what the caller may read", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn item(
    state: web::Data<AppState>,
    Reviewer(principal): Reviewer,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let stored = stored(&state, &principal, &request).await?;
    let access = view::access(state.reader.as_ref(), &principal, &stored).await?;
    Ok(json(&view::view(state.reader.as_ref(), &principal, stored, &access).await?))
}

/// One claim's verdict.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimVerdictIn {
    /// The claim's `index` in the item.
    #[serde(deserialize_with = "integer")]
    #[schema(schema_with = index_schema)]
    pub index: u64,
    /// The judgement.
    #[schema(schema_with = claim_label_schema)]
    pub verdict: String,
}

/// The abstention's verdict.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AbstentionVerdictIn {
    /// The judgement.
    #[schema(schema_with = abstention_label_schema)]
    pub verdict: String,
    /// The document that answers the question, when the reviewer names one.
    #[serde(default)]
    #[schema(schema_with = doc_id_schema)]
    pub doc_id: Option<String>,
}

/// Body of `POST /v1/reviews/{review_id}/verdicts`: at least one claim or the abstention.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerdictBody {
    /// Claims judged, each at most once.
    #[serde(default)]
    pub claims: Vec<ClaimVerdictIn>,
    /// The abstention judged (only on an item that abstained).
    #[serde(default)]
    pub abstention: Option<AbstentionVerdictIn>,
    /// A note (at most `review.max_note_chars` characters, 2000 by default).
    #[serde(default)]
    pub note: Option<String>,
}

fn index_schema() -> utoipa::openapi::Object {
    schema::unsigned(0, false, "the claim's index in the item (`claims[].index`)")
}

fn labels_schema(names: &[&str], description: &str) -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(names.iter().copied()))
        .description(Some(description))
        .build()
}

fn claim_label_schema() -> utoipa::openapi::Object {
    labels_schema(ClaimLabel::NAMES, "another value is 400 `unknown_verdict`")
}

fn abstention_label_schema() -> utoipa::openapi::Object {
    labels_schema(AbstentionLabel::NAMES, "another value is 400 `unknown_verdict`")
}

fn doc_id_schema() -> utoipa::openapi::Object {
    let mut doc_id = schema::not_blank(MAX_DOC_ID_CHARS, "a document id (1..=256 characters, not blank)");
    doc_id.schema_type = utoipa::openapi::schema::SchemaType::from_iter([
        utoipa::openapi::schema::Type::String,
        utoipa::openapi::schema::Type::Null,
    ]);
    doc_id
}

/// The verdict stored.
#[derive(Debug, Serialize, ToSchema)]
pub struct VerdictOut {
    /// The item.
    pub review_id: String,
    /// `reviewed`.
    pub status: String,
    /// The reviewer's `sub`, as stored with the verdict.
    pub reviewer: String,
    /// When it was stored, ms since the Unix epoch.
    pub at_ms: u64,
}

/// Adds the caller's verdict to an item (several reviewers may judge one item; each verdict is
/// kept with its reviewer and time). Claims are judged by their `index`; only a reviewer shown
/// the item's claims may judge them. 400 codes: `empty_verdict`, `unknown_verdict`,
/// `claim_out_of_range`, `duplicate_claim_verdict`, `no_abstention`, `invalid_doc_id`,
/// `note_too_long`. Nothing is stored on any error.
#[utoipa::path(post, path = "/v1/reviews/{review_id}/verdicts",
    params(("review_id" = String, Path, description = "review id (a UUID)", example = "0b7e3c1a-5d2f-4e8a-9c6b-1f2e3d4c5b6a")),
    request_body = VerdictBody,
    responses((status = 200, description = "the verdict is stored", body = VerdictOut),
              JsonBodyRejected, Unauthenticated,
              (status = 403, description = "`forbidden` (no reviewer role) or `claims_not_readable` (claims judged by a reviewer who may not read every source of the item)", body = ErrorBody),
              (status = 404, description = "`review_not_found`: no such item in the caller's tenant", body = ErrorBody),
              (status = 409, description = "`too_many_verdicts`: the item holds `review.max_verdicts_per_item` verdicts already", body = ErrorBody),
              (status = 503, description = "`reviews_unavailable`, or the backend cannot tell what the caller may read", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn verdict(
    state: web::Data<AppState>,
    Reviewer(principal): Reviewer,
    request: HttpRequest,
    body: web::Json<VerdictBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let stored = stored(&state, &principal, &request).await?;
    let access = view::access(state.reader.as_ref(), &principal, &stored).await?;
    let input = VerdictInput {
        claims: body.claims.into_iter().map(|claim| (claim.index, claim.verdict)).collect(),
        abstention: body.abstention.map(|abstention| (abstention.verdict, abstention.doc_id)),
        note: body.note,
    };
    let verdict =
        judge::judge(&stored.item, &access, &principal, input, state.settings.review.max_note_chars, now_ms())?;
    let review_id = stored.item.review_id;
    let max_verdicts = state.settings.review.max_verdicts_per_item;
    if !state.reviews.add_verdict(&principal.tenant, &review_id, &verdict, max_verdicts).await? {
        return Err(ReviewError::NotFound.into());
    }
    metrics::counter!("warrant_review_verdicts_total").increment(1);
    Ok(json(&VerdictOut {
        review_id,
        status: ReviewStatus::Reviewed.as_str().to_owned(),
        reviewer: verdict.reviewer,
        at_ms: verdict.at_ms,
    }))
}
