//! The tool registry: tools with compiled input validators, arguments bound to the caller, and
//! typed native tools.
//!
//! An argument bound to the caller ([`Argument`], from `forge-core`) is filled by the engine from the run's scope
//! before the call is validated, authorized, approved or executed: "my pipeline" is the caller's
//! whoever asks, and an `owner` the caller may never choose is never the model's to choose.
//!
//! A native tool is an async Rust function whose input type derives `schemars::JsonSchema`; its
//! JSON Schema is generated from the type, so the schema the model sees and the type the function
//! receives cannot drift apart.

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::ports::model::ToolDescriptor;
pub use forge_core::ports::tool::Argument;
use forge_core::ports::tool::{
    ApprovalPolicy, ApprovalPreviewer, Tool, ToolClassification, ToolContext, ToolError, ToolSpec,
};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::EngineError;

/// A registered tool with its compiled input validator and its bound arguments.
pub(crate) struct Registered {
    pub(crate) tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
    arguments: BTreeMap<String, Argument>,
    /// What a person asked to approve one of its calls is shown, when the tool has one.
    pub(crate) previewer: Option<Arc<dyn ApprovalPreviewer>>,
}

impl Registered {
    /// `input` with the arguments bound to `scope`'s caller filled in; `None` when nothing
    /// changes (no bound arguments, or an input that is not an object, which validation
    /// refuses).
    pub(crate) fn bind(
        &self,
        input: &serde_json::Value,
        scope: &forge_core::scope::Scope,
    ) -> Option<serde_json::Value> {
        let serde_json::Value::Object(given) = input else {
            return None;
        };
        let mut fields = given.clone();
        let mut changed = false;
        for (name, argument) in &self.arguments {
            let value = match argument {
                Argument::CallerByDefault if given.get(name).is_some_and(|v| !v.is_null()) => {
                    continue;
                }
                Argument::CallerByDefault | Argument::Caller => scope.principal_id().as_str(),
                Argument::Tenant => scope.tenant_id().as_str(),
            };
            fields.insert(name.clone(), serde_json::Value::String(value.to_owned()));
            changed = true;
        }
        changed.then_some(serde_json::Value::Object(fields))
    }

    /// The input schema as the model is offered it: arguments always bound left out, those
    /// bound by default optional.
    pub(crate) fn offered_schema(&self) -> serde_json::Value {
        let mut schema = self.tool.spec().input_schema.clone();
        for (name, argument) in &self.arguments {
            if let Some(required) = schema
                .get_mut("required")
                .and_then(serde_json::Value::as_array_mut)
            {
                required.retain(|r| r.as_str() != Some(name));
            }
            if *argument != Argument::CallerByDefault
                && let Some(properties) = schema
                    .get_mut("properties")
                    .and_then(serde_json::Value::as_object_mut)
            {
                properties.remove(name);
            }
        }
        schema
    }

    /// Every schema violation in `input`, as `path: message` lines; empty when valid.
    pub(crate) fn violations(&self, input: &serde_json::Value) -> Vec<String> {
        self.validator
            .iter_errors(input)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect()
    }
}

/// Tools by name.
#[derive(Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Registered>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool, compiling its input schema. Refuses a bad name, a duplicate or a schema that
    /// does not compile.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), EngineError> {
        let spec = tool.spec();
        ToolSpec::validate_name(&spec.name).map_err(|e| EngineError::InvalidTool {
            name: spec.name.clone(),
            reason: e.to_string(),
        })?;
        if self.tools.contains_key(&spec.name) {
            return Err(EngineError::InvalidTool {
                name: spec.name.clone(),
                reason: "registered twice".into(),
            });
        }
        let validator = jsonschema::validator_for(&spec.input_schema).map_err(|e| {
            EngineError::InvalidTool {
                name: spec.name.clone(),
                reason: format!("input schema does not compile: {e}"),
            }
        })?;
        self.tools.insert(
            spec.name.clone(),
            Registered {
                tool,
                validator,
                arguments: BTreeMap::new(),
                previewer: None,
            },
        );
        Ok(())
    }

    /// Binds the argument `name` of the registered tool `tool` to the caller ([`Argument`]).
    /// Refuses a tool that is not registered and an argument its input schema does not name.
    pub fn bind_argument(
        &mut self,
        tool: &str,
        name: &str,
        argument: Argument,
    ) -> Result<(), EngineError> {
        let invalid = |reason: String| EngineError::InvalidTool {
            name: tool.to_owned(),
            reason,
        };
        let registered = self.tools.get_mut(tool).ok_or_else(|| {
            invalid("not registered: register it before binding its arguments".into())
        })?;
        let named = registered
            .tool
            .spec()
            .input_schema
            .get("properties")
            .and_then(|p| p.get(name))
            .is_some();
        if !named {
            return Err(invalid(format!(
                "its input has no property {name:?} to bind"
            )));
        }
        registered.arguments.insert(name.to_owned(), argument);
        Ok(())
    }

    /// Gives the registered tool `tool` a previewer: what a person asked to approve one of its
    /// calls sees beside the input. Refuses a tool that is not registered.
    pub fn preview(
        &mut self,
        tool: &str,
        previewer: Arc<dyn ApprovalPreviewer>,
    ) -> Result<(), EngineError> {
        let registered = self
            .tools
            .get_mut(tool)
            .ok_or_else(|| EngineError::InvalidTool {
                name: tool.to_owned(),
                reason: "not registered: register it before giving it a previewer".into(),
            })?;
        registered.previewer = Some(previewer);
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Registered> {
        self.tools.get(name)
    }

    /// Whether a tool of this name is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// Every registered tool's spec, by name.
    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values().map(|r| r.tool.spec())
    }

    /// The specs of the tools that are [available](Tool::available) now, by name.
    pub fn available_specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools
            .values()
            .filter(|r| r.tool.available())
            .map(|r| r.tool.spec())
    }

    /// The descriptors of the named tools, in the given order, as offered to a model.
    pub fn descriptors(&self, names: &[String]) -> Vec<ToolDescriptor> {
        names
            .iter()
            .filter_map(|n| self.tools.get(n))
            .map(|r| {
                let s = r.tool.spec();
                ToolDescriptor {
                    name: s.name.clone(),
                    description: s.description.clone(),
                    input_schema: r.offered_schema(),
                }
            })
            .collect()
    }
}

/// A tool backed by an async Rust function with a typed input.
pub struct NativeTool<I, F> {
    spec: ToolSpec,
    f: F,
    _input: PhantomData<fn(I)>,
}

impl<I, F> std::fmt::Debug for NativeTool<I, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeTool")
            .field("name", &self.spec.name)
            .finish()
    }
}

/// Makes a read-only native tool from an async function; its input schema comes from `I`.
///
/// ```text
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add { a: i64, b: i64 }
/// let add = native_tool("add", "adds two integers", |_ctx, i: Add| async move { Ok(i.a + i.b) });
/// ```
pub fn native_tool<I, O, F, Fut>(name: &str, description: &str, f: F) -> NativeTool<I, F>
where
    I: JsonSchema + DeserializeOwned + Send + 'static,
    O: Serialize,
    F: Fn(ToolContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send,
{
    let schema = schemars::schema_for!(I).to_value();
    NativeTool {
        spec: ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: schema,
            classification: ToolClassification::Read,
            approval: ApprovalPolicy::Never,
            version: "1".into(),
            permission: None,
            source: Default::default(),
        },
        f,
        _input: PhantomData,
    }
}

impl<I, F> NativeTool<I, F> {
    /// Sets what the tool does to the world (default: read).
    pub fn classification(mut self, c: ToolClassification) -> Self {
        self.spec.classification = c;
        self
    }

    /// Sets when the tool needs approval (default: never).
    pub fn approval(mut self, a: ApprovalPolicy) -> Self {
        self.spec.approval = a;
        self
    }

    /// Sets the permission policies may require for it (default: none).
    pub fn permission(mut self, p: &str) -> Self {
        self.spec.permission = Some(p.to_owned());
        self
    }

    /// Sets the tool's version (default: `1`).
    pub fn version(mut self, v: &str) -> Self {
        self.spec.version = v.to_owned();
        self
    }
}

#[async_trait]
impl<I, O, F, Fut> Tool for NativeTool<I, F>
where
    I: JsonSchema + DeserializeOwned + Send + 'static,
    O: Serialize,
    F: Fn(ToolContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        input: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError> {
        let typed: I =
            serde_json::from_value(input).map_err(|e| ToolError::InvalidInput(e.to_string()))?;
        let out = (self.f)(ctx.clone(), typed).await?;
        serde_json::to_value(out).map_err(|e| ToolError::Failed(format!("output is not JSON: {e}")))
    }
}

/// The spec of a built-in tool `name`: version 1, native, never needing approval on its own.
pub(crate) fn built_in_spec(
    name: &str,
    description: &str,
    input_schema: serde_json::Value,
    classification: ToolClassification,
) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema,
        classification,
        approval: ApprovalPolicy::Never,
        version: "1".into(),
        permission: None,
        source: Default::default(),
    }
}

/// A tool whose call the approval gate answers before any tool runs (`ask_user`: the call
/// becomes a question and the run waits); its spec is registered so calls are validated and
/// offered like any other's, and calling it directly is refused.
pub(crate) struct GateAnswered(pub(crate) ToolSpec);

impl GateAnswered {
    /// The built-in `name` as a registrable tool.
    pub(crate) fn tool(
        name: &str,
        description: &str,
        input_schema: serde_json::Value,
        classification: ToolClassification,
    ) -> Arc<dyn Tool> {
        Arc::new(GateAnswered(built_in_spec(
            name,
            description,
            input_schema,
            classification,
        )))
    }
}

#[async_trait]
impl Tool for GateAnswered {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(
        &self,
        _ctx: &ToolContext,
        _input: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError> {
        Err(ToolError::Failed(format!(
            "{} is answered by the engine",
            self.0.name
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use forge_core::scope::Scope;
    use serde_json::json;

    use super::*;

    /// The pipeline tool's input.
    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Ask {
        /// Whose pipeline.
        owner: String,
        /// Whose tenant.
        tenant: String,
        /// How many.
        limit: u32,
    }

    fn registry() -> ToolRegistry {
        let mut tools = ToolRegistry::new();
        tools
            .register(Arc::new(native_tool(
                "pipeline",
                "A pipeline.",
                |_ctx, _a: Ask| async { Ok("ok") },
            )))
            .unwrap();
        tools
    }

    #[test]
    fn bound_arguments_are_filled_from_the_caller_and_hidden_or_optional_for_the_model() {
        let mut tools = registry();
        tools
            .bind_argument("pipeline", "owner", Argument::CallerByDefault)
            .unwrap();
        tools
            .bind_argument("pipeline", "tenant", Argument::Tenant)
            .unwrap();
        let offered = &tools.descriptors(&["pipeline".into()])[0].input_schema;
        assert_eq!(offered["required"], json!(["limit"]), "{offered}");
        assert!(
            offered["properties"].get("owner").is_some(),
            "optional, still offered"
        );
        assert!(
            offered["properties"].get("tenant").is_none(),
            "never the model's"
        );

        let r = tools.get("pipeline").unwrap();
        let alice = Scope::parse("acme", "alice", &[]).unwrap();
        assert_eq!(
            r.bind(&json!({"limit": 3}), &alice),
            Some(json!({"limit": 3, "owner": "alice", "tenant": "acme"}))
        );
        // A value the model gives is kept where the binding is a default, replaced where not.
        assert_eq!(
            r.bind(
                &json!({"limit": 3, "owner": "bob", "tenant": "globex"}),
                &alice
            ),
            Some(json!({"limit": 3, "owner": "bob", "tenant": "acme"}))
        );
        assert!(
            r.violations(&r.bind(&json!({"limit": 3}), &alice).unwrap())
                .is_empty()
        );
        assert_eq!(r.bind(&json!("not an object"), &alice), None);
    }

    #[test]
    fn only_a_registered_tools_named_arguments_are_bound() {
        let mut tools = registry();
        let err = tools
            .bind_argument("pipeline", "owners", Argument::Caller)
            .unwrap_err();
        assert!(err.to_string().contains("owners"), "{err}");
        assert!(
            tools
                .bind_argument("nope", "owner", Argument::Caller)
                .is_err()
        );
        let unbound = registry();
        assert_eq!(
            unbound
                .get("pipeline")
                .unwrap()
                .bind(&json!({"limit": 1}), &Scope::parse("a", "b", &[]).unwrap()),
            None
        );
    }
}
