//! A document tree in which every node keeps its file, line and column.
//!
//! YAML and JSON are both read with `saphyr-parser`, a maintained YAML 1.2
//! parser (JSON is YAML 1.2 flow syntax). It was chosen over the alternatives
//! for three reasons: `serde_yaml` is deprecated; `saphyr-parser` hands out an
//! event stream with a span on every event, which is what lets idem point into
//! the user's file; and because idem builds the tree itself from those events,
//! it decides how aliases expand and how deep nesting may go. The builder below
//! keeps an explicit stack (no recursion, so 100,000-deep input cannot overflow
//! the thread's stack), refuses nesting past [`Limits::max_depth`], and counts
//! every node an alias copies against [`Limits::max_alias_nodes`], so a
//! "billion laughs" document fails fast with a clear error instead of eating
//! the machine.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use crate::source::{FileId, Pos};

/// Bounds applied while building a tree.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Deepest nesting of sequences and mappings accepted.
    pub max_depth: usize,
    /// Most nodes that alias expansion may copy, in the whole document.
    pub max_alias_nodes: usize,
    /// Largest file accepted, in bytes.
    pub max_file_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 256,
            max_alias_nodes: 1_000_000,
            max_file_bytes: 256 * 1024 * 1024,
        }
    }
}

/// A value in the tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// A number, kept as written (`3`, `1e3`, `0.5`).
    Number(String),
    String(String),
    Seq(Vec<Node>),
    Map(Vec<(Key, Node)>),
}

/// A mapping key with the position it was written at.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub pos: Pos,
}

/// A value and the position where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub pos: Pos,
}

impl Node {
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[(Key, Node)]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match &self.value {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The value of mapping key `name`, if this is a mapping that has it.
    pub fn get(&self, name: &str) -> Option<&Node> {
        self.entry(name).map(|(_, v)| v)
    }

    /// The key and value of mapping key `name`.
    pub fn entry(&self, name: &str) -> Option<(&Key, &Node)> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.name == name)
            .map(|(k, v)| (k, v))
    }

    /// A string rendering of a scalar (numbers and booleans included).
    pub fn scalar_text(&self) -> Option<String> {
        match &self.value {
            Value::String(s) | Value::Number(s) => Some(s.clone()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Null => Some(String::new()),
            _ => None,
        }
    }

    /// A short name of the node's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Seq(_) => "a sequence",
            Value::Map(_) => "a mapping",
        }
    }
}

/// Why a file could not be turned into a tree.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TreeError {
    #[error("{message}")]
    Syntax { pos: Pos, message: String },
    #[error("nesting deeper than {limit} levels")]
    TooDeep { pos: Pos, limit: usize },
    #[error("aliases expand to more than {limit} nodes (an alias bomb?)")]
    AliasBomb { pos: Pos, limit: usize },
    #[error("alias refers to an anchor that is not defined before it")]
    UnknownAlias { pos: Pos },
    #[error("a mapping key must be a scalar")]
    ComplexKey { pos: Pos },
    #[error("duplicate key `{name}` (first at line {first_line})")]
    DuplicateKey {
        pos: Pos,
        name: String,
        first_line: u32,
    },
    #[error("the file is empty")]
    Empty { pos: Pos },
    #[error("a merge key `<<` takes a mapping or a sequence of mappings, not {found}")]
    BadMerge { pos: Pos, found: &'static str },
}

impl TreeError {
    pub fn pos(&self) -> Pos {
        match self {
            TreeError::Syntax { pos, .. }
            | TreeError::TooDeep { pos, .. }
            | TreeError::AliasBomb { pos, .. }
            | TreeError::UnknownAlias { pos }
            | TreeError::ComplexKey { pos }
            | TreeError::DuplicateKey { pos, .. }
            | TreeError::Empty { pos }
            | TreeError::BadMerge { pos, .. } => *pos,
        }
    }
}

enum Frame {
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        pos: Pos,
        anchor: usize,
        entries: Vec<(Key, Node)>,
        pending_key: Option<Key>,
        /// The pending key is a YAML 1.1 merge key (a plain `<<`).
        pending_merge: bool,
        /// Indices in `entries` of merge-key entries.
        merges: Vec<usize>,
    },
}

/// Parse YAML (or JSON) text into a [`Node`] tree. Only the first document of
/// a stream is read.
pub fn parse(text: &str, file: FileId, limits: &Limits) -> Result<Node, TreeError> {
    let mut builder = Builder {
        file,
        limits,
        stack: Vec::new(),
        anchors: HashMap::new(),
        alias_nodes: 0,
        root: None,
    };
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| TreeError::Syntax {
            pos: Pos::new(file, e.marker().line(), e.marker().col() + 1),
            message: e.info().to_owned(),
        })?;
        if builder.on_event(event, span)? {
            break;
        }
    }
    builder.root.ok_or(TreeError::Empty {
        pos: Pos::new(file, 1, 1),
    })
}

struct Builder<'l> {
    file: FileId,
    limits: &'l Limits,
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    alias_nodes: usize,
    root: Option<Node>,
}

impl Builder<'_> {
    fn pos(&self, span: &Span) -> Pos {
        Pos::new(self.file, span.start.line(), span.start.col() + 1)
    }

    /// Handle one event; `Ok(true)` once the first document is complete.
    fn on_event(&mut self, event: Event<'_>, span: Span) -> Result<bool, TreeError> {
        let pos = self.pos(&span);
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let plain = style == ScalarStyle::Plain && tag.is_none();
                // Only a plain `<<` is a merge key: a quoted one (JSON's
                // `"<<"` included) is an ordinary string.
                let merge = plain && text == "<<";
                let value = if plain {
                    plain_scalar(&text)
                } else {
                    Value::String(text.into_owned())
                };
                let node = Node { value, pos };
                self.remember(anchor, &node);
                self.push_scalar(node, merge)
            }
            Event::SequenceStart(anchor, _) => {
                self.open(Frame::Seq {
                    pos,
                    anchor,
                    items: Vec::new(),
                })?;
                Ok(false)
            }
            Event::MappingStart(anchor, _) => {
                self.open(Frame::Map {
                    pos,
                    anchor,
                    entries: Vec::new(),
                    pending_key: None,
                    pending_merge: false,
                    merges: Vec::new(),
                })?;
                Ok(false)
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor) = match self.stack.pop() {
                    Some(Frame::Seq { pos, anchor, items }) => (
                        Node {
                            value: Value::Seq(items),
                            pos,
                        },
                        anchor,
                    ),
                    Some(Frame::Map {
                        pos,
                        anchor,
                        entries,
                        merges,
                        ..
                    }) => {
                        // Explicit keys (two `<<` included) must be unique;
                        // a merged key under an explicit one is not a
                        // duplicate, it is overridden.
                        check_unique_keys(&entries)?;
                        (
                            Node {
                                value: Value::Map(apply_merges(entries, &merges)?),
                                pos,
                            },
                            anchor,
                        )
                    }
                    None => return Ok(false),
                };
                self.remember(anchor, &node);
                self.push_value(node, false)
            }
            Event::Alias(anchor) => {
                let node = self
                    .anchors
                    .get(&anchor)
                    .ok_or(TreeError::UnknownAlias { pos })?;
                self.alias_nodes = self.alias_nodes.saturating_add(count_nodes(node));
                if self.alias_nodes > self.limits.max_alias_nodes {
                    return Err(TreeError::AliasBomb {
                        pos,
                        limit: self.limits.max_alias_nodes,
                    });
                }
                let node = node.clone();
                self.push_value(node, false)
            }
            Event::DocumentEnd => Ok(self.root.is_some()),
            Event::StreamEnd => Ok(true),
            Event::Nothing | Event::StreamStart | Event::DocumentStart(_) => Ok(false),
        }
    }

    fn open(&mut self, frame: Frame) -> Result<(), TreeError> {
        if self.stack.len() >= self.limits.max_depth {
            let pos = match &frame {
                Frame::Seq { pos, .. } | Frame::Map { pos, .. } => *pos,
            };
            return Err(TreeError::TooDeep {
                pos,
                limit: self.limits.max_depth,
            });
        }
        self.stack.push(frame);
        Ok(())
    }

    fn remember(&mut self, anchor: usize, node: &Node) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
    }

    /// Attach a scalar: a value, or a mapping key (`merge`: a plain `<<`).
    fn push_scalar(&mut self, node: Node, merge: bool) -> Result<bool, TreeError> {
        if let Some(Frame::Map {
            pending_key: None,
            pending_merge,
            ..
        }) = self.stack.last_mut()
        {
            *pending_merge = merge;
        }
        self.push_value(node, true)
    }

    /// Attach a finished node to its parent (or make it the root).
    fn push_value(&mut self, node: Node, scalar: bool) -> Result<bool, TreeError> {
        match self.stack.last_mut() {
            None => {
                self.root = Some(node);
                Ok(false)
            }
            Some(Frame::Seq { items, .. }) => {
                items.push(node);
                Ok(false)
            }
            Some(Frame::Map {
                entries,
                pending_key,
                pending_merge,
                merges,
                ..
            }) => {
                match pending_key.take() {
                    Some(key) => {
                        if std::mem::take(pending_merge) {
                            merges.push(entries.len());
                        }
                        entries.push((key, node));
                    }
                    None => {
                        if !scalar && !matches!(node.value, Value::Null) {
                            return Err(TreeError::ComplexKey { pos: node.pos });
                        }
                        *pending_key = Some(Key {
                            name: node.scalar_text().unwrap_or_default(),
                            pos: node.pos,
                        });
                    }
                }
                Ok(false)
            }
        }
    }
}

/// Reject a mapping that repeats a key: YAML forbids it, and silently keeping
/// one of two `post:` operations would hide the other from the audit.
fn check_unique_keys(entries: &[(Key, Node)]) -> Result<(), TreeError> {
    if entries.len() < 2 {
        return Ok(());
    }
    let mut order: Vec<&Key> = entries.iter().map(|(k, _)| k).collect();
    order.sort_by(|a, b| a.name.cmp(&b.name).then(a.pos.cmp(&b.pos)));
    for pair in order.windows(2) {
        if let [first, second] = pair
            && first.name == second.name
        {
            return Err(TreeError::DuplicateKey {
                pos: second.pos,
                name: second.name.clone(),
                first_line: first.pos.line,
            });
        }
    }
    Ok(())
}

/// Replace each merge-key entry by the entries of the mapping(s) it names,
/// with YAML 1.1's precedence: an explicit key beats a merged one, and in a
/// sequence of mappings an earlier one beats a later one. The merged entries
/// keep the positions they were written at. Their nodes were counted against
/// the alias bound when their aliases were expanded.
fn apply_merges(
    entries: Vec<(Key, Node)>,
    merges: &[usize],
) -> Result<Vec<(Key, Node)>, TreeError> {
    if merges.is_empty() {
        return Ok(entries);
    }
    let mut seen: std::collections::HashSet<String> = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| !merges.contains(i))
        .map(|(_, (k, _))| k.name.clone())
        .collect();
    let mut out = Vec::with_capacity(entries.len());
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if !merges.contains(&i) {
            out.push((key, value));
            continue;
        }
        let sources = match value.value {
            Value::Map(_) => vec![value],
            Value::Seq(items) => items,
            _ => {
                return Err(TreeError::BadMerge {
                    pos: value.pos,
                    found: value.kind(),
                });
            }
        };
        for source in sources {
            let Value::Map(merged) = source.value else {
                return Err(TreeError::BadMerge {
                    pos: source.pos,
                    found: source.kind(),
                });
            };
            for (k, v) in merged {
                if seen.insert(k.name.clone()) {
                    out.push((k, v));
                }
            }
        }
    }
    Ok(out)
}

fn count_nodes(node: &Node) -> usize {
    // Iterative, so a deep anchored subtree cannot overflow the stack.
    let mut count = 0usize;
    let mut todo = vec![node];
    while let Some(n) = todo.pop() {
        count += 1;
        match &n.value {
            Value::Seq(items) => todo.extend(items.iter()),
            Value::Map(entries) => todo.extend(entries.iter().map(|(_, v)| v)),
            _ => {}
        }
    }
    count
}

/// Resolve a plain scalar by the YAML 1.2 core schema.
fn plain_scalar(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if looks_numeric(text) {
        Value::Number(text.to_owned())
    } else {
        Value::String(text.to_owned())
    }
}

fn looks_numeric(text: &str) -> bool {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    if matches!(body, ".inf" | ".Inf" | ".INF") || matches!(text, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    if let Some(hex) = body.strip_prefix("0x") {
        return !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit());
    }
    if let Some(oct) = body.strip_prefix("0o") {
        return !oct.is_empty() && oct.chars().all(|c| c.is_digit(8));
    }
    let mut digits = 0;
    let mut seen_exp = false;
    let mut seen_dot = false;
    let mut prev = ' ';
    for c in body.chars() {
        match c {
            '0'..='9' => digits += 1,
            '.' if !seen_exp && !seen_dot => seen_dot = true,
            'e' | 'E' if digits > 0 && !seen_exp => seen_exp = true,
            '+' | '-' if matches!(prev, 'e' | 'E') => {}
            _ => return false,
        }
        prev = c;
    }
    digits > 0 && !matches!(prev, 'e' | 'E' | '+' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Node, TreeError> {
        parse(text, FileId(0), &Limits::default())
    }

    #[test]
    fn positions_are_one_based() {
        let node = parse_str("a:\n  b: 1\n  c: [x, 'y']\n").unwrap();
        let b = node.get("a").and_then(|a| a.entry("b")).unwrap();
        assert_eq!((b.0.pos.line, b.0.pos.column), (2, 3));
        assert_eq!(b.1.value, Value::Number("1".into()));
        let c = node.get("a").and_then(|a| a.get("c")).unwrap();
        assert_eq!(c.as_seq().unwrap()[1].as_str(), Some("y"));
    }

    #[test]
    fn json_is_read_with_positions() {
        let node = parse_str("{\n  \"openapi\": \"3.1.0\",\n  \"n\": 3, \"t\": true}").unwrap();
        assert_eq!(node.get("openapi").and_then(Node::as_str), Some("3.1.0"));
        assert_eq!(node.get("openapi").unwrap().pos.line, 2);
        assert_eq!(node.get("t").and_then(Node::as_bool), Some(true));
    }

    #[test]
    fn core_schema_scalars() {
        assert_eq!(plain_scalar("~"), Value::Null);
        assert_eq!(plain_scalar("1e3"), Value::Number("1e3".into()));
        assert_eq!(plain_scalar("-0.5"), Value::Number("-0.5".into()));
        assert_eq!(plain_scalar("3.0.3"), Value::String("3.0.3".into()));
        assert_eq!(plain_scalar("e"), Value::String("e".into()));
        assert_eq!(plain_scalar("1e"), Value::String("1e".into()));
        assert_eq!(plain_scalar("yes"), Value::String("yes".into()));
    }

    #[test]
    fn aliases_expand_within_budget() {
        let node = parse_str("a: &x {k: v}\nb: *x\n").unwrap();
        assert_eq!(
            node.get("b")
                .and_then(|b| b.get("k"))
                .and_then(Node::as_str),
            Some("v")
        );
    }

    #[test]
    fn alias_bomb_is_refused() {
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let err = parse_str(&doc).unwrap_err();
        assert!(matches!(err, TreeError::AliasBomb { .. }), "{err:?}");
    }

    #[test]
    fn deep_nesting_is_refused_without_overflow() {
        // Flow nesting is bounded by the parser itself, block nesting by the builder.
        let doc = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = parse_str(&doc).unwrap_err();
        assert!(err.to_string().contains("limit"), "{err:?}");
        // Compact block sequences nest one level per two characters.
        let doc = format!("{}x\n", "- ".repeat(100_000));
        let err = parse_str(&doc).unwrap_err();
        assert!(matches!(err, TreeError::TooDeep { .. }), "{err:?}");
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let err =
            parse_str("paths:\n  /a:\n    post: {}\n    get: {}\n    post: {}\n").unwrap_err();
        assert_eq!(
            err,
            TreeError::DuplicateKey {
                pos: Pos::new(FileId(0), 5, 5),
                name: "post".into(),
                first_line: 3
            }
        );
    }

    #[test]
    fn merge_keys_follow_yaml_1_1() {
        let doc = "base: &base {a: 1, b: 2}\nmore: &more {b: 3, c: 4}\n\
                   one:\n  <<: *base\n  b: 9\n\
                   many:\n  d: 5\n  <<: [*base, *more]\n\
                   inline:\n  <<: {e: 6}\n";
        let node = parse_str(doc).unwrap();
        let text = |path: &[&str]| {
            path.iter()
                .try_fold(&node, |n, k| n.get(k))
                .and_then(Node::scalar_text)
        };
        // An explicit key wins over a merged one, wherever it is written.
        assert_eq!(text(&["one", "b"]).as_deref(), Some("9"));
        assert_eq!(text(&["one", "a"]).as_deref(), Some("1"));
        assert!(node.get("one").and_then(|o| o.get("<<")).is_none());
        // An earlier mapping in the sequence wins over a later one.
        assert_eq!(text(&["many", "b"]).as_deref(), Some("2"));
        assert_eq!(text(&["many", "c"]).as_deref(), Some("4"));
        assert_eq!(text(&["many", "d"]).as_deref(), Some("5"));
        assert_eq!(text(&["inline", "e"]).as_deref(), Some("6"));
        // Merged entries keep the position they were written at.
        let (key, _) = node.get("one").and_then(|o| o.entry("a")).unwrap();
        assert_eq!((key.pos.line, key.pos.column), (1, 14));
        // Entries are in reading order: merged ones where `<<` stood.
        let names: Vec<&str> = node
            .get("many")
            .and_then(Node::as_map)
            .unwrap()
            .iter()
            .map(|(k, _)| k.name.as_str())
            .collect();
        assert_eq!(names, ["d", "a", "b", "c"]);
    }

    #[test]
    fn merged_keys_are_not_duplicates_but_two_explicit_keys_are() {
        assert!(parse_str("a: &a {k: 1}\nb:\n  <<: *a\n  k: 2\n").is_ok());
        assert!(parse_str("a: &a {k: 1}\nc: &c {k: 3}\nb:\n  <<: [*a, *c]\n").is_ok());
        let err = parse_str("a: &a {k: 1}\nb:\n  <<: *a\n  k: 2\n  k: 3\n").unwrap_err();
        assert!(
            matches!(err, TreeError::DuplicateKey { ref name, .. } if name == "k"),
            "{err:?}"
        );
        let err = parse_str("a: &a {k: 1}\nb:\n  <<: *a\n  <<: *a\n").unwrap_err();
        assert!(
            matches!(err, TreeError::DuplicateKey { ref name, .. } if name == "<<"),
            "{err:?}"
        );
    }

    #[test]
    fn quoted_merge_keys_and_bad_merges() {
        // JSON's `"<<"` is an ordinary key.
        let node = parse_str("{\"<<\": {\"k\": 1}}").unwrap();
        assert!(node.get("<<").is_some() && node.get("k").is_none());
        let err = parse_str("a:\n  <<: 3\n").unwrap_err();
        assert_eq!(
            err,
            TreeError::BadMerge {
                pos: Pos::new(FileId(0), 2, 7),
                found: "a number"
            }
        );
        let err = parse_str("a: &a {k: 1}\nb:\n  <<: [*a, x]\n").unwrap_err();
        assert!(
            matches!(
                err,
                TreeError::BadMerge {
                    found: "a string",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn merge_key_bomb_is_refused() {
        // Each level merges the previous one and copies it nine more times.
        let mut doc =
            String::from("l0: &l0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}\n");
        for i in 1..10 {
            let p = i - 1;
            doc.push_str(&format!("l{i}: &l{i}\n  <<: [*l{p}, *l{p}, *l{p}]\n"));
            for k in 0..9 {
                doc.push_str(&format!("  k{k}: *l{p}\n"));
            }
        }
        let err = parse_str(&doc).unwrap_err();
        assert!(matches!(err, TreeError::AliasBomb { .. }), "{err:?}");
        // A merge of many copies of one big mapping is refused too, even
        // though the merged result is small: every copy is work.
        let big: Vec<String> = (0..2000).map(|i| format!("k{i}: [1, 2, 3, 4]")).collect();
        let mut doc = format!("big: &big {{{}}}\n", big.join(", "));
        for i in 0..30 {
            doc.push_str(&format!(
                "m{i}:\n  <<: [*big, *big, *big, *big, *big, *big, *big, *big, *big, *big]\n"
            ));
        }
        let err = parse_str(&doc).unwrap_err();
        assert!(matches!(err, TreeError::AliasBomb { .. }), "{err:?}");
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let err = parse_str("a: [1, 2\nb: }\n").unwrap_err();
        assert!(matches!(err, TreeError::Syntax { .. }));
        assert!(err.pos().line >= 1);
    }
}
