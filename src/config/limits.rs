//! `[limits]` and `[rate_limits]`: what one request, one field and one agent may hold, and how often a key,
//! an agent or an admin credential may ask ([`crate::guard`]).

use super::ConfigError;

section! {
    pub struct LimitsConfig {
        /// Largest request body accepted on any endpoint (413 beyond).
        pub max_body_bytes: usize = 8 * 1024 * 1024,
        /// Largest content of one resource (text bytes or decoded blob bytes).
        pub max_resource_bytes: usize = 4 * 1024 * 1024,
        /// Resources one agent may hold (0: unlimited).
        pub max_resources_per_agent: u64 = 100_000,
        /// Resource templates one agent may hold: 1 to [`MAX_TEMPLATES_PER_AGENT`] (a read is matched against
        /// all of them).
        pub max_templates_per_agent: u64 = 1_000,
        /// Prompts one agent may hold (0: unlimited).
        pub max_prompts_per_agent: u64 = 1_000,
        /// Stored bytes of one agent together (0: unlimited): every field of its resources (content, URI, name,
        /// title, description, MIME type, annotations, `_meta`), templates and prompts, and its own name and
        /// description.
        pub max_agent_bytes: u64 = 1024 * 1024 * 1024,
        /// Stored bytes of every agent together, counted as for `max_agent_bytes` (0: unlimited).
        pub max_total_bytes: u64 = 0,

        /// How deeply arrays and objects may nest in a request body (MCP and admin): 1 to [`MAX_JSON_DEPTH`].
        pub max_json_depth: usize = 64,
        /// Bytes of a request's header fields together, each counted as `name: value` and a line break (431
        /// beyond).
        pub max_header_bytes: usize = 32 * 1024,
        /// Bytes of a request's target (path and query; 414 beyond).
        pub max_uri_bytes: usize = 8 * 1024,

        /// Bytes of a `name` (resource, template, prompt argument, agent, key; 413 beyond, as for every field
        /// limit below).
        pub max_name_bytes: usize = 1024,
        /// Bytes of a `title`.
        pub max_title_bytes: usize = 1024,
        /// Bytes of a `description` (an agent's is every modern answer's `instructions`).
        pub max_description_bytes: usize = 16 * 1024,
        /// Bytes of a `mimeType`.
        pub max_mime_type_bytes: usize = 256,
        /// Bytes of a `_meta` object, as compact JSON.
        pub max_meta_bytes: usize = 16 * 1024,
        /// Bytes of an `annotations` object, as compact JSON.
        pub max_annotations_bytes: usize = 1024,
        /// Bytes of a resource template's `uriTemplate`.
        pub max_uri_template_bytes: usize = 2048,
        /// Bytes of one MiniJinja source: a resource template's `text`, a templated field of a prompt message.
        pub max_template_text_bytes: usize = 64 * 1024,
        /// Bytes of a prompt's `arguments` and `messages` together, as compact JSON.
        pub max_prompt_bytes: usize = 256 * 1024,
        /// Bytes of one prompt argument's `completions`, as compact JSON.
        pub max_completions_bytes: usize = 64 * 1024,
        /// Arguments one prompt may declare.
        pub max_prompt_arguments: usize = 64,
        /// Bytes of the items of one list page (MCP and admin): a page that would grow past it ends early, with
        /// a cursor; it always holds at least one item.
        pub max_page_bytes: usize = 1024 * 1024,
        /// Renders that leave the request's task (those past the quick fuel, on the blocking pool) one agent may
        /// run at once; its others wait for a turn, so that it cannot take every core from the other agents.
        pub max_renders_per_agent: usize = 1,
        /// Such renders all agents may run at once (default: the number of CPUs).
        pub max_renders: usize = std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
    }
}

/// The most resource templates an agent may be allowed: every read of a URI no resource has is matched
/// against all of the agent's templates.
pub const MAX_TEMPLATES_PER_AGENT: u64 = 1_000;

/// The deepest nesting `limits.max_json_depth` may allow: the JSON parser's own recursion limit.
pub const MAX_JSON_DEPTH: usize = 127;

impl LimitsConfig {
    /// The size limit of each field a key can write.
    pub fn fields(&self) -> crate::domain::limits::FieldLimits {
        crate::domain::limits::FieldLimits {
            name: self.max_name_bytes,
            title: self.max_title_bytes,
            description: self.max_description_bytes,
            mime_type: self.max_mime_type_bytes,
            meta: self.max_meta_bytes,
            annotations: self.max_annotations_bytes,
            uri_template: self.max_uri_template_bytes,
            template_text: self.max_template_text_bytes,
            prompt: self.max_prompt_bytes,
            completions: self.max_completions_bytes,
            prompt_arguments: self.max_prompt_arguments,
        }
    }

    /// The quotas the store enforces.
    pub fn quotas(&self) -> crate::store::Quotas {
        crate::store::Quotas {
            max_resources_per_agent: self.max_resources_per_agent,
            max_templates_per_agent: self.max_templates_per_agent,
            max_prompts_per_agent: self.max_prompts_per_agent,
            max_agent_bytes: self.max_agent_bytes,
            max_total_bytes: self.max_total_bytes,
        }
    }
}

section! {
    /// Rate limits ([`crate::guard`]), kept by each replica on its own. A rate of 0 requests per second is
    /// unlimited; otherwise its burst must be at least 1.
    #[derive(Clone)]
    pub struct RateLimitsConfig {
        /// Requests per second all keys of an agent get together when the agent sets no `rateLimit`.
        pub agent_requests_per_second: u32 = 200,
        /// Requests at once those keys may send together (the bucket's size).
        pub agent_burst: u32 = 400,
        /// Requests per second each key gets on its own, within its agent's limit.
        pub key_requests_per_second: u32 = 100,
        /// Requests at once one key may send.
        pub key_burst: u32 = 200,
        /// Requests per second on the admin API for each credential (the operator token, each registry key).
        pub admin_requests_per_second: u32 = 100,
        /// Admin requests at once per credential.
        pub admin_burst: u32 = 200,
        /// `prompts/get` calls per second each key gets, besides its requests (rendering is the costly part).
        pub prompts_get_per_second: u32 = 0,
        pub prompts_get_burst: u32 = 0,
        /// `completion/complete` calls per second each key gets, besides its requests.
        pub completion_per_second: u32 = 0,
        pub completion_burst: u32 = 0,
        /// Bytes of `resources/read` answers per second each key gets; a read is admitted while the key's budget
        /// is not overdrawn and then charged with its answer's size.
        pub read_bytes_per_second: u32 = 0,
        pub read_bytes_burst: u32 = 0,
        /// Failed authentications (401) one client address may have within `failed_auth_window_secs` before its
        /// requests are refused (429) until the window ends; 0 turns this off.
        pub failed_auth_attempts: u32 = 20,
        /// The window of `failed_auth_attempts`, from the client's first failure.
        pub failed_auth_window_secs: u64 = 60,
        /// Proxies (CIDR networks) whose `X-Forwarded-For` is believed: behind one, the client is the rightmost
        /// entry that is not a trusted proxy.
        pub trusted_proxies: Vec<ipnet::IpNet> = Vec::new(),
    }
}

/// The longest `rate_limits.failed_auth_window_secs`: a day.
const MAX_FAILED_AUTH_WINDOW_SECS: u64 = 24 * 60 * 60;

impl RateLimitsConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let rates = [
            (key!(rate_limits.agent_burst), self.agent_requests_per_second, self.agent_burst),
            (key!(rate_limits.key_burst), self.key_requests_per_second, self.key_burst),
            (key!(rate_limits.admin_burst), self.admin_requests_per_second, self.admin_burst),
            (key!(rate_limits.prompts_get_burst), self.prompts_get_per_second, self.prompts_get_burst),
            (key!(rate_limits.completion_burst), self.completion_per_second, self.completion_burst),
            (key!(rate_limits.read_bytes_burst), self.read_bytes_per_second, self.read_bytes_burst),
        ];
        for (key, per_second, burst) in rates {
            if per_second > 0 && burst == 0 {
                return Err(ConfigError::Invalid {
                    key,
                    message: "must be at least 1 when its requests_per_second is set (0 requests per second is \
                              unlimited)"
                        .to_owned(),
                });
            }
        }
        if self.failed_auth_attempts > 0 && !(1..=MAX_FAILED_AUTH_WINDOW_SECS).contains(&self.failed_auth_window_secs) {
            return Err(ConfigError::Invalid {
                key: key!(rate_limits.failed_auth_window_secs),
                message: format!(
                    "must be between 1 and {MAX_FAILED_AUTH_WINDOW_SECS} when failed_auth_attempts is set (0 \
                     attempts turns the check off)"
                ),
            });
        }
        Ok(())
    }
}
