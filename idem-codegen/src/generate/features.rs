//! Resource groups as cargo features, for a whole-API client crate.
//!
//! Each group's handle, methods and helpers sit behind the group's feature
//! (`#[cfg(feature = "charges")]`). A type sits behind the features of the
//! groups that reach it, through fields, variants and aliases: a crate
//! built with `charges` alone compiles the charge types and what they
//! name, and nothing else. A type every group reaches, or that code outside
//! any group names, is not gated. A type no operation reaches is behind
//! `full`, the feature that turns every group on (and `default` turns on
//! `full`): what it names may belong to any group.

use std::collections::{HashMap, HashSet};

use proc_macro2::{TokenStream, TokenTree};
use quote::{ToTokens, quote};

use super::naming::Namer;
use super::types::defs::{CLOSED_OBJECT, OBJECT, ONE_OF, STRING_ENUM, TypeDef};

/// The feature that enables every group and the types no operation uses.
pub const FULL: &str = "full";

/// What the client's groups name, and, once [`Features::settle`] ran, the
/// gate of each type.
#[derive(Debug, Default)]
pub(crate) struct Features {
    names: Namer,
    /// Each group's feature and the identifiers its code names.
    groups: Vec<(String, HashSet<String>)>,
    /// Identifiers named by code outside any group.
    shared: HashSet<String>,
    /// Per definition: `None` when not gated, else the groups that need it
    /// (none: only `full`).
    gates: Vec<Option<Vec<usize>>>,
}

impl Features {
    pub(crate) fn new() -> Self {
        Features {
            names: Namer::reserving(&["default", FULL]),
            ..Features::default()
        }
    }

    /// The feature of a group whose accessor is `accessor`: its name, made
    /// a valid and unique feature name.
    pub(crate) fn feature_for(&mut self, accessor: &str) -> String {
        let bare = accessor.trim_start_matches("r#");
        let valid = !bare.is_empty() && bare.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let base = if !valid {
            "group".to_owned()
        } else if !self.names.is_free(bare) {
            format!("{bare}_api")
        } else {
            bare.to_owned()
        };
        self.names.unique(&base)
    }

    /// Records the code of the group behind `feature`.
    pub(crate) fn group(&mut self, feature: String, code: &TokenStream) {
        let mut idents = HashSet::new();
        collect_idents(code, &mut idents);
        self.groups.push((feature, idents));
    }

    /// Records code that no feature gates (the `Client` itself).
    pub(crate) fn shared(&mut self, code: &TokenStream) {
        collect_idents(code, &mut self.shared);
    }

    /// The features, in the order the groups were recorded.
    pub(crate) fn names(&self) -> Vec<String> {
        self.groups.iter().map(|(f, _)| f.clone()).collect()
    }

    /// Decides each definition's gate: `reaches(i)` lists what definition
    /// `i` names.
    pub(crate) fn settle(&mut self, defs: &[TypeDef], reaches: impl Fn(usize) -> Vec<usize>) {
        let by_name: HashMap<&str, usize> = defs
            .iter()
            .enumerate()
            .filter(|(_, d)| !d.name.is_empty())
            .map(|(i, d)| (d.name.as_str(), i))
            .collect();
        let closure = |idents: &HashSet<String>| {
            let mut seen = vec![false; defs.len()];
            let mut work: Vec<usize> = idents
                .iter()
                .filter_map(|i| by_name.get(i.as_str()).copied())
                .collect();
            while let Some(index) = work.pop() {
                match seen.get_mut(index) {
                    Some(flag) if !*flag => *flag = true,
                    _ => continue,
                }
                work.extend(reaches(index));
            }
            seen
        };
        let always = closure(&self.shared);
        let reached: Vec<Vec<bool>> = self.groups.iter().map(|(_, ids)| closure(ids)).collect();
        self.gates = (0..defs.len())
            .map(|index| {
                if always.get(index).copied().unwrap_or(true) {
                    return None;
                }
                let by: Vec<usize> = reached
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.get(index).copied().unwrap_or(false))
                    .map(|(g, _)| g)
                    .collect();
                (by.len() < self.groups.len()).then_some(by)
            })
            .collect();
    }

    /// The `#[cfg(…)]` of definition `index`, if it is gated.
    pub(crate) fn gate(&self, index: usize) -> Option<TokenStream> {
        let groups = self.gates.get(index)?.as_ref()?;
        let features: Vec<&str> = groups
            .iter()
            .filter_map(|g| self.groups.get(*g).map(|(f, _)| f.as_str()))
            .collect();
        Some(cfg(&features))
    }
}

/// `#[cfg(feature = …)]` for any of `features`; `full` when there are none.
pub(crate) fn cfg(features: &[&str]) -> TokenStream {
    match features {
        [] => quote!(#[cfg(feature = #FULL)]),
        [one] => quote!(#[cfg(feature = #one)]),
        many => quote!(#[cfg(any(#(feature = #many),*))]),
    }
}

/// `items` with `attr` on each item: after its doc comments, so it reads
/// as a person writes it, but first on a string enum or an object, whose
/// marker must stay first (the gate then sits outside its macro).
pub(crate) fn gate_items(items: TokenStream, attr: &TokenStream) -> TokenStream {
    let Ok(file) = syn::parse2::<syn::File>(items.clone()) else {
        // Reported when the whole file fails to parse.
        return items;
    };
    let Ok(attrs) = syn::Attribute::parse_outer.parse2(attr.clone()) else {
        return items;
    };
    let mut out = TokenStream::new();
    for mut item in file.items {
        if let Some(list) = attrs_mut(&mut item) {
            let marker = list.first().is_some_and(|a| {
                [STRING_ENUM, OBJECT, CLOSED_OBJECT, ONE_OF]
                    .iter()
                    .any(|m| a.path().is_ident(m))
            });
            let at = if marker {
                0
            } else {
                list.iter().take_while(|a| a.path().is_ident("doc")).count()
            };
            for (offset, a) in attrs.iter().enumerate() {
                list.insert(at + offset, a.clone());
            }
        }
        item.to_tokens(&mut out);
    }
    out
}

use syn::parse::Parser;

fn attrs_mut(item: &mut syn::Item) -> Option<&mut Vec<syn::Attribute>> {
    use syn::Item;
    Some(match item {
        Item::Const(i) => &mut i.attrs,
        Item::Enum(i) => &mut i.attrs,
        Item::Fn(i) => &mut i.attrs,
        Item::Impl(i) => &mut i.attrs,
        Item::Macro(i) => &mut i.attrs,
        Item::Mod(i) => &mut i.attrs,
        Item::Static(i) => &mut i.attrs,
        Item::Struct(i) => &mut i.attrs,
        Item::Trait(i) => &mut i.attrs,
        Item::Type(i) => &mut i.attrs,
        Item::Union(i) => &mut i.attrs,
        Item::Use(i) => &mut i.attrs,
        _ => return None,
    })
}

fn collect_idents(code: &TokenStream, out: &mut HashSet<String>) {
    for tree in code.clone() {
        match tree {
            TokenTree::Ident(ident) => {
                out.insert(ident.to_string());
            }
            TokenTree::Group(group) => collect_idents(&group.stream(), out),
            _ => {}
        }
    }
}
