//! The emitters: type definitions and type references as tokens, and the
//! formatted code's object and enum macros.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::*;

/// The runtime macros [`wrap_macros`] writes, each with its marker: a
/// module that holds a marker imports the macro.
pub(crate) const MACROS: [(&str, &str); 4] = [
    (STRING_ENUM, "string_enum"),
    (OBJECT, "object"),
    (CLOSED_OBJECT, "closed_object"),
    (ONE_OF, "one_of"),
];

/// Formatted `code` with each enum marked `#[__idem_string_enum]` wrapped in
/// `string_enum! { … }` (imported from `idem_runtime::rt`), and each struct marked
/// `#[__idem_object]` (`#[__idem_closed_object]`) in `object! { … }`
/// (`closed_object!`): formatted as an item first, so its doc comments,
/// variants and fields read as a person would write them.
pub(crate) fn wrap_macros(code: &str) -> String {
    let markers = MACROS.map(|(marker, name)| (format!("#[{marker}]"), name));
    let mut out = String::with_capacity(code.len() + code.len() / 16);
    let mut open: Option<String> = None;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if let Some((_, name)) = markers.iter().find(|(m, _)| trimmed.trim_end() == m) {
            out.push_str(indent);
            out.push_str(&format!("{name}! {{\n"));
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

impl TypeSpace<'_> {
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
            Ty::Value => quote!(::idem_runtime::rt::serde_json::Value),
            Ty::Bytes => quote!(::idem_runtime::rt::bytes::Bytes),
            Ty::DateTime => {
                quote!(::idem_runtime::rt::chrono::DateTime<::idem_runtime::rt::chrono::Utc>)
            }
            Ty::Date => quote!(::idem_runtime::rt::chrono::NaiveDate),
            Ty::Uuid => quote!(::idem_runtime::rt::uuid::Uuid),
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
                let def = match self.shared_items.get(&i) {
                    Some(item) => item.clone(),
                    None => self.render_def(d, strict),
                };
                let validate = self.render_validate(i, d);
                let gate = self.features.as_ref().and_then(|f| f.gate(i));
                match gate {
                    Some(gate) => {
                        crate::generate::features::gate_items(quote!(#def #validate), &gate)
                    }
                    None => quote!(#def #validate),
                }
            })
            .collect()
    }

    /// `strict`: a request body can hold it, and a server decodes it.
    pub(super) fn render_def(&self, def: &TypeDef, strict: bool) -> TokenStream {
        let name = ident(&def.name);
        let doc = doc_attrs(&def.doc);
        let deprecated = def.deprecated.then(|| quote!(#[deprecated]));
        let serde = quote!(#[serde(crate = "::idem_runtime::rt::serde")]);
        let derive_serde = quote!(
            ::idem_runtime::rt::serde::Serialize,
            ::idem_runtime::rt::serde::Deserialize
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
    pub(super) fn render_object_field(&self, field: &Field, strict: bool) -> TokenStream {
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

    pub(super) fn render_field(&self, field: &Field, strict: bool) -> TokenStream {
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
                .then(|| quote!(deserialize_with = "::idem_runtime::rt::codec::non_null",));
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

    pub(super) fn render_one_of(
        &self,
        def: &TypeDef,
        variants: &[Variant],
        tag: Option<&str>,
    ) -> TokenStream {
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
            quote!(::std::option::Option::Some(#(#tags)|*) => ::idem_runtime::rt::codec::from_value(value).map(Self::#vi),)
        });
        let fallbacks = variants.iter().map(|v| {
            let vi = ident(&v.ident);
            quote! {
                if let ::std::result::Result::Ok(v) = ::idem_runtime::rt::codec::from_value::<_, D::Error>(value.clone()) {
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
            #[derive(Debug, Clone, PartialEq, ::idem_runtime::rt::serde::Serialize)]
            #[serde(crate = "::idem_runtime::rt::serde", untagged)]
            pub enum #name {
                #(#cases)*
            }
            impl<'de> ::idem_runtime::rt::serde::Deserialize<'de> for #name {
                fn deserialize<D: ::idem_runtime::rt::serde::Deserializer<'de>>(deserializer: D) -> ::std::result::Result<Self, D::Error> {
                    let (tag, value) = ::idem_runtime::rt::codec::tagged::<D>(deserializer, #tag)?;
                    match tag.as_deref() {
                        #(#arms)*
                        _ => {
                            #(#fallbacks)*
                            ::std::result::Result::Err(::idem_runtime::rt::codec::unexpected::<D::Error>(#expected))
                        }
                    }
                }
            }
        }
    }
}
