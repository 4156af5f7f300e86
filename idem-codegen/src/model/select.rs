//! Generating part of an API: the operations chosen by tag, operationId or
//! path prefix. The audit always runs on the whole model first, so the gate
//! never narrows; only what is generated does.

use super::{Model, Operation};

/// Which operations to generate. An operation is chosen when any of its
/// tags is in `tags`, or an entry of `operations` is its operationId or a
/// prefix of its path (an entry starting with `/`, matched on whole
/// segments: `/v1/charges` chooses `/v1/charges` and `/v1/charges/{id}`,
/// not `/v1/charges_search`). Empty: every operation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub tags: Vec<String>,
    pub operations: Vec<String>,
}

/// A selection that names something the spec does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("no tag `{name}` in the spec{}", did_you_mean(suggestion))]
    UnknownTag {
        name: String,
        suggestion: Option<String>,
    },
    #[error("no operation `{name}` in the spec{}", did_you_mean(suggestion))]
    UnknownOperation {
        name: String,
        suggestion: Option<String>,
    },
    #[error("no path starts with `{prefix}`{}", did_you_mean(suggestion))]
    NoPathUnder {
        prefix: String,
        suggestion: Option<String>,
    },
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|s| format!("; did you mean `{s}`?"))
        .unwrap_or_default()
}

impl Selection {
    /// Everything.
    pub fn all() -> Self {
        Self::default()
    }

    /// The operations carrying any of `tags`.
    pub fn tags<I, S>(tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Selection {
            tags: tags.into_iter().map(Into::into).collect(),
            operations: Vec::new(),
        }
    }

    /// The operations with these operationIds or under these path
    /// prefixes (entries starting with `/`).
    pub fn operations<I, S>(operations: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Selection {
            tags: Vec::new(),
            operations: operations.into_iter().map(Into::into).collect(),
        }
    }

    /// This selection and `other`'s: an operation either chooses is chosen.
    pub fn and(mut self, other: Selection) -> Self {
        self.tags.extend(other.tags);
        self.operations.extend(other.operations);
        self
    }

    /// Whether the selection keeps every operation.
    pub fn is_all(&self) -> bool {
        self.tags.is_empty() && self.operations.is_empty()
    }

    /// Whether `op` is chosen.
    pub fn chooses(&self, op: &Operation) -> bool {
        self.is_all()
            || op.tags.iter().any(|t| self.tags.contains(t))
            || self.operations.iter().any(|entry| {
                if entry.starts_with('/') {
                    under(&op.path, entry)
                } else {
                    op.operation_id.as_deref() == Some(entry.as_str())
                }
            })
    }

    /// Check that every entry names something in `model`, then keep only
    /// the chosen operations. Run it after the audit.
    pub fn narrow(&self, model: &mut Model) -> Result<(), SelectError> {
        if self.is_all() {
            return Ok(());
        }
        let tags: Vec<&str> = {
            let mut tags: Vec<&str> = model
                .operations
                .iter()
                .flat_map(|op| op.tags.iter().map(String::as_str))
                .collect();
            tags.sort_unstable();
            tags.dedup();
            tags
        };
        for tag in &self.tags {
            if !tags.contains(&tag.as_str()) {
                return Err(SelectError::UnknownTag {
                    name: tag.clone(),
                    suggestion: closest(tag, tags.iter().copied()),
                });
            }
        }
        for entry in &self.operations {
            if entry.starts_with('/') {
                if !model.operations.iter().any(|op| under(&op.path, entry)) {
                    return Err(SelectError::NoPathUnder {
                        prefix: entry.clone(),
                        suggestion: closest(
                            entry,
                            model.operations.iter().map(|op| op.path.as_str()),
                        ),
                    });
                }
            } else if !model
                .operations
                .iter()
                .any(|op| op.operation_id.as_deref() == Some(entry.as_str()))
            {
                return Err(SelectError::UnknownOperation {
                    name: entry.clone(),
                    suggestion: closest(
                        entry,
                        model
                            .operations
                            .iter()
                            .filter_map(|op| op.operation_id.as_deref()),
                    ),
                });
            }
        }
        model.operations.retain(|op| self.chooses(op));
        model.narrowed = true;
        Ok(())
    }
}

/// `path` is `prefix` or lies below it, segment by segment.
fn under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    prefix.is_empty()
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The candidate most like `name`, when one is close enough to be meant.
fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    let wanted = name.to_lowercase();
    candidates
        .map(|c| (strsim::jaro_winkler(&wanted, &c.to_lowercase()), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.to_owned())
}

/// Which named schemas `model`'s operations reach: through parameters,
/// request and response bodies and response headers, then through every
/// reference, property, item, `oneOf`/`anyOf` variant (a discriminator's
/// mapping names variants) and `allOf` part.
pub(crate) fn reached_schemas(model: &Model) -> Vec<bool> {
    use super::schema::Kind;
    let mut reached = vec![false; model.schemas.named.len()];
    let mut todo: Vec<&super::Schema> = Vec::new();
    for op in &model.operations {
        todo.extend(op.parameters.iter().filter_map(|p| p.schema.as_ref()));
        if let Some(body) = &op.request_body {
            todo.extend(body.media.iter().filter_map(|m| m.schema.as_ref()));
        }
        for response in &op.responses {
            todo.extend(response.media.iter().filter_map(|m| m.schema.as_ref()));
            todo.extend(
                response
                    .header_specs
                    .iter()
                    .filter_map(|h| h.schema.as_ref()),
            );
        }
    }
    while let Some(schema) = todo.pop() {
        match &schema.kind {
            Kind::Ref(id) => {
                if let Some(slot) = reached.get_mut(id.0)
                    && !*slot
                {
                    *slot = true;
                    if let Some(named) = model.schemas.get(*id) {
                        todo.push(&named.schema);
                    }
                }
            }
            Kind::Object(object) => {
                todo.extend(object.properties.iter().map(|p| &p.schema));
                todo.extend(object.additional.as_deref());
            }
            Kind::Map(inner) | Kind::Array(inner) => todo.push(inner),
            Kind::OneOf { variants, .. } => todo.extend(variants.iter()),
            Kind::AllOf(parts) => todo.extend(parts.iter()),
            Kind::String(_)
            | Kind::Integer(_)
            | Kind::Number(_)
            | Kind::Boolean
            | Kind::StringEnum(_)
            | Kind::IntegerEnum(_)
            | Kind::Const(_)
            | Kind::Any
            | Kind::Null
            | Kind::Unsupported(_) => {}
        }
    }
    reached
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_segments() {
        assert!(under("/v1/charges", "/v1/charges"));
        assert!(under("/v1/charges/{id}", "/v1/charges"));
        assert!(under("/v1/charges/{id}", "/v1/charges/"));
        assert!(!under("/v1/charges_search", "/v1/charges"));
        assert!(under("/anything", "/"));
    }
}
