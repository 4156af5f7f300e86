//! Source files and positions: every node of a loaded document points back
//! into the file it came from, so every diagnostic can name `file:line:column`.

use std::path::{Path, PathBuf};

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
}

impl SourceFile {
    /// The text of 1-based `line`, without its line ending.
    pub fn line(&self, line: u32) -> Option<&str> {
        let index = usize::try_from(line).ok()?.checked_sub(1)?;
        self.text.lines().nth(index)
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
