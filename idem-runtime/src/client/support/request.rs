//! A request as a generated method describes it: the path, the query by
//! each parameter's OpenAPI `style`, headers, and the body by media type
//! (JSON, form with nested `deepObject` fields, multipart, bytes, text).

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Serialize;
use serde_json::Value;

/// How a parameter is serialized (OpenAPI `style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Form,
    SpaceDelimited,
    PipeDelimited,
    DeepObject,
}

/// One request being described.
#[derive(Debug)]
pub struct Request {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) query: Vec<(String, String)>,
    pub(super) headers: HeaderMap,
    pub(super) cookies: Vec<String>,
    pub(super) body: Option<Body>,
    pub(super) problem: Option<String>,
    pub(super) invalid: Option<crate::validate::Violations>,
}

#[derive(Debug)]
pub(super) enum Body {
    Json(Value),
    Form {
        value: Value,
        deep: &'static [&'static str],
    },
    Raw {
        content_type: String,
        bytes: Bytes,
    },
    Multipart(Multipart),
    /// A file read as it is sent, opened again on each attempt.
    File {
        content_type: String,
        path: std::path::PathBuf,
    },
    /// A stream of bytes, which can be sent once.
    Stream {
        content_type: String,
        body: Arc<std::sync::Mutex<Option<reqwest::Body>>>,
    },
}

/// A body read as it is sent rather than held in memory.
#[derive(Debug, Clone)]
pub(crate) enum Upload {
    File(std::path::PathBuf),
    Stream(Arc<std::sync::Mutex<Option<reqwest::Body>>>),
}

impl Request {
    /// `method` on `path`, whose parameters are already encoded (see [`segment`]).
    pub fn new(method: Method, path: String) -> Self {
        Request {
            method,
            path,
            query: Vec::new(),
            headers: HeaderMap::new(),
            cookies: Vec::new(),
            body: None,
            problem: None,
            invalid: None,
        }
    }

    /// Records what `validator` found: a request that breaks its schema is
    /// never sent ([`ApiError::Invalid`](super::ApiError::Invalid)).
    #[must_use]
    pub fn validated(mut self, validator: crate::validate::Validator) -> Self {
        self.check(validator);
        self
    }

    /// Like [`Request::validated`], in place: what `validator` found is
    /// added to what earlier checks found.
    pub fn check(&mut self, validator: crate::validate::Validator) {
        if let Err(violations) = validator.finish() {
            match &mut self.invalid {
                Some(earlier) => earlier.extend(violations),
                None => self.invalid = Some(violations),
            }
        }
    }

    fn fail(&mut self, what: impl fmt::Display) {
        if self.problem.is_none() {
            self.problem = Some(what.to_string());
        }
    }

    /// Adds query parameter `name` encoded by `style` and `explode`; `None`
    /// (or JSON `null`) adds nothing.
    pub fn query<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
        style: Style,
        explode: bool,
    ) {
        match serde_json::to_value(value) {
            Ok(Value::Null) => {}
            Ok(value) => encode_param(name, &value, style, explode, &mut self.query),
            Err(e) => self.fail(format_args!("query parameter {name}: {e}")),
        }
    }

    /// Sets header `name` (simple style); `None` sets nothing.
    pub fn header<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) {
        let text = match serde_json::to_value(value) {
            Ok(Value::Null) => return,
            Ok(value) => simple(&value),
            Err(e) => return self.fail(format_args!("header {name}: {e}")),
        };
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&text),
        ) {
            (Ok(name), Ok(value)) => {
                self.headers.insert(name, value);
            }
            _ => self.fail(format_args!(
                "header {name}: {text:?} is not a valid header value"
            )),
        }
    }

    /// Adds cookie `name` (form style); `None` adds nothing.
    pub fn cookie<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) {
        match serde_json::to_value(value) {
            Ok(Value::Null) => {}
            Ok(value) => self.cookies.push(format!("{name}={}", simple(&value))),
            Err(e) => self.fail(format_args!("cookie {name}: {e}")),
        }
    }

    /// A JSON body.
    pub fn json<T: Serialize + ?Sized>(&mut self, body: &T) {
        match serde_json::to_value(body) {
            Ok(value) => self.body = Some(Body::Json(value)),
            Err(e) => self.fail(format_args!("request body: {e}")),
        }
    }

    /// An `application/x-www-form-urlencoded` body. Nested objects and
    /// arrays are written with brackets (`metadata[plan]=pro`,
    /// `items[0][price]=p_1`); top-level arrays named in `deep` are indexed
    /// too, the others repeat their name.
    pub fn form<T: Serialize + ?Sized>(&mut self, body: &T, deep: &'static [&'static str]) {
        match serde_json::to_value(body) {
            Ok(value) => self.body = Some(Body::Form { value, deep }),
            Err(e) => self.fail(format_args!("request body: {e}")),
        }
    }

    /// A raw body of `content_type` (octet-stream, text, …).
    pub fn raw(&mut self, content_type: &str, bytes: impl Into<Bytes>) {
        self.body = Some(Body::Raw {
            content_type: content_type.to_owned(),
            bytes: bytes.into(),
        });
    }

    /// A body of `content_type` read from the file at `path` as it is
    /// sent, never whole in memory; each attempt opens the file again.
    pub fn file(&mut self, content_type: &str, path: impl Into<std::path::PathBuf>) {
        self.body = Some(Body::File {
            content_type: content_type.to_owned(),
            path: path.into(),
        });
    }

    /// A body of `content_type` read from `stream` as it is sent. A stream
    /// can be read once, so the call makes one attempt.
    pub fn stream<S, X>(&mut self, content_type: &str, stream: S)
    where
        S: futures_util::Stream<Item = Result<Bytes, X>> + Send + 'static,
        X: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.body = Some(Body::Stream {
            content_type: content_type.to_owned(),
            body: Arc::new(std::sync::Mutex::new(Some(reqwest::Body::wrap_stream(
                stream,
            )))),
        });
    }

    /// A `multipart/form-data` body.
    pub fn multipart(&mut self, parts: Multipart) {
        self.body = Some(Body::Multipart(parts));
    }
}

/// The parts of a `multipart/form-data` body; rebuilt for every attempt.
#[derive(Debug, Default, Clone)]
pub struct Multipart {
    pub(super) parts: Vec<(String, Part)>,
}

#[derive(Debug, Clone)]
pub(super) enum Part {
    Text(String),
    Bytes {
        bytes: Bytes,
        file_name: Option<String>,
    },
}

impl Multipart {
    pub fn new() -> Self {
        Self::default()
    }

    /// A field serialized as text (strings as they are, the rest as JSON).
    pub fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> &mut Self {
        match serde_json::to_value(value) {
            Ok(Value::Null) => {}
            Ok(Value::String(s)) => self.parts.push((name.to_owned(), Part::Text(s))),
            Ok(other) => self
                .parts
                .push((name.to_owned(), Part::Text(other.to_string()))),
            Err(_) => {}
        }
        self
    }

    /// A file or binary field.
    pub fn bytes(&mut self, name: &str, bytes: &Bytes, file_name: Option<&str>) -> &mut Self {
        self.parts.push((
            name.to_owned(),
            Part::Bytes {
                bytes: bytes.clone(),
                file_name: file_name
                    .map(str::to_owned)
                    .or_else(|| Some(name.to_owned())),
            },
        ));
        self
    }

    pub(super) fn form(&self) -> reqwest::multipart::Form {
        let mut form = reqwest::multipart::Form::new();
        for (name, part) in &self.parts {
            form = match part {
                Part::Text(text) => form.text(name.clone(), text.clone()),
                Part::Bytes { bytes, file_name } => {
                    let mut part =
                        reqwest::multipart::Part::stream(reqwest::Body::from(bytes.clone()));
                    if let Some(file_name) = file_name {
                        part = part.file_name(file_name.clone());
                    }
                    form.part(name.clone(), part)
                }
            };
        }
        form
    }
}

/// Percent-encodes a path parameter as one segment (simple style).
pub fn segment<T: Serialize + ?Sized>(value: &T) -> String {
    let text = serde_json::to_value(value)
        .map(|v| simple(&v))
        .unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A scalar as text; arrays and objects comma-joined (simple style).
pub(super) fn simple(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(simple).collect::<Vec<_>>().join(","),
        Value::Object(map) => map
            .iter()
            .flat_map(|(k, v)| [k.clone(), simple(v)])
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

pub(super) fn encode_param(
    name: &str,
    value: &Value,
    style: Style,
    explode: bool,
    out: &mut Vec<(String, String)>,
) {
    match (style, value) {
        (Style::DeepObject, _) => deep(name.to_owned(), value, out),
        (_, Value::Array(items)) if explode => {
            out.extend(items.iter().map(|v| (name.to_owned(), simple(v))));
        }
        (Style::SpaceDelimited, Value::Array(items)) => {
            out.push((
                name.to_owned(),
                items.iter().map(simple).collect::<Vec<_>>().join(" "),
            ));
        }
        (Style::PipeDelimited, Value::Array(items)) => {
            out.push((
                name.to_owned(),
                items.iter().map(simple).collect::<Vec<_>>().join("|"),
            ));
        }
        (_, Value::Object(map)) if explode => {
            for (k, v) in map {
                if !v.is_null() {
                    out.push((k.clone(), simple(v)));
                }
            }
        }
        _ => out.push((name.to_owned(), simple(value))),
    }
}

/// `name[a][b]=v`, arrays indexed: the nested form encoding Stripe reads.
pub(super) fn deep(name: String, value: &Value, out: &mut Vec<(String, String)>) {
    // An explicit stack: nesting is as deep as the caller's data.
    let mut todo = vec![(name, value)];
    while let Some((name, value)) = todo.pop() {
        match value {
            Value::Null => {}
            Value::Object(map) => {
                for (k, v) in map.iter().rev() {
                    todo.push((format!("{name}[{k}]"), v));
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate().rev() {
                    todo.push((format!("{name}[{i}]"), v));
                }
            }
            scalar => out.push((name, simple(scalar))),
        }
    }
}

pub(super) fn form_pairs(value: &Value, deep_fields: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Value::Object(map) = value {
        for (k, v) in map {
            match v {
                Value::Null => {}
                Value::Object(_) => deep(k.clone(), v, &mut out),
                Value::Array(items)
                    if deep_fields.contains(&k.as_str())
                        || items.iter().any(|i| i.is_object() || i.is_array()) =>
                {
                    deep(k.clone(), v, &mut out);
                }
                _ => encode_param(k, v, Style::Form, true, &mut out),
            }
        }
    }
    out
}

pub(super) fn form_urlencoded_pairs(pairs: &[(String, String)]) -> Vec<u8> {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .finish()
        .into_bytes()
}
