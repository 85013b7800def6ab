"""`/docs` works offline: Swagger UI comes from this server, never from a CDN, or the page says why not."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from services.tracker import docs_page
from services.tracker.app import create_app
from services.tracker.store import Store


def test_docs_load_swagger_from_this_server(tmp_path):
    client = TestClient(create_app(store=Store(f"sqlite:///{tmp_path}/t.db")), base_url="http://127.0.0.1")
    page = client.get("/docs")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)=["\']([^"\']+)', page.text)
    assert sources and all(s.startswith("/") for s in sources), sources  # nothing from another host
    for src in sources:
        assert client.get(src).status_code == 200, src
    assert client.get("/openapi.json").json()["info"]["title"] == "moelab tracker"


def test_docs_without_the_swagger_package_say_so_and_point_to_the_schema(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_page, "swagger_assets", lambda: None)
    client = TestClient(create_app(store=Store(f"sqlite:///{tmp_path}/t.db")), base_url="http://127.0.0.1")
    page = client.get("/docs")
    assert page.status_code == 503 and "swagger-ui-bundle" in page.text and "/openapi.json" in page.text
