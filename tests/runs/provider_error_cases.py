"""Error responses as real providers, routers, self-hosted servers and the proxies in front of them send
them, each with where it was recorded and what a run must make of it
(docs/contract.md#providers-and-failures).

Bodies are copied from the cited page, fixture or bug report; where a report shows only the message,
the envelope is the one that provider's own source or documentation gives, and the row says so.
Secrets in the originals were already masked by their authors. test_real_world_errors.py replays
every row through the real adapter and the run loop's retry policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

RETRIES = 3  # PROVIDER_MAX_RETRIES, pinned by the test


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # URL, or repository and path
    provider: str  # the adapter it reaches: "openai" (OpenAI-compatible) or "anthropic"
    status: int | None  # HTTP status; None: no response at all
    body: Any = None  # JSON (dict or list), text (an HTML or plain page), or the exception raised
    headers: Mapping[str, str] = field(default_factory=dict)
    transient: bool = False
    retries: int = 0
    code: str = ""  # provider_code recorded on the run
    reported_status: int | None = None  # http_status recorded, when it is not `status`
    param: str = ""  # provider_parameter recorded on the run
    message: str = ""  # a fragment of the run's failure_message
    waits: float | None = None  # each backoff, when the provider's Retry-After sets it

    @property
    def http_status(self) -> int | None:
        return self.reported_status if self.reported_status is not None else self.status

    def reply(self) -> httpx.Response | Exception:
        if isinstance(self.body, Exception):
            return self.body
        assert self.status is not None
        if isinstance(self.body, str):
            kind = "text/html" if self.body.lstrip().startswith("<") else "text/plain"
            return httpx.Response(self.status, headers={"content-type": kind, **self.headers}, text=self.body)
        if self.body is None:
            return httpx.Response(self.status, headers=dict(self.headers))
        return httpx.Response(self.status, headers=dict(self.headers), json=self.body)


def transient(**fields: Any) -> Case:
    return Case(transient=True, retries=RETRIES, **fields)


def permanent(**fields: Any) -> Case:
    return Case(transient=False, retries=0, **fields)


# -- pages from the proxies in front ----------------------------------------------------------------

NGINX = "nginx/nginx src/http/ngx_http_special_response.c"


def nginx_page(title: str) -> str:
    return (
        f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
        f"<center><h1>{title}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
    )


CLOUDFLARE_520 = """<!DOCTYPE html>
<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> <![endif]-->
<!--[if gt IE 8]><!--> <html class="no-js" lang="en-US"> <!--<![endif]-->
<head>


<title>api.anthropic.com | 520: Web server is returning an unknown error</title>
<meta charset="UTF-8" />
<meta http-equiv="Content-Type" content="text/html; charset=UTF-8" />
<meta name="robots" content="noindex, nofollow" />
<link rel="stylesheet" id="cf_styles-css" href="/cdn-cgi/styles/main.css" />
</head>
<body>
     <p><span>There is an issue between Cloudflare's cache and your origin web server.</span></p>
</body>
</html>
"""

CLOUDFLARE_524 = """<!DOCTYPE html>
 <html class="no-js" lang="en-US">
<head>

<title>chat.openai.com | 524: A timeout occurred</title>
<meta charset="UTF-8" />
<meta name="robots" content="noindex, nofollow" />
</head>
<body>
<div id="cf-wrapper">
    <div id="cf-error-details" class="p-0">
        <header class="mx-auto pt-10 lg:pt-6 lg:px-8 w-240 lg:w-full mb-8">
            <h1 class="inline-block sm:block sm:mb-2 font-light text-60 lg:text-4xl">
              <span class="inline-block">A timeout occurred</span>
              <span class="code-label">Error code 524</span>
            </h1>
        </header>
    </div>
</div>
</body>
</html>
"""

CLOUDFLARE_522 = """<!DOCTYPE html>
<!--[if gt IE 8]><!--> <html class="no-js" lang="en-US"> <!--<![endif]-->
<head>


<title>oai.hconeai.com | 522: Connection timed out</title>
<meta charset="UTF-8" />
</head>
<body>
<div id="cf-wrapper">
    <div id="cf-error-details" class="p-0">
        <header class="mx-auto pt-10 lg:pt-6 lg:px-8 w-240 lg:w-full mb-8">
            <h1 class="inline-block sm:block sm:mb-2 font-light text-60 lg:text-4xl">
              <span class="inline-block">Connection timed out</span>
              <span class="code-label">Error code 522</span>
            </h1>
        </header>
    </div>
</div>
</body>
</html>
"""


CASES: list[Case] = [
    # -- OpenAI ---------------------------------------------------------------------------------
    permanent(
        name="openai 401 invalid_api_key",
        source="https://github.com/chatanywhere/GPT_API_free/issues/62",
        provider="openai",
        status=401,
        body={
            "error": {
                "message": "Incorrect API key provided: sk-VKMIs***************************************wjh3. "
                "You can find your API key at https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        },
        code="invalid_api_key",
        message="Incorrect API key provided",
    ),
    transient(
        name="openai 429 rate_limit_exceeded (tokens per minute)",
        source="message: https://github.com/continuedev/continue/issues/10502; envelope: "
        "https://github.com/vanderschaarlab/climb/issues/1",
        provider="openai",
        status=429,
        body={
            "error": {
                "message": "Rate limit reached for gpt-4.1 in organization org-vyUrKHsIdLcZGKR3zqCqllrS on "
                "tokens per min (TPM): Limit 30000, Used 28039, Requested 3906. Please try again in 3.89s. "
                "Visit https://platform.openai.com/account/rate-limits to learn more.",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        code="rate_limit_exceeded",
        message="Please try again in 3.89s",
    ),
    transient(
        # A request larger than the whole per-minute limit cannot pass by waiting, but nothing
        # structured says so: its code is the rate limit's, so it is retried like one.
        name="openai 429 request too large for the per-minute limit",
        source="https://github.com/vanderschaarlab/climb/issues/1",
        provider="openai",
        status=429,
        body={
            "error": {
                "message": "Request too large for gpt-4o in organization org-VDAWofJASuLH0vVz8o9tiQZr on "
                "tokens per min (TPM): Limit 30000, Requested 30601. The input or output tokens must be "
                "reduced in order to run successfully. Visit "
                "https://platform.openai.com/account/rate-limits to learn more.",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        code="rate_limit_exceeded",
        message="Request too large for gpt-4o",
    ),
    permanent(
        name="openai 429 insufficient_quota",
        source="https://github.com/transitive-bullshit/agentic/issues/639",
        provider="openai",
        status=429,
        body={
            "error": {
                "message": "You exceeded your current quota, please check your plan and billing details. For "
                "more information on this error, read the docs: "
                "https://platform.openai.com/docs/guides/error-codes/api-errors.",
                "type": "insufficient_quota",
                "param": None,
                "code": "insufficient_quota",
            }
        },
        code="insufficient_quota",
        message="You exceeded your current quota",
    ),
    permanent(
        name="openai 429 billing_not_active",
        source="https://github.com/RamiAwar/dataline/issues/175",
        provider="openai",
        status=429,
        body={
            "error": {
                "message": "Your account is not active, please check your billing details on our website.",
                "type": "billing_not_active",
                "param": None,
                "code": "billing_not_active",
            }
        },
        code="billing_not_active",
        message="Your account is not active",
    ),
    permanent(
        name="openai 429 billing_not_active as the type only",
        source="https://github.com/Chanzhaoyu/chatgpt-web/issues/1273",
        provider="openai",
        status=429,
        body={
            "error": {
                "message": "Your account is not active, please check your billing details on our website.",
                "type": "billing_not_active",
                "param": None,
                "code": None,
            }
        },
        code="billing_not_active",
        message="check your billing details",
    ),
    permanent(
        name="openai 400 context_length_exceeded",
        source="https://github.com/chathub-dev/chathub/issues/126",
        provider="openai",
        status=400,
        body={
            "error": {
                "message": "This model's maximum context length is 4097 tokens. However, your messages "
                "resulted in 4294 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
        code="context_length_exceeded",
        param="messages",
        message="maximum context length is 4097 tokens",
    ),
    permanent(
        name="openai 400 a tool message without its call",
        source="https://github.com/langchain-ai/langchain-mcp-adapters/issues/61",
        provider="openai",
        status=400,
        body={
            "error": {
                "message": "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                "message with 'tool_calls'. (request id: 20250402162238365911184hjhKuPzB) (request id: "
                "20250402162238352981541HzZS7piM)",
                "type": "invalid_request_error",
                "param": "messages.[3].role",
                "code": None,
            }
        },
        code="invalid_request_error",
        param="messages.[3].role",
        message="messages with role 'tool' must be a response",
    ),
    transient(
        name="openai 500 server_error",
        source="https://github.com/langbot-app/LangBot/issues/126",
        provider="openai",
        status=500,
        body={
            "error": {
                "message": "The server had an error while processing your request. Sorry about that!",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        },
        code="server_error",
        message="Sorry about that!",
    ),
    transient(
        name="openai 503 model overloaded",
        source="https://github.com/waylaidwanderer/node-chatgpt-api/issues/34",
        provider="openai",
        status=503,
        body={
            "error": {
                "message": "That model is currently overloaded with other requests. You can retry your "
                "request, or contact us through our help center at help.openai.com if the error persists. "
                "(Please include the request ID 169bee8d  in your message.)",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        },
        code="server_error",
        message="currently overloaded with other requests",
    ),
    # -- Azure OpenAI ----------------------------------------------------------------------------
    permanent(
        name="azure 400 content_filter",
        source="https://github.com/compl-ai/compl-ai/issues/20",
        provider="openai",
        status=400,
        body={
            "error": {
                "message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
                "management policy. Please modify your prompt and retry. To learn more about our content "
                "filtering policies please read our documentation: "
                "https://go.microsoft.com/fwlink/?linkid=2198766",
                "type": None,
                "param": "prompt",
                "code": "content_filter",
                "status": 400,
                "innererror": {
                    "code": "ResponsibleAIPolicyViolation",
                    "content_filter_result": {
                        "hate": {"filtered": False, "severity": "safe"},
                        "jailbreak": {"filtered": False, "detected": False},
                        "self_harm": {"filtered": False, "severity": "safe"},
                        "sexual": {"filtered": False, "severity": "safe"},
                        "violence": {"filtered": True, "severity": "medium"},
                    },
                },
            }
        },
        code="content_filter",
        param="prompt",
        message="content management policy",
    ),
    transient(
        name="azure 429 token rate limit, retry after 9 seconds",
        source="https://github.com/microsoft/sample-app-aoai-chatGPT/issues/406 (Retry-After as Azure sends "
        "it with the message)",
        provider="openai",
        status=429,
        headers={"retry-after": "9"},
        body={
            "error": {
                "code": "429",
                "message": "Requests to the Creates a completion for the chat message Operation under Azure "
                "OpenAI API version 2023-03-15-preview have exceeded token rate limit of your current "
                "OpenAI S0 pricing tier. Please retry after 9 seconds. Please go here: "
                "https://aka.ms/oai/quotaincrease if you would like to further increase the default rate "
                "limit.",
            }
        },
        code="429",
        message="Please retry after 9 seconds",
        waits=9.0,
    ),
    permanent(
        name="azure 429 retry after a day",
        source="https://github.com/alex-wolf-ps/dbchatprov2/issues/2",
        provider="openai",
        status=429,
        headers={"retry-after": "86400"},
        body={
            "error": {
                "code": "429",
                "message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
                "2024-05-01-preview have exceeded token rate limit of your current OpenAI S0 pricing tier. "
                "Please retry after 86400 seconds. Please go here: https://aka.ms/oai/quotaincrease if you "
                "would like to further increase the default rate limit.",
            }
        },
        code="429",
        message="Retry-After 86400 s is above the cap",
    ),
    # -- Anthropic ---------------------------------------------------------------------------------
    permanent(
        name="anthropic 400 invalid_request_error",
        source="https://platform.claude.com/docs/en/api/errors (error shapes); message: "
        "https://github.com/BerriAI/litellm/issues/37599",
        provider="anthropic",
        status=400,
        body={
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "You have reached your specified API usage limits. You will regain access on "
                "2026-09-01 at 00:00 UTC.",
            },
            "request_id": "req_011CeDfeyYs7N6neZrLwFxPJ",
        },
        code="invalid_request_error",
        message="You have reached your specified API usage limits",
    ),
    permanent(
        name="anthropic 401 authentication_error",
        source="https://platform.claude.com/docs/en/api/errors",
        provider="anthropic",
        status=401,
        body={
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"},
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
        },
        code="authentication_error",
        message="invalid x-api-key",
    ),
    permanent(
        name="anthropic 402 billing_error",
        source="https://platform.claude.com/docs/en/api/errors",
        provider="anthropic",
        status=402,
        body={
            "type": "error",
            "error": {
                "type": "billing_error",
                "message": "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
                "Billing to upgrade or purchase credits.",
            },
        },
        code="billing_error",
        message="credit balance is too low",
    ),
    permanent(
        name="anthropic 403 permission_error",
        source="https://platform.claude.com/docs/en/api/errors",
        provider="anthropic",
        status=403,
        body={
            "type": "error",
            "error": {
                "type": "permission_error",
                "message": "Your API key does not have permission to use the specified resource.",
            },
        },
        code="permission_error",
        message="does not have permission",
    ),
    permanent(
        name="anthropic 404 not_found_error",
        source="https://platform.claude.com/docs/en/api/errors (its example body)",
        provider="anthropic",
        status=404,
        body={
            "type": "error",
            "error": {"type": "not_found_error", "message": "The requested resource could not be found."},
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
        },
        code="not_found_error",
        message="could not be found",
    ),
    permanent(
        name="anthropic 413 request_too_large",
        source="https://platform.claude.com/docs/en/api/errors",
        provider="anthropic",
        status=413,
        body={
            "type": "error",
            "error": {
                "type": "request_too_large",
                "message": "Request exceeds the maximum allowed number of bytes.",
            },
        },
        code="request_too_large",
        message="maximum allowed number of bytes",
    ),
    transient(
        name="anthropic 429 rate_limit_error with retry-after",
        source="https://github.com/anthropics/claude-code/issues/69703 (body); "
        "https://platform.claude.com/docs/en/api/rate-limits (retry-after)",
        provider="anthropic",
        status=429,
        headers={"retry-after": "12"},
        body={
            "type": "error",
            "error": {"details": None, "type": "rate_limit_error", "message": "Rate limited"},
            "request_id": "req_011CcEKSiJyvQLd8zW1kBxWe",
        },
        code="rate_limit_error",
        message="Rate limited",
        waits=12.0,
    ),
    transient(
        name="anthropic 429 per-minute token limit",
        source="https://www.developersdigest.tech/errors/api/anthropic-api/429-rate-limit-error (as Claude "
        "Code passes it through)",
        provider="anthropic",
        status=429,
        body={
            "type": "error",
            "error": {
                "type": "rate_limit_error",
                "message": "Number of request tokens has exceeded your per-minute rate limit "
                "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current "
                "usage.",
            },
        },
        code="rate_limit_error",
        message="per-minute rate limit",
    ),
    transient(
        # Will not pass by waiting either, but nothing structured says so.
        name="anthropic 429 extra usage required",
        source="https://github.com/anthropics/claude-code/issues/39180",
        provider="anthropic",
        status=429,
        body={
            "type": "error",
            "error": {
                "type": "rate_limit_error",
                "message": "Extra usage is required for long context requests.",
            },
            "request_id": "req_011CZR7dxurmpk4f459h33CD",
        },
        code="rate_limit_error",
        message="Extra usage is required",
    ),
    permanent(
        name="anthropic 429 tier spend cap (details.error_code)",
        source="https://platform.claude.com/docs/en/api/rate-limits (spend limits: 429, "
        "error.details.error_code enforced_spend_limit_reached, no retry-after)",
        provider="anthropic",
        status=429,
        body={
            "type": "error",
            "error": {
                "type": "rate_limit_error",
                "message": "You have reached your API usage limits: your organization has crossed its "
                "monthly API usage threshold, set based on your organization's API tier. You will regain "
                "access on 2026-09-01 at 00:00 UTC.",
                "details": {"error_code": "enforced_spend_limit_reached"},
            },
            "request_id": "req_018EeWyXxfu5pfWkrYcMdjWG",
        },
        code="rate_limit_error",
        message="crossed its monthly API usage threshold",
    ),
    transient(
        name="anthropic 500 api_error",
        source="https://platform.claude.com/docs/en/api/errors",
        provider="anthropic",
        status=500,
        body={"type": "error", "error": {"type": "api_error", "message": "Internal server error"}},
        code="api_error",
        message="Internal server error",
    ),
    transient(
        name="anthropic 504 timeout_error",
        source="https://platform.claude.com/docs/en/api/errors",
        provider="anthropic",
        status=504,
        body={
            "type": "error",
            "error": {"type": "timeout_error", "message": "The request timed out while processing."},
        },
        code="timeout_error",
        message="timed out while processing",
    ),
    transient(
        name="anthropic 529 overloaded_error with x-should-retry",
        source="https://github.com/anthropics/anthropic-sdk-typescript/issues/616",
        provider="anthropic",
        status=529,
        headers={"x-should-retry": "true", "request-id": "req_01RCc7MbLyQNtGKzBTv8VCep"},
        body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        code="overloaded_error",
        message="Overloaded",
    ),
    transient(
        name="anthropic 200 carrying an overloaded error event",
        source="https://platform.claude.com/docs/en/build-with-claude/streaming (error events); "
        "https://platform.claude.com/docs/en/api/errors (errors after a 200)",
        provider="anthropic",
        status=200,
        body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        code="overloaded_error",
        message="Overloaded",
    ),
    # -- OpenRouter ----------------------------------------------------------------------------------
    permanent(
        name="openrouter 402 insufficient credits",
        source="https://openrouter.ai/docs/client-sdks/python/errors/paymentrequiredresponseerror.md",
        provider="openai",
        status=402,
        body={
            "error": {
                "code": 402,
                "message": "Insufficient credits. Add more using https://openrouter.ai/credits",
            }
        },
        message="Insufficient credits",
    ),
    transient(
        name="openrouter 429 free model daily limit",
        source="https://github.com/BerriAI/litellm/issues/9035",
        provider="openai",
        status=429,
        body={
            "error": {
                "message": "Rate limit exceeded: "
                "limit_rpd/google/gemini-2.0-flash-thinking-exp-01-21/54276bca-abd7-4aa6-a6b5-1b8f898f1395",
                "code": 429,
                "metadata": {
                    "headers": {
                        "X-RateLimit-Limit": "80",
                        "X-RateLimit-Remaining": "0",
                        "X-RateLimit-Reset": "1741305600000",
                    }
                },
            }
        },
        message="Rate limit exceeded: limit_rpd",
    ),
    permanent(
        name="openrouter 404 no endpoint supports tool use",
        source="https://github.com/FoundationAgents/OpenManus/issues/55",
        provider="openai",
        status=404,
        body={
            "error": {
                "message": "No endpoints found that support tool use. To learn more about provider routing, "
                "visit: https://openrouter.ai/docs/provider-routing",
                "code": 404,
            }
        },
        message="No endpoints found that support tool use",
    ),
    permanent(
        name="openrouter 401 no auth credentials",
        source="message: https://github.com/BeehiveInnovations/pal-mcp-server/issues/209; envelope: "
        "https://openrouter.ai/docs/api/reference/errors-and-debugging",
        provider="openai",
        status=401,
        body={"error": {"message": "No auth credentials found", "code": 401}},
        message="No auth credentials found",
    ),
    transient(
        name="openrouter 200 with error code 502 once generation started",
        source="https://openrouter.ai/docs/api/reference/errors-and-debugging (a 200 whose body carries the "
        "error; 502: the chosen model is down or answered invalidly); message as OpenRouter words it: "
        "https://github.com/BerriAI/litellm/issues/8448",
        provider="openai",
        status=200,
        body={"error": {"code": 502, "message": "Provider returned error"}},
        reported_status=502,
        message="Provider returned error",
    ),
    transient(
        name="openrouter 200 with choices and error code 429",
        source="https://github.com/BerriAI/litellm/issues/8448",
        provider="openai",
        status=200,
        body={
            "id": "gen-1739239607-redacted",
            "object": "chat.completion",
            "created": 1739239607,
            "model": "meta-llama/llama-3.3-70b-instruct",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": None},
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "error": {
                "message": "Provider returned error",
                "code": 429,
                "metadata": {"raw": "error code: 1015", "provider_name": "Kluster"},
            },
        },
        reported_status=429,
        message="Provider returned error",
    ),
    # -- Gemini's OpenAI-compatible endpoint (a list of errors) ----------------------------------
    transient(
        name="gemini 429 RESOURCE_EXHAUSTED, list-wrapped",
        source="https://github.com/n4ze3m/page-assist/issues/406",
        provider="openai",
        status=429,
        body=[
            {
                "error": {
                    "code": 429,
                    "message": "Resource has been exhausted (e.g. check quota).",
                    "status": "RESOURCE_EXHAUSTED",
                }
            }
        ],
        message="Resource has been exhausted",
    ),
    permanent(
        name="gemini 400 INVALID_ARGUMENT, list-wrapped",
        source="https://github.com/google-gemini/gemini-cli/issues/12823",
        provider="openai",
        status=400,
        body=[
            {
                "error": {
                    "code": 400,
                    "message": "Request contains an invalid argument.",
                    "errors": [
                        {
                            "message": "Request contains an invalid argument.",
                            "domain": "global",
                            "reason": "badRequest",
                        }
                    ],
                    "status": "INVALID_ARGUMENT",
                }
            }
        ],
        message="Request contains an invalid argument.",
    ),
    permanent(
        name="gemini 400 function responses do not match, list-wrapped",
        source="https://github.com/google-gemini/gemini-cli/issues/16132",
        provider="openai",
        status=400,
        body=[
            {
                "error": {
                    "code": 400,
                    "message": "Please ensure that the number of function response parts is equal to the "
                    "number of function call parts of the function call turn.",
                    "errors": [
                        {
                            "message": "Please ensure that the number of function response parts is equal to "
                            "the number of function call parts of the function call turn.",
                            "domain": "global",
                            "reason": "badRequest",
                        }
                    ],
                    "status": "INVALID_ARGUMENT",
                }
            }
        ],
        message="number of function response parts",
    ),
    transient(
        name="gemini 503 UNAVAILABLE, model overloaded",
        source="https://github.com/appatalks/eva-agent/issues/50",
        provider="openai",
        status=503,
        body={
            "error": {
                "code": 503,
                "message": "The model is overloaded. Please try again later.",
                "status": "UNAVAILABLE",
            }
        },
        message="The model is overloaded",
    ),
    # -- Groq, Together, DeepSeek, Mistral -------------------------------------------------------
    permanent(
        name="groq 413 request too large for the tier",
        source="https://github.com/bklieger-groq/NotebookLlama-Groq/issues/1",
        provider="openai",
        status=413,
        body={
            "error": {
                "message": "Request too large for model `llama-3.1-70b-versatile` in organization "
                "`org_01hsmce9vqehtt30cz5h7ebmk7` on tokens per minute (TPM): Limit 6000, Requested 18993, "
                "please reduce your message size and try again. Visit "
                "https://console.groq.com/docs/rate-limits for more information.",
                "type": "tokens",
                "code": "rate_limit_exceeded",
            }
        },
        code="rate_limit_exceeded",
        message="please reduce your message size",
    ),
    transient(
        name="groq 429 tokens per minute with retry-after",
        source="message: https://github.com/elizaOS/eliza/issues/4040; retry-after in seconds: "
        "https://console.groq.com/docs/rate-limits",
        provider="openai",
        status=429,
        headers={"retry-after": "5"},
        body={
            "error": {
                "message": "Rate limit reached for model `llama-3.1-8b-instant` in organization "
                "`org_01j5b4pz9jff492fq686vypsx6` service tier `on_demand` on tokens per minute (TPM): "
                "Limit 6000, Used 5034, Requested 1443. Please try again in 4.77s. Need more tokens? "
                "Upgrade to Dev Tier today at https://console.groq.com/settings/billing",
                "type": "tokens",
                "code": "rate_limit_exceeded",
            }
        },
        code="rate_limit_exceeded",
        message="Please try again in 4.77s",
        waits=5.0,
    ),
    permanent(
        name="groq 429 tokens per day, retry-after beyond the cap",
        source="message: https://github.com/continuedev/continue/issues/10920; retry-after in seconds: "
        "https://console.groq.com/docs/rate-limits",
        provider="openai",
        status=429,
        headers={"retry-after": "579"},
        body={
            "error": {
                "message": "Rate limit reached for model `llama-3.3-70b-versatile` in organization "
                "`org_01kjh7p9n8f1qs6nz2bz77vy6b` service tier `on_demand` on tokens per day (TPD): Limit "
                "100000, Used 97050, Requested 3619. Please try again in 9m38.016s.",
                "type": "tokens",
                "code": "rate_limit_exceeded",
            }
        },
        code="rate_limit_exceeded",
        message="Retry-After 579 s is above the cap",
    ),
    transient(
        name="together 429 free-tier rate limit",
        source="https://github.com/togethercomputer/MoA/issues/27",
        provider="openai",
        status=429,
        body={
            "error": {
                "message": "You have been rate limited. Your rate limit is 60 queries per minute. Please "
                "navigate to https://api.together.xyz/settings/billing to upgrade to a paid plan.",
                "type": "credit_limit",
                "param": None,
                "code": None,
            }
        },
        code="credit_limit",
        message="You have been rate limited",
    ),
    permanent(
        name="deepseek 402 insufficient balance",
        source="https://github.com/Aider-AI/aider/issues/4851",
        provider="openai",
        status=402,
        body={
            "error": {
                "message": "Insufficient Balance",
                "type": "unknown_error",
                "param": None,
                "code": "invalid_request_error",
            }
        },
        code="invalid_request_error",
        message="Insufficient Balance",
    ),
    permanent(
        name="deepseek 400 context length",
        source="https://github.com/evalstate/fast-agent/issues/621",
        provider="openai",
        status=400,
        body={
            "error": {
                "message": "This model's maximum context length is 131072 tokens. However, you requested "
                "131134 tokens (122942 in the messages, 8192 in the completion). Please reduce the length "
                "of the messages or completion.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        },
        code="invalid_request_error",
        message="maximum context length is 131072 tokens",
    ),
    permanent(
        name="mistral 400 flat error",
        source="https://github.com/langchain-ai/langgraph/discussions/964",
        provider="openai",
        status=400,
        body={
            "object": "error",
            "message": "Not the same number of function calls and responses",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        },
        code="invalid_request_error",
        message="Not the same number of function calls and responses",
    ),
    transient(
        name="mistral 429 flat error",
        source="https://github.com/cline/cline/issues/9085",
        provider="openai",
        status=429,
        body={
            "object": "error",
            "message": "Rate limit exceeded",
            "type": "rate_limited",
            "param": None,
            "code": "1300",
        },
        code="1300",
        message="Rate limit exceeded",
    ),
    transient(
        name="mistral 429 bare message",
        source="https://github.com/pydantic/pydantic-ai/issues/1885",
        provider="openai",
        status=429,
        body={"message": "Requests rate limit exceeded"},
        message="Requests rate limit exceeded",
    ),
    permanent(
        name="mistral 422 flat error whose message is structured",
        source="https://github.com/vegu-ai/talemate/issues/102 (cut off in the report after the detail; "
        "closed here as Mistral's flat shape)",
        provider="openai",
        status=422,
        body={
            "object": "error",
            "message": {
                "detail": [
                    {
                        "type": "less_than_equal",
                        "loc": ["body", "temperature"],
                        "msg": "Input should be less than or equal to 1",
                        "input": 1.31,
                    }
                ]
            },
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        },
        code="invalid_request_error",
        message="Input should be less than or equal to 1",
    ),
    # -- self-hosted servers ------------------------------------------------------------------
    permanent(
        name="vllm 400 flat error",
        source="https://github.com/vllm-project/vllm/issues/4667",
        provider="openai",
        status=400,
        body={
            "object": "error",
            "message": "max_tokens must be at least 1, got -186.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        code="BadRequestError",
        message="max_tokens must be at least 1, got -186.",
    ),
    permanent(
        name="vllm 404 unknown model, flat",
        source="vllm-project/vllm vllm/entrypoints/openai/serving_engine.py (_check_model)",
        provider="openai",
        status=404,
        body={
            "object": "error",
            "message": "The model `gpt-4o` does not exist.",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        },
        code="NotFoundError",
        message="The model `gpt-4o` does not exist.",
    ),
    permanent(
        name="vllm 400 nested error (newer versions)",
        source="vllm-project/vllm vllm/entrypoints/openai/protocol.py (ErrorResponse, ErrorInfo)",
        provider="openai",
        status=400,
        body={
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, you requested 8203 "
                "tokens (7691 in the messages, 512 in the completion). Please reduce the length of the "
                "messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
        code="BadRequestError",
        message="maximum context length is 8192 tokens",
    ),
    permanent(
        name="vllm 400 without a body",
        source="https://github.com/huggingface/chat-ui/issues/1343",
        provider="openai",
        status=400,
        body=None,
        message="The provider answered HTTP 400.",
    ),
    permanent(
        name="sglang 400 flat error",
        source="https://github.com/sgl-project/sglang/issues/33504",
        provider="openai",
        status=400,
        body={
            "object": "error",
            "message": "max_tokens=999999 cannot exceed the model's context length (40960 tokens).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        code="BadRequestError",
        message="cannot exceed the model's context length",
    ),
    permanent(
        name="sglang 401 error as a string",
        source="https://github.com/sgl-project/sglang/issues/25127",
        provider="openai",
        status=401,
        body={"error": "Unauthorized"},
        message="Unauthorized",
    ),
    permanent(
        name="ollama 404 model not found (OpenAI-compatible endpoint)",
        source="ollama/ollama openai/openai.go (NewError); message: "
        "https://github.com/ollama/ollama/issues/3876",
        provider="openai",
        status=404,
        body={
            "error": {
                "message": "model 'llama3' not found, try pulling it first",
                "type": "not_found_error",
                "param": None,
                "code": None,
            }
        },
        code="not_found_error",
        message="try pulling it first",
    ),
    permanent(
        name="ollama 404 model not found (native error string)",
        source="https://github.com/ollama/ollama/issues/3876",
        provider="openai",
        status=404,
        body={"error": "model 'llama3' not found, try pulling it first"},
        message="model 'llama3' not found",
    ),
    transient(
        name="ollama 500 runner killed",
        source="ollama/ollama openai/openai.go (NewError: api_error); message: "
        "https://github.com/home-assistant/core/issues/125856",
        provider="openai",
        status=500,
        body={
            "error": {
                "message": "llama runner process has terminated: signal: killed",
                "type": "api_error",
                "param": None,
                "code": None,
            }
        },
        code="api_error",
        message="llama runner process has terminated",
    ),
    transient(
        name="llama.cpp 503 loading model",
        source="ggml-org/llama.cpp tools/server/server-common.cpp (format_error_response, "
        "ERROR_TYPE_UNAVAILABLE)",
        provider="openai",
        status=503,
        body={"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
        code="unavailable_error",
        message="Loading model",
    ),
    permanent(
        name="llama.cpp 400 exceeds the context size",
        source="ggml-org/llama.cpp tools/server/server-context.cpp (exceed_context_size_error)",
        provider="openai",
        status=400,
        body={
            "error": {
                "code": 400,
                "message": "request (13392 tokens) exceeds the available context size (8192 tokens), try "
                "increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 13392,
                "n_ctx": 8192,
            }
        },
        code="exceed_context_size_error",
        message="exceeds the available context size",
    ),
    permanent(
        name="llama.cpp 401 invalid API key",
        source="ggml-org/llama.cpp tools/server/server-common.cpp (format_error_response, "
        "ERROR_TYPE_AUTHENTICATION)",
        provider="openai",
        status=401,
        body={"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}},
        code="authentication_error",
        message="Invalid API Key",
    ),
    permanent(
        name="tgi 422 validation error",
        source="huggingface/text-generation-inference router/src/server.rs (ErrorResponse with error_type); "
        "message: maruel/genai providers/huggingface/client_test.go",
        provider="openai",
        status=422,
        body={"error": "Input validation error: grammar is not supported", "error_type": "validation"},
        code="validation",
        message="grammar is not supported",
    ),
    transient(
        name="tgi 429 overloaded",
        source="huggingface/text-generation-inference router/src/server.rs (InferError::Overloaded -> 429, "
        "error_type overloaded)",
        provider="openai",
        status=429,
        body={"error": "Model is overloaded", "error_type": "overloaded"},
        code="overloaded",
        message="Model is overloaded",
    ),
    permanent(
        # TGI answers a failed generation with 424; by docs/contract.md#providers-and-failures any other
        # 4xx is permanent.
        name="tgi 424 generation error",
        source="huggingface/text-generation-inference router/src/server.rs (InferError::GenerationError -> "
        "FAILED_DEPENDENCY)",
        provider="openai",
        status=424,
        body={
            "error": "Request failed during generation: Server error: CUDA out of memory.",
            "error_type": "generation",
        },
        code="generation",
        message="Request failed during generation",
    ),
    permanent(
        name="nvidia api catalog 404 problem details",
        source="https://github.com/Alishahryar1/free-claude-code/issues/1021",
        provider="openai",
        status=404,
        body={
            "status": 404,
            "title": "Not Found",
            "detail": "Function '23d4f03a-b8a6-4adb-a183-7daa083a09cc': Not found for account "
            "'Qawmu2vUw3rdcREnubcAVqe1c55nUTb1hCogKQx4BCA'",
        },
        message="Not found for account",
    ),
    permanent(
        name="nvidia api catalog 404 without a body",
        source="https://github.com/iOfficeAI/AionUi/issues/1035",
        provider="openai",
        status=404,
        body=None,
        message="HTTP 404",
    ),
    # -- LiteLLM proxy ------------------------------------------------------------------------
    transient(
        name="litellm 429 no deployments available",
        source="https://github.com/BerriAI/litellm/issues/20867",
        provider="openai",
        status=429,
        body={
            "error": {
                "message": "No deployments available for selected model.",
                "type": "None",
                "param": "None",
                "code": "429",
            }
        },
        code="429",
        param="None",
        message="No deployments available",
    ),
    permanent(
        name="litellm 401 invalid proxy token",
        source="https://github.com/BerriAI/litellm/issues/7287",
        provider="openai",
        status=401,
        body={
            "error": {
                "message": "Authentication Error, Invalid proxy server token passed. valid_token=None.",
                "type": "auth_error",
                "param": "None",
                "code": "401",
            }
        },
        code="401",
        param="None",
        message="Invalid proxy server token",
    ),
    permanent(
        name="litellm 400 budget exceeded",
        source="https://github.com/BerriAI/litellm/issues/4208",
        provider="openai",
        status=400,
        body={
            "error": {
                "message": "Budget has been exceeded! Current cost: 0.0010747, Max budget: 0.0",
                "type": "auth_error",
                "param": None,
                "code": 400,
            }
        },
        code="auth_error",
        message="Budget has been exceeded!",
    ),
    permanent(
        name="litellm 429 budget_exceeded",
        source="https://github.com/BerriAI/litellm/pull/37000 (429 with error.type budget_exceeded); "
        "message: LiteLLM budgets docs as quoted in https://github.com/OWASP/OpenCRE/pull/1102",
        provider="openai",
        status=429,
        body={
            "error": {
                "message": "LiteLLM User: engineer-1, exceeded budget for model=claude-opus-4-8",
                "type": "budget_exceeded",
                "param": None,
                "code": "429",
            }
        },
        code="429",
        message="exceeded budget for model",
    ),
    permanent(
        name="litellm 400 wrapping an Anthropic spend limit",
        source="https://github.com/BerriAI/litellm/issues/37599",
        provider="openai",
        status=400,
        body={
            "error": {
                "message": "litellm.BadRequestError: AnthropicException - "
                'b\'{"type":"error","error":{"type":"invalid_request_error",'
                '"message":"You have reached your specified API usage limits. '
                'You will regain access on 2026-09-01 at 00:00 UTC."},'
                '"request_id":"req_011CeDfeyYs7N6neZrLwFxPJ"}\'. '
                "Received Model Group=claude-haiku-4-5-20251001\nAvailable Model Group Fallbacks=None",
                "type": None,
                "param": None,
                "code": "400",
            }
        },
        code="400",
        message="You have reached your specified API usage limits",
    ),
    # -- proxies' pages ------------------------------------------------------------------------
    transient(
        name="nginx 502 page",
        source=f"{NGINX} (ngx_http_error_502_page)",
        provider="openai",
        status=502,
        body=nginx_page("502 Bad Gateway"),
        message="HTTP 502: 502 Bad Gateway.",
    ),
    transient(
        name="nginx 504 page",
        source=f"{NGINX} (ngx_http_error_504_page)",
        provider="anthropic",
        status=504,
        body=nginx_page("504 Gateway Time-out"),
        message="HTTP 504: 504 Gateway Time-out.",
    ),
    transient(
        name="nginx 503 page",
        source=f"{NGINX} (ngx_http_error_503_page)",
        provider="openai",
        status=503,
        body=nginx_page("503 Service Temporarily Unavailable"),
        message="503 Service Temporarily Unavailable",
    ),
    permanent(
        name="nginx 413 page",
        source=f"{NGINX} (ngx_http_error_413_page)",
        provider="openai",
        status=413,
        body=nginx_page("413 Request Entity Too Large"),
        message="413 Request Entity Too Large",
    ),
    transient(
        name="nginx 429 page (limit_req)",
        source=f"{NGINX} (ngx_http_error_429_page)",
        provider="anthropic",
        status=429,
        body=nginx_page("429 Too Many Requests"),
        message="429 Too Many Requests",
    ),
    transient(
        name="cloudflare 520 page in front of Anthropic",
        source="https://github.com/anthropics/claude-code/issues/3197",
        provider="anthropic",
        status=520,
        body=CLOUDFLARE_520,
        message="520: Web server is returning an unknown error",
    ),
    transient(
        name="cloudflare 524 page",
        source="https://github.com/acheong08/ChatGPT/issues/447",
        provider="openai",
        status=524,
        body=CLOUDFLARE_524,
        message="524: A timeout occurred",
    ),
    transient(
        name="cloudflare 522 page in front of a router",
        source="https://github.com/Helicone/helicone/issues/798",
        provider="openai",
        status=522,
        body=CLOUDFLARE_522,
        message="522: Connection timed out",
    ),
    transient(
        name="cloudflare 522 problem details in front of Anthropic",
        source="https://github.com/anthropics/claude-code/issues/67341",
        provider="anthropic",
        status=522,
        body={
            "type": "https://developers.cloudflare.com/support/troubleshooting/http-status-codes/"
            "cloudflare-5xx-errors/error-522/",
            "title": "Error 522: Connection timed out",
            "status": 522,
            "detail": "Cloudflare could not establish a TCP connection to the origin server. The TCP "
            "handshake timed out, which may indicate the origin is overloaded, firewalling Cloudflare, or "
            "unreachable at the network level.",
            "error_code": 522,
            "error_name": "connection_timeout",
            "retryable": True,
            "retry_after": 120,
        },
        message="could not establish a TCP connection",
    ),
    transient(
        name="cloudflare 522 as plain text",
        source="https://github.com/fatwang2/search2ai/issues/12",
        provider="openai",
        status=522,
        body="error code: 522",
        message="HTTP 522: error code: 522.",
    ),
    transient(
        name="envoy 503 upstream reset",
        source="envoyproxy/envoy source/common/router/router.cc (onUpstreamReset local reply)",
        provider="openai",
        status=503,
        body="upstream connect error or disconnect/reset before headers. reset reason: connection failure",
        message="upstream connect error or disconnect/reset before headers",
    ),
    transient(
        name="envoy 503 no healthy upstream",
        source="envoyproxy/envoy source/common/router/router.cc (sendNoHealthyUpstreamResponse)",
        provider="anthropic",
        status=503,
        body="no healthy upstream",
        message="no healthy upstream",
    ),
    # -- no response at all -------------------------------------------------------------------
    transient(
        name="connection refused",
        source="httpx: httpx.ConnectError as raised for ECONNREFUSED",
        provider="openai",
        status=None,
        body=httpx.ConnectError("[Errno 111] Connection refused"),
        message="No response from the provider (connection: ConnectError)",
    ),
    transient(
        name="name resolution failure",
        source="httpx: httpx.ConnectError as raised for a failed DNS lookup",
        provider="anthropic",
        status=None,
        body=httpx.ConnectError("[Errno -3] Temporary failure in name resolution"),
        message="connection: ConnectError",
    ),
    transient(
        name="connect timeout",
        source="httpx: httpx.ConnectTimeout",
        provider="openai",
        status=None,
        body=httpx.ConnectTimeout("timed out"),
        message="timeout: ConnectTimeout",
    ),
    transient(
        name="read timeout",
        source="httpx: httpx.ReadTimeout",
        provider="anthropic",
        status=None,
        body=httpx.ReadTimeout("The read operation timed out"),
        message="had not begun its answer within the first-token timeout",
    ),
    transient(
        name="connection reset by peer",
        source="httpx: httpx.ReadError for ECONNRESET",
        provider="openai",
        status=None,
        body=httpx.ReadError("[Errno 104] Connection reset by peer"),
        message="connection to the provider broke before its answer was complete. (ReadError)",
    ),
    transient(
        name="server disconnected without a response",
        source="httpx: httpx.RemoteProtocolError",
        provider="anthropic",
        status=None,
        body=httpx.RemoteProtocolError("Server disconnected without sending a response."),
        message="connection to the provider broke before its answer was complete. (RemoteProtocolError)",
    ),
]
