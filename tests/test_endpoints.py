"""The endpoint forms the docs give work as documented; each mix-up of protocol, port or TLS is one line naming the fix.

A real rotel collector (plaintext gRPC and HTTP ports) receives, and the
``Tap`` relay terminates TLS in front of it where a TLS collector is needed.
Each case is a real job (``import torch_otel.auto``, one compile) whose stderr
is read as a user would read it.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.helpers import own_lines, run_python
from tests.servers import Rotel, Tap, wait_until

JOB = (
    "import os, torch_otel.auto\nimport torch\n"
    "torch.compile(lambda x: x.sin() + 1, backend='eager')(torch.randn(3))\n"
    "print('done', os.environ.get('GRPC_VERBOSITY'))\n"  # the bridge leaves the application's environment as it was
)


@pytest.fixture(scope="module")
def rotel():  # type: ignore[no-untyped-def]
    with Rotel() as r:
        yield r


def _job(tmp_path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], str]:  # type: ignore[no-untyped-def]
    """Run the job with ``env`` under a fresh service name; (the result, the service name)."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    service = f"endpoints-{uuid.uuid4().hex[:8]}"
    r = run_python(
        script,
        {"OTEL_SERVICE_NAME": service, "OTEL_METRICS_EXPORTER": "none", "OTEL_BSP_SCHEDULE_DELAY": "100", **env},
        timeout=120,
    )
    return r, service


def _arrived(rotel: Rotel, service: str) -> int:
    return sum(s["resource"].get("service.name") == service for s in rotel.received()["spans"])


def _ours(stderr: str) -> list[str]:
    return own_lines(stderr)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_an_endpoint_without_a_scheme_is_plaintext_as_the_docs_say(rotel, tmp_path, protocol):
    """docs/configuration.md: the collector's ``host:4317``. No TLS handshake, no gRPC log line, no wait at exit."""
    port = rotel.port(protocol)
    r, service = _job(tmp_path, {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_EXPORTER_OTLP_ENDPOINT": f"127.0.0.1:{port}"})
    assert r.returncode == 0 and "done None" in r.stdout, r.stderr[-3000:]
    assert not _ours(r.stderr), r.stderr[-3000:]
    assert "Handshake failed" not in r.stderr
    wait_until(lambda: _arrived(rotel, service), 30, f"{service}'s spans at the collector")


def _pki(tmp_path):  # type: ignore[no-untyped-def]
    from tests.test_security import _pki as make

    return make(tmp_path)


# (protocol, endpoint, extra settings, what the one line must say); {grpc}, {http}: rotel's ports, {tls}: a TLS relay's
MIX_UPS = {
    "grpc-tls-to-a-plaintext-collector": ("grpc", "https://127.0.0.1:{grpc}", {}, "use http://127.0.0.1:{grpc}"),
    "http-tls-to-a-plaintext-collector": ("http/protobuf", "https://127.0.0.1:{http}", {}, "use http://127.0.0.1:{http}"),
    "grpc-insecure-false-to-a-plaintext-collector": (
        "grpc",
        "127.0.0.1:{grpc}",
        {"OTEL_EXPORTER_OTLP_INSECURE": "false"},
        "set OTEL_EXPORTER_OTLP_INSECURE=true or use http://127.0.0.1:{grpc}",
    ),
    "grpc-plaintext-to-a-tls-collector": ("grpc", "http://127.0.0.1:{tls}", {}, "use https://127.0.0.1:{tls}"),
    "http-protobuf-to-the-grpc-port": (
        "http/protobuf",
        "http://127.0.0.1:{grpc}",
        {},
        "is an OTLP/gRPC port and OTEL_EXPORTER_OTLP_PROTOCOL is http/protobuf; set OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
    ),
    "grpc-to-the-http-port": ("grpc", "http://127.0.0.1:{http}", {}, "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"),
    "a-port-out-of-range": ("grpc", "http://127.0.0.1:99999", {}, "is a URL with a bad port (99999 is not from 1 to 65535)"),
}


@pytest.mark.parametrize("case", list(MIX_UPS))
def test_each_protocol_port_or_tls_mix_up_is_one_line_naming_the_fix(rotel, tmp_path, case):
    protocol, endpoint, extra, fix = MIX_UPS[case]
    tap = Tap(rotel.grpc_port, *map(str, _pki(tmp_path)[1:])) if "{tls}" in endpoint else None
    ports = {"grpc": rotel.grpc_port, "http": rotel.http_port, "tls": tap.port if tap else 0}
    try:
        r, service = _job(
            tmp_path,
            {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint.format(**ports), **extra},
        )
    finally:
        if tap is not None:
            tap.close()
    assert r.returncode == 0 and "done None" in r.stdout, r.stderr[-3000:]
    ours = _ours(r.stderr)
    assert len(ours) == 1 and fix.format(**ports) in ours[0], ours
    assert "reachable?" not in ours[0] and "not a URL" not in ours[0]  # the advice for other problems
    if "tls" in case:
        assert "CERTIFICATE=" not in ours[0] and "does not verify" not in ours[0]  # no certificate is at fault
    assert "Handshake failed" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert _arrived(rotel, service) == 0


def test_grpc_logs_its_own_lines_when_the_application_sets_grpc_verbosity(rotel, tmp_path):
    """The bridge quiets gRPC's C core only where the application left GRPC_VERBOSITY unset."""
    r, _ = _job(
        tmp_path,
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"https://127.0.0.1:{rotel.grpc_port}",
            "GRPC_VERBOSITY": "INFO",
        },
    )
    assert r.returncode == 0 and "done INFO" in r.stdout, r.stderr[-3000:]
    assert "Handshake failed" in r.stderr
    assert len(_ours(r.stderr)) == 1
