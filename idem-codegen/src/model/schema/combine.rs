//! Schemas that combine others in ways a Rust type takes one step to say:
//! an `allOf` with a `oneOf` part, and a value of several JSON types.

use crate::tree::Node;

use super::{Kind, Schema, SchemaBuilder, plain};

impl<'d> SchemaBuilder<'d> {
    /// An `allOf` whose parts are objects and one `oneOf` of objects, as a
    /// `oneOf` of the objects each variant makes with the other parts:
    /// `allOf: [Base, oneOf: [Card, Bank]]` is `oneOf: [Base + Card,
    /// Base + Bank]`, with the same discriminator. `None` when the parts
    /// are not of that shape.
    pub(super) fn distribute(&mut self, parts: &[Schema], depth: usize) -> Option<Kind> {
        let mut choice = None;
        for (at, part) in parts.iter().enumerate() {
            if matches!(self.schemas.resolve(part).kind, Kind::OneOf { .. }) {
                if choice.is_some() {
                    return None;
                }
                choice = Some(at);
            }
        }
        let at = choice?;
        let Kind::OneOf {
            variants,
            discriminator,
        } = self.schemas.resolve(&parts[at]).kind.clone()
        else {
            return None;
        };
        for variant in &variants {
            if let Kind::Ref(id) = variant.kind {
                self.ensure_built(id, depth + 1);
            }
        }
        let others: Vec<Schema> = parts
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .map(|(_, p)| p.clone())
            .collect();
        // A variant that refers to a schema with no type yet is one still
        // being built: a parent whose `oneOf` lists the children that are
        // `allOf` it. Distributing over it would give a child its sibling's
        // shape, so the child stays as it was.
        let building = variants
            .iter()
            .any(|v| matches!(v.kind, Kind::Ref(_)) && self.schemas.resolve(v).kind == Kind::Any);
        if building {
            return None;
        }
        let untyped: Vec<bool> = variants.iter().map(|v| v.kind == Kind::Any).collect();
        // Variants that only constrain (`oneOf: [{required: [a]}, {required:
        // [b]}]`): one object, the other parts'.
        if untyped.iter().all(|u| *u) {
            return self.merge(&others).map(Kind::Object);
        }
        if untyped.iter().any(|u| *u) {
            return None;
        }
        let mut out = Vec::with_capacity(variants.len());
        for variant in variants {
            let mut group = others.clone();
            let resolved = self.schemas.resolve(&variant).clone();
            group.push(variant.clone());
            let object = self.merge(&group)?;
            let mut merged = plain(Kind::Object(object), variant.pos);
            // The variant keeps the name it had: its title, or the schema
            // it referred to.
            merged.title = variant.title.clone().or_else(|| match variant.kind {
                Kind::Ref(id) => self.schemas.get(id).map(|n| n.name.clone()),
                _ => None,
            });
            merged.description = variant.description.clone().or(resolved.description);
            merged.deprecated = variant.deprecated || resolved.deprecated;
            out.push(merged);
        }
        Some(Kind::OneOf {
            variants: out,
            discriminator,
        })
    }

    /// A value of several JSON types (`type: [string, integer]`) as a
    /// `oneOf` of one variant per type, each with the node's keywords: an
    /// untagged enum, an integer tried before a number.
    pub(super) fn several_types(
        &mut self,
        node: &'d Node,
        types: &[&str],
        depth: usize,
        schema: &Schema,
    ) -> Kind {
        const ORDER: [&str; 6] = ["boolean", "integer", "number", "string", "array", "object"];
        let mut variants = Vec::new();
        for ty in ORDER.iter().filter(|t| types.contains(t)) {
            let mut variant = plain(self.typed(node, ty, depth), node.pos);
            variant.constraints.clone_from(&schema.constraints);
            variants.push(variant);
        }
        if variants.len() < types.len() {
            return Kind::Unsupported(format!("a value of several types ({})", types.join(", ")));
        }
        Kind::OneOf {
            variants,
            discriminator: None,
        }
    }
}
