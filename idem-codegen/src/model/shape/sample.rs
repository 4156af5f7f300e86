//! The request an operation is probed with: its path and parameters, and
//! a body from `--body`, the spec's examples, or the smallest instance of
//! its schema; beside it, a valid body that differs in one field (for the
//! mismatch check) and a body the schema forbids (for the stored-refusal
//! check).

use serde_json::{Map, Value};

use crate::model::schema::{Kind, Schema, Schemas, StringFormat, json};
use crate::model::{Model, Operation, Parameter};
use crate::tree::Node;

/// One operation's request.
#[derive(Debug, Clone)]
pub struct Body {
    /// The path with its parameters filled in, percent-encoded.
    pub path: String,
    /// Required query parameters.
    pub query: Vec<(String, String)>,
    /// Required header and cookie parameters the caller does not set (the
    /// key header excluded).
    pub headers: Vec<(String, String)>,
    /// The media type sent, when there is a body.
    pub media_type: Option<String>,
    /// Where the body came from: `--body`, an example, or the schema.
    pub source: &'static str,
    /// The JSON body, when the body is JSON.
    pub json: Option<Value>,
    /// The body's bytes, when it is not JSON (`--body` with another type).
    pub raw: Option<Vec<u8>>,
    /// A valid body that differs from `json` in one field.
    pub variant: Option<Value>,
    /// A body the schema forbids, otherwise like `json`.
    pub invalid: Option<Value>,
}

/// How deep a synthesised instance may nest.
const MAX_DEPTH: usize = 24;

/// The request for `op`, or why the probe cannot make one.
/// `params` are `--param` values, by parameter name.
pub fn request(
    model: &Model,
    op: &Operation,
    given: Option<&[u8]>,
    params: &[(String, String)],
) -> Result<Body, String> {
    let schemas = &model.schemas;
    let key_header = match &op.key.source {
        Some(crate::model::KeySource::Header { name, .. }) => Some(name.as_str()),
        _ => None,
    };
    let mut path = op.path.clone();
    let mut query = Vec::new();
    let mut headers = Vec::new();
    let mut cookies = Vec::new();
    for p in &op.parameters {
        let wanted = p.location == "path" || p.required;
        let is_key =
            p.location == "header" && key_header.is_some_and(|k| k.eq_ignore_ascii_case(&p.name));
        if !wanted || is_key {
            continue;
        }
        let value = match params.iter().find(|(name, _)| *name == p.name) {
            Some((_, value)) => value.clone(),
            None => parameter_value(schemas, p)?,
        };
        match p.location.as_str() {
            "path" => {
                path = path.replace(&format!("{{{}}}", p.name), &percent_encode(&value));
            }
            "query" => query.push((p.name.clone(), value)),
            "header" => headers.push((p.name.clone(), value)),
            "cookie" => cookies.push(format!("{}={value}", p.name)),
            _ => {}
        }
    }
    if !cookies.is_empty() {
        headers.push(("Cookie".to_owned(), cookies.join("; ")));
    }
    let mut body = Body {
        path,
        query,
        headers,
        media_type: None,
        source: "none",
        json: None,
        raw: None,
        variant: None,
        invalid: None,
    };
    let Some(request_body) = &op.request_body else {
        if given.is_some() {
            return Err("`--body` was given, but the operation declares no request body".into());
        }
        return Ok(body);
    };
    let json_media = request_body.media.iter().find(|m| is_json(&m.media_type));
    if let Some(bytes) = given {
        let media = json_media.or(request_body.media.first());
        body.media_type =
            Some(media.map_or_else(|| "application/json".to_owned(), |m| m.media_type.clone()));
        body.source = "--body";
        match serde_json::from_slice::<Value>(bytes) {
            Ok(value) if media.is_none_or(|m| is_json(&m.media_type)) => body.json = Some(value),
            _ => body.raw = Some(bytes.to_vec()),
        }
    } else {
        let Some(media) = json_media else {
            let types: Vec<&str> = request_body
                .media
                .iter()
                .map(|m| m.media_type.as_str())
                .collect();
            return Err(format!(
                "the body is {}; the probe makes JSON bodies only (give one with `--body`)",
                types.join(", ")
            ));
        };
        body.media_type = Some(media.media_type.clone());
        match example(model, op, &media.media_type) {
            Some(value) => {
                body.json = Some(value);
                body.source = "the spec's example";
            }
            None => {
                let schema = media
                    .schema
                    .as_ref()
                    .ok_or("the JSON body has no schema to make an instance of")?;
                body.json = Some(instance(schemas, schema, 0)?);
                body.source = "the schema";
            }
        }
    }
    if let (Some(value), Some(schema)) = (&body.json, json_media.and_then(|m| m.schema.as_ref())) {
        let key_field = match &op.key.source {
            Some(crate::model::KeySource::Body { field }) => Some(field.as_str()),
            _ => None,
        };
        body.variant = vary(schemas, schema, value, key_field);
        body.invalid = forbid(schemas, schema, value, key_field);
    }
    Ok(body)
}

/// Whether `media_type` is JSON (`application/json` or a `+json` type).
pub fn is_json(media_type: &str) -> bool {
    let essence = media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// A parameter's value as text: the smallest instance of its schema.
fn parameter_value(schemas: &Schemas, p: &Parameter) -> Result<String, String> {
    let value = match &p.schema {
        Some(schema) => instance(schemas, schema, 0).map_err(|e| {
            format!(
                "the {} parameter `{}`: {e}; give its value with `--param {}=VALUE`",
                p.location, p.name, p.name
            )
        })?,
        None => Value::String("idem-probe".into()),
    };
    Ok(match value {
        Value::String(s) => s,
        Value::Array(items) => items.iter().map(scalar_text).collect::<Vec<_>>().join(","),
        other => scalar_text(&other),
    })
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Text percent-encoded as RFC 3986 requires of a path segment or a
/// query component: everything but the unreserved characters.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The operation's example for `media_type`: the media type's `example`,
/// its first `examples` entry, then the schema's own `example`.
fn example(model: &Model, op: &Operation, media_type: &str) -> Option<Value> {
    let document = &model.document;
    let paths = document.root().get("paths")?;
    let item = document.resolve(paths.get(&op.path)?).ok()?;
    let operation = item.get(&op.method.as_str().to_ascii_lowercase())?;
    let request_body = document.resolve(operation.get("requestBody")?).ok()?;
    let media = request_body.get("content")?.get(media_type)?;
    if let Some(value) = media.get("example") {
        return Some(json(value));
    }
    if let Some(first) = media
        .get("examples")
        .and_then(Node::as_map)
        .and_then(|m| m.first())
    {
        let resolved = document.resolve(&first.1).ok()?;
        if let Some(value) = resolved.get("value") {
            return Some(json(value));
        }
    }
    let schema = document.resolve(media.get("schema")?).ok()?;
    if let Some(value) = schema.get("example") {
        return Some(json(value));
    }
    schema
        .get("examples")
        .and_then(Node::as_seq)
        .and_then(|s| s.first())
        .map(json)
}

/// The smallest instance of `schema` that meets its constraints.
pub fn instance(schemas: &Schemas, schema: &Schema, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err("the schema nests too deep to make an instance of".into());
    }
    let schema = schemas.resolve(schema);
    let c = schema.constraints.as_deref();
    match &schema.kind {
        Kind::Ref(_) => Err("a reference that names nothing".into()),
        Kind::Object(object) => {
            let mut out = Map::new();
            for p in object.properties.iter().filter(|p| p.required) {
                out.insert(p.name.clone(), instance(schemas, &p.schema, depth + 1)?);
            }
            let min = c.and_then(|c| c.min_properties).unwrap_or(0) as usize;
            for p in object.properties.iter().filter(|p| !p.required) {
                if out.len() >= min {
                    break;
                }
                out.insert(p.name.clone(), instance(schemas, &p.schema, depth + 1)?);
            }
            if out.len() < min {
                return Err(format!(
                    "the object needs {min} properties and declares fewer"
                ));
            }
            Ok(Value::Object(out))
        }
        Kind::Map(values) => {
            let min = c.and_then(|c| c.min_properties).unwrap_or(0);
            let mut out = Map::new();
            for i in 0..min {
                out.insert(format!("k{i}"), instance(schemas, values, depth + 1)?);
            }
            Ok(Value::Object(out))
        }
        Kind::Array(items) => {
            let min = c.and_then(|c| c.min_items).unwrap_or(0) as usize;
            let unique = c.is_some_and(|c| c.unique_items);
            let mut out: Vec<Value> = Vec::with_capacity(min);
            for _ in 0..min {
                let mut item = instance(schemas, items, depth + 1)?;
                while unique && out.contains(&item) {
                    item = vary(schemas, items, &item, None)
                        .filter(|v| !out.contains(v))
                        .ok_or(
                            "the array's items must be unique and the probe cannot tell them apart",
                        )?;
                }
                out.push(item);
            }
            Ok(Value::Array(out))
        }
        Kind::String(format) => string(schema, *format),
        Kind::Integer(_) => integer(schema).map(Value::from),
        Kind::Number(_) => number(schema),
        Kind::Boolean => Ok(Value::Bool(false)),
        Kind::StringEnum(values) => values
            .first()
            .map(|v| Value::String(v.clone()))
            .ok_or_else(|| "an empty enum".into()),
        Kind::IntegerEnum(values) => values
            .first()
            .map(|v| Value::from(*v))
            .ok_or_else(|| "an empty enum".into()),
        Kind::Const(value) => Ok(value.clone()),
        Kind::OneOf {
            variants,
            discriminator,
        } => {
            let mut last = String::from("a oneOf with no variants");
            for (i, variant) in variants.iter().enumerate() {
                match instance(schemas, variant, depth + 1) {
                    Ok(mut value) => {
                        if let (Some(d), Value::Object(map)) = (discriminator, &mut value)
                            && let Some((tag, _)) = d.mapping.iter().find(|(_, v)| *v == i)
                        {
                            map.insert(d.property.clone(), Value::String(tag.clone()));
                        }
                        return Ok(value);
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
        Kind::AllOf(parts) => {
            let mut out = Map::new();
            for part in parts {
                match instance(schemas, part, depth + 1)? {
                    Value::Object(map) => out.extend(map),
                    other if parts.len() == 1 => return Ok(other),
                    _ => return Err("an allOf of parts that are not all objects".into()),
                }
            }
            Ok(Value::Object(out))
        }
        Kind::Any => Ok(Value::Object(Map::new())),
        Kind::Null => Ok(Value::Null),
        Kind::Unsupported(reason) => Err(reason.clone()),
    }
}

/// Text the probe's strings start from: readable in the service's tables.
const TEXT: &str = "idem-probe";

fn string(schema: &Schema, format: StringFormat) -> Result<Value, String> {
    let fixed = match format {
        StringFormat::DateTime => Some("2026-01-01T00:00:00Z"),
        StringFormat::Date => Some("2026-01-01"),
        StringFormat::Uuid => Some("00000000-0000-4000-8000-000000000001"),
        StringFormat::Ipv4 => Some("192.0.2.1"),
        StringFormat::Ipv6 => Some("2001:db8::1"),
        StringFormat::Byte => Some("aWRlbQ=="),
        StringFormat::Binary | StringFormat::Plain => None,
    };
    if let Some(text) = fixed {
        return Ok(Value::String(text.to_owned()));
    }
    let c = schema.constraints.as_deref();
    let min = c.and_then(|c| c.min_length).unwrap_or(0) as usize;
    let max = c.and_then(|c| c.max_length).map(|m| m as usize);
    let fits = |text: &str| {
        let n = text.chars().count();
        n >= min && max.is_none_or(|m| n <= m)
    };
    let sized = |seed: &str| -> String {
        let mut text: String = seed.chars().take(max.unwrap_or(usize::MAX)).collect();
        while text.chars().count() < min {
            text.push('x');
        }
        text
    };
    let Some((pattern, _)) = c.and_then(|c| c.pattern.as_ref()) else {
        return Ok(Value::String(sized(TEXT)));
    };
    let regex = regress::Regex::new(pattern)
        .map_err(|_| format!("the pattern `{pattern}` is not one the probe can read"))?;
    for seed in [
        TEXT,
        "idemprobe",
        "a",
        "A",
        "0",
        "a1",
        "A1",
        "abc",
        "ABC",
        "123",
        "a-1",
        "a_1",
    ] {
        let text = sized(seed);
        if fits(&text) && regex.find(&text).is_some() {
            return Ok(Value::String(text));
        }
    }
    Err(format!(
        "no value the probe tries matches the pattern `{pattern}`"
    ))
}

fn integer(schema: &Schema) -> Result<i64, String> {
    let c = schema.constraints.as_deref();
    let low = c.and_then(|c| c.minimum).map(|b| {
        let v = b.value.ceil() as i64;
        if b.exclusive && (v as f64) <= b.value {
            v + 1
        } else {
            v
        }
    });
    let high = c.and_then(|c| c.maximum).map(|b| {
        let v = b.value.floor() as i64;
        if b.exclusive && (v as f64) >= b.value {
            v - 1
        } else {
            v
        }
    });
    let mut value = match (low, high) {
        (Some(l), _) => l,
        (None, Some(h)) if h < 1 => h,
        _ => 1,
    };
    if let Some(m) = c.and_then(|c| c.multiple_of).filter(|m| *m >= 1.0) {
        let m = m as i64;
        if value % m != 0 {
            value += m - value.rem_euclid(m);
        }
    }
    match high {
        Some(h) if value > h => Err(format!(
            "no integer meets its bounds (from {value}, at most {h})"
        )),
        _ => Ok(value),
    }
}

fn number(schema: &Schema) -> Result<Value, String> {
    let c = schema.constraints.as_deref();
    let low = c.and_then(|c| c.minimum);
    let high = c.and_then(|c| c.maximum);
    let mut value = match low {
        Some(b) if b.exclusive => b.value + 1.0,
        Some(b) => b.value,
        None => 1.0,
    };
    if let Some(m) = c.and_then(|c| c.multiple_of).filter(|m| *m > 0.0) {
        value = (value / m).ceil() * m;
    }
    if let Some(h) = high
        && (value > h.value || (h.exclusive && value >= h.value))
    {
        value = match low {
            Some(l) => (l.value + h.value) / 2.0,
            None => h.value - 1.0,
        };
    }
    Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
}

/// A valid body that differs from `value` in one property (not the key's).
pub fn vary(schemas: &Schemas, schema: &Schema, value: &Value, key: Option<&str>) -> Option<Value> {
    let schema = schemas.resolve(schema);
    let c = schema.constraints.as_deref();
    match (&schema.kind, value) {
        (Kind::Object(object), Value::Object(map)) => {
            for p in &object.properties {
                if Some(p.name.as_str()) == key {
                    continue;
                }
                if let Some(current) = map.get(&p.name)
                    && let Some(changed) = vary(schemas, &p.schema, current, None)
                {
                    let mut out = map.clone();
                    out.insert(p.name.clone(), changed);
                    return Some(Value::Object(out));
                }
            }
            let max = c
                .and_then(|c| c.max_properties)
                .map_or(usize::MAX, |m| m as usize);
            for p in &object.properties {
                if !map.contains_key(&p.name) && map.len() < max && Some(p.name.as_str()) != key {
                    let added = instance(schemas, &p.schema, 1).ok()?;
                    let mut out = map.clone();
                    out.insert(p.name.clone(), added);
                    return Some(Value::Object(out));
                }
            }
            None
        }
        (Kind::String(StringFormat::Plain), Value::String(text)) => {
            let pattern = c.and_then(|c| c.pattern.as_ref());
            let max = c
                .and_then(|c| c.max_length)
                .map_or(usize::MAX, |m| m as usize);
            let mut candidates = Vec::new();
            if text.chars().count() < max {
                candidates.push(format!("{text}2"));
            }
            let mut swapped: Vec<char> = text.chars().collect();
            if let Some(last) = swapped.last_mut() {
                *last = if *last == 'a' { 'b' } else { 'a' };
                candidates.push(swapped.into_iter().collect());
            }
            candidates
                .into_iter()
                .find(|t| match pattern {
                    Some((p, _)) => regress::Regex::new(p).is_ok_and(|r| r.find(t).is_some()),
                    None => true,
                })
                .map(Value::String)
        }
        (Kind::Integer(_), Value::Number(n)) => {
            let v = n.as_i64()?;
            let step = c
                .and_then(|c| c.multiple_of)
                .filter(|m| *m >= 1.0)
                .map_or(1, |m| m as i64);
            [v + step, v - step]
                .into_iter()
                .find(|candidate| within(c, *candidate as f64))
                .map(Value::from)
        }
        (Kind::StringEnum(values), Value::String(text)) => values
            .iter()
            .find(|v| *v != text)
            .map(|v| Value::String(v.clone())),
        (Kind::IntegerEnum(values), Value::Number(n)) => values
            .iter()
            .find(|v| Some(**v) != n.as_i64())
            .map(|v| Value::from(*v)),
        (Kind::Boolean, Value::Bool(b)) => Some(Value::Bool(!b)),
        _ => None,
    }
}

fn within(c: Option<&crate::model::schema::Constraints>, v: f64) -> bool {
    let Some(c) = c else { return true };
    let low = c.minimum.is_none_or(|b| {
        if b.exclusive {
            v > b.value
        } else {
            v >= b.value
        }
    });
    let high = c.maximum.is_none_or(|b| {
        if b.exclusive {
            v < b.value
        } else {
            v <= b.value
        }
    });
    low && high
}

/// `value` with one required property (not the key's) removed: a body the
/// schema forbids that is otherwise the probe's valid one.
fn forbid(schemas: &Schemas, schema: &Schema, value: &Value, key: Option<&str>) -> Option<Value> {
    let schema = schemas.resolve(schema);
    let (Kind::Object(object), Value::Object(map)) = (&schema.kind, value) else {
        return None;
    };
    let required = object
        .properties
        .iter()
        .find(|p| p.required && Some(p.name.as_str()) != key && map.contains_key(&p.name))?;
    let mut out = map.clone();
    out.remove(&required.name);
    Some(Value::Object(out))
}
