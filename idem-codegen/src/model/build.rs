//! Building the [`Model`] from a loaded [`Document`].

use crate::load::{Document, LoadError, LoadFailure};
use crate::source::Pos;
use crate::tree::{Node, Value};
use crate::vocab::{
    Effect, IdempotencyExt, KeyIn, KeyRequirement, Level, Located, Reader, RetryExt,
};

use super::schema::SchemaBuilder;
use super::words::{self, KeyWords, Text, TextKind};
use super::{
    BODY_KEY_FIELD, BODY_KEY_FIELDS, BodyField, Encoding, Evidence, FieldText, HeaderSpec,
    KeyOrigin, KeyPolicy, KeySource, Media, Method, Model, Operation, Parameter, Prose,
    RequestBody, Response, RetryClass, Root, Schemas, SecurityKind, SecurityScheme, Webhook,
    is_common_key_header, key_settings, merge_idempotency, merge_retry, read_extensions,
    retry_policy,
};

/// Build the model of `document`. `rule_names` are the slugs and codes that
/// `allow:` may name. Fails only when a `$ref` the model needs is broken; every
/// vocabulary problem is collected in [`Model::extension_errors`] instead.
pub fn build(document: Document, rule_names: &[&str]) -> Result<Model, Box<LoadFailure>> {
    let mut errors = Vec::new();
    let built = Builder {
        doc: &document,
        reader: Reader {
            errors: &mut errors,
            rule_names,
        },
        schemas: SchemaBuilder::new(&document),
    }
    .run();
    match built {
        Ok(built) => Ok(Model {
            title: built.title,
            root: built.root,
            operations: built.operations,
            webhooks: built.webhooks,
            extension_errors: errors,
            schemas: built.schemas,
            security_schemes: built.security_schemes,
            security: built.security,
            servers: built.servers,
            description: built.description,
            narrowed: false,
            document,
        }),
        Err(error) => Err(Box::new(LoadFailure {
            error,
            sources: document.sources,
        })),
    }
}

struct Built {
    title: String,
    root: Root,
    operations: Vec<Operation>,
    webhooks: Vec<Webhook>,
    schemas: Schemas,
    security_schemes: Vec<SecurityScheme>,
    security: Vec<Vec<String>>,
    servers: Vec<String>,
    description: Option<String>,
}

struct Builder<'d, 'e> {
    doc: &'d Document,
    reader: Reader<'e>,
    schemas: SchemaBuilder<'d>,
}

/// Aliases read from other tools' extensions at the root.
#[derive(Default)]
struct Aliases {
    fern_headers: Vec<String>,
}

impl<'d> Builder<'d, '_> {
    fn run(mut self) -> Result<Built, LoadError> {
        let root_node = self.doc.root();
        let (mut idem, mut retry) = read_extensions(root_node, Level::Root, &mut self.reader);
        if let Some(alias) = root_node.get("x-speakeasy-retries") {
            retry = merge_retry(&speakeasy(alias), retry);
        }
        let mut aliases = Aliases::default();
        if let Some(list) = root_node
            .get("x-fern-idempotency-headers")
            .and_then(Node::as_seq)
        {
            aliases.fern_headers = list
                .iter()
                .filter_map(|h| h.get("header").and_then(Node::as_str).map(str::to_owned))
                .collect();
        }
        // Waivers at the root apply to everything below.
        idem.allow.sort_by(|a, b| a.rule.cmp(&b.rule));

        let mut prose = Vec::new();
        let info = root_node.get("info");
        let title = info
            .and_then(|i| i.get("title"))
            .and_then(Node::as_str)
            .unwrap_or("")
            .to_owned();
        if let Some(info) = info {
            push_prose(&mut prose, info, &["title", "summary", "description"]);
        }
        if let Some(tags) = root_node.get("tags").and_then(Node::as_seq) {
            for tag in tags {
                push_prose(&mut prose, tag, &["description"]);
            }
        }

        let admission = root_node
            .get("x-admission")
            .map(|n| self.reader.admission(n, Level::Root))
            .unwrap_or_default();
        let mut root = Root {
            idempotency: idem,
            retry,
            admission,
            prose,
        };

        let mut operations = Vec::new();
        if let Some(paths) = root_node.get("paths").and_then(Node::as_map) {
            for (path, item) in paths {
                if !path.name.starts_with('/') {
                    continue; // `x-` extensions beside the paths
                }
                let item = self.doc.resolve(item)?;
                let shared = self.parameters(item, None)?;
                for (method, method_key) in Method::ALL {
                    let Some((key, op)) = item.entry(method_key) else {
                        continue;
                    };
                    let op = self.doc.resolve(op)?;
                    let mut operation =
                        self.operation(&root, &aliases, method, &path.name, key.pos, op, &shared)?;
                    push_prose(&mut operation.prose, item, &["summary", "description"]);
                    add_undeclared_path_parameters(&mut operation, path.pos);
                    operations.push(operation);
                }
            }
        }

        let mut webhooks = Vec::new();
        if let Some(hooks) = root_node.get("webhooks").and_then(Node::as_map) {
            for (name, item) in hooks {
                let item = self.doc.resolve(item)?;
                for (method, method_key) in Method::ALL {
                    if let Some((key, op)) = item.entry(method_key) {
                        // Calls the API makes: not audited as served
                        // operations, but what they promise is still read.
                        let op = self.doc.resolve(op)?;
                        push_prose(&mut root.prose, op, &["summary", "description"]);
                        webhooks.push(Webhook {
                            name: name.name.clone(),
                            method,
                            operation_id: op
                                .get("operationId")
                                .and_then(Node::as_str)
                                .map(str::to_owned),
                            pos: key.pos,
                        });
                    }
                }
            }
        }
        super::names::tidy(&mut operations);
        root.prose.sort_by_key(|p| p.pos);
        root.prose.dedup_by_key(|p| p.pos);
        self.schemas.components();
        let security_schemes = self.security_schemes()?;
        let description = info
            .and_then(|i| i.get("description"))
            .and_then(Node::as_str)
            .map(str::to_owned);
        let servers = root_node
            .get("servers")
            .and_then(Node::as_seq)
            .unwrap_or(&[])
            .iter()
            .filter_map(|s| s.get("url").and_then(Node::as_str).map(str::to_owned))
            .collect();
        Ok(Built {
            title,
            root,
            operations,
            webhooks,
            schemas: self.schemas.finish(),
            security_schemes,
            security: security_of(root_node).unwrap_or_default(),
            servers,
            description,
        })
    }

    fn security_schemes(&self) -> Result<Vec<SecurityScheme>, LoadError> {
        let mut out = Vec::new();
        let schemes = self
            .doc
            .root()
            .get("components")
            .and_then(|c| c.get("securitySchemes"))
            .and_then(Node::as_map)
            .unwrap_or(&[]);
        for (name, node) in schemes {
            let node = self.doc.resolve(node)?;
            let text = |field| node.get(field).and_then(Node::as_str).unwrap_or("");
            let kind = match (text("type"), text("scheme").to_ascii_lowercase().as_str()) {
                ("http", "bearer") | ("oauth2" | "openIdConnect", _) => SecurityKind::Bearer,
                ("http", "basic") => SecurityKind::Basic,
                ("apiKey", _) => SecurityKind::ApiKey {
                    location: text("in").to_owned(),
                    parameter: text("name").to_owned(),
                },
                (ty, scheme) => SecurityKind::Other(format!("{ty} {scheme}").trim().to_owned()),
            };
            out.push(SecurityScheme {
                name: name.name.clone(),
                kind,
                description: node
                    .get("description")
                    .and_then(Node::as_str)
                    .map(str::to_owned),
            });
        }
        Ok(out)
    }

    /// The body in each media type of a `content` map.
    fn media(&mut self, content: Option<&'d Node>) -> Vec<Media> {
        let mut out = Vec::new();
        for (media, entry) in content.and_then(Node::as_map).unwrap_or(&[]) {
            let entry = self.doc.resolve(entry).unwrap_or(entry);
            let schema = entry.get("schema").map(|s| self.schemas.schema(s));
            let encoding = entry
                .get("encoding")
                .and_then(Node::as_map)
                .unwrap_or(&[])
                .iter()
                .map(|(property, e)| Encoding {
                    property: property.name.clone(),
                    style: e.get("style").and_then(Node::as_str).map(str::to_owned),
                    explode: e.get("explode").and_then(Node::as_bool),
                    content_type: e
                        .get("contentType")
                        .and_then(Node::as_str)
                        .map(str::to_owned),
                })
                .collect();
            out.push(Media {
                media_type: media.name.clone(),
                schema,
                encoding,
            });
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn operation(
        &mut self,
        root: &Root,
        aliases: &Aliases,
        method: Method,
        path: &str,
        pos: Pos,
        op: &'d Node,
        shared: &[Parameter],
    ) -> Result<Operation, LoadError> {
        let (own_idem, mut own_retry) = read_extensions(op, Level::Operation, &mut self.reader);
        let admission = op
            .get("x-admission")
            .map(|n| self.reader.admission(n, Level::Operation))
            .unwrap_or_default();
        let pagination = op
            .get("x-pagination")
            .and_then(|n| self.reader.pagination(n));
        if let Some(alias) = op.get("x-speakeasy-retries") {
            own_retry = merge_retry(&speakeasy(alias), own_retry);
        }
        let mut ext = merge_idempotency(&root.idempotency, own_idem);
        let retry_ext = merge_retry(&root.retry, own_retry);
        if ext.key.is_none()
            && !aliases.fern_headers.is_empty()
            && op.get("x-fern-idempotent").and_then(Node::as_bool) == Some(true)
        {
            ext.key = Some(Located {
                value: KeyRequirement::Optional,
                pos: op.get("x-fern-idempotent").map_or(pos, |n| n.pos),
            });
        }
        let mut settings = key_settings(&ext);
        let parameters = self.parameters(op, Some(shared))?;
        let request_body = match op.get("requestBody") {
            Some(body) => Some(self.request_body(body)?),
            None => None,
        };
        let mut prose = Vec::new();
        let responses = self.responses(op, &mut prose)?;

        let mut key_headers: Vec<&str> = vec![settings.header.as_str()];
        key_headers.extend(aliases.fern_headers.iter().map(String::as_str));
        let operation_id = op
            .get("operationId")
            .and_then(Node::as_str)
            .map(str::to_owned);
        // What the words say, when nothing is declared.
        let inferred_effect = if ext.effect.is_none() && !method.is_safe() {
            self.infer_effect(op, method, path, pos, request_body.as_ref())
        } else {
            None
        };
        // The root's `key:` covers what is not idempotent by its effect.
        let effect = ext.effect.map(|e| e.value).or_else(|| {
            inferred_effect
                .as_ref()
                .filter(|i| !i.value.is_idempotent())
                .map(|i| i.value)
                .or_else(|| method.default_effect())
        });
        let root_key = root
            .idempotency
            .key
            .filter(|_| !effect.is_some_and(Effect::is_idempotent));
        let key = key_policy(
            &self.doc.sources,
            &ext,
            root_key,
            &parameters,
            request_body.as_ref(),
            &key_headers,
        );
        // A key parameter or field that documents a shorter `maxLength`
        // than the server's limit is the limit integrators read: the
        // server, the client and the docs page hold to it.
        let shown_max = match &key.source {
            Some(KeySource::Body { field }) => request_body
                .as_ref()
                .and_then(|b| b.key_field(field))
                .and_then(|f| f.max_length),
            Some(source) => source
                .parameter()
                .and_then(|i| parameters.get(i))
                .and_then(|p| p.max_length),
            None => None,
        };
        if let Some(shown) = shown_max
            .and_then(|m| u32::try_from(m).ok())
            .filter(|&m| m >= 1)
        {
            settings.key_max_length = settings.key_max_length.min(shown);
        }

        let name = operation_id
            .clone()
            .unwrap_or_else(|| derived_name(method, path));
        let summary = op.get("summary").and_then(Node::as_str).map(str::to_owned);
        push_prose(&mut prose, op, &["summary", "description"]);

        let description = op
            .get("description")
            .and_then(Node::as_str)
            .map(str::to_owned);
        let tags = op
            .get("tags")
            .and_then(Node::as_seq)
            .unwrap_or(&[])
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
        let conditional = parameters.iter().any(|p| {
            p.location == "header" && p.required && p.name.eq_ignore_ascii_case("If-Match")
        }) && responses.iter().any(|r| r.status == "412");

        let mut operation = Operation {
            name,
            operation_id,
            method,
            path: path.to_owned(),
            pos,
            summary,
            parameters,
            request_body,
            responses,
            responses_pos: op.entry("responses").map(|(k, _)| k.pos),
            declared_effect: ext.effect,
            inferred_effect,
            key,
            class: RetryClass::Unsafe,
            conditional,
            unsafe_retry: ext.unsafe_retry.clone(),
            phases: ext.phases.clone(),
            settings,
            retry: retry_policy(&retry_ext),
            admission,
            pagination,
            dropshot_paged: op.get("x-dropshot-pagination").is_some(),
            waivers: ext.allow.clone(),
            ext,
            prose,
            description,
            deprecated: op.get("deprecated").and_then(Node::as_bool) == Some(true),
            tags,
            security: security_of(op),
        };
        operation.class = classify(&operation);
        Ok(operation)
    }

    /// The effect `op`'s own words say: its summary, description,
    /// operationId, the last word of its path, and its request fields'
    /// descriptions, in that order.
    fn infer_effect(
        &self,
        op: &Node,
        method: Method,
        path: &str,
        pos: Pos,
        body: Option<&RequestBody>,
    ) -> Option<super::Inferred<Effect>> {
        let mut texts = Vec::new();
        for (field, kind) in [
            ("summary", TextKind::Summary),
            ("description", TextKind::Prose),
            ("operationId", TextKind::Name),
        ] {
            if let Some(node) = op.get(field)
                && let Some(text) = node.as_str()
            {
                texts.push(Text {
                    field: field.to_owned(),
                    text,
                    pos: node.pos,
                    kind,
                });
            }
        }
        if let Some(action) = words::path_action(path) {
            texts.push(Text {
                field: "path".to_owned(),
                text: action,
                pos,
                kind: TextKind::Name,
            });
        }
        for field in body.map_or(&[][..], |b| &b.field_texts) {
            texts.push(Text {
                field: format!("requestBody.{}", field.name),
                text: &field.description,
                pos: field.pos,
                kind: TextKind::Prose,
            });
        }
        words::infer_effect(
            &self.doc.sources,
            &texts,
            words::PlainCreate::of(
                matches!(method, Method::Put | Method::Delete),
                path,
                body.map_or(&[][..], |b| &b.properties),
            ),
            method == Method::Post,
        )
    }

    /// Parameters of `node`; with `shared`, path-level parameters not
    /// overridden here (same name and location) are appended.
    fn parameters(
        &mut self,
        node: &'d Node,
        shared: Option<&[Parameter]>,
    ) -> Result<Vec<Parameter>, LoadError> {
        let mut out = Vec::new();
        for item in node.get("parameters").and_then(Node::as_seq).unwrap_or(&[]) {
            let param = self.doc.resolve(item)?;
            let (Some(name), Some(location)) = (
                param.get("name").and_then(Node::as_str),
                param.get("in").and_then(Node::as_str),
            ) else {
                continue;
            };
            // A parameter is typed by `schema`, or by the schema of its one
            // `content` entry.
            let schema_node = param.get("schema").or_else(|| {
                param
                    .get("content")
                    .and_then(Node::as_map)
                    .and_then(|c| c.first())
                    .and_then(|(_, media)| media.get("schema"))
            });
            let schema = match schema_node {
                Some(s) => Some(self.doc.resolve(s)?),
                None => None,
            };
            let typed = schema_node.map(|s| self.schemas.schema(s));
            let text = |field| param.get(field).and_then(Node::as_str).map(str::to_owned);
            out.push(Parameter {
                name: name.to_owned(),
                location: location.to_owned(),
                required: param.get("required").and_then(Node::as_bool) == Some(true)
                    || location == "path",
                schema_type: schema.and_then(schema_type),
                max_length: schema.and_then(max_length),
                pos: param.pos,
                schema: typed,
                style: text("style"),
                explode: param.get("explode").and_then(Node::as_bool),
                description: text("description"),
                description_pos: param.get("description").map(|d| d.pos),
                deprecated: param.get("deprecated").and_then(Node::as_bool) == Some(true),
                declared: true,
            });
        }
        if let Some(shared) = shared {
            for p in shared {
                if !out
                    .iter()
                    .any(|o| o.location == p.location && o.name.eq_ignore_ascii_case(&p.name))
                {
                    out.push(p.clone());
                }
            }
        }
        Ok(out)
    }

    fn request_body(&mut self, node: &'d Node) -> Result<RequestBody, LoadError> {
        let body = self.doc.resolve(node)?;
        let mut content_types = Vec::new();
        let mut properties = Vec::new();
        let mut key_fields: Vec<BodyField> = Vec::new();
        let mut field_texts: Vec<FieldText> = Vec::new();
        let mut described: Vec<(KeyWords, BodyField)> = Vec::new();
        if let Some(content) = body.get("content").and_then(Node::as_map) {
            for (media, entry) in content {
                content_types.push(media.name.clone());
                let Some(schema) = entry.get("schema") else {
                    continue;
                };
                let mut found = SchemaFacts::default();
                self.collect_properties(schema, &mut found, 0)?;
                if properties.is_empty() {
                    properties.clone_from(&found.names);
                    field_texts = std::mem::take(&mut found.texts);
                }
                for (words, mut field) in std::mem::take(&mut found.described) {
                    field.required = found.required.contains(&field.name);
                    if !described.iter().any(|(_, f)| f.name == field.name) {
                        described.push((words, field));
                    }
                }
                for mut field in found.key_fields {
                    field.required = found.required.contains(&field.name);
                    if !key_fields.iter().any(|f| f.name == field.name) {
                        key_fields.push(field);
                    }
                }
            }
        }
        // Order by the preference of BODY_KEY_FIELDS, so the first is the key.
        key_fields.sort_by_key(|f| BODY_KEY_FIELDS.iter().position(|n| *n == f.name));
        // Then the fields whose description says they are a key.
        // The plainest first; a stable sort keeps the schema's order.
        described.sort_by_key(|(words, _)| *words);
        for (_, field) in described {
            if !key_fields.iter().any(|f| f.name == field.name) {
                key_fields.push(field);
            }
        }
        Ok(RequestBody {
            required: body.get("required").and_then(Node::as_bool) == Some(true),
            content_types,
            properties,
            pos: body.pos,
            description: body
                .get("description")
                .and_then(Node::as_str)
                .map(str::to_owned),
            media: self.media(body.get("content")),
            key_fields,
            field_texts,
        })
    }

    /// Top-level property names of a schema (and its key-named fields, and
    /// its `required` names), through `$ref` and `allOf`.
    fn collect_properties(
        &self,
        schema: &'d Node,
        out: &mut SchemaFacts,
        depth: usize,
    ) -> Result<(), LoadError> {
        if depth > 16 {
            return Ok(());
        }
        let schema = self.doc.resolve(schema)?;
        if let Some(props) = schema.get("properties").and_then(Node::as_map) {
            for (key, value) in props {
                out.names.push(key.name.clone());
                if BODY_KEY_FIELDS.contains(&key.name.as_str())
                    && !out.key_fields.iter().any(|f| f.name == key.name)
                {
                    let field_schema = self.doc.resolve(value)?;
                    out.key_fields.push(BodyField {
                        name: key.name.clone(),
                        required: false,
                        schema_type: schema_type(field_schema),
                        max_length: max_length(field_schema),
                        pos: key.pos,
                        evidence: None,
                    });
                }
                // A broken `$ref` under a field only costs its words.
                let Ok(field_schema) = self.doc.resolve(value) else {
                    continue;
                };
                // AWS writes a property's description beside its `$ref`, as
                // `allOf: [{$ref}, {description}]`.
                let description = field_schema.get("description").or_else(|| {
                    field_schema
                        .get("allOf")
                        .and_then(Node::as_seq)
                        .unwrap_or(&[])
                        .iter()
                        .find_map(|part| part.get("description"))
                });
                // The type, through AWS's `allOf: [{$ref: Long}, …]` too.
                let ty = schema_type(field_schema).or_else(|| {
                    field_schema
                        .get("allOf")
                        .and_then(Node::as_seq)
                        .unwrap_or(&[])
                        .iter()
                        .find_map(|part| self.doc.resolve(part).ok().and_then(schema_type))
                });
                // A field with properties is an object, whatever its words.
                let ty = ty.or_else(|| field_schema.get("properties").map(|_| "object".to_owned()));
                let named = (ty.as_deref().is_none_or(|t| t == "string")
                    && !BODY_KEY_FIELDS.contains(&key.name.as_str()))
                .then(|| {
                    words::token_named(
                        &key.name,
                        description.and_then(Node::as_str),
                        format!("requestBody.{}", key.name),
                        key.pos,
                    )
                })
                .flatten();
                if let Some(evidence) = named
                    && !out.described.iter().any(|(_, f)| f.name == key.name)
                {
                    out.described.push((
                        KeyWords::Named,
                        BodyField {
                            name: key.name.clone(),
                            required: false,
                            schema_type: ty.clone(),
                            max_length: max_length(field_schema),
                            pos: key.pos,
                            evidence: Some(evidence),
                        },
                    ));
                }
                if let Some(description) = description
                    && let Some(text) = description.as_str()
                    && !out.texts.iter().any(|t| t.name == key.name)
                {
                    out.texts.push(FieldText {
                        name: key.name.clone(),
                        description: text.to_owned(),
                        pos: description.pos,
                    });
                    // The words, when they say it, are better evidence
                    // than the name.
                    if !BODY_KEY_FIELDS.contains(&key.name.as_str())
                        && !out
                            .described
                            .iter()
                            .any(|(w, f)| f.name == key.name && *w != KeyWords::Named)
                        && ty.as_deref().is_none_or(|t| t == "string")
                        && let Some((words, evidence)) = words::describes_key(
                            &self.doc.sources,
                            format!("requestBody.{}", key.name),
                            text,
                            description.pos,
                        )
                    {
                        out.described.retain(|(_, f)| f.name != key.name);
                        out.described.push((
                            words,
                            BodyField {
                                name: key.name.clone(),
                                required: false,
                                schema_type: ty,
                                max_length: max_length(field_schema),
                                pos: key.pos,
                                evidence: Some(evidence),
                            },
                        ));
                    }
                }
            }
        }
        for name in schema.get("required").and_then(Node::as_seq).unwrap_or(&[]) {
            if let Some(name) = name.as_str() {
                out.required.push(name.to_owned());
            }
        }
        for part in schema.get("allOf").and_then(Node::as_seq).unwrap_or(&[]) {
            self.collect_properties(part, out, depth + 1)?;
        }
        Ok(())
    }

    /// The responses of `op`; their descriptions are added to `prose`.
    fn responses(
        &mut self,
        op: &'d Node,
        prose: &mut Vec<Prose>,
    ) -> Result<Vec<Response>, LoadError> {
        let mut out = Vec::new();
        for (status, node) in op.get("responses").and_then(Node::as_map).unwrap_or(&[]) {
            if status.name.starts_with("x-") {
                continue;
            }
            let response = self.doc.resolve(node)?;
            push_prose(prose, response, &["description"]);
            let headers = response
                .get("headers")
                .and_then(Node::as_map)
                .map(|h| h.iter().map(|(k, _)| k.name.clone()).collect())
                .unwrap_or_default();
            let mut text = response
                .get("description")
                .and_then(Node::as_str)
                .unwrap_or("")
                .to_owned();
            if let Some(content) = response.get("content") {
                example_text(content, &mut text);
            }
            let mut header_specs = Vec::new();
            for (name, header) in response
                .get("headers")
                .and_then(Node::as_map)
                .unwrap_or(&[])
            {
                let header = self.doc.resolve(header)?;
                header_specs.push(HeaderSpec {
                    name: name.name.clone(),
                    required: header.get("required").and_then(Node::as_bool) == Some(true),
                    description: header
                        .get("description")
                        .and_then(Node::as_str)
                        .map(str::to_owned),
                    schema: header.get("schema").map(|s| self.schemas.schema(s)),
                });
            }
            out.push(Response {
                status: status.name.clone(),
                pos: status.pos,
                headers,
                text,
                description: response
                    .get("description")
                    .and_then(Node::as_str)
                    .map(str::to_owned),
                media: self.media(response.get("content")),
                header_specs,
                component: node
                    .get("$ref")
                    .and_then(Node::as_str)
                    .and_then(|r| r.split_once("#/components/responses/"))
                    .map(|(_, name)| name.to_owned())
                    .filter(|name| !name.is_empty() && !name.contains('/')),
            });
        }
        Ok(out)
    }
}

/// Decide where the key comes from, whether it is required, and how that
/// was learned. Precedence: the operation's `key:`, then the root's default
/// (`root_key`, already dropped for operations idempotent by their effect),
/// then what the spec shows (a key header parameter, else a key-named body
/// field). `key-in` narrows where the key is looked for.
fn key_policy(
    sources: &crate::source::SourceMap,
    ext: &IdempotencyExt,
    root_key: Option<Located<KeyRequirement>>,
    parameters: &[Parameter],
    body: Option<&RequestBody>,
    key_headers: &[&str],
) -> KeyPolicy {
    let requirement_of = |required: bool| {
        if required {
            KeyRequirement::Required
        } else {
            KeyRequirement::Optional
        }
    };
    let header = parameters.iter().position(|p| {
        p.location == "header"
            && (key_headers.iter().any(|h| h.eq_ignore_ascii_case(&p.name))
                || is_common_key_header(&p.name))
    });
    // A header or query parameter whose description says it is the key
    // (Google's `requestId`), when none is named like one.
    let described = |location: &str| {
        let mut found: Vec<(KeyWords, usize, Evidence)> = parameters
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                if p.location != location || p.schema_type.as_deref().is_some_and(|t| t != "string")
                {
                    return None;
                }
                let field = format!("parameters.{}", p.name);
                let described = p.description.as_deref().and_then(|d| {
                    words::describes_key(
                        sources,
                        field.clone(),
                        d,
                        p.description_pos.unwrap_or(p.pos),
                    )
                });
                let (words, evidence) = described.or_else(|| {
                    words::token_named(&p.name, p.description.as_deref(), field, p.pos)
                        .map(|e| (KeyWords::Named, e))
                })?;
                Some((words, i, evidence))
            })
            .collect();
        // The plainest; the first declared among equals.
        found.sort_by_key(|(words, i, _)| (*words, *i));
        found.into_iter().next().map(|(_, i, e)| (i, e))
    };
    let described_header = if header.is_none() {
        described("header")
    } else {
        None
    };
    let header = header.or(described_header.as_ref().map(|(i, _)| *i));
    let header_param = header.and_then(|i| parameters.get(i));
    let misplaced = parameters
        .iter()
        .position(|p| p.location != "header" && is_key_name(&p.name));
    let field = body.and_then(|b| b.key_fields.first());
    let query = described("query");

    let header_found = header_param.map(|p| requirement_of(p.required));
    let header_source = KeySource::Header {
        name: header_param.map_or_else(
            || {
                key_headers
                    .first()
                    .copied()
                    .unwrap_or("Idempotency-Key")
                    .to_owned()
            },
            |p| p.name.clone(),
        ),
        parameter: header,
    };
    let body_found = field.map(|f| requirement_of(f.required));
    let body_source = KeySource::Body {
        field: field.map_or_else(|| BODY_KEY_FIELD.to_owned(), |f| f.name.clone()),
    };
    let header_evidence = described_header.map(|(_, e)| e);
    let body_evidence = field.and_then(|f| f.evidence.clone());
    let query_found = query
        .as_ref()
        .and_then(|(i, _)| parameters.get(*i))
        .map(|p| requirement_of(p.required));
    let query_source = query.as_ref().and_then(|(i, _)| {
        parameters.get(*i).map(|p| KeySource::Query {
            name: p.name.clone(),
            parameter: *i,
        })
    });
    let query_evidence = query.map(|(_, e)| e);
    let (found, source, evidence) = match ext.key_in.map(|k| k.value) {
        Some(KeyIn::Body) => (body_found, body_source, body_evidence),
        Some(KeyIn::Header) => (header_found, header_source, header_evidence),
        Some(KeyIn::Query) => match query_source {
            Some(source) => (query_found, source, query_evidence),
            None => (None, header_source, None),
        },
        None if header_found.is_some() => (header_found, header_source, header_evidence),
        None if body_found.is_some() => (body_found, body_source, body_evidence),
        None => match query_source {
            Some(source) if query_found.is_some() => (query_found, source, query_evidence),
            _ => (None, header_source, None),
        },
    };
    let (declared, declared_origin) = match ext.key {
        Some(own) => (Some(own), KeyOrigin::Declared),
        None => (root_key, KeyOrigin::RootDefault),
    };
    let requirement = declared
        .map(|d| d.value)
        .or(found)
        .unwrap_or(KeyRequirement::None);
    let takes_key = requirement != KeyRequirement::None;
    KeyPolicy {
        requirement,
        source: takes_key.then_some(source),
        declared,
        misplaced,
        origin: takes_key.then(|| {
            if declared.is_some() {
                declared_origin
            } else {
                KeyOrigin::Inferred
            }
        }),
        evidence: evidence.filter(|_| takes_key),
    }
}

fn is_key_name(name: &str) -> bool {
    let squashed: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    squashed == "idempotencykey"
}

/// The retry class, by the table of `docs/vocabulary.md` ("Retry classes").
pub(crate) fn classify(op: &Operation) -> RetryClass {
    if op.effect() == Some(Effect::Read) {
        RetryClass::Safe
    } else if op.key.requirement != KeyRequirement::None {
        RetryClass::Keyed
    } else if op.is_idempotent() {
        RetryClass::Safe
    } else if op.unsafe_retry.is_some() {
        RetryClass::UnsafeDocumented
    } else {
        RetryClass::Unsafe
    }
}

/// A `security` list: each alternative's scheme names.
fn security_of(node: &Node) -> Option<Vec<Vec<String>>> {
    let list = node.get("security")?.as_seq()?;
    Some(
        list.iter()
            .map(|alternative| {
                alternative
                    .as_map()
                    .unwrap_or(&[])
                    .iter()
                    .map(|(k, _)| k.name.clone())
                    .collect()
            })
            .collect(),
    )
}

fn max_length(schema: &Node) -> Option<u64> {
    schema
        .get("maxLength")
        .and_then(Node::scalar_text)
        .and_then(|t| t.parse().ok())
}

/// What [`Builder::collect_properties`] gathers from one schema.
#[derive(Default)]
struct SchemaFacts {
    names: Vec<String>,
    key_fields: Vec<BodyField>,
    required: Vec<String>,
    /// Described properties, for what the words say.
    texts: Vec<FieldText>,
    /// Properties whose description says they are a key.
    described: Vec<(KeyWords, BodyField)>,
}

fn schema_type(schema: &Node) -> Option<String> {
    let ty = schema.get("type")?;
    match &ty.value {
        Value::String(s) => Some(s.clone()),
        // 3.1 allows `type: [string, "null"]`.
        Value::Seq(items) => items
            .iter()
            .filter_map(Node::as_str)
            .find(|t| *t != "null")
            .map(str::to_owned),
        _ => None,
    }
}

fn push_prose(out: &mut Vec<Prose>, node: &Node, fields: &[&str]) {
    for field in fields {
        if let Some(text) = node.get(field)
            && let Some(s) = text.as_str()
        {
            out.push(Prose {
                text: s.to_owned(),
                pos: text.pos,
            });
        }
    }
}

/// Append the string scalars of a response's examples (bounded).
fn example_text(content: &Node, out: &mut String) {
    let mut todo = vec![content];
    let mut budget = 500usize;
    while let Some(node) = todo.pop() {
        if budget == 0 {
            break;
        }
        budget -= 1;
        match &node.value {
            Value::String(s) => {
                out.push(' ');
                out.push_str(s);
            }
            Value::Map(entries) => {
                for (k, v) in entries {
                    if k.name == "schema" {
                        continue;
                    }
                    out.push(' ');
                    out.push_str(&k.name);
                    todo.push(v);
                }
            }
            Value::Seq(items) => todo.extend(items.iter()),
            _ => {}
        }
    }
}

/// `POST /v2/orders/{id}/notes` → `post_v2_orders_by_id_notes`.
pub fn derived_name(method: Method, path: &str) -> String {
    let mut name = method.as_str().to_ascii_lowercase();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        name.push('_');
        if let Some(param) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            name.push_str("by_");
            name.extend(param.chars().map(ident_char));
        } else {
            name.extend(segment.chars().map(ident_char));
        }
    }
    name
}

fn ident_char(c: char) -> char {
    if c.is_ascii_alphanumeric() {
        c.to_ascii_lowercase()
    } else {
        '_'
    }
}

/// `x-speakeasy-retries` → `x-retry`, for the fields whose meaning maps.
fn speakeasy(node: &Node) -> RetryExt {
    let millis = |field: &str| {
        node.get("backoff")
            .and_then(|b| b.get(field))
            .and_then(|n| {
                let ms: u64 = n.scalar_text()?.parse().ok()?;
                Some(Located {
                    value: std::time::Duration::from_millis(ms),
                    pos: n.pos,
                })
            })
    };
    RetryExt {
        base: millis("initialInterval"),
        cap: millis("maxInterval"),
        deadline: millis("maxElapsedTime"),
        ..RetryExt::default()
    }
}

/// Every `{name}` of the path template that no path parameter declares,
/// added as a required string located at the path: what a server must
/// capture and a client must send, whether or not the spec says so
/// (`undeclared-path-parameter` reports each).
fn add_undeclared_path_parameters(op: &mut Operation, at: Pos) {
    let mut rest = op.path.split('?').next().unwrap_or_default();
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|c| open + c) else {
            break;
        };
        let name = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if name.is_empty()
            || op
                .parameters
                .iter()
                .any(|p| p.location == "path" && p.name == name)
        {
            continue;
        }
        op.parameters.push(Parameter {
            name: name.to_owned(),
            location: "path".to_owned(),
            required: true,
            schema_type: Some("string".to_owned()),
            max_length: None,
            pos: at,
            schema: None,
            style: None,
            explode: None,
            description: None,
            description_pos: None,
            deprecated: false,
            declared: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names() {
        assert_eq!(
            derived_name(Method::Post, "/v2/orders/{id}/notes"),
            "post_v2_orders_by_id_notes"
        );
        assert_eq!(derived_name(Method::Get, "/"), "get");
        assert_eq!(derived_name(Method::Delete, "/a-b.c"), "delete_a_b_c");
    }

    #[test]
    fn key_names() {
        assert!(is_key_name("idempotency_key"));
        assert!(is_key_name("Idempotency-Key"));
        assert!(is_key_name("IdempotencyKey"));
        assert!(!is_key_name("key"));
    }
}
