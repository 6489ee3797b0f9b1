//! The gRPC face of the provider: each tfplugin6 call decoded, sent to the data source or
//! resource it names, and its diagnostics returned. Errors never surface as gRPC failures,
//! which Terraform would show raw; they become diagnostics on the attribute at fault.

use std::collections::HashMap;
use std::sync::RwLock;

use rmpv::Value;
use tern::api::client::Client;
use tonic::{Request, Response, Status};

use crate::diag::{self, Diags};
use crate::schema::{Mode, attr, schema, sensitive};
use crate::tfplugin6::provider_server::Provider;
use crate::tfplugin6::*;
use crate::value;
use crate::{job, offers, plan};

/// Where the controller is when the provider block does not say.
const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:8470";

#[derive(Default)]
pub struct TernProvider {
    client: RwLock<Option<Client>>,
}

fn provider_schema() -> Schema {
    schema(
        0,
        "tern: offers, plans and training jobs on a tern controller.",
        vec![
            attr(
                "endpoint",
                "\"string\"",
                Mode::Optional,
                "The controller's API URL (default TERN_SERVER, else http://127.0.0.1:8470).",
            ),
            sensitive(attr(
                "token",
                "\"string\"",
                Mode::Optional,
                "The controller's API token (default TERN_TOKEN, else the file TERN_TOKEN_FILE names): an admin token, or a team token for the jobs of that team. Prefer the environment: it keeps the token out of the configuration.",
            )),
            attr(
                "ca_file",
                "\"string\"",
                Mode::Optional,
                "PEM file of the CA that signed the controller's TLS certificate (default TERN_CA).",
            ),
        ],
    )
}

impl TernProvider {
    fn client(&self) -> Result<Client, Diags> {
        self.client.read().expect("lock").clone().ok_or_else(|| {
            vec![diag::error(
                None,
                "Provider not configured",
                "The tern provider was used before Terraform configured it.",
            )]
        })
    }

    fn configure(&self, config: &Value) -> Diags {
        let from = |attr: &str, env: &str| {
            value::string(config, attr)
                .ok()
                .flatten()
                .or_else(|| std::env::var(env).ok().filter(|v| !v.is_empty()))
        };
        let endpoint =
            from("endpoint", "TERN_SERVER").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let token = match from("token", "TERN_TOKEN") {
            Some(t) => Some(t),
            None => match token_file() {
                Ok(t) => t,
                Err(d) => return vec![d],
            },
        };
        let ca = from("ca_file", "TERN_CA");
        let http = match tern::http::client_with_ca(ca.as_deref().map(std::path::Path::new)) {
            Ok(h) => h,
            Err(e) => {
                return vec![diag::error(
                    Some("ca_file"),
                    "Cannot use the CA file",
                    e.to_string(),
                )];
            }
        };
        match Client::new(&endpoint, token, http) {
            Ok(c) => {
                *self.client.write().expect("lock") = Some(c);
                Vec::new()
            }
            Err(e) => vec![diag::error(
                Some("endpoint"),
                "Invalid endpoint",
                e.to_string(),
            )],
        }
    }
}

impl TernProvider {
    /// `tern_offers`: from a catalog, or from the controller when `source = "controller"`.
    async fn read_offers(&self, config: Value) -> Result<Value, Diags> {
        let catalog = match offers::origin(&config)? {
            offers::Origin::Catalog => None,
            offers::Origin::Controller => {
                let client = self.client()?;
                let list = client
                    .offers()
                    .await
                    .map_err(|e| vec![crate::job::client_diag(&e, None)])?;
                Some(tern_pricing::Catalog {
                    offers: list,
                    ..tern_pricing::Catalog::default()
                })
            }
        };
        blocking(move || offers::read(&config, catalog)).await
    }
}

/// The token in the file `TERN_TOKEN_FILE` names, as `tern` reads it (surrounding
/// whitespace dropped).
fn token_file() -> Result<Option<String>, Diagnostic> {
    let Some(path) = std::env::var_os("TERN_TOKEN_FILE").filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let shown = std::path::Path::new(&path).display().to_string();
        diag::error(
            Some("token"),
            "Cannot read TERN_TOKEN_FILE",
            format!("{shown}: {e}"),
        )
    })?;
    let token = text.trim();
    Ok((!token.is_empty()).then(|| token.to_string()))
}

fn decode(dv: Option<&DynamicValue>) -> Result<Value, Diags> {
    value::decode(dv).map_err(|e| {
        vec![diag::error(
            None,
            "Unreadable value from Terraform",
            e.to_string(),
        )]
    })
}

fn unknown_type(kind: &str, name: &str) -> Diags {
    vec![diag::error(
        None,
        format!("Unknown {kind}"),
        format!("terraform-provider-tern has no {kind} named {name}."),
    )]
}

/// Runs blocking work (catalog parsing, the MILP) off the gRPC workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Diags> + Send + 'static,
) -> Result<T, Diags> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(vec![diag::error(None, "Internal error", e.to_string())]))
}

#[tonic::async_trait]
impl Provider for TernProvider {
    async fn get_metadata(
        &self,
        _: Request<get_metadata::Request>,
    ) -> Result<Response<get_metadata::Response>, Status> {
        Ok(Response::new(get_metadata::Response {
            server_capabilities: Some(capabilities()),
            diagnostics: Vec::new(),
            data_sources: [offers::TYPE, plan::TYPE]
                .map(|t| get_metadata::DataSourceMetadata {
                    type_name: t.into(),
                })
                .into(),
            resources: vec![get_metadata::ResourceMetadata {
                type_name: job::TYPE.into(),
            }],
            functions: Vec::new(),
        }))
    }

    async fn get_provider_schema(
        &self,
        _: Request<get_provider_schema::Request>,
    ) -> Result<Response<get_provider_schema::Response>, Status> {
        Ok(Response::new(get_provider_schema::Response {
            provider: Some(provider_schema()),
            resource_schemas: HashMap::from([(job::TYPE.to_string(), job::resource_schema())]),
            data_source_schemas: HashMap::from([
                (offers::TYPE.to_string(), offers::data_schema()),
                (plan::TYPE.to_string(), plan::data_schema()),
            ]),
            functions: HashMap::new(),
            diagnostics: Vec::new(),
            provider_meta: None,
            server_capabilities: Some(capabilities()),
        }))
    }

    async fn validate_provider_config(
        &self,
        r: Request<validate_provider_config::Request>,
    ) -> Result<Response<validate_provider_config::Response>, Status> {
        let diagnostics = match decode(r.get_ref().config.as_ref()) {
            Ok(_) => Vec::new(),
            Err(d) => d,
        };
        Ok(Response::new(validate_provider_config::Response {
            diagnostics,
        }))
    }

    async fn validate_resource_config(
        &self,
        r: Request<validate_resource_config::Request>,
    ) -> Result<Response<validate_resource_config::Response>, Status> {
        let r = r.into_inner();
        let diagnostics = match (r.type_name.as_str(), decode(r.config.as_ref())) {
            (_, Err(d)) => d,
            (job::TYPE, Ok(config)) => job::validate(&config),
            (other, _) => unknown_type("resource", other),
        };
        Ok(Response::new(validate_resource_config::Response {
            diagnostics,
        }))
    }

    async fn validate_data_resource_config(
        &self,
        r: Request<validate_data_resource_config::Request>,
    ) -> Result<Response<validate_data_resource_config::Response>, Status> {
        let r = r.into_inner();
        let diagnostics = match r.type_name.as_str() {
            offers::TYPE | plan::TYPE => decode(r.config.as_ref()).err().unwrap_or_default(),
            other => unknown_type("data source", other),
        };
        Ok(Response::new(validate_data_resource_config::Response {
            diagnostics,
        }))
    }

    async fn upgrade_resource_state(
        &self,
        r: Request<upgrade_resource_state::Request>,
    ) -> Result<Response<upgrade_resource_state::Response>, Status> {
        let r = r.into_inner();
        let json = r.raw_state.map(|s| s.json).unwrap_or_default();
        let (upgraded, diagnostics) = match serde_json::from_slice::<serde_json::Value>(&json) {
            Ok(state) => (Some(value::encode(&job::upgrade(&state))), Vec::new()),
            Err(e) => (
                None,
                vec![diag::error(
                    None,
                    "Unreadable state",
                    format!("the stored state of {} is not JSON: {e}", r.type_name),
                )],
            ),
        };
        Ok(Response::new(upgrade_resource_state::Response {
            upgraded_state: upgraded,
            diagnostics,
        }))
    }

    async fn configure_provider(
        &self,
        r: Request<configure_provider::Request>,
    ) -> Result<Response<configure_provider::Response>, Status> {
        let diagnostics = match decode(r.get_ref().config.as_ref()) {
            Ok(config) => self.configure(&config),
            Err(d) => d,
        };
        Ok(Response::new(configure_provider::Response { diagnostics }))
    }

    async fn read_resource(
        &self,
        r: Request<read_resource::Request>,
    ) -> Result<Response<read_resource::Response>, Status> {
        let r = r.into_inner();
        let result = async {
            let state = decode(r.current_state.as_ref())?;
            if state.is_nil() {
                return Ok(Value::Nil);
            }
            let client = self.client()?;
            Ok(job::refresh(&client, state).await?.unwrap_or(Value::Nil))
        }
        .await;
        let (new_state, diagnostics) = split(result);
        Ok(Response::new(read_resource::Response {
            new_state,
            diagnostics,
            private: r.private,
        }))
    }

    async fn plan_resource_change(
        &self,
        r: Request<plan_resource_change::Request>,
    ) -> Result<Response<plan_resource_change::Response>, Status> {
        let r = r.into_inner();
        let result = (|| {
            let prior = decode(r.prior_state.as_ref())?;
            let proposed = decode(r.proposed_new_state.as_ref())?;
            let config = decode(r.config.as_ref())?;
            job::plan(&prior, &proposed, &config)
        })();
        let (planned_state, requires_replace, diagnostics) = match result {
            Ok((planned, replace)) => (Some(value::encode(&planned)), replace, Vec::new()),
            Err(d) => (None, Vec::new(), d),
        };
        Ok(Response::new(plan_resource_change::Response {
            planned_state,
            requires_replace,
            planned_private: r.prior_private,
            diagnostics,
            legacy_type_system: false,
        }))
    }

    async fn apply_resource_change(
        &self,
        r: Request<apply_resource_change::Request>,
    ) -> Result<Response<apply_resource_change::Response>, Status> {
        let r = r.into_inner();
        let result = async {
            let prior = decode(r.prior_state.as_ref())?;
            let planned = decode(r.planned_state.as_ref())?;
            let config = decode(r.config.as_ref())?;
            let client = self.client()?;
            job::apply(&client, &prior, &planned, &config).await
        }
        .await;
        let (new_state, diagnostics) = split(result);
        Ok(Response::new(apply_resource_change::Response {
            new_state,
            private: r.planned_private,
            diagnostics,
            legacy_type_system: false,
        }))
    }

    async fn import_resource_state(
        &self,
        r: Request<import_resource_state::Request>,
    ) -> Result<Response<import_resource_state::Response>, Status> {
        let r = r.into_inner();
        if r.type_name != job::TYPE {
            return Ok(Response::new(import_resource_state::Response {
                imported_resources: Vec::new(),
                diagnostics: unknown_type("resource", &r.type_name),
            }));
        }
        let imported = import_resource_state::ImportedResource {
            type_name: r.type_name,
            state: Some(value::encode(&job::import(&r.id))),
            private: Vec::new(),
        };
        Ok(Response::new(import_resource_state::Response {
            imported_resources: vec![imported],
            diagnostics: Vec::new(),
        }))
    }

    async fn move_resource_state(
        &self,
        _: Request<move_resource_state::Request>,
    ) -> Result<Response<move_resource_state::Response>, Status> {
        Ok(Response::new(move_resource_state::Response {
            target_state: None,
            diagnostics: vec![diag::error(
                None,
                "Move not supported",
                "tern_job state cannot be moved from another resource type.",
            )],
            target_private: Vec::new(),
        }))
    }

    async fn read_data_source(
        &self,
        r: Request<read_data_source::Request>,
    ) -> Result<Response<read_data_source::Response>, Status> {
        let r = r.into_inner();
        let result = match decode(r.config.as_ref()) {
            Err(d) => Err(d),
            Ok(config) => match r.type_name.as_str() {
                offers::TYPE => self.read_offers(config).await,
                plan::TYPE => blocking(move || plan::read(&config)).await,
                other => Err(unknown_type("data source", other)),
            },
        };
        let (state, diagnostics) = split(result);
        Ok(Response::new(read_data_source::Response {
            state,
            diagnostics,
        }))
    }

    async fn get_functions(
        &self,
        _: Request<get_functions::Request>,
    ) -> Result<Response<get_functions::Response>, Status> {
        Ok(Response::new(get_functions::Response {
            functions: HashMap::new(),
            diagnostics: Vec::new(),
        }))
    }

    async fn call_function(
        &self,
        _: Request<call_function::Request>,
    ) -> Result<Response<call_function::Response>, Status> {
        Ok(Response::new(call_function::Response {
            result: None,
            error: Some(FunctionError {
                text: "terraform-provider-tern has no functions".into(),
                function_argument: None,
            }),
        }))
    }

    async fn stop_provider(
        &self,
        _: Request<stop_provider::Request>,
    ) -> Result<Response<stop_provider::Response>, Status> {
        Ok(Response::new(stop_provider::Response {
            error: String::new(),
        }))
    }
}

fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        plan_destroy: false,
        get_provider_schema_optional: false,
        move_resource_state: false,
    }
}

fn split(result: Result<Value, Diags>) -> (Option<DynamicValue>, Diags) {
    match result {
        Ok(v) => (Some(value::encode(&v)), Vec::new()),
        Err(d) => (None, d),
    }
}
