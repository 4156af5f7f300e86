//! The integrator docs page: what a caller over raw HTTP needs to retry
//! safely, generated from the model, in Markdown and in self-contained HTML.
//!
//! [`render`] is pure: it reads the model and returns both pages; writing
//! them is the front end's job (`idem docs`). The header, codes, bodies and
//! windows on the page come from the model and from
//! `idem_runtime::protocol`, the same values the server and the client use.
//!
//! ```no_run
//! use idem_codegen::{audit, docs, load::Document, model};
//!
//! let document = Document::load("openapi.yaml".as_ref()).map_err(|f| f.error)?;
//! let model = model::build(document, &audit::rule_names()).map_err(|f| f.error)?;
//! let pages = docs::render(&model)?;
//! for (name, contents) in pages.files() {
//!     std::fs::write(name, contents)?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The templates live in the crate's `templates/` directory
//! (`idempotency.md`, `idempotency.html`; the workspace's top-level
//! `templates` is a link to it, and the published crate carries them);
//! `askama.toml` points askama at it and gives `.md` templates the
//! [`text::Markdown`] escaper.

use askama::Template;

use crate::model::Model;

mod schedule;
pub mod text;
mod view;

use view::DocsView;

/// The Markdown page's file name.
pub const MARKDOWN_FILE: &str = "idempotency.md";
/// The HTML page's file name.
pub const HTML_FILE: &str = "idempotency.html";

/// Both pages, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocsPages {
    /// GitHub-flavoured Markdown that also builds under mdBook and
    /// Docusaurus (MDX).
    pub markdown: String,
    /// One self-contained HTML file: embedded CSS, no script, no external
    /// resource.
    pub html: String,
}

impl DocsPages {
    /// The pages with the file names the front ends write them under.
    pub fn files(&self) -> [(&'static str, &str); 2] {
        [(MARKDOWN_FILE, &self.markdown), (HTML_FILE, &self.html)]
    }
}

/// Why the page could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    /// A template failed while rendering.
    #[error("cannot render the docs page ({page}): {source}")]
    Template {
        /// Which page.
        page: &'static str,
        /// askama's error.
        source: askama::Error,
    },
}

/// Renders the docs page of `model` in both formats. No I/O.
pub fn render(model: &Model) -> Result<DocsPages, DocsError> {
    let view = DocsView::new(model);
    let markdown = page(&MarkdownPage { page: &view }, MARKDOWN_FILE)?;
    let html = page(&HtmlPage { page: &view }, HTML_FILE)?;
    Ok(DocsPages { markdown, html })
}

fn page(template: &impl Template, name: &'static str) -> Result<String, DocsError> {
    template
        .render()
        .map_err(|source| DocsError::Template { page: name, source })
}

#[derive(Template)]
#[template(path = "idempotency.md")]
struct MarkdownPage<'a> {
    page: &'a DocsView,
}

#[derive(Template)]
#[template(path = "idempotency.html")]
struct HtmlPage<'a> {
    page: &'a DocsView,
}

/// Filters the templates use where the auto-escaper cannot know the context.
mod filters {
    use askama::Values;
    use askama::filters::Safe;

    /// A Markdown code span outside a table.
    #[askama::filter_fn]
    pub fn md_code(value: impl ToString, _: &dyn Values) -> askama::Result<Safe<String>> {
        Ok(Safe(super::text::code_span(&value.to_string(), false)))
    }

    /// A Markdown code span inside a table cell.
    #[askama::filter_fn]
    pub fn md_cell_code(value: impl ToString, _: &dyn Values) -> askama::Result<Safe<String>> {
        Ok(Safe(super::text::code_span(&value.to_string(), true)))
    }

    /// Markdown text inside a table cell: a `|` would end the cell, a line
    /// end the row.
    #[askama::filter_fn]
    pub fn md_cell(value: impl ToString, _: &dyn Values) -> askama::Result<Safe<String>> {
        Ok(Safe(
            value
                .to_string()
                .replace(['\r', '\n'], " ")
                .replace('|', "\\|"),
        ))
    }

    /// An HTML-escaped path with a line-break opportunity after each `/`,
    /// so a long path wraps between its segments rather than inside one.
    #[askama::filter_fn]
    pub fn html_path(value: impl ToString, _: &dyn Values) -> askama::Result<Safe<String>> {
        use askama::filters::Escaper;
        let mut out = String::new();
        for (i, segment) in value.to_string().split('/').enumerate() {
            if i > 0 {
                out.push_str("/<wbr>");
            }
            askama::filters::Html.write_escaped_str(&mut out, segment)?;
        }
        Ok(Safe(out))
    }

    /// HTML-escaped text whose `backticked` spans become `<code>`.
    #[askama::filter_fn]
    pub fn code_spans(value: impl ToString, _: &dyn Values) -> askama::Result<Safe<String>> {
        use askama::filters::Escaper;
        let mut out = String::new();
        for (i, part) in value.to_string().split('`').enumerate() {
            let mut escaped = String::new();
            askama::filters::Html.write_escaped_str(&mut escaped, part)?;
            if i % 2 == 1 {
                out.push_str(&format!("<code>{escaped}</code>"));
            } else {
                out.push_str(&escaped);
            }
        }
        Ok(Safe(out))
    }

    /// A Python (and JavaScript) string literal; still escaped for the page
    /// by the output's escaper, or inside a Markdown code block left as is.
    #[askama::filter_fn]
    pub fn py_str(value: impl ToString, _: &dyn Values) -> askama::Result<String> {
        Ok(super::text::python_string(&value.to_string()))
    }
}
