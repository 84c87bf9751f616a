"""Security and privacy: TLS with a private CA, secrets and source text never sent, bounded labels.

The receiver is a real rotel. TLS is terminated by the ``Tap`` relay in front
of it (rotel 0.0.1a15 has no TLS receiver), with a CA and a server
certificate this module generates.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest

from tests.helpers import WORKLOADS, own_lines, run_python
from tests.servers import Rotel, Tap, split_http_requests, wait_until

TINY = (
    "import torch_otel.auto\nimport torch\ntorch.compile(lambda x: x.sin() + 1, backend='eager')(torch.randn(3))\nprint('done')\n"
)
SECRET = "s3cr3t-Bearer-7f1e9a"
# Text of tests/workloads/private.py that must never leave the process by default: source
# lines and comments, constants, and the value a guard compares with.
SOURCE_TEXT = [
    "ZQX-COMMENT-MARKER",
    "ZQX-FAILING-LINE",
    "hidden_local_value = x",
    "PRIVATE_CONSTANT",
    "31.4159",
    "2.7182818",
    "0.123456789",
    "0.987654321",
    "42.424242",
    "torch.ones(3, 3) @",
]


def _pki(d: Path) -> tuple[Path, Path, Path]:
    """A private CA, and a certificate it signs for 127.0.0.1: (ca.pem, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "torch-otel test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # cert and CRL signing
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = d / "ca.pem", d / "server.pem", d / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def _names(rotel: Rotel) -> list[str]:
    return [s["attrs"].get("torch.compile.kind", "") for s in rotel.received()["spans"]]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_otlp_over_tls_with_a_private_ca(tmp_path, protocol):
    ca, cert, key = _pki(tmp_path)
    script = tmp_path / "job.py"
    script.write_text(TINY)
    with Rotel() as rotel:
        tap = Tap(rotel.port(protocol), certfile=str(cert), keyfile=str(key))
        env = {
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"https://127.0.0.1:{tap.port}",
            "OTEL_METRICS_EXPORTER": "otlp",
        }
        trusted = run_python(script, {**env, "OTEL_EXPORTER_OTLP_CERTIFICATE": str(ca)})
        assert trusted.returncode == 0 and "done" in trusted.stdout, trusted.stderr[-3000:]
        assert not own_lines(trusted.stderr), trusted.stderr[-3000:]
        wait_until(lambda: "frame" in _names(rotel) and rotel.received()["points"], 30, "spans and metrics over TLS")
        sent = len(rotel.received()["spans"])

        untrusted = run_python(script, {**env, "TORCH_OTEL_SHUTDOWN_TIMEOUT": "2"})  # the system CAs do not know ours
        tap.close()
        assert len(rotel.received()["spans"]) == sent  # nothing got through without the CA
    assert untrusted.returncode == 0 and "done" in untrusted.stdout, untrusted.stderr[-3000:]
    ours = own_lines(untrusted.stderr)
    assert len(ours) == 1 and f"https://127.0.0.1:{tap.port}" in ours[0] and "OTEL_EXPORTER_OTLP_CERTIFICATE" in ours[0], ours
    assert "Traceback" not in untrusted.stderr


@pytest.mark.parametrize("capture", ["default", "full"])
def test_nothing_sent_holds_source_text_values_or_the_auth_header(capture):
    with Rotel() as rotel:
        tap = Tap(rotel.http_port)
        r = run_python(
            WORKLOADS / "private.py",
            {
                "WITH_BRIDGE": "1",
                "TORCH_OTEL_CAPTURE": capture,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{tap.port}",
                "OTEL_EXPORTER_OTLP_COMPRESSION": "none",  # so the bytes on the wire can be searched
                "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {SECRET}",
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_LOGS_EXPORTER": "otlp",
            },
        )
        assert r.returncode == 0 and "done" in r.stdout, r.stderr[-3000:]
        got = wait_until(lambda: (g := rotel.received())["spans"] and g["points"] and g["logs"] and g, 30, "all signals")
        tap.close()
        decoded = rotel.text()
    # Each connection's requests apart: a body is never read across another connection's bytes.
    complete = [req for stream in tap.streams() for req in split_http_requests(stream)[0]]
    requests = [(head.decode("latin-1"), body) for head, body in complete]
    assert {head.split()[1] for head, _ in requests} >= {"/v1/traces", "/v1/metrics", "/v1/logs"}
    assert all(SECRET in head for head, _ in requests)  # the header did go, where it belongs ...
    bodies = b"".join(body for _, body in requests)
    assert SECRET.encode() not in bodies  # ... and nowhere else
    for text in SOURCE_TEXT:
        assert text.encode() not in bodies, text
        assert text not in decoded, text
    assert SECRET not in decoded and SECRET not in r.stdout + r.stderr
    # what does go out is still the diagnosis: the value guard is named, its value is not
    reasons = [s["attrs"].get("torch.compile.recompile_reason", "") for s in got["spans"]]
    assert any(reason.startswith("scale == <value>") for reason in reasons), reasons


def test_redaction_and_attribute_limits(tmp_path):
    out = tmp_path / "spans.jsonl"
    r = run_python(
        WORKLOADS / "private.py",
        {
            "WITH_BRIDGE": "1",
            "TORCH_OTEL_REDACT_PATHS": "true",
            "TORCH_OTEL_ATTRIBUTE_MAX_LENGTH": "64",
            "TORCH_OTEL_TRACES_FILE": str(out),
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
        },
    )
    assert r.returncode == 0, r.stderr[-3000:]
    text = out.read_text()
    assert str(WORKLOADS) not in text and '"private.py"' in text  # paths reduced to basenames
    from tests.helpers import read_otlp_json_spans

    for s in read_otlp_json_spans(out):
        for v in s["attrs"].values():
            assert not isinstance(v, str) or len(v) <= 64, v


def test_label_values_fold_into_other_past_their_cap():
    """300 distinct failure types (say, from a buggy custom backend) make at most 50 + `other` series."""
    from prometheus_client import CollectorRegistry

    from torch_otel._assemble.assembler import Assembler
    from torch_otel._core.compile_id import CompileId
    from torch_otel._model.events import MetricsEvent
    from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend

    registry = CollectorRegistry()
    assembler = Assembler([CompileMetrics([PrometheusBackend(registry)])])
    for i in range(300):
        assembler.feed(
            MetricsEvent(
                CompileId(i, 0),
                {"fail_type": f"CustomError{i}", "fail_reason": "r", "entire_frame_compile_time_s": 0.01, "co_name": "f"},
            )
        )
    values = {
        s.labels["fail_type"]: s.value
        for fam in registry.collect()
        if fam.name == "torch_compile_failures"
        for s in fam.samples
        if s.name.endswith("_total")
    }
    assert len(values) == 51 and values["other"] == 250
    assert sum(values.values()) == 300  # folded, not lost
