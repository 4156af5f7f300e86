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

use std::path::PathBuf;

use proc_macro::TokenStream;
use quote::quote;
use syn::{LitStr, parse_macro_input};

/// Audit an OpenAPI document at compile time; the path is relative to the
/// crate's `Cargo.toml`. Expands to a constant, `IDEM_AUDITED_SPEC`, holding
/// the spec's bytes, which also makes Cargo rebuild when the file changes.
#[proc_macro]
pub fn audited(input: TokenStream) -> TokenStream {
    let lit = parse_macro_input!(input as LitStr);
    let root = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, PathBuf::from);
    let path = root.join(lit.value());
    match check(&path) {
        Ok(()) => {
            let shown = path.to_string_lossy().into_owned();
            quote! {
                #[doc = "The audited OpenAPI document; referenced so a change triggers a rebuild."]
                #[allow(dead_code)]
                const IDEM_AUDITED_SPEC: &[u8] = ::core::include_bytes!(#shown);
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
#[proc_macro]
pub fn client(input: TokenStream) -> TokenStream {
    expand(
        input,
        idem_codegen::generate::Options {
            client: true,
            server: false,
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
        },
        "generated_server",
    )
}

fn expand(
    input: TokenStream,
    options: idem_codegen::generate::Options,
    module: &str,
) -> TokenStream {
    let lit = parse_macro_input!(input as LitStr);
    let root = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, PathBuf::from);
    let path = root.join(lit.value());
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
    let model = match audited_model(&path) {
        Ok(model) => model,
        Err(messages) => return fail(messages),
    };
    let generated = match idem_codegen::generate::generate(&model, &options) {
        Ok(g) => g,
        Err(e) => return fail(vec![e.to_string()]),
    };
    let text = idem_codegen::generate::included(&generated, module);
    let items: proc_macro2::TokenStream = match text.parse() {
        Ok(items) => items,
        Err(e) => return fail(vec![format!("generated code does not tokenize: {e}")]),
    };
    // Every file the spec loaded, referenced so a change recompiles.
    let files: Vec<String> = (0..model.document.sources.len())
        .filter_map(|i| {
            let id = idem_codegen::source::FileId(u32::try_from(i).ok()?);
            model
                .document
                .sources
                .get(id)
                .map(|f| f.path.to_string_lossy().into_owned())
        })
        .collect();
    quote! {
        #items
        #(const _: &[u8] = ::core::include_bytes!(#files);)*
    }
    .into()
}

/// Every error-severity finding (or the load error), one message each.
fn check(path: &std::path::Path) -> Result<(), Vec<String>> {
    audited_model(path).map(drop)
}

/// The model of a spec with no error-severity finding.
fn audited_model(path: &std::path::Path) -> Result<idem_codegen::model::Model, Vec<String>> {
    use idem_codegen::{audit, build::location_message, load::Document, model};
    let document =
        Document::load(path).map_err(|f| vec![location_message(&f.sources, &f.error)])?;
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
        Ok(model)
    } else {
        Err(errors)
    }
}
