//! The type space's vocabulary: the Rust types the emitter composes
//! ([`Ty`]), the definitions it emits ([`TypeDef`]), and the attributes that
//! mark definitions for the macros the runtime expands them with. The feature
//! gating reads these too, without the type space itself.

use crate::model::schema::Constraints;

/// A Rust type as the emitter composes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    /// One of the [`TypeSpace`](super::TypeSpace)'s definitions.
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
    pub(crate) fn is_empty(&self) -> bool {
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

/// The attribute that marks a string enum for [`wrap_macros`](super::wrap_macros).
pub(crate) const STRING_ENUM: &str = "__idem_string_enum";

/// The attributes that mark an object struct for [`wrap_macros`](super::wrap_macros).
pub(crate) const OBJECT: &str = "__idem_object";

pub(crate) const CLOSED_OBJECT: &str = "__idem_closed_object";

/// The attribute that marks an untagged enum for [`wrap_macros`](super::wrap_macros).
pub(crate) const ONE_OF: &str = "__idem_one_of";
