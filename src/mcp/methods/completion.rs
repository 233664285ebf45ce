//! `completion/complete`: prompt arguments from their admin-defined `completions`; template variables from
//! the agent's own stored URIs that match the template. Values start with what the user typed, are sorted
//! and unique, at most 100 per answer, with `total` and `hasMore`.

use std::collections::BTreeSet;

use serde_json::Value;

use super::prompts::find_prompt;
use super::{McpMethod, params};
use crate::domain::UriTemplate;
use crate::mcp::dispatch::Context;
use crate::mcp::error::McpError;
use crate::mcp::types::{CompleteRequestParams, CompleteResult, CompletionInfo, Reference};
use crate::mcp::uri_match::{MatchBudget, literal_prefix, match_uri_within};
use crate::registry::collection::{Collection, Resources};

/// Values in one answer (the specification's maximum).
pub const MAX_VALUES: usize = 100;
/// Stored URIs examined per completion of a template variable; the rest are not offered.
const URI_SCAN_LIMIT: usize = 10_000;
/// URIs read per store round trip while scanning.
const SCAN_PAGE: u32 = 1000;

pub struct Complete {
    params: CompleteRequestParams,
}

impl McpMethod for Complete {
    type Output = CompleteResult;

    fn parse(raw: Option<&Value>) -> Result<Self, McpError> {
        Ok(Self { params: params(raw)? })
    }

    async fn apply(self, ctx: &Context<'_>) -> Result<CompleteResult, McpError> {
        let argument = &self.params.argument;
        let candidates = match &self.params.r#ref {
            Reference::Prompt(reference) => {
                let prompt = find_prompt(ctx, &reference.name)
                    .await?
                    .ok_or_else(|| McpError::InvalidParams(format!("unknown prompt {:?}", reference.name)))?;
                let declared = prompt.prompt.arguments.iter().find(|a| a.name == argument.name).ok_or_else(|| {
                    McpError::InvalidParams(format!("prompt {:?} has no argument {:?}", reference.name, argument.name))
                })?;
                declared.completions.clone().unwrap_or_default().into_iter().collect()
            }
            Reference::Resource(reference) => {
                let template = UriTemplate::parse(&reference.uri)
                    .map_err(|error| McpError::InvalidParams(format!("ref.uri: {}", error.0)))?;
                if !template.variable_names().contains(&argument.name.as_str()) {
                    return Err(McpError::InvalidParams(format!(
                        "template {:?} has no variable {:?}",
                        reference.uri, argument.name
                    )));
                }
                template_values(ctx, &template, &argument.name, &self.params).await?
            }
            _ => return Err(McpError::InvalidParams("unsupported ref type".to_owned())),
        };
        let matching: Vec<String> = candidates.into_iter().filter(|value| value.starts_with(&argument.value)).collect();
        let total = matching.len();
        let values: Vec<String> = matching.into_iter().take(MAX_VALUES).collect();
        let mut completion = CompletionInfo::default();
        completion.values = values;
        completion.total = Some(u32::try_from(total).unwrap_or(u32::MAX));
        completion.has_more = Some(total > MAX_VALUES);
        let mut result = CompleteResult::new(completion);
        result.result_type = ctx.result_type();
        result.meta = ctx.result_meta();
        Ok(result)
    }
}

/// The values `variable` takes in the agent's stored URIs that match `template` (and agree with the
/// variables already chosen in `context.arguments`), scanning only the URIs under the template's literal
/// prefix, in URI order, at most [`URI_SCAN_LIMIT`] of them.
async fn template_values(
    ctx: &Context<'_>,
    template: &UriTemplate,
    variable: &str,
    request: &CompleteRequestParams,
) -> Result<BTreeSet<String>, McpError> {
    let chosen = request.context.as_ref().and_then(|context| context.arguments.clone()).unwrap_or_default();
    let prefix = literal_prefix(template);
    let store = ctx.registry().store();
    let mut values = BTreeSet::new();
    let mut after = (!prefix.is_empty()).then(|| prefix.to_owned());
    let mut scanned = 0;
    let mut budget = MatchBudget::per_request();
    // Starting after the prefix itself skips a resource stored exactly at the prefix; it has no variables.
    'pages: while scanned < URI_SCAN_LIMIT {
        let page = Resources::store(&**store).list(&ctx.agent.id, after.as_deref(), SCAN_PAGE).await?;
        let is_last = page.len() < SCAN_PAGE as usize;
        for resource in &page {
            let uri = resource.uri.as_str();
            if !uri.starts_with(prefix) {
                break 'pages;
            }
            scanned += 1;
            let Some(variables) = match_uri_within(template, uri, &mut budget) else {
                if budget.is_spent() {
                    break 'pages;
                }
                continue;
            };
            let agrees = chosen
                .iter()
                .filter(|(name, _)| name.as_str() != variable)
                .all(|(name, value)| variables.get(name).is_none_or(|found| found == value));
            if let (true, Some(value)) = (agrees, variables.get(variable)) {
                values.insert(value.clone());
            }
        }
        match page.last() {
            Some(last) if !is_last => after = Some(last.uri.as_str().to_owned()),
            _ => break,
        }
    }
    Ok(values)
}
