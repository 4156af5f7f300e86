//! An operation's reply enum: one variant per documented status, its
//! headers as fields, and how each is written as a response.

use proc_macro2::TokenStream;
use quote::quote;

use super::wiring::rt;
use crate::generate::naming::{self, Namer};
use crate::generate::operation::{response_shape, status_variant};
use crate::generate::types::{Ty, TypeSpace, doc_attrs, ident};
use crate::model::Operation;
use crate::model::shape::encoding::Encoding;

/// One documented response of the reply enum.
pub(super) struct Answer {
    pub(super) variant: proc_macro2::Ident,
    pub(super) status: String,
    /// The body type and how it is written.
    pub(super) body: Option<(Ty, Encoding, String)>,
    /// Documented headers: field, wire name, type.
    pub(super) headers: Vec<(proc_macro2::Ident, String, Ty)>,
    /// Its name under `components/responses`, when it is shared.
    pub(super) component: Option<String>,
}

pub(super) fn reply_enum(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
    reply_ident: &proc_macro2::Ident,
    items: &mut Vec<TokenStream>,
) -> TokenStream {
    let rt = rt();
    let answers = answers(space, op, camel);
    let mut variants = Vec::new();
    let mut arms = Vec::new();
    for a in &answers {
        let variant = &a.variant;
        let (exact, fallback, code) = status_code(&rt, &a.status);
        let doc = variant_doc(op, &a.status, exact.is_none(), fallback);
        let write = |value: TokenStream| match &a.body {
            None => quote!(#rt::empty(#code)),
            Some((_, Encoding::Text, media)) => quote!(#rt::text(#code, #media, #value)),
            Some((_, Encoding::Bytes, media)) => quote!(#rt::bytes(#code, #media, #value)),
            Some((_, _, media)) => quote!(#rt::json(#code, #media, &#value)),
        };
        let status_field = exact
            .is_none()
            .then(|| quote!(::idem_runtime::rt::http::StatusCode));
        if a.headers.is_empty() {
            let payload = a.body.as_ref().map(|(ty, _, _)| space.tokens(ty));
            let reply = write(quote!(body));
            let (decl, pattern) = match (&status_field, &payload) {
                (None, None) => (quote!(#variant), quote!(Self::#variant)),
                (None, Some(p)) => (quote!(#variant(#p)), quote!(Self::#variant(body))),
                (Some(s), None) => (quote!(#variant(#s)), quote!(Self::#variant(status))),
                (Some(s), Some(p)) => (
                    quote!(#variant(#s, #p)),
                    quote!(Self::#variant(status, body)),
                ),
            };
            variants.push(quote!(#doc #decl,));
            arms.push(quote!(#pattern => #reply,));
        } else if let Some(component) = a.component.as_deref().filter(|_| exact.is_some()) {
            // A response the spec shares: the struct the client decodes too.
            let headers: Vec<(String, Ty)> = a
                .headers
                .iter()
                .map(|(_, wire, ty)| (wire.clone(), ty.clone()))
                .collect();
            let body = a.body.as_ref().map(|(ty, _, _)| ty);
            let shared = space.shared_response(component, body, &headers);
            let struct_ident = ident(&shared.name);
            let sets = shared.headers.iter().map(|(field, wire)| {
                let field = ident(field);
                quote!(reply = #rt::header(reply, #wire, answer.#field.as_ref());)
            });
            let reply = write(quote!(answer.body));
            variants.push(quote!(#doc #variant(#struct_ident),));
            arms.push(quote!(Self::#variant(answer) => {
                let mut reply = #reply;
                #(#sets)*
                reply
            }));
        } else {
            // Documented headers: the variant carries a struct.
            let struct_ident = ident(&space.namer.unique(&format!("{}{}", reply_ident, variant)));
            let mut fields = Vec::new();
            if let Some(s) = &status_field {
                fields.push(quote!(#[doc = " The status to send."] pub status: #s,));
            }
            if let Some((ty, _, _)) = &a.body {
                let t = space.tokens(ty);
                fields.push(quote!(#[doc = " The response body."] pub body: #t,));
            }
            let mut sets = Vec::new();
            for (field, wire, ty) in &a.headers {
                let t = space.tokens(ty);
                let doc = format!(" The `{wire}` response header.");
                fields.push(quote!(#[doc = #doc] pub #field: ::std::option::Option<#t>,));
                sets.push(quote!(reply = #rt::header(reply, #wire, answer.#field.as_ref());));
            }
            let doc_struct = format!(" A `{}` answer with its documented headers.", a.status);
            items.push(quote! {
                #[doc = #doc_struct]
                #[derive(Debug, Clone, PartialEq)]
                pub struct #struct_ident {
                    #(#fields)*
                }
            });
            let status_bind = status_field
                .as_ref()
                .map(|_| quote!(let status = answer.status;));
            let reply = write(quote!(answer.body));
            variants.push(quote!(#doc #variant(#struct_ident),));
            arms.push(quote!(Self::#variant(answer) => {
                #status_bind
                let mut reply = #reply;
                #(#sets)*
                reply
            }));
        }
    }
    let doc = format!(
        " The answers of `{} {}`: one variant per documented status.",
        op.method, op.path
    );
    quote! {
        #[doc = #doc]
        #[derive(Debug, Clone)]
        pub enum #reply_ident {
            #(#variants)*
            /// An answer the spec does not document: the explicit escape
            /// hatch. Prefer adding the status to the spec.
            Undocumented(#rt::Reply),
        }

        impl #reply_ident {
            /// The status, headers and body to send.
            pub fn into_reply(self) -> #rt::Reply {
                match self {
                    #(#arms)*
                    Self::Undocumented(reply) => reply,
                }
            }

            /// This answer as a refusal before anything was done (a body that
            /// breaks a business rule): on a keyed route the key's claim and
            /// the transaction's writes roll back and nothing is stored, so a
            /// corrected retry with the same key runs normally.
            pub fn unrecorded(self) -> Self {
                Self::Undocumented(self.into_reply().unrecorded())
            }
        }

        impl ::idem_runtime::rt::server::axum::response::IntoResponse for #reply_ident {
            fn into_response(self) -> ::idem_runtime::rt::server::axum::response::Response {
                ::idem_runtime::rt::server::axum::response::IntoResponse::into_response(self.into_reply())
            }
        }
    }
}

/// Each documented response as the reply enum's variant: its name, status,
/// body and the headers the router can send.
fn answers(space: &mut TypeSpace<'_>, op: &Operation, camel: &str) -> Vec<Answer> {
    let has_success = op.responses.iter().any(|r| r.status.starts_with('2'));
    let mut namer = Namer::reserving(&["Undocumented"]);
    let mut answers = Vec::new();
    for response in &op.responses {
        let shape = response_shape(space, response, camel, has_success);
        let body = shape.body.map(|b| (b.ty, b.enc, b.media));
        let mut header_namer = Namer::reserving(&["body", "status"]);
        let headers = shape
            .headers
            .into_iter()
            .map(|(name, ty)| {
                (
                    ident(&header_namer.unique(&naming::snake(&name, "header"))),
                    name,
                    ty,
                )
            })
            .collect();
        answers.push(Answer {
            variant: ident(&namer.unique(&status_variant(&response.status))),
            status: response.status.clone(),
            body,
            headers,
            component: response.component.clone(),
        });
    }
    answers
}

/// A documented status as the router sends it: the exact code, if it is
/// one; the code a range or `default` falls back to; and the tokens of the
/// status to send.
fn status_code(rt: &TokenStream, status: &str) -> (Option<u16>, u16, TokenStream) {
    let exact = status.parse::<u16>().ok();
    let (low, high, fallback) = match (exact, status) {
        (Some(code), _) => (code, code, code),
        (None, "default") => (100, 599, 500),
        (None, range) => {
            let first = range
                .chars()
                .next()
                .and_then(|c| c.to_digit(10))
                .unwrap_or(5);
            let low = u16::try_from(first * 100).unwrap_or(500);
            (low, low + 99, low)
        }
    };
    let code = if exact.is_some() {
        let lit = proc_macro2::Literal::u16_unsuffixed(low);
        quote!(#lit)
    } else {
        let (l, h, f) = (
            proc_macro2::Literal::u16_unsuffixed(low),
            proc_macro2::Literal::u16_unsuffixed(high),
            proc_macro2::Literal::u16_unsuffixed(fallback),
        );
        quote!(#rt::status_in(status, #l, #h, #f))
    };
    (exact, fallback, code)
}

/// A variant's doc: its status and the spec's description, and, for a range
/// or `default`, the status it sends outside its range.
fn variant_doc(op: &Operation, status: &str, range: bool, fallback: u16) -> TokenStream {
    let description = op
        .responses
        .iter()
        .find(|r| r.status == status)
        .and_then(|r| r.description.clone())
        .unwrap_or_default();
    let mut doc = format!("`{status}`");
    if !description.trim().is_empty() {
        doc.push_str(": ");
        doc.push_str(description.trim());
    }
    if range {
        doc.push_str("\n\nCarries the status to send; one outside the range is sent as ");
        doc.push_str(&format!("`{fallback}`."));
    }
    doc_attrs(&doc)
}
