"""Oracle over any OpenAI-compatible chat endpoint (e.g. a running `vllm serve`).

Bounded concurrency (an asyncio semaphore of `scorer.oracle.openai.concurrency`), a per-request timeout,
and retries with exponential backoff on transport errors, timeouts, 429 and 5xx. The rubric's
JSON schema is sent as `response_format={"type": "json_schema", ...}`, which vLLM's server turns
into grammar-constrained decoding. `constraint="vllm_regex"` sends vLLM's own
`structured_outputs.regex` built from the rubric instead (exact compact JSON: a weak model cannot
pad it with whitespace until max_tokens, which a random test model does under the JSON schema);
`extra_body` adds any other server-specific fields. A request that still fails after all retries comes back as an
`<error> ...` answer so the labeller records it as a failure with the reason.
"""

from __future__ import annotations

import asyncio
import os

import httpx

from services.scorer.oracle.base import Oracle, OracleRequest

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAIOracle(Oracle):
    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_tokens: int = 512,
        temperature: float = 0.0,
        extra_body: dict | None = None,
        constraint: str = "json_schema",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__()
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_body = extra_body or {}
        if constraint not in ("json_schema", "vllm_regex"):
            raise ValueError(f"constraint={constraint!r}; expected json_schema or vllm_regex")
        self.constraint = constraint
        self.transport = transport
        self.requests_sent = 0
        self.max_in_flight = 0

    @classmethod
    def from_config(cls, cfg) -> OpenAIOracle:
        return cls(
            cfg.base_url,
            cfg.model,
            api_key=os.environ.get(cfg.api_key_env),
            concurrency=cfg.concurrency,
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            backoff_s=cfg.backoff_s,
            max_tokens=cfg.max_tokens,
            temperature=cfg.temperature,
            constraint=cfg.constraint,
        )

    def _answer(self, requests: list[OracleRequest]) -> list[str]:
        return asyncio.run(self._answer_all(requests))

    async def _answer_all(self, requests: list[OracleRequest]) -> list[str]:
        sem = asyncio.Semaphore(self.concurrency)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        in_flight = 0

        async with httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=self.timeout_s,
                                     transport=self.transport) as client:

            async def one(req: OracleRequest) -> str:
                nonlocal in_flight
                async with sem:
                    in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, in_flight)
                    try:
                        return await self._with_retries(client, req)
                    finally:
                        in_flight -= 1

            return list(await asyncio.gather(*(one(r) for r in requests)))

    async def _with_retries(self, client: httpx.AsyncClient, req: OracleRequest) -> str:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": req.prompt}],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "response_format": {"type": "json_schema", "json_schema": {"name": "scores", "schema": req.schema}},
            **self.extra_body,
        }
        if self.constraint == "vllm_regex":  # vLLM's native regex constraint: exact compact answers
            body.pop("response_format")
            body["structured_outputs"] = {"regex": req.regex}
        last = "no attempt made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            self.requests_sent += 1
            try:
                resp = await client.post("/chat/completions", json=body)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code in _RETRY_STATUS:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code != 200:
                return f"<error> HTTP {resp.status_code} (not retried): {resp.text[:500]}"
            try:
                return resp.json()["choices"][0]["message"]["content"] or ""
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                return f"<error> unexpected response shape ({exc}): {resp.text[:500]}"
        return f"<error> {self.max_retries + 1} attempts failed; last: {last}"
