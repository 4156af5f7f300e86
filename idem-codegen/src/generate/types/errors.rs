//! Operations' error enums. Each operation's error type is an enum of its
//! documented error statuses; operations whose error sides are the same
//! (the same statuses, bodies and descriptions, as every operation of a
//! spec answering one shared `default` error) share one enum, and each
//! operation's own name stays, as an alias of it.

use proc_macro2::TokenStream;
use quote::quote;

use super::{Ty, TypeSpace, ident};

/// The error enums asked for, grouped by their variants.
#[derive(Debug, Default)]
pub(crate) struct ErrorEnums {
    /// The group of each distinct set of variants, by its tokens.
    by_variants: std::collections::HashMap<String, usize>,
    groups: Vec<ErrorGroup>,
}

#[derive(Debug)]
struct ErrorGroup {
    variants: TokenStream,
    /// The variants' names, for the name of a shared enum.
    names: Vec<String>,
    /// The variants' payloads, which the enum reaches.
    payloads: Vec<Ty>,
    /// Each operation's definition (its reserved name), in order.
    members: Vec<usize>,
}

/// At most this many variants make a shared enum's name
/// (`NotFoundOrServiceUnavailableError`); a larger one, or one whose name
/// is taken, takes its first operation's name.
const NAMED_BY_VARIANTS: usize = 3;

impl TypeSpace<'_> {
    /// Records the error enum of an operation, reserved as definition
    /// `index`: its variants (`names`, carrying `payloads`). It is defined
    /// when the space finishes, alone or shared.
    pub(crate) fn error_enum(
        &mut self,
        index: usize,
        variants: TokenStream,
        names: Vec<String>,
        payloads: Vec<Ty>,
    ) {
        let key = variants.to_string();
        let errors = &mut self.errors;
        match errors.by_variants.get(&key) {
            Some(&group) => {
                if let Some(group) = errors.groups.get_mut(group) {
                    group.members.push(index);
                }
            }
            None => {
                errors.by_variants.insert(key, errors.groups.len());
                errors.groups.push(ErrorGroup {
                    variants,
                    names,
                    payloads,
                    members: vec![index],
                });
            }
        }
    }

    /// Defines every recorded error enum: an operation's own when no
    /// other shares it; otherwise one enum, named after its variants, and
    /// each operation's name an alias of it.
    pub(super) fn settle_errors(&mut self) {
        for group in std::mem::take(&mut self.errors.groups) {
            let Some(&first) = group.members.first() else {
                continue;
            };
            let variants = &group.variants;
            let shared = if group.members.len() == 1 {
                first
            } else {
                let mut name = group.names.join("Or");
                if !name.ends_with("Error") {
                    name.push_str("Error");
                }
                // A name taken (by a schema, or by another group with the
                // same statuses and other bodies or words) is not numbered:
                // the group takes its first operation's name instead.
                if group.names.len() <= NAMED_BY_VARIANTS && self.namer.is_free(&name) {
                    let name = self.namer.unique(&name);
                    self.reserve(&name)
                } else {
                    first
                }
            };
            let name = self.name_of(shared);
            let enum_ident = ident(&name);
            let doc = if group.members.len() == 1 {
                " The documented error responses.".to_owned()
            } else {
                format!(
                    " The documented error responses, alike for {} operations.",
                    group.members.len()
                )
            };
            self.shared_items.insert(
                shared,
                quote! {
                    #[doc = #doc]
                    #[derive(Debug, Clone, PartialEq)]
                    pub enum #enum_ident {
                        #variants
                    }
                },
            );
            self.reach.insert(shared, group.payloads.clone());
            for &member in &group.members {
                if member == shared {
                    continue;
                }
                let alias = ident(&self.name_of(member));
                let doc = format!(
                    " The documented error responses: [`{name}`], which other operations answer \
                     alike."
                );
                self.shared_items.insert(
                    member,
                    quote! {
                        #[doc = #doc]
                        pub type #alias = #enum_ident;
                    },
                );
                self.reach.insert(member, vec![Ty::Def(shared)]);
            }
        }
    }

    /// Defines `index`, reserved, as `item`, which names `reaches`.
    pub(crate) fn define_apart(&mut self, index: usize, item: TokenStream, reaches: Vec<Ty>) {
        self.shared_items.insert(index, item);
        self.reach.insert(index, reaches);
    }

    fn name_of(&self, index: usize) -> String {
        self.defs
            .get(index)
            .map(|d| d.name.clone())
            .unwrap_or_default()
    }
}
