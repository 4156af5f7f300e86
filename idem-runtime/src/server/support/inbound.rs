//! One request, read: its path parameters by the spec's names, its query
//! pairs by their OpenAPI `style`, and [`Node`], the serde deserializer that
//! parses a number or a boolean only where the target type asks for one.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use bytes::Bytes;
use http::header;
use http::request::Parts;
use serde::de::value::{MapDeserializer, SeqDeserializer, StringDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};

use crate::server::key::IdempotencyKey;

use super::rejection::*;

/// The default cap on a request body read by a route without a key (keyed
/// routes use their policy's `max_request_body`).
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// How a query parameter is serialized (OpenAPI `style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `form`: `a=1&a=2` exploded, `a=1,2` not.
    Form,
    /// `spaceDelimited`: `a=1%202`.
    SpaceDelimited,
    /// `pipeDelimited`: `a=1|2`.
    PipeDelimited,
    /// `deepObject`: `a[x]=1&a[y]=2`.
    DeepObject,
}

/// Whether the request's `Content-Length` says its body passes `limit`
/// bytes, so it can be refused before any of it is read.
pub(crate) fn declares_more_than(parts: &Parts, limit: usize) -> bool {
    parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|len| len > limit as u64)
}

/// One request, read: its head, its path parameters by the spec's names,
/// its query pairs and its body.
#[derive(Debug)]
pub struct Inbound {
    /// Shared with the handler's [`Context`], not copied for it.
    parts: std::sync::Arc<Parts>,
    path: Vec<(String, String)>,
    query: Vec<(String, String)>,
    body: Bytes,
    /// An operation that takes a file: its body, left unread for the
    /// handler ([`Self::upload`] takes it).
    upload: std::sync::Mutex<Option<super::Upload>>,
}

impl Inbound {
    /// Reads `request` against the OpenAPI path `template` (`/charges/{id}`),
    /// the body up to `limit` bytes.
    pub async fn read(request: Request, template: &str, limit: usize) -> Result<Self, Rejection> {
        let (parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, limit).await {
            Ok(b) => b,
            Err(_) => return Err(Rejection::too_large(limit)),
        };
        Self::from_parts(parts, body, template)
    }

    /// Reads `request` for an operation that takes a file: the head now,
    /// the body left to the handler as an [`Upload`](super::Upload) read
    /// under `limit` bytes (a declared `Content-Length` over it is refused
    /// here).
    pub fn read_upload(request: Request, template: &str, limit: usize) -> Result<Self, Rejection> {
        let (parts, body) = request.into_parts();
        if declares_more_than(&parts, limit) {
            return Err(Rejection::too_large(limit));
        }
        let inbound = Self::from_parts(parts, Bytes::new(), template)?;
        inbound.set_upload(super::Upload::streamed(body, limit));
        Ok(inbound)
    }

    pub(crate) fn set_upload(&self, upload: super::Upload) {
        if let Ok(mut slot) = self.upload.lock() {
            *slot = Some(upload);
        }
    }

    /// The body of an operation that takes a file, to read chunk by chunk;
    /// taken once (an empty upload after).
    pub fn upload(&self) -> super::Upload {
        self.upload
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
            .unwrap_or_else(super::Upload::empty)
    }

    /// A request as the store keeps it (method, path with query, body), for
    /// a phased operation the completer resumes: it has no headers.
    pub fn stored(
        method: &str,
        path_and_query: &str,
        body: &[u8],
        template: &str,
    ) -> Result<Self, Rejection> {
        let request = http::Request::builder()
            .method(method)
            .uri(path_and_query)
            .body(())
            .map_err(|e| Rejection::invalid("request", e))?;
        let (parts, ()) = request.into_parts();
        Self::from_parts(parts, Bytes::copy_from_slice(body), template)
    }

    /// Path parameters by the template's names, and the query pairs.
    pub(crate) fn from_parts(parts: Parts, body: Bytes, template: &str) -> Result<Self, Rejection> {
        let path = match_template(template, parts.uri.path())
            .ok_or_else(|| Rejection::invalid("path", "does not match the operation's path"))?;
        let query = parts
            .uri
            .query()
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Inbound {
            parts: std::sync::Arc::new(parts),
            path,
            query,
            body,
            upload: std::sync::Mutex::new(None),
        })
    }

    /// The request head.
    pub fn parts(&self) -> &Parts {
        &self.parts
    }

    /// The handler's [`Context`].
    pub fn context(&self) -> Context {
        Context {
            parts: std::sync::Arc::clone(&self.parts),
        }
    }

    /// A path parameter.
    pub fn path<T: DeserializeOwned>(&self, name: &str) -> Result<T, Rejection> {
        let field = || format!("path.{name}");
        let value = self
            .path
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| Rejection::missing(&field()))?;
        T::deserialize(Node::Leaf(value)).map_err(|e| Rejection::invalid(&field(), e))
    }

    /// A query parameter, `None` when absent.
    pub fn query<T: DeserializeOwned>(
        &self,
        name: &str,
        style: Style,
        explode: bool,
    ) -> Result<Option<T>, Rejection> {
        let node = match style {
            Style::DeepObject => {
                let pairs: Vec<(String, String)> = self
                    .query
                    .iter()
                    .filter(|(k, _)| k.starts_with(name) && k[name.len()..].starts_with('['))
                    .map(|(k, v)| (k[name.len()..].to_owned(), v.clone()))
                    .collect();
                if pairs.is_empty() {
                    return Ok(None);
                }
                Node::tree(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            }
            _ => {
                let values: Vec<&str> = self
                    .query
                    .iter()
                    .filter(|(k, _)| k == name)
                    .map(|(_, v)| v.as_str())
                    .collect();
                let delimiter = match style {
                    Style::SpaceDelimited => ' ',
                    Style::PipeDelimited => '|',
                    _ => ',',
                };
                match values.as_slice() {
                    [] => return Ok(None),
                    [one] if !explode && one.contains(delimiter) => Node::List(
                        one.split(delimiter)
                            .map(|v| Node::Leaf(v.to_owned()))
                            .collect(),
                    ),
                    [one] => Node::Leaf((*one).to_owned()),
                    many => Node::List(many.iter().map(|v| Node::Leaf((*v).to_owned())).collect()),
                }
            }
        };
        T::deserialize(node)
            .map(Some)
            .map_err(|e| Rejection::invalid(&format!("query.{name}"), e))
    }

    /// A header parameter, `None` when absent.
    pub fn header<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, Rejection> {
        let field = || format!("header.{name}");
        let values: Vec<String> = self
            .parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| {
                v.to_str()
                    .map(str::to_owned)
                    .map_err(|_| Rejection::invalid(&field(), "not visible ASCII"))
            })
            .collect::<Result<_, _>>()?;
        let node = match values.as_slice() {
            [] => return Ok(None),
            [one] if one.contains(',') => Node::List(
                one.split(',')
                    .map(|v| Node::Leaf(v.trim().to_owned()))
                    .collect(),
            ),
            [one] => Node::Leaf(one.clone()),
            many => Node::List(many.iter().cloned().map(Node::Leaf).collect()),
        };
        // A comma may be part of a scalar value (a date): try it whole first.
        if let Node::List(_) = &node
            && let [one] = values.as_slice()
            && let Ok(whole) = T::deserialize(Node::Leaf(one.clone()))
        {
            return Ok(Some(whole));
        }
        T::deserialize(node)
            .map(Some)
            .map_err(|e| Rejection::invalid(&field(), e))
    }

    /// A cookie parameter, `None` when absent.
    pub fn cookie<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, Rejection> {
        let value = self
            .parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_owned());
        match value {
            None => Ok(None),
            Some(v) => T::deserialize(Node::Leaf(v))
                .map(Some)
                .map_err(|e| Rejection::invalid(&format!("cookie.{name}"), e)),
        }
    }

    /// The essence of the request's content type (`application/json`),
    /// lowercased; empty when there is none.
    pub fn content_type(&self) -> String {
        self.parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default()
    }

    /// Whether a body was sent.
    pub fn has_body(&self) -> bool {
        !self.body.is_empty()
            || self
                .upload
                .lock()
                .is_ok_and(|slot| slot.as_ref().is_some_and(super::Upload::is_pending))
    }

    /// The body as JSON.
    ///
    /// Decoded [strictly](crate::codec::strictly): an explicit `null` for a
    /// property whose schema is not nullable is refused.
    ///
    /// JSON Schema's `integer` is a mathematical one: `1.0` is the integer
    /// one. Bodies are read straight into their types; only one that fails is
    /// read again with its whole-valued floats as integers, so the common
    /// case costs nothing.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Rejection> {
        // Where a body fails is tracked only once it has failed.
        if let Ok(value) = crate::codec::strictly(|| serde_json::from_slice::<T>(&self.body)) {
            return Ok(value);
        }
        let de = &mut serde_json::Deserializer::from_slice(&self.body);
        let first = match crate::codec::strictly(|| serde_path_to_error::deserialize(de)) {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&self.body)
            && crate::codec::integral_floats_as_integers(&mut value)
        {
            return crate::codec::strictly(|| serde_path_to_error::deserialize(value))
                .map_err(|e| body_rejection(e.path(), e.inner()));
        }
        Err(body_rejection(first.path(), first.inner()))
    }

    /// The body as `application/x-www-form-urlencoded`, nested keys
    /// (`card[number]`, `items[0][price]`) included.
    pub fn form<T: DeserializeOwned>(&self) -> Result<T, Rejection> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(&self.body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let node = Node::tree(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        T::deserialize(node).map_err(|e| Rejection::invalid("body", e))
    }

    /// The body as UTF-8 text.
    pub fn text(&self) -> Result<String, Rejection> {
        String::from_utf8(self.body.to_vec()).map_err(|e| Rejection::invalid("body", e))
    }

    /// The body as bytes.
    pub fn bytes(&self) -> Bytes {
        self.body.clone()
    }

    /// The body as `multipart/form-data`: text parts fill fields by name,
    /// file parts fill byte fields.
    pub async fn multipart<T: DeserializeOwned>(&self) -> Result<T, Rejection> {
        let request = Request::from_parts((*self.parts).clone(), Body::from(self.body.clone()));
        let mut form = axum::extract::Multipart::from_request(request, &())
            .await
            .map_err(|e| Rejection::invalid("body", e.body_text()))?;
        let mut fields: Vec<(String, Node)> = Vec::new();
        loop {
            let field = match form.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(Rejection::invalid("body", e.body_text())),
            };
            let name = field.name().unwrap_or_default().to_owned();
            let is_file = field.file_name().is_some();
            let data = field
                .bytes()
                .await
                .map_err(|e| Rejection::invalid(&format!("body.{name}"), e.body_text()))?;
            let node = if is_file {
                Node::Bytes(data)
            } else {
                match String::from_utf8(data.to_vec()) {
                    Ok(text) => Node::Leaf(text),
                    Err(_) => Node::Bytes(data),
                }
            };
            fields.push((name, node));
        }
        T::deserialize(Node::Map(fields)).map_err(|e| Rejection::invalid("body", e))
    }
}

/// Matches `path` against an OpenAPI template, returning the parameters by
/// name (percent-decoded). Templates may put several parameters or literal
/// text in one segment (`/files/{name}.{ext}`).
pub(crate) fn match_template(template: &str, path: &str) -> Option<Vec<(String, String)>> {
    let template = template.split('?').next().unwrap_or(template);
    // A template without parameters matches its own text.
    if !template.contains('{') && !path.contains('%') {
        return (template.trim_matches('/') == path.trim_matches('/')).then(Vec::new);
    }
    let t_segments: Vec<&str> = template.trim_matches('/').split('/').collect();
    let p_segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if t_segments.len() != p_segments.len() {
        return None;
    }
    let mut out = Vec::new();
    for (t, p) in t_segments.iter().zip(&p_segments) {
        let decoded = percent_decode(p);
        match_segment(t, &decoded, &mut out)?;
    }
    Some(out)
}

pub(crate) fn match_segment(
    template: &str,
    value: &str,
    out: &mut Vec<(String, String)>,
) -> Option<()> {
    let mut rest_t = template;
    let mut rest_v = value;
    while !rest_t.is_empty() {
        match rest_t.find('{') {
            None => return (rest_v == rest_t).then_some(()),
            Some(0) => {
                let close = rest_t.find('}')?;
                let name = &rest_t[1..close];
                rest_t = &rest_t[close + 1..];
                // The parameter runs to the next literal text (or the end).
                let literal = &rest_t[..rest_t.find('{').unwrap_or(rest_t.len())];
                let end = if literal.is_empty() {
                    rest_v.len()
                } else {
                    rest_v.rfind(literal)?
                };
                out.push((name.to_owned(), rest_v[..end].to_owned()));
                rest_v = &rest_v[end..];
            }
            Some(open) => {
                let literal = &rest_t[..open];
                rest_v = rest_v.strip_prefix(literal)?;
                rest_t = &rest_t[open..];
            }
        }
    }
    rest_v.is_empty().then_some(())
}

pub(crate) fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%'
            && let Some(hex) = segment.get(i + 1..i + 3)
            && let Ok(v) = u8::from_str_radix(hex, 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Text parameters as serde input: a leaf is parsed as a number or a
/// boolean only when the target type asks for one.
#[derive(Debug, Clone)]
pub enum Node {
    /// One text value.
    Leaf(String),
    /// A binary value (a multipart file).
    Bytes(Bytes),
    /// Repeated values.
    List(Vec<Node>),
    /// Named values (`a[x]=1`).
    Map(Vec<(String, Node)>),
}

impl Node {
    /// A tree from bracketed keys: `[x][y]` paths, or `a[x][0]` form keys.
    pub(crate) fn tree<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Node {
        let mut root = Tree::default();
        for (key, value) in pairs {
            let mut path: Vec<&str> = Vec::new();
            let (head, mut rest) = match key.find('[') {
                Some(0) => ("", key),
                Some(i) => (&key[..i], &key[i..]),
                None => (key, ""),
            };
            if !head.is_empty() {
                path.push(head);
            }
            while let Some(stripped) = rest.strip_prefix('[') {
                let Some(close) = stripped.find(']') else {
                    break;
                };
                path.push(&stripped[..close]);
                rest = &stripped[close + 1..];
            }
            root.insert(&path, value);
        }
        root.into_node()
    }
}

#[derive(Default)]
pub(crate) struct Tree {
    values: Vec<String>,
    children: BTreeMap<String, Tree>,
    order: Vec<String>,
}

impl Tree {
    fn insert(&mut self, path: &[&str], value: &str) {
        match path.split_first() {
            None => self.values.push(value.to_owned()),
            Some((first, rest)) => {
                // `a[]=1&a[]=2`: an empty segment appends.
                let name = if first.is_empty() {
                    self.order.len().to_string()
                } else {
                    (*first).to_owned()
                };
                if !self.children.contains_key(&name) {
                    self.order.push(name.clone());
                }
                self.children.entry(name).or_default().insert(rest, value);
            }
        }
    }

    fn into_node(mut self) -> Node {
        if self.children.is_empty() {
            return match self.values.len() {
                1 => Node::Leaf(self.values.pop().unwrap_or_default()),
                _ => Node::List(self.values.into_iter().map(Node::Leaf).collect()),
            };
        }
        let mut out = Vec::with_capacity(self.order.len());
        for name in self.order {
            if let Some(child) = self.children.remove(&name) {
                out.push((name, child.into_node()));
            }
        }
        Node::Map(out)
    }
}

pub(crate) type DeError = de::value::Error;

macro_rules! parse_leaf {
    ($($method:ident => $visit:ident : $ty:ty),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            match self {
                Node::Leaf(text) => match text.trim().parse::<$ty>() {
                    Ok(v) => visitor.$visit(v),
                    Err(e) => Err(de::Error::custom(format_args!("`{text}`: {e}"))),
                },
                other => other.deserialize_any(visitor),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Node {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self {
            Node::Leaf(text) => visitor.visit_string(text),
            Node::Bytes(bytes) => visitor.visit_byte_buf(bytes.to_vec()),
            Node::List(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            Node::Map(entries) => visitor.visit_map(MapDeserializer::new(entries.into_iter())),
        }
    }

    parse_leaf! {
        deserialize_bool => visit_bool: bool,
        deserialize_i8 => visit_i8: i8,
        deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32,
        deserialize_i64 => visit_i64: i64,
        deserialize_u8 => visit_u8: u8,
        deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32,
        deserialize_u64 => visit_u64: u64,
        deserialize_f32 => visit_f32: f32,
        deserialize_f64 => visit_f64: f64,
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_some(self)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self {
            // `a[0]=x&a[1]=y`: indexed entries, in index order.
            Node::Map(mut entries) if entries.iter().all(|(k, _)| k.parse::<usize>().is_ok()) => {
                entries.sort_by_key(|(k, _)| k.parse::<usize>().unwrap_or(usize::MAX));
                let items = entries.into_iter().map(|(_, v)| v);
                visitor.visit_seq(SeqDeserializer::new(items))
            }
            Node::List(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            Node::Bytes(bytes) => visitor.visit_byte_buf(bytes.to_vec()),
            one => visitor.visit_seq(SeqDeserializer::new(std::iter::once(one))),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self {
            Node::Leaf(text) => {
                let de: StringDeserializer<DeError> = text.into_deserializer();
                de::Deserializer::deserialize_enum(de, name, variants, visitor)
            }
            other => other.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        i128 u128 char str string bytes byte_buf unit_struct tuple
        tuple_struct map struct identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, DeError> for Node {
    type Deserializer = Node;

    fn into_deserializer(self) -> Node {
        self
    }
}

/// What a handler knows of its request beyond its typed input: headers,
/// URI and, behind the idempotency layer, the caller's scope and key.
///
/// Cheap to clone: clones share the request head.
#[derive(Debug, Clone)]
pub struct Context {
    parts: std::sync::Arc<Parts>,
}

impl Context {
    /// The request headers (credentials, tracing), as received.
    pub fn headers(&self) -> &http::HeaderMap {
        &self.parts.headers
    }

    /// The request URI.
    pub fn uri(&self) -> &http::Uri {
        &self.parts.uri
    }

    /// The caller's scope and key, on a keyed route.
    pub fn idempotency(&self) -> Option<&IdempotencyKey> {
        self.parts.extensions.get::<IdempotencyKey>()
    }

    /// When the caller stops waiting, if it said (`Idem-Timeout-Ms`).
    pub fn deadline(&self) -> Option<Instant> {
        self.parts.extensions.get::<Deadline>().map(|d| d.0)
    }

    /// Time left before the caller's deadline, if it gave one. Work that
    /// cannot finish in it is better refused than started.
    pub fn time_left(&self) -> Option<std::time::Duration> {
        self.deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}

/// The remaining deadline a request carries, in its extensions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(pub(crate) Instant);
