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

mod groups;
pub(crate) mod paging;

use groups::{groups, member_names};

use super::features;
use super::naming::{self, Namer};
use super::types::{Site, Ty, TypeDef, TypeSpace, doc_attrs, ident};
use crate::model::schema::Kind;
use crate::model::{KeySource, Media, Model, Operation, RetryClass, RetryPolicy, SecurityKind};
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
    let mut helpers = Namer::reserving(RESERVED_METHODS);
    let mut items = Vec::new();
    let mut accessors = Vec::new();
    let mut listing = Vec::new();
    let mut example = None;
    let groups = groups(model);
    // One group is the whole client: a feature for it would gate nothing.
    if groups.len() < 2 {
        space.features = None;
    }
    for group in groups {
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
            let (item, body) = operation(model, space, op, &name, &helper, &owner, &root_policy);
            group_items.push(item);
            members.push(body);
        }
        let count = group.ops.len();
        let needs = feature
            .as_deref()
            .map(|f| format!(" (feature `{f}`)"))
            .unwrap_or_default();
        listing.push(format!(
            "- [`Client::{bare}`]{needs}: {}, {count} operation{}",
            group.origin,
            if count == 1 { "" } else { "s" }
        ));
        let accessor_doc = doc_attrs(&format!(
            "The operations on {}: {count}, each a method of [`{ty_name}`].",
            group.origin
        ));
        let gate = feature.as_deref().map(|f| features::cfg(&[f]));
        accessors.push(quote! {
            #accessor_doc
            #gate
            pub fn #accessor_ident(&self) -> #ty_ident<'_> {
                #ty_ident { client: self }
            }
        });
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
                items.push(features::gate_items(code, &gate));
            }
            _ => items.push(code),
        }
    }
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
        pub const RETRY_DEFAULTS: ::idem_runtime::client::support::Defaults = #defaults;

        #client_doc
        #[derive(Debug, Clone)]
        pub struct Client {
            inner: ::idem_runtime::client::support::ApiClient,
        }

        impl Client {
            /// A client for the API at `base_url`, with the spec's retry defaults.
            pub fn new(base_url: &str) -> ::std::result::Result<Self, ::idem_runtime::client::support::InvalidBaseUrl> {
                Self::with_http(base_url, ::idem_runtime::reqwest::Client::new())
            }

            /// Like [`Client::new`], over a reqwest client you configured.
            pub fn with_http(base_url: &str, http: ::idem_runtime::reqwest::Client) -> ::std::result::Result<Self, ::idem_runtime::client::support::InvalidBaseUrl> {
                Self::with_retry_client(base_url, RETRY_DEFAULTS.retry_client(http))
            }

            /// Like [`Client::new`], over a retry client you configured (its
            /// policy, budget, breaker, clock).
            pub fn with_retry_client(base_url: &str, retry: ::idem_runtime::client::RetryClient) -> ::std::result::Result<Self, ::idem_runtime::client::support::InvalidBaseUrl> {
                ::std::result::Result::Ok(Self { inner: ::idem_runtime::client::support::ApiClient::new(base_url, retry)? })
            }

            /// The retry client every call goes through (its metrics, budget, policy).
            pub fn retry_client(&self) -> &::idem_runtime::client::RetryClient {
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
        /// the key a keyed call sends, and the errors calls and pages return.
        #[allow(unused_imports, reason = "re-exported for callers: a binary that includes the API may name none of them")]
        pub mod prelude {
            pub use ::idem_runtime::client::{ApiError, IdempotencyKey, PageError, Resume, StreamExt as _};
        }

        #(#items)*
    }
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
                quote!(::idem_runtime::client::support::Credential::Bearer(
                    token.into()
                )),
            )
        }
        SecurityKind::Basic => {
            doc.push_str(" (HTTP basic).");
            (
                quote!(user: impl ::std::convert::Into<::std::string::String>, password: impl ::std::convert::Into<::std::string::String>),
                quote!(::idem_runtime::client::support::Credential::Basic {
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
                quote!(::idem_runtime::client::support::Credential::#variant { name: #parameter, value: key.into() }),
            )
        }
        SecurityKind::Other(kind) => {
            doc.push_str(&format!(" ({kind}): sent as a bearer token."));
            (
                quote!(token: impl ::std::convert::Into<::std::string::String>),
                quote!(::idem_runtime::client::support::Credential::Bearer(
                    token.into()
                )),
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
        ::idem_runtime::client::support::Defaults {
            max_attempts: #attempts,
            base: ::std::time::Duration::from_millis(#base),
            cap: ::std::time::Duration::from_millis(#cap),
            decorrelated: #decorrelated,
            deadline: ::std::time::Duration::from_millis(#deadline),
            budget: ::idem_runtime::client::BudgetConfig {
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

fn number(n: impl Into<u64>) -> proc_macro2::Literal {
    proc_macro2::Literal::u64_unsuffixed(n.into())
}

/// How a body in one media type is sent or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoding {
    Json,
    Form,
    Multipart,
    Text,
    Bytes,
}

pub(super) fn encoding_of(media: &str) -> Encoding {
    let media = media.to_ascii_lowercase();
    let essence = media.split(';').next().unwrap_or("").trim();
    if essence == "application/json"
        || essence.ends_with("+json")
        || essence == "*/*"
        || essence.ends_with("/json")
    {
        Encoding::Json
    } else if essence == "application/x-www-form-urlencoded" {
        Encoding::Form
    } else if essence == "multipart/form-data" || essence.starts_with("multipart/") {
        Encoding::Multipart
    } else if essence.starts_with("text/") || essence.ends_with("+xml") || essence.ends_with("/xml")
    {
        Encoding::Text
    } else {
        Encoding::Bytes
    }
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
    let mut arg_namer = Namer::reserving(&["self", "params", "body", "v", "request"]);
    let mut sites: Vec<Site> = Vec::new();
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
        pieces.push(quote!(&::idem_runtime::client::support::segment(&#arg)));
        rest = &rest[close + 1..];
    }
    let path_is_literal = pieces.is_empty();
    if !rest.is_empty() {
        pieces.push(quote!(#rest));
    }

    // Query, header and cookie parameters: one struct.
    let others: Vec<_> = op
        .parameters
        .iter()
        .filter(|p| matches!(p.location.as_str(), "query" | "header" | "cookie"))
        .filter(|p| !is_key_parameter(op, p))
        .collect();
    let mut items = Vec::new();
    let mut sets = Vec::new();
    if !others.is_empty() {
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
                    quote!(request.query(#wire, &params.#field, ::idem_runtime::client::support::Style::#style, #explode);)
                }
                "header" => quote!(request.header(#wire, &params.#field);),
                _ => quote!(request.cookie(#wire, &params.#field);),
            };
            sets.push(set);
        }
        let default = all_optional.then(|| quote!(Default,));
        let doc = format!(" Query, header and cookie parameters of [`{owner}`].");
        items.push(quote! {
            #[doc = #doc]
            #[derive(Debug, Clone, PartialEq, #default)]
            pub struct #params_ident {
                #(#fields)*
            }
        });
        args.push(quote!(params: &#params_ident));
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
                fn #setter(request: &mut ::idem_runtime::client::support::Request, body: &#ty) {
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

    let class = match op.class {
        RetryClass::Safe => quote!(Safe),
        RetryClass::Keyed => quote!(Keyed),
        RetryClass::UnsafeDocumented => quote!(UnsafeDocumented),
        RetryClass::Unsafe => quote!(Unsafe),
    };
    let op_name = &op.name;
    let warning = op.unsafe_retry.as_ref().map(|w| {
        let text = &w.value;
        quote!(.warning(#text))
    });
    let key = match (&op.key.requirement, &op.key.source) {
        (KeyRequirement::None, _) | (_, None) => {
            quote!(::idem_runtime::client::support::KeyLocation::None)
        }
        (_, Some(KeySource::Header { name, .. })) => {
            quote!(::idem_runtime::client::support::KeyLocation::Header(#name))
        }
        (_, Some(KeySource::Body { field })) => {
            quote!(::idem_runtime::client::support::KeyLocation::Body(#field))
        }
    };
    let security: Vec<String> = op
        .security
        .as_ref()
        .unwrap_or(&model.security)
        .iter()
        .flatten()
        .cloned()
        .collect();
    let retry = policy_override(&op.retry, root);
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
    let mut method_doc = method_doc(model, op);
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
    let events = event_type(space, op, &camel);
    let paging = match events {
        Some(_) => None,
        None => paging::recognise(model, op).ok().flatten(),
    };
    let (mode, start) = if let Some(event) = &events {
        let event = space.tokens(event);
        method_doc.push_str(
            "\n\nThe answer can stream: `.stream().await` returns its server-sent events \
             one at a time, typed; `.send()` reads the JSON answer.",
        );
        (
            Some(quote!(::idem_runtime::client::Events<#event>)),
            quote!(#start.events::<#event>()),
        )
    } else if let Some(paging) = &paging {
        let item = space.ty(&paging.item, &format!("{camel}Item"));
        let item = space.tokens(&item);
        let pages = naming::prefixed(
            "PAGES",
            &helper.trim_start_matches("r#").to_ascii_uppercase(),
        );
        let spec = paging.spec();
        let spec_doc = format!(
            " How `{} {}` pages: {}.",
            op.method,
            op.path,
            paging.describe()
        );
        items.push(quote! {
            #[doc = #spec_doc]
            const #pages: ::idem_runtime::client::PageSpec = #spec;
        });
        method_doc.push_str(&format!(
            "\n\nThe list pages: `.paginate()` yields every item, fetching each page when \
             it is needed, and `.pages()` every page ({}).",
            paging.describe()
        ));
        (
            Some(quote!(::idem_runtime::client::Paged<#item>)),
            quote!(#start.paged::<#item>(&#pages)),
        )
    } else {
        (None, start)
    };
    let call_ty = match (body_ty, mode) {
        (None, None) => quote!(::idem_runtime::client::support::Call<'a, #ok_tokens, #err_tokens>),
        (Some(ty), None) => {
            quote!(::idem_runtime::client::support::Call<'a, #ok_tokens, #err_tokens, #ty>)
        }
        (body, Some(mode)) => {
            let body = body.unwrap_or_else(|| quote!(::idem_runtime::client::support::NoBody));
            quote!(::idem_runtime::client::support::Call<'a, #ok_tokens, #err_tokens, #body, #mode>)
        }
    };
    let method_doc = doc_attrs(&method_doc);
    let method_tokens = quote! {
        #method_doc
        #deprecated
        pub fn #method_ident(&self, #(#args),*) -> #call_ty {
            #request_binding = ::idem_runtime::client::support::Request::new(::idem_runtime::http::Method::#http_method, #path_expr);
            #(#sets)*
            #body_set
            #validate
            #start
        }
    };
    let spec_doc = format!(
        " `{} {}`: its retry class, key and policy.",
        op.method, op.path
    );
    items.push(quote! {
        #[doc = #spec_doc]
        const #konst: ::idem_runtime::client::support::OperationSpec = ::idem_runtime::client::support::OperationSpec {
            operation: ::idem_runtime::client::Operation::new(#op_name, ::idem_runtime::client::RetryClass::#class) #warning,
            key: #key,
            security: &[#(#security),*],
            retry: #retry,
        };

        fn #decoder(raw: &::idem_runtime::client::support::Raw) -> ::std::result::Result<#ok_tokens, ::idem_runtime::client::support::ApiError<#err_tokens>> {
            #decode_body
        }
    });
    (quote!(#(#items)*), method_tokens)
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

pub(super) fn is_key_parameter(op: &Operation, p: &crate::model::Parameter) -> bool {
    p.location == "header"
        && op.key.requirement != KeyRequirement::None
        && matches!(&op.key.source, Some(KeySource::Header { name, .. }) if name.eq_ignore_ascii_case(&p.name))
}

pub(super) fn query_style(
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

fn policy_override(op: &RetryPolicy, root: &RetryPolicy) -> TokenStream {
    if op == root {
        return quote!(::idem_runtime::client::support::PolicyOverride::NONE);
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
        ::idem_runtime::client::support::PolicyOverride {
            max_attempts: #attempts,
            deadline: #deadline,
            p99: #p99,
            backoff: #backoff,
        }
    }
}

/// The start of an operation's doc comment, client and server alike: its
/// summary, its description, and its method and path.
pub(super) fn doc_head(op: &Operation) -> String {
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

fn method_doc(model: &Model, op: &Operation) -> String {
    let mut doc = doc_head(op);
    let class = match op.class {
        RetryClass::Safe => "Retry class `safe`: retried on connection failures, timeouts, 429, 502, 503 and 504 (500 at most once).".to_owned(),
        RetryClass::Keyed => {
            let location = match &op.key.source {
                Some(KeySource::Header { name, .. }) => format!("in the `{name}` header"),
                Some(KeySource::Body { field }) => format!("in the body's `{field}` field"),
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
    let _ = model;
    doc
}

/// The body argument, the statement that sets it, and the types it needs.
/// The body argument, the statements setting it, the items it needs, and
/// (for one media type) the body's type and keywords, which the call
/// validates.
type BodyParts = (BodyArg, TokenStream, Vec<TokenStream>, Vec<Site>);

/// How a method takes its body.
enum BodyArg {
    /// It takes none: the operation has no body, or one that can only be
    /// `{}` (sent when the spec requires it).
    None,
    /// A required argument, `body: &T`.
    Required(TokenStream),
    /// Optional, set with `.body(&T)` on the call; the type `T`.
    Optional(TokenStream),
}

/// Whether `op`'s body must be sent: only where the spec says so, and never
/// on a method whose body has no defined meaning (RFC 9110 §9.3.1, §9.3.2,
/// §9.3.5). Client and server agree on it.
pub(super) fn body_required(op: &Operation) -> bool {
    op.request_body.as_ref().is_some_and(|b| b.required)
        && !matches!(op.method.as_str(), "GET" | "HEAD" | "DELETE")
}

/// The body of `op`, as [`BodyParts`].
fn request_body(space: &mut TypeSpace<'_>, op: &Operation, camel: &str, method: &str) -> BodyParts {
    let none = || (BodyArg::None, TokenStream::new(), Vec::new(), Vec::new());
    let Some(body) = &op.request_body else {
        return none();
    };
    let optional = !body_required(op);
    let empty_only = !body.media.is_empty()
        && body.media.iter().all(|m| {
            m.schema.as_ref().is_some_and(|s| {
                matches!(&space.model().schemas.resolve(s).kind,
                    Kind::Object(o) if o.properties.is_empty() && o.closed)
            })
        });
    if empty_only {
        let set = match body.media.first().map(|m| encoding_of(&m.media_type)) {
            _ if optional => TokenStream::new(),
            Some(Encoding::Form) => {
                quote!(request.form(&::idem_runtime::serde_json::Map::new(), &[]);)
            }
            _ => quote!(request.json(&::idem_runtime::serde_json::Map::new());),
        };
        return (BodyArg::None, set, Vec::new(), Vec::new());
    }
    // One entry per encoding; the first media type of each wins.
    let mut choices: Vec<(&Media, Encoding)> = Vec::new();
    for media in &body.media {
        let enc = encoding_of(&media.media_type);
        if !choices.iter().any(|(_, e)| *e == enc) {
            choices.push((media, enc));
        }
    }
    if choices.is_empty() {
        return none();
    }
    let mut items = Vec::new();
    let single = choices.len() == 1;
    let enum_name = (!single).then(|| space.namer.unique(&format!("{camel}Body")));
    let mut variants = Vec::new();
    let mut arms = Vec::new();
    let mut variant_namer = Namer::default();
    let mut sites = Vec::new();
    let multipart = naming::prefixed("multipart", method);
    for (media, enc) in &choices {
        let context = if single {
            format!("{camel}Request")
        } else {
            format!("{camel}Request{}", encoding_name(*enc))
        };
        let ty = match (enc, &media.schema) {
            (Encoding::Text, _) => Ty::String,
            (Encoding::Bytes, _) => Ty::Bytes,
            (_, Some(schema)) => space.ty(schema, &context),
            (_, None) => Ty::Value,
        };
        let ty = match ty {
            Ty::Option(inner) => *inner,
            other => other,
        };
        let media_type = &media.media_type;
        let deep: Vec<&str> = media
            .encoding
            .iter()
            .filter(|e| e.style.as_deref() == Some("deepObject"))
            .map(|e| e.property.as_str())
            .collect();
        let set = |value: TokenStream| match enc {
            Encoding::Json => quote!(request.json(#value);),
            Encoding::Form => quote!(request.form(#value, &[#(#deep),*]);),
            Encoding::Text => {
                quote!(request.raw(#media_type, ::std::string::String::from(#value));)
            }
            Encoding::Bytes => {
                quote!(request.raw(#media_type, ::std::clone::Clone::clone(#value));)
            }
            Encoding::Multipart => quote!(request.multipart(#multipart(#value));),
        };
        if *enc == Encoding::Multipart {
            items.push(multipart_fn(space, &ty, &multipart));
        }
        let tokens = space.tokens(&ty);
        let Some(enum_name) = &enum_name else {
            let arg_ty = match enc {
                Encoding::Text => quote!(str),
                _ => tokens,
            };
            let arg = if optional {
                BodyArg::Optional(arg_ty)
            } else {
                BodyArg::Required(quote!(body: &#arg_ty))
            };
            let checked = match (enc, &media.schema) {
                (Encoding::Text | Encoding::Bytes, _) | (_, None) => Vec::new(),
                (_, Some(schema)) => vec![Site {
                    path: "body".to_owned(),
                    ty: ty.clone(),
                    checks: space.checks(schema),
                    value: quote!(body),
                }],
            };
            return (arg, set(quote!(body)), items, checked);
        };
        let enum_ident = ident(enum_name);
        let variant = ident(&variant_namer.unique(encoding_name(*enc)));
        if let (Encoding::Json | Encoding::Form | Encoding::Multipart, Some(schema)) =
            (enc, &media.schema)
        {
            // The variant the caller picked, when it is this one.
            sites.push(Site {
                path: "body".to_owned(),
                ty: Ty::Option(Box::new(ty.clone())),
                checks: space.checks(schema),
                value: quote! {
                    &match body {
                        #enum_ident::#variant(value) => ::std::option::Option::Some(value),
                        _ => ::std::option::Option::None,
                    }
                },
            });
        }
        let doc = format!(" `{media_type}`");
        variants.push(quote!(#[doc = #doc] #variant(#tokens),));
        let set = set(quote!(value));
        arms.push(quote!(#enum_ident::#variant(value) => { #set }));
    }
    let enum_ident = ident(enum_name.as_deref().unwrap_or("Body"));
    let doc = " The request body, in one of the media types the operation accepts.";
    items.push(quote! {
        #[doc = #doc]
        #[derive(Debug, Clone, PartialEq)]
        pub enum #enum_ident {
            #(#variants)*
        }
    });
    let body_set = quote! {
        match body {
            #(#arms)*
        }
    };
    let arg = if optional {
        BodyArg::Optional(quote!(#enum_ident))
    } else {
        BodyArg::Required(quote!(body: &#enum_ident))
    };
    (arg, body_set, items, sites)
}

pub(super) fn encoding_name(enc: Encoding) -> &'static str {
    match enc {
        Encoding::Json => "Json",
        Encoding::Form => "Form",
        Encoding::Multipart => "Multipart",
        Encoding::Text => "Text",
        Encoding::Bytes => "Bytes",
    }
}

/// A function turning a multipart body type into its parts: binary fields
/// as file parts, the rest as text.
fn multipart_fn(space: &TypeSpace<'_>, ty: &Ty, name: &proc_macro2::Ident) -> TokenStream {
    let tokens = space.tokens(ty);
    let fields = match space.plain(ty) {
        Ty::Def(index) => match space.defs.get(index) {
            Some(TypeDef {
                body: super::types::Body::Struct { fields, .. },
                ..
            }) => Some(fields.clone()),
            _ => None,
        },
        _ => None,
    };
    let parts = match fields {
        Some(fields) => fields
            .iter()
            .map(|f| {
                let field = ident(&f.ident);
                let wire = &f.wire;
                match (&f.ty, f.optional) {
                    (Ty::Bytes, false) => {
                        quote!(parts.bytes(#wire, &body.#field, ::std::option::Option::None);)
                    }
                    (Ty::Bytes, true) => quote! {
                        if let ::std::option::Option::Some(bytes) = &body.#field {
                            parts.bytes(#wire, bytes, ::std::option::Option::None);
                        }
                    },
                    _ => quote!(parts.field(#wire, &body.#field);),
                }
            })
            .collect::<Vec<_>>(),
        None => vec![quote!(parts.field("body", body);)],
    };
    quote! {
        fn #name(body: &#tokens) -> ::idem_runtime::client::support::Multipart {
            let mut parts = ::idem_runtime::client::support::Multipart::new();
            #(#parts)*
            parts
        }
    }
}

/// One documented response outcome.
struct Outcome {
    /// `200`, `4XX`, `default`.
    status: String,
    ty: Option<Ty>,
    enc: Encoding,
    headers: Vec<(String, Ty)>,
    /// The spec's description of the response.
    description: Option<String>,
}

/// What one documented response carries, as both the client (decoding it)
/// and the server (sending it) type it.
pub(super) struct ResponseShape {
    /// A success (2xx, 1xx, 3xx, or `default` when no 2xx is documented).
    pub(super) success: bool,
    pub(super) body: Option<ResponseBody>,
    /// Documented headers other than `Content-Type`: wire name and type.
    pub(super) headers: Vec<(String, Ty)>,
}

pub(super) struct ResponseBody {
    pub(super) ty: Ty,
    /// `Json`, `Text` or `Bytes`.
    pub(super) enc: Encoding,
    pub(super) media: String,
}

/// The shape of `response`: the body in its preferred media type (JSON,
/// then text, then the rest as bytes), inline types named after the
/// operation and status.
pub(super) fn response_shape(
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
        .filter(|h| !h.name.eq_ignore_ascii_case("content-type"))
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

/// The success type, the error type, the decoder's body, and the types they need.
fn responses(
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

fn status_suffix(status: &str) -> String {
    match status {
        "default" => "Default".to_owned(),
        other => other.to_owned(),
    }
}

pub(super) fn status_variant(status: &str) -> String {
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
    let single = outcomes.len() == 1;
    let with_headers = |space: &mut TypeSpace<'_>,
                        items: &mut Vec<TokenStream>,
                        o: &Outcome,
                        base: Ty|
     -> (Ty, Option<TokenStream>) {
        if o.headers.is_empty() {
            return (base, None);
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
        items.push(quote! {
            #[doc = #doc]
            #[derive(Debug, Clone, PartialEq)]
            pub struct #struct_ident {
                #body_field
                #(#fields)*
            }
        });
        let index = space.defs.len();
        space.defs.push(TypeDef {
            name: struct_name.clone(),
            doc: String::new(),
            deprecated: false,
            body: super::types::Body::Pending,
            checks: super::types::Checks::default(),
        });
        let init = quote!(#struct_ident { #body_init #(#inits)* });
        (Ty::Def(index), Some(init))
    };
    // One outcome with documented headers: its body and headers, as a struct.
    if let [only] = outcomes.as_slice()
        && !only.headers.is_empty()
    {
        let base = only.ty.clone().unwrap_or(Ty::Unit);
        let (ty, init) = with_headers(space, items, only, base);
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
    if same {
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
    let mut arms = Vec::new();
    for o in &outcomes {
        let variant = ident(&namer.unique(&status_variant(&o.status)));
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
                let (ty, init) = with_headers(space, items, o, base.unwrap_or(Ty::Unit));
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
            }
            None => variants.push(quote!(#doc #variant,)),
        }
        let value = wrap(value);
        arms.push(arm(&o.status, success, &value, &exact));
    }
    let doc = if success {
        " The documented successful responses."
    } else {
        " The documented error responses."
    };
    items.push(quote! {
        #[doc = #doc]
        #[derive(Debug, Clone, PartialEq)]
        pub enum #enum_ident {
            #(#variants)*
        }
    });
    let index = space.defs.len();
    space.defs.push(TypeDef {
        name: enum_name,
        doc: String::new(),
        deprecated: false,
        body: super::types::Body::Pending,
        checks: super::types::Checks::default(),
    });
    (Some(Ty::Def(index)), arms)
}
