//! The schema's validation keywords, checked on typed values: what a
//! generated server runs on every input before the key is claimed, and what
//! a generated client runs before the first attempt, so a request the spec
//! forbids is refused in one place and never reaches a database or a wire.
//!
//! Generated code implements [`Validate`] for each type whose schema (or a
//! schema inside it) carries a keyword, and calls the checks below from it;
//! the type system has already enforced `type`, `enum`, `required`,
//! `format`, `additionalProperties: false` and nullability by then.
//!
//! ```
//! use idem_runtime::validate::{Validate, Validator, check};
//! struct NewCharge { amount: i64, currency: String }
//! impl Validate for NewCharge {
//!     fn validate(&self, v: &mut Validator) {
//!         v.at("amount", |v| v.minimum(self.amount, 1.0));
//!         v.at("currency", |v| v.max_length(&self.currency, 3));
//!     }
//! }
//! let bad = NewCharge { amount: 0, currency: "EUR".into() };
//! let err = check("body", &bad).unwrap_err();
//! assert_eq!(err.first().field, "body.amount");
//! assert_eq!(err.first().message, "must be at least 1");
//! assert_eq!(err.first().keyword, "minimum");
//! ```

use std::collections::HashSet;
use std::fmt;

/// A type whose values can break its schema's keywords.
pub trait Validate {
    /// Reports every broken keyword of `self` to `v`.
    fn validate(&self, v: &mut Validator);
}

impl<T: Validate + ?Sized> Validate for &T {
    fn validate(&self, v: &mut Validator) {
        (**self).validate(v);
    }
}

impl<T: Validate + ?Sized> Validate for Box<T> {
    fn validate(&self, v: &mut Validator) {
        (**self).validate(v);
    }
}

impl<T: Validate> Validate for Option<T> {
    fn validate(&self, v: &mut Validator) {
        if let Some(value) = self {
            value.validate(v);
        }
    }
}

impl<T: Validate> Validate for Vec<T> {
    fn validate(&self, v: &mut Validator) {
        v.each(self);
    }
}

impl<T: Validate> Validate for std::collections::BTreeMap<String, T> {
    fn validate(&self, v: &mut Validator) {
        for (key, value) in self {
            v.at(key, |v| value.validate(v));
        }
    }
}

/// One broken keyword.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where, as a path from the request's part: `body.items[0].amount`,
    /// `query.limit`, `path.charge_id`, `header.X-Account-Id`.
    pub field: String,
    /// The JSON Schema keyword (`minimum`, `maxLength`, `pattern`, …).
    pub keyword: &'static str,
    /// What the value must be: `must be at least 1`.
    pub message: String,
}

/// Every broken keyword of one value (at least one), in the order found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violations(Vec<Violation>);

impl Violations {
    /// The first one found: what a `400` names.
    pub fn first(&self) -> &Violation {
        // Never empty: `check` builds one only from a non-empty list.
        &self.0[0]
    }

    /// All of them.
    pub fn all(&self) -> &[Violation] {
        &self.0
    }

    /// Adds what a later check found.
    #[cfg_attr(not(feature = "client"), allow(dead_code))]
    pub(crate) fn extend(&mut self, later: Violations) {
        self.0.extend(later.0);
    }
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.first();
        write!(f, "{}: {}", first.field, first.message)?;
        if self.0.len() > 1 {
            write!(f, " (and {} more)", self.0.len() - 1)?;
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}

/// How many violations one value reports before the rest are left out: a
/// 100,000-item body of bad items costs one walk, not 100,000 messages.
const MAX_REPORTED: usize = 16;

/// Collects violations while generated code walks a value.
#[derive(Debug, Default)]
pub struct Validator {
    path: String,
    found: Vec<Violation>,
}

/// Checks `value`, reporting paths under `root` (`"body"`, `"query"`).
pub fn check<T: Validate + ?Sized>(root: &str, value: &T) -> Result<(), Violations> {
    let mut v = Validator::new(root);
    value.validate(&mut v);
    v.finish()
}

impl Validator {
    /// A validator whose paths start at `root`.
    pub fn new(root: &str) -> Self {
        Validator {
            path: root.to_owned(),
            found: Vec::new(),
        }
    }

    /// `Ok` when nothing was broken.
    pub fn finish(self) -> Result<(), Violations> {
        if self.found.is_empty() {
            Ok(())
        } else {
            Err(Violations(self.found))
        }
    }

    /// Runs `f` one property deeper.
    pub fn at(&mut self, name: &str, f: impl FnOnce(&mut Self)) {
        let len = self.path.len();
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(name);
        f(self);
        self.path.truncate(len);
    }

    /// Runs `f` at item `index`.
    pub fn index(&mut self, index: usize, f: impl FnOnce(&mut Self)) {
        let len = self.path.len();
        self.path.push_str(&format!("[{index}]"));
        f(self);
        self.path.truncate(len);
    }

    /// Validates each item of `items`, at its index.
    pub fn each<T: Validate>(&mut self, items: &[T]) {
        for (index, item) in items.iter().enumerate() {
            if self.full() {
                return;
            }
            self.index(index, |v| item.validate(v));
        }
    }

    /// Runs `check` on each item of `items` (a list, or an optional one),
    /// at its index.
    pub fn each_item<I: Items + ?Sized>(
        &mut self,
        items: &I,
        mut check: impl FnMut(&mut Self, &I::Item),
    ) {
        for (index, item) in items.items().unwrap_or_default().iter().enumerate() {
            if self.full() {
                return;
            }
            self.index(index, |v| check(v, item));
        }
    }

    /// Runs `check` on each value of `map` (or an optional one), at its key.
    pub fn each_value<T>(
        &mut self,
        map: &(impl Entries<T> + ?Sized),
        mut check: impl FnMut(&mut Self, &T),
    ) {
        if let Some(map) = map.entries() {
            for (key, value) in map {
                self.at(key, |v| check(v, value));
            }
        }
    }

    /// Validates a value of a type with its own rules.
    pub fn nested<T: Validate + ?Sized>(&mut self, value: &T) {
        value.validate(self);
    }

    fn full(&self) -> bool {
        self.found.len() >= MAX_REPORTED
    }

    fn report(&mut self, keyword: &'static str, message: String) {
        if !self.full() {
            self.found.push(Violation {
                field: self.path.clone(),
                keyword,
                message,
            });
        }
    }

    /// `minimum`.
    pub fn minimum(&mut self, value: impl Number, bound: f64) {
        if value.as_f64().is_some_and(|v| v < bound) {
            self.report("minimum", format!("must be at least {}", show(bound)));
        }
    }

    /// `exclusiveMinimum` (3.1's number, or 3.0's `true` beside `minimum`).
    pub fn exclusive_minimum(&mut self, value: impl Number, bound: f64) {
        if value.as_f64().is_some_and(|v| v <= bound) {
            self.report(
                "exclusiveMinimum",
                format!("must be more than {}", show(bound)),
            );
        }
    }

    /// `maximum`.
    pub fn maximum(&mut self, value: impl Number, bound: f64) {
        if value.as_f64().is_some_and(|v| v > bound) {
            self.report("maximum", format!("must be at most {}", show(bound)));
        }
    }

    /// `exclusiveMaximum`.
    pub fn exclusive_maximum(&mut self, value: impl Number, bound: f64) {
        if value.as_f64().is_some_and(|v| v >= bound) {
            self.report(
                "exclusiveMaximum",
                format!("must be less than {}", show(bound)),
            );
        }
    }

    /// `multipleOf`: `value / factor` is a whole number.
    pub fn multiple_of(&mut self, value: impl Number, factor: f64) {
        let Some(value) = value.as_f64() else {
            return;
        };
        let quotient = value / factor;
        let whole = quotient.is_finite()
            && (quotient - quotient.round()).abs() <= 1e-9 * quotient.abs().max(1.0);
        if !whole {
            self.report(
                "multipleOf",
                format!("must be a multiple of {}", show(factor)),
            );
        }
    }

    /// `minLength`, in characters (code points), as JSON Schema counts.
    pub fn min_length(&mut self, value: &(impl Text + ?Sized), min: u64) {
        let Some(value) = value.text() else {
            return;
        };
        // Four bytes at most per character: a long value is not counted.
        let bytes = value.len() as u64;
        if bytes < min.saturating_mul(4) && (value.chars().count() as u64) < min {
            self.report(
                "minLength",
                format!("must have at least {}", count(min, "character")),
            );
        }
    }

    /// `maxLength`, in characters.
    pub fn max_length(&mut self, value: &(impl Text + ?Sized), max: u64) {
        let Some(value) = value.text() else {
            return;
        };
        // At least one byte per character: a short value is not counted.
        if value.len() as u64 > max && value.chars().count() as u64 > max {
            self.report(
                "maxLength",
                format!("must have at most {}", count(max, "character")),
            );
        }
    }

    /// `pattern`: the ECMA-262 regular expression `source` matches somewhere
    /// in `value`. Compiled once per process.
    pub fn pattern(&mut self, value: &(impl Text + ?Sized), source: &'static str) {
        let Some(value) = value.text() else {
            return;
        };
        if matches(source, value) == Some(false) {
            self.report("pattern", format!("must match the pattern `{source}`"));
        }
    }

    /// `minItems`.
    pub fn min_items(&mut self, items: &(impl Items + ?Sized), min: u64) {
        let Some(items) = items.items() else {
            return;
        };
        if (items.len() as u64) < min {
            self.report(
                "minItems",
                format!("must have at least {}", count(min, "item")),
            );
        }
    }

    /// `maxItems`.
    pub fn max_items(&mut self, items: &(impl Items + ?Sized), max: u64) {
        let Some(items) = items.items() else {
            return;
        };
        if items.len() as u64 > max {
            self.report(
                "maxItems",
                format!("must have at most {}", count(max, "item")),
            );
        }
    }

    /// `uniqueItems: true`: no two items serialize to the same JSON.
    pub fn unique<I>(&mut self, items: &I)
    where
        I: Items + ?Sized,
        I::Item: serde::Serialize,
    {
        let Some(items) = items.items() else {
            return;
        };
        let mut seen = HashSet::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let text = serde_json::to_string(item).unwrap_or_default();
            if !seen.insert(text) {
                self.report(
                    "uniqueItems",
                    format!("must not repeat an item (item {index} is a repeat)"),
                );
                return;
            }
        }
    }

    /// `minProperties`, given the number of properties present.
    pub fn min_properties(&mut self, present: usize, min: u64) {
        if (present as u64) < min {
            self.report(
                "minProperties",
                format!("must have at least {}", count(min, "property")),
            );
        }
    }

    /// `maxProperties`, given the number present.
    pub fn max_properties(&mut self, present: usize, max: u64) {
        if present as u64 > max {
            self.report(
                "maxProperties",
                format!("must have at most {}", count(max, "property")),
            );
        }
    }

    /// `const`: `holds` says whether the value is `expected` (its JSON).
    pub fn constant(&mut self, holds: bool, expected: &str) {
        if !holds {
            self.report("const", format!("must be {expected}"));
        }
    }
}

/// `n` and its noun: `1 character`, `3 items`, `2 properties`.
fn count(n: u64, noun: &str) -> String {
    match (n, noun) {
        (1, _) => format!("1 {noun}"),
        (_, "property") => format!("{n} properties"),
        _ => format!("{n} {noun}s"),
    }
}

/// A number a bound can be compared with.
///
/// An absent optional value (`None`) has nothing to check.
pub trait Number: Copy {
    /// The value as `f64` (exact for integers up to 2^53, which is what JSON
    /// interoperates on); `None` when absent.
    fn as_f64(self) -> Option<f64>;
}

impl<T: Number> Number for Option<T> {
    fn as_f64(self) -> Option<f64> {
        self.and_then(Number::as_f64)
    }
}

/// Text a length or a pattern can be checked on: a string, or an optional
/// one (absent: nothing to check).
pub trait Text {
    /// The text, `None` when absent.
    fn text(&self) -> Option<&str>;
}

impl Text for str {
    fn text(&self) -> Option<&str> {
        Some(self)
    }
}

impl Text for String {
    fn text(&self) -> Option<&str> {
        Some(self)
    }
}

impl<T: Text> Text for Option<T> {
    fn text(&self) -> Option<&str> {
        self.as_ref().and_then(Text::text)
    }
}

impl<T: Text + ?Sized> Text for &T {
    fn text(&self) -> Option<&str> {
        (**self).text()
    }
}

/// A map whose values can be checked, or an optional one.
pub trait Entries<T> {
    /// The map, `None` when absent.
    fn entries(&self) -> Option<&std::collections::BTreeMap<String, T>>;
}

impl<T> Entries<T> for std::collections::BTreeMap<String, T> {
    fn entries(&self) -> Option<&std::collections::BTreeMap<String, T>> {
        Some(self)
    }
}

impl<T> Entries<T> for Option<std::collections::BTreeMap<String, T>> {
    fn entries(&self) -> Option<&std::collections::BTreeMap<String, T>> {
        self.as_ref()
    }
}

/// Items a count or uniqueness can be checked on: a list, or an optional one.
pub trait Items {
    /// The item type.
    type Item;
    /// The items, `None` when absent.
    fn items(&self) -> Option<&[Self::Item]>;
}

impl<T> Items for [T] {
    type Item = T;
    fn items(&self) -> Option<&[T]> {
        Some(self)
    }
}

impl<T> Items for Vec<T> {
    type Item = T;
    fn items(&self) -> Option<&[T]> {
        Some(self)
    }
}

impl<I: Items> Items for Option<I> {
    type Item = I::Item;
    fn items(&self) -> Option<&[I::Item]> {
        self.as_ref().and_then(Items::items)
    }
}

macro_rules! number {
    ($($t:ty),*) => {$(
        impl Number for $t {
            #[allow(clippy::cast_precision_loss, clippy::cast_lossless, reason = "JSON numbers are doubles")]
            fn as_f64(self) -> Option<f64> { Some(self as f64) }
        }
    )*};
}
number!(i32, i64, u32, u64, f32, f64);

/// A bound as the spec wrote it: `1`, not `1.0`.
fn show(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

type Compiled = std::collections::HashMap<&'static str, Option<regress::Regex>>;

/// Every pattern the process has checked, compiled once.
static PATTERNS: std::sync::OnceLock<std::sync::RwLock<Compiled>> = std::sync::OnceLock::new();

/// Whether `source` matches `value`; `None` when `source` is not ECMA-262
/// (the generator reports those, and nothing is checked against them).
fn matches(source: &'static str, value: &str) -> Option<bool> {
    let cache = PATTERNS.get_or_init(Default::default);
    if let Ok(read) = cache.read()
        && let Some(compiled) = read.get(source)
    {
        return compiled.as_ref().map(|r| r.find(value).is_some());
    }
    let compiled = compile(source);
    let found = compiled.as_ref().map(|r| r.find(value).is_some());
    if let Ok(mut write) = cache.write() {
        write.insert(source, compiled);
    }
    found
}

/// `source` with Unicode semantics, as JSON Schema asks; failing that, as a
/// plain ECMA-262 expression (many specs escape what only the `u` flag
/// forbids, like `\-` outside a class). `None` when neither reads it.
pub fn compile(source: &str) -> Option<regress::Regex> {
    regress::Regex::with_flags(source, "u")
        .or_else(|_| regress::Regex::new(source))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(f: impl FnOnce(&mut Validator)) -> Option<(String, &'static str, String)> {
        let mut v = Validator::new("body");
        f(&mut v);
        v.finish()
            .err()
            .map(|e| e.first().clone())
            .map(|e| (e.field, e.keyword, e.message))
    }

    #[test]
    fn bounds_inclusive_and_exclusive() {
        assert!(one(|v| v.minimum(1_i64, 1.0)).is_none());
        assert_eq!(
            one(|v| v.exclusive_minimum(1_i64, 1.0)).map(|e| e.2),
            Some("must be more than 1".into())
        );
        assert_eq!(
            one(|v| v.maximum(2.5_f64, 2.0)).map(|e| e.1),
            Some("maximum")
        );
        assert!(one(|v| v.maximum(2_i32, 2.0)).is_none());
        assert_eq!(
            one(|v| v.exclusive_maximum(2_u32, 2.0)).map(|e| e.1),
            Some("exclusiveMaximum")
        );
        assert!(one(|v| v.exclusive_maximum(1.99_f32, 2.0)).is_none());
    }

    #[test]
    fn multiples_tolerate_binary_fractions() {
        assert!(one(|v| v.multiple_of(0.3_f64, 0.1)).is_none());
        assert!(one(|v| v.multiple_of(19.99_f64, 0.01)).is_none());
        assert!(one(|v| v.multiple_of(10_i64, 5.0)).is_none());
        assert!(one(|v| v.multiple_of(7_i64, 5.0)).is_some());
        assert!(one(|v| v.multiple_of(0.35_f64, 0.1)).is_some());
    }

    #[test]
    fn lengths_count_characters_not_bytes() {
        // Four characters, ten bytes.
        assert!(one(|v| v.min_length("日本語!", 4)).is_none());
        assert!(one(|v| v.max_length("日本語!", 4)).is_none());
        assert!(one(|v| v.min_length("日本語", 4)).is_some());
        assert!(one(|v| v.max_length("😀😀", 2)).is_none());
        assert!(one(|v| v.max_length("😀😀😀", 2)).is_some());
        assert_eq!(
            one(|v| v.min_length("", 1)).map(|e| e.2),
            Some("must have at least 1 character".into())
        );
    }

    #[test]
    fn patterns_are_ecma_262() {
        assert!(one(|v| v.pattern("123", "^\\d+$")).is_none());
        // ECMA-262 `\d` is ASCII: Arabic-Indic digits are not digits.
        assert!(one(|v| v.pattern("١٢٣", "^\\d+$")).is_some());
        assert!(one(|v| v.pattern("a1", "^(?=.*[a-z])[a-z0-9]+$")).is_none());
        assert!(one(|v| v.pattern("11", "^(?=.*[a-z])[a-z0-9]+$")).is_some());
        // Unanchored: found anywhere.
        assert!(one(|v| v.pattern("xx-12-yy", "\\d{2}")).is_none());
        // Not ECMA-262: nothing is checked (the generator reported it).
        assert!(one(|v| v.pattern("anything", "(?<")).is_none());
    }

    #[test]
    fn items_unique_and_counted() {
        assert!(one(|v| v.unique(&vec![1, 2, 3])).is_none());
        assert_eq!(
            one(|v| v.unique(&vec!["a", "b", "a"])).map(|e| e.1),
            Some("uniqueItems")
        );
        assert!(one(|v| v.min_items(&Vec::<u8>::new(), 1)).is_some());
        // Absent optional values have nothing to check.
        assert!(one(|v| v.min_items(&None::<Vec<u8>>, 1)).is_none());
        assert!(one(|v| v.max_length(&None::<String>, 1)).is_none());
        assert!(one(|v| v.minimum(None::<i64>, 1.0)).is_none());
        assert!(one(|v| v.minimum(Some(0_i64), 1.0)).is_some());
        assert!(one(|v| v.max_items(&[1, 2, 3][..], 2)).is_some());
        assert_eq!(
            one(|v| v.max_properties(3, 2)).map(|e| e.2),
            Some("must have at most 2 properties".into())
        );
    }

    #[test]
    fn items_and_values_are_checked_at_their_place() {
        let tags = Some(vec!["ok".to_owned(), "x".to_owned()]);
        let found = one(|v| v.each_item(&tags, |v, tag| v.min_length(tag, 2)));
        assert_eq!(found.map(|e| e.0), Some("body[1]".into()));
        let mut labels = std::collections::BTreeMap::new();
        labels.insert("a".to_owned(), 0_i64);
        let found = one(|v| v.each_value(&labels, |v, n| v.minimum(*n, 1.0)));
        assert_eq!(found.map(|e| e.0), Some("body.a".into()));
        assert!(one(|v| v.each_item(&None::<Vec<String>>, |v, t| v.min_length(t, 9))).is_none());
    }

    #[test]
    fn paths_name_the_field() {
        let mut v = Validator::new("body");
        v.at("items", |v| {
            v.index(2, |v| v.at("amount", |v| v.minimum(0_i64, 1.0)));
        });
        let err = v.finish().unwrap_err();
        assert_eq!(err.first().field, "body.items[2].amount");
        assert_eq!(err.to_string(), "body.items[2].amount: must be at least 1");
    }

    #[test]
    fn reports_are_capped() {
        let mut v = Validator::new("body");
        for _ in 0..1000 {
            v.minimum(0_i64, 1.0);
        }
        assert_eq!(v.finish().unwrap_err().all().len(), MAX_REPORTED);
    }
}
