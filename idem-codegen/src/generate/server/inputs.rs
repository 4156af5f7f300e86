//! An operation's inputs as the generated router reads them: the body in
//! each media type it accepts, and the media-type checks behind `415` and
//! `406`.

use proc_macro2::TokenStream;
use quote::quote;

use super::wiring::{Wiring, rt};
use crate::generate::naming::Namer;
use crate::generate::operation::body_required;
use crate::generate::types::{Site, Ty, TypeSpace, doc_attrs, ident};
use crate::model::Operation;
use crate::model::shape::encoding::{Encoding, encoding_name, encoding_of};

/// Whether the operation takes a file (one body encoding, raw bytes:
/// `application/octet-stream`, an image, `format: binary`) that the
/// handler reads as it arrives, an [`Upload`](idem_runtime::server::support::Upload).
/// A phased operation keeps its body for the completer, so it reads it
/// whole, as does one whose key is a body field.
pub(super) fn takes_upload(op: &Operation, wiring: Wiring) -> bool {
    let Some(body) = &op.request_body else {
        return false;
    };
    wiring != Wiring::Phased
        && !matches!(op.key.source, Some(crate::model::KeySource::Body { .. }))
        && !body.media.is_empty()
        && body
            .media
            .iter()
            .all(|m| encoding_of(&m.media_type) == Encoding::Bytes)
}

/// The body field of the input, and any enum it needs.
pub(super) fn request_body(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
    wiring: Wiring,
    items: &mut Vec<TokenStream>,
    sites: &mut Vec<Site>,
) -> Option<InputField> {
    let rt = rt();
    let body = op.request_body.as_ref()?;
    if takes_upload(op, wiring) {
        return Some(upload_field(op, body));
    }
    let mut choices = Vec::new();
    for media in &body.media {
        let enc = encoding_of(&media.media_type);
        if !choices.iter().any(|(_, e, _)| *e == enc) {
            choices.push((media, enc, Ty::Unit));
        }
    }
    if choices.is_empty() {
        return None;
    }
    // A resumed phased request has no content type: it reads its first.
    if wiring == Wiring::Phased {
        choices.truncate(1);
    }
    let single = choices.len() == 1;
    for (media, enc, ty) in &mut choices {
        let context = if single {
            format!("{camel}Request")
        } else {
            format!("{camel}Request{}", encoding_name(*enc))
        };
        let t = match (&*enc, &media.schema) {
            (Encoding::Text, _) => Ty::String,
            (Encoding::Bytes, _) => Ty::Bytes,
            (_, Some(schema)) => space.ty(schema, &context),
            (_, None) => Ty::Value,
        };
        *ty = match t {
            Ty::Option(inner) => *inner,
            other => other,
        };
    }
    let (decl_ty, value) = if single {
        let (media, enc, ty) = &choices[0];
        if let (Encoding::Json | Encoding::Form | Encoding::Multipart, Some(schema)) =
            (enc, &media.schema)
        {
            sites.push(Site {
                path: "body".to_owned(),
                ty: if body_required(op) {
                    ty.clone()
                } else {
                    Ty::Option(Box::new(ty.clone()))
                },
                checks: space.checks(schema),
                value: quote!(&input.body),
            });
        }
        let tokens = space.tokens(ty);
        (tokens.clone(), read_body(*enc, &tokens))
    } else {
        let enum_ident = ident(&space.namer.unique(&format!("{camel}RequestBody")));
        let mut namer = Namer::default();
        let mut variants = Vec::new();
        let mut arms = Vec::new();
        let mut accepted = Vec::new();
        for (media, enc, ty) in &choices {
            let tokens = space.tokens(ty);
            let variant = ident(&namer.unique(encoding_name(*enc)));
            let media_type = &media.media_type;
            let doc = format!(" `{media_type}`");
            variants.push(quote!(#[doc = #doc] #variant(#tokens),));
            // Every declared type of this encoding reads into the variant
            // (`application/json` and `application/vnd.x+json` alike).
            let essences = essences_of(&body.media, *enc);
            accepted.extend(essences.iter().cloned());
            let value = read_body(*enc, &tokens);
            arms.push(quote!(#(#essences)|* => #enum_ident::#variant(#value),));
            if let (Encoding::Json | Encoding::Form | Encoding::Multipart, Some(schema)) =
                (enc, &media.schema)
            {
                // The variant the request arrived in, when it is this one.
                let pick = if body_required(op) {
                    quote!(#enum_ident::#variant(value))
                } else {
                    quote!(::std::option::Option::Some(#enum_ident::#variant(value)))
                };
                sites.push(Site {
                    path: "body".to_owned(),
                    ty: Ty::Option(Box::new(ty.clone())),
                    checks: space.checks(schema),
                    value: quote! {
                        &match &input.body {
                            #pick => ::std::option::Option::Some(value),
                            _ => ::std::option::Option::None,
                        }
                    },
                });
            }
        }
        let doc = " The request body, in the media type the caller sent.";
        items.push(quote! {
            #[doc = #doc]
            #[derive(Debug, Clone, PartialEq)]
            pub enum #enum_ident {
                #(#variants)*
            }
        });
        let value = quote! {
            match inbound.content_type().as_str() {
                #(#arms)*
                other => return ::std::result::Result::Err(#rt::Rejection::media_type(other, &[#(#accepted),*])),
            }
        };
        (quote!(#enum_ident), value)
    };
    let (decl_ty, read) = if body_required(op) {
        (decl_ty, value)
    } else {
        (
            quote!(::std::option::Option<#decl_ty>),
            quote!(if inbound.has_body() { ::std::option::Option::Some(#value) } else { ::std::option::Option::None }),
        )
    };
    let mut doc = body.description.clone().unwrap_or_default();
    if !doc.is_empty() {
        doc.push_str("\n\n");
    }
    doc.push_str("The request body.");
    let doc = doc_attrs(&doc);
    Some(InputField {
        decl: quote!(#doc pub body: #decl_ty,),
        read: quote!(body: #read,),
    })
}

/// The body field of an operation that takes a file: an
/// [`Upload`](idem_runtime::server::support::Upload) the handler reads.
fn upload_field(op: &Operation, body: &crate::model::RequestBody) -> InputField {
    let rt = rt();
    let mut doc = body.description.clone().unwrap_or_default();
    if !doc.is_empty() {
        doc.push_str("\n\n");
    }
    doc.push_str(
        "The uploaded body, read chunk by chunk as it arrives (`.chunk().await`), \
         never whole in memory; a body over the route's cap is refused.",
    );
    let doc = doc_attrs(&doc);
    let (ty, read) = if body_required(op) {
        (quote!(#rt::Upload), quote!(inbound.upload()))
    } else {
        (
            quote!(::std::option::Option<#rt::Upload>),
            quote!(inbound.has_body().then(|| inbound.upload())),
        )
    };
    InputField {
        decl: quote!(#doc pub body: #ty,),
        read: quote!(body: #read,),
    }
}

/// How the router reads a body of `enc` into the type `ty`.
fn read_body(enc: Encoding, ty: &TokenStream) -> TokenStream {
    match enc {
        Encoding::Json => quote!(inbound.json::<#ty>()?),
        Encoding::Form => quote!(inbound.form::<#ty>()?),
        Encoding::Multipart => quote!(inbound.multipart::<#ty>().await?),
        Encoding::Text => quote!(inbound.text()?),
        Encoding::Bytes => quote!(inbound.bytes()),
    }
}

/// The declared media types of encoding `enc`, lowercased and without
/// parameters, each once, in the spec's order.
fn essences_of(media: &[crate::model::Media], enc: Encoding) -> Vec<String> {
    media
        .iter()
        .filter(|m| encoding_of(&m.media_type) == enc)
        .map(|m| {
            m.media_type
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .fold(Vec::new(), |mut all, e| {
            if !all.contains(&e) {
                all.push(e);
            }
            all
        })
}

/// Whether the body is required, and the media types the operation
/// declares for it; `None` without a request body.
pub(super) fn media_check(op: &Operation) -> Option<(bool, Vec<String>)> {
    let body = op.request_body.as_ref()?;
    let mut accepted: Vec<String> = Vec::new();
    for media in &body.media {
        let essence = media.media_type.split(';').next().unwrap_or("").trim();
        if !essence.is_empty() && !accepted.iter().any(|a| a.eq_ignore_ascii_case(essence)) {
            accepted.push(essence.to_owned());
        }
    }
    (!accepted.is_empty()).then_some((body_required(op), accepted))
}

/// The media types the operation answers in, when one of its responses
/// declares several (only then can `Accept` rule one out).
pub(super) fn acceptable_check(op: &Operation) -> Option<Vec<String>> {
    let several = op.responses.iter().any(|r| r.media.len() > 1);
    if !several {
        return None;
    }
    let mut offered: Vec<String> = Vec::new();
    for media in op.responses.iter().flat_map(|r| r.media.iter()) {
        let essence = media.media_type.split(';').next().unwrap_or("").trim();
        if !essence.is_empty() && !offered.iter().any(|o| o.eq_ignore_ascii_case(essence)) {
            offered.push(essence.to_owned());
        }
    }
    Some(offered)
}

/// One input field: its declaration and the expression reading it.
pub(super) struct InputField {
    pub(super) decl: TokenStream,
    pub(super) read: TokenStream,
}
