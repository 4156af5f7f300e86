//! The client emitter: one `Client`, one handle per resource group
//! (`client.charges()`), one method per operation on its group's handle.
//!
//! Methods take their required path parameters as arguments, their query,
//! header and cookie parameters as one `…Params` struct, and their body as
//! its typed value; they return a [`Call`](idem_runtime::client::support::Call)
//! on which `.idempotency_key(…)` overrides the minted key and `.send()`
//! runs the call. Arguments rather than a generated builder per operation:
//! the builder state lives once in the runtime, so a 700-operation client
//! stays one small function per operation and builds fast.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

mod bodies;
mod groups;
mod paging;
mod responses;

use bodies::{BodyArg, request_body};
pub(super) use groups::{groups, member_names};
use responses::{declared_request_id, number, responses};

use super::features;
use super::naming::{self, Namer};
use super::operation::{doc_head, is_key_parameter, query_style};
use super::types::{Site, Ty, TypeSpace, doc_attrs, ident};
use crate::model::{KeySource, Model, Operation, RetryClass, RetryPolicy, SecurityKind};
use crate::vocab::{Backoff, KeyRequirement};

/// Methods the generated `Client` defines itself.
const RESERVED_METHODS: &[&str] = &[
    "new",
    "with_http",
    "with_retry_client",
    "retry_client",
    "base_url",
    "clone",
    "fmt",
];

pub(crate) fn emit(model: &Model, space: &mut TypeSpace<'_>) -> TokenStream {
    let root_policy = crate::model::retry_policy(&model.root.retry);
    // The `Client`'s own methods: constructors, credential setters, and one
    // accessor per resource group.
    let mut methods = Namer::reserving(RESERVED_METHODS);
    let mut auth = Vec::new();
    for scheme in &model.security_schemes {
        let setter = methods.unique(&naming::snake(&scheme.name, "auth"));
        auth.push(credential_setter(scheme, &setter));
    }
    // Names of the per-operation helpers (`OP_…`, `decode_…`): unique
    // across the crate, where method names are unique only in their group.
    let helpers = Namer::reserving(RESERVED_METHODS);
    let mut items = Vec::new();
    let mut accessors = Vec::new();
    let mut listing = Vec::new();
    let groups = groups(model);
    // One group is the whole client: a feature for it would gate nothing.
    if groups.len() < 2 {
        space.features = None;
    }
    let mut names = ClientNames {
        methods,
        helpers,
        example: None,
    };
    for group in groups {
        let parts = group_parts(model, space, group, &mut names, &root_policy);
        accessors.push(parts.accessor);
        listing.push(parts.listing);
        items.push(parts.items);
    }
    let ClientNames { example, .. } = names;
    let defaults = defaults(&root_policy);
    let title = if model.title.trim().is_empty() {
        "the API".to_owned()
    } else {
        model.title.trim().to_owned()
    };
    let client_doc = doc_attrs(&format!(
        "A client for {title}.\n\nCheap to clone: clones share one connection pool and one retry budget. \
         Every method states its retry class; keyed operations get an idempotency key minted once per \
         call and sent on every attempt.\n\n\
         Operations are grouped by resource (the operation's first tag, or the first segment of its \
         path), as `{}`:\n\n{}{}",
        example
            .as_deref()
            .unwrap_or("client.resource().operation(…)"),
        listing.join("\n"),
        if space.features.is_some() {
            format!(
                "\n\nEach group is a cargo feature of this crate, and a type is compiled when a \
                 group that uses it is on. `default` turns on `{full}`, which turns on every group \
                 and the types no operation uses; a crate that calls a few resources depends on \
                 this one with `default-features = false` and their features.",
                full = features::FULL
            )
        } else {
            String::new()
        }
    ));
    if let Some(features) = space.features.as_mut() {
        let shared: TokenStream = auth.iter().cloned().collect();
        features.shared(&shared);
    }
    let base = model.servers.first().cloned().unwrap_or_default();
    let base_doc = if base.is_empty() {
        " The spec names no server: pass the base URL to `Client::new`.".to_owned()
    } else {
        " The first server the spec names.".to_owned()
    };
    quote! {
        #[doc = #base_doc]
        pub const DEFAULT_BASE_URL: &str = #base;

        #[doc = " The document's `x-retry` defaults: attempts, backoff, deadline and retry budget."]
        pub const RETRY_DEFAULTS: ::idem_runtime::rt::client::Defaults = #defaults;

        #client_doc
        #[derive(Debug, Clone)]
        pub struct Client {
            inner: ::idem_runtime::rt::client::ApiClient,
        }

        impl Client {
            /// A client for the API at `base_url`, with the spec's retry defaults.
            pub fn new(base_url: &str) -> ::std::result::Result<Self, ::idem_runtime::rt::client::InvalidBaseUrl> {
                Self::with_http(base_url, ::idem_runtime::rt::client::reqwest::Client::new())
            }

            /// Like [`Client::new`], over a reqwest client you configured.
            pub fn with_http(base_url: &str, http: ::idem_runtime::rt::client::reqwest::Client) -> ::std::result::Result<Self, ::idem_runtime::rt::client::InvalidBaseUrl> {
                Self::with_retry_client(base_url, RETRY_DEFAULTS.retry_client(http))
            }

            /// Like [`Client::new`], over a retry client you configured (its
            /// policy, budget, breaker, clock).
            pub fn with_retry_client(base_url: &str, retry: ::idem_runtime::rt::client::RetryClient) -> ::std::result::Result<Self, ::idem_runtime::rt::client::InvalidBaseUrl> {
                ::std::result::Result::Ok(Self { inner: ::idem_runtime::rt::client::ApiClient::new(base_url, retry)? })
            }

            /// The retry client every call goes through (its metrics, budget, policy).
            pub fn retry_client(&self) -> &::idem_runtime::rt::client::RetryClient {
                self.inner.retry_client()
            }

            /// The base URL.
            pub fn base_url(&self) -> &str {
                self.inner.base_url()
            }

            #(#auth)*
            #(#accessors)*
        }

        /// What a caller names besides the API's own types, in one glob import
        /// (`use …::prelude::*;`): `.next().await` on lists and event streams,
        /// the key a keyed call sends, the errors calls and pages return, and
        /// the date and time types of `format: date` and `date-time` fields.
        #[allow(unused_imports, reason = "re-exported for callers: a binary that includes the API may name none of them")]
        pub mod prelude {
            pub use ::idem_runtime::rt::chrono::{DateTime, NaiveDate, Utc};
            pub use ::idem_runtime::rt::client::{ApiError, IdempotencyKey, PageError, Resume, StreamExt as _};
        }

        #(#items)*
    }
}

/// What one resource group adds to the client: its accessor on `Client`,
/// its line in the client's doc, and its handle type with one method per
/// operation (behind the group's feature, when groups are features).
#[derive(Default)]
struct GroupParts {
    accessor: TokenStream,
    listing: String,
    items: TokenStream,
}

/// The names the client hands out as it emits: its own methods (one
/// accessor per group), the per-operation helpers, and the first call the
/// client's doc shows.
struct ClientNames {
    methods: Namer,
    helpers: Namer,
    example: Option<String>,
}

fn group_parts(
    model: &Model,
    space: &mut TypeSpace<'_>,
    group: groups::Group<'_>,
    names: &mut ClientNames,
    root_policy: &RetryPolicy,
) -> GroupParts {
    let ClientNames {
        methods,
        helpers,
        example,
    } = names;
    let mut parts = GroupParts::default();
    // A group named like one of the client's own methods (`new`) says
    // what it is rather than taking a number.
    let alternative = format!("{}_api", group.key.trim_start_matches("r#"));
    let accessor = if methods.is_free(&group.key) || !methods.is_free(&alternative) {
        methods.unique(&group.key)
    } else {
        methods.unique(&alternative)
    };
    let ty_name = space.namer.unique(&format!(
        "{}Client",
        naming::camel(group.key.trim_start_matches("r#"), "Resource")
    ));
    let accessor_ident = ident(&accessor);
    let ty_ident = ident(&ty_name);
    let bare = accessor.trim_start_matches("r#");
    let feature = space.features.as_mut().map(|f| f.feature_for(&accessor));
    let mut group_items = Vec::new();
    let mut members = Vec::new();
    for (op, name) in group.ops.iter().zip(member_names(&group)) {
        example.get_or_insert_with(|| format!("client.{accessor}().{name}(…)"));
        let helper = helpers.unique(&naming::snake(&op.name, "call"));
        let owner = format!("{ty_name}::{}", name.trim_start_matches("r#"));
        let (item, body) = operation(model, space, op, &name, &helper, &owner, root_policy);
        group_items.push(item);
        members.push(body);
    }
    let count = group.ops.len();
    let needs = feature
        .as_deref()
        .map(|f| format!(" (feature `{f}`)"))
        .unwrap_or_default();
    parts.listing = format!(
        "- [`Client::{bare}`]{needs}: {}, {count} operation{}",
        group.origin,
        if count == 1 { "" } else { "s" }
    );
    let accessor_doc = doc_attrs(&format!(
        "The operations on {}: {count}, each a method of [`{ty_name}`].",
        group.origin
    ));
    let gate = feature.as_deref().map(|f| features::cfg(&[f]));
    parts.accessor = quote! {
        #accessor_doc
        #gate
        pub fn #accessor_ident(&self) -> #ty_ident<'_> {
            #ty_ident { client: self }
        }
    };
    let ty_doc = doc_attrs(&format!(
        "The operations on {}, from [`Client::{bare}`]. A borrow of the client: \
         cheap to make, and calls through it share the client's pool and retry budget.",
        group.origin
    ));
    group_items.push(quote! {
        #ty_doc
        #[derive(Debug, Clone, Copy)]
        pub struct #ty_ident<'a> {
            client: &'a Client,
        }

        impl<'a> #ty_ident<'a> {
            #(#members)*
        }
    });
    let code: TokenStream = group_items.into_iter().collect();
    match (space.features.as_mut(), gate, feature) {
        (Some(features), Some(gate), Some(feature)) => {
            features.group(feature, &code);
            parts.items = features::gate_items(code, &gate);
        }
        _ => parts.items = code,
    }
    parts
}

fn credential_setter(scheme: &crate::model::SecurityScheme, setter: &str) -> TokenStream {
    let name = &scheme.name;
    let setter = ident(setter);
    let mut doc = format!("Authenticates with the `{name}` scheme");
    let (args, credential) = match &scheme.kind {
        SecurityKind::Bearer => {
            doc.push_str(" (`Authorization: Bearer …`).");
            (
                quote!(token: impl ::std::convert::Into<::std::string::String>),
                quote!(::idem_runtime::rt::client::Credential::Bearer(token.into())),
            )
        }
        SecurityKind::Basic => {
            doc.push_str(" (HTTP basic).");
            (
                quote!(user: impl ::std::convert::Into<::std::string::String>, password: impl ::std::convert::Into<::std::string::String>),
                quote!(::idem_runtime::rt::client::Credential::Basic {
                    user: user.into(),
                    password: password.into()
                }),
            )
        }
        SecurityKind::ApiKey {
            location,
            parameter,
        } => {
            doc.push_str(&format!(" (an API key in the `{parameter}` {location})."));
            let variant = match location.as_str() {
                "query" => format_ident!("Query"),
                "cookie" => format_ident!("Cookie"),
                _ => format_ident!("Header"),
            };
            (
                quote!(key: impl ::std::convert::Into<::std::string::String>),
                quote!(::idem_runtime::rt::client::Credential::#variant { name: #parameter, value: key.into() }),
            )
        }
        SecurityKind::Other(kind) => {
            doc.push_str(&format!(" ({kind}): sent as a bearer token."));
            (
                quote!(token: impl ::std::convert::Into<::std::string::String>),
                quote!(::idem_runtime::rt::client::Credential::Bearer(token.into())),
            )
        }
    };
    if let Some(description) = &scheme.description {
        doc.push_str("\n\n");
        doc.push_str(description);
    }
    let doc = doc_attrs(&doc);
    quote! {
        #doc
        pub fn #setter(mut self, #args) -> Self {
            self.inner.set_credential(#name, #credential);
            self
        }
    }
}

fn defaults(policy: &RetryPolicy) -> TokenStream {
    let attempts = number(policy.max_attempts);
    let base = millis(policy.base);
    let cap = millis(policy.cap);
    let deadline = millis(policy.deadline);
    let decorrelated = policy.backoff == Backoff::DecorrelatedJitter;
    let b = &policy.budget;
    let (capacity, transient, throttle, refund) = (
        number(b.capacity),
        number(b.transient_cost),
        number(b.throttle_cost),
        number(b.success_refund),
    );
    quote! {
        ::idem_runtime::rt::client::Defaults {
            max_attempts: #attempts,
            base: ::std::time::Duration::from_millis(#base),
            cap: ::std::time::Duration::from_millis(#cap),
            decorrelated: #decorrelated,
            deadline: ::std::time::Duration::from_millis(#deadline),
            budget: ::idem_runtime::rt::client::BudgetConfig {
                capacity: #capacity,
                transient_cost: #transient,
                throttle_cost: #throttle,
                success_refund: #refund,
            },
        }
    }
}

fn millis(d: std::time::Duration) -> proc_macro2::Literal {
    proc_macro2::Literal::u64_unsuffixed(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One operation: its items (spec const, params, body and result types,
/// decoder) and its method.
fn operation(
    model: &Model,
    space: &mut TypeSpace<'_>,
    op: &Operation,
    method: &str,
    helper: &str,
    owner: &str,
    root: &RetryPolicy,
) -> (TokenStream, TokenStream) {
    let camel = naming::camel(&op.name, "Call");
    let konst = naming::prefixed("OP", &helper.trim_start_matches("r#").to_ascii_uppercase());
    let decoder = naming::prefixed("decode", helper);
    let method_ident = ident(method);

    // Path parameters, in the order the template names them.
    let mut sites: Vec<Site> = Vec::new();
    let PathParts {
        mut args,
        pieces,
        literal: path_is_literal,
    } = path_parts(space, op, &camel, &mut sites);

    // Query, header and cookie parameters: one struct.
    let mut items = Vec::new();
    let mut sets = Vec::new();
    if let Some(params) = params_struct(space, op, &camel, owner, &mut sites) {
        items.push(params.item);
        args.push(params.arg);
        sets = params.sets;
    }

    // The body, in each media type the operation accepts.
    let (body_arg, body_set, body_items, body_sites) = request_body(space, op, &camel, helper);
    items.extend(body_items);
    let mut optional_body = None;
    let body_set = match body_arg {
        BodyArg::None => body_set,
        BodyArg::Required(arg) => {
            args.push(arg);
            sites.extend(body_sites);
            body_set
        }
        BodyArg::Optional(ty) => {
            // Set with `.body(…)` on the call: a function that encodes and
            // checks it.
            let setter = naming::prefixed("body", helper);
            let check = space.defer(body_sites, quote!(request.check(v);));
            items.push(quote! {
                fn #setter(request: &mut ::idem_runtime::rt::client::Request, body: &#ty) {
                    #body_set
                    #check
                }
            });
            optional_body = Some((ty, setter));
            TokenStream::new()
        }
    };
    // Checked before the first attempt: a request its schema forbids is
    // never sent.
    let validate = space.defer(sites, quote!(let request = request.validated(v);));

    // The result.
    let (ok_ty, err_ty, decode_body, result_items) = responses(space, op, &camel);
    items.extend(result_items);

    let http_method = format_ident!("{}", op.method.as_str());
    let path_expr = if path_is_literal {
        let path = &op.path;
        quote!(::std::string::String::from(#path))
    } else {
        quote!([#(#pieces),*].concat())
    };
    let request_binding = if sets.is_empty() && body_set.is_empty() {
        quote!(let request)
    } else {
        quote!(let mut request)
    };
    let mut method_doc = method_doc(op);
    if let Some((ty, _)) = &optional_body {
        let ty = ty.to_string().replace(' ', "");
        method_doc.push_str(&format!(
            "\n\nThe body is optional: send one with `.body(&{ty})` on the returned call."
        ));
    }
    let deprecated = op.deprecated.then(|| quote!(#[deprecated]));
    let ok_tokens = space.tokens(&ok_ty);
    let err_tokens =
        err_ty.map_or_else(|| quote!(::std::convert::Infallible), |t| space.tokens(&t));
    let (body_ty, start) = match &optional_body {
        None => (
            None,
            quote!(self.client.inner.call(&#konst, request, #decoder)),
        ),
        Some((ty, setter)) => (
            Some(ty.clone()),
            quote!(self.client.inner.call_with_body(&#konst, request, #decoder, #setter)),
        ),
    };
    // What the call can do besides `.send()`: stream events, or page.
    let (mode, start) = call_mode(
        model,
        space,
        op,
        &ModeOf {
            camel: &camel,
            helper,
            start,
        },
        &mut items,
        &mut method_doc,
    );
    let call_ty = match (body_ty, mode) {
        (None, None) => quote!(::idem_runtime::rt::client::Call<'a, #ok_tokens, #err_tokens>),
        (Some(ty), None) => {
            quote!(::idem_runtime::rt::client::Call<'a, #ok_tokens, #err_tokens, #ty>)
        }
        (body, Some(mode)) => {
            let body = body.unwrap_or_else(|| quote!(::idem_runtime::rt::client::NoBody));
            quote!(::idem_runtime::rt::client::Call<'a, #ok_tokens, #err_tokens, #body, #mode>)
        }
    };
    let method_doc = doc_attrs(&method_doc);
    let method_tokens = quote! {
        #method_doc
        #deprecated
        pub fn #method_ident(&self, #(#args),*) -> #call_ty {
            #request_binding = ::idem_runtime::rt::client::Request::new(::idem_runtime::rt::http::Method::#http_method, #path_expr);
            #(#sets)*
            #body_set
            #validate
            #start
        }
    };
    items.push(spec_items(
        model,
        op,
        root,
        &Helpers {
            konst: &konst,
            decoder: &decoder,
        },
        &Answers {
            ok: &ok_tokens,
            err: &err_tokens,
            decode: &decode_body,
        },
    ));
    (quote!(#(#items)*), method_tokens)
}

/// Where a method's call starts, and what it can do besides `.send()`.
struct ModeOf<'m> {
    camel: &'m str,
    helper: &'m str,
    /// The call as `.send()` runs it.
    start: TokenStream,
}

/// The call's mode (server-sent events, or pages, or neither) and the
/// expression that starts it; a paged call's `PAGES_…` const goes into
/// `items`, and the method's doc says what the mode adds.
fn call_mode(
    model: &Model,
    space: &mut TypeSpace<'_>,
    op: &Operation,
    of: &ModeOf<'_>,
    items: &mut Vec<TokenStream>,
    method_doc: &mut String,
) -> (Option<TokenStream>, TokenStream) {
    let ModeOf {
        camel,
        helper,
        start,
    } = of;
    let events = event_type(space, op, camel);
    let paging = match events {
        Some(_) => None,
        None => crate::model::shape::paging::recognise(model, op)
            .ok()
            .flatten(),
    };
    if let Some(event) = &events {
        let event = space.tokens(event);
        method_doc.push_str(
            "\n\nThe answer can stream: `.stream().await` returns its server-sent events \
             one at a time, typed; `.send()` reads the JSON answer.",
        );
        (
            Some(quote!(::idem_runtime::rt::client::Events<#event>)),
            quote!(#start.events::<#event>()),
        )
    } else if let Some(paging) = &paging {
        let item = space.ty(&paging.item, &format!("{camel}Item"));
        let item = space.tokens(&item);
        let pages = naming::prefixed(
            "PAGES",
            &helper.trim_start_matches("r#").to_ascii_uppercase(),
        );
        let spec = paging::page_spec(paging);
        let spec_doc = format!(
            " How `{} {}` pages: {}.",
            op.method,
            op.path,
            paging.describe()
        );
        items.push(quote! {
            #[doc = #spec_doc]
            const #pages: ::idem_runtime::rt::client::PageSpec = #spec;
        });
        method_doc.push_str(&format!(
            "\n\nThe list pages: `.paginate()` yields every item, fetching each page when \
             it is needed, and `.pages()` every page ({}).",
            paging.describe()
        ));
        (
            Some(quote!(::idem_runtime::rt::client::Paged<#item>)),
            quote!(#start.paged::<#item>(&#pages)),
        )
    } else {
        (None, start.clone())
    }
}

/// A method's path: its arguments (one per path parameter, in the
/// template's order), the pieces its path is concatenated from, and whether
/// it is one literal.
struct PathParts {
    args: Vec<TokenStream>,
    pieces: Vec<TokenStream>,
    literal: bool,
}

fn path_parts(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
    sites: &mut Vec<Site>,
) -> PathParts {
    let mut arg_namer = Namer::reserving(&["self", "params", "body", "v", "request"]);
    let mut args = Vec::new();
    let mut pieces: Vec<TokenStream> = Vec::new();
    let mut rest = op.path.as_str();
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|c| open + c) else {
            break;
        };
        let literal = &rest[..open];
        if !literal.is_empty() {
            pieces.push(quote!(#literal));
        }
        let name = &rest[open + 1..close];
        let param = op
            .parameters
            .iter()
            .find(|p| p.location == "path" && p.name == name);
        let arg = ident(&arg_namer.unique(&naming::snake(name, "id")));
        let ty = match param.and_then(|p| p.schema.as_ref()) {
            Some(schema) => {
                let ty = space.ty(schema, &format!("{camel}{}", naming::camel(name, "Id")));
                let value = if by_value(&ty) {
                    quote!(&#arg)
                } else {
                    quote!(#arg)
                };
                if !matches!(ty, Ty::Option(_)) {
                    sites.push(Site {
                        path: format!("path.{name}"),
                        ty: ty.clone(),
                        checks: space.checks(schema),
                        value,
                    });
                }
                path_arg_type(space, &ty)
            }
            None => quote!(&str),
        };
        args.push(quote!(#arg: #ty));
        pieces.push(quote!(&::idem_runtime::rt::client::segment(&#arg)));
        rest = &rest[close + 1..];
    }
    let literal = pieces.is_empty();
    if !rest.is_empty() {
        pieces.push(quote!(#rest));
    }

    PathParts {
        args,
        pieces,
        literal,
    }
}

/// The struct of a method's query, header and cookie parameters, the
/// argument that takes it, and the statements that set each on the request.
struct Params {
    item: TokenStream,
    arg: TokenStream,
    sets: Vec<TokenStream>,
}

fn params_struct(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
    owner: &str,
    sites: &mut Vec<Site>,
) -> Option<Params> {
    let others: Vec<_> = op
        .parameters
        .iter()
        .filter(|p| matches!(p.location.as_str(), "query" | "header" | "cookie"))
        .filter(|p| !is_key_parameter(op, p))
        .collect();
    if others.is_empty() {
        return None;
    }
    let mut sets = Vec::new();
    let params_name = space.namer.unique(&format!("{camel}Params"));
    let params_ident = ident(&params_name);
    let mut fields = Vec::new();
    let mut field_namer = Namer::default();
    let mut all_optional = true;
    for p in &others {
        let field = ident(&field_namer.unique(&naming::snake(&p.name, "value")));
        let ty = match &p.schema {
            Some(schema) => space.ty(
                schema,
                &format!("{camel}{}", naming::camel(&p.name, "Value")),
            ),
            None => Ty::String,
        };
        let (ty, optional) = match ty {
            Ty::Option(inner) => (*inner, true),
            other => (other, !p.required),
        };
        if let Some(schema) = &p.schema {
            sites.push(Site {
                path: format!("{}.{}", p.location, p.name),
                ty: if optional {
                    Ty::Option(Box::new(ty.clone()))
                } else {
                    ty.clone()
                },
                checks: space.checks(schema),
                value: quote!(&params.#field),
            });
        }
        all_optional &= optional;
        let ty_tokens = space.tokens(&ty);
        let field_ty = if optional {
            quote!(::std::option::Option<#ty_tokens>)
        } else {
            ty_tokens
        };
        let mut doc = p.description.clone().unwrap_or_default();
        if !doc.is_empty() {
            doc.push_str("\n\n");
        }
        doc.push_str(&format!("`{}` ({} parameter).", p.name, p.location));
        let doc = doc_attrs(&doc);
        let deprecated = p.deprecated.then(|| quote!(#[deprecated]));
        fields.push(quote!(#doc #deprecated pub #field: #field_ty,));
        let wire = &p.name;
        let set = match p.location.as_str() {
            "query" => {
                let (style, explode) = query_style(p.style.as_deref(), p.explode);
                quote!(request.query(#wire, &params.#field, ::idem_runtime::rt::client::Style::#style, #explode);)
            }
            "header" => quote!(request.header(#wire, &params.#field);),
            _ => quote!(request.cookie(#wire, &params.#field);),
        };
        sets.push(set);
    }
    let default = all_optional.then(|| quote!(Default,));
    let doc = format!(" Query, header and cookie parameters of [`{owner}`].");
    let item = quote! {
        #[doc = #doc]
        #[derive(Debug, Clone, PartialEq, #default)]
        pub struct #params_ident {
            #(#fields)*
        }
    };
    Some(Params {
        item,
        arg: quote!(params: &#params_ident),
        sets,
    })
}

/// The per-operation helpers a method names: its `OP_…` const and its
/// decoder.
struct Helpers<'h> {
    konst: &'h proc_macro2::Ident,
    decoder: &'h proc_macro2::Ident,
}

/// A method's answer types and the decoder's body.
struct Answers<'a> {
    ok: &'a TokenStream,
    err: &'a TokenStream,
    decode: &'a TokenStream,
}

/// The operation's `OP_…` const (retry class, key, security, policy) and
/// its decoder.
fn spec_items(
    model: &Model,
    op: &Operation,
    root: &RetryPolicy,
    helpers: &Helpers<'_>,
    answers: &Answers<'_>,
) -> TokenStream {
    let Helpers { konst, decoder } = helpers;
    let Answers {
        ok: ok_tokens,
        err: err_tokens,
        decode: decode_body,
    } = answers;
    let class = match op.class {
        RetryClass::Safe => quote!(Safe),
        RetryClass::Keyed => quote!(Keyed),
        RetryClass::UnsafeDocumented => quote!(UnsafeDocumented),
        RetryClass::Unsafe => quote!(Unsafe),
    };
    let op_name = op.stable_name();
    let warning = op.unsafe_retry.as_ref().map(|w| {
        let text = &w.value;
        quote!(.warning(#text))
    });
    let request_id = declared_request_id(op).map(|name| quote!(.request_id_header(#name)));
    let key = match (&op.key.requirement, &op.key.source) {
        (KeyRequirement::None, _) | (_, None) => {
            quote!(::idem_runtime::rt::client::KeyLocation::None)
        }
        (_, Some(KeySource::Header { name, .. })) => {
            quote!(::idem_runtime::rt::client::KeyLocation::Header(#name))
        }
        (_, Some(KeySource::Body { field })) => {
            quote!(::idem_runtime::rt::client::KeyLocation::Body(#field))
        }
        (_, Some(KeySource::Query { name, .. })) => {
            quote!(::idem_runtime::rt::client::KeyLocation::Query(#name))
        }
    };
    let security: Vec<String> = model.security_of(op).iter().flatten().cloned().collect();
    let retry = policy_override(&op.retry, root);
    let spec_doc = format!(
        " `{} {}`: its retry class, key and policy.",
        op.method, op.path
    );
    quote! {
        #[doc = #spec_doc]
        const #konst: ::idem_runtime::rt::client::OperationSpec = ::idem_runtime::rt::client::OperationSpec {
            operation: ::idem_runtime::rt::client::Operation::new(#op_name, ::idem_runtime::rt::client::RetryClass::#class) #warning #request_id,
            key: #key,
            security: &[#(#security),*],
            retry: #retry,
        };

        fn #decoder(raw: &::idem_runtime::rt::client::Raw) -> ::std::result::Result<#ok_tokens, ::idem_runtime::rt::client::ApiError<#err_tokens>> {
            #decode_body
        }
    }
}

/// The event type of an operation whose success answer declares
/// `text/event-stream` with a schema.
fn event_type(space: &mut TypeSpace<'_>, op: &Operation, camel: &str) -> Option<Ty> {
    let schema = op
        .responses
        .iter()
        .filter(|r| r.status.starts_with('2'))
        .flat_map(|r| r.media.iter())
        .find(|m| m.media_type.eq_ignore_ascii_case("text/event-stream"))?
        .schema
        .as_ref()?;
    Some(space.ty(schema, &format!("{camel}Event")))
}

/// Whether a path argument of this type is taken by value.
fn by_value(ty: &Ty) -> bool {
    matches!(
        ty,
        Ty::Bool | Ty::I32 | Ty::I64 | Ty::U32 | Ty::U64 | Ty::F32 | Ty::F64
    )
}

fn path_arg_type(space: &TypeSpace<'_>, ty: &Ty) -> TokenStream {
    match ty {
        Ty::String | Ty::Option(_) => quote!(&str),
        Ty::Bool | Ty::I32 | Ty::I64 | Ty::U32 | Ty::U64 | Ty::F32 | Ty::F64 => space.tokens(ty),
        other => {
            let t = space.tokens(other);
            quote!(&#t)
        }
    }
}

fn policy_override(op: &RetryPolicy, root: &RetryPolicy) -> TokenStream {
    if op == root {
        return quote!(::idem_runtime::rt::client::PolicyOverride::NONE);
    }
    let opt_u32 = |v: Option<u32>| match v {
        Some(v) => {
            let v = number(v);
            quote!(::std::option::Option::Some(#v))
        }
        None => quote!(::std::option::Option::None),
    };
    let opt_ms = |v: Option<std::time::Duration>| match v {
        Some(v) => {
            let ms = millis(v);
            quote!(::std::option::Option::Some(::std::time::Duration::from_millis(#ms)))
        }
        None => quote!(::std::option::Option::None),
    };
    let attempts = opt_u32((op.max_attempts != root.max_attempts).then_some(op.max_attempts));
    let deadline = opt_ms((op.deadline != root.deadline).then_some(op.deadline));
    let p99 = opt_ms(op.p99);
    let backoff = if (op.base, op.cap, op.backoff) == (root.base, root.cap, root.backoff) {
        quote!(::std::option::Option::None)
    } else {
        let (base, cap) = (millis(op.base), millis(op.cap));
        let decorrelated = op.backoff == Backoff::DecorrelatedJitter;
        quote!(::std::option::Option::Some((::std::time::Duration::from_millis(#base), ::std::time::Duration::from_millis(#cap), #decorrelated)))
    };
    quote! {
        ::idem_runtime::rt::client::PolicyOverride {
            max_attempts: #attempts,
            deadline: #deadline,
            p99: #p99,
            backoff: #backoff,
        }
    }
}

fn method_doc(op: &Operation) -> String {
    let mut doc = doc_head(op);
    let class = match op.class {
        RetryClass::Safe => "Retry class `safe`: retried on connection failures, timeouts, 429, 502, 503 and 504 (500 at most once).".to_owned(),
        RetryClass::Keyed => {
            let location = match &op.key.source {
                Some(KeySource::Header { name, .. }) => format!("in the `{name}` header"),
                Some(KeySource::Body { field }) => format!("in the body's `{field}` field"),
                Some(KeySource::Query { name, .. }) => format!("in the `{name}` query parameter"),
                None => "with the request".to_owned(),
            };
            let required = if op.key.requirement == KeyRequirement::Required { "requires" } else { "accepts" };
            format!(
                "Retry class `keyed`: the API {required} an idempotency key {location}. One is minted per call \
                 and sent unchanged on every attempt; pass your own with `.idempotency_key(…)` (derive it from \
                 an identifier you hold, so a later retry of the same operation reuses it)."
            )
        }
        RetryClass::UnsafeDocumented | RetryClass::Unsafe => format!(
            "Retry class `{}`: takes no idempotency key, so it is never re-sent once the request may have \
             reached the server; an ambiguous failure ends as an unknown outcome \
             (`RetryError::OutcomeUnknown`): check before calling again.",
            op.class
        ),
    };
    doc.push_str(&class);
    if let Some(warning) = &op.unsafe_retry {
        doc.push_str("\n\nWarning from the API: ");
        doc.push_str(warning.value.trim());
    }
    doc
}
