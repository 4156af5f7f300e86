//! Loading: read the root document and every file its `$ref`s reach, check the
//! OpenAPI version, and resolve references with their positions intact.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use crate::source::{FileId, Pos, SourceMap};
use crate::tree::{self, Limits, Node, TreeError, Value};

mod overlay;
mod swagger2;

pub use overlay::Warning;

/// The OpenAPI versions idem reads. A Swagger 2.0 document is read into the
/// same 3.0-shaped tree at load time (see `swagger2`), so everything after
/// the loader sees OpenAPI 3 only; `V2_0` says what the user wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Version {
    V3_0,
    V3_1,
    V3_2,
    V2_0,
}

/// A loaded document: the root file, every file reached through `$ref`, and
/// their trees.
#[derive(Debug)]
pub struct Document {
    pub sources: SourceMap,
    trees: Vec<Node>,
    by_path: HashMap<PathBuf, FileId>,
    /// Overlay files, each with the file its `$ref`s resolve in (the root).
    ref_context: HashMap<FileId, FileId>,
    pub version: Version,
    /// The version string as written (`3.0.3`, or `2.0` for Swagger).
    pub version_text: String,
    /// What the overlays did that is allowed but probably not meant, such
    /// as a target that selects nothing. Front ends print these.
    pub warnings: Vec<Warning>,
}

/// Why a document could not be loaded. Each variant that concerns a place in
/// a file carries that position.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read `{path}`: {reason}")]
    Read { path: String, reason: String },
    #[error("`{path}` is {size} bytes, more than the {limit}-byte limit")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{error}")]
    Tree { error: TreeError },
    #[error("unsupported version: {what} (idem reads Swagger 2.0 and OpenAPI 3.0, 3.1 and 3.2)")]
    Unsupported { what: String, pos: Pos },
    #[error("not an OpenAPI document: {reason}")]
    NotOpenApi { reason: String, pos: Pos },
    #[error("`$ref` target `{target}` cannot be read: {reason}")]
    MissingRefFile {
        target: String,
        reason: String,
        pos: Pos,
    },
    #[error("`$ref` `{reference}` does not resolve: {reason}")]
    BadRef {
        reference: String,
        reason: String,
        pos: Pos,
    },
    #[error("`$ref` cycle: {chain}")]
    RefCycle { chain: String, pos: Pos },
    #[error("{message}")]
    Overlay { message: String, pos: Pos },
    #[error("`{path}` is not UTF-8: invalid byte 0x{byte:02X} at offset {offset}")]
    NotUtf8 {
        path: String,
        byte: u8,
        offset: usize,
        pos: Pos,
    },
}

impl LoadError {
    /// Where in the user's files the problem is, when it is in a file.
    pub fn pos(&self) -> Option<Pos> {
        match self {
            LoadError::Read { .. } | LoadError::TooLarge { .. } => None,
            LoadError::Tree { error } => Some(error.pos()),
            LoadError::Unsupported { pos, .. }
            | LoadError::NotOpenApi { pos, .. }
            | LoadError::MissingRefFile { pos, .. }
            | LoadError::BadRef { pos, .. }
            | LoadError::RefCycle { pos, .. }
            | LoadError::Overlay { pos, .. }
            | LoadError::NotUtf8 { pos, .. } => Some(*pos),
        }
    }
}

/// A load that failed, with the files read so far so the error can be shown
/// with its snippet.
#[derive(Debug)]
pub struct LoadFailure {
    pub error: LoadError,
    pub sources: SourceMap,
}

/// Longest chain of `$ref` → `$ref` followed before giving up.
const MAX_REF_HOPS: usize = 64;

impl Document {
    /// Load `path` and every local file its `$ref`s reach.
    pub fn load(path: &Path) -> Result<Document, Box<LoadFailure>> {
        Self::load_with(path, &Limits::default())
    }

    pub fn load_with(path: &Path, limits: &Limits) -> Result<Document, Box<LoadFailure>> {
        Self::load_overlaid(path, &[], limits)
    }

    /// Load `path`, then apply each OpenAPI Overlay in `overlays`, in order,
    /// before anything else reads the document: each action's JSONPath
    /// `target` selects nodes, which its `update` is merged into or `remove`
    /// deletes; merged nodes keep the overlay's positions, and a target that
    /// selects nothing is a [`Warning`] in [`Document::warnings`].
    pub fn load_overlaid(
        path: &Path,
        overlays: &[PathBuf],
        limits: &Limits,
    ) -> Result<Document, Box<LoadFailure>> {
        let mut loader = Loader {
            sources: SourceMap::default(),
            trees: Vec::new(),
            by_path: HashMap::new(),
            ref_context: HashMap::new(),
            warnings: Vec::new(),
            limits,
        };
        match loader.run(path, overlays) {
            Ok((version, version_text)) => Ok(Document {
                sources: loader.sources,
                trees: loader.trees,
                by_path: loader.by_path,
                ref_context: loader.ref_context,
                version,
                version_text,
                warnings: loader.warnings,
            }),
            Err(error) => Err(Box::new(LoadFailure {
                error,
                sources: loader.sources,
            })),
        }
    }

    /// The root document's tree.
    pub fn root(&self) -> &Node {
        // A Document is only built after the root tree was parsed.
        &self.trees[0]
    }

    /// Follow `node`'s `$ref` (and any chain of them) to the node it names.
    /// A node without `$ref` is returned as is.
    pub fn resolve<'a>(&'a self, node: &'a Node) -> Result<&'a Node, LoadError> {
        self.refs().resolve(node)
    }

    fn refs(&self) -> Refs<'_> {
        Refs {
            trees: &self.trees,
            by_path: &self.by_path,
            sources: &self.sources,
            ref_context: &self.ref_context,
        }
    }
}

/// The loaded files seen as one graph of `$ref`s: what [`Document::resolve`]
/// follows, and what the Swagger 2.0 normalization follows before there is a
/// `Document`.
#[derive(Clone, Copy)]
pub(crate) struct Refs<'a> {
    trees: &'a [Node],
    by_path: &'a HashMap<PathBuf, FileId>,
    sources: &'a SourceMap,
    ref_context: &'a HashMap<FileId, FileId>,
}

impl<'a> Refs<'a> {
    /// The file whose `$ref`s a node written in `file` resolves like: an
    /// overlay's nodes live in the document they were merged into.
    fn context(&self, file: FileId) -> FileId {
        self.ref_context.get(&file).copied().unwrap_or(file)
    }

    /// Follow `node`'s `$ref` (and any chain of them) to the node it names.
    pub(crate) fn resolve(&self, node: &'a Node) -> Result<&'a Node, LoadError> {
        let mut current = node;
        let mut seen: Vec<(FileId, String)> = Vec::new();
        while let Some(reference) = ref_target(current) {
            let (file, fragment) = self.locate(current, reference)?;
            let here = (file, fragment.to_owned());
            if seen.contains(&here) || seen.len() >= MAX_REF_HOPS {
                let mut chain: Vec<String> = seen.iter().map(|(_, f)| format!("#{f}")).collect();
                chain.push(format!("#{fragment}"));
                return Err(LoadError::RefCycle {
                    chain: chain.join(" → "),
                    pos: node.pos,
                });
            }
            seen.push(here);
            let tree = self
                .trees
                .get(file.0 as usize)
                .ok_or_else(|| LoadError::BadRef {
                    reference: reference.to_owned(),
                    reason: "its file was not loaded".into(),
                    pos: current.pos,
                })?;
            current = pointer(tree, fragment).ok_or_else(|| LoadError::BadRef {
                reference: reference.to_owned(),
                reason: format!(
                    "no `{}` in `{}`",
                    if fragment.is_empty() { "/" } else { fragment },
                    self.sources.display(file)
                ),
                pos: current.pos,
            })?;
        }
        Ok(current)
    }

    /// The file a `$ref` written at `at` names (relative to `at`'s file).
    pub(crate) fn file_of(&self, at: &Node, reference: &str) -> Option<FileId> {
        self.locate(at, reference).ok().map(|(file, _)| file)
    }

    /// The file a `$ref`'s file part names, seen from file `from` (an empty
    /// part is `from` itself).
    pub(crate) fn target_file(&self, from: FileId, file_part: &str) -> Option<FileId> {
        let from = self.context(from);
        if file_part.is_empty() {
            return Some(from);
        }
        if is_remote(file_part) {
            return None;
        }
        let base = self.sources.get(from).map(|f| f.path.clone())?;
        self.by_path.get(&relative_to(&base, file_part)).copied()
    }

    /// The file and JSON-pointer fragment a `$ref` string names, relative to
    /// the file the `$ref` was written in.
    fn locate<'r>(&self, at: &Node, reference: &'r str) -> Result<(FileId, &'r str), LoadError> {
        let (file_part, fragment) = split_ref(reference);
        let from = self.context(at.pos.file);
        if file_part.is_empty() {
            return Ok((from, fragment));
        }
        if is_remote(file_part) {
            return Err(LoadError::BadRef {
                reference: reference.to_owned(),
                reason: "remote references are not fetched; download the file and refer to it by a relative path".into(),
                pos: at.pos,
            });
        }
        let base = self
            .sources
            .get(from)
            .map(|f| f.path.clone())
            .unwrap_or_default();
        let target = relative_to(&base, file_part);
        self.by_path
            .get(&target)
            .map(|id| (*id, fragment))
            .ok_or_else(|| LoadError::BadRef {
                reference: reference.to_owned(),
                reason: format!("`{}` was not loaded", target.display()),
                pos: at.pos,
            })
    }
}

/// The `$ref` string of a mapping that has one.
pub fn ref_target(node: &Node) -> Option<&str> {
    node.get("$ref").and_then(Node::as_str)
}

fn split_ref(reference: &str) -> (&str, &str) {
    match reference.split_once('#') {
        Some((file, fragment)) => (file, fragment),
        None => (reference, ""),
    }
}

fn is_remote(file_part: &str) -> bool {
    file_part.contains("://")
}

fn relative_to(base_file: &Path, target: &str) -> PathBuf {
    let target = percent_decode(target);
    let joined = base_file
        .parent()
        .map_or_else(|| PathBuf::from(&target), |dir| dir.join(&target));
    normalize(&joined)
}

/// Lexically normalise `a/b/../c` to `a/c` so one file has one identity.
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                let at_start = matches!(
                    out.components().next_back(),
                    None | Some(Component::ParentDir)
                );
                if at_start {
                    out.push("..");
                } else {
                    out.pop();
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn percent_decode(text: &str) -> String {
    if !text.contains('%') {
        return text.to_owned();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Follow a JSON pointer (`/components/schemas/Pet`) from `root`.
pub fn pointer<'a>(root: &'a Node, fragment: &str) -> Option<&'a Node> {
    if fragment.is_empty() || fragment == "/" {
        return Some(root);
    }
    let mut node = root;
    for raw in fragment.strip_prefix('/')?.split('/') {
        let token = percent_decode(raw).replace("~1", "/").replace("~0", "~");
        node = match &node.value {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.name == token)
                .map(|(_, v)| v)?,
            Value::Seq(items) => items.get(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(node)
}

struct Loader<'l> {
    sources: SourceMap,
    trees: Vec<Node>,
    by_path: HashMap<PathBuf, FileId>,
    ref_context: HashMap<FileId, FileId>,
    warnings: Vec<Warning>,
    limits: &'l Limits,
}

impl Loader<'_> {
    fn run(&mut self, path: &Path, overlays: &[PathBuf]) -> Result<(Version, String), LoadError> {
        let bytes = self.read(path)?;
        let root = self.add_bytes(normalize(path), bytes)?;
        for overlay in overlays {
            let bytes = self.read(overlay)?;
            // Not registered under its path: it is not a file `$ref`s reach.
            let id = self.add_unlisted(overlay.clone(), bytes)?;
            self.ref_context.insert(id, root);
            let (before, rest) = self.trees.split_at_mut(id.0 as usize);
            let (Some(document), Some(overlay)) = (before.get_mut(root.0 as usize), rest.first())
            else {
                continue;
            };
            let warnings = overlay::apply(document, overlay, &self.sources)?;
            self.warnings.extend(warnings);
        }
        self.finish(root)
    }

    /// Check the version, then load every file the `$ref`s reach, breadth first.
    fn finish(&mut self, root: FileId) -> Result<(Version, String), LoadError> {
        let version = detect_version(&self.trees[root.0 as usize])?;
        let mut queue = VecDeque::from([root]);
        let mut queued: HashSet<FileId> = HashSet::from([root]);
        while let Some(file) = queue.pop_front() {
            for (reference, pos) in external_refs(&self.trees[file.0 as usize]) {
                let base = self
                    .sources
                    .get(file)
                    .map(|f| f.path.clone())
                    .unwrap_or_default();
                let target = relative_to(&base, &reference);
                if let Some(id) = self.by_path.get(&target) {
                    if queued.insert(*id) {
                        queue.push_back(*id);
                    }
                    continue;
                }
                let bytes = self.read(&target).map_err(|e| LoadError::MissingRefFile {
                    target: target.display().to_string(),
                    reason: match e {
                        LoadError::Read { reason, .. } => reason,
                        other => other.to_string(),
                    },
                    pos,
                })?;
                let id = self.add_bytes(target, bytes)?;
                queued.insert(id);
                queue.push_back(id);
            }
        }
        if version.0 == Version::V2_0 {
            let refs = Refs {
                trees: &self.trees,
                by_path: &self.by_path,
                sources: &self.sources,
                ref_context: &self.ref_context,
            };
            let converted = swagger2::normalize(refs, root);
            for (file, tree) in converted {
                if let Some(slot) = self.trees.get_mut(file.0 as usize) {
                    *slot = tree;
                }
            }
        }
        Ok(version)
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>, LoadError> {
        let shown = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| LoadError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        if meta.is_dir() {
            return Err(LoadError::Read {
                path: shown,
                reason: "it is a directory".into(),
            });
        }
        if meta.len() > self.limits.max_file_bytes {
            return Err(LoadError::TooLarge {
                path: shown,
                size: meta.len(),
                limit: self.limits.max_file_bytes,
            });
        }
        std::fs::read(path).map_err(|e| LoadError::Read {
            path: shown,
            reason: e.to_string(),
        })
    }

    /// Add a file's bytes; text that is not UTF-8 is refused at the line and
    /// column of its first bad byte (the file is kept, decoded lossily, so
    /// the error can show the line).
    fn add_bytes(&mut self, path: PathBuf, bytes: Vec<u8>) -> Result<FileId, LoadError> {
        self.add_file(path, bytes, true)
    }

    /// Add a file that `$ref`s do not name (an overlay).
    fn add_unlisted(&mut self, path: PathBuf, bytes: Vec<u8>) -> Result<FileId, LoadError> {
        self.add_file(path, bytes, false)
    }

    fn add_file(
        &mut self,
        path: PathBuf,
        bytes: Vec<u8>,
        listed: bool,
    ) -> Result<FileId, LoadError> {
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                let offset = e.utf8_error().valid_up_to();
                let bytes = e.into_bytes();
                let byte = bytes.get(offset).copied().unwrap_or(0);
                let valid =
                    String::from_utf8_lossy(bytes.get(..offset).unwrap_or(&[])).into_owned();
                let line = valid.matches('\n').count() + 1;
                let column = valid.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                let shown = path.display().to_string();
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let id = self.sources.add(path.clone(), text);
                if listed {
                    self.by_path.insert(path, id);
                }
                return Err(LoadError::NotUtf8 {
                    path: shown,
                    byte,
                    offset,
                    pos: Pos::new(id, line, column),
                });
            }
        };
        let id = self.sources.add(path.clone(), text);
        if listed {
            self.by_path.insert(path, id);
        }
        let text = self.sources.get(id).map_or("", |f| f.text.as_str());
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let tree = tree::parse(text, id, self.limits).map_err(|error| LoadError::Tree { error })?;
        self.trees.push(tree);
        Ok(id)
    }
}

fn detect_version(root: &Node) -> Result<(Version, String), LoadError> {
    if root.as_map().is_none() {
        return Err(LoadError::NotOpenApi {
            reason: format!("the document is {}, not a mapping", root.kind()),
            pos: root.pos,
        });
    }
    if let Some(node) = root.get("swagger") {
        let text = node.scalar_text().unwrap_or_default();
        if text == "2.0" || text.starts_with("2.0.") {
            return Ok((Version::V2_0, text));
        }
        return Err(LoadError::Unsupported {
            what: format!("Swagger `{text}`"),
            pos: node.pos,
        });
    }
    // Swagger 1.x named its version `swaggerVersion`.
    if let Some(node) = root.get("swaggerVersion") {
        return Err(LoadError::Unsupported {
            what: format!(
                "Swagger `{}`; convert it to OpenAPI 3 first",
                node.scalar_text().unwrap_or_default()
            ),
            pos: node.pos,
        });
    }
    let Some(node) = root.get("openapi") else {
        return Err(LoadError::NotOpenApi {
            reason: "it has no `openapi` field".into(),
            pos: root.pos,
        });
    };
    let text = node.scalar_text().unwrap_or_default();
    let version = if text.starts_with("3.0") {
        Version::V3_0
    } else if text.starts_with("3.1") {
        Version::V3_1
    } else if text.starts_with("3.2") {
        Version::V3_2
    } else {
        return Err(LoadError::Unsupported {
            what: format!("OpenAPI `{text}`"),
            pos: node.pos,
        });
    };
    Ok((version, text))
}

/// Every `$ref` in `root` that names another file, with where it is written.
fn external_refs(root: &Node) -> Vec<(String, Pos)> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(node) = todo.pop() {
        match &node.value {
            Value::Map(entries) => {
                for (key, value) in entries {
                    if key.name == "$ref"
                        && let Some(reference) = value.as_str()
                    {
                        let (file, _) = split_ref(reference);
                        if !file.is_empty() && !is_remote(file) {
                            out.push((file.to_owned(), value.pos));
                        }
                    } else {
                        todo.push(value);
                    }
                }
            }
            Value::Seq(items) => todo.extend(items.iter()),
            _ => {}
        }
    }
    out
}
