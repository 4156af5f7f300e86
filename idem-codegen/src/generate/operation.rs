//! What the client and the server type alike for one operation, so they
//! agree: whether its body is required, which header is its key, how a
//! query parameter is serialized, its doc comment's head, and each
//! response's body and headers.

use quote::format_ident;

use super::types::{Ty, TypeSpace};
use crate::model::schema::Kind;
use crate::model::shape::encoding::{Encoding, encoding_of};
use crate::model::{KeySource, Operation};
use crate::vocab::KeyRequirement;

/// Whether `op`'s body must be sent: only where the spec says so, and never
/// on a method whose body has no defined meaning (RFC 9110 §9.3.1, §9.3.2,
/// §9.3.5). Client and server agree on it.
pub(crate) fn body_required(op: &Operation) -> bool {
    op.request_body.as_ref().is_some_and(|b| b.required)
        && !matches!(op.method.as_str(), "GET" | "HEAD" | "DELETE")
}

pub(crate) fn is_key_parameter(op: &Operation, p: &crate::model::Parameter) -> bool {
    p.location == "header"
        && op.key.requirement != KeyRequirement::None
        && matches!(&op.key.source, Some(KeySource::Header { name, .. }) if name.eq_ignore_ascii_case(&p.name))
}

pub(crate) fn query_style(
    style: Option<&str>,
    explode: Option<bool>,
) -> (proc_macro2::Ident, bool) {
    let (style, default_explode) = match style {
        Some("deepObject") => ("DeepObject", true),
        Some("spaceDelimited") => ("SpaceDelimited", false),
        Some("pipeDelimited") => ("PipeDelimited", false),
        _ => ("Form", true),
    };
    (
        format_ident!("{}", style),
        explode.unwrap_or(default_explode),
    )
}

/// The start of an operation's doc comment, client and server alike: its
/// summary, its description, and its method and path.
pub(crate) fn doc_head(op: &Operation) -> String {
    let mut doc = String::new();
    if let Some(summary) = &op.summary {
        doc.push_str(summary.trim());
        doc.push_str("\n\n");
    }
    if let Some(description) = &op.description
        && Some(description.trim()) != op.summary.as_deref().map(str::trim)
    {
        doc.push_str(description.trim());
        doc.push_str("\n\n");
    }
    doc.push_str(&format!("`{} {}`\n\n", op.method, op.path));
    doc
}

/// What one documented response carries, as both the client (decoding it)
/// and the server (sending it) type it.
pub(crate) struct ResponseShape {
    /// A success (2xx, 1xx, 3xx, or `default` when no 2xx is documented).
    pub(crate) success: bool,
    pub(crate) body: Option<ResponseBody>,
    /// Documented headers other than `Content-Type`: wire name and type.
    pub(crate) headers: Vec<(String, Ty)>,
}

pub(crate) struct ResponseBody {
    pub(crate) ty: Ty,
    /// `Json`, `Text` or `Bytes`.
    pub(crate) enc: Encoding,
    pub(crate) media: String,
}

/// The shape of `response`: the body in its preferred media type (JSON,
/// then text, then the rest as bytes), inline types named after the
/// operation and status.
pub(crate) fn response_shape(
    space: &mut TypeSpace<'_>,
    response: &crate::model::Response,
    camel: &str,
    has_success: bool,
) -> ResponseShape {
    let success = response.status.starts_with('2')
        || (!has_success && response.status == "default")
        || response.status.starts_with('1')
        || response.status.starts_with('3');
    let context = if success {
        format!("{camel}Response{}", status_suffix(&response.status))
    } else {
        format!("{camel}Error{}", status_suffix(&response.status))
    };
    let media = response
        .media
        .iter()
        .min_by_key(|m| match encoding_of(&m.media_type) {
            Encoding::Json => 0,
            Encoding::Text => 1,
            _ => 2,
        });
    let body = media.map(|m| {
        let enc = encoding_of(&m.media_type);
        let ty = match (enc, &m.schema) {
            (Encoding::Text, _) => Ty::String,
            (Encoding::Bytes | Encoding::Multipart | Encoding::Form, _) => Ty::Bytes,
            (Encoding::Json, Some(schema)) => {
                if matches!(
                    schema.kind,
                    Kind::String(crate::model::schema::StringFormat::Binary)
                ) {
                    Ty::Bytes
                } else {
                    space.ty(schema, &context)
                }
            }
            (Encoding::Json, None) => Ty::Value,
        };
        let enc = match (&ty, enc) {
            (Ty::Bytes, _) => Encoding::Bytes,
            (_, Encoding::Text) => Encoding::Text,
            _ => Encoding::Json,
        };
        ResponseBody {
            ty,
            enc,
            media: m.media_type.clone(),
        }
    });
    let headers = response
        .header_specs
        .iter()
        .filter(|h| !h.name.eq_ignore_ascii_case("content-type") && header_name(&h.name))
        .map(|h| {
            let ty = match h.schema.as_ref().map(|s| &s.kind) {
                Some(Kind::Integer(_)) => Ty::I64,
                Some(Kind::Number(_)) => Ty::F64,
                Some(Kind::Boolean) => Ty::Bool,
                _ => Ty::String,
            };
            (h.name.clone(), ty)
        })
        .collect();
    ResponseShape {
        success,
        body,
        headers,
    }
}

/// Whether `name` can be an HTTP header's name (an RFC 9110 token).
pub(crate) fn header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(crate) fn status_suffix(status: &str) -> String {
    match status {
        "default" => "Default".to_owned(),
        other => other.to_owned(),
    }
}

pub(crate) fn status_variant(status: &str) -> String {
    let named = match status {
        "200" => "Ok",
        "201" => "Created",
        "202" => "Accepted",
        "203" => "NonAuthoritative",
        "204" => "NoContent",
        "206" => "PartialContent",
        "301" => "MovedPermanently",
        "302" => "Found",
        "304" => "NotModified",
        "400" => "BadRequest",
        "401" => "Unauthorized",
        "402" => "PaymentRequired",
        "403" => "Forbidden",
        "404" => "NotFound",
        "405" => "MethodNotAllowed",
        "406" => "NotAcceptable",
        "409" => "Conflict",
        "410" => "Gone",
        "412" => "PreconditionFailed",
        "413" => "PayloadTooLarge",
        "415" => "UnsupportedMediaType",
        "422" => "UnprocessableEntity",
        "429" => "TooManyRequests",
        "500" => "InternalServerError",
        "502" => "BadGateway",
        "503" => "ServiceUnavailable",
        "504" => "GatewayTimeout",
        "default" => "Other",
        _ => "",
    };
    if named.is_empty() {
        format!("Status{}", status.to_ascii_uppercase())
    } else {
        named.to_owned()
    }
}
