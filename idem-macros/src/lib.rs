//! Proc macros over idem-codegen.
//!
//! [`client!`] generates the typed client of a spec where it is invoked,
//! [`server!`] its server scaffolding.
//!
//! [`audited!`] runs `idem audit` while your crate compiles: every
//! error-severity finding becomes a compile error naming the spec's
//! `file:line:column`, so an unsafe-to-retry operation cannot ship.
//!
//! ```
//! idem_macros::audited!("../fixtures/payments-clean.yaml");
//! ```
//!
//! ```compile_fail
//! // POST /v2/refunds accepts no key and carries no warning.
//! idem_macros::audited!("../fixtures/cratebase.yaml");
//! ```
//!
//! Every macro takes the spec's path, then any number of
//! `overlay = "file.yaml"`: OpenAPI Overlay 1.0 files applied in order as
//! the spec loads, for a spec you do not own. An overlay target that selects
//! nothing is reported as a deprecation warning naming its position.
//!
//! ```
//! // The overlay gives POST /v2/refunds a key.
//! idem_macros::audited!(
//!     "../fixtures/cratebase.yaml",
//!     overlay = "../fixtures/overlays/cratebase.yaml",
//! );
//! ```
//!
//! ```compile_fail
//! #![deny(deprecated)]
//! // The overlay's only target selects nothing: a warning, denied here.
//! idem_macros::audited!(
//!     "../fixtures/payments-clean.yaml",
//!     overlay = "../fixtures/overlays/drift.yaml",
//! );
//! ```
//!
//! ```
//! // The same, with the warning allowed, compiles.
//! idem_macros::audited!(
//!     "../fixtures/payments-clean.yaml",
//!     overlay = "../fixtures/overlays/drift.yaml",
//! );
//! ```

use std::path::PathBuf;

use proc_macro::TokenStream;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::{LitStr, Token, parse_macro_input};

/// A macro's arguments: the spec, then `overlay = "…"` any number of times,
/// and `tags = […]` / `operations = […]` to generate part of the API.
struct Args {
    spec: LitStr,
    overlays: Vec<LitStr>,
    tags: Vec<LitStr>,
    operations: Vec<LitStr>,
}

/// `["a", "b"]`.
fn string_list(input: ParseStream<'_>) -> syn::Result<Vec<LitStr>> {
    let content;
    syn::bracketed!(content in input);
    let items = content.parse_terminated(|p| p.parse::<LitStr>(), Token![,])?;
    Ok(items.into_iter().collect())
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let spec: LitStr = input.parse()?;
        let mut args = Args {
            spec,
            overlays: Vec::new(),
            tags: Vec::new(),
            operations: Vec::new(),
        };
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let name: syn::Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            match name.to_string().as_str() {
                "overlay" => args.overlays.push(input.parse()?),
                "tags" => args.tags.extend(string_list(input)?),
                "operations" => args.operations.extend(string_list(input)?),
                _ => {
                    return Err(syn::Error::new(
                        name.span(),
                        format!(
                            "unknown argument `{name}`; expected `overlay = \"file.yaml\"`, `tags = [\"…\"]` or `operations = [\"…\"]`"
                        ),
                    ));
                }
            }
        }
        Ok(args)
    }
}

impl Args {
    /// The spec's and the overlays' paths, relative to the crate's manifest.
    fn selection(&self) -> idem_codegen::model::Selection {
        idem_codegen::model::Selection {
            tags: self.tags.iter().map(LitStr::value).collect(),
            operations: self.operations.iter().map(LitStr::value).collect(),
        }
    }

    fn paths(&self) -> (PathBuf, Vec<PathBuf>) {
        let root = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, PathBuf::from);
        (
            root.join(self.spec.value()),
            self.overlays.iter().map(|o| root.join(o.value())).collect(),
        )
    }
}

/// Each load warning as a deprecation warning, the one kind a proc macro
/// can raise on stable Rust.
fn warnings(messages: &[String]) -> proc_macro2::TokenStream {
    quote! {
        #(
            const _: () = {
                #[deprecated(note = #messages)]
                struct IdemOverlayWarning;
                let _ = IdemOverlayWarning;
            };
        )*
    }
}

/// Audit an OpenAPI document at compile time; the path is relative to the
/// crate's `Cargo.toml`. Expands to a constant, `IDEM_AUDITED_SPEC`, holding
/// the spec's bytes, which also makes Cargo rebuild when the file changes.
#[proc_macro]
pub fn audited(input: TokenStream) -> TokenStream {
    let args = parse_macro_input!(input as Args);
    let lit = &args.spec;
    let (path, overlays) = args.paths();
    match audited_model(&path, &overlays) {
        Ok((model, messages)) => {
            let shown = path.to_string_lossy().into_owned();
            let files = loaded_files(&model);
            let warnings = warnings(&messages);
            quote! {
                #[doc = "The audited OpenAPI document; referenced so a change triggers a rebuild."]
                #[allow(dead_code)]
                const IDEM_AUDITED_SPEC: &[u8] = ::core::include_bytes!(#shown);
                #(const _: &[u8] = ::core::include_bytes!(#files);)*
                #warnings
            }
            .into()
        }
        Err(messages) => {
            let mut errors = messages.into_iter().map(|m| syn::Error::new(lit.span(), m));
            let mut first = errors
                .next()
                .unwrap_or_else(|| syn::Error::new(lit.span(), "idem audit failed"));
            for e in errors {
                first.combine(e);
            }
            first.to_compile_error().into()
        }
    }
}

/// Generate the typed client of an OpenAPI document at compile time; the
/// path is relative to the crate's `Cargo.toml`. Every audit error and
/// every spec error is a compile error naming the spec's
/// `file:line:column`; the items land where the macro is invoked.
///
/// ```
/// mod payments {
///     idem_macros::client!("../fixtures/payments-clean.yaml");
/// }
/// let client = payments::Client::new("https://api.example.com").unwrap();
/// # let _ = client;
/// ```
///
/// ```compile_fail
/// // POST /v2/refunds accepts no key and carries no warning.
/// idem_macros::client!("../fixtures/cratebase.yaml");
/// ```
///
/// Part of an API: `tags = ["…"]` and `operations = ["operationId",
/// "/path/prefix"]` generate only what they choose, with the schemas it
/// reaches (the audit still covers the whole spec).
///
/// ```
/// mod transfers {
///     idem_macros::client!("../fixtures/payments-clean.yaml", operations = ["createTransfer"]);
/// }
/// ```
///
/// ```compile_fail
/// mod transfers {
///     // There is no such operation: the error names the closest one.
///     idem_macros::client!("../fixtures/payments-clean.yaml", operations = ["createTransfr"]);
/// }
/// ```
#[proc_macro]
pub fn client(input: TokenStream) -> TokenStream {
    expand(
        input,
        idem_codegen::generate::Options {
            client: true,
            server: false,
            feature_groups: false,
        },
        "generated_client",
    )
}

/// Generate the server scaffolding of an OpenAPI document at compile time:
/// the `Api` trait to implement, the typed inputs and replies, and
/// `router`. The path is relative to the crate's `Cargo.toml`; errors are
/// compile errors naming the spec's `file:line:column`.
///
/// ```
/// mod payments {
///     idem_macros::server!("../fixtures/payments-clean.yaml");
/// }
/// use idem_runtime::sqlx::Sqlite;
/// fn serve<A: payments::Api<Sqlite>>(api: A, idem: &idem_runtime::server::Idempotency<Sqlite>) {
///     let router = payments::router(api, idem);
///     # let _ = router;
/// }
/// ```
#[proc_macro]
pub fn server(input: TokenStream) -> TokenStream {
    expand(
        input,
        idem_codegen::generate::Options {
            client: false,
            server: true,
            feature_groups: false,
        },
        "generated_server",
    )
}

fn expand(
    input: TokenStream,
    options: idem_codegen::generate::Options,
    module: &str,
) -> TokenStream {
    let args = parse_macro_input!(input as Args);
    let lit = &args.spec;
    let (path, overlays) = args.paths();
    let fail = |messages: Vec<String>| -> TokenStream {
        let mut errors = messages.into_iter().map(|m| syn::Error::new(lit.span(), m));
        let mut first = errors
            .next()
            .unwrap_or_else(|| syn::Error::new(lit.span(), "idem generation failed"));
        for e in errors {
            first.combine(e);
        }
        first.to_compile_error().into()
    };
    let (mut model, messages) = match audited_model(&path, &overlays) {
        Ok(loaded) => loaded,
        Err(messages) => return fail(messages),
    };
    if let Err(e) = args.selection().narrow(&mut model) {
        return fail(vec![e.to_string()]);
    }
    let generated = match idem_codegen::generate::generate(&model, &options) {
        Ok(g) => g,
        Err(e) => return fail(vec![e.to_string()]),
    };
    let text = idem_codegen::generate::included(&generated, module);
    let items: proc_macro2::TokenStream = match text.parse() {
        Ok(items) => items,
        Err(e) => return fail(vec![format!("generated code does not tokenize: {e}")]),
    };
    let files = loaded_files(&model);
    let warnings = warnings(&messages);
    quote! {
        #items
        #(const _: &[u8] = ::core::include_bytes!(#files);)*
        #warnings
    }
    .into()
}

/// Every file the spec loaded (overlays included), to be referenced so a
/// change recompiles.
fn loaded_files(model: &idem_codegen::model::Model) -> Vec<String> {
    (0..model.document.sources.len())
        .filter_map(|i| {
            let id = idem_codegen::source::FileId(u32::try_from(i).ok()?);
            model
                .document
                .sources
                .get(id)
                .map(|f| f.path.to_string_lossy().into_owned())
        })
        .collect()
}

/// The model of a spec with no error-severity finding, and the load's
/// warnings; or every error (the load error, or each error-severity
/// finding), one message each.
fn audited_model(
    path: &std::path::Path,
    overlays: &[PathBuf],
) -> Result<(idem_codegen::model::Model, Vec<String>), Vec<String>> {
    use idem_codegen::build::{location_message, warning_message};
    use idem_codegen::{audit, load::Document, model, tree::Limits};
    let document = Document::load_overlaid(path, overlays, &Limits::default())
        .map_err(|f| vec![location_message(&f.sources, &f.error)])?;
    let messages: Vec<String> = document
        .warnings
        .iter()
        .map(|w| warning_message(&document.sources, w))
        .collect();
    let model = model::build(document, &audit::rule_names())
        .map_err(|f| vec![location_message(&f.sources, &f.error)])?;
    let report = audit::audit(&model);
    let sources = &model.document.sources;
    let errors: Vec<String> = report
        .diagnostics
        .iter()
        .filter(|d| d.severity == audit::Severity::Error)
        .map(|d| {
            let help = d
                .help
                .as_deref()
                .map(|h| format!("\nhelp: {h}"))
                .unwrap_or_default();
            format!(
                "{}:{}:{}: error[{}] {}: {}{help}",
                sources.display(d.pos.file),
                d.pos.line,
                d.pos.column,
                d.code,
                d.rule,
                d.message
            )
        })
        .collect();
    if errors.is_empty() {
        Ok((model, messages))
    } else {
        Err(errors)
    }
}
