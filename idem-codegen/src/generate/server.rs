//! The server emitter: one `Api` trait, one input struct and one reply enum
//! per operation, and a `router` that wires the trait into axum with each
//! keyed operation behind the key protocol under its own policy.
//!
//! What the generated code cannot get wrong by construction:
//! - a keyed method receives the [`IdemTx`](idem_runtime::server::IdemTx)
//!   its key commits in, so the business write and the stored response are
//!   one transaction;
//! - a phased method gets its declared phases as a chain of typed stages,
//!   each consumed by the next, so a phase cannot be skipped or reordered
//!   and the reply can only be built after the last one;
//! - a reply is one of the documented statuses (or the `Undocumented`
//!   escape hatch, which says so at the call site);
//! - an input that does not decode is a `400` naming the field, given
//!   before anything is recorded, so a corrected retry with the same key
//!   runs normally.

use std::collections::BTreeMap;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::naming::{self, Namer};
use super::operation::{doc_head, header_name, is_key_parameter, query_style};
use super::types::{Site, Ty, TypeSpace, doc_attrs, ident};
use crate::model::SecurityKind;
use crate::model::{KeySettings, KeySource, Model, Operation, RetryClass};
use crate::vocab::{ClaimAt, FailureReplay, InFlight, KeyRequirement, Scope};

mod inputs;
mod phased;
mod replies;
mod wiring;

use inputs::{InputField, acceptable_check, media_check, request_body, takes_upload};
use phased::phased;
use replies::reply_enum;
use wiring::{Wiring, rt, wiring};

pub(crate) fn emit(model: &Model, space: &mut TypeSpace<'_>) -> TokenStream {
    let rt = rt();
    let mut ops: Vec<&Operation> = model.operations.iter().collect();
    ops.sort_by(|a, b| (&a.path, a.method).cmp(&(&b.path, b.method)));
    let mut methods = Namer::reserving(&["router", "router_at"]);
    let mut trait_methods = Vec::new();
    let mut items = Vec::new();
    // One axum route per template (positional captures), methods merged.
    let mut routes: BTreeMap<String, Vec<(String, TokenStream)>> = BTreeMap::new();
    let mut accepted = false;
    // Whether a route goes through the key protocol, and so names `idem`.
    let mut protected = false;
    for op in ops {
        let route = route_path(&op.path);
        let method_upper = op.method.as_str().to_owned();
        if routes
            .get(&route)
            .is_some_and(|m| m.iter().any(|(existing, _)| *existing == method_upper))
        {
            // Two templates differing only in parameter names, with one
            // method: the spec is ambiguous; the first one is served.
            let note = format!(
                " `{} {}` is served by an earlier operation with the same path shape.",
                op.method, op.path
            );
            items.push(quote!(#[doc = #note] const _: () = ();));
            continue;
        }
        let method = methods.unique(&naming::snake(&op.name, "call"));
        let generated = operation(model, space, op, &method);
        // A plain route names it too when it reads the caller's scope or
        // caps an upload by the policy.
        protected |= mentions(&generated.route, "idem");
        trait_methods.push(generated.trait_method);
        items.extend(generated.items);
        accepted |= generated.accepted;
        routes
            .entry(route)
            .or_default()
            .push((method_upper, generated.route));
    }
    let mut route_stmts = Vec::new();
    for (path, handlers) in &routes {
        for (_, handler) in handlers {
            route_stmts.push(quote!(.route(#path, #handler)));
        }
    }
    let status = accepted.then(|| {
        // Polled under the scope the `202`'s operations claim their keys in:
        // the credential's, when they are scoped by it.
        let scoped = model
            .operations
            .iter()
            .find(|op| {
                op.settings.in_flight == InFlight::Accepted
                    && op.settings.scope == Scope::Credential
            })
            .map(|op| credential_scope(model, op));
        quote! {
            // Operations answering duplicates with `202` point at this resource.
            let router = router.merge(idem #scoped .status_router());
        }
    });
    let max_in_flight = match model.root.admission.max_in_flight.as_ref() {
        Some(max) => {
            let max = proc_macro2::Literal::usize_unsuffixed(max.value as usize);
            quote!(#max)
        }
        None => quote!(::idem_runtime::rt::server::DEFAULT_MAX_IN_FLIGHT),
    };
    // A spec with no operations leaves the router's arguments unused.
    let (api_arg, arc) = if route_stmts.is_empty() {
        (quote!(_api), None)
    } else {
        (
            quote!(api),
            Some(quote!(let api = ::std::sync::Arc::new(api);)),
        )
    };
    let idem_arg = if !protected && status.is_none() {
        quote!(_idem)
    } else {
        quote!(idem)
    };
    let base_path = model.base_path();
    let base_doc = if base_path.is_empty() {
        " Where [`router`] serves the operations: the root, since the spec's first server \
         names no path."
            .to_owned()
    } else {
        format!(
            " Where [`router`] serves the operations: the path of the spec's first server \
             (`{}`), the one the client and the docs page call.",
            model.servers.first().map_or("", String::as_str)
        )
    };
    let title = if model.title.trim().is_empty() {
        "the API".to_owned()
    } else {
        model.title.trim().to_owned()
    };
    let trait_doc = doc_attrs(&format!(
        "The operations of {title}, one method per operation, for you to implement.\n\n\
         [`router`] serves an implementation. Keyed methods receive the transaction their \
         idempotency key commits in: write the effect there, and it commits together with the \
         stored response, or not at all. Generic over the store: SQLite (`sqlx::Sqlite`) \
         embedded, PostgreSQL (`sqlx::Postgres`) or MariaDB (`sqlx::MySql`) in production.\n\n\
         Each method answers `Ok` with one of its documented replies, or `Err` with a \
         [`Fault`]: `?` on a database error gives one, and it \
         is answered `503` with `Retry-After`, retryable and never recorded, so a connection \
         that dies mid-operation is never a caller's final answer."
    ));
    quote! {
        #[doc = #base_doc]
        pub const BASE_PATH: &str = #base_path;

        #trait_doc
        pub trait Api<DB: #rt::Backend>: ::std::marker::Send + ::std::marker::Sync + 'static {
            #(#trait_methods)*
        }

        /// The axum router serving `api`: every operation at its path, keyed
        /// operations behind the key protocol with the policy each declares
        /// (derived from `idem`, which brings the store and the caller scope).
        ///
        /// Undecodable inputs are answered `400` naming the field, unknown
        /// paths `404` and other methods `405`, all as JSON. The caller's
        /// remaining deadline (`Idem-Timeout-Ms`) is enforced and handed
        /// down to the clients handlers call; requests beyond the admission
        /// limit (`x-admission.max-in-flight`) get `503 overloaded` at once.
        /// Start the completer and the reaper once with
        /// `idem.spawn_background_jobs(every)`.
        pub fn router<DB, A>(api: A, idem: &#rt::Idempotency<DB>) -> ::std::result::Result<::idem_runtime::rt::server::axum::Router, #rt::ConfigError>
        where
            DB: #rt::Backend,
            A: Api<DB>,
        {
            router_at(BASE_PATH, api, idem)
        }

        /// Like [`router`], with the operations under `prefix` instead of
        /// [`BASE_PATH`]: `""` serves them at the root, behind a proxy that
        /// strips the base path before it forwards.
        pub fn router_at<DB, A>(prefix: &str, #api_arg: A, #idem_arg: &#rt::Idempotency<DB>) -> ::std::result::Result<::idem_runtime::rt::server::axum::Router, #rt::ConfigError>
        where
            DB: #rt::Backend,
            A: Api<DB>,
        {
            #arc
            let router = ::idem_runtime::rt::server::axum::Router::new() #(#route_stmts)*;
            let router = #rt::mount(prefix, router);
            #status
            let router = router
                .fallback(#rt::not_found)
                .method_not_allowed_fallback(#rt::method_not_allowed)
                .layer(#rt::Deadlines);
            ::std::result::Result::Ok(#rt::admit(router, #max_in_flight))
        }

        #(#items)*
    }
}

/// Whether `tokens` name the identifier `name`, at any depth.
fn mentions(tokens: &TokenStream, name: &str) -> bool {
    tokens.clone().into_iter().any(|tree| match tree {
        proc_macro2::TokenTree::Ident(ident) => ident == name,
        proc_macro2::TokenTree::Group(group) => mentions(&group.stream(), name),
        _ => false,
    })
}

/// The axum route for an OpenAPI template: each templated segment becomes
/// a positional capture (`{p2}`), so two templates that differ only in
/// parameter names (`/users/{id}` and `/users/{user_id}/posts`) share one
/// route tree without conflict. The runtime matches the real template.
fn route_path(template: &str) -> String {
    let template = template.split('?').next().unwrap_or(template);
    let mut out = String::new();
    for (index, segment) in template.split('/').enumerate() {
        if index > 0 {
            out.push('/');
        }
        if segment.contains('{') || segment.contains('}') || segment.starts_with('*') {
            out.push_str(&format!("{{p{index}}}"));
        } else {
            out.push_str(segment);
        }
    }
    if !out.starts_with('/') {
        out.insert(0, '/');
    }
    out
}

struct Generated {
    trait_method: TokenStream,
    items: Vec<TokenStream>,
    route: TokenStream,
    accepted: bool,
}

fn operation(model: &Model, space: &mut TypeSpace<'_>, op: &Operation, method: &str) -> Generated {
    let rt = rt();
    let camel = naming::camel(&op.name, "Call");
    let wiring = wiring(op);
    let method_ident = ident(method);
    let bare = method.trim_start_matches("r#");

    // Inputs: path, query, header, cookie parameters, and the body.
    let mut field_namer = Namer::reserving(&["body"]);
    let mut fields: Vec<InputField> = Vec::new();
    let mut sites: Vec<Site> = Vec::new();
    for p in &op.parameters {
        let at = Param {
            op,
            p,
            camel: &camel,
            wiring,
        };
        if let Some(field) = parameter_field(space, &at, &mut field_namer, &mut sites) {
            fields.push(field);
        }
    }
    let mut items = Vec::new();
    if let Some(body) = request_body(space, op, &camel, wiring, &mut items, &mut sites) {
        fields.push(body);
    }
    // A live request's content type, checked before anything is read (a
    // resumed phased request has none: its operation checks it on arrival).
    let media = (wiring != Wiring::Phased)
        .then(|| media_check(op))
        .flatten()
        .map(|(required, accepted)| {
            quote!(#rt::media_type(inbound.parts(), inbound.has_body(), #required, &[#(#accepted),*])?;)
        });
    let accept = acceptable_check(op)
        .map(|offered| quote!(#rt::acceptable(inbound.parts(), &[#(#offered),*])?;));
    let validate = space.defer(
        sites,
        quote!(v.finish().map_err(|e| #rt::Rejection::violations(&e))?;),
    );
    let input_ident =
        (!fields.is_empty()).then(|| ident(&space.namer.unique(&format!("{camel}Input"))));
    let upload = takes_upload(op, wiring);
    let reading = Reading {
        upload,
        media,
        accept,
        validate,
    };
    let (input_arg, input_pass) = match &input_ident {
        Some(input) => {
            items.push(input_items(&fields, input, method, bare, &reading));
            (Some(quote!(input: #input)), Some(quote!(input)))
        }
        None => (None, None),
    };

    // The reply enum.
    let reply_ident = ident(&space.namer.unique(&format!("{camel}Reply")));
    let reply = reply_enum(space, op, &camel, &reply_ident, &mut items);
    items.push(reply);

    let doc = doc_attrs(&method_doc(op, wiring));
    let deprecated = op.deprecated.then(|| quote!(#[deprecated]));
    let input_arg_list = input_arg.iter();
    let http_method = format_ident!("{}", op.method.as_str().to_ascii_lowercase());
    let routing = quote!(::idem_runtime::rt::server::axum::routing);
    let route = route_of(op, upload);
    let input_pat = match &input_pass {
        Some(input) => quote!(#input),
        None => quote!(()),
    };
    let mut accepted = false;
    let (trait_method, route) = match wiring {
        Wiring::Plain => (
            quote! {
                #doc
                #deprecated
                fn #method_ident(&self, cx: #rt::Context #(, #input_arg_list)*) -> impl ::std::future::Future<Output = ::std::result::Result<#reply_ident, #rt::Fault>> + ::std::marker::Send;
            },
            plain_route(op, route, &method_ident, &input_pat, input_pass.as_ref()),
        ),
        Wiring::Keyed => {
            let policy = policy(op, &mut accepted);
            let input_pass = input_pass.iter();
            let scoped = credential_scope(model, op);
            (
                quote! {
                    #doc
                    #deprecated
                    fn #method_ident(&self, cx: #rt::Context, tx: #rt::IdemTx<DB> #(, #input_arg_list)*) -> impl ::std::future::Future<Output = ::std::result::Result<#reply_ident, #rt::Fault>> + ::std::marker::Send;
                },
                quote! {
                    #route.keyed(&api, idem #scoped .with_policy(#policy)?, |api, cx, tx, #input_pat| async move {
                        api.#method_ident(cx, tx #(, #input_pass)*).await
                    })
                },
            )
        }
        Wiring::Phased => {
            let policy = policy(op, &mut accepted);
            let scoped = credential_scope(model, op);
            let phased = phased(
                space,
                op,
                &camel,
                method,
                &reply_ident,
                input_ident.as_ref(),
            );
            items.push(phased.items);
            let steps = &phased.first;
            let done = &phased.done;
            let operation = &phased.operation;
            (
                quote! {
                    #doc
                    #deprecated
                    fn #method_ident<'a>(&'a self, steps: #steps<'a, DB> #(, #input_arg_list)*) -> impl ::std::future::Future<Output = ::std::result::Result<#done, #rt::StepError>> + ::std::marker::Send + 'a;
                },
                quote! {{
                    let idem = idem #scoped .with_policy(#policy)?;
                    #routing::#http_method(idem.phased(#operation { api: ::std::sync::Arc::clone(&api) }))
                }},
            )
        }
    };
    Generated {
        trait_method,
        items,
        route: admitted(op, route),
        accepted,
    }
}

/// `route` behind the operation's own in-flight limit, when it declares one.
fn admitted(op: &Operation, route: TokenStream) -> TokenStream {
    let rt = rt();
    match op.admission.max_in_flight.as_ref() {
        Some(max) => {
            let max = proc_macro2::Literal::usize_unsuffixed(max.value as usize);
            let name = op.stable_name();
            quote!(#rt::admit_route(#route, #max, #name))
        }
        None => route,
    }
}

/// The start of an operation's route: its method, name and path, and
/// whether its body is an upload (read as it arrives, under the policy's
/// `max_request_body`).
fn route_of(op: &Operation, upload: bool) -> TokenStream {
    let rt = rt();
    let filter = format_ident!("{}", op.method.as_str().to_ascii_uppercase());
    let name = op.stable_name();
    let template = &op.path;
    let upload = upload.then(|| quote!(.upload(idem.policy().max_request_body_bytes())));
    quote!(#rt::Route::new(::idem_runtime::rt::server::axum::routing::MethodFilter::#filter, #name, #template) #upload)
}

/// A plain operation's route: the caller identified when a required header
/// names it, then the handler called with the inputs.
fn plain_route(
    op: &Operation,
    route: TokenStream,
    method: &proc_macro2::Ident,
    input_pat: &TokenStream,
    input: Option<&TokenStream>,
) -> TokenStream {
    // Required header parameters: where one is the caller's scope, a route
    // without a key identifies the caller as keyed routes do.
    let required_headers: Vec<&str> = op
        .parameters
        .iter()
        .filter(|p| p.location == "header" && p.required && !is_key_parameter(op, p))
        .map(|p| p.name.as_str())
        .collect();
    let scoped =
        (!required_headers.is_empty()).then(|| quote!(.scoped(idem, &[#(#required_headers),*])));
    let input = input.map(|input| quote!(, #input));
    quote! {
        #route #scoped .plain(&api, |api, cx, #input_pat| async move {
            api.#method(cx #input).await
        })
    }
}

/// What the input reader checks around reading the fields: the media
/// type, `Accept`, and the deferred schema checks.
struct Reading {
    /// The body is an upload, read by the handler as it arrives.
    upload: bool,
    media: Option<TokenStream>,
    accept: Option<TokenStream>,
    validate: TokenStream,
}

/// The input struct of an operation and the function that reads a request
/// into it, refusing what the spec does not allow.
fn input_items(
    fields: &[InputField],
    input: &proc_macro2::Ident,
    method: &str,
    bare: &str,
    reading: &Reading,
) -> TokenStream {
    let rt = rt();
    let Reading {
        media,
        accept,
        validate,
        ..
    } = reading;
    let decls = fields.iter().map(|f| &f.decl);
    let reads = fields.iter().map(|f| &f.read);
    let doc = format!(" The inputs of [`{method}`](Api::{bare}), typed.");
    // An upload is read once, as it arrives: neither cloned nor compared.
    let derives = if reading.upload {
        quote!(#[derive(Debug)])
    } else {
        quote!(#[derive(Debug, Clone, PartialEq)])
    };
    quote! {
        #[doc = #doc]
        #derives
        pub struct #input {
            #(#decls)*
        }

        impl #rt::Input for #input {
            async fn read(inbound: &#rt::Inbound) -> ::std::result::Result<Self, #rt::Rejection> {
                #media
                #accept
                let input = Self {
                    #(#reads)*
                };
                #validate
                ::std::result::Result::Ok(input)
            }
        }
    }
}

/// One parameter of an operation, as its input struct sees it.
struct Param<'o> {
    op: &'o Operation,
    p: &'o crate::model::Parameter,
    camel: &'o str,
    wiring: Wiring,
}

/// A path, query, header or cookie parameter as a field of the input struct
/// and how the router reads it; `None` for the key, for a header a resumed
/// phased request no longer has, and for other locations.
fn parameter_field(
    space: &mut TypeSpace<'_>,
    at: &Param<'_>,
    field_namer: &mut Namer,
    sites: &mut Vec<Site>,
) -> Option<InputField> {
    let rt = rt();
    let Param {
        op,
        p,
        camel,
        wiring,
    } = *at;
    if !matches!(p.location.as_str(), "path" | "query" | "header" | "cookie") {
        return None;
    }
    if is_key_parameter(op, p) {
        return None;
    }
    // A phased request is resumed from what the store keeps (method,
    // path with query, body): its headers are gone by then.
    if wiring == Wiring::Phased && matches!(p.location.as_str(), "header" | "cookie") {
        return None;
    }
    let field = ident(&field_namer.unique(&naming::snake(&p.name, "value")));
    let ty = match &p.schema {
        Some(schema) => space.ty(
            schema,
            &format!(
                "{camel}{}",
                naming::camel(&p.name, if p.location == "path" { "Id" } else { "Value" })
            ),
        ),
        None => Ty::String,
    };
    let (ty, optional) = match ty {
        Ty::Option(inner) => (*inner, true),
        other => (other, !p.required && p.location != "path"),
    };
    let tokens = space.tokens(&ty);
    let wire = &p.name;
    let label = format!("{}.{wire}", p.location);
    if let Some(schema) = &p.schema {
        sites.push(Site {
            path: label.clone(),
            ty: if optional && p.location != "path" {
                Ty::Option(Box::new(ty.clone()))
            } else {
                ty.clone()
            },
            checks: space.checks(schema),
            value: quote!(&input.#field),
        });
    }
    let read = match p.location.as_str() {
        "path" => quote!(inbound.path::<#tokens>(#wire)?),
        "query" => {
            let (style, explode) = query_style(p.style.as_deref(), p.explode);
            quote!(inbound.query::<#tokens>(#wire, #rt::Style::#style, #explode)?)
        }
        "header" => quote!(inbound.header::<#tokens>(#wire)?),
        _ => quote!(inbound.cookie::<#tokens>(#wire)?),
    };
    let (decl_ty, read) = if p.location == "path" {
        (tokens, read)
    } else if optional {
        (quote!(::std::option::Option<#tokens>), read)
    } else {
        (
            tokens,
            quote!(#read.ok_or_else(|| #rt::Rejection::missing(#label))?),
        )
    };
    let mut doc = p.description.clone().unwrap_or_default();
    if !doc.is_empty() {
        doc.push_str("\n\n");
    }
    doc.push_str(&format!("`{wire}` ({} parameter).", p.location));
    let doc = doc_attrs(&doc);
    Some(InputField {
        decl: quote!(#doc pub #field: #decl_ty,),
        read: quote!(#field: #read,),
    })
}

/// `.scoped_by_credential(…)?` for an operation whose keys are scoped by
/// its security credential: each `security` alternative, with where each
/// of its schemes' credential travels. Schemes that carry no readable
/// credential (mutual TLS) leave their alternative out.
fn credential_scope(model: &Model, op: &Operation) -> TokenStream {
    if op.settings.scope != Scope::Credential {
        return TokenStream::new();
    }
    let rt = rt();
    let mut requirements = Vec::new();
    for alternative in model.security_of(op) {
        let mut schemes = Vec::new();
        for name in alternative {
            let Some(scheme) = model.scheme(name) else {
                schemes.clear();
                break;
            };
            let credential = match &scheme.kind {
                SecurityKind::Bearer => quote!(#rt::Credential::Bearer),
                SecurityKind::Basic => quote!(#rt::Credential::Basic),
                SecurityKind::ApiKey {
                    location,
                    parameter,
                } => match location.as_str() {
                    "query" => quote!(#rt::Credential::Query(#parameter)),
                    "cookie" => quote!(#rt::Credential::Cookie(#parameter)),
                    _ => {
                        let lower = parameter.to_ascii_lowercase();
                        quote!(#rt::Credential::Header(#lower))
                    }
                },
                SecurityKind::Other(_) => {
                    schemes.clear();
                    break;
                }
            };
            schemes.push(quote!((#name, #credential)));
        }
        if !schemes.is_empty() {
            requirements.push(quote!(&[#(#schemes),*]));
        }
    }
    quote!(.scoped_by_credential(&[#(#requirements),*])?)
}

/// The operation's policy, as `Policy::new()…` (runtime defaults where the
/// spec says nothing).
fn policy(op: &Operation, accepted: &mut bool) -> TokenStream {
    let rt = rt();
    let s = &op.settings;
    let mut calls = Vec::new();
    match &op.key.source {
        Some(KeySource::Body { field }) => {
            calls.push(quote!(.key_in(#rt::KeyIn::Body).body_field(#field)));
        }
        Some(KeySource::Header { name, .. }) => calls.push(quote!(.header(#name))),
        Some(KeySource::Query { name, .. }) => {
            calls.push(quote!(.key_in(#rt::KeyIn::Query).query_parameter(#name)));
        }
        None => {}
    }
    let requirement = match op.key.requirement {
        KeyRequirement::Required => quote!(Required),
        _ => quote!(Optional),
    };
    calls.push(quote!(.key(#rt::KeyRequirement::#requirement)));
    let max = proc_macro2::Literal::usize_unsuffixed(s.key_max_length as usize);
    calls.push(quote!(.key_max_length(#max)));
    let secs = |d: std::time::Duration| {
        let ms =
            proc_macro2::Literal::u64_unsuffixed(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        quote!(::std::time::Duration::from_millis(#ms))
    };
    let (window, reaper, lock) = (
        secs(s.replay_window),
        secs(s.reaper_after),
        secs(s.lock_timeout),
    );
    calls.push(quote!(.replay_window(#window).reaper_after(#reaper).lock_timeout(#lock)));
    // The spec says nothing of the body cap: the instance's policy sets it.
    calls.push(quote!(.max_request_body(idem.policy().max_request_body_bytes())));
    if s.store_wait != KeySettings::DEFAULT_STORE_WAIT {
        let wait = secs(s.store_wait);
        calls.push(quote!(.store_wait(#wait)));
    }
    if wiring(op) == Wiring::Phased && s.resume != crate::vocab::Resume::default() {
        let r = &s.resume;
        let attempts = proc_macro2::Literal::u32_unsuffixed(r.max_attempts);
        let (base, cap, give_up) = (secs(r.base), secs(r.cap), secs(r.give_up_after));
        calls.push(quote! {
            .resume(#rt::ResumePolicy {
                max_attempts: #attempts,
                base: #base,
                cap: #cap,
                give_up_after: #give_up,
            })
        });
    }
    if s.failure_replay == Some(FailureReplay::Reattempt) {
        calls.push(quote!(.failure_replay(#rt::FailureReplay::Reattempt)));
    }
    match s.in_flight {
        InFlight::Conflict => {}
        InFlight::Wait => calls.push(quote! {
            .in_flight(#rt::InFlight::Wait(#rt::Policy::new().duplicate_wait_bound()))
        }),
        InFlight::Accepted => {
            *accepted = true;
            calls.push(quote!(.in_flight(#rt::InFlight::Accepted)));
        }
    }
    // Phased operations always claim at the start; the audit refuses the
    // combination.
    if s.claim == ClaimAt::Commit && wiring(op) != Wiring::Phased {
        calls.push(quote!(.claim_at(#rt::ClaimAt::Commit)));
    }
    // A documented 422 is where the API answers a reused key; else 409.
    if op.responses.iter().any(|r| r.status == "422")
        && !op.responses.iter().any(|r| r.status == "409")
    {
        calls.push(quote!(.mismatch_status(#rt::MismatchStatus::UnprocessableEntity)));
    }
    // Documented response headers are part of the stored response.
    let mut headers: Vec<&str> = op
        .responses
        .iter()
        .flat_map(|r| r.header_specs.iter())
        .map(|h| h.name.as_str())
        .filter(|h| !h.eq_ignore_ascii_case("content-type"))
        .filter(|h| header_name(h))
        .collect();
    headers.sort_unstable();
    headers.dedup();
    for h in headers {
        calls.push(quote!(.replay_header(#h)));
    }
    quote!(#rt::Policy::new() #(#calls)*)
}

fn method_doc(op: &Operation, wiring: Wiring) -> String {
    let mut doc = doc_head(op);
    let location = match &op.key.source {
        Some(KeySource::Header { name, .. }) => format!("the `{name}` header"),
        Some(KeySource::Body { field }) => format!("the body's `{field}` field"),
        Some(KeySource::Query { name, .. }) => format!("the `{name}` query parameter"),
        None => "the request".to_owned(),
    };
    let text = match wiring {
        Wiring::Keyed => format!(
            "Retry class `keyed`, key in {location}. Runs once per key: write the effect \
             through `tx`, which also holds the key's claim; the reply is stored in the same \
             transaction and replayed, byte for byte, to every retry with the key. To refuse \
             the request without recording it, return the answer's `.unrecorded()`."
        ),
        Wiring::Phased => format!(
            "Retry class `keyed`, key in {location}, phased: each phase is recorded before \
             and after its foreign call, and a retry or the completer resumes after the last \
             recorded one. Header parameters are not inputs here: a resumed request has only \
             its method, path and body."
        ),
        Wiring::Plain => match op.class {
            RetryClass::Safe => "Retry class `safe`: clients retry it freely, so it must \
                                 have no effect beyond what the first call had."
                .to_owned(),
            RetryClass::Keyed => "Retry class `keyed` on a safe method: served without the \
                                  key protocol."
                .to_owned(),
            _ => format!(
                "Retry class `{}`: no idempotency key, so clients never re-send it once it \
                 may have arrived. Every call may take effect.",
                op.class
            ),
        },
    };
    doc.push_str(&text);
    if let Some(warning) = &op.unsafe_retry {
        doc.push_str("\n\nWarning the spec gives integrators: ");
        doc.push_str(warning.value.trim());
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::route_path;

    #[test]
    fn templated_segments_become_positional_captures() {
        assert_eq!(route_path("/users/{id}/posts"), "/users/{p2}/posts");
        assert_eq!(route_path("/users/{user_id}"), "/users/{p2}");
        assert_eq!(route_path("/files/{name}.{ext}"), "/files/{p2}");
        assert_eq!(route_path("/v1/charges"), "/v1/charges");
        assert_eq!(route_path("relative/{x}"), "/relative/{p1}");
    }
}
