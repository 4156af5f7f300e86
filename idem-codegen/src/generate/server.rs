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

use super::client::{
    Encoding, body_required, doc_head, encoding_of, is_key_parameter, query_style, response_shape,
    status_variant,
};
use super::naming::{self, Namer};
use super::types::{Site, Ty, TypeSpace, doc_attrs, ident};
use crate::model::SecurityKind;
use crate::model::{KeySettings, KeySource, Model, Operation, RetryClass};
use crate::vocab::{ClaimAt, FailureReplay, InFlight, KeyRequirement, Scope};

const RT: &str = "::idem_runtime::server";

fn rt() -> TokenStream {
    RT.parse().unwrap_or_default()
}

/// How an operation's method is wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wiring {
    /// No key: a plain handler.
    Plain,
    /// Behind the idempotency layer, given the key's transaction.
    Keyed,
    /// A phased operation: steps recorded one by one, resumable.
    Phased,
}

fn wiring(op: &Operation) -> Wiring {
    let unsafe_method = !matches!(op.method.as_str(), "GET" | "HEAD" | "OPTIONS" | "TRACE");
    if op.class != RetryClass::Keyed || !unsafe_method || op.key.source.is_none() {
        return Wiring::Plain;
    }
    match &op.phases {
        Some(phases) if !phases.value.is_empty() => Wiring::Phased,
        _ => Wiring::Keyed,
    }
}

pub(crate) fn emit(model: &Model, space: &mut TypeSpace<'_>) -> TokenStream {
    let rt = rt();
    let mut ops: Vec<&Operation> = model.operations.iter().collect();
    ops.sort_by(|a, b| (&a.path, a.method).cmp(&(&b.path, b.method)));
    let mut methods = Namer::reserving(&["router"]);
    let mut trait_methods = Vec::new();
    let mut items = Vec::new();
    // One axum route per template (positional captures), methods merged.
    let mut routes: BTreeMap<String, Vec<(String, TokenStream)>> = BTreeMap::new();
    let mut accepted = false;
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
            route_stmts.push(quote! {
                router = router.route(#path, #handler);
            });
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
            router = router.merge(idem #scoped .status_router());
        }
    });
    let max_in_flight = match model.root.admission.max_in_flight.as_ref() {
        Some(max) => {
            let max = proc_macro2::Literal::usize_unsuffixed(max.value as usize);
            quote!(#max)
        }
        None => quote!(::idem_runtime::protocol::DEFAULT_MAX_IN_FLIGHT),
    };
    let router_binding = if route_stmts.is_empty() && status.is_none() {
        quote!(let router)
    } else {
        quote!(let mut router)
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
         embedded, PostgreSQL (`sqlx::Postgres`) in production.\n\n\
         Each method answers `Ok` with one of its documented replies, or `Err` with a \
         [`Fault`](::idem_runtime::server::Fault): `?` on a database error gives one, and it \
         is answered `503` with `Retry-After`, retryable and never recorded, so a connection \
         that dies mid-operation is never a caller's final answer."
    ));
    quote! {
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
        pub fn router<DB, A>(api: A, idem: &#rt::Idempotency<DB>) -> ::std::result::Result<::idem_runtime::axum::Router, #rt::ConfigError>
        where
            DB: #rt::Backend,
            A: Api<DB>,
        {
            let api = ::std::sync::Arc::new(api);
            #router_binding = ::idem_runtime::axum::Router::new();
            #(#route_stmts)*
            #status
            let _ = (&api, idem);
            let router = router
                .fallback(#rt::support::not_found)
                .method_not_allowed_fallback(#rt::support::method_not_allowed)
                .layer(#rt::support::Deadlines);
            ::std::result::Result::Ok(#rt::support::admit(router, #max_in_flight))
        }

        #(#items)*
    }
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

/// One input field: its declaration and the expression reading it.
struct InputField {
    decl: TokenStream,
    read: TokenStream,
}

fn operation(model: &Model, space: &mut TypeSpace<'_>, op: &Operation, method: &str) -> Generated {
    let rt = rt();
    let camel = naming::camel(&op.name, "Call");
    let wiring = wiring(op);
    let method_ident = ident(method);
    let bare = method.trim_start_matches("r#");
    let reader = naming::prefixed("read", method);
    let template = &op.path;

    // Inputs: path, query, header, cookie parameters, and the body.
    let mut field_namer = Namer::reserving(&["body"]);
    let mut fields: Vec<InputField> = Vec::new();
    let mut sites: Vec<Site> = Vec::new();
    for p in &op.parameters {
        if !matches!(p.location.as_str(), "path" | "query" | "header" | "cookie") {
            continue;
        }
        if is_key_parameter(op, p) {
            continue;
        }
        // A phased request is resumed from what the store keeps (method,
        // path with query, body): its headers are gone by then.
        if wiring == Wiring::Phased && matches!(p.location.as_str(), "header" | "cookie") {
            continue;
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
                quote!(inbound.query::<#tokens>(#wire, #rt::support::Style::#style, #explode)?)
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
                quote!(#read.ok_or_else(|| #rt::support::Rejection::missing(#label))?),
            )
        };
        let mut doc = p.description.clone().unwrap_or_default();
        if !doc.is_empty() {
            doc.push_str("\n\n");
        }
        doc.push_str(&format!("`{wire}` ({} parameter).", p.location));
        let doc = doc_attrs(&doc);
        fields.push(InputField {
            decl: quote!(#doc pub #field: #decl_ty,),
            read: quote!(#field: #read,),
        });
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
            quote!(#rt::support::media_type(inbound.parts(), inbound.has_body(), #required, &[#(#accepted),*])?;)
        });
    let accept = acceptable_check(op)
        .map(|offered| quote!(#rt::support::acceptable(inbound.parts(), &[#(#offered),*])?;));
    let validate = space.defer(
        sites,
        quote!(v.finish().map_err(|e| #rt::support::Rejection::violations(&e))?;),
    );
    let input_ident =
        (!fields.is_empty()).then(|| ident(&space.namer.unique(&format!("{camel}Input"))));
    let (input_arg, input_pass) = match &input_ident {
        Some(input) => {
            let decls = fields.iter().map(|f| &f.decl);
            let reads = fields.iter().map(|f| &f.read);
            let doc = format!(" The inputs of [`{method}`](Api::{bare}), typed.");
            items.push(quote! {
                #[doc = #doc]
                #[derive(Debug, Clone, PartialEq)]
                pub struct #input {
                    #(#decls)*
                }

                async fn #reader(inbound: &#rt::support::Inbound) -> ::std::result::Result<#input, #rt::support::Rejection> {
                    #media
                    #accept
                    let input = #input {
                        #(#reads)*
                    };
                    #validate
                    ::std::result::Result::Ok(input)
                }
            });
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
    let limit = quote!(#rt::support::DEFAULT_BODY_LIMIT);
    let read_input = match &input_pass {
        Some(_) => quote! {
            let input = match #reader(&inbound).await {
                ::std::result::Result::Ok(input) => input,
                ::std::result::Result::Err(rejection) => return #rt::Reject(rejection).into_response(),
            };
        },
        None => TokenStream::new(),
    };
    // Before the claim: a refusal records nothing without being marked so.
    let read_input_unclaimed = match &input_pass {
        Some(_) => quote! {
            let input = match #reader(inbound).await {
                ::std::result::Result::Ok(input) => input,
                ::std::result::Result::Err(rejection) => return rejection.into_response(),
            };
        },
        None => TokenStream::new(),
    };
    let pass = input_pass.iter();
    let http_method = format_ident!("{}", op.method.as_str().to_ascii_lowercase());
    let routing = quote!(::idem_runtime::axum::routing);
    let mut accepted = false;
    // Required header parameters: where one is the caller's scope, a route
    // without a key identifies the caller as keyed routes do.
    let required_headers: Vec<&str> = op
        .parameters
        .iter()
        .filter(|p| p.location == "header" && p.required && !is_key_parameter(op, p))
        .map(|p| p.name.as_str())
        .collect();
    let (scope_clone, scope_check) = if required_headers.is_empty() {
        (TokenStream::new(), TokenStream::new())
    } else {
        (
            quote!(let idem = ::std::clone::Clone::clone(idem);),
            quote! {
                if let ::std::result::Result::Err(refusal) = idem.require_scope(inbound.parts(), &[#(#required_headers),*]) {
                    return refusal.into_response();
                }
            },
        )
    };
    let (trait_method, route) = match wiring {
        Wiring::Plain => (
            quote! {
                #doc
                #deprecated
                fn #method_ident(&self, cx: #rt::support::Context #(, #input_arg_list)*) -> impl ::std::future::Future<Output = ::std::result::Result<#reply_ident, #rt::Fault>> + ::std::marker::Send;
            },
            quote! {{
                let api = ::std::sync::Arc::clone(&api);
                #scope_clone
                #routing::#http_method(move |request: ::idem_runtime::axum::extract::Request| async move {
                    use ::idem_runtime::axum::response::IntoResponse as _;
                    let inbound = match #rt::support::Inbound::read(request, #template, #limit).await {
                        ::std::result::Result::Ok(inbound) => inbound,
                        ::std::result::Result::Err(rejection) => return rejection.into_response(),
                    };
                    #scope_check
                    #read_input
                    api.#method_ident(inbound.context() #(, #pass)*).await.into_response()
                })
            }},
        ),
        Wiring::Keyed => {
            let policy = policy(op, &mut accepted);
            let scoped = credential_scope(model, op);
            (
                quote! {
                    #doc
                    #deprecated
                    fn #method_ident(&self, cx: #rt::support::Context, tx: #rt::IdemTx<DB> #(, #input_arg_list)*) -> impl ::std::future::Future<Output = ::std::result::Result<#reply_ident, #rt::Fault>> + ::std::marker::Send;
                },
                quote! {{
                    let api = ::std::sync::Arc::clone(&api);
                    let idem = idem #scoped .with_policy(#policy)?;
                    #routing::#http_method(move |request: ::idem_runtime::axum::extract::Request| async move {
                        use ::idem_runtime::axum::response::IntoResponse as _;
                        let keyed = match idem.read_keyed(request, #template).await {
                            ::std::result::Result::Ok(keyed) => keyed,
                            ::std::result::Result::Err(refusal) => return refusal,
                        };
                        let inbound = keyed.inbound();
                        #read_input_unclaimed
                        let cx = inbound.context();
                        let (tx, claimed) = match keyed.claim().await {
                            ::std::result::Result::Ok(claimed) => claimed,
                            ::std::result::Result::Err(answer) => return answer,
                        };
                        // Clients called inside derive their keys from this one.
                        let keyed = cx.clone();
                        let reply = #rt::support::keyed(&keyed, api.#method_ident(cx, tx #(, #pass)*)).await.into_response();
                        claimed.finish(reply).await
                    })
                }},
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
                &reader,
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
    let route = match op.admission.max_in_flight.as_ref() {
        Some(max) => {
            let max = proc_macro2::Literal::usize_unsuffixed(max.value as usize);
            quote!(#rt::support::admit_route(#route, #max))
        }
        None => route,
    };
    let _ = model;
    Generated {
        trait_method,
        items,
        route,
        accepted,
    }
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
    let security = op.security.as_ref().unwrap_or(&model.security);
    let mut requirements = Vec::new();
    for alternative in security {
        let mut schemes = Vec::new();
        for name in alternative {
            let Some(scheme) = model.security_schemes.iter().find(|s| &s.name == name) else {
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
        .filter(|h| http_header_name(h))
        .collect();
    headers.sort_unstable();
    headers.dedup();
    for h in headers {
        calls.push(quote!(.replay_header(#h)));
    }
    quote!(#rt::Policy::new() #(#calls)*)
}

fn http_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The body field of the input, and any enum it needs.
fn request_body(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
    wiring: Wiring,
    items: &mut Vec<TokenStream>,
    sites: &mut Vec<Site>,
) -> Option<InputField> {
    let rt = rt();
    let body = op.request_body.as_ref()?;
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
            format!("{camel}Request{}", super::client::encoding_name(*enc))
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
    let read = |enc: Encoding, ty: &TokenStream| match enc {
        Encoding::Json => quote!(inbound.json::<#ty>()?),
        Encoding::Form => quote!(inbound.form::<#ty>()?),
        Encoding::Multipart => quote!(inbound.multipart::<#ty>().await?),
        Encoding::Text => quote!(inbound.text()?),
        Encoding::Bytes => quote!(inbound.bytes()),
    };
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
        (tokens.clone(), read(*enc, &tokens))
    } else {
        let enum_ident = ident(&space.namer.unique(&format!("{camel}RequestBody")));
        let mut namer = Namer::default();
        let mut variants = Vec::new();
        let mut arms = Vec::new();
        let mut accepted = Vec::new();
        for (media, enc, ty) in &choices {
            let tokens = space.tokens(ty);
            let variant = ident(&namer.unique(super::client::encoding_name(*enc)));
            let media_type = &media.media_type;
            let doc = format!(" `{media_type}`");
            variants.push(quote!(#[doc = #doc] #variant(#tokens),));
            // Every declared type of this encoding reads into the variant
            // (`application/json` and `application/vnd.x+json` alike).
            let essences: Vec<String> = body
                .media
                .iter()
                .filter(|m| encoding_of(&m.media_type) == *enc)
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
                });
            accepted.extend(essences.iter().cloned());
            let value = read(*enc, &tokens);
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
                other => return ::std::result::Result::Err(#rt::support::Rejection::media_type(other, &[#(#accepted),*])),
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

/// Whether the body is required, and the media types the operation
/// declares for it; `None` without a request body.
fn media_check(op: &Operation) -> Option<(bool, Vec<String>)> {
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
fn acceptable_check(op: &Operation) -> Option<Vec<String>> {
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

/// One documented response of the reply enum.
struct Answer {
    variant: proc_macro2::Ident,
    status: String,
    /// The body type and how it is written.
    body: Option<(Ty, Encoding, String)>,
    /// Documented headers: field, wire name, type.
    headers: Vec<(proc_macro2::Ident, String, Ty)>,
}

fn reply_enum(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
    reply_ident: &proc_macro2::Ident,
    items: &mut Vec<TokenStream>,
) -> TokenStream {
    let rt = rt();
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
            .filter(|(name, _)| http_header_name(name))
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
        });
    }
    let mut variants = Vec::new();
    let mut arms = Vec::new();
    for a in &answers {
        let variant = &a.variant;
        let exact = a.status.parse::<u16>().ok();
        let (low, high, fallback) = match (exact, a.status.as_str()) {
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
            quote!(#rt::support::status_in(status, #l, #h, #f))
        };
        let description = op
            .responses
            .iter()
            .find(|r| r.status == a.status)
            .and_then(|r| r.description.clone())
            .unwrap_or_default();
        let mut doc = format!("`{}`", a.status);
        if !description.trim().is_empty() {
            doc.push_str(": ");
            doc.push_str(description.trim());
        }
        if exact.is_none() {
            doc.push_str("\n\nCarries the status to send; one outside the range is sent as ");
            doc.push_str(&format!("`{fallback}`."));
        }
        let doc = doc_attrs(&doc);
        let write = |value: TokenStream| match &a.body {
            None => quote!(#rt::support::empty(#code)),
            Some((_, Encoding::Text, media)) => quote!(#rt::support::text(#code, #media, #value)),
            Some((_, Encoding::Bytes, media)) => quote!(#rt::support::bytes(#code, #media, #value)),
            Some((_, _, media)) => quote!(#rt::support::json(#code, #media, &#value)),
        };
        let status_field = exact
            .is_none()
            .then(|| quote!(::idem_runtime::http::StatusCode));
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
                sets.push(
                    quote!(reply = #rt::support::header(reply, #wire, answer.#field.as_ref());),
                );
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

        impl ::idem_runtime::axum::response::IntoResponse for #reply_ident {
            fn into_response(self) -> ::idem_runtime::axum::response::Response {
                ::idem_runtime::axum::response::IntoResponse::into_response(self.into_reply())
            }
        }
    }
}

struct Phased {
    items: TokenStream,
    /// The first stage's type.
    first: proc_macro2::Ident,
    /// The completion token's type.
    done: proc_macro2::Ident,
    /// The `Operation` adapter's type.
    operation: proc_macro2::Ident,
}

/// The typed step API of a phased operation: one stage type per phase, each
/// consumed by running its phase, and a completion token only the last
/// stage can produce.
fn phased(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
    method: &str,
    reply: &proc_macro2::Ident,
    input: Option<&proc_macro2::Ident>,
    reader: &proc_macro2::Ident,
) -> Phased {
    let rt = rt();
    let phases: Vec<String> = op
        .phases
        .as_ref()
        .map(|p| p.value.clone())
        .unwrap_or_default();
    let first = ident(&space.namer.unique(&format!("{camel}Steps")));
    let done = ident(&space.namer.unique(&format!("{camel}Done")));
    let operation = ident(&space.namer.unique(&format!("{camel}Operation")));
    let mut stages = vec![first.clone()];
    for phase in &phases {
        stages.push(ident(
            &space
                .namer
                .unique(&format!("{camel}After{}", naming::camel(phase, "Phase"))),
        ));
    }
    let total = phases.len();
    let mut items = Vec::new();
    let bare = method.trim_start_matches("r#");
    for (index, stage) in stages.iter().enumerate() {
        let doc = if index == 0 {
            format!(
                " The phases of [`{bare}`](Api::{bare}), run in order: {}. Each phase method \
                 consumes this value and returns the next stage, so none can be skipped.",
                phases
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            format!(
                " [`{bare}`](Api::{bare}) after its phase `{}` is recorded.",
                phases.get(index - 1).map_or("", String::as_str)
            )
        };
        let next = match (phases.get(index), stages.get(index + 1)) {
            (Some(phase), Some(next_stage)) => {
                let mut names =
                    Namer::reserving(&["local", "stop", "finish", "key", "reconciling"]);
                let step_method = ident(&names.unique(&naming::snake(phase, "phase")));
                let doc = format!(
                    "Phase {} of {total}: `{phase}`, a foreign call. Its intent is recorded \
                     first; `call` gets the key to hand the foreign system (the same on every \
                     attempt, takeover and completer run) and whether an earlier attempt may \
                     already have reached it. Its output is recorded as the recovery point: once \
                     it is, this phase never runs again for this request.\n\n\
                     When the call does not succeed, `call` says which way: \
                     `PhaseError::Final(reply)` ends the operation with that documented answer \
                     (a refusal: stored and replayed to every retry), \
                     `PhaseError::Transient(reason)` runs the phase again later, on the \
                     backoff schedule, until it succeeds or the schedule runs out.",
                    index + 1
                );
                let doc = doc_attrs(&doc);
                quote! {
                    #doc
                    pub async fn #step_method<T, F, Fut>(self, call: F) -> ::std::result::Result<(T, #next_stage<'a, DB>), #rt::StepError>
                    where
                        T: ::idem_runtime::serde::Serialize + ::idem_runtime::serde::de::DeserializeOwned,
                        F: ::std::ops::FnOnce(#rt::ForeignCall) -> Fut,
                        Fut: ::std::future::Future<Output = ::std::result::Result<T, #rt::PhaseError<#reply>>>,
                    {
                        let output = self.run.phase(#phase, call, #reply::into_reply).await?;
                        ::std::result::Result::Ok((output, #next_stage { run: self.run }))
                    }
                }
            }
            _ => quote! {
                /// Every phase is recorded: the reply, stored and replayed for
                /// every retry with this key.
                pub fn finish(self, reply: #reply) -> #done {
                    let _ = self.run;
                    #done(reply)
                }
            },
        };
        let stop = (index < total).then(|| {
            quote! {
                /// Answers now, without the remaining phases (a declined card):
                /// stored and replayed like any answer.
                pub fn stop(self, reply: #reply) -> #done {
                    let _ = self.run;
                    #done(reply)
                }
            }
        });
        items.push(quote! {
            #[doc = #doc]
            pub struct #stage<'a, DB: #rt::Backend> {
                run: &'a mut #rt::Run<DB>,
            }

            impl<DB: #rt::Backend> ::std::fmt::Debug for #stage<'_, DB> {
                fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                    ::std::fmt::Debug::fmt(&*self.run, f)
                }
            }

            impl<'a, DB: #rt::Backend> #stage<'a, DB> {
                #next

                #stop

                /// A local step: `f`'s writes commit together with the step's
                /// recorded output; a resumed request gets the output back
                /// without running `f` again.
                pub async fn local<T, F>(&mut self, step: &str, f: F) -> ::std::result::Result<T, #rt::StepError>
                where
                    T: ::idem_runtime::serde::Serialize + ::idem_runtime::serde::de::DeserializeOwned,
                    F: for<'t> ::std::ops::FnOnce(&'t mut DB::Connection) -> #rt::BoxFuture<'t, ::std::result::Result<T, #rt::StepError>>,
                {
                    self.run.local(step, f).await
                }

                /// The caller's idempotency key.
                pub fn key(&self) -> &str {
                    self.run.key()
                }
            }
        });
    }
    let name = &op.name;
    let template = &op.path;
    // The live request's content type, before the claim: a resumed one has
    // no headers left to check.
    let validate = media_check(op).map(|(required, accepted)| {
        quote! {
            fn validate(&self, parts: &::idem_runtime::http::request::Parts, body: &[u8]) -> ::std::result::Result<(), ::std::boxed::Box<#rt::Reply>> {
                #rt::support::media_type(parts, !body.is_empty(), #required, &[#(#accepted),*])
                    .map_err(|rejection| ::std::boxed::Box::new(rejection.into_reply()))
            }
        }
    });
    let (read, pass) = match input {
        Some(_) => (
            quote! {
                let inbound = #rt::support::Inbound::stored(run.method(), run.path(), run.body(), #template)
                    .map_err(|r| #rt::StepError::Reject(::std::boxed::Box::new(r.into_reply())))?;
                let input = #reader(&inbound)
                    .await
                    .map_err(|r| #rt::StepError::Reject(::std::boxed::Box::new(r.into_reply())))?;
            },
            quote!(, input),
        ),
        None => (TokenStream::new(), TokenStream::new()),
    };
    let method_ident = ident(method);
    let done_doc =
        format!(" A finished [`{bare}`](Api::{bare}): only its last stage (or `stop`) makes one.");
    let op_doc =
        format!(" Runs [`{bare}`](Api::{bare}) under the key protocol, resumable by name.");
    items.push(quote! {
        #[doc = #done_doc]
        #[derive(Debug)]
        pub struct #done(#reply);

        #[doc = #op_doc]
        struct #operation<A> {
            api: ::std::sync::Arc<A>,
        }

        impl<DB: #rt::Backend, A: Api<DB>> #rt::Operation<DB> for #operation<A> {
            fn name(&self) -> &'static str {
                #name
            }

            #validate

            fn run<'a>(&'a self, run: &'a mut #rt::Run<DB>) -> #rt::BoxFuture<'a, ::std::result::Result<#rt::Reply, #rt::StepError>> {
                ::std::boxed::Box::pin(async move {
                    #read
                    let steps = #first { run };
                    let #done(reply) = self.api.#method_ident(steps #pass).await?;
                    ::std::result::Result::Ok(reply.into_reply())
                })
            }
        }
    });
    Phased {
        items: quote!(#(#items)*),
        first,
        done,
        operation,
    }
}

fn method_doc(op: &Operation, wiring: Wiring) -> String {
    let mut doc = doc_head(op);
    let location = match &op.key.source {
        Some(KeySource::Header { name, .. }) => format!("the `{name}` header"),
        Some(KeySource::Body { field }) => format!("the body's `{field}` field"),
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
