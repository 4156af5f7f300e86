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
use quote::quote;

use super::naming::{self, Namer};
use crate::model::Model;
use crate::model::schema::{
    Constraints, IntegerFormat, Kind, NumberFormat, Object, Schema, SchemaRef, StringFormat,
};
use crate::source::Pos;

pub(crate) mod defs;
mod errors;
mod render;
mod settle;
mod validate;

pub(crate) use defs::{
    Body, CLOSED_OBJECT, Checks, Field, OBJECT, ONE_OF, STRING_ENUM, Ty, TypeDef, Variant,
};

pub(crate) use render::{MACROS, wrap_macros};
use settle::{body_reaches, reached};

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
    /// Responses the spec shares under `components/responses` that carry
    /// headers: one struct each, which the client decodes into and the
    /// server answers with, by component name.
    shared: std::collections::HashMap<String, SharedResponse>,
    /// The items of those structs, by definition index: rendered with the
    /// types.
    shared_items: std::collections::HashMap<usize, TokenStream>,
    /// The operations' error enums, defined when the space finishes.
    errors: errors::ErrorEnums,
    /// What a definition built apart (a shared response's struct, an error
    /// enum or its alias) names, for the features that gate it.
    reach: std::collections::HashMap<usize, Vec<Ty>>,
}

/// A shared response's struct: its definition, its name, and the field of
/// each documented header (field, wire name).
#[derive(Debug, Clone)]
pub(crate) struct SharedResponse {
    pub(crate) index: usize,
    pub(crate) name: String,
    pub(crate) body: bool,
    pub(crate) headers: Vec<(String, String)>,
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

/// Names the generated code itself defines next to the API's types.
pub(crate) const RESERVED_TYPES: &[&str] = &["Client", "Error", "Result", "Api"];

/// The runtime's names a caller meets in the generated crate's signatures
/// and its prelude (`ApiError<E>`, `Call`, `IdempotencyKey`, `IdemTx`): no
/// type of the API's takes one, so `ApiError<bank::ErrorBody>` never reads
/// as `ApiError<bank::ApiError>`.
pub(crate) const RUNTIME_TYPES: &[&str] = &[
    "ApiClient",
    "ApiError",
    "Call",
    "EventStream",
    "Fault",
    "IdemTx",
    "IdempotencyKey",
    "PageError",
    "Resume",
    "RetryClient",
    "StreamExt",
];

impl<'m> TypeSpace<'m> {
    /// The name of a component schema. One that would take a name the
    /// generated code defines (`Error`, `Client`) is called after what it
    /// is (`ErrorBody`, `ApiClient`'s being the runtime's: `ClientSchema`),
    /// one that would take a runtime name gets `Schema` after it, and either
    /// is numbered only when even that is taken.
    fn named_type(&mut self, raw: &str) -> String {
        let name = naming::camel(raw, "Type");
        let candidates: Vec<String> = match name.as_str() {
            "Error" => vec!["ErrorBody".to_owned(), "ErrorSchema".to_owned()],
            "Api" => vec!["ApiSchema".to_owned()],
            _ if RESERVED_TYPES.contains(&name.as_str()) => {
                vec![format!("Api{name}"), format!("{name}Schema")]
            }
            _ if RUNTIME_TYPES.contains(&name.as_str()) => vec![format!("{name}Schema")],
            _ => return self.namer.unique(&name),
        };
        for candidate in candidates {
            if !RUNTIME_TYPES.contains(&candidate.as_str())
                && self.namer.is_free(&candidate)
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
            namer: Namer::reserving(&[RESERVED_TYPES, RUNTIME_TYPES].concat()),
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
            shared: std::collections::HashMap::new(),
            shared_items: std::collections::HashMap::new(),
            errors: errors::ErrorEnums::default(),
            reach: std::collections::HashMap::new(),
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

    /// The struct of a response shared as `components/responses/{component}`,
    /// with its body (when it has one) and documented headers, defined the
    /// first time it is asked for. Its fields are named alike for every
    /// operation: `body`, then each header in snake case.
    pub(crate) fn shared_response(
        &mut self,
        component: &str,
        body: Option<&Ty>,
        headers: &[(String, Ty)],
    ) -> SharedResponse {
        if let Some(shared) = self.shared.get(component) {
            return shared.clone();
        }
        let name = self.namer.unique(&naming::camel(component, "Response"));
        let struct_ident = ident(&name);
        let mut fields = Vec::new();
        if let Some(ty) = body {
            let t = self.tokens(ty);
            fields.push(quote!(#[doc = " The response body."] pub body: #t,));
        }
        let mut namer = Namer::reserving(&["body", "status"]);
        let mut named = Vec::new();
        for (wire, ty) in headers {
            let field = namer.unique(&naming::snake(wire, "header"));
            let f = ident(&field);
            let t = self.tokens(ty);
            let doc = format!(" The `{wire}` response header.");
            fields.push(quote!(#[doc = #doc] pub #f: ::std::option::Option<#t>,));
            named.push((field, wire.clone()));
        }
        let doc =
            format!(" The `{component}` response the spec shares, with its documented headers.");
        let index = self.reserve(&name);
        self.shared_items.insert(
            index,
            quote! {
                #[doc = #doc]
                #[derive(Debug, Clone, PartialEq)]
                pub struct #struct_ident {
                    #(#fields)*
                }
            },
        );
        // Built apart, it reaches its body.
        if let Some(body) = body {
            self.reach.insert(index, vec![body.clone()]);
        }
        let shared = SharedResponse {
            index,
            name,
            body: body.is_some(),
            headers: named,
        };
        self.shared.insert(component.to_owned(), shared.clone());
        shared
    }

    /// A definition named `name` whose body comes later (or is emitted
    /// apart, as an operation's own enum is): its index.
    pub(crate) fn reserve(&mut self, name: &str) -> usize {
        let index = self.defs.len();
        self.defs.push(TypeDef {
            name: name.to_owned(),
            doc: String::new(),
            deprecated: false,
            body: Body::Pending,
            checks: Checks::default(),
        });
        index
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
        self.settle_errors();
        self.share_duplicates();
        self.settle();
        self.mark_validated();
        if let Some(mut features) = self.features.take() {
            let defs = &self.defs;
            let apart = &self.reach;
            features.settle(defs, |index| {
                let mut out = Vec::new();
                if let Some(def) = defs.get(index) {
                    body_reaches(&def.body, true, &mut out);
                }
                for ty in apart.get(&index).into_iter().flatten() {
                    reached(ty, true, &mut out);
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
        let def = self.reserve(&name);
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
                let index = self.reserve(&name);
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
    // A carriage return alone breaks a line too (old Mac text); rustc
    // refuses one left inside a doc comment.
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
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
