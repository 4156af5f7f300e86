//! Proc macros over idem-codegen.
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

/// Every error-severity finding (or the load error), one message each.
fn check(path: &std::path::Path) -> Result<(), Vec<String>> {
    use idem_codegen::{audit, build_script::location_message, load::Document, model};
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
        Ok(())
    } else {
        Err(errors)
    }
}
