"""The openai backend retries with backoff, bounds concurrency and reports exhausted retries as failures."""

from __future__ import annotations

import asyncio
import json

import httpx

from services.scorer.labeling import label_documents
from services.scorer.oracle.openai_backend import OpenAIOracle

GOOD = json.dumps({"helpfulness": 3, "correctness": 4, "coherence": 2, "complexity": 1, "verbosity": 0})


def _reply(content: str) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"message": {"content": content}}]})


def test_transient_errors_are_retried_and_concurrency_is_bounded():
    state = {"n": 0, "in_flight": 0, "max": 0}
    bodies = []

    async def handler(request: httpx.Request) -> httpx.Response:
        state["n"] += 1
        bodies.append(json.loads(request.content))
        if state["n"] <= 2:
            return httpx.Response(503, text="busy")
        state["in_flight"] += 1
        state["max"] = max(state["max"], state["in_flight"])
        await asyncio.sleep(0.02)
        state["in_flight"] -= 1
        return _reply(GOOD)

    oracle = OpenAIOracle("http://oracle/v1", "m", concurrency=2, max_retries=3, backoff_s=0.01,
                          transport=httpx.MockTransport(handler))
    docs = [{"id": str(i), "text": f"document {i}", "kind": "web"} for i in range(6)]
    out = label_documents(docs, oracle, None)
    assert len(out.labels) == 6 and not out.failures
    assert oracle.requests_sent == 8 and state["max"] <= 2 and oracle.max_in_flight <= 2
    assert bodies[0]["response_format"]["json_schema"]["schema"]["properties"]["verbosity"]["maximum"] == 4


def test_timeouts_exhaust_retries_and_are_recorded_as_failures_with_the_reason():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    oracle = OpenAIOracle("http://oracle/v1", "m", max_retries=2, backoff_s=0.0, transport=httpx.MockTransport(handler))
    out = label_documents([{"id": "a", "text": "t", "kind": "web"}], oracle, None, max_retries=0)
    assert not out.labels and oracle.requests_sent == 3
    assert "ReadTimeout" in out.failures[0]["raw"] and "request failed" in out.failures[0]["error"]


def test_vllm_regex_constraint_replaces_response_format():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.update(json.loads(request.content))
        return _reply(GOOD)

    oracle = OpenAIOracle("http://oracle/v1", "m", constraint="vllm_regex", transport=httpx.MockTransport(handler))
    label_documents([{"id": "a", "text": "t", "kind": "web"}], oracle, None)
    assert "response_format" not in seen and seen["structured_outputs"]["regex"].startswith('\\{"helpfulness"')
