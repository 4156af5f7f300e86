//! Spec text made safe for the page: normalised once for both outputs, then
//! escaped per output format. Titles, summaries, paths and warnings are
//! written by whoever wrote the spec, so they are treated as hostile.
//!
//! The HTML page uses askama's own HTML escaper. The Markdown page uses
//! [`Markdown`], an askama escaper wired to the `.md` extension in
//! `askama.toml`, so every `{{ … }}` in the Markdown template is escaped
//! unless the template says otherwise; code spans and code blocks, where
//! backslash escapes do not work, have their own filters.

use std::fmt::{self, Write};
use std::time::Duration;

/// Spec text as one line: whitespace runs (newlines included) become one
/// space, and control and bidirectional-override characters are dropped, so
/// a description can neither break a table row nor reorder what a reader
/// sees.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            space = !out.is_empty();
        } else if c.is_control() || is_bidi_control(c) {
            continue;
        } else {
            if space {
                out.push(' ');
                space = false;
            }
            out.push(c);
        }
    }
    out
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Characters that mean something somewhere in CommonMark, GitHub Flavored
/// Markdown or MDX when they appear inside a line: emphasis, code spans,
/// links and images, raw HTML and JSX, table cells, strikethrough,
/// entities, math and MDX expressions. CommonMark lets any ASCII punctuation
/// be escaped with a backslash, and MDX honours the same escapes.
const INLINE_SPECIAL: &[char] = &[
    '\\', '`', '*', '_', '{', '}', '[', ']', '<', '>', '|', '~', '&', '$',
];

/// Characters that only start a block at the beginning of a line (headings,
/// list items, setext underlines, Docusaurus admonitions); escaped when a value begins with one, because
/// a template may put a value first in a line or list item.
const LINE_START_SPECIAL: &[char] = &['#', '-', '+', '=', ':'];

/// The Markdown escaper for askama: every interpolated value becomes plain
/// text in CommonMark, GFM (tables included) and MDX (Docusaurus).
#[derive(Debug, Clone, Copy, Default)]
pub struct Markdown;

impl askama::filters::Escaper for Markdown {
    fn write_escaped_str<W: Write>(&self, mut dest: W, string: &str) -> fmt::Result {
        let mut chars = string.chars().peekable();
        let mut at_start = true;
        let mut leading_digits = true;
        while let Some(c) = chars.next() {
            // `1.` or `1)` followed by a space starts an ordered list item.
            let list_marker = leading_digits
                && !at_start
                && matches!(c, '.' | ')')
                && chars.peek().is_none_or(|n| n.is_whitespace());
            let escape = INLINE_SPECIAL.contains(&c)
                || (at_start && LINE_START_SPECIAL.contains(&c))
                || list_marker;
            if c.is_control() {
                // Values are cleaned before they get here; a stray line
                // break must still not end a table row.
                dest.write_char(' ')?;
            } else {
                if escape {
                    dest.write_char('\\')?;
                }
                dest.write_char(c)?;
            }
            leading_digits = leading_digits && c.is_ascii_digit();
            at_start = false;
        }
        Ok(())
    }
}

/// Escapes `text` with [`Markdown`], for callers outside a template.
pub fn markdown(text: &str) -> String {
    use askama::filters::Escaper;
    let mut out = String::with_capacity(text.len());
    // Writing into a String cannot fail.
    let _ = Markdown.write_escaped_str(&mut out, text);
    out
}

/// A Markdown code span holding `text` literally: a fence of backticks longer
/// than any run inside it, padded when the text starts or ends with a
/// backtick or a space. With `in_table`, `|` is escaped as GFM requires
/// even inside code spans in a table cell (elsewhere a backslash in a code
/// span is literal, so it is left alone).
pub fn code_span(text: &str, in_table: bool) -> String {
    let text = clean(text);
    if text.is_empty() {
        // A span of one space: nothing to show, but the syntax stays valid.
        return "` `".to_owned();
    }
    let mut longest = 0usize;
    let mut run = 0usize;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with(['`', ' ']) || text.ends_with(['`', ' ']) {
        " "
    } else {
        ""
    };
    let body = if in_table {
        text.replace('|', "\\|")
    } else {
        text
    };
    format!("{fence}{pad}{body}{pad}{fence}")
}

/// `text` as a double-quoted Python string literal (also valid JavaScript
/// and JSON for the printable ASCII it usually holds), so a path or header
/// name from the spec cannot end the literal or the line in an example.
pub fn python_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_bidi_control(c) || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A fragment identifier from an operation name: lower-case ASCII letters
/// and digits, other runs as one `-`, prefixed `op-` (so it never starts
/// with a digit and never collides with a section's id).
pub fn anchor(name: &str) -> String {
    let mut out = String::from("op-");
    let mut dash = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            if dash && !out.ends_with('-') {
                out.push('-');
            }
            dash = false;
            out.push(c.to_ascii_lowercase());
        } else {
            dash = true;
        }
    }
    if out.len() == 3 {
        out.push_str("operation");
    }
    out
}

/// Makes every anchor unique, in order: a repeat gets `-2`, `-3`, … (skipping
/// any suffix another anchor already uses).
pub fn unique_anchors(anchors: &mut [String]) {
    let mut seen = std::collections::BTreeSet::new();
    for anchor in anchors.iter_mut() {
        if !seen.insert(anchor.clone()) {
            let mut n = 2;
            while seen.contains(&format!("{anchor}-{n}")) {
                n += 1;
            }
            *anchor = format!("{anchor}-{n}");
            seen.insert(anchor.clone());
        }
    }
}

/// A duration for reading: the largest unit that divides it, in words
/// (`24 hours`, `1 day`, `1500 milliseconds`).
pub fn duration_words(d: Duration) -> String {
    let ms = d.as_millis();
    for (size, one, many) in [
        (86_400_000u128, "day", "days"),
        (3_600_000, "hour", "hours"),
        (60_000, "minute", "minutes"),
        (1_000, "second", "seconds"),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            let n = ms / size;
            return format!("{n} {}", if n == 1 { one } else { many });
        }
    }
    format!(
        "{ms} {}",
        if ms == 1 {
            "millisecond"
        } else {
            "milliseconds"
        }
    )
}

/// A computed duration, compactly: `350 ms`, `1.6 s`, `9.95 s`, `30 s`.
pub fn duration_short(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    let whole = ms / 1_000;
    let frac = ms % 1_000;
    if frac == 0 {
        return format!("{whole} s");
    }
    let digits = format!("{frac:03}");
    format!("{whole}.{} s", digits.trim_end_matches('0'))
}

/// A count with thousands separators: `86,400`.
pub fn thousands(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Title-cases a header name for display (`idempotent-replayed` →
/// `Idempotent-Replayed`); the wire is case-insensitive.
pub fn header_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = c == '-';
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaning() {
        for (input, want) in [
            ("  a\n\n b\tc  ", "a b c"),
            ("x\u{0}y\u{1b}[31mz", "xy[31mz"),
            ("abc\u{202e}def", "abcdef"),
            ("", ""),
        ] {
            assert_eq!(clean(input), want, "{input:?}");
        }
    }

    #[test]
    fn markdown_escaping() {
        for (input, want) in [
            ("plain words", "plain words"),
            ("a | b", "a \\| b"),
            ("`code`", "\\`code\\`"),
            (
                "<img src=x onerror=alert(1)>",
                "\\<img src=x onerror=alert(1)\\>",
            ),
            ("{{ 7*7 }}", "\\{\\{ 7\\*7 \\}\\}"),
            ("*/ end", "\\*/ end"),
            ("- item", "\\- item"),
            ("a - b", "a - b"),
            ("1. first", "1\\. first"),
            ("v1.2", "v1.2"),
            ("9.95 s", "9.95 s"),
            ("2) second", "2\\) second"),
            ("# title", "\\# title"),
            ("[x](javascript:alert(1))", "\\[x\\](javascript:alert(1))"),
            ("&lt;", "\\&lt;"),
            ("$x$", "\\$x\\$"),
            ("back\\slash", "back\\\\slash"),
            ("Idempotency-Key", "Idempotency-Key"),
        ] {
            assert_eq!(markdown(input), want, "{input:?}");
        }
    }

    #[test]
    fn code_spans() {
        assert_eq!(code_span("Idempotency-Key", false), "`Idempotency-Key`");
        assert_eq!(code_span("a`b", false), "``a`b``");
        assert_eq!(code_span("`x", false), "`` `x ``");
        assert_eq!(code_span("a|b", true), "`a\\|b`");
        assert_eq!(code_span("a|b", false), "`a|b`");
        assert_eq!(code_span("", false), "` `");
    }

    #[test]
    fn python_strings() {
        assert_eq!(python_string("/v2/orders"), "\"/v2/orders\"");
        assert_eq!(python_string("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
        assert_eq!(python_string("\u{2028}"), "\"\\u2028\"");
    }

    #[test]
    fn anchors() {
        for (input, want) in [
            ("createOrder", "op-createorder"),
            (
                "post_v2_orders_by_id_notes",
                "op-post-v2-orders-by-id-notes",
            ),
            ("</script><script>", "op-script-script"),
            ("***", "op-operation"),
            ("9lives", "op-9lives"),
        ] {
            assert_eq!(anchor(input), want, "{input:?}");
        }
        let mut list = ["op-a", "op-a", "op-a-2", "op-a"].map(String::from);
        unique_anchors(&mut list);
        assert_eq!(list, ["op-a", "op-a-2", "op-a-2-2", "op-a-3"]);
    }

    #[test]
    fn durations_and_numbers() {
        assert_eq!(duration_words(Duration::from_secs(86_400)), "1 day");
        assert_eq!(duration_words(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(duration_words(Duration::from_secs(36 * 3_600)), "36 hours");
        assert_eq!(
            duration_words(Duration::from_millis(1_500)),
            "1500 milliseconds"
        );
        assert_eq!(duration_short(Duration::from_millis(350)), "350 ms");
        assert_eq!(duration_short(Duration::from_millis(9_950)), "9.95 s");
        assert_eq!(duration_short(Duration::from_millis(1_600)), "1.6 s");
        assert_eq!(duration_short(Duration::from_secs(30)), "30 s");
        assert_eq!(thousands(86_400), "86,400");
        assert_eq!(thousands(604_800), "604,800");
        assert_eq!(thousands(999), "999");
        assert_eq!(header_case("idempotent-replayed"), "Idempotent-Replayed");
    }
}
