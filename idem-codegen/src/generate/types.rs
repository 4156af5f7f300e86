//! The type emitter: schemas → Rust type definitions → tokens.
//!
//! Two passes. First every schema an API uses becomes a [`TypeDef`] (named
//! schemas keep their names; inline ones are named after where they sit,
//! `ChargeShipping` for `Charge.shipping`), with field and variant types as
//! [`Ty`]. Then the definitions are looked at as a graph: a field that
//! reaches its own type without passing through a `Vec` or a map is boxed,
//! and a type alias that refers to itself becomes a newtype (Rust has no
//! recursive aliases). Only then are tokens written, so no emitted type can
//! have infinite size.

use std::collections::BTreeMap;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::naming::{self, Namer};
use crate::model::Model;
use crate::model::schema::{
    Constraints, IntegerFormat, Kind, NumberFormat, Object, Schema, SchemaRef, StringFormat,
};
use crate::source::Pos;

/// A Rust type as the emitter composes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    /// One of the [`TypeSpace`]'s definitions.
    Def(usize),
    String,
    Bool,
    I32,
    I64,
    U32,
    U64,
    F32,
    F64,
    /// `serde_json::Value`: free-form, or not typed precisely.
    Value,
    /// Raw bytes.
    Bytes,
    /// `format: date-time`: a UTC timestamp.
    DateTime,
    /// `format: date`.
    Date,
    /// `format: uuid`.
    Uuid,
    /// `format: ipv4`.
    Ipv4,
    /// `format: ipv6`.
    Ipv6,
    /// JSON `null`.
    Unit,
    Vec(Box<Ty>),
    Map(Box<Ty>),
    Option(Box<Ty>),
    Boxed(Box<Ty>),
}

/// One emitted type.
#[derive(Debug, Clone)]
pub(crate) struct TypeDef {
    pub(crate) name: String,
    pub(crate) doc: String,
    pub(crate) deprecated: bool,
    pub(crate) body: Body,
    /// The keywords of the schema itself: for an alias, what every use
    /// checks; for a struct, its property counts.
    pub(crate) checks: Checks,
}

/// The validation keywords a value of some [`Ty`] is checked against, and
/// those of its items or map values.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Checks {
    pub(crate) constraints: Option<Constraints>,
    /// `const`, as JSON.
    pub(crate) constant: Option<serde_json::Value>,
    pub(crate) items: Option<Box<Checks>>,
    pub(crate) values: Option<Box<Checks>>,
}

impl Checks {
    fn is_empty(&self) -> bool {
        self.constraints.is_none()
            && self.constant.is_none()
            && self.items.is_none()
            && self.values.is_none()
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// Reserved while a named schema waits to be built.
    Pending,
    Struct {
        fields: Vec<Field>,
        /// `additionalProperties` beside the fixed properties.
        extra: Option<Ty>,
        /// `additionalProperties: false`.
        closed: bool,
    },
    Enum(Vec<(String, String)>),
    IntegerEnum(Vec<i64>),
    OneOf {
        variants: Vec<Variant>,
        /// The discriminator property, when tagged.
        tag: Option<String>,
    },
    Alias(Ty),
    Newtype(Ty),
}

#[derive(Debug, Clone)]
pub(crate) struct Field {
    pub(crate) ident: String,
    pub(crate) wire: String,
    pub(crate) ty: Ty,
    /// Absent from the wire is allowed (`Option`, skipped when `None`).
    pub(crate) optional: bool,
    /// `null` is a value of its schema.
    pub(crate) nullable: bool,
    pub(crate) checks: Checks,
    pub(crate) doc: String,
    pub(crate) deprecated: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Variant {
    pub(crate) ident: String,
    pub(crate) ty: Ty,
    /// Discriminator values selecting this variant.
    pub(crate) tags: Vec<String>,
    pub(crate) checks: Checks,
}

/// Every type of one generated API.
pub(crate) struct TypeSpace<'m> {
    model: &'m Model,
    pub(crate) defs: Vec<TypeDef>,
    pub(crate) namer: Namer,
    named: Vec<Option<usize>>,
    pending: Vec<(SchemaRef, usize)>,
    /// Inline schemas already given a type, by the address of their node in
    /// the model (which outlives the space): the client and the server ask
    /// for the same body and get the same type.
    inline: std::collections::HashMap<usize, usize>,
    /// Which definitions get a `Validate` implementation (known once
    /// [`TypeSpace::finish`] ran).
    validated: Vec<bool>,
    /// What generation could not honour exactly, each with its location,
    /// once (a `pattern` that is not ECMA-262).
    pub(crate) notes: Vec<String>,
    noted: std::collections::HashSet<Pos>,
    /// Checks of operation inputs, written once every type is known.
    deferred: Vec<Deferred>,
    /// The definitions a request can carry (reached from an operation's
    /// inputs): only these are validated, and decoded strictly.
    in_requests: Vec<bool>,
    /// Whether a server is generated: strict decoding matters only there.
    pub(crate) server: bool,
    /// Resource groups as cargo features, when the client is gated by them.
    pub(crate) features: Option<super::features::Features>,
}

/// One value an operation checks: where it is reported, its type, its
/// keywords and the expression (of type `&T`) reading it.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    pub(crate) path: String,
    pub(crate) ty: Ty,
    pub(crate) checks: Checks,
    pub(crate) value: TokenStream,
}

/// The checks of one operation's inputs: the sites, and what to do with the
/// finished validator `v` (refuse with `400`, or keep the request unsent).
#[derive(Debug, Clone)]
struct Deferred {
    sites: Vec<Site>,
    finish: TokenStream,
}

const DEFERRED: &str = "__idem_deferred_check_";

/// The attribute that marks a string enum for [`wrap_macros`].
pub(crate) const STRING_ENUM: &str = "__idem_string_enum";

/// The attributes that mark an object struct for [`wrap_macros`].
pub(crate) const OBJECT: &str = "__idem_object";
pub(crate) const CLOSED_OBJECT: &str = "__idem_closed_object";

/// The attribute that marks an untagged enum for [`wrap_macros`].
pub(crate) const ONE_OF: &str = "__idem_one_of";

/// Formatted `code` with each enum marked `#[__idem_string_enum]` wrapped in
/// `::idem_runtime::string_enum! { … }`, and each struct marked
/// `#[__idem_object]` (`#[__idem_closed_object]`) in `object! { … }`
/// (`closed_object!`): formatted as an item first, so its doc comments,
/// variants and fields read as a person would write them.
pub(crate) fn wrap_macros(code: &str) -> String {
    let markers = [
        (format!("#[{STRING_ENUM}]"), "string_enum"),
        (format!("#[{OBJECT}]"), "object"),
        (format!("#[{CLOSED_OBJECT}]"), "closed_object"),
        (format!("#[{ONE_OF}]"), "one_of"),
    ];
    let mut out = String::with_capacity(code.len() + code.len() / 16);
    let mut open: Option<String> = None;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if let Some((_, name)) = markers.iter().find(|(m, _)| trimmed.trim_end() == m) {
            out.push_str(indent);
            out.push_str(&format!("::idem_runtime::{name}! {{\n"));
            open = Some(indent.to_owned());
            continue;
        }
        match &open {
            Some(outer) => {
                if line.trim_end().is_empty() {
                    out.push_str(line);
                } else {
                    out.push_str("    ");
                    out.push_str(line);
                }
                // The item's closing brace, or an item with no fields,
                // which prettyplease writes on one line (`pub struct A {}`).
                let end = trimmed.trim_end();
                if indent == outer && (end == "}" || end.ends_with(" {}")) {
                    out.push_str(outer);
                    out.push_str("}\n");
                    open = None;
                }
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Names the generated code itself defines next to the API's types.
pub(crate) const RESERVED_TYPES: &[&str] = &["Client", "Error", "Result", "Api"];

impl<'m> TypeSpace<'m> {
    /// The name of a component schema. One that would take a name the
    /// generated code defines (`Error`, `Client`) is called after what it
    /// is, the API's (`ApiError`), and numbered only when even that is
    /// taken.
    fn named_type(&mut self, raw: &str) -> String {
        let name = naming::camel(raw, "Type");
        if RESERVED_TYPES.contains(&name.as_str()) {
            let api = format!("Api{name}");
            let schema = format!("{name}Schema");
            let candidates = if name == "Api" {
                [schema, api]
            } else {
                [api, schema]
            };
            for candidate in candidates {
                if self.namer.is_free(&candidate)
                    && !self
                        .model
                        .schemas
                        .named
                        .iter()
                        .any(|n| naming::camel(&n.name, "Type") == candidate)
                {
                    return self.namer.unique(&candidate);
                }
            }
        }
        self.namer.unique(&name)
    }

    /// The model the types come from.
    pub(crate) fn model(&self) -> &'m Model {
        self.model
    }

    pub(crate) fn new(model: &'m Model) -> Self {
        let mut space = TypeSpace {
            model,
            defs: Vec::new(),
            namer: Namer::reserving(RESERVED_TYPES),
            named: vec![None; model.schemas.named.len()],
            pending: Vec::new(),
            inline: std::collections::HashMap::new(),
            validated: Vec::new(),
            notes: Vec::new(),
            noted: std::collections::HashSet::new(),
            deferred: Vec::new(),
            in_requests: Vec::new(),
            server: false,
            features: None,
        };
        // Named schemas claim their names before any inline type does: all
        // of them for the whole API, those the operations reach for a part.
        let reached = model
            .narrowed
            .then(|| crate::model::select::reached_schemas(model));
        for index in 0..model.schemas.named.len() {
            if reached.as_ref().is_none_or(|r| r.get(index) == Some(&true)) {
                space.named_def(SchemaRef(index));
            }
        }
        space
    }

    /// Builds every definition still pending.
    pub(crate) fn finish(&mut self) {
        while let Some((id, def)) = self.pending.pop() {
            let Some(named) = self.model.schemas.get(id) else {
                continue;
            };
            let name = self
                .defs
                .get(def)
                .map(|d| d.name.clone())
                .unwrap_or_default();
            let built = self.define(&named.schema, &name);
            if let Some(slot) = self.defs.get_mut(def) {
                *slot = built;
            }
        }
        self.share_duplicates();
        self.settle();
        self.mark_validated();
        if let Some(mut features) = self.features.take() {
            let defs = &self.defs;
            features.settle(defs, |index| {
                let mut out = Vec::new();
                if let Some(def) = defs.get(index) {
                    body_reaches(&def.body, true, &mut out);
                }
                out
            });
            self.features = Some(features);
        }
    }

    fn named_def(&mut self, id: SchemaRef) -> usize {
        if let Some(Some(def)) = self.named.get(id.0) {
            return *def;
        }
        let raw = self
            .model
            .schemas
            .get(id)
            .map_or("Type", |n| n.name.as_str());
        let name = self.named_type(raw);
        let def = self.defs.len();
        self.defs.push(TypeDef {
            name,
            doc: String::new(),
            deprecated: false,
            body: Body::Pending,
            checks: Checks::default(),
        });
        if let Some(slot) = self.named.get_mut(id.0) {
            *slot = Some(def);
        }
        self.pending.push((id, def));
        def
    }

    /// The Rust type of `schema`, naming any inline type after `context`.
    pub(crate) fn ty(&mut self, schema: &Schema, context: &str) -> Ty {
        let ty = self.bare(schema, context);
        // A named schema that is itself nullable makes every use optional.
        let nullable = schema.nullable
            || matches!(&schema.kind, Kind::Ref(id)
                if self.model.schemas.get(*id).is_some_and(|n| n.schema.nullable));
        if nullable && !matches!(ty, Ty::Option(_) | Ty::Unit | Ty::Value) {
            Ty::Option(Box::new(ty))
        } else {
            ty
        }
    }

    fn bare(&mut self, schema: &Schema, context: &str) -> Ty {
        match &schema.kind {
            Kind::Ref(id) => Ty::Def(self.named_def(*id)),
            Kind::String(format) => match format {
                StringFormat::Binary => Ty::Bytes,
                StringFormat::DateTime => Ty::DateTime,
                StringFormat::Date => Ty::Date,
                StringFormat::Uuid => Ty::Uuid,
                StringFormat::Ipv4 => Ty::Ipv4,
                StringFormat::Ipv6 => Ty::Ipv6,
                StringFormat::Plain | StringFormat::Byte => Ty::String,
            },
            Kind::Integer(format) => match format {
                IntegerFormat::Int32 => Ty::I32,
                IntegerFormat::Int64 => Ty::I64,
                IntegerFormat::Uint32 => Ty::U32,
                IntegerFormat::Uint64 => Ty::U64,
            },
            Kind::Number(NumberFormat::Float) => Ty::F32,
            Kind::Number(NumberFormat::Double) => Ty::F64,
            Kind::Boolean => Ty::Bool,
            Kind::Array(items) => Ty::Vec(Box::new(self.ty(items, &format!("{context}Item")))),
            Kind::Map(values) => Ty::Map(Box::new(self.ty(values, &format!("{context}Value")))),
            Kind::Const(value) => match value {
                serde_json::Value::String(_) => Ty::String,
                serde_json::Value::Bool(_) => Ty::Bool,
                serde_json::Value::Number(n) if n.is_i64() => Ty::I64,
                serde_json::Value::Number(_) => Ty::F64,
                _ => Ty::Value,
            },
            Kind::Any | Kind::AllOf(_) | Kind::Unsupported(_) => Ty::Value,
            Kind::Null => Ty::Unit,
            Kind::Object(_) | Kind::StringEnum(_) | Kind::IntegerEnum(_) | Kind::OneOf { .. } => {
                let address = std::ptr::from_ref(schema) as usize;
                if let Some(index) = self.inline.get(&address) {
                    return Ty::Def(*index);
                }
                let name = self.namer.unique(&naming::camel(context, "Type"));
                // Reserved first, so a type that refers to itself finds it.
                let index = self.defs.len();
                self.defs.push(TypeDef {
                    name: name.clone(),
                    doc: String::new(),
                    deprecated: false,
                    body: Body::Pending,
                    checks: Checks::default(),
                });
                self.inline.insert(address, index);
                let def = self.define(schema, &name);
                if let Some(slot) = self.defs.get_mut(index) {
                    *slot = def;
                }
                Ty::Def(index)
            }
        }
    }

    /// The definition of `schema` under `name`.
    fn define(&mut self, schema: &Schema, name: &str) -> TypeDef {
        let body = match &schema.kind {
            Kind::Object(object) => self.object(object, name),
            Kind::StringEnum(values) => {
                let mut namer = Namer::default();
                Body::Enum(
                    values
                        .iter()
                        .map(|v| (namer.unique(&naming::camel(v, "Empty")), v.clone()))
                        .collect(),
                )
            }
            Kind::IntegerEnum(values) => Body::IntegerEnum(values.clone()),
            Kind::OneOf {
                variants,
                discriminator,
            } => {
                let mut namer = Namer::default();
                let mut out = Vec::with_capacity(variants.len());
                // A one-value property names a variant only where it tells
                // the variants apart (`state: creating`), not where they all
                // share it (`object: event`).
                let marks: Vec<Option<String>> = variants
                    .iter()
                    .map(|v| self.distinguishing_value(v))
                    .collect();
                for (index, variant) in variants.iter().enumerate() {
                    let tags: Vec<String> = discriminator
                        .iter()
                        .flat_map(|d| d.mapping.iter())
                        .filter(|(_, i)| *i == index)
                        .map(|(value, _)| value.clone())
                        .collect();
                    let mark = marks[index]
                        .as_ref()
                        .filter(|m| marks.iter().filter(|o| o.as_ref() == Some(m)).count() == 1)
                        .map(|m| naming::camel(m, ""))
                        .filter(|m| !m.is_empty() && variant.title.is_none());
                    let base = match (tags.first(), mark) {
                        (Some(tag), _) => naming::camel(tag, "Variant"),
                        (None, Some(mark)) => mark,
                        (None, None) => self.variant_name(variant),
                    };
                    let ident = namer.unique(&base);
                    let ty = self.ty(variant, &format!("{name}{ident}"));
                    let checks = self.checks(variant);
                    out.push(Variant {
                        ident,
                        ty,
                        tags,
                        checks,
                    });
                }
                Body::OneOf {
                    variants: out,
                    tag: discriminator.as_ref().map(|d| d.property.clone()),
                }
            }
            // The alias is of the non-null type: uses of a nullable named
            // schema are made optional where they are used (see `ty`).
            _ => Body::Alias(self.bare(schema, &format!("{name}Inner"))),
        };
        let checks = self.checks(schema);
        TypeDef {
            name: name.to_owned(),
            doc: self.doc(schema),
            deprecated: schema.deprecated,
            body,
            checks,
        }
    }

    /// The keywords `schema` puts on its value (not those of the named
    /// schemas it refers to: their definitions carry them).
    pub(crate) fn checks(&mut self, schema: &Schema) -> Checks {
        let mut constraints = schema.constraints.as_deref().cloned();
        if let Some(c) = constraints.as_mut()
            && let Some((pattern, pos)) = c.pattern.clone()
            && idem_runtime::validate::compile(&pattern).is_none()
        {
            c.pattern = None;
            if self.noted.insert(pos) {
                let at = self.location(pos);
                self.notes.push(format!(
                    "{at}: the pattern `{pattern}` is not an ECMA-262 regular expression; \
                     values are not checked against it"
                ));
            }
        }
        let constant = match &schema.kind {
            Kind::Const(value) => Some(value.clone()),
            _ => None,
        };
        let nested = |checks: Checks| (!checks.is_empty()).then(|| Box::new(checks));
        let (items, values) = match &schema.kind {
            Kind::Array(items) => (nested(self.checks(items)), None),
            Kind::Map(values) => (None, nested(self.checks(values))),
            _ => (None, None),
        };
        Checks {
            constraints: constraints.filter(|c| *c != Constraints::default()),
            constant,
            items,
            values,
        }
    }

    fn variant_name(&self, variant: &Schema) -> String {
        match &variant.kind {
            Kind::Ref(id) => self.model.schemas.get(*id).map_or_else(
                || "Variant".to_owned(),
                |n| naming::camel(&n.name, "Variant"),
            ),
            Kind::String(_) | Kind::StringEnum(_) => "String".to_owned(),
            Kind::Integer(_) | Kind::IntegerEnum(_) => "Integer".to_owned(),
            Kind::Number(_) => "Number".to_owned(),
            Kind::Boolean => "Boolean".to_owned(),
            Kind::Array(_) => "Array".to_owned(),
            Kind::Map(_) => "Map".to_owned(),
            _ => variant
                .title
                .as_deref()
                .map_or_else(|| "Object".to_owned(), |t| naming::camel(t, "Object")),
        }
    }

    /// The one string value that marks `variant`, when there is one (a
    /// one-value enum, a `const`, or a required property holding one): a
    /// variant it tells apart is named after it, `Creating` rather than
    /// `Object3`.
    fn distinguishing_value(&self, variant: &Schema) -> Option<String> {
        let single = |schema: &Schema| match &self.model.schemas.resolve(schema).kind {
            Kind::StringEnum(values) if values.len() == 1 => values.first().cloned(),
            Kind::Const(serde_json::Value::String(value)) => Some(value.clone()),
            _ => None,
        };
        match &variant.kind {
            Kind::StringEnum(_) | Kind::Const(_) => single(variant),
            Kind::Object(object) => object
                .properties
                .iter()
                .filter(|p| p.required)
                .find_map(|p| single(&p.schema)),
            _ => None,
        }
    }

    fn object(&mut self, object: &Object, name: &str) -> Body {
        let mut namer = Namer::default();
        let mut fields = Vec::with_capacity(object.properties.len());
        for property in &object.properties {
            let ident = namer.unique(&naming::snake(&property.name, "value"));
            let context = format!("{name}{}", naming::camel(&property.name, "Value"));
            let ty = self.ty(&property.schema, &context);
            let nullable = matches!(ty, Ty::Option(_) | Ty::Value | Ty::Unit);
            fields.push(Field {
                ident,
                wire: property.name.clone(),
                optional: !property.required || matches!(ty, Ty::Option(_)),
                nullable,
                ty: match ty {
                    Ty::Option(inner) => *inner,
                    other => other,
                },
                checks: self.checks(&property.schema),
                doc: self.doc(&property.schema),
                deprecated: property.schema.deprecated,
            });
        }
        let extra = object
            .additional
            .as_ref()
            .map(|values| self.ty(values, &format!("{name}Extra")));
        Body::Struct {
            fields,
            extra,
            closed: object.closed,
        }
    }

    /// The doc text of a schema: title, description, and what the type
    /// cannot say.
    pub(crate) fn doc(&self, schema: &Schema) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(title) = &schema.title
            && schema.description.as_deref() != Some(title.as_str())
        {
            parts.push(title.clone());
        }
        if let Some(description) = &schema.description {
            parts.push(description.clone());
        }
        parts.retain(|p| !p.trim().is_empty());
        let note = match &schema.kind {
            Kind::String(StringFormat::Byte) => Some("Base64-encoded bytes.".to_owned()),
            Kind::Const(value) => Some(format!("Always `{value}`.")),
            Kind::Any => Some("Free-form JSON: the spec does not constrain it.".to_owned()),
            Kind::AllOf(_) => Some(format!(
                "Untyped: an `allOf` whose parts are not all objects ({}).",
                self.location(schema.pos)
            )),
            Kind::Unsupported(reason) => Some(format!(
                "Untyped: {reason} ({}).",
                self.location(schema.pos)
            )),
            _ => None,
        };
        parts.extend(note);
        if schema.read_only {
            parts.push("Read-only: sent by the server, ignored in requests.".to_owned());
        }
        if schema.write_only {
            parts.push("Write-only: sent in requests, never returned.".to_owned());
        }
        parts.join("\n\n")
    }

    /// `file:line:column` of a spec position.
    pub(crate) fn location(&self, pos: Pos) -> String {
        format!(
            "{}:{}:{}",
            self.model.document.sources.display(pos.file),
            pos.line,
            pos.column
        )
    }

    /// Boxes fields on cycles and turns self-referring aliases into newtypes.
    fn settle(&mut self) {
        // Aliases first: an alias that reaches itself through any container.
        let alias_edges: Vec<Vec<usize>> = self
            .defs
            .iter()
            .map(|d| match &d.body {
                Body::Alias(ty) => {
                    let mut out = Vec::new();
                    reached(ty, true, &mut out);
                    out.retain(|t| {
                        matches!(self.defs.get(*t).map(|d| &d.body), Some(Body::Alias(_)))
                    });
                    out
                }
                _ => Vec::new(),
            })
            .collect();
        let alias_scc = components(&alias_edges);
        for (index, def) in self.defs.iter_mut().enumerate() {
            if let Body::Alias(ty) = &def.body
                && on_cycle(index, &alias_scc, &alias_edges)
            {
                def.body = Body::Newtype(ty.clone());
            }
        }
        // Then sizes: edges that do not pass through a heap container.
        let edges: Vec<Vec<usize>> = self
            .defs
            .iter()
            .map(|d| {
                let mut out = Vec::new();
                body_reaches(&d.body, false, &mut out);
                out
            })
            .collect();
        let scc = components(&edges);
        for index in 0..self.defs.len() {
            let own = scc.get(index).copied();
            let cyclic = |ty: &Ty| {
                let mut out = Vec::new();
                reached(ty, false, &mut out);
                out.iter().any(|t| scc.get(*t).copied() == own)
            };
            let Some(def) = self.defs.get(index) else {
                continue;
            };
            let mut body = def.body.clone();
            match &mut body {
                Body::Struct { fields, .. } => {
                    for f in fields.iter_mut().filter(|f| cyclic(&f.ty)) {
                        f.ty = boxed(std::mem::replace(&mut f.ty, Ty::Unit));
                    }
                }
                Body::OneOf { variants, .. } => {
                    for v in variants.iter_mut().filter(|v| cyclic(&v.ty)) {
                        v.ty = boxed(std::mem::replace(&mut v.ty, Ty::Unit));
                    }
                }
                Body::Newtype(ty) if cyclic(ty) => {
                    *ty = boxed(std::mem::replace(ty, Ty::Unit));
                }
                _ => {}
            }
            if let Some(def) = self.defs.get_mut(index) {
                def.body = body;
            }
        }
    }

    /// Makes each inline string enum, object or union that repeats another
    /// exactly (the same values in the same order; the same fields with the
    /// same types, docs and checks; the same variants) an alias of the
    /// first, not a copy. Stripe repeats one list of values in dozens of
    /// places and `""` alone in hundreds, and every copy costs rustc a type
    /// and its impls. Named schemas keep their own types, and are the ones
    /// aliased where they can be.
    fn share_duplicates(&mut self) {
        let named: std::collections::HashSet<usize> =
            self.named.iter().flatten().copied().collect();
        // The first by name is kept, so it reads before its aliases.
        let mut order: Vec<usize> = (0..self.defs.len()).collect();
        order.sort_by_key(|i| {
            (
                !named.contains(i),
                self.defs.get(*i).map(|d| d.name.as_str()),
            )
        });
        // Until nothing changes: an object becomes a copy of another once
        // the enums and objects of its fields are shared.
        loop {
            let mut first: std::collections::HashMap<String, usize> =
                std::collections::HashMap::new();
            let mut shared = Vec::new();
            for &index in &order {
                let Some(shape) = self.shape(index) else {
                    continue;
                };
                match first.entry(shape) {
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(index);
                    }
                    std::collections::hash_map::Entry::Occupied(slot) => {
                        if !named.contains(&index) {
                            shared.push((index, *slot.get()));
                        }
                    }
                }
            }
            if shared.is_empty() {
                break;
            }
            for (index, to) in shared {
                if let Some(def) = self.defs.get_mut(index) {
                    def.body = Body::Alias(Ty::Def(to));
                }
            }
        }
    }

    /// What makes definition `index` the same type as another, for
    /// [`TypeSpace::share_duplicates`]: string enums, objects and unions.
    fn shape(&self, index: usize) -> Option<String> {
        let def = self.defs.get(index)?;
        match &def.body {
            Body::Enum(variants) if def.checks.is_empty() => Some(format!("enum {variants:?}")),
            Body::Struct {
                fields,
                extra,
                closed,
            } => {
                let fields: Vec<String> = fields
                    .iter()
                    .map(|f| {
                        format!(
                            "{} {:?} {:?} {} {} {:?} {:?} {}",
                            f.ident,
                            f.wire,
                            self.plain(&f.ty),
                            f.optional,
                            f.nullable,
                            f.checks,
                            f.doc,
                            f.deprecated
                        )
                    })
                    .collect();
                let extra = extra.as_ref().map(|ty| self.plain(ty));
                Some(format!(
                    "struct {closed} {extra:?} {:?} {fields:?}",
                    def.checks
                ))
            }
            Body::OneOf { variants, tag } if def.checks.is_empty() => {
                let variants: Vec<String> = variants
                    .iter()
                    .map(|v| {
                        format!(
                            "{} {:?} {:?} {:?}",
                            v.ident,
                            self.plain(&v.ty),
                            v.tags,
                            v.checks
                        )
                    })
                    .collect();
                Some(format!("one of {tag:?} {variants:?}"))
            }
            _ => None,
        }
    }

    /// `ty` with every alias that checks nothing of its own seen through.
    pub(crate) fn plain(&self, ty: &Ty) -> Ty {
        self.plain_within(ty, 0)
    }

    /// [`TypeSpace::plain`], `depth` aliases in: an alias that names itself
    /// (`A = Vec<A>`, before it becomes a newtype) is left as it is.
    fn plain_within(&self, ty: &Ty, depth: usize) -> Ty {
        const DEEPEST: usize = 32;
        let inner = |ty: &Ty| Box::new(self.plain_within(ty, depth));
        match ty {
            Ty::Def(index) if depth < DEEPEST => match self.defs.get(*index) {
                Some(TypeDef {
                    body: Body::Alias(aliased),
                    checks,
                    ..
                }) if checks.is_empty() => self.plain_within(aliased, depth + 1),
                _ => ty.clone(),
            },
            Ty::Vec(item) => Ty::Vec(inner(item)),
            Ty::Map(value) => Ty::Map(inner(value)),
            Ty::Option(value) => Ty::Option(inner(value)),
            Ty::Boxed(value) => Ty::Boxed(inner(value)),
            other => other.clone(),
        }
    }

    /// The tokens of a type, as written in a field.
    pub(crate) fn tokens(&self, ty: &Ty) -> TokenStream {
        match ty {
            Ty::Def(index) => {
                let name = self.defs.get(*index).map_or("Type", |d| d.name.as_str());
                let ident = ident(name);
                quote!(#ident)
            }
            Ty::String => quote!(::std::string::String),
            Ty::Bool => quote!(bool),
            Ty::I32 => quote!(i32),
            Ty::I64 => quote!(i64),
            Ty::U32 => quote!(u32),
            Ty::U64 => quote!(u64),
            Ty::F32 => quote!(f32),
            Ty::F64 => quote!(f64),
            Ty::Value => quote!(::idem_runtime::serde_json::Value),
            Ty::Bytes => quote!(::idem_runtime::bytes::Bytes),
            Ty::DateTime => {
                quote!(::idem_runtime::chrono::DateTime<::idem_runtime::chrono::Utc>)
            }
            Ty::Date => quote!(::idem_runtime::chrono::NaiveDate),
            Ty::Uuid => quote!(::idem_runtime::uuid::Uuid),
            Ty::Ipv4 => quote!(::std::net::Ipv4Addr),
            Ty::Ipv6 => quote!(::std::net::Ipv6Addr),
            Ty::Unit => quote!(()),
            Ty::Vec(inner) => {
                let inner = self.tokens(inner);
                quote!(::std::vec::Vec<#inner>)
            }
            Ty::Map(inner) => {
                let inner = self.tokens(inner);
                quote!(::std::collections::BTreeMap<::std::string::String, #inner>)
            }
            Ty::Option(inner) => {
                let inner = self.tokens(inner);
                quote!(::std::option::Option<#inner>)
            }
            Ty::Boxed(inner) => {
                let inner = self.tokens(inner);
                quote!(::std::boxed::Box<#inner>)
            }
        }
    }

    /// Every definition, sorted by name, each followed by its `Validate`
    /// implementation where its schema has keywords to check.
    pub(crate) fn render(&self) -> TokenStream {
        let mut sorted: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, def) in self.defs.iter().enumerate() {
            sorted.insert(&def.name, index);
        }
        sorted
            .values()
            .filter_map(|i| self.defs.get(*i).map(|d| (*i, d)))
            .map(|(i, d)| {
                let strict = self.server && self.in_requests.get(i).copied().unwrap_or(false);
                let def = self.render_def(d, strict);
                let validate = self.render_validate(i, d);
                let gate = self.features.as_ref().and_then(|f| f.gate(i));
                match gate {
                    Some(gate) => super::features::gate_items(quote!(#def #validate), &gate),
                    None => quote!(#def #validate),
                }
            })
            .collect()
    }

    /// A placeholder statement for the checks of `sites`, which
    /// [`TypeSpace::resolve`] replaces in the formatted code once every type
    /// is known: with nothing when none of them has anything to check, else
    /// with statements that validate them into `v` and end with `finish`.
    pub(crate) fn defer(&mut self, sites: Vec<Site>, finish: TokenStream) -> TokenStream {
        let index = self.deferred.len();
        self.deferred.push(Deferred { sites, finish });
        let placeholder = format_ident!("{DEFERRED}{index}");
        quote!(#placeholder!();)
    }

    /// `code` (formatted) with every placeholder of [`TypeSpace::defer`]
    /// replaced by its checks, formatted alike. Only the placeholders are
    /// touched, so a large API pays for its checks and not for a second
    /// pass over its code.
    pub(crate) fn resolve(&self, code: &str) -> String {
        let mut out = String::with_capacity(code.len() + code.len() / 8);
        for line in code.split_inclusive('\n') {
            let trimmed = line.trim_start();
            let index = trimmed
                .strip_prefix(DEFERRED)
                .and_then(|rest| rest.strip_suffix("!();\n").or(rest.strip_suffix("!();")))
                .and_then(|n| n.parse::<usize>().ok());
            let Some(deferred) = index.and_then(|i| self.deferred.get(i)) else {
                out.push_str(line);
                continue;
            };
            let indent = &line[..line.len() - trimmed.len()];
            let stmts = self.render_deferred(deferred);
            if stmts.is_empty() {
                continue;
            }
            // Formatted as a function body, then moved to the placeholder's
            // indentation.
            let Ok(file) = syn::parse2::<syn::File>(quote!(fn checks() { #stmts })) else {
                continue;
            };
            let formatted = prettyplease::unparse(&file);
            let lines: Vec<&str> = formatted.lines().collect();
            for body in lines.iter().skip(1).take(lines.len().saturating_sub(2)) {
                let body = body.strip_prefix("    ").unwrap_or(body);
                if body.is_empty() {
                    out.push('\n');
                } else {
                    out.push_str(indent);
                    out.push_str(body);
                    out.push('\n');
                }
            }
        }
        out
    }

    fn render_deferred(&self, deferred: &Deferred) -> TokenStream {
        let mut body = TokenStream::new();
        for site in &deferred.sites {
            let stmts = self.check_value(&site.ty, &site.checks, &site.value);
            if !stmts.is_empty() {
                let path = &site.path;
                let stmts = closure(&stmts);
                body.extend(quote!(v.at(#path, #stmts);));
            }
        }
        if body.is_empty() {
            return body;
        }
        let finish = &deferred.finish;
        quote! {
            let mut v = ::idem_runtime::validate::Validator::new("");
            #body
            #finish
        }
    }

    /// Marks the definitions whose values have something to check: their
    /// own keywords, or a part that has (computed to a fixed point, so
    /// recursive types settle).
    fn mark_validated(&mut self) {
        self.mark_in_requests();
        self.validated = vec![false; self.defs.len()];
        loop {
            let mut changed = false;
            for index in 0..self.defs.len() {
                if self.validated.get(index).copied().unwrap_or(true)
                    || !self.in_requests.get(index).copied().unwrap_or(false)
                {
                    continue;
                }
                let needs = self.defs.get(index).is_some_and(|d| self.def_needs(d));
                if needs {
                    if let Some(flag) = self.validated.get_mut(index) {
                        *flag = true;
                    }
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }

    /// Marks every definition reachable from an operation's inputs.
    fn mark_in_requests(&mut self) {
        let mut marked = vec![false; self.defs.len()];
        let mut work: Vec<usize> = Vec::new();
        for site in self.deferred.iter().flat_map(|d| d.sites.iter()) {
            reached(&site.ty, true, &mut work);
        }
        while let Some(index) = work.pop() {
            match marked.get_mut(index) {
                Some(flag) if !*flag => *flag = true,
                _ => continue,
            }
            if let Some(def) = self.defs.get(index) {
                body_reaches(&def.body, true, &mut work);
            }
        }
        self.in_requests = marked;
    }

    fn def_needs(&self, def: &TypeDef) -> bool {
        match &def.body {
            Body::Struct { fields, extra, .. } => {
                property_counts(&def.checks).is_some()
                    || fields.iter().any(|f| self.needs(&f.ty, &f.checks))
                    || extra
                        .as_ref()
                        .is_some_and(|ty| self.needs(ty, &Checks::default()))
            }
            Body::OneOf { variants, .. } => variants.iter().any(|v| self.needs(&v.ty, &v.checks)),
            Body::Newtype(ty) => self.needs(ty, &def.checks),
            _ => false,
        }
    }

    /// Whether a value of `ty` checked against `checks` has anything to check.
    fn needs(&self, ty: &Ty, checks: &Checks) -> bool {
        match ty {
            Ty::Option(inner) | Ty::Boxed(inner) => self.needs(inner, checks),
            Ty::Def(index) => match self.defs.get(*index) {
                Some(TypeDef {
                    body: Body::Alias(inner),
                    checks: own,
                    ..
                }) => self.needs(inner, checks) || self.needs(inner, own),
                Some(_) => self.validated.get(*index).copied().unwrap_or(false),
                None => false,
            },
            Ty::Vec(item) => {
                let c = checks.constraints.as_ref();
                c.is_some_and(|c| c.min_items.is_some() || c.max_items.is_some() || c.unique_items)
                    || self.needs(item, checks.items.as_deref().unwrap_or(&Checks::default()))
            }
            Ty::Map(value) => {
                property_counts(checks).is_some()
                    || self.needs(
                        value,
                        checks.values.as_deref().unwrap_or(&Checks::default()),
                    )
            }
            Ty::String => {
                checks.constant.is_some()
                    || checks.constraints.as_ref().is_some_and(|c| {
                        c.min_length.is_some() || c.max_length.is_some() || c.pattern.is_some()
                    })
            }
            Ty::I32 | Ty::I64 | Ty::U32 | Ty::U64 | Ty::F32 | Ty::F64 => {
                checks.constant.is_some()
                    || checks.constraints.as_ref().is_some_and(|c| {
                        c.minimum.is_some() || c.maximum.is_some() || c.multiple_of.is_some()
                    })
            }
            Ty::Bool => checks.constant.is_some(),
            _ => false,
        }
    }

    /// Statements checking `value` (an expression of type `&T` for `ty`)
    /// against `checks`, reporting to `v`; empty when there is nothing to
    /// check.
    pub(crate) fn check_value(&self, ty: &Ty, checks: &Checks, value: &TokenStream) -> Vec<Stmt> {
        match ty {
            Ty::Option(inner) => {
                // The runtime's checks skip `None`: given the option itself
                // where they all can be.
                let direct = self.check_value(inner, checks, value);
                if direct.iter().all(|s| s.through_option) {
                    return direct;
                }
                let inner = self.check_value(inner, checks, &quote!(value));
                let inner = block(&inner);
                vec![Stmt::block(
                    quote!(if let ::std::option::Option::Some(value) = #value { #inner }),
                )]
            }
            // `Validate` sees through a box.
            Ty::Boxed(inner) if matches!(**inner, Ty::Def(_)) => {
                self.check_value(inner, checks, value)
            }
            Ty::Boxed(inner) => self.check_value(inner, checks, &quote!(&**#value)),
            Ty::Def(index) => match self.defs.get(*index) {
                Some(TypeDef {
                    body: Body::Alias(inner),
                    checks: own,
                    ..
                }) => {
                    let mut out = self.check_value(inner, own, value);
                    out.extend(self.check_value(inner, checks, value));
                    out
                }
                Some(_) if self.validated.get(*index).copied().unwrap_or(false) => {
                    vec![Stmt::call(quote!(v.nested(#value)))]
                }
                _ => Vec::new(),
            },
            Ty::Vec(item) => {
                let mut out = Vec::new();
                if let Some(c) = &checks.constraints {
                    if let Some(min) = c.min_items {
                        let min = u64_lit(min);
                        out.push(Stmt::call(quote!(v.min_items(#value, #min))));
                    }
                    if let Some(max) = c.max_items {
                        let max = u64_lit(max);
                        out.push(Stmt::call(quote!(v.max_items(#value, #max))));
                    }
                    if c.unique_items {
                        out.push(Stmt::call(quote!(v.unique(#value))));
                    }
                }
                let empty = Checks::default();
                let item_checks = checks.items.as_deref().unwrap_or(&empty);
                let inner = self.check_value(item, item_checks, &quote!(item));
                if !inner.is_empty() {
                    let nested_only = inner.len() == 1
                        && inner
                            .iter()
                            .all(|s| s.tokens.to_string() == quote!(v.nested(item)).to_string());
                    if nested_only {
                        out.push(Stmt::call(quote!(v.nested(#value))));
                    } else {
                        let inner = item_closure(&inner);
                        out.push(Stmt::call(quote!(v.each_item(#value, #inner))));
                    }
                }
                out
            }
            Ty::Map(item) => {
                let mut out = Vec::new();
                if let Some((min, max)) = property_counts(checks) {
                    let map = receiver(value);
                    if let Some(min) = min {
                        let min = u64_lit(min);
                        out.push(Stmt::exact(quote!(v.min_properties(#map.len(), #min))));
                    }
                    if let Some(max) = max {
                        let max = u64_lit(max);
                        out.push(Stmt::exact(quote!(v.max_properties(#map.len(), #max))));
                    }
                }
                let empty = Checks::default();
                let item_checks = checks.values.as_deref().unwrap_or(&empty);
                let inner = self.check_value(item, item_checks, &quote!(item));
                if !inner.is_empty() {
                    let inner = item_closure(&inner);
                    out.push(Stmt::call(quote!(v.each_value(#value, #inner))));
                }
                out
            }
            Ty::String => {
                let mut out = Vec::new();
                if let Some(c) = &checks.constraints {
                    if let Some(min) = c.min_length {
                        let min = u64_lit(min);
                        out.push(Stmt::call(quote!(v.min_length(#value, #min))));
                    }
                    if let Some(max) = c.max_length {
                        let max = u64_lit(max);
                        out.push(Stmt::call(quote!(v.max_length(#value, #max))));
                    }
                    if let Some((pattern, _)) = &c.pattern {
                        out.push(Stmt::call(quote!(v.pattern(#value, #pattern))));
                    }
                }
                if let Some(serde_json::Value::String(expected)) = &checks.constant {
                    let shown = serde_json::Value::from(expected.as_str()).to_string();
                    out.push(Stmt::exact(quote!(v.constant(#value == #expected, #shown))));
                }
                out
            }
            Ty::I32 | Ty::I64 | Ty::U32 | Ty::U64 | Ty::F32 | Ty::F64 => {
                let mut out = Vec::new();
                let value = &copied(value);
                if let Some(c) = &checks.constraints {
                    if let Some(b) = c.minimum {
                        let bound = f64_lit(b.value);
                        out.push(Stmt::call(if b.exclusive {
                            quote!(v.exclusive_minimum(#value, #bound))
                        } else {
                            quote!(v.minimum(#value, #bound))
                        }));
                    }
                    if let Some(b) = c.maximum {
                        let bound = f64_lit(b.value);
                        out.push(Stmt::call(if b.exclusive {
                            quote!(v.exclusive_maximum(#value, #bound))
                        } else {
                            quote!(v.maximum(#value, #bound))
                        }));
                    }
                    if let Some(m) = c.multiple_of {
                        let m = f64_lit(m);
                        out.push(Stmt::call(quote!(v.multiple_of(#value, #m))));
                    }
                }
                if let Some(serde_json::Value::Number(n)) = &checks.constant {
                    let shown = n.to_string();
                    let expected = match ty {
                        Ty::F32 | Ty::F64 => f64_lit(n.as_f64().unwrap_or(0.0)),
                        _ => shown.parse().unwrap_or_else(|_| quote!(0)),
                    };
                    let cast = match ty {
                        Ty::F32 => quote!(f64::from(#value)),
                        _ => quote!(#value),
                    };
                    out.push(Stmt::exact(quote!(v.constant(#cast == #expected, #shown))));
                }
                out
            }
            Ty::Bool => match &checks.constant {
                Some(serde_json::Value::Bool(true)) => {
                    vec![Stmt::exact(quote!(v.constant(*#value, "true")))]
                }
                Some(serde_json::Value::Bool(false)) => {
                    vec![Stmt::exact(quote!(v.constant(!*#value, "false")))]
                }
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// `impl Validate` for a definition that has something to check.
    fn render_validate(&self, index: usize, def: &TypeDef) -> TokenStream {
        if !self.validated.get(index).copied().unwrap_or(false) {
            return TokenStream::new();
        }
        let name = ident(&def.name);
        let body = match &def.body {
            Body::Struct { fields, extra, .. } => {
                let mut out = TokenStream::new();
                if let Some((min, max)) = property_counts(&def.checks) {
                    let required = fields.iter().filter(|f| !f.optional).count();
                    let optional = fields.iter().filter(|f| f.optional).map(|f| {
                        let field = ident(&f.ident);
                        quote!(+ usize::from(self.#field.is_some()))
                    });
                    let extra = extra.as_ref().map(|_| quote!(+ self.extra.len()));
                    out.extend(quote!(let present = #required #(#optional)* #extra;));
                    if let Some(min) = min {
                        let min = u64_lit(min);
                        out.extend(quote!(v.min_properties(present, #min);));
                    }
                    if let Some(max) = max {
                        let max = u64_lit(max);
                        out.extend(quote!(v.max_properties(present, #max);));
                    }
                }
                for f in fields {
                    let field = ident(&f.ident);
                    let ty = if f.optional {
                        Ty::Option(Box::new(f.ty.clone()))
                    } else {
                        f.ty.clone()
                    };
                    let stmts = self.check_value(&ty, &f.checks, &quote!(&self.#field));
                    if !stmts.is_empty() {
                        let wire = &f.wire;
                        let stmts = closure(&stmts);
                        out.extend(quote!(v.at(#wire, #stmts);));
                    }
                }
                if let Some(ty) = extra {
                    let stmts = self.check_value(ty, &Checks::default(), &quote!(item));
                    if !stmts.is_empty() {
                        let stmts = closure(&stmts);
                        out.extend(quote! {
                            for (key, item) in &self.extra {
                                v.at(key, #stmts);
                            }
                        });
                    }
                }
                out
            }
            Body::OneOf { variants, .. } => {
                let mut arms = Vec::new();
                let mut rest = false;
                for variant in variants {
                    let stmts = self.check_value(&variant.ty, &variant.checks, &quote!(value));
                    let vi = ident(&variant.ident);
                    if stmts.is_empty() {
                        rest = true;
                    } else {
                        let stmts = block(&stmts);
                        arms.push(quote!(Self::#vi(value) => { #stmts }));
                    }
                }
                let rest = rest.then(|| quote!(_ => {}));
                quote!(match self { #(#arms)* #rest })
            }
            Body::Newtype(ty) => block(&self.check_value(ty, &def.checks, &quote!(&self.0))),
            _ => TokenStream::new(),
        };
        quote! {
            impl ::idem_runtime::validate::Validate for #name {
                fn validate(&self, v: &mut ::idem_runtime::validate::Validator) {
                    #body
                }
            }
        }
    }

    /// `strict`: a request body can hold it, and a server decodes it.
    fn render_def(&self, def: &TypeDef, strict: bool) -> TokenStream {
        let name = ident(&def.name);
        let doc = doc_attrs(&def.doc);
        let deprecated = def.deprecated.then(|| quote!(#[deprecated]));
        let serde = quote!(#[serde(crate = "::idem_runtime::serde")]);
        let derive_serde = quote!(
            ::idem_runtime::serde::Serialize,
            ::idem_runtime::serde::Deserialize
        );
        match &def.body {
            Body::Pending => TokenStream::new(),
            Body::Struct {
                fields,
                extra,
                closed,
            } => {
                let all_optional = fields.iter().all(|f| f.optional) && extra.is_none();
                if extra.is_none() {
                    // Written as `object! { struct … }`, whose serde is a
                    // fraction of the derives' code (see `wrap_macros`).
                    let marker = if *closed {
                        format_ident!("{CLOSED_OBJECT}")
                    } else {
                        format_ident!("{OBJECT}")
                    };
                    let default = all_optional.then(|| quote!(, Default));
                    let fields = fields.iter().map(|f| self.render_object_field(f, strict));
                    return quote! {
                        #[#marker]
                        #doc
                        #deprecated
                        #[derive(Debug, Clone, PartialEq #default)]
                        pub struct #name {
                            #(#fields)*
                        }
                    };
                }
                let closed = closed.then(|| quote!(#[serde(deny_unknown_fields)]));
                let default = all_optional.then(|| quote!(Default,));
                let fields = fields.iter().map(|f| self.render_field(f, strict));
                let extra = extra.as_ref().map(|ty| {
                    let ty = self.tokens(ty);
                    quote! {
                        #[doc = " Properties beyond the ones above (`additionalProperties`)."]
                        #[serde(flatten)]
                        pub extra: ::std::collections::BTreeMap<::std::string::String, #ty>,
                    }
                });
                quote! {
                    #doc
                    #deprecated
                    #[derive(Debug, Clone, PartialEq, #default #derive_serde)]
                    #serde
                    #closed
                    pub struct #name {
                        #(#fields)*
                        #extra
                    }
                }
            }
            Body::Enum(variants) => {
                // Written as `string_enum! { enum … { A = "a" } }`, which
                // implements serde by hand through `as_str`: derived
                // visitors for each of the thousands of enums of a large
                // spec are most of what its types cost rustc. The enum is
                // formatted as an item, then wrapped (see [`wrap_macros`]).
                let idents = variants.iter().map(|(v, _)| ident(v));
                let wires = variants.iter().map(|(_, wire)| wire);
                let marker = format_ident!("{STRING_ENUM}");
                quote! {
                    #[#marker]
                    #doc
                    #deprecated
                    pub enum #name {
                        #(#idents = #wires,)*
                    }
                }
            }
            Body::IntegerEnum(values) => {
                let consts = values.iter().map(|v| {
                    let konst = if *v < 0 {
                        format_ident!("MINUS_{}", v.unsigned_abs())
                    } else {
                        format_ident!("V{}", v.unsigned_abs())
                    };
                    let text = format!(" `{v}`");
                    quote!(#[doc = #text] pub const #konst: Self = Self(#v);)
                });
                quote! {
                    #doc
                    #deprecated
                    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, #derive_serde)]
                    #serde
                    #[serde(transparent)]
                    pub struct #name(pub i64);
                    impl #name {
                        #(#consts)*
                    }
                }
            }
            Body::OneOf { variants, tag } => self.render_one_of(def, variants, tag.as_deref()),
            Body::Alias(ty) => {
                let ty = self.tokens(ty);
                quote!(#doc #deprecated pub type #name = #ty;)
            }
            Body::Newtype(ty) => {
                let ty = self.tokens(ty);
                quote! {
                    #doc
                    #deprecated
                    #[derive(Debug, Clone, PartialEq, #derive_serde)]
                    #serde
                    #[serde(transparent)]
                    pub struct #name(pub #ty);
                }
            }
        }
    }

    /// A field of an `object!`: `#[json("wire")]`, or `#[json("wire",
    /// optional)]` on an `Option` (`optional, non_null` where a server
    /// refuses an explicit `null`).
    fn render_object_field(&self, field: &Field, strict: bool) -> TokenStream {
        let ident = ident(&field.ident);
        let doc = doc_attrs(&field.doc);
        let deprecated = field.deprecated.then(|| quote!(#[deprecated]));
        let wire = &field.wire;
        let ty = self.tokens(&field.ty);
        if field.optional {
            let non_null = (strict && !field.nullable).then(|| quote!(, non_null));
            quote! {
                #doc
                #[json(#wire, optional #non_null)]
                #deprecated
                pub #ident: ::std::option::Option<#ty>,
            }
        } else {
            quote! {
                #doc
                #[json(#wire)]
                #deprecated
                pub #ident: #ty,
            }
        }
    }

    fn render_field(&self, field: &Field, strict: bool) -> TokenStream {
        let ident = ident(&field.ident);
        let doc = doc_attrs(&field.doc);
        let deprecated = field.deprecated.then(|| quote!(#[deprecated]));
        let wire = &field.wire;
        let rename =
            (field.ident.trim_start_matches("r#") != wire).then(|| quote!(rename = #wire,));
        let ty = self.tokens(&field.ty);
        if field.optional {
            // Absent reads as `None`; `null` only where the schema allows it
            // (a server decodes strictly, a client leniently).
            let non_null = (strict && !field.nullable)
                .then(|| quote!(deserialize_with = "::idem_runtime::codec::non_null",));
            quote! {
                #doc
                #deprecated
                #[serde(#rename default, #non_null skip_serializing_if = "::std::option::Option::is_none")]
                pub #ident: ::std::option::Option<#ty>,
            }
        } else {
            let attr = rename.map(|r| quote!(#[serde(#r)]));
            quote! {
                #doc
                #deprecated
                #attr
                pub #ident: #ty,
            }
        }
    }

    fn render_one_of(&self, def: &TypeDef, variants: &[Variant], tag: Option<&str>) -> TokenStream {
        let name = ident(&def.name);
        let doc = doc_attrs(&def.doc);
        let deprecated = def.deprecated.then(|| quote!(#[deprecated]));
        let cases = variants.iter().map(|v| {
            let vi = ident(&v.ident);
            let ty = self.tokens(&v.ty);
            quote!(#vi(#ty),)
        });
        let Some(tag) = tag else {
            // Written as `one_of! { enum … }` (see `wrap_macros`).
            let marker = format_ident!("{ONE_OF}");
            return quote! {
                #[#marker]
                #doc
                #deprecated
                #[derive(Debug, Clone, PartialEq)]
                pub enum #name {
                    #(#cases)*
                }
            };
        };
        // Tagged: serialized as the variant itself (which carries its tag),
        // deserialized by reading the tag first, so overlapping variants
        // are never confused. Unknown tags try each variant in order.
        let arms = variants.iter().filter(|v| !v.tags.is_empty()).map(|v| {
            let vi = ident(&v.ident);
            let tags = &v.tags;
            quote!(::std::option::Option::Some(#(#tags)|*) => ::idem_runtime::codec::from_value(value).map(Self::#vi),)
        });
        let fallbacks = variants.iter().map(|v| {
            let vi = ident(&v.ident);
            quote! {
                if let ::std::result::Result::Ok(v) = ::idem_runtime::codec::from_value::<_, D::Error>(value.clone()) {
                    return ::std::result::Result::Ok(Self::#vi(v));
                }
            }
        });
        let expected = format!("a `{tag}` naming a known variant");
        let tag_doc = format!(" Tagged by its `{tag}` property.");
        let gap = (!def.doc.trim().is_empty()).then(|| quote!(#[doc = ""]));
        quote! {
            #doc
            #gap
            #[doc = #tag_doc]
            #deprecated
            #[derive(Debug, Clone, PartialEq, ::idem_runtime::serde::Serialize)]
            #[serde(crate = "::idem_runtime::serde", untagged)]
            pub enum #name {
                #(#cases)*
            }
            impl<'de> ::idem_runtime::serde::Deserialize<'de> for #name {
                fn deserialize<D: ::idem_runtime::serde::Deserializer<'de>>(deserializer: D) -> ::std::result::Result<Self, D::Error> {
                    let (tag, value) = ::idem_runtime::codec::tagged::<D>(deserializer, #tag)?;
                    match tag.as_deref() {
                        #(#arms)*
                        _ => {
                            #(#fallbacks)*
                            ::std::result::Result::Err(::idem_runtime::codec::unexpected::<D::Error>(#expected))
                        }
                    }
                }
            }
        }
    }
}

/// One statement of a `validate` body: a call, or a block-like `if`/`for`
/// (which takes no semicolon).
#[derive(Debug, Clone)]
pub(crate) struct Stmt {
    tokens: TokenStream,
    block_like: bool,
    /// A check the runtime skips for an absent value, so it may be given
    /// an `Option` as is.
    through_option: bool,
}

impl Stmt {
    fn call(tokens: TokenStream) -> Self {
        Stmt {
            tokens,
            block_like: false,
            through_option: true,
        }
    }

    /// A call that needs the value itself (`const`).
    fn exact(tokens: TokenStream) -> Self {
        Stmt {
            tokens,
            block_like: false,
            through_option: false,
        }
    }

    fn block(tokens: TokenStream) -> Self {
        Stmt {
            tokens,
            block_like: true,
            through_option: false,
        }
    }
}

/// Statements as a block's contents.
fn block(stmts: &[Stmt]) -> TokenStream {
    stmts
        .iter()
        .map(|s| {
            let tokens = &s.tokens;
            if s.block_like {
                tokens.clone()
            } else {
                quote!(#tokens;)
            }
        })
        .collect()
}

/// Statements as the closure `v.at` runs: `|v| v.minimum(…)` for one call,
/// `|v| { … }` for several.
fn closure(stmts: &[Stmt]) -> TokenStream {
    match stmts {
        [one] => {
            let tokens = &one.tokens;
            quote!(|v| #tokens)
        }
        many => {
            let body = block(many);
            quote!(|v| { #body })
        }
    }
}

/// A number read from `value` (an expression of type `&T`): `self.amount`
/// for `&self.amount`, `*value` for `value`.
fn copied(value: &TokenStream) -> TokenStream {
    let mut tokens = value.clone().into_iter();
    match tokens.next() {
        Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == '&' => tokens.collect(),
        _ => quote!(*#value),
    }
}

/// `value` (an expression of type `&T`) as the receiver of a method call:
/// `self.tags` for `&self.tags` (a leading `&` would otherwise take the
/// call's result), `(**value)` for `&**value`, `value` for `value`.
fn receiver(value: &TokenStream) -> TokenStream {
    let mut tokens = value.clone().into_iter();
    match tokens.next() {
        Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == '&' => {
            let rest: TokenStream = tokens.collect();
            match rest.clone().into_iter().next() {
                Some(proc_macro2::TokenTree::Punct(_)) => quote!((#rest)),
                _ => rest,
            }
        }
        _ => value.clone(),
    }
}

/// Statements as the closure `each_item`/`each_value` run on each `item`.
fn item_closure(stmts: &[Stmt]) -> TokenStream {
    match stmts {
        [one] => {
            let tokens = &one.tokens;
            quote!(|v, item| #tokens)
        }
        many => {
            let body = block(many);
            quote!(|v, item| { #body })
        }
    }
}

/// `minProperties` / `maxProperties` of `checks`, when either is set.
fn property_counts(checks: &Checks) -> Option<(Option<u64>, Option<u64>)> {
    let c = checks.constraints.as_ref()?;
    if c.min_properties.is_none() && c.max_properties.is_none() {
        return None;
    }
    Some((c.min_properties, c.max_properties))
}

fn u64_lit(n: u64) -> proc_macro2::Literal {
    proc_macro2::Literal::u64_unsuffixed(n)
}

/// An `f64` literal that reads as the spec wrote it (`1.0`, `0.01`).
fn f64_lit(n: f64) -> TokenStream {
    let lit = proc_macro2::Literal::f64_unsuffixed(n);
    quote!(#lit)
}

fn boxed(ty: Ty) -> Ty {
    match ty {
        Ty::Option(inner) => Ty::Option(Box::new(Ty::Boxed(inner))),
        other => Ty::Boxed(Box::new(other)),
    }
}

/// Definitions `ty` reaches: through `Option` and `Box` always, through
/// `Vec` and maps only when `through_heap`.
/// The definitions a body's parts name, through heap containers or not
/// (see [`reached`]).
fn body_reaches(body: &Body, through_heap: bool, out: &mut Vec<usize>) {
    match body {
        Body::Struct { fields, extra, .. } => {
            for f in fields {
                reached(&f.ty, through_heap, out);
            }
            if let Some(extra) = extra {
                reached(extra, through_heap, out);
            }
        }
        Body::OneOf { variants, .. } => {
            for v in variants {
                reached(&v.ty, through_heap, out);
            }
        }
        Body::Newtype(ty) | Body::Alias(ty) => reached(ty, through_heap, out),
        _ => {}
    }
}

/// The definitions `ty` names directly or inside an `Option`, and, when
/// `through_heap`, inside a `Box`, a `Vec` or a map.
fn reached(ty: &Ty, through_heap: bool, out: &mut Vec<usize>) {
    match ty {
        Ty::Def(index) => out.push(*index),
        Ty::Option(inner) => reached(inner, through_heap, out),
        Ty::Boxed(inner) | Ty::Vec(inner) | Ty::Map(inner) if through_heap => {
            reached(inner, through_heap, out);
        }
        _ => {}
    }
}

fn on_cycle(index: usize, scc: &[usize], edges: &[Vec<usize>]) -> bool {
    let own = scc.get(index);
    let shared = scc.iter().filter(|c| Some(*c) == own).count() > 1;
    shared || edges.get(index).is_some_and(|e| e.contains(&index))
}

/// Strongly connected components (Tarjan's algorithm, iterative): the
/// component id of every node.
fn components(edges: &[Vec<usize>]) -> Vec<usize> {
    let n = edges.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut component = vec![usize::MAX; n];
    let mut next_index = 0;
    let mut next_component = 0;
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, usize)> = vec![(start, 0)];
        while let Some((node, child)) = work.pop() {
            if child == 0 {
                index[node] = next_index;
                low[node] = next_index;
                next_index += 1;
                stack.push(node);
                on_stack[node] = true;
            }
            let targets = edges.get(node).map_or(&[][..], Vec::as_slice);
            if let Some(&target) = targets.get(child) {
                work.push((node, child + 1));
                if target >= n {
                    continue;
                }
                if index[target] == usize::MAX {
                    work.push((target, 0));
                } else if on_stack[target] {
                    low[node] = low[node].min(index[target]);
                }
                continue;
            }
            if low[node] == index[node] {
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    component[member] = next_component;
                    if member == node {
                        break;
                    }
                }
                next_component += 1;
            }
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[node]);
            }
        }
    }
    component
}

/// An identifier token from a name the naming module produced.
pub(crate) fn ident(name: &str) -> proc_macro2::Ident {
    match name.strip_prefix("r#") {
        Some(raw) => proc_macro2::Ident::new_raw(raw, proc_macro2::Span::call_site()),
        None => proc_macro2::Ident::new(name, proc_macro2::Span::call_site()),
    }
}

/// `#[doc]` attributes for spec text. The text travels as string literals,
/// so nothing in it can end a comment or a string; code fences are marked
/// `text` and indentation is capped so rustdoc never compiles spec
/// examples as doctests.
pub(crate) fn doc_attrs(text: &str) -> TokenStream {
    if text.trim().is_empty() {
        return TokenStream::new();
    }
    let mut lines = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let line = if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let fence = if trimmed.starts_with("```") {
                "```"
            } else {
                "~~~"
            };
            in_fence = !in_fence;
            if in_fence {
                format!("{fence}text")
            } else {
                fence.to_owned()
            }
        } else if in_fence {
            line.to_owned()
        } else {
            // Four spaces of indentation would start a Rust code block.
            let indent = (line.len() - trimmed.len()).min(3);
            format!("{}{}", " ".repeat(indent), trimmed.trim_end())
        };
        lines.push(format!(" {line}"));
    }
    if in_fence {
        lines.push(" ```".to_owned());
    }
    quote!(#(#[doc = #lines])*)
}
