//! Swagger 2.0, read as OpenAPI 3.0: the loader rewrites a 2.0 document into
//! the 3.0 shape before anything else sees it, so the model builder (and
//! every generator after it) reads one version only.
//!
//! Every node keeps the position it was written at; a node the conversion
//! has to create (`requestBody`, `content`, a parameter's `schema`) takes
//! the position of the 2.0 node it stands for, so a finding about a 2.0
//! body parameter points at that parameter.
//!
//! What changes:
//! - `swagger: "2.0"` → `openapi: 3.0.3`; `host`, `basePath`, `schemes` →
//!   `servers`;
//! - `definitions` → `components/schemas`, top-level `parameters` and
//!   `responses` → `components/…`, `securityDefinitions` →
//!   `components/securitySchemes` (basic → `http`/`basic`, apiKey kept,
//!   oauth2 flows mapped); `$ref`s follow, in every file;
//! - a parameter's type keywords move under `schema`, `collectionFormat`
//!   becomes `style`/`explode`;
//! - `in: body` → `requestBody` under the operation's (or the root's)
//!   `consumes` (default `application/json`); `in: formData` parameters → a
//!   `requestBody` whose schema is an object of them, form-urlencoded or, with
//!   a `type: file` or a multipart `consumes`, `multipart/form-data`;
//! - a response's `schema` → `content` under `produces` (default
//!   `application/json`), its `examples` → each media type's `example`, its
//!   headers' type keywords → `schema`;
//! - `x-nullable` → `nullable`, `type: file` → `type: string, format: binary`.
//!
//! Parameters and responses defined in other files are inlined where they
//! are used (converted, positions kept); local ones stay `$ref`s into
//! `components`. A `$ref` that does not resolve is left as written, so the
//! model builder reports it at its place.

use crate::source::{FileId, Pos};
use crate::tree::{Key, Node, Value};

use super::{Refs, ref_target, split_ref};

const METHODS: &[&str] = &["get", "put", "post", "delete", "options", "head", "patch"];

/// Keywords of a 2.0 parameter, header or items object that describe its
/// value; in 3.0 they live in `schema`.
const SCHEMA_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "items",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "enum",
    "multipleOf",
    "x-nullable",
];

const DEFAULT_MEDIA: &str = "application/json";
const FORM: &str = "application/x-www-form-urlencoded";
const MULTIPART: &str = "multipart/form-data";

/// Convert the 2.0 document rooted at `root` (and adjust the other files it
/// reaches); returns every file's new tree.
pub(super) fn normalize(refs: Refs<'_>, root: FileId) -> Vec<(FileId, Node)> {
    let mut out = Vec::with_capacity(refs.trees.len());
    for (index, tree) in refs.trees.iter().enumerate() {
        let file = FileId(u32::try_from(index).unwrap_or(u32::MAX));
        let mut converted = if file == root {
            Converter { refs, root }.document(tree)
        } else {
            rename_definitions(tree.clone())
        };
        fix(&mut converted, refs, root);
        out.push((file, converted));
    }
    out
}

fn key(name: &str, pos: Pos) -> Key {
    Key {
        name: name.to_owned(),
        pos,
    }
}

fn string(text: &str, pos: Pos) -> Node {
    Node {
        value: Value::String(text.to_owned()),
        pos,
    }
}

fn map(entries: Vec<(Key, Node)>, pos: Pos) -> Node {
    Node {
        value: Value::Map(entries),
        pos,
    }
}

fn seq(items: Vec<Node>, pos: Pos) -> Node {
    Node {
        value: Value::Seq(items),
        pos,
    }
}

fn strings(node: Option<&Node>) -> Option<Vec<String>> {
    node.and_then(Node::as_seq)
        .map(|items| items.iter().filter_map(Node::scalar_text).collect())
}

struct Converter<'a> {
    refs: Refs<'a>,
    root: FileId,
}

/// What an operation's parameters turn into.
#[derive(Default)]
struct Parameters<'n> {
    /// 3.0 parameters, in order.
    list: Vec<Node>,
    /// The `in: body` parameter, if any.
    body: Option<&'n Node>,
    /// `in: formData` parameters, in order.
    form: Vec<&'n Node>,
}

impl<'a> Converter<'a> {
    fn document(&self, doc: &'a Node) -> Node {
        let Some(entries) = doc.as_map() else {
            return doc.clone();
        };
        let consumes = strings(doc.get("consumes")).unwrap_or_default();
        let produces = strings(doc.get("produces")).unwrap_or_default();
        let mut out: Vec<(Key, Node)> = Vec::with_capacity(entries.len() + 2);
        let mut components: Vec<(Key, Node)> = Vec::new();
        let mut components_pos: Option<Pos> = None;
        let mut servers_done = false;
        for (k, v) in entries {
            match k.name.as_str() {
                "swagger" => out.push((key("openapi", k.pos), string("3.0.3", v.pos))),
                "host" | "basePath" | "schemes" => {
                    if !servers_done {
                        servers_done = true;
                        out.push((key("servers", k.pos), servers(doc, v.pos)));
                    }
                }
                "consumes" | "produces" => {}
                "paths" => out.push((k.clone(), self.paths(v, &consumes, &produces))),
                "definitions" => {
                    components_pos.get_or_insert(k.pos);
                    components.push((key("schemas", k.pos), v.clone()));
                }
                "parameters" => {
                    components_pos.get_or_insert(k.pos);
                    components.push((key("parameters", k.pos), self.shared_parameters(v)));
                }
                "responses" => {
                    components_pos.get_or_insert(k.pos);
                    let converted = map_values(v, |r| self.response(r, &produces));
                    components.push((key("responses", k.pos), converted));
                }
                "securityDefinitions" => {
                    components_pos.get_or_insert(k.pos);
                    components.push((
                        key("securitySchemes", k.pos),
                        map_values(v, security_scheme),
                    ));
                }
                _ => out.push((k.clone(), v.clone())),
            }
        }
        if let Some(pos) = components_pos {
            out.push((key("components", pos), map(components, pos)));
        }
        map(out, doc.pos)
    }

    /// Top-level `parameters`: the ones 3.0 calls parameters. Body and
    /// formData parameters are inlined where operations use them.
    fn shared_parameters(&self, node: &'a Node) -> Node {
        let Some(entries) = node.as_map() else {
            return node.clone();
        };
        let kept = entries
            .iter()
            .filter(|(_, p)| !matches!(location(p), Some("body" | "formData")))
            .map(|(k, p)| (k.clone(), parameter(p)))
            .collect();
        map(kept, node.pos)
    }

    fn paths(&self, node: &'a Node, consumes: &[String], produces: &[String]) -> Node {
        let Some(entries) = node.as_map() else {
            return node.clone();
        };
        let converted = entries
            .iter()
            .map(|(k, item)| {
                if !k.name.starts_with('/') {
                    return (k.clone(), item.clone());
                }
                // A path item in another file is inlined, converted.
                let item = self.refs.resolve(item).unwrap_or(item);
                (k.clone(), self.path_item(item, consumes, produces))
            })
            .collect();
        map(converted, node.pos)
    }

    fn path_item(&self, item: &'a Node, consumes: &[String], produces: &[String]) -> Node {
        let Some(entries) = item.as_map() else {
            return item.clone();
        };
        let shared = self.parameters(item.get("parameters"));
        let mut out = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            if k.name == "parameters" {
                if !shared.list.is_empty() {
                    out.push((k.clone(), seq(shared.list.clone(), v.pos)));
                }
            } else if METHODS.contains(&k.name.as_str()) {
                let op = self.refs.resolve(v).unwrap_or(v);
                out.push((k.clone(), self.operation(op, &shared, consumes, produces)));
            } else {
                out.push((k.clone(), v.clone()));
            }
        }
        map(out, item.pos)
    }

    /// Split a 2.0 parameter list into 3.0 parameters, the body parameter
    /// and the form parameters.
    fn parameters(&self, list: Option<&'a Node>) -> Parameters<'a> {
        let mut out = Parameters::default();
        for item in list.and_then(Node::as_seq).unwrap_or(&[]) {
            let Ok(resolved) = self.refs.resolve(item) else {
                // Broken: left as written, for the model to report.
                out.list.push(item.clone());
                continue;
            };
            match location(resolved) {
                Some("body") => out.body = Some(resolved),
                Some("formData") => out.form.push(resolved),
                _ if self.is_local_ref(item) => out.list.push(item.clone()),
                _ => out.list.push(parameter(resolved)),
            }
        }
        out
    }

    /// A `$ref` into the root document itself, which keeps its components.
    fn is_local_ref(&self, node: &Node) -> bool {
        ref_target(node).is_some_and(|r| self.refs.file_of(node, r) == Some(self.root))
    }

    fn operation(
        &self,
        op: &'a Node,
        shared: &Parameters<'a>,
        consumes: &[String],
        produces: &[String],
    ) -> Node {
        let Some(entries) = op.as_map() else {
            return op.clone();
        };
        let consumes = strings(op.get("consumes")).unwrap_or_else(|| consumes.to_vec());
        let produces = strings(op.get("produces")).unwrap_or_else(|| produces.to_vec());
        let own = self.parameters(op.get("parameters"));
        // Path-level parameters apply unless the operation redefines them.
        let overrides = |p: &Node| {
            let name = p.get("name").and_then(Node::as_str);
            let place = p.get("in").and_then(Node::as_str);
            own.list
                .iter()
                .filter_map(|o| self.refs.resolve(o).ok())
                .chain(own.form.iter().copied())
                .any(|o| {
                    o.get("name").and_then(Node::as_str) == name
                        && o.get("in").and_then(Node::as_str) == place
                })
        };
        let body = own.body.or(shared.body);
        let mut form: Vec<&Node> = own.form.clone();
        form.extend(shared.form.iter().copied().filter(|p| !overrides(p)));

        let mut out = Vec::with_capacity(entries.len() + 1);
        let mut body_done = false;
        for (k, v) in entries {
            match k.name.as_str() {
                "consumes" | "produces" | "schemes" => {}
                "parameters" => {
                    if !own.list.is_empty() {
                        out.push((k.clone(), seq(own.list.clone(), v.pos)));
                    }
                    if let Some(request) = request_body(body, &form, &consumes) {
                        out.push((key("requestBody", request.pos), request));
                        body_done = true;
                    }
                }
                "responses" => {
                    let converted = map_values(v, |r| self.response_or_ref(r, &produces));
                    out.push((k.clone(), converted));
                }
                _ => out.push((k.clone(), v.clone())),
            }
        }
        // Body parameters declared only on the path item.
        if !body_done && let Some(request) = request_body(body, &form, &consumes) {
            out.push((key("requestBody", request.pos), request));
        }
        map(out, op.pos)
    }

    fn response_or_ref(&self, node: &'a Node, produces: &[String]) -> Node {
        if self.is_local_ref(node) {
            return node.clone();
        }
        match self.refs.resolve(node) {
            Ok(resolved) => self.response(resolved, produces),
            Err(_) => node.clone(),
        }
    }

    fn response(&self, node: &'a Node, produces: &[String]) -> Node {
        let Some(entries) = node.as_map() else {
            return node.clone();
        };
        let mut out = Vec::with_capacity(entries.len());
        let examples = node.get("examples").and_then(Node::as_map).unwrap_or(&[]);
        for (k, v) in entries {
            match k.name.as_str() {
                "schema" => {
                    let mut media: Vec<String> = media_types(produces);
                    for (mt, _) in examples {
                        if !media.contains(&mt.name) {
                            media.push(mt.name.clone());
                        }
                    }
                    let content = media
                        .iter()
                        .map(|mt| {
                            let mut entry = vec![(key("schema", k.pos), v.clone())];
                            if let Some((ek, example)) =
                                examples.iter().find(|(e, _)| e.name == *mt)
                            {
                                entry.push((key("example", ek.pos), example.clone()));
                            }
                            (key(mt, k.pos), map(entry, v.pos))
                        })
                        .collect();
                    out.push((key("content", k.pos), map(content, v.pos)));
                }
                "examples" => {}
                "headers" => out.push((k.clone(), map_values(v, header))),
                _ => out.push((k.clone(), v.clone())),
            }
        }
        map(out, node.pos)
    }
}

fn location(param: &Node) -> Option<&str> {
    param.get("in").and_then(Node::as_str)
}

/// `produces`/`consumes` as media types, `application/json` when none.
fn media_types(list: &[String]) -> Vec<String> {
    if list.is_empty() {
        vec![DEFAULT_MEDIA.to_owned()]
    } else {
        list.to_vec()
    }
}

/// Apply `f` to each value of a mapping, keeping keys; other nodes as is.
fn map_values<'n>(node: &'n Node, f: impl Fn(&'n Node) -> Node) -> Node {
    match node.as_map() {
        Some(entries) => map(
            entries.iter().map(|(k, v)| (k.clone(), f(v))).collect(),
            node.pos,
        ),
        None => node.clone(),
    }
}

fn servers(doc: &Node, pos: Pos) -> Node {
    let host = doc.get("host").and_then(Node::as_str).unwrap_or("");
    let base = doc.get("basePath").and_then(Node::as_str).unwrap_or("");
    let schemes = strings(doc.get("schemes")).unwrap_or_default();
    let urls: Vec<String> = if host.is_empty() {
        vec![if base.is_empty() {
            "/".to_owned()
        } else {
            base.to_owned()
        }]
    } else if schemes.is_empty() {
        vec![format!("https://{host}{base}")]
    } else {
        schemes
            .iter()
            .map(|s| format!("{s}://{host}{base}"))
            .collect()
    };
    seq(
        urls.iter()
            .map(|u| map(vec![(key("url", pos), string(u, pos))], pos))
            .collect(),
        pos,
    )
}

/// A mapping's entries.
type Entries = Vec<(Key, Node)>;

/// Split a parameter, header or items object into what stays and what
/// moves into `schema`.
fn split_schema(node: &Node) -> (Entries, Entries) {
    let mut kept = Vec::new();
    let mut schema = Vec::new();
    for (k, v) in node.as_map().unwrap_or(&[]) {
        if k.name == "items" {
            schema.push((k.clone(), items(v)));
        } else if SCHEMA_KEYWORDS.contains(&k.name.as_str()) {
            schema.push((k.clone(), v.clone()));
        } else {
            kept.push((k.clone(), v.clone()));
        }
    }
    (kept, schema)
}

/// A 2.0 items object as a schema (its own `collectionFormat` dropped).
fn items(node: &Node) -> Node {
    if node.get("$ref").is_some() {
        return node.clone();
    }
    let (kept, mut schema) = split_schema(node);
    schema.extend(
        kept.into_iter()
            .filter(|(k, _)| k.name != "collectionFormat"),
    );
    map(schema, node.pos)
}

/// A non-body parameter: type keywords under `schema`, `collectionFormat`
/// as `style`/`explode`.
fn parameter(node: &Node) -> Node {
    if node.get("$ref").is_some() || node.get("schema").is_some() || node.as_map().is_none() {
        return node.clone();
    }
    let (kept, schema) = split_schema(node);
    let place = location(node).unwrap_or("query");
    let mut out = Vec::with_capacity(kept.len() + 3);
    let mut schema_pos = node.pos;
    if let Some((k, _)) = schema.first() {
        schema_pos = k.pos;
    }
    for (k, v) in kept {
        if k.name == "collectionFormat" {
            let (style, explode) = match (v.as_str(), place) {
                (Some("multi"), _) => (Some("form"), true),
                (Some("ssv"), _) => (Some("spaceDelimited"), false),
                (Some("pipes"), _) => (Some("pipeDelimited"), false),
                (Some("csv") | None, "query" | "cookie") => (Some("form"), false),
                (Some("csv") | None, _) => (Some("simple"), false),
                // `tsv` has no 3.0 style.
                _ => (None, false),
            };
            if let Some(style) = style {
                out.push((key("style", k.pos), string(style, v.pos)));
                out.push((
                    key("explode", k.pos),
                    Node {
                        value: Value::Bool(explode),
                        pos: v.pos,
                    },
                ));
            }
        } else if k.name != "allowEmptyValue" || place == "query" {
            out.push((k, v));
        }
    }
    if !schema.is_empty() {
        out.push((key("schema", schema_pos), map(schema, schema_pos)));
    }
    map(out, node.pos)
}

/// A response header: type keywords under `schema`.
fn header(node: &Node) -> Node {
    if node.get("$ref").is_some() || node.as_map().is_none() {
        return node.clone();
    }
    let (mut kept, schema) = split_schema(node);
    kept.retain(|(k, _)| k.name != "collectionFormat");
    if let Some((k, _)) = schema.first() {
        let pos = k.pos;
        kept.push((key("schema", pos), map(schema, pos)));
    }
    map(kept, node.pos)
}

/// The request body an operation's body or form parameters make.
fn request_body(body: Option<&Node>, form: &[&Node], consumes: &[String]) -> Option<Node> {
    if let Some(body) = body {
        let mut out = Vec::new();
        for (k, v) in body.as_map().unwrap_or(&[]) {
            match k.name.as_str() {
                "description" | "required" => out.push((k.clone(), v.clone())),
                name if name.starts_with("x-") => out.push((k.clone(), v.clone())),
                _ => {}
            }
        }
        let schema = body
            .get("schema")
            .cloned()
            .unwrap_or_else(|| map(Vec::new(), body.pos));
        let content = media_types(consumes)
            .iter()
            .map(|mt| {
                (
                    key(mt, schema.pos),
                    map(
                        vec![(key("schema", schema.pos), schema.clone())],
                        schema.pos,
                    ),
                )
            })
            .collect();
        out.push((key("content", body.pos), map(content, body.pos)));
        return Some(map(out, body.pos));
    }
    let first = form.first()?;
    let pos = first.pos;
    let has_file = form
        .iter()
        .any(|p| p.get("type").and_then(Node::as_str) == Some("file"));
    let media: Vec<String> = if has_file {
        vec![MULTIPART.to_owned()]
    } else {
        let listed: Vec<String> = consumes
            .iter()
            .filter(|c| c.as_str() == FORM || c.as_str() == MULTIPART)
            .cloned()
            .collect();
        if listed.is_empty() {
            vec![FORM.to_owned()]
        } else {
            listed
        }
    };
    let mut properties = Vec::with_capacity(form.len());
    let mut required = Vec::new();
    for param in form {
        let Some(name) = param.get("name") else {
            continue;
        };
        let Some(text) = name.as_str() else {
            continue;
        };
        let (kept, mut schema) = split_schema(param);
        schema.extend(
            kept.into_iter()
                .filter(|(k, _)| k.name == "description" || k.name.starts_with("x-")),
        );
        properties.push((key(text, name.pos), map(schema, param.pos)));
        if param.get("required").and_then(Node::as_bool) == Some(true) {
            required.push(string(text, name.pos));
        }
    }
    let mut schema = vec![
        (key("type", pos), string("object", pos)),
        (key("properties", pos), map(properties, pos)),
    ];
    let any_required = !required.is_empty();
    if any_required {
        schema.push((key("required", pos), seq(required, pos)));
    }
    let schema = map(schema, pos);
    let content = media
        .iter()
        .map(|mt| {
            (
                key(mt, pos),
                map(vec![(key("schema", pos), schema.clone())], pos),
            )
        })
        .collect();
    let mut out = vec![(key("content", pos), map(content, pos))];
    if any_required {
        out.push((
            key("required", pos),
            Node {
                value: Value::Bool(true),
                pos,
            },
        ));
    }
    Some(map(out, pos))
}

/// A 2.0 security definition as a 3.0 security scheme.
fn security_scheme(node: &Node) -> Node {
    let Some(entries) = node.as_map() else {
        return node.clone();
    };
    let kind = node.get("type").and_then(Node::as_str);
    let mut out = Vec::with_capacity(entries.len());
    match kind {
        Some("basic") => {
            for (k, v) in entries {
                if k.name == "type" {
                    out.push((k.clone(), string("http", v.pos)));
                    out.push((key("scheme", k.pos), string("basic", v.pos)));
                } else {
                    out.push((k.clone(), v.clone()));
                }
            }
        }
        Some("oauth2") => {
            let flow = node.get("flow");
            let name = match flow.and_then(Node::as_str) {
                Some("implicit") => "implicit",
                Some("password") => "password",
                Some("application") => "clientCredentials",
                Some("accessCode") => "authorizationCode",
                _ => "implicit",
            };
            let mut flow_entries = Vec::new();
            for (k, v) in entries {
                match k.name.as_str() {
                    "authorizationUrl" | "tokenUrl" | "scopes" => {
                        flow_entries.push((k.clone(), v.clone()));
                    }
                    "flow" => {}
                    _ => out.push((k.clone(), v.clone())),
                }
            }
            if !flow_entries.iter().any(|(k, _)| k.name == "scopes") {
                flow_entries.push((key("scopes", node.pos), map(Vec::new(), node.pos)));
            }
            let pos = flow.map_or(node.pos, |f| f.pos);
            out.push((
                key("flows", pos),
                map(vec![(key(name, pos), map(flow_entries, pos))], pos),
            ));
        }
        _ => return node.clone(),
    }
    map(out, node.pos)
}

/// Another file's root `definitions` move to `components/schemas`, where
/// the rewritten `$ref`s look for them.
fn rename_definitions(mut tree: Node) -> Node {
    if let Value::Map(entries) = &mut tree.value
        && !entries.iter().any(|(k, _)| k.name == "components")
        && let Some(entry) = entries.iter_mut().find(|(k, _)| k.name == "definitions")
    {
        let (k, v) = std::mem::replace(
            entry,
            (key("components", entry.0.pos), map(Vec::new(), entry.0.pos)),
        );
        let pos = k.pos;
        *entry = (
            key("components", pos),
            map(vec![(key("schemas", pos), v)], pos),
        );
    }
    tree
}

/// What applies to every node, wherever it sits: `$ref`s point at the 3.0
/// places, `x-nullable` is `nullable`, `type: file` is binary.
fn fix(node: &mut Node, refs: Refs<'_>, root: FileId) {
    match &mut node.value {
        Value::Seq(items) => {
            for item in items {
                fix(item, refs, root);
            }
        }
        Value::Map(entries) => {
            let has_nullable = entries.iter().any(|(k, _)| k.name == "nullable");
            let has_format = entries.iter().any(|(k, _)| k.name == "format");
            let mut file_at: Option<Pos> = None;
            for (k, v) in entries.iter_mut() {
                match (k.name.as_str(), &mut v.value) {
                    ("$ref", Value::String(reference)) => {
                        if let Some(new) = rewrite_ref(refs, root, v.pos.file, reference) {
                            *reference = new;
                        }
                    }
                    ("x-nullable", Value::Bool(_)) if !has_nullable => k.name = "nullable".into(),
                    ("type", Value::String(ty)) if ty == "file" => {
                        "string".clone_into(ty);
                        file_at = Some(v.pos);
                    }
                    _ => fix(v, refs, root),
                }
            }
            if let Some(pos) = file_at.filter(|_| !has_format) {
                entries.push((key("format", pos), string("binary", pos)));
            }
        }
        _ => {}
    }
}

/// `#/definitions/X` → `#/components/schemas/X` in any file; in the root
/// document also `#/parameters/X` and `#/responses/X` → `#/components/…`.
fn rewrite_ref(refs: Refs<'_>, root: FileId, from: FileId, reference: &str) -> Option<String> {
    let (file_part, fragment) = split_ref(reference);
    let moved = |prefix: &str, to: &str| {
        fragment
            .strip_prefix(prefix)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
            .map(|rest| format!("{to}{rest}"))
    };
    let fragment = moved("/definitions", "/components/schemas").or_else(|| {
        if refs.target_file(from, file_part) != Some(root) {
            return None;
        }
        moved("/parameters", "/components/parameters")
            .or_else(|| moved("/responses", "/components/responses"))
    })?;
    Some(format!("{file_part}#{fragment}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collection_formats_become_styles() {
        let tree = crate::tree::parse(
            "name: tags\nin: query\ntype: array\ncollectionFormat: multi\nitems: { type: string, collectionFormat: csv }\n",
            FileId(0),
            &crate::tree::Limits::default(),
        )
        .unwrap();
        let p = parameter(&tree);
        assert_eq!(p.get("style").and_then(Node::as_str), Some("form"));
        assert_eq!(p.get("explode").and_then(Node::as_bool), Some(true));
        let schema = p.get("schema").unwrap();
        assert_eq!(schema.get("type").and_then(Node::as_str), Some("array"));
        assert!(
            schema
                .get("items")
                .and_then(|i| i.get("collectionFormat"))
                .is_none()
        );
        assert!(p.get("type").is_none());
        // The schema sits where the type keywords were written.
        assert_eq!(schema.pos.line, 3);
    }
}
