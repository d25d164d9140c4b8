"""OpenTelemetry traces (catalog/tracing.py): off by default; with OTEL_EXPORTER_OTLP_ENDPOINT a
commit's spans reach an OTLP/HTTP receiver under the client's own trace id (W3C traceparent)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from catalog import tracing
from tests.support import PY_SCHEMA, free_port, rows, start_server


class OtlpReceiver:
    """A minimal OTLP/HTTP traces endpoint: decodes each export (protobuf) into (trace id, name, attrs)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        spans = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

                body = self.rfile.read(int(self.headers["Content-Length"]))
                export = ExportTraceServiceRequest.FromString(body)
                for resource in export.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            attrs = {a.key: a.value.string_value or a.value.int_value for a in span.attributes}
                            spans.append({
                                "trace": span.trace_id.hex(), "name": span.name, "id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(), "attrs": attrs,
                            })  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_traces_are_off_unless_the_otel_variables_ask_for_them() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"})


def test_a_commit_is_traced_step_by_step_under_the_clients_trace_id(tmp_path: Path) -> None:
    receiver = OtlpReceiver()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_SERVICE_NAME": "catalog-under-test",
    }
    srv = start_server(tmp_path, "sqlite", env)
    try:
        catalog = srv.catalog()
        catalog.create_namespace("tr")
        table = catalog.create_table("tr.t", PY_SCHEMA)
        table.append(rows(0, 1))
        table = catalog.load_table("tr.t")
        trace_id, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
        body = {
            "requirements": [{"type": "assert-table-uuid", "uuid": str(table.metadata.table_uuid)}],
            "updates": [{"action": "set-properties", "updates": {"traced": "yes"}}],
        }
        resp = requests.post(
            f"{srv.url}/v1/namespaces/tr/tables/t",
            json=body,
            headers={"traceparent": f"00-{trace_id}-{parent}-01"},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text
        deadline = time.monotonic() + 20
        names: set[str] = set()
        while time.monotonic() < deadline:
            mine = [s for s in receiver.spans if s["trace"] == trace_id]
            names = {s["name"] for s in mine}
            if {"commit", "commit.read", "commit.apply", "commit.write", "commit.cas", "storage", "db.read"} <= names:
                break
            time.sleep(0.1)
        assert {"commit", "commit.read", "commit.apply", "commit.write", "commit.cas"} <= names, names
        request = next(s for s in mine if s["name"].startswith("POST "))
        assert request["parent"] == parent  # the client's span is the request span's parent
        commit = next(s for s in mine if s["name"] == "commit")
        assert commit["parent"] == request["id"]
        assert all(s["parent"] == commit["id"] for s in mine if s["name"].startswith("commit."))
        assert request["attrs"]["http.response.status_code"] == 200
        # the storage and database calls of the steps, under them
        by_id = {s["id"]: s for s in mine}
        parents = {(s["name"], by_id[s["parent"]]["name"]) for s in mine if s["parent"] in by_id}
        assert ("storage", "commit.write") in parents and ("db.read", "commit.read") in parents
        # a request without a traceparent starts its own trace
        catalog.load_table("tr.t")
        assert any(s["trace"] != trace_id for s in receiver.spans)
    finally:
        srv.stop()
        receiver.close()
