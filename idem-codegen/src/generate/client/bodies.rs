//! A method's request body: the argument it takes, how the call sets it in
//! each media type the operation accepts, and the types it needs.

use proc_macro2::TokenStream;
use quote::quote;

use crate::generate::naming::{self, Namer};
use crate::generate::operation::body_required;
use crate::generate::types::{Site, Ty, TypeDef, TypeSpace, ident};
use crate::model::schema::Kind;
use crate::model::shape::encoding::{Encoding, encoding_name, encoding_of};
use crate::model::{Media, Operation};

/// The body argument, the statements setting it, the items it needs, and
/// (for one media type) the body's type and keywords, which the call
/// validates.
type BodyParts = (BodyArg, TokenStream, Vec<TokenStream>, Vec<Site>);

/// How a method takes its body.
pub(super) enum BodyArg {
    /// It takes none: the operation has no body, or one that can only be
    /// `{}` (sent when the spec requires it).
    None,
    /// A required argument, `body: &T`.
    Required(TokenStream),
    /// Optional, set with `.body(&T)` on the call; the type `T`.
    Optional(TokenStream),
}

/// The body of `op`, as [`BodyParts`].
pub(super) fn request_body(
    space: &mut TypeSpace<'_>,
    op: &Operation,
    camel: &str,
    method: &str,
) -> BodyParts {
    let none = || (BodyArg::None, TokenStream::new(), Vec::new(), Vec::new());
    let Some(body) = &op.request_body else {
        return none();
    };
    let optional = !body_required(op);
    let empty_only = !body.media.is_empty()
        && body.media.iter().all(|m| {
            m.schema.as_ref().is_some_and(|s| {
                matches!(&space.model().schemas.resolve(s).kind,
                    Kind::Object(o) if o.properties.is_empty() && o.closed)
            })
        });
    if empty_only {
        let set = match body.media.first().map(|m| encoding_of(&m.media_type)) {
            _ if optional => TokenStream::new(),
            Some(Encoding::Form) => {
                quote!(request.form(&::idem_runtime::rt::serde_json::Map::new(), &[]);)
            }
            _ => quote!(request.json(&::idem_runtime::rt::serde_json::Map::new());),
        };
        return (BodyArg::None, set, Vec::new(), Vec::new());
    }
    // One entry per encoding; the first media type of each wins.
    let mut choices: Vec<(&Media, Encoding)> = Vec::new();
    for media in &body.media {
        let enc = encoding_of(&media.media_type);
        if !choices.iter().any(|(_, e)| *e == enc) {
            choices.push((media, enc));
        }
    }
    if choices.is_empty() {
        return none();
    }
    let mut items = Vec::new();
    let single = choices.len() == 1;
    let enum_name = (!single).then(|| space.namer.unique(&format!("{camel}Body")));
    let mut variants = Vec::new();
    let mut arms = Vec::new();
    let mut variant_namer = Namer::default();
    let mut sites = Vec::new();
    let multipart = naming::prefixed("multipart", method);
    for (media, enc) in &choices {
        let context = if single {
            format!("{camel}Request")
        } else {
            format!("{camel}Request{}", encoding_name(*enc))
        };
        let ty = match (enc, &media.schema) {
            (Encoding::Text, _) => Ty::String,
            (Encoding::Bytes, _) => Ty::Bytes,
            (_, Some(schema)) => space.ty(schema, &context),
            (_, None) => Ty::Value,
        };
        let ty = match ty {
            Ty::Option(inner) => *inner,
            other => other,
        };
        let media_type = &media.media_type;
        let deep: Vec<&str> = media
            .encoding
            .iter()
            .filter(|e| e.style.as_deref() == Some("deepObject"))
            .map(|e| e.property.as_str())
            .collect();
        let set = |value: TokenStream| match enc {
            Encoding::Json => quote!(request.json(#value);),
            Encoding::Form => quote!(request.form(#value, &[#(#deep),*]);),
            Encoding::Text => {
                quote!(request.raw(#media_type, ::std::string::String::from(#value));)
            }
            Encoding::Bytes => {
                quote!(request.raw(#media_type, ::std::clone::Clone::clone(#value));)
            }
            Encoding::Multipart => quote!(request.multipart(#multipart(#value));),
        };
        if *enc == Encoding::Multipart {
            items.push(multipart_fn(space, &ty, &multipart));
        }
        let tokens = space.tokens(&ty);
        let Some(enum_name) = &enum_name else {
            let arg_ty = match enc {
                Encoding::Text => quote!(str),
                _ => tokens,
            };
            let arg = if optional {
                BodyArg::Optional(arg_ty)
            } else {
                BodyArg::Required(quote!(body: &#arg_ty))
            };
            let checked = match (enc, &media.schema) {
                (Encoding::Text | Encoding::Bytes, _) | (_, None) => Vec::new(),
                (_, Some(schema)) => vec![Site {
                    path: "body".to_owned(),
                    ty: ty.clone(),
                    checks: space.checks(schema),
                    value: quote!(body),
                }],
            };
            return (arg, set(quote!(body)), items, checked);
        };
        let enum_ident = ident(enum_name);
        let variant = ident(&variant_namer.unique(encoding_name(*enc)));
        if let (Encoding::Json | Encoding::Form | Encoding::Multipart, Some(schema)) =
            (enc, &media.schema)
        {
            // The variant the caller picked, when it is this one.
            sites.push(Site {
                path: "body".to_owned(),
                ty: Ty::Option(Box::new(ty.clone())),
                checks: space.checks(schema),
                value: quote! {
                    &match body {
                        #enum_ident::#variant(value) => ::std::option::Option::Some(value),
                        _ => ::std::option::Option::None,
                    }
                },
            });
        }
        let doc = format!(" `{media_type}`");
        variants.push(quote!(#[doc = #doc] #variant(#tokens),));
        let set = set(quote!(value));
        arms.push(quote!(#enum_ident::#variant(value) => { #set }));
    }
    let enum_ident = ident(enum_name.as_deref().unwrap_or("Body"));
    let doc = " The request body, in one of the media types the operation accepts.";
    items.push(quote! {
        #[doc = #doc]
        #[derive(Debug, Clone, PartialEq)]
        pub enum #enum_ident {
            #(#variants)*
        }
    });
    let body_set = quote! {
        match body {
            #(#arms)*
        }
    };
    let arg = if optional {
        BodyArg::Optional(quote!(#enum_ident))
    } else {
        BodyArg::Required(quote!(body: &#enum_ident))
    };
    (arg, body_set, items, sites)
}

/// A function turning a multipart body type into its parts: binary fields
/// as file parts, the rest as text.
fn multipart_fn(space: &TypeSpace<'_>, ty: &Ty, name: &proc_macro2::Ident) -> TokenStream {
    let tokens = space.tokens(ty);
    let fields = match space.plain(ty) {
        Ty::Def(index) => match space.defs.get(index) {
            Some(TypeDef {
                body: crate::generate::types::Body::Struct { fields, .. },
                ..
            }) => Some(fields.clone()),
            _ => None,
        },
        _ => None,
    };
    let parts = match fields {
        Some(fields) => fields
            .iter()
            .map(|f| {
                let field = ident(&f.ident);
                let wire = &f.wire;
                match (&f.ty, f.optional) {
                    (Ty::Bytes, false) => {
                        quote!(parts.bytes(#wire, &body.#field, ::std::option::Option::None);)
                    }
                    (Ty::Bytes, true) => quote! {
                        if let ::std::option::Option::Some(bytes) = &body.#field {
                            parts.bytes(#wire, bytes, ::std::option::Option::None);
                        }
                    },
                    _ => quote!(parts.field(#wire, &body.#field);),
                }
            })
            .collect::<Vec<_>>(),
        None => vec![quote!(parts.field("body", body);)],
    };
    quote! {
        fn #name(body: &#tokens) -> ::idem_runtime::rt::client::Multipart {
            let mut parts = ::idem_runtime::rt::client::Multipart::new();
            #(#parts)*
            parts
        }
    }
}
