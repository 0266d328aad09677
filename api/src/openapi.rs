//! The OpenAPI 3.1 document of the public API, built from the wire types (their schemas are
//! derived, `utoipa::ToSchema`) and the table of operations below. Served at
//! `GET /v1/openapi.json` and committed as `docs/openapi.json`; tests hold both to the
//! router's routes and to this build.

use crate::{
    egress, exec, files, git, interpreter, join_tokens, keys, ports, process, sandbox, session,
    snapshot, tenants, ticket, usage, watch, ApiError,
};
use utoipa::openapi::path::{
    HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{Object, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, PathsBuilder, Ref,
    RefOr, Required, ResponseBuilder, ResponsesBuilder,
};
use utoipa::ToSchema;

/// Schemas the operations refer to, collected with every schema they refer to in turn.
#[derive(Default)]
pub struct Registry {
    schemas: Vec<(String, RefOr<Schema>)>,
}

impl Registry {
    fn add<T: ToSchema>(&mut self) -> RefOr<Schema> {
        T::schemas(&mut self.schemas);
        self.schemas.push((T::name().into_owned(), T::schema()));
        RefOr::Ref(Ref::from_schema_name(T::name()))
    }
}

/// A schema, once the registry is at hand.
type SchemaFn = fn(&mut Registry) -> RefOr<Schema>;

fn of<T: ToSchema>(r: &mut Registry) -> RefOr<Schema> {
    r.add::<T>()
}

/// Any JSON object (an answer whose type lives outside this crate, e.g. `GET /v1/cluster`).
fn object(_: &mut Registry) -> RefOr<Schema> {
    RefOr::T(Schema::Object(Object::with_type(Type::Object)))
}

/// What a request or response carries.
#[derive(Clone, Copy)]
pub enum Body {
    None,
    /// `application/json` of this schema.
    Json(SchemaFn),
    /// Raw bytes (`application/octet-stream`): file contents.
    Bytes,
    /// Prometheus text.
    Text,
}

/// How an operation may answer besides its JSON body.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    None,
    /// With `Accept: text/event-stream`: SSE events of the given schema.
    Sse,
    /// A WebSocket upgrade (terminals, preview tunnels).
    WebSocket,
}

/// One operation of the API.
pub struct Operation {
    pub method: &'static str,
    /// The path, with `{name}` for each path parameter.
    pub path: &'static str,
    pub id: &'static str,
    pub tag: &'static str,
    pub summary: &'static str,
    /// Whether it needs `Authorization: Bearer <key>` (or a ticket).
    pub auth: bool,
    /// Query parameters: name, JSON type, description.
    pub query: &'static [(&'static str, &'static str, &'static str)],
    pub request: Body,
    pub status: u16,
    /// Also answers 201 with the same body when the call created what it names (the
    /// get-or-create operations: 201 on creation, `status` otherwise).
    pub or_created: bool,
    pub response: Body,
    pub stream: Stream,
    /// The schema of each SSE event (`Stream::Sse`).
    pub event: Option<SchemaFn>,
}

const fn op(
    method: &'static str,
    path: &'static str,
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
) -> Operation {
    Operation {
        method,
        path,
        id,
        tag,
        summary,
        auth: true,
        query: &[],
        request: Body::None,
        status: 200,
        or_created: false,
        response: Body::None,
        stream: Stream::None,
        event: None,
    }
}

impl Operation {
    const fn query(mut self, q: &'static [(&'static str, &'static str, &'static str)]) -> Self {
        self.query = q;
        self
    }
    const fn takes(mut self, b: Body) -> Self {
        self.request = b;
        self
    }
    const fn gives(mut self, status: u16, b: Body) -> Self {
        self.status = status;
        self.response = b;
        self
    }
    /// 201 with the same body when the call created it, `status` (200) otherwise.
    const fn or_created(mut self) -> Self {
        self.or_created = true;
        self
    }
    const fn sse(mut self, event: SchemaFn) -> Self {
        self.stream = Stream::Sse;
        self.event = Some(event);
        self
    }
    const fn websocket(mut self) -> Self {
        self.stream = Stream::WebSocket;
        self
    }
    const fn open(mut self) -> Self {
        self.auth = false;
        self
    }
}

const SB: &str = "sandboxes";
const CMD: &str = "commands";
const PROC: &str = "processes";
const FS: &str = "files";
const CODE: &str = "interpreter";
const NET: &str = "ports";
const SNAP: &str = "snapshots";
const EGRESS: &str = "egress";
const OPS: &str = "operations";

/// Every operation of the public API.
pub fn operations() -> Vec<Operation> {
    use Body::{Bytes, Json, Text};
    vec![
        op("put", "/v1/sandboxes/{id}", "createSandbox", SB, "Create the sandbox if it does not exist and make sure it runs (201 when created, 200 otherwise)")
            .takes(Json(of::<sandbox::CreateSandboxRequest>)).gives(200, Json(of::<sandbox::Sandbox>)).or_created(),
        op("get", "/v1/sandboxes/{id}", "getSandbox", SB, "Read a sandbox (never creates or wakes it)")
            .gives(200, Json(of::<sandbox::Sandbox>)),
        op("delete", "/v1/sandboxes/{id}", "deleteSandbox", SB, "Delete a sandbox: container, disk and processes (named snapshots stay); 204 also when already gone")
            .gives(204, Body::None),
        op("get", "/v1/sandboxes", "listSandboxes", SB, "List sandboxes, a page at a time")
            .query(&[("state", "string", "starting|running|sleeping|migrating|failed"), ("label", "string", "k=v; may repeat"), ("region", "string", ""), ("limit", "integer", ""), ("cursor", "string", "next_cursor of the previous page"), ("tenant", "string", "an admin's filter; a tenant key sees its own only")])
            .gives(200, Json(of::<sandbox::SandboxList>)),
        op("post", "/v1/sandboxes/{id}/sleep", "sleepSandbox", SB, "Save per persist and stop; state becomes sleeping")
            .gives(200, Json(of::<sandbox::Sandbox>)),
        op("post", "/v1/sandboxes/{id}/exec", "exec", CMD, "Run a command (a bash script in the session's shell, or argv)")
            .takes(Json(of::<exec::ExecRequest>)).gives(200, Json(of::<exec::ExecResponse>)).sse(of::<exec::ExecEvent>),
        op("post", "/v1/sandboxes/{id}/sessions", "createSession", CMD, "Create a shell session (own env and cwd)")
            .takes(Json(of::<session::CreateSessionRequest>)).gives(200, Json(of::<session::SessionInfo>)).or_created(),
        op("get", "/v1/sandboxes/{id}/sessions", "listSessions", CMD, "List shell sessions")
            .gives(200, Json(object)),
        op("delete", "/v1/sandboxes/{id}/sessions/{sid}", "deleteSession", CMD, "Delete a session and kill its processes")
            .gives(204, Body::None),
        op("patch", "/v1/sandboxes/{id}/env", "setEnvVars", CMD, "Set (or unset with null) environment variables of a session and of sessions created later")
            .takes(Json(of::<session::PatchEnvRequest>)).gives(200, Json(of::<session::PatchEnvResponse>)),
        op("post", "/v1/sandboxes/{id}/processes", "startProcess", PROC, "Start a background process")
            .takes(Json(of::<process::StartProcessRequest>)).gives(201, Json(of::<process::Process>)),
        op("get", "/v1/sandboxes/{id}/processes", "listProcesses", PROC, "List background processes")
            .gives(200, Json(of::<process::ProcessList>)),
        op("get", "/v1/sandboxes/{id}/processes/{process}", "getProcess", PROC, "Read a background process")
            .gives(200, Json(of::<process::Process>)),
        op("delete", "/v1/sandboxes/{id}/processes/{process}", "killProcess", PROC, "Signal the process tree, then SIGKILL what is left after the grace")
            .query(&[("signal", "string", "TERM, KILL, INT, HUP, ..."), ("grace_ms", "integer", "")])
            .gives(200, Json(of::<process::Process>)),
        op("get", "/v1/sandboxes/{id}/processes/{process}/logs", "getProcessLogs", PROC, "Output so far; with SSE and follow=true, replay then follow")
            .query(&[("since", "string", "cursor"), ("follow", "boolean", "")])
            .gives(200, Json(of::<process::LogsResponse>)).sse(of::<process::LogEvent>),
        op("post", "/v1/sandboxes/{id}/processes/{process}/wait/log", "waitForLog", PROC, "Wait for a line matching a pattern or regex")
            .takes(Json(of::<process::WaitLogRequest>)).gives(200, Json(of::<process::WaitLogResponse>)),
        op("post", "/v1/sandboxes/{id}/processes/{process}/wait/port", "waitForPort", PROC, "Wait for a port to accept connections (tcp) or answer (http)")
            .takes(Json(of::<process::WaitPortRequest>)).gives(200, Json(of::<process::WaitPortResponse>)),
        op("post", "/v1/sandboxes/{id}/processes/{process}/wait/exit", "waitForExit", PROC, "Wait for the process to end")
            .takes(Json(of::<process::WaitExitRequest>)).gives(200, Json(of::<process::WaitExitResponse>)),
        op("get", "/v1/sandboxes/{id}/files/{path}", "readFile", FS, "Raw bytes of the absolute path /{path} (percent-encoded)")
            .gives(200, Bytes),
        op("put", "/v1/sandboxes/{id}/files/{path}", "writeFile", FS, "Write the body to /{path}, atomically; parents are created")
            .query(&[("mode", "string", "octal, e.g. 0644")])
            .takes(Bytes).gives(200, Json(of::<files::WriteFileResponse>)),
        op("delete", "/v1/sandboxes/{id}/files/{path}", "deleteFile", FS, "Delete a file (a directory needs recursive=true)")
            .query(&[("recursive", "boolean", "")])
            .gives(204, Body::None),
        op("get", "/v1/sandboxes/{id}/fs/stat", "statFile", FS, "Type, size, mode and modification time of a path")
            .query(&[("path", "string", "absolute path")])
            .gives(200, Json(of::<files::Stat>)),
        op("get", "/v1/sandboxes/{id}/fs/list", "listFiles", FS, "Entries of a directory")
            .query(&[("path", "string", "absolute path"), ("recursive", "boolean", ""), ("hidden", "boolean", "")])
            .gives(200, Json(of::<files::ListResponse>)),
        op("get", "/v1/sandboxes/{id}/fs/archive", "downloadDirectory", FS, "A tar of the directory's entries, named relative to it")
            .query(&[("path", "string", "absolute path of a directory")])
            .gives(200, Bytes),
        op("put", "/v1/sandboxes/{id}/fs/archive", "uploadDirectory", FS, "Unpack the body, a tar, into the new directory path, all or nothing")
            .query(&[("path", "string", "absolute path; must not exist")])
            .takes(Bytes).gives(200, Json(of::<files::ArchiveUploadResponse>)),
        op("post", "/v1/sandboxes/{id}/fs/mkdir", "mkdir", FS, "Make a directory")
            .takes(Json(of::<files::MkdirRequest>)).gives(200, Json(of::<files::PathResponse>)).or_created(),
        op("post", "/v1/sandboxes/{id}/fs/move", "moveFile", FS, "Rename or move a path")
            .takes(Json(of::<files::MoveRequest>)).gives(200, Json(of::<files::PathResponse>)),
        op("post", "/v1/sandboxes/{id}/git/checkout", "gitCheckout", FS, "Clone a repository into the sandbox")
            .takes(Json(of::<git::GitCheckoutRequest>)).gives(200, Json(of::<git::GitCheckoutResponse>)),
        op("get", "/v1/sandboxes/{id}/watch", "watch", FS, "File events below a path (SSE only)")
            .query(&[("path", "string", "absolute path"), ("recursive", "boolean", ""), ("include", "string", "glob; may repeat"), ("exclude", "string", "glob; may repeat")])
            .sse(of::<watch::WatchEvent>),
        op("get", "/v1/sandboxes/{id}/terminals/{name}", "terminal", CMD, "An interactive terminal (WebSocket, xterm.js-compatible)")
            .query(&[("cols", "integer", ""), ("rows", "integer", ""), ("shell", "string", ""), ("since", "integer", "cursor to replay from"), ("ticket", "string", "instead of the Authorization header")])
            .gives(101, Body::None).websocket(),
        op("get", "/v1/sandboxes/{id}/terminals", "listTerminals", CMD, "Terminals of the sandbox")
            .gives(200, Json(object)),
        op("delete", "/v1/sandboxes/{id}/terminals/{name}", "closeTerminal", CMD, "End a terminal's shell")
            .gives(204, Body::None),
        op("post", "/v1/sandboxes/{id}/contexts", "createCodeContext", CODE, "Create a code context (a notebook kernel)")
            .takes(Json(of::<interpreter::CreateContextRequest>)).gives(201, Json(of::<interpreter::Context>)),
        op("get", "/v1/sandboxes/{id}/contexts", "listCodeContexts", CODE, "List code contexts")
            .gives(200, Json(of::<interpreter::ContextList>)),
        op("delete", "/v1/sandboxes/{id}/contexts/{cid}", "deleteCodeContext", CODE, "Delete a code context")
            .gives(204, Body::None),
        op("post", "/v1/sandboxes/{id}/contexts/{cid}/run", "runCode", CODE, "Run code in a context; the last expression's value is a result")
            .takes(Json(of::<interpreter::RunCodeRequest>)).gives(200, Json(of::<interpreter::RunCodeResponse>)).sse(of::<interpreter::RunEvent>),
        op("post", "/v1/sandboxes/{id}/ports", "exposePort", NET, "Expose a port at a preview URL")
            .takes(Json(of::<ports::ExposeRequest>)).gives(201, Json(of::<ports::ExposedPort>)),
        op("get", "/v1/sandboxes/{id}/ports", "getExposedPorts", NET, "List exposed ports")
            .gives(200, Json(of::<ports::PortList>)),
        op("delete", "/v1/sandboxes/{id}/ports/{port}", "unexposePort", NET, "Revoke a port's preview URL (idempotent)")
            .gives(204, Body::None),
        op("post", "/v1/sandboxes/{id}/snapshots", "createSnapshot", SNAP, "Save the sandbox's filesystem (or some directories) to the object store")
            .takes(Json(of::<snapshot::CreateSnapshotRequest>)).gives(201, Json(of::<snapshot::Snapshot>)),
        op("post", "/v1/sandboxes/{id}/restore", "restoreSnapshot", SNAP, "Make the sandbox's files the snapshot's")
            .takes(Json(of::<snapshot::RestoreRequest>)).gives(200, Json(of::<sandbox::Sandbox>)),
        op("post", "/v1/sandboxes/{id}/fork", "fork", SNAP, "One snapshot, then count new sandboxes started from it")
            .takes(Json(of::<snapshot::ForkRequest>)).gives(201, Json(of::<snapshot::ForkResponse>)),
        op("get", "/v1/snapshots", "listSnapshots", SNAP, "List snapshots")
            .query(&[("sandbox", "string", "only this sandbox's")])
            .gives(200, Json(of::<snapshot::SnapshotList>)),
        op("get", "/v1/snapshots/{sid}", "getSnapshot", SNAP, "Read a snapshot")
            .gives(200, Json(of::<snapshot::Snapshot>)),
        op("delete", "/v1/snapshots/{sid}", "deleteSnapshot", SNAP, "Delete a snapshot")
            .gives(204, Body::None),
        op("put", "/v1/sandboxes/{id}/egress", "setEgress", EGRESS, "Replace the sandbox's egress policy (effective at once)")
            .takes(Json(of::<egress::EgressPolicy>)).gives(200, Json(of::<egress::EgressPolicy>)),
        op("get", "/v1/sandboxes/{id}/egress", "getEgress", EGRESS, "The sandbox's egress policy")
            .gives(200, Json(of::<egress::EgressPolicy>)),
        op("put", "/v1/secrets/{name}", "putSecret", EGRESS, "Create or replace a secret (write-only)")
            .takes(Json(of::<egress::PutSecretRequest>)).gives(204, Body::None),
        op("get", "/v1/secrets", "listSecrets", EGRESS, "Secret names and times (never values)")
            .gives(200, Json(of::<egress::SecretList>)),
        op("get", "/v1/secrets/{name}", "getSecret", EGRESS, "A secret's name and times (never its value)")
            .gives(200, Json(of::<egress::SecretInfo>)),
        op("delete", "/v1/secrets/{name}", "deleteSecret", EGRESS, "Delete a secret (204 also when absent)")
            .gives(204, Body::None),
        op("post", "/v1/tickets", "createTicket", OPS, "A single-use ticket for a browser WebSocket or stream")
            .takes(Json(of::<ticket::TicketRequest>)).gives(201, Json(of::<ticket::Ticket>)),
        op("post", "/v1/keys", "createKey", OPS, "Create an API key, admin or scoped to a tenant (admin only); its value is shown once")
            .takes(Json(of::<keys::CreateKeyRequest>)).gives(201, Json(of::<keys::CreatedKey>)),
        op("get", "/v1/keys", "listKeys", OPS, "Every key's id, tenant, scope, name and times, never a value (admin only)")
            .gives(200, Json(of::<keys::KeyList>)),
        op("delete", "/v1/keys/{key}", "revokeKey", OPS, "Revoke a key; answered once every node that is not down applied it (admin only)")
            .gives(204, Body::None),
        op("put", "/v1/tenants/{tenant}", "setTenantQuota", OPS, "Set a tenant's quota: sandboxes, CPUs and memory it may hold at once, cluster-wide (admin only)")
            .takes(Json(of::<tenants::TenantQuota>)).gives(200, Json(of::<tenants::Tenant>)),
        op("get", "/v1/tenants/{tenant}", "getTenant", OPS, "A tenant's quota and what it holds (admin, or the tenant's own key)")
            .gives(200, Json(of::<tenants::Tenant>)),
        op("get", "/v1/tenants", "listTenants", OPS, "Every tenant with a quota, a key or a sandbox (admin only)")
            .gives(200, Json(of::<tenants::TenantList>)),
        op("get", "/v1/usage", "getUsage", OPS, "Usage per sandbox, label or day, cluster-wide")
            .query(&[("sandbox", "string", ""), ("label", "string", "k=v"), ("from", "string", "RFC 3339"), ("to", "string", "RFC 3339"), ("group_by", "string", "sandbox|label:KEY|day"), ("tenant", "string", "an admin's filter; a tenant key sees its own only")])
            .gives(200, Json(of::<usage::UsageReport>)),
        op("get", "/v1/cluster", "getCluster", OPS, "Members, leader, term and loss window")
            .gives(200, Json(object)),
        op("post", "/v1/cluster/nodes/{node}/drain", "drainNode", OPS, "Move every sandbox off a node, then mark it draining")
            .gives(200, Json(object)),
        op("delete", "/v1/cluster/nodes/{node}", "removeNode", OPS, "Remove a node from the cluster")
            .query(&[("force", "boolean", "also when it still holds sandboxes or is down")])
            .gives(204, Body::None),
        op("get", "/v1/cluster/backup", "backupCluster", OPS, "A tar of this node's Raft state (taken while it runs) and cluster files, to rebuild the cluster from with `warren cluster restore` when every node is lost (admin only)")
            .gives(200, Body::Bytes),
        op("post", "/v1/cluster/join-tokens", "createJoinToken", OPS, "Make a join token for new nodes, expiring (default 1 h) and single-use unless asked otherwise (admin only); its value is shown once")
            .takes(Json(of::<join_tokens::CreateJoinTokenRequest>)).gives(201, Json(of::<join_tokens::CreatedJoinToken>)),
        op("get", "/v1/cluster/join-tokens", "listJoinTokens", OPS, "Every join token's id, state, expiry and the nodes it admitted, never a value (admin only)")
            .gives(200, Json(of::<join_tokens::JoinTokenList>)),
        op("delete", "/v1/cluster/join-tokens/{token}", "revokeJoinToken", OPS, "Revoke a join token: it admits nobody from then on (admin only)")
            .gives(204, Body::None),
        op("get", "/v1/cluster/join-policy", "getJoinPolicy", OPS, "Whether the cluster's own join token still admits new nodes (admin only)")
            .gives(200, Json(of::<join_tokens::JoinPolicy>)),
        op("put", "/v1/cluster/join-policy", "setJoinPolicy", OPS, "Turn the cluster's own join token off (only issued join tokens admit nodes then) or on again (admin only)")
            .takes(Json(of::<join_tokens::JoinPolicy>)).gives(200, Json(of::<join_tokens::JoinPolicy>)),
        op("get", "/v1/openapi.json", "openapi", OPS, "This document").open()
            .gives(200, Json(object)),
        op("get", "/healthz", "health", OPS, "200 when the node serves, 503 with a reason when it cannot start sandboxes safely").open()
            .gives(200, Json(object)),
        op("get", "/metrics", "metrics", OPS, "Prometheus metrics").open()
            .gives(200, Text),
    ]
}

fn method(m: &str) -> HttpMethod {
    match m {
        "get" => HttpMethod::Get,
        "put" => HttpMethod::Put,
        "post" => HttpMethod::Post,
        "delete" => HttpMethod::Delete,
        "patch" => HttpMethod::Patch,
        other => panic!("no such method in the table: {other}"),
    }
}

fn param_type(t: &str) -> Type {
    match t {
        "integer" => Type::Integer,
        "boolean" => Type::Boolean,
        _ => Type::String,
    }
}

/// Names of the `{…}` parameters of a path.
pub fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect()
}

fn content(b: Body, r: &mut Registry) -> Option<(&'static str, RefOr<Schema>)> {
    match b {
        Body::None => None,
        Body::Json(f) => Some(("application/json", f(r))),
        Body::Bytes => Some((
            "application/octet-stream",
            RefOr::T(Schema::Object(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .content_media_type("application/octet-stream")
                    .build(),
            )),
        )),
        Body::Text => Some((
            "text/plain",
            RefOr::T(Schema::Object(Object::with_type(Type::String))),
        )),
    }
}

/// The whole document.
pub fn document() -> OpenApi {
    let mut reg = Registry::default();
    let error = reg.add::<ApiError>();
    let mut paths = PathsBuilder::new();
    for o in operations() {
        let mut b = OperationBuilder::new()
            .operation_id(Some(o.id))
            .summary(Some(o.summary))
            .tag(o.tag);
        for p in path_params(o.path) {
            b = b.parameter(
                ParameterBuilder::new()
                    .name(p)
                    .parameter_in(ParameterIn::Path)
                    .required(Required::True)
                    .schema(Some(Object::with_type(Type::String))),
            );
        }
        for (name, ty, desc) in o.query {
            b = b.parameter(
                ParameterBuilder::new()
                    .name(*name)
                    .parameter_in(ParameterIn::Query)
                    .required(Required::False)
                    .description((!desc.is_empty()).then_some(*desc))
                    .schema(Some(Object::with_type(param_type(ty)))),
            );
        }
        if let Some((mime, schema)) = content(o.request, &mut reg) {
            b = b.request_body(Some(
                RequestBodyBuilder::new()
                    .content(mime, ContentBuilder::new().schema(Some(schema)).build())
                    .required(Some(Required::True))
                    .build(),
            ));
        }
        let mut ok = ResponseBuilder::new().description(match o.stream {
            Stream::WebSocket => "Switching protocols: the WebSocket",
            _ => "Success",
        });
        let mut created = ResponseBuilder::new().description("Created");
        if let Some((mime, schema)) = content(o.response, &mut reg) {
            created = created.content(
                mime,
                ContentBuilder::new().schema(Some(schema.clone())).build(),
            );
            ok = ok.content(mime, ContentBuilder::new().schema(Some(schema)).build());
        }
        if let Some(event) = o.event {
            let schema = event(&mut reg);
            ok = ok.content(
                "text/event-stream",
                ContentBuilder::new().schema(Some(schema)).build(),
            );
        }
        let mut responses = ResponsesBuilder::new().response(o.status.to_string(), ok.build());
        if o.or_created {
            responses = responses.response("201", created.build());
        }
        responses = responses.response(
            "default",
            ResponseBuilder::new()
                .description("An error: {code, message, retryable, details}")
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(error.clone())).build(),
                )
                .build(),
        );
        b = b.responses(responses.build());
        if !o.auth {
            // An empty requirement: no key needed.
            b = b.security(SecurityRequirement::default());
        }
        paths = paths.path(o.path, PathItem::new(method(o.method), b.build()));
    }
    let mut components = ComponentsBuilder::new().security_scheme(
        "bearer",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    let mut names: Vec<String> = Vec::new();
    for (name, schema) in reg.schemas {
        if !names.contains(&name) {
            names.push(name.clone());
            components = components.schema(name, schema);
        }
    }
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("warren")
                .version("1")
                .description(Some(
                    "Sandboxes for AI agents. Errors carry {code, message, retryable, details}; streams are Server-Sent Events chosen with Accept: text/event-stream; see docs/api.md.",
                ))
                .build(),
        )
        .paths(paths.build())
        .components(Some(components.build()))
        .security(Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new())]))
        .build()
}

/// The document as the committed `docs/openapi.json` holds it (pretty, one trailing newline).
pub fn document_json() -> String {
    let mut s = serde_json::to_string_pretty(&document()).expect("the document serializes");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_unique_and_its_schemas_resolve() {
        let ops = operations();
        let mut seen = std::collections::BTreeSet::new();
        for o in &ops {
            assert!(
                seen.insert((o.method, o.path)),
                "twice: {} {}",
                o.method,
                o.path
            );
        }
        let doc: serde_json::Value = serde_json::from_str(&document_json()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        // Every $ref names a schema that is in the components.
        let text = document_json();
        for piece in text.split("\"$ref\": \"#/components/schemas/").skip(1) {
            let name = &piece[..piece.find('"').unwrap()];
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "dangling reference to {name}"
            );
        }
        assert!(doc["paths"]["/v1/sandboxes/{id}/exec"]["post"].is_object());
    }

    #[test]
    fn the_committed_document_is_this_builds() {
        let committed = include_str!("../../docs/openapi.json");
        assert!(
            committed == document_json(),
            "docs/openapi.json is stale: regenerate it with `cargo run -p warren-cli -- openapi > docs/openapi.json`"
        );
    }
}
