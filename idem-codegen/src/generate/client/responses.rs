//! A method's answers: the success and error types, one variant per
//! documented status with its headers, and the decoder that picks one.

use proc_macro2::TokenStream;
use quote::quote;

use crate::generate::naming::{self, Namer};
use crate::generate::operation::{response_shape, status_variant};
use crate::generate::types::{Ty, TypeSpace, doc_attrs, ident};
use crate::model::Operation;
use crate::model::shape::encoding::Encoding;

/// One documented response outcome.
struct Outcome {
    /// `200`, `4XX`, `default`.
    status: String,
    ty: Option<Ty>,
    enc: Encoding,
    headers: Vec<(String, Ty)>,
    /// The spec's description of the response.
    description: Option<String>,
    /// Its name under `components/responses`, when it is shared.
    component: Option<String>,
}

/// The success type, the error type, the decoder's body, and the types they need.
pub(super) fn responses(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
) -> (Ty, Option<Ty>, TokenStream, Vec<TokenStream>) {
    let has_success = op.responses.iter().any(|r| r.status.starts_with('2'));
    let mut ok = Vec::new();
    let mut err = Vec::new();
    for response in &op.responses {
        let shape = response_shape(space, response, camel, has_success);
        let success = shape.success;
        let (ty, enc) = match shape.body {
            None => (None, Encoding::Json),
            Some(body) => (Some(body.ty), body.enc),
        };
        let headers = shape.headers;
        let outcome = Outcome {
            status: response.status.clone(),
            ty,
            enc,
            headers,
            description: response.description.clone(),
            component: response.component.clone(),
        };
        if success {
            ok.push(outcome)
        } else {
            err.push(outcome)
        }
    }
    let mut items = Vec::new();
    let (ok_ty, ok_arms) = side(space, &mut items, ok, &format!("{camel}Response"), true);
    let (err_ty, err_arms) = side(space, &mut items, err, &format!("{camel}Error"), false);
    let decode = if ok_arms.is_empty() && err_arms.is_empty() {
        quote!(raw.unexpected())
    } else {
        quote! {
            match raw.status() {
                #(#ok_arms)*
                #(#err_arms)*
                _ => raw.unexpected(),
            }
        }
    };
    (ok_ty.unwrap_or(Ty::Unit), err_ty, decode, items)
}

/// The status pattern of a documented response. A range (`2XX`) leaves out
/// the codes documented on their own, so no two arms overlap.
fn status_pattern(status: &str, exact: &[u16]) -> Option<TokenStream> {
    if status == "default" {
        return None;
    }
    if let Ok(code) = status.parse::<u16>() {
        let code = number(code);
        return Some(quote!(#code));
    }
    let first = status.chars().next()?.to_digit(10)?;
    let low = u16::try_from(first * 100).ok()?;
    let mut pieces = Vec::new();
    let mut start = low;
    for code in low..=low + 99 {
        if exact.contains(&code) {
            if start < code {
                pieces.push((start, code - 1));
            }
            start = code + 1;
        }
    }
    if start <= low + 99 {
        pieces.push((start, low + 99));
    }
    let pieces = pieces.into_iter().map(|(a, b)| {
        let (a_lit, b_lit) = (number(a), number(b));
        if a == b {
            quote!(#a_lit)
        } else {
            quote!(#a_lit..=#b_lit)
        }
    });
    Some(quote!(#(#pieces)|*))
}

/// A decoder arm: the status pattern, or for `default` a guard on the side.
fn arm(status: &str, success: bool, value: &TokenStream, exact: &[u16]) -> TokenStream {
    match (status_pattern(status, exact), success) {
        (Some(p), _) => quote!(#p => #value,),
        (None, true) => quote!(_ if raw.status() < 400 => #value,),
        (None, false) => quote!(_ if raw.status() >= 400 => #value,),
    }
}

/// `base` with the outcome's documented headers: a struct of the body and
/// the headers (and how the decoder fills it), or `base` alone when the
/// outcome documents none. `single`: the side has this one outcome, so the
/// struct takes the side's own name.
fn with_headers(
    space: &mut TypeSpace<'_>,
    o: &Outcome,
    base: Ty,
    name: &str,
    single: bool,
) -> (Ty, Option<TokenStream>) {
    if o.headers.is_empty() {
        return (base, None);
    }
    // A response the spec shares is one struct, whichever operation
    // answers it.
    if let Some(component) = &o.component
        && o.status.parse::<u16>().is_ok()
    {
        let body = (base != Ty::Unit).then_some(&base);
        let shared = space.shared_response(component, body, &o.headers);
        let struct_ident = ident(&shared.name);
        let body_init = shared.body.then(|| quote!(body: __body,));
        let inits = shared.headers.iter().map(|(field, wire)| {
            let field = ident(field);
            quote!(#field: raw.header(#wire),)
        });
        let init = quote!(#struct_ident { #body_init #(#inits)* });
        return (Ty::Def(shared.index), Some(init));
    }
    let struct_name = space.namer.unique(&if single {
        name.to_owned()
    } else {
        format!("{name}{}", status_variant(&o.status))
    });
    let struct_ident = ident(&struct_name);
    let body_field = (base != Ty::Unit).then(|| {
        let body_ty = space.tokens(&base);
        quote!(#[doc = " The response body."] pub body: #body_ty,)
    });
    let body_init = (base != Ty::Unit).then(|| quote!(body: __body,));
    let mut namer = Namer::reserving(&["body"]);
    let mut fields = Vec::new();
    let mut inits = Vec::new();
    for (header, ty) in &o.headers {
        let field = ident(&namer.unique(&naming::snake(header, "header")));
        let ty_tokens = space.tokens(ty);
        let doc = format!(" The `{header}` response header.");
        fields.push(quote!(#[doc = #doc] pub #field: ::std::option::Option<#ty_tokens>,));
        inits.push(quote!(#field: raw.header(#header),));
    }
    let doc = format!(" A `{}` response with its documented headers.", o.status);
    // Defined with the types, where an error enum that holds it is.
    let index = space.reserve(&struct_name);
    let mut reaches: Vec<Ty> = o.headers.iter().map(|(_, ty)| ty.clone()).collect();
    reaches.push(base);
    space.define_apart(
        index,
        quote! {
            #[doc = #doc]
            #[derive(Debug, Clone, PartialEq)]
            pub struct #struct_ident {
                #body_field
                #(#fields)*
            }
        },
        reaches,
    );
    let init = quote!(#struct_ident { #body_init #(#inits)* });
    (Ty::Def(index), Some(init))
}

/// The type of one side (success or error) and its decoder arms.
fn side(
    space: &mut TypeSpace<'_>,
    items: &mut Vec<TokenStream>,
    mut outcomes: Vec<Outcome>,
    name: &str,
    success: bool,
) -> (Option<Ty>, Vec<TokenStream>) {
    if outcomes.is_empty() {
        return (None, Vec::new());
    }
    let exact: Vec<u16> = outcomes
        .iter()
        .filter_map(|o| o.status.parse().ok())
        .collect();
    // Exact codes first, then ranges, then `default`.
    outcomes.sort_by_key(|o| {
        if o.status == "default" {
            2
        } else if o.status.parse::<u16>().is_ok() {
            0
        } else {
            1
        }
    });
    let wrap = |value: TokenStream| {
        if success {
            quote!(::std::result::Result::Ok(#value))
        } else {
            quote!(raw.error(#value))
        }
    };
    let read = |o: &Outcome| match (&o.ty, o.enc) {
        (None, _) => quote!(()),
        (Some(_), Encoding::Text) => quote!(raw.text()?),
        (Some(_), Encoding::Bytes) => quote!(raw.bytes()?),
        (Some(_), _) => quote!(raw.json()?),
    };
    // A lone success's struct takes the side's name; an error's struct is
    // named after its variant, beside the operation's error enum.
    let single = outcomes.len() == 1 && success;
    // Errors are always the operation's enum, one variant per status, so
    // every method's error reads alike; a success is its type alone.
    // One success with documented headers: its body and headers, as a struct.
    if let [only] = outcomes.as_slice()
        && success
        && !only.headers.is_empty()
    {
        let base = only.ty.clone().unwrap_or(Ty::Unit);
        let (ty, init) = with_headers(space, only, base, name, single);
        let init = init.unwrap_or_default();
        let value = if only.ty.is_some() {
            let read = read(only);
            wrap(quote!({ let __body = #read; #init }))
        } else {
            wrap(init)
        };
        return (Some(ty), vec![arm(&only.status, success, &value, &exact)]);
    }
    let payloads: Vec<Ty> = outcomes
        .iter()
        .map(|o| o.ty.clone().unwrap_or(Ty::Unit))
        .collect();
    let same =
        payloads.windows(2).all(|w| w[0] == w[1]) && outcomes.iter().all(|o| o.headers.is_empty());
    if same && success {
        let ty = payloads.first().cloned().unwrap_or(Ty::Unit);
        let arms = outcomes
            .iter()
            .map(|o| {
                let value = read(o);
                let value = wrap(value);
                arm(&o.status, success, &value, &exact)
            })
            .collect();
        return (Some(ty), arms);
    }
    let enum_name = space.namer.unique(name);
    let enum_ident = ident(&enum_name);
    let mut namer = Namer::default();
    let mut variants = Vec::new();
    let mut variant_names = Vec::new();
    let mut payloads = Vec::new();
    let mut arms = Vec::new();
    for o in &outcomes {
        let variant_name = namer.unique(&status_variant(&o.status));
        let variant = ident(&variant_name);
        variant_names.push(variant_name);
        let base = o.ty.clone();
        let mut doc = format!("`{}`", o.status);
        if let Some(description) = o
            .description
            .as_deref()
            .map(str::trim)
            .filter(|d| !d.is_empty())
        {
            doc.push_str(": ");
            doc.push_str(description);
        }
        let doc = doc_attrs(&doc);
        let (payload_ty, init) = match base {
            None if o.headers.is_empty() => (None, None),
            base => {
                let (ty, init) = with_headers(space, o, base.unwrap_or(Ty::Unit), name, single);
                (Some(ty), init)
            }
        };
        let value = match (&payload_ty, init) {
            (None, _) => quote!(#enum_ident::#variant),
            (Some(_), Some(init)) if o.ty.is_some() => {
                let read = read(o);
                quote!({ let __body = #read; #enum_ident::#variant(#init) })
            }
            (Some(_), Some(init)) => quote!(#enum_ident::#variant(#init)),
            (Some(_), None) => {
                let read = read(o);
                quote!(#enum_ident::#variant(#read))
            }
        };
        match &payload_ty {
            Some(ty) => {
                let t = space.tokens(ty);
                variants.push(quote!(#doc #variant(#t),));
                payloads.push(ty.clone());
            }
            None => variants.push(quote!(#doc #variant,)),
        }
        let value = wrap(value);
        arms.push(arm(&o.status, success, &value, &exact));
    }
    let index = space.reserve(&enum_name);
    if success {
        items.push(quote! {
            #[doc = " The documented successful responses."]
            #[derive(Debug, Clone, PartialEq)]
            pub enum #enum_ident {
                #(#variants)*
            }
        });
    } else {
        // Defined with the types: shared by the operations whose errors
        // are the same.
        space.error_enum(index, quote!(#(#variants)*), variant_names, payloads);
    }
    (Some(Ty::Def(index)), arms)
}

/// An unsuffixed integer literal.
pub(super) fn number(n: impl Into<u64>) -> proc_macro2::Literal {
    proc_macro2::Literal::u64_unsuffixed(n.into())
}

/// The response header an operation declares for the server's request id
/// (`X-Trace-Id`, `X-Correlation-Id`, `Request-Id`), when it is not one of
/// the names the runtime reads anyway.
pub(super) fn declared_request_id(op: &Operation) -> Option<String> {
    const WORDS: &[&str] = &["request-id", "requestid", "correlation-id", "trace-id"];
    op.responses
        .iter()
        .flat_map(|r| &r.header_specs)
        .map(|h| h.name.to_ascii_lowercase())
        .find(|name| {
            WORDS.iter().any(|w| name.contains(w))
                && !idem_runtime::protocol::REQUEST_ID_HEADERS.contains(&name.as_str())
        })
}
