//! Request validation: the checks each type and each operation's inputs
//! run, emitted as `Validate` impls and as deferred checks filled in once
//! every type is known.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::*;

impl TypeSpace<'_> {
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

    pub(super) fn render_deferred(&self, deferred: &Deferred) -> TokenStream {
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
            let mut v = ::idem_runtime::rt::Validator::new("");
            #body
            #finish
        }
    }

    /// Marks the definitions whose values have something to check: their
    /// own keywords, or a part that has (computed to a fixed point, so
    /// recursive types settle).
    pub(super) fn mark_validated(&mut self) {
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
    pub(super) fn mark_in_requests(&mut self) {
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

    pub(super) fn def_needs(&self, def: &TypeDef) -> bool {
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
    pub(super) fn needs(&self, ty: &Ty, checks: &Checks) -> bool {
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
            Ty::String => string_checks(checks, value),
            Ty::I32 | Ty::I64 | Ty::U32 | Ty::U64 | Ty::F32 | Ty::F64 => {
                number_checks(ty, checks, value)
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
    pub(super) fn render_validate(&self, index: usize, def: &TypeDef) -> TokenStream {
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
                        arms.push((quote!(Self::#vi(value)), block(&stmts)));
                    }
                }
                match arms.as_slice() {
                    // One variant with checks: `if let`, as clippy asks.
                    [(pattern, stmts)] if rest => quote!(if let #pattern = self { #stmts }),
                    _ => {
                        let arms = arms.iter().map(|(p, s)| quote!(#p => { #s }));
                        let rest = rest.then(|| quote!(_ => {}));
                        quote!(match self { #(#arms)* #rest })
                    }
                }
            }
            Body::Newtype(ty) => block(&self.check_value(ty, &def.checks, &quote!(&self.0))),
            _ => TokenStream::new(),
        };
        quote! {
            impl ::idem_runtime::rt::Validate for #name {
                fn validate(&self, v: &mut ::idem_runtime::rt::Validator) {
                    #body
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
    pub(super) fn call(tokens: TokenStream) -> Self {
        Stmt {
            tokens,
            block_like: false,
            through_option: true,
        }
    }

    /// A call that needs the value itself (`const`).
    pub(super) fn exact(tokens: TokenStream) -> Self {
        Stmt {
            tokens,
            block_like: false,
            through_option: false,
        }
    }

    pub(super) fn block(tokens: TokenStream) -> Self {
        Stmt {
            tokens,
            block_like: true,
            through_option: false,
        }
    }
}

/// Statements as a block's contents.
pub(super) fn block(stmts: &[Stmt]) -> TokenStream {
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
pub(super) fn closure(stmts: &[Stmt]) -> TokenStream {
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
pub(super) fn copied(value: &TokenStream) -> TokenStream {
    let mut tokens = value.clone().into_iter();
    match tokens.next() {
        Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == '&' => tokens.collect(),
        _ => quote!(*#value),
    }
}

/// `value` (an expression of type `&T`) as the receiver of a method call:
/// `self.tags` for `&self.tags` (a leading `&` would otherwise take the
/// call's result), `(**value)` for `&**value`, `value` for `value`.
pub(super) fn receiver(value: &TokenStream) -> TokenStream {
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
pub(super) fn item_closure(stmts: &[Stmt]) -> TokenStream {
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
pub(super) fn property_counts(checks: &Checks) -> Option<(Option<u64>, Option<u64>)> {
    let c = checks.constraints.as_ref()?;
    if c.min_properties.is_none() && c.max_properties.is_none() {
        return None;
    }
    Some((c.min_properties, c.max_properties))
}

pub(super) fn u64_lit(n: u64) -> proc_macro2::Literal {
    proc_macro2::Literal::u64_unsuffixed(n)
}

/// An `f64` literal that reads as the spec wrote it (`1.0`, `0.01`).
pub(super) fn f64_lit(n: f64) -> TokenStream {
    let lit = proc_macro2::Literal::f64_unsuffixed(n);
    quote!(#lit)
}

/// A string's checks: its lengths, its pattern and its `const`.
fn string_checks(checks: &Checks, value: &TokenStream) -> Vec<Stmt> {
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

/// A number's checks: its bounds, `multipleOf` and `const`.
fn number_checks(ty: &Ty, checks: &Checks, value: &TokenStream) -> Vec<Stmt> {
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
