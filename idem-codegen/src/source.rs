//! Source files and positions: every node of a loaded document points back
//! into the file it came from, so every diagnostic can name `file:line:column`.

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
    /// Byte offset of each line's start, built on first use.
    line_starts: OnceLock<Vec<usize>>,
}

impl SourceFile {
    /// The text of 1-based `line`, without its line ending.
    pub fn line(&self, line: u32) -> Option<&str> {
        let starts = self.line_starts.get_or_init(|| {
            std::iter::once(0)
                .chain(self.text.match_indices('\n').map(|(i, _)| i + 1))
                .collect()
        });
        let index = usize::try_from(line).ok()?.checked_sub(1)?;
        let start = *starts.get(index)?;
        let end = starts.get(index + 1).map_or(self.text.len(), |e| e - 1);
        let text = self.text.get(start..end)?;
        Some(text.strip_suffix('\r').unwrap_or(text))
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
            line_starts: OnceLock::new(),
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
}
