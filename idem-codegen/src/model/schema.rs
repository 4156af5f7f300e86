//! The schema model: every named and inline JSON Schema an operation uses,
//! reduced to the shapes a generator can type.
//!
//! Named schemas (anything reached through `$ref`, in this file or another)
//! live once in [`Schemas`], addressed by [`SchemaRef`]; a reference is a
//! [`Kind::Ref`], so recursive types are plain cycles of references. Inline
//! schemas are built in place. Every node keeps its source position, so a
//! construct that cannot be typed precisely can name where it is.
//!
//! Nothing here fails: a broken `$ref` or an unknown construct becomes
//! [`Kind::Unsupported`] with its reason, which generators turn into a
//! free-form value with a comment.

use std::collections::HashMap;

use crate::load::{Document, ref_target};
use crate::source::Pos;
use crate::tree::{Node, Value};

/// Index of a named schema in [`Schemas`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SchemaRef(pub usize);

/// A schema reached by `$ref`: built once, whatever refers to it.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedSchema {
    /// The name the spec gives it: the last segment of the reference
    /// (`Charge` for `#/components/schemas/Charge`), or the file's stem.
    pub name: String,
    pub schema: Schema,
}

/// Every named schema of the document, in the order first reached.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schemas {
    pub named: Vec<NamedSchema>,
    by_pos: HashMap<Pos, SchemaRef>,
}

impl Schemas {
    pub fn get(&self, id: SchemaRef) -> Option<&NamedSchema> {
        self.named.get(id.0)
    }

    /// Follows references to the schema they name (bounded, so a cycle of
    /// bare references ends).
    pub fn resolve<'a>(&'a self, mut schema: &'a Schema) -> &'a Schema {
        for _ in 0..32 {
            match &schema.kind {
                Kind::Ref(id) => match self.get(*id) {
                    Some(named) => schema = &named.schema,
                    None => return schema,
                },
                _ => return schema,
            }
        }
        schema
    }
}

/// One schema node.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub kind: Kind,
    /// OpenAPI 3.0 `nullable: true`, a 3.1 type list with `"null"`, or a
    /// `oneOf`/`anyOf` with a `null` member.
    pub nullable: bool,
    pub title: Option<String>,
    pub description: Option<String>,
    pub default: Option<serde_json::Value>,
    /// `example`, or the first of `examples`: what the spec shows readers.
    pub example: Option<Box<serde_json::Value>>,
    pub deprecated: bool,
    pub read_only: bool,
    pub write_only: bool,
    /// The validation keywords beside the type (bounds, lengths, pattern,
    /// item and property counts), when there are any.
    pub constraints: Option<Box<Constraints>>,
    pub pos: Pos,
}

/// The JSON Schema validation keywords of one schema node, read as the
/// spec's version means them (3.0's boolean `exclusiveMinimum` beside
/// `minimum`, 3.1's numeric one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Constraints {
    pub minimum: Option<Bound>,
    pub maximum: Option<Bound>,
    pub multiple_of: Option<f64>,
    /// In characters (Unicode code points), as JSON Schema counts them.
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    /// An ECMA-262 regular expression, unanchored, and where it is.
    pub pattern: Option<(String, Pos)>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub unique_items: bool,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
}

/// A numeric bound: the value, and whether it is itself excluded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    pub value: f64,
    pub exclusive: bool,
}

/// The shape of a schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A named schema.
    Ref(SchemaRef),
    Object(Object),
    /// An object with no fixed properties whose values share one schema.
    Map(Box<Schema>),
    Array(Box<Schema>),
    String(StringFormat),
    Integer(IntegerFormat),
    Number(NumberFormat),
    Boolean,
    /// `enum` of strings, spellings as in the spec.
    StringEnum(Vec<String>),
    /// `enum` of integers.
    IntegerEnum(Vec<i64>),
    /// `const`: exactly one value.
    Const(serde_json::Value),
    /// `oneOf` / `anyOf`: one of the variants; tagged when a discriminator
    /// names the property that tells them apart.
    OneOf {
        variants: Vec<Schema>,
        discriminator: Option<Discriminator>,
    },
    /// `allOf` whose parts are not all objects, kept as its parts.
    AllOf(Vec<Schema>),
    /// `{}`, `true`, an object with no properties: any JSON value.
    Any,
    /// `type: null`.
    Null,
    /// What cannot be typed precisely, and why.
    Unsupported(String),
}

/// An object's properties, in spec order.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub properties: Vec<Property>,
    /// `additionalProperties` beside fixed properties.
    pub additional: Option<Box<Schema>>,
    /// `additionalProperties: false`: no property beyond the fixed ones.
    pub closed: bool,
}

/// One property: its name as the spec spells it.
#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    pub name: String,
    pub required: bool,
    pub schema: Schema,
}

/// A `discriminator`: the property and the value → variant mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Discriminator {
    pub property: String,
    /// Tag value and the index of the variant it selects.
    pub mapping: Vec<(String, usize)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringFormat {
    Plain,
    DateTime,
    Date,
    Uuid,
    Ipv4,
    Ipv6,
    /// Base64 text (`format: byte`).
    Byte,
    /// Raw bytes (`format: binary`).
    Binary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntegerFormat {
    Int32,
    Int64,
    Uint32,
    Uint64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberFormat {
    Float,
    Double,
}

/// How deep inline schemas may nest before the rest is taken as free-form.
const MAX_DEPTH: usize = 64;

mod combine;

/// Builds schemas from the document, naming each `$ref` target once.
///
/// A reference only registers its target; targets are built from a work
/// list ([`SchemaBuilder::finish`]), so a long chain of schemas that refer
/// to one another never deepens the stack.
pub(crate) struct SchemaBuilder<'d> {
    doc: &'d Document,
    schemas: Schemas,
    pending: Vec<SchemaRef>,
    built: Vec<bool>,
    targets: Vec<&'d Node>,
}

impl<'d> SchemaBuilder<'d> {
    pub(crate) fn new(doc: &'d Document) -> Self {
        SchemaBuilder {
            doc,
            schemas: Schemas::default(),
            pending: Vec::new(),
            built: Vec::new(),
            targets: Vec::new(),
        }
    }

    /// Builds every schema still pending and hands over the result.
    pub(crate) fn finish(mut self) -> Schemas {
        while let Some(id) = self.pending.pop() {
            self.ensure_built(id, 0);
        }
        self.schemas
    }

    pub(super) fn ensure_built(&mut self, id: SchemaRef, depth: usize) {
        if self.built.get(id.0).copied().unwrap_or(true) {
            return;
        }
        let Some(node) = self.targets.get(id.0).copied() else {
            return;
        };
        if let Some(flag) = self.built.get_mut(id.0) {
            *flag = true;
        }
        let schema = self.build_inline(node, depth);
        if let Some(slot) = self.schemas.named.get_mut(id.0) {
            slot.schema = schema;
        }
    }

    /// Every schema under `components/schemas`, so types nobody refers to
    /// are generated too.
    pub(crate) fn components(&mut self) {
        let doc = self.doc;
        let Some(schemas) = doc
            .root()
            .get("components")
            .and_then(|c| c.get("schemas"))
            .and_then(Node::as_map)
        else {
            return;
        };
        for (name, node) in schemas {
            if ref_target(node).is_some() {
                // An alias of another schema: the target gets the type.
                let _ = self.schema(node);
            } else {
                self.named(node, name.name.clone());
            }
        }
    }

    /// The schema at `node`.
    pub(crate) fn schema(&mut self, node: &'d Node) -> Schema {
        self.build(node, 0)
    }

    fn named(&mut self, target: &'d Node, name: String) -> SchemaRef {
        if let Some(id) = self.schemas.by_pos.get(&target.pos) {
            return *id;
        }
        let id = SchemaRef(self.schemas.named.len());
        self.schemas.by_pos.insert(target.pos, id);
        // A placeholder until the work list builds it.
        self.schemas.named.push(NamedSchema {
            name,
            schema: plain(Kind::Any, target.pos),
        });
        self.built.push(false);
        self.targets.push(target);
        self.pending.push(id);
        id
    }

    fn build(&mut self, node: &'d Node, depth: usize) -> Schema {
        let Some(reference) = ref_target(node) else {
            return self.build_inline(node, depth);
        };
        let name = ref_name(reference);
        let mut schema = match self.doc.resolve(node) {
            Ok(target) if ref_target(target).is_none() => {
                plain(Kind::Ref(self.named(target, name)), node.pos)
            }
            Ok(target) => plain(
                Kind::Unsupported(format!("`$ref` `{reference}` never ends")),
                target.pos,
            ),
            Err(e) => plain(Kind::Unsupported(e.to_string()), node.pos),
        };
        // 3.1 allows siblings beside `$ref`; 3.0 tools commonly write
        // `description` and `nullable` there too.
        read_annotations(node, &mut schema);
        schema
    }

    fn build_inline(&mut self, node: &'d Node, depth: usize) -> Schema {
        let pos = node.pos;
        match &node.value {
            Value::Bool(true) => return plain(Kind::Any, pos),
            Value::Bool(false) => {
                return plain(
                    Kind::Unsupported("the schema `false` admits no value".into()),
                    pos,
                );
            }
            Value::Map(_) => {}
            _ => {
                return plain(
                    Kind::Unsupported(format!("a schema cannot be {}", node.kind())),
                    pos,
                );
            }
        }
        if depth > MAX_DEPTH {
            return plain(
                Kind::Unsupported(format!("nested deeper than {MAX_DEPTH} schemas")),
                pos,
            );
        }
        let mut schema = plain(Kind::Any, pos);
        read_annotations(node, &mut schema);
        schema.kind = self.kind(node, depth, &mut schema);
        schema
    }

    /// The kind of `node`; `schema` holds its annotations so far, which an
    /// `allOf` may add to.
    fn kind(&mut self, node: &'d Node, depth: usize, schema: &mut Schema) -> Kind {
        if let Some(value) = node.get("const") {
            return Kind::Const(json(value));
        }
        if let Some(values) = node.get("enum").and_then(Node::as_seq) {
            let kind = enum_kind(values, &mut schema.nullable);
            // Values of mixed JSON types (`[2.4, 5]`, `["Group", 61]`)
            // under one declared type: a value of that type.
            let declared: Vec<&str> = types_of(node)
                .into_iter()
                .filter(|t| *t != "null")
                .collect();
            if let (Kind::Unsupported(_), [ty]) = (&kind, declared.as_slice()) {
                return self.typed(node, ty, depth);
            }
            return kind;
        }
        // A `oneOf` beside an `allOf` is one more part of the `allOf`.
        if node.get("allOf").is_none() {
            for combinator in ["oneOf", "anyOf"] {
                if let Some(parts) = node.get(combinator).and_then(Node::as_seq) {
                    return self.one_of(node, parts, depth, &mut schema.nullable);
                }
            }
        }
        if let Some(parts) = node.get("allOf").and_then(Node::as_seq) {
            return self.all_of(node, parts, depth, schema);
        }
        if node.get("not").is_some() && node.get("type").is_none() {
            return Kind::Unsupported("`not` cannot be expressed as a type".into());
        }
        let types = types_of(node);
        let mut non_null: Vec<&str> = types.iter().copied().filter(|t| *t != "null").collect();
        if non_null.len() < types.len() {
            schema.nullable = true;
        }
        if non_null.is_empty() {
            if !types.is_empty() {
                return Kind::Null;
            }
            // No type: an object by its keywords, otherwise anything.
            if node.get("properties").is_some() || node.get("additionalProperties").is_some() {
                non_null.push("object");
            } else if node.get("items").is_some() {
                non_null.push("array");
            } else {
                return Kind::Any;
            }
        }
        if non_null.len() > 1 {
            return self.several_types(node, &non_null, depth, schema);
        }
        self.typed(node, non_null.first().copied().unwrap_or("object"), depth)
    }

    /// The kind of `node` read as a value of JSON type `ty`.
    fn typed(&mut self, node: &'d Node, ty: &str, depth: usize) -> Kind {
        match ty {
            "string" => Kind::String(string_format(node)),
            "integer" => Kind::Integer(integer_format(node)),
            "number" => Kind::Number(match format_of(node) {
                Some("float") => NumberFormat::Float,
                _ => NumberFormat::Double,
            }),
            "boolean" => Kind::Boolean,
            "array" => match node.get("items") {
                Some(items) => Kind::Array(Box::new(self.build(items, depth + 1))),
                None => Kind::Array(Box::new(plain(Kind::Any, node.pos))),
            },
            "object" => self.object(node, depth),
            other => Kind::Unsupported(format!("unknown type `{other}`")),
        }
    }

    fn object(&mut self, node: &'d Node, depth: usize) -> Kind {
        let required: Vec<&str> = node
            .get("required")
            .and_then(Node::as_seq)
            .map(|r| r.iter().filter_map(Node::as_str).collect())
            .unwrap_or_default();
        let mut properties = Vec::new();
        for (name, prop) in node.get("properties").and_then(Node::as_map).unwrap_or(&[]) {
            properties.push(Property {
                name: name.name.clone(),
                required: required.contains(&name.name.as_str()),
                schema: self.build(prop, depth + 1),
            });
        }
        let closed = matches!(
            node.get("additionalProperties"),
            Some(Node {
                value: Value::Bool(false),
                ..
            })
        );
        let additional = match node.get("additionalProperties") {
            None
            | Some(Node {
                value: Value::Bool(false),
                ..
            }) => None,
            Some(extra) => Some(Box::new(self.build(extra, depth + 1))),
        };
        match (properties.is_empty(), additional) {
            (true, Some(values)) => Kind::Map(values),
            // `properties: {}` with `additionalProperties: false`: only `{}`.
            (true, None) if closed => Kind::Object(Object {
                properties,
                additional: None,
                closed,
            }),
            (true, None) => Kind::Any,
            (false, additional) => Kind::Object(Object {
                properties,
                additional,
                closed,
            }),
        }
    }

    fn one_of(
        &mut self,
        node: &'d Node,
        parts: &'d [Node],
        depth: usize,
        nullable: &mut bool,
    ) -> Kind {
        let mut variants = Vec::new();
        for part in parts {
            let variant = self.build(part, depth + 1);
            if variant.kind == Kind::Null {
                *nullable = true;
            } else {
                variants.push(variant);
            }
        }
        // `oneOf: [X, null]` is an optional X.
        if variants.len() == 1 && node.get("discriminator").is_none() {
            let only = variants.remove(0);
            *nullable |= only.nullable;
            return only.kind;
        }
        if variants.is_empty() {
            return Kind::Null;
        }
        let discriminator = node.get("discriminator").and_then(|d| {
            let property = d.get("propertyName").and_then(Node::as_str)?.to_owned();
            Some(self.discriminator(d, property, &variants))
        });
        Kind::OneOf {
            variants,
            discriminator,
        }
    }

    /// The tag value of each variant: the explicit mapping first, else the
    /// name of the schema the variant refers to (OpenAPI's implicit mapping).
    fn discriminator(&self, node: &Node, property: String, variants: &[Schema]) -> Discriminator {
        let mut mapping = Vec::new();
        for (value, target) in node.get("mapping").and_then(Node::as_map).unwrap_or(&[]) {
            let Some(reference) = target.as_str() else {
                continue;
            };
            let name = ref_name(reference);
            let found = variants.iter().position(|v| match v.kind {
                Kind::Ref(id) => self.schemas.get(id).is_some_and(|n| n.name == name),
                _ => false,
            });
            if let Some(index) = found {
                mapping.push((value.name.clone(), index));
            }
        }
        for (index, variant) in variants.iter().enumerate() {
            if mapping.iter().any(|(_, i)| *i == index) {
                continue;
            }
            if let Kind::Ref(id) = variant.kind
                && let Some(named) = self.schemas.get(id)
            {
                mapping.push((named.name.clone(), index));
            }
        }
        Discriminator { property, mapping }
    }

    fn all_of(
        &mut self,
        node: &'d Node,
        parts: &'d [Node],
        depth: usize,
        schema: &mut Schema,
    ) -> Kind {
        let mut built: Vec<Schema> = parts.iter().map(|p| self.build(p, depth + 1)).collect();
        for combinator in ["oneOf", "anyOf"] {
            if let Some(variants) = node.get(combinator).and_then(Node::as_seq) {
                let mut part = plain(Kind::Any, node.pos);
                part.kind = self.one_of(node, variants, depth, &mut part.nullable);
                built.push(part);
                break;
            }
        }
        // Keywords beside `allOf` are one more part.
        if node.get("properties").is_some() {
            let mut own = plain(Kind::Any, node.pos);
            own.kind = self.object(node, depth);
            built.push(own);
        }
        // Parts that only annotate (the OpenAPI 3.0 way to describe a
        // `$ref`) or only constrain add to the schema, not to its type.
        let typed: Vec<bool> = built.iter().map(|p| p.kind != Kind::Any).collect();
        if typed.iter().filter(|t| **t).count() <= 1 {
            let mut only = plain(Kind::Any, node.pos);
            for (part, typed) in built.into_iter().zip(typed) {
                if typed {
                    only = part;
                } else {
                    annotate(schema, part);
                }
            }
            annotate_from(schema, &only);
            return only.kind;
        }
        // Merging reads the parts' properties, so the schemas they refer
        // to are built now (allOf chains are short; the depth bounds them).
        for part in &built {
            if let Kind::Ref(id) = part.kind {
                self.ensure_built(id, depth + 1);
            }
        }
        // One scalar type said several times (a reference to a string and
        // `type: string` with a bound): that type, with every part's bounds.
        let scalar = |kind: &Kind| {
            matches!(
                kind,
                Kind::String(_) | Kind::Integer(_) | Kind::Number(_) | Kind::Boolean
            )
        };
        let kinds: Vec<&Kind> = built
            .iter()
            .filter(|p| p.kind != Kind::Any)
            .map(|p| &self.schemas.resolve(p).kind)
            .collect();
        if kinds.iter().all(|k| scalar(k))
            && kinds
                .windows(2)
                .all(|w| std::mem::discriminant(w[0]) == std::mem::discriminant(w[1]))
        {
            let chosen = built
                .iter()
                .position(|p| matches!(p.kind, Kind::Ref(_)))
                .or_else(|| built.iter().position(|p| p.kind != Kind::Any))
                .unwrap_or(0);
            let only = built.swap_remove(chosen);
            for part in built {
                annotate(schema, part);
            }
            annotate_from(schema, &only);
            return only.kind;
        }
        if let Some(object) = self.merge(&built) {
            return Kind::Object(object);
        }
        self.distribute(&built, depth).unwrap_or(Kind::AllOf(built))
    }

    /// One object from parts that are all objects (through references),
    /// or `None`.
    pub(super) fn merge(&self, parts: &[Schema]) -> Option<Object> {
        // `additionalProperties: false` in one part of an `allOf` would
        // forbid the other parts' properties; the merge is left open.
        let mut merged = Object {
            properties: Vec::new(),
            additional: None,
            closed: false,
        };
        for part in parts {
            let resolved = self.schemas.resolve(part);
            let object = match &resolved.kind {
                Kind::Object(object) => object,
                // Bare `{}` or a description-only part adds nothing.
                Kind::Any => continue,
                // Only `additionalProperties`: the other parts' fields,
                // and these beside them (custom fields).
                Kind::Map(values) => {
                    if merged.additional.is_none() {
                        merged.additional = Some(values.clone());
                    }
                    continue;
                }
                _ => return None,
            };
            for property in &object.properties {
                match merged
                    .properties
                    .iter_mut()
                    .find(|p| p.name == property.name)
                {
                    Some(existing) => existing.required |= property.required,
                    None => merged.properties.push(property.clone()),
                }
            }
            if merged.additional.is_none() {
                merged.additional.clone_from(&object.additional);
            }
        }
        (!merged.properties.is_empty()).then_some(merged)
    }
}

pub(super) fn plain(kind: Kind, pos: Pos) -> Schema {
    Schema {
        kind,
        nullable: false,
        title: None,
        description: None,
        default: None,
        example: None,
        deprecated: false,
        read_only: false,
        write_only: false,
        constraints: None,
        pos,
    }
}

/// Folds an annotation-only `allOf` part into `schema`: its text where the
/// schema has none, its flags, its constraints beside the schema's own.
fn annotate(schema: &mut Schema, part: Schema) {
    annotate_from(schema, &part);
    if let Some(theirs) = part.constraints {
        schema.constraints = Some(match schema.constraints.take() {
            Some(mine) => Box::new(mine.or(*theirs)),
            None => theirs,
        });
    }
}

/// The title, description, default and flags of `part`, where `schema`
/// does not give its own.
fn annotate_from(schema: &mut Schema, part: &Schema) {
    if schema.title.is_none() {
        schema.title.clone_from(&part.title);
    }
    if schema.description.is_none() {
        schema.description.clone_from(&part.description);
    }
    if schema.default.is_none() {
        schema.default.clone_from(&part.default);
    }
    schema.nullable |= part.nullable;
    schema.deprecated |= part.deprecated;
    schema.read_only |= part.read_only;
    schema.write_only |= part.write_only;
}

impl Constraints {
    /// Each keyword of `self`, else of `other`: both hold of an `allOf`.
    fn or(self, other: Constraints) -> Constraints {
        Constraints {
            minimum: self.minimum.or(other.minimum),
            maximum: self.maximum.or(other.maximum),
            multiple_of: self.multiple_of.or(other.multiple_of),
            min_length: self.min_length.or(other.min_length),
            max_length: self.max_length.or(other.max_length),
            pattern: self.pattern.or(other.pattern),
            min_items: self.min_items.or(other.min_items),
            max_items: self.max_items.or(other.max_items),
            unique_items: self.unique_items || other.unique_items,
            min_properties: self.min_properties.or(other.min_properties),
            max_properties: self.max_properties.or(other.max_properties),
        }
    }
}

fn read_annotations(node: &Node, schema: &mut Schema) {
    let text = |name| node.get(name).and_then(Node::as_str).map(str::to_owned);
    if let Some(title) = text("title") {
        schema.title = Some(title);
    }
    if let Some(description) = text("description") {
        schema.description = Some(description);
    }
    if let Some(default) = node.get("default") {
        schema.default = Some(json(default));
    }
    if let Some(example) = node.get("example").or_else(|| {
        node.get("examples")
            .and_then(Node::as_seq)
            .and_then(|s| s.first())
    }) {
        schema.example = Some(Box::new(json(example)));
    }
    let flag = |name| node.get(name).and_then(Node::as_bool) == Some(true);
    schema.nullable |= flag("nullable") || flag("x-nullable");
    schema.deprecated |= flag("deprecated");
    schema.read_only |= flag("readOnly");
    schema.write_only |= flag("writeOnly");
    if let Some(constraints) = constraints(node) {
        schema.constraints = Some(Box::new(constraints));
    }
}

/// The validation keywords of `node`, or `None` when it has none.
fn constraints(node: &Node) -> Option<Constraints> {
    let number = |name: &str| node.get(name).and_then(number_of);
    let count = |name: &str| {
        node.get(name)
            .and_then(number_of)
            .filter(|n| *n >= 0.0 && n.fract() == 0.0)
            .map(|n| n as u64)
    };
    // 3.0: `exclusiveMinimum: true` beside `minimum`; 3.1: the bound itself.
    let bound = |inclusive: &str, exclusive: &str| {
        let flag = node.get(exclusive).and_then(Node::as_bool);
        let open = node.get(exclusive).and_then(number_of);
        let closed = number(inclusive).map(|value| Bound {
            value,
            exclusive: flag == Some(true),
        });
        match (closed, open) {
            (Some(c), Some(o)) => Some(tighter(
                c,
                Bound {
                    value: o,
                    exclusive: true,
                },
                inclusive,
            )),
            (c, None) => c,
            (None, Some(o)) => Some(Bound {
                value: o,
                exclusive: true,
            }),
        }
    };
    let found = Constraints {
        minimum: bound("minimum", "exclusiveMinimum"),
        maximum: bound("maximum", "exclusiveMaximum"),
        multiple_of: number("multipleOf").filter(|m| *m > 0.0),
        min_length: count("minLength").filter(|n| *n > 0),
        max_length: count("maxLength"),
        pattern: node
            .get("pattern")
            .and_then(|p| Some((p.as_str()?.to_owned(), p.pos))),
        min_items: count("minItems").filter(|n| *n > 0),
        max_items: count("maxItems"),
        unique_items: node.get("uniqueItems").and_then(Node::as_bool) == Some(true),
        min_properties: count("minProperties").filter(|n| *n > 0),
        max_properties: count("maxProperties"),
    };
    (found != Constraints::default()).then_some(found)
}

/// Of an inclusive and an exclusive bound on one side, the one that admits
/// less.
fn tighter(closed: Bound, open: Bound, side: &str) -> Bound {
    let lower = side == "minimum";
    let open_wins = if lower {
        open.value >= closed.value
    } else {
        open.value <= closed.value
    };
    if open_wins { open } else { closed }
}

fn number_of(node: &Node) -> Option<f64> {
    match &node.value {
        Value::Number(n) => n.parse().ok().filter(|f: &f64| f.is_finite()),
        _ => None,
    }
}

/// The last segment of a reference, or its file's stem.
pub(crate) fn ref_name(reference: &str) -> String {
    let (file, fragment) = reference.split_once('#').unwrap_or((reference, ""));
    let segment = fragment
        .rsplit('/')
        .find(|s| !s.is_empty())
        .map(|s| s.replace("~1", "/").replace("~0", "~"));
    match segment {
        Some(segment) => segment,
        None => {
            let stem = file.rsplit('/').next().unwrap_or(file);
            stem.split('.').next().unwrap_or(stem).to_owned()
        }
    }
}

fn types_of(node: &Node) -> Vec<&str> {
    match node.get("type") {
        Some(Node {
            value: Value::String(t),
            ..
        }) => vec![t.as_str()],
        Some(Node {
            value: Value::Seq(items),
            ..
        }) => items.iter().filter_map(Node::as_str).collect(),
        _ => Vec::new(),
    }
}

fn format_of(node: &Node) -> Option<&str> {
    node.get("format").and_then(Node::as_str)
}

fn string_format(node: &Node) -> StringFormat {
    match format_of(node) {
        Some("date-time") => StringFormat::DateTime,
        Some("date") => StringFormat::Date,
        Some("uuid") => StringFormat::Uuid,
        Some("ipv4") => StringFormat::Ipv4,
        Some("ipv6") => StringFormat::Ipv6,
        Some("byte") => StringFormat::Byte,
        Some("binary") => StringFormat::Binary,
        _ => StringFormat::Plain,
    }
}

fn integer_format(node: &Node) -> IntegerFormat {
    match format_of(node) {
        Some("int32") => IntegerFormat::Int32,
        Some("uint32") => IntegerFormat::Uint32,
        Some("uint64") => IntegerFormat::Uint64,
        _ => IntegerFormat::Int64,
    }
}

fn enum_kind(values: &[Node], nullable: &mut bool) -> Kind {
    let mut strings = Vec::new();
    let mut integers = Vec::new();
    let mut other = false;
    for value in values {
        match &value.value {
            Value::Null => *nullable = true,
            Value::String(s) => strings.push(s.clone()),
            Value::Number(n) => match n.parse::<i64>() {
                Ok(i) => integers.push(i),
                Err(_) => other = true,
            },
            // YAML reads `yes`/`no` and `true` as booleans; as enum values
            // in a string enum they mean their text.
            Value::Bool(b) => strings.push(b.to_string()),
            _ => other = true,
        }
    }
    match (strings.is_empty(), integers.is_empty(), other) {
        (false, true, false) => {
            dedup_keep_order(&mut strings);
            Kind::StringEnum(strings)
        }
        (true, false, false) => {
            integers.dedup();
            Kind::IntegerEnum(integers)
        }
        (true, true, false) => Kind::Null,
        _ => Kind::Unsupported("an enum mixing value types".into()),
    }
}

fn dedup_keep_order(values: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    values.retain(|v| seen.insert(v.clone()));
}

/// A tree node as JSON.
pub(crate) fn json(node: &Node) -> serde_json::Value {
    use serde_json::Value as J;
    match &node.value {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Number(n) => serde_json::from_str(n).unwrap_or_else(|_| J::String(n.clone())),
        Value::String(s) => J::String(s.clone()),
        Value::Seq(items) => J::Array(items.iter().map(json).collect()),
        Value::Map(entries) => J::Object(
            entries
                .iter()
                .map(|(k, v)| (k.name.clone(), json(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_names() {
        assert_eq!(ref_name("#/components/schemas/Charge"), "Charge");
        assert_eq!(ref_name("models/pet.yaml"), "pet");
        assert_eq!(ref_name("common.yaml#/Error"), "Error");
        assert_eq!(ref_name("#/components/schemas/a~1b"), "a/b");
    }
}
