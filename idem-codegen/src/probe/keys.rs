//! The keys a probe sends: what the spec says a key may be, and keys made
//! to satisfy it, unique per run and recognisable in the report.

use crate::model::schema::{Kind, StringFormat};
use crate::model::{KeySource, Model, Operation};

/// What the spec (the key parameter's schema, or the vocabulary) says of an
/// operation's key. Only these are held against the service; idem's own
/// protocol rule (visible ASCII) is advice unless the spec states it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyShape {
    pub min_length: usize,
    /// The declared maximum, and where it was declared.
    pub max_length: Option<(usize, &'static str)>,
    /// The schema's `pattern` (ECMA-262, unanchored).
    pub pattern: Option<String>,
    /// `format: uuid`.
    pub uuid: bool,
}

/// What idem's protocol allows a key when the spec says nothing: the
/// length a store keeps, in visible ASCII.
pub const PROTOCOL_MAX_LENGTH: usize = 255;

impl KeyShape {
    /// The key shape `op` declares.
    pub fn of(model: &Model, op: &Operation) -> KeyShape {
        let schema = match &op.key.source {
            Some(KeySource::Header {
                parameter: Some(i), ..
            }) => op.parameters.get(*i).and_then(|p| p.schema.as_ref()),
            _ => None,
        };
        let schema = schema.map(|s| model.schemas.resolve(s));
        let constraints = schema.and_then(|s| s.constraints.as_deref());
        let from_schema = constraints
            .and_then(|c| c.max_length)
            .map(|n| (usize::try_from(n).unwrap_or(usize::MAX), "the key's schema"));
        let from_vocabulary = op
            .ext
            .key_max_length
            .or(model.root.idempotency.key_max_length)
            .map(|l| (l.value as usize, "`key-max-length`"));
        KeyShape {
            min_length: constraints
                .and_then(|c| c.min_length)
                .map_or(1, |n| usize::try_from(n).unwrap_or(1).max(1)),
            // The tighter of the two, when both are given.
            max_length: match (from_schema, from_vocabulary) {
                (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
                (a, b) => a.or(b),
            },
            pattern: constraints.and_then(|c| c.pattern.as_ref().map(|(p, _)| p.clone())),
            uuid: schema.is_some_and(|s| s.kind == Kind::String(StringFormat::Uuid)),
        }
    }

    /// Whether `key` satisfies every declared rule.
    pub fn accepts(&self, key: &str) -> bool {
        let chars = key.chars().count();
        chars >= self.min_length
            && self.max_length.is_none_or(|(max, _)| chars <= max)
            && (!self.uuid || uuid::Uuid::parse_str(key).is_ok())
            && self.pattern.as_deref().is_none_or(|p| matches(p, key))
    }

    /// The longest key the probe makes: the declared maximum, or the
    /// protocol's.
    pub fn longest(&self) -> usize {
        self.max_length.map_or(PROTOCOL_MAX_LENGTH, |(max, _)| max)
    }

    /// Whether a key of visible ASCII characters is what the spec declares
    /// (its pattern refuses a space), so a key with a space must be refused.
    pub fn declares_characters(&self) -> bool {
        self.uuid || self.pattern.as_deref().is_some_and(|p| !matches(p, "a b"))
    }
}

/// Whether ECMA-262 `pattern` finds a match in `text`; a pattern that does
/// not compile constrains nothing the probe can check.
fn matches(pattern: &str, text: &str) -> bool {
    regress::Regex::new(pattern).map_or(true, |r| r.find(text).is_some())
}

/// Makes the run's keys for one shape.
#[derive(Debug, Clone)]
pub struct KeyMaker {
    /// Twelve hex digits, the same in every key of the run.
    run: String,
    form: Form,
}

/// How keys of one shape are spelled.
#[derive(Debug, Clone, PartialEq)]
enum Form {
    /// A UUID (version 4 bits set) whose first group is the run's and
    /// whose last is the key's number.
    Uuid,
    /// `PREFIX` + the run + `SEP` + the number, cut or padded to fit.
    Text {
        prefix: &'static str,
        sep: &'static str,
        upper: bool,
    },
    /// Digits only: the run read as a number, then the key's number.
    Digits,
}

/// The spellings tried, in order, against a declared pattern.
const FORMS: &[Form] = &[
    Form::Text {
        prefix: "idem-probe-",
        sep: "-",
        upper: false,
    },
    Form::Text {
        prefix: "idemprobe",
        sep: "",
        upper: false,
    },
    Form::Text {
        prefix: "IDEMPROBE",
        sep: "",
        upper: true,
    },
    Form::Text {
        prefix: "idem_probe_",
        sep: "_",
        upper: false,
    },
    Form::Uuid,
    Form::Digits,
];

impl KeyMaker {
    /// A maker whose keys satisfy `shape`, or why none can be made.
    pub fn new(run: &str, shape: &KeyShape) -> Result<KeyMaker, String> {
        let candidates: Vec<Form> = if shape.uuid {
            vec![Form::Uuid]
        } else {
            FORMS.to_vec()
        };
        for form in candidates {
            let maker = KeyMaker {
                run: run.to_owned(),
                form,
            };
            // Numbers of one digit and of several: a pattern may count them.
            if [1, 42, 123_456]
                .iter()
                .all(|n| shape.accepts(&maker.key(*n, shape)))
            {
                return Ok(maker);
            }
        }
        Err(match &shape.pattern {
            Some(p) => format!(
                "the probe cannot make a key that the key's pattern `{p}` accepts{}",
                shape
                    .max_length
                    .map(|(m, _)| format!(" in {m} characters"))
                    .unwrap_or_default()
            ),
            None => format!(
                "the key's bounds ({} to {} characters) leave no room for a key unique to the run",
                shape.min_length,
                shape.longest()
            ),
        })
    }

    /// Key number `n` of the run, fitted to `shape`'s lengths.
    pub fn key(&self, n: usize, shape: &KeyShape) -> String {
        match &self.form {
            Form::Uuid => {
                // 8-4-4-4-12; version 4 and the RFC 4122 variant.
                let run = &self.run[..8];
                let mid = &self.run[8..12];
                format!("{run}-{mid}-4000-8000-{n:012x}")
            }
            Form::Text { prefix, sep, upper } => {
                let run = if *upper {
                    self.run.to_ascii_uppercase()
                } else {
                    self.run.clone()
                };
                fit(&format!("{prefix}{run}{sep}"), &n.to_string(), shape, 'x')
            }
            Form::Digits => {
                let run = u64::from_str_radix(&self.run[..8], 16).unwrap_or(0);
                fit(&format!("{run:010}"), &format!("{n:06}"), shape, '0')
            }
        }
    }

    /// How the report names the run's keys: `idem-probe-3fa2…-*`.
    pub fn pattern(&self, shape: &KeyShape) -> String {
        match &self.form {
            Form::Uuid => format!("{}-{}-4000-8000-*", &self.run[..8], &self.run[8..12]),
            _ => {
                let one = self.key(1, shape);
                format!("{}*", one.strip_suffix('1').unwrap_or(&one))
            }
        }
    }
}

/// `head` + `tail` in `shape`'s lengths: padded with `pad` before the tail
/// to the minimum, the head cut from its start to the maximum (the tail,
/// which makes the key unique, is kept).
fn fit(head: &str, tail: &str, shape: &KeyShape, pad: char) -> String {
    let max = shape.longest();
    let mut head: String = head.to_owned();
    let over = (head.len() + tail.len()).saturating_sub(max);
    head.drain(..over.min(head.len()));
    while head.len() + tail.len() < shape.min_length {
        head.push(pad);
    }
    format!("{head}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(max: Option<usize>, pattern: Option<&str>, uuid: bool) -> KeyShape {
        KeyShape {
            min_length: 1,
            max_length: max.map(|m| (m, "the key's schema")),
            pattern: pattern.map(str::to_owned),
            uuid,
        }
    }

    #[test]
    fn keys_fit_what_the_spec_declares() {
        let run = "3fa2b1c4d5e6";
        let plain = shape(Some(64), None, false);
        let maker = KeyMaker::new(run, &plain).unwrap();
        assert_eq!(maker.key(7, &plain), "idem-probe-3fa2b1c4d5e6-7");
        assert_eq!(maker.pattern(&plain), "idem-probe-3fa2b1c4d5e6-*");

        let uuid = shape(None, None, true);
        let maker = KeyMaker::new(run, &uuid).unwrap();
        let key = maker.key(7, &uuid);
        let parsed = uuid::Uuid::parse_str(&key).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(key, "3fa2b1c4-d5e6-4000-8000-000000000007");

        let alnum = shape(Some(20), Some("^[A-Za-z0-9]{8,20}$"), false);
        let maker = KeyMaker::new(run, &alnum).unwrap();
        let key = maker.key(123, &alnum);
        assert!(alnum.accepts(&key), "{key}");
        assert!(key.ends_with("123"));

        let digits = shape(None, Some("^[0-9]+$"), false);
        let key = KeyMaker::new(run, &digits).unwrap().key(5, &digits);
        assert!(key.chars().all(|c| c.is_ascii_digit()), "{key}");

        let short = shape(Some(6), None, false);
        let key = KeyMaker::new(run, &short).unwrap().key(42, &short);
        assert_eq!(key.len(), 6);
        assert!(key.ends_with("42"));

        let impossible = shape(None, Some("^never$"), false);
        assert!(
            KeyMaker::new(run, &impossible)
                .unwrap_err()
                .contains("`^never$`")
        );
    }

    #[test]
    fn only_declared_rules_are_character_rules() {
        assert!(!shape(Some(255), None, false).declares_characters());
        assert!(shape(None, Some("^[!-~]+$"), false).declares_characters());
        assert!(shape(None, None, true).declares_characters());
        assert!(!shape(None, Some("^.+$"), false).declares_characters());
    }
}
