//! The definitions as a graph: fields that would make a type of infinite
//! size are boxed, self-referring aliases become newtypes, and repeated
//! inline shapes become one type and aliases.

use super::*;

impl TypeSpace<'_> {
    /// Boxes fields on cycles and turns self-referring aliases into newtypes.
    pub(super) fn settle(&mut self) {
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
    pub(super) fn share_duplicates(&mut self) {
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
    pub(super) fn shape(&self, index: usize) -> Option<String> {
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
}

pub(super) fn boxed(ty: Ty) -> Ty {
    match ty {
        Ty::Option(inner) => Ty::Option(Box::new(Ty::Boxed(inner))),
        other => Ty::Boxed(Box::new(other)),
    }
}

/// Definitions `ty` reaches: through `Option` and `Box` always, through
/// `Vec` and maps only when `through_heap`.
/// The definitions a body's parts name, through heap containers or not
/// (see [`reached`]).
pub(super) fn body_reaches(body: &Body, through_heap: bool, out: &mut Vec<usize>) {
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
pub(super) fn reached(ty: &Ty, through_heap: bool, out: &mut Vec<usize>) {
    match ty {
        Ty::Def(index) => out.push(*index),
        Ty::Option(inner) => reached(inner, through_heap, out),
        Ty::Boxed(inner) | Ty::Vec(inner) | Ty::Map(inner) if through_heap => {
            reached(inner, through_heap, out);
        }
        _ => {}
    }
}

pub(super) fn on_cycle(index: usize, scc: &[usize], edges: &[Vec<usize>]) -> bool {
    let own = scc.get(index);
    let shared = scc.iter().filter(|c| Some(*c) == own).count() > 1;
    shared || edges.get(index).is_some_and(|e| e.contains(&index))
}

/// Strongly connected components (Tarjan's algorithm, iterative): the
/// component id of every node.
pub(super) fn components(edges: &[Vec<usize>]) -> Vec<usize> {
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
