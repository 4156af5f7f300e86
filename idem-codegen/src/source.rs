//! Source files and positions: every node of a loaded document points back
//! into the file it came from, so every diagnostic can name `file:line:column`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Index of a file in a [`SourceMap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FileId(pub u32);

/// A position in a source file: line and column are 1-based; the column counts
/// characters, as editors do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Pos {
    pub file: FileId,
    pub line: u32,
    pub column: u32,
}

impl Pos {
    pub fn new(file: FileId, line: usize, column: usize) -> Self {
        Pos {
            file,
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        }
    }
}

/// One loaded file: the path as the user would type it, and its text.
#[derive(Debug)]
pub struct SourceFile {
    /// Path as given (the root) or as resolved relative to the root's folder.
    pub path: PathBuf,
    /// Path shown in diagnostics: relative to the working directory when possible.
    pub display: String,
    pub text: String,
    /// Where lines and characters start, built on first use.
    index: OnceLock<LineIndex>,
}

/// Characters between two entries of [`LineIndex::marks`].
const MARK_EVERY: usize = 1024;

/// Byte offsets of line starts and of every [`MARK_EVERY`]th character, so
/// a `line:column` position finds its byte in bounded time even on a
/// minified document that is one 50 MB line.
#[derive(Debug)]
struct LineIndex {
    /// Byte offset of each line's start.
    starts: Vec<usize>,
    /// Character index of each line's start.
    char_starts: Vec<usize>,
    /// Byte offset of character `k * MARK_EVERY`.
    marks: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut index = LineIndex {
            starts: vec![0],
            char_starts: vec![0],
            marks: Vec::with_capacity(text.len() / MARK_EVERY + 1),
        };
        let mut chars = 0usize;
        for (i, &b) in text.as_bytes().iter().enumerate() {
            // A UTF-8 continuation byte does not start a character.
            if b & 0xC0 == 0x80 {
                continue;
            }
            if chars.is_multiple_of(MARK_EVERY) {
                index.marks.push(i);
            }
            chars += 1;
            if b == b'\n' {
                index.starts.push(i + 1);
                index.char_starts.push(chars);
            }
        }
        index
    }
}

/// A bounded piece of one line around a position: what a diagnostic shows.
#[derive(Debug, PartialEq, Eq)]
pub struct Excerpt<'a> {
    /// The line, or a window of it with `…` where it was cut.
    pub text: Cow<'a, str>,
    /// Byte offset of the position's character in `text`.
    pub offset: usize,
    /// Whether the line was cut.
    pub clipped: bool,
}

impl SourceFile {
    fn index(&self) -> &LineIndex {
        self.index.get_or_init(|| LineIndex::new(&self.text))
    }

    /// Byte range of 1-based `line`, without its line ending.
    fn line_range(&self, line: u32) -> Option<std::ops::Range<usize>> {
        let starts = &self.index().starts;
        let index = usize::try_from(line).ok()?.checked_sub(1)?;
        let start = *starts.get(index)?;
        let mut end = starts.get(index + 1).map_or(self.text.len(), |e| e - 1);
        if end > start && self.text.as_bytes().get(end - 1) == Some(&b'\r') {
            end -= 1;
        }
        Some(start..end)
    }

    /// The text of 1-based `line`, without its line ending.
    pub fn line(&self, line: u32) -> Option<&str> {
        self.text.get(self.line_range(line)?)
    }

    /// Where `needle` (ASCII, matched case-insensitively) first occurs at or
    /// after `from`, within `window` bytes: how a word found in a scalar's
    /// value is placed in the file, since the value's own position is where
    /// the scalar starts. `None` when it does not occur there (an escape or a
    /// line fold inside the words).
    pub fn find_after(&self, from: Pos, needle: &str, window: usize) -> Option<Pos> {
        let range = self.line_range(from.line)?;
        let index = self.index();
        let start = self.text[range.clone()]
            .char_indices()
            .nth(from.column.max(1) as usize - 1)
            .map_or(range.end, |(i, _)| range.start + i);
        let end = (start + window).min(self.text.len());
        let hay = self.text.get(start..end).or_else(|| {
            // `window` cut a character: back off to its start.
            (start..end)
                .rev()
                .find(|e| self.text.is_char_boundary(*e))
                .and_then(|e| self.text.get(start..e))
        })?;
        let found = start + find_ascii_ci(hay.as_bytes(), needle.as_bytes())?;
        // The line holding `found`, and its character column.
        let line = index.starts.partition_point(|&s| s <= found).max(1);
        let line_start = *index.starts.get(line - 1)?;
        let column = self.text.get(line_start..found)?.chars().count() + 1;
        Some(Pos::new(from.file, line, column))
    }

    /// The part of `line` around 1-based character `column`: the whole
    /// line when it is short, else `before` characters before the column
    /// and `after` from it, each cut side marked with `…`. The cost does
    /// not depend on the line's length.
    pub fn excerpt(
        &self,
        line: u32,
        column: u32,
        before: usize,
        after: usize,
    ) -> Option<Excerpt<'_>> {
        let range = self.line_range(line)?;
        let text = &self.text;
        let index = self.index();
        // A line that fits is shown whole (counting at most one character
        // past the fit, so a long line costs no more than a short one).
        let fits = text[range.clone()].chars().take(before + after + 1).count() <= before + after;
        let line_index = usize::try_from(line).ok()?.checked_sub(1)?;
        let wanted = index.char_starts.get(line_index)? + (column.max(1) as usize - 1);
        // A column past the line's end points at its end.
        let at = match index.marks.get(wanted / MARK_EVERY) {
            Some(&mark) if mark <= range.end => text[mark..range.end]
                .char_indices()
                .nth(wanted % MARK_EVERY)
                .map_or(range.end, |(i, _)| mark + i)
                .max(range.start),
            _ => range.end,
        };
        let start = text[range.start..at]
            .char_indices()
            .rev()
            .nth(before.saturating_sub(1))
            .map_or(range.start, |(i, _)| range.start + i);
        let end = text[at..range.end]
            .char_indices()
            .nth(after)
            .map_or(range.end, |(i, _)| at + i);
        let (cut_start, cut_end) = (start > range.start, end < range.end);
        if fits || (!cut_start && !cut_end) {
            return Some(Excerpt {
                text: Cow::Borrowed(&text[range.start..range.end]),
                offset: at - range.start,
                clipped: false,
            });
        }
        let mut window = String::with_capacity(end - start + 8);
        if cut_start {
            window.push('…');
        }
        let offset = window.len() + (at - start);
        window.push_str(&text[start..end]);
        if cut_end {
            window.push('…');
        }
        Some(Excerpt {
            text: Cow::Owned(window),
            offset,
            clipped: true,
        })
    }
}

/// Every file a load touched, addressed by [`FileId`].
#[derive(Debug, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn add(&mut self, path: PathBuf, text: String) -> FileId {
        let display = display_path(&path);
        let id = FileId(u32::try_from(self.files.len()).unwrap_or(u32::MAX));
        self.files.push(SourceFile {
            path,
            display,
            text,
            index: OnceLock::new(),
        });
        id
    }

    pub fn get(&self, id: FileId) -> Option<&SourceFile> {
        self.files.get(id.0 as usize)
    }

    /// The display path of `id`, or `<unknown>` for an id from another map.
    pub fn display(&self, id: FileId) -> &str {
        self.get(id).map_or("<unknown>", |f| f.display.as_str())
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// Byte offset of the first case-insensitive match of ASCII `needle`.
fn find_ascii_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

fn display_path(path: &Path) -> String {
    let shown = std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(&cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf());
    shown.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_by_number() {
        let mut map = SourceMap::default();
        let id = map.add(PathBuf::from("a.yaml"), "one\r\ntwo\n\nfour".into());
        let file = map.get(id).unwrap();
        assert_eq!(file.line(1), Some("one"));
        assert_eq!(file.line(2), Some("two"));
        assert_eq!(file.line(3), Some(""));
        assert_eq!(file.line(4), Some("four"));
        assert_eq!(file.line(5), None);
        assert_eq!(file.line(0), None);
    }

    #[test]
    fn excerpts_are_bounded() {
        let mut map = SourceMap::default();
        let long = format!("{}é{}", "a".repeat(3000), "b".repeat(3000));
        let id = map.add(PathBuf::from("a.json"), format!("short\r\n{long}\nend"));
        let file = map.get(id).unwrap();
        let whole = file.excerpt(1, 3, 40, 80).unwrap();
        assert_eq!(
            (whole.text.as_ref(), whole.offset, whole.clipped),
            ("short", 2, false)
        );
        // The column of `é`, past two marks of characters.
        let cut = file.excerpt(2, 3001, 5, 4).unwrap();
        assert_eq!(cut.text, "…aaaaaébbb…");
        assert_eq!(&cut.text[cut.offset..], "ébbb…");
        assert!(cut.clipped);
        // A short line is whole, wherever the column.
        let short = file.excerpt(1, 5, 3, 3).unwrap();
        assert_eq!(
            (short.text.as_ref(), short.offset, short.clipped),
            ("short", 4, false)
        );
        let first = file.excerpt(2, 1, 5, 4).unwrap();
        assert_eq!((first.text.as_ref(), first.offset), ("aaaa…", 0));
        let last = file.excerpt(2, 6001, 3, 10).unwrap();
        assert_eq!((last.text.as_ref(), last.offset), ("…bbbb", 6));
        // A column past the end points at the end.
        let past = file.excerpt(3, 99, 40, 80).unwrap();
        assert_eq!((past.text.as_ref(), past.offset), ("end", 3));
    }
}
