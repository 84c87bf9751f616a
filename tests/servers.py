"""Real receivers for the tests, on 127.0.0.1 with free ports: Prometheus, Pushgateway, rotel, a
VictoriaMetrics pipeline (VictoriaMetrics, vmagent, vmalert) with Prometheus's Alertmanager, and the
OpenTelemetry Collector and Jaeger v2 that collector-config/build.sh builds from source.

Each is a context manager that starts the real program, waits until it
answers, and stops it (and removes its temporary state) on exit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from torch_otel._core.ports import free_port  # the tests' ports: one probe, the package's (the demo's too)


def http_get(url: str, headers: dict[str, str] | None = None, timeout: float = 5) -> str:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback only
        return r.read().decode()


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - not up yet
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last})")


def require(program: str, packages: str = "prometheus prometheus-pushgateway") -> str:
    path = shutil.which(program)
    if path is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"{program} is not installed (apt-get install {packages})")
    return path


class _Process:
    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    def stop(self, grace: float = 10) -> None:
        """SIGTERM, and SIGKILL if it has not exited ``grace`` seconds later."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")


def _ready(proc: _Process, url: str, what: str, timeout: float = 30) -> bool:
    """True once ``url`` answers from our process; False if the process died first (its port was taken)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            return False
        try:
            http_get(url, timeout=1)
            return proc.proc.poll() is None
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{proc.output()[-2000:]}")


class _LoopbackServer:
    """A real server started on a free 127.0.0.1 port, retried if another process takes the port first."""

    name = ""
    port = 0
    ready_timeout: float = 30  # seconds it may take to answer /-/ready
    stop_grace: float = 10  # seconds it may take to exit on SIGTERM before it is killed

    def _start(self, argv_for: Callable[[int, int], list[str]], env: dict[str, str] | None = None) -> None:
        for attempt in range(3):
            self.port = free_port()
            self._p = _Process(argv_for(self.port, attempt), self.dir / f"{self.name}{attempt}.log", env)
            if _ready(self._p, f"{self.url}/-/ready", f"{self.name} to be ready", self.ready_timeout):
                return
            self._p.stop()
        raise AssertionError(f"{self.name} did not start:\n{self._p.output()[-2000:]}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop the server (its state stays until ``__exit__``)."""
        self._p.stop(self.stop_grace)

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Prometheus(_LoopbackServer):
    """Debian's prometheus, scraping ``targets`` every second, with exemplar storage on.

    bench/fleet/prometheus.py's is a subclass: its own :meth:`config` and :meth:`flags`, and longer timeouts.
    """

    name = "prometheus"
    api_timeout: float = 5  # seconds an API call may take

    def __init__(self, targets: list[str], rule_files: list[Path] | None = None) -> None:
        self.targets = targets
        self.rule_files = rule_files or []

    def config(self) -> dict[str, Any]:
        """What prometheus.yml holds."""
        return {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {"job_name": "torch", "scrape_interval": "1s", "static_configs": [{"targets": self.targets}]},
            ],
        }

    def flags(self) -> list[str]:
        """Its flags beside the config file, the storage path and the listen address."""
        return ["--enable-feature=exemplar-storage"]

    def __enter__(self) -> Prometheus:
        binary = require("prometheus")
        self.dir = Path(tempfile.mkdtemp(prefix="torch-otel-prom-"))
        (self.dir / "prometheus.yml").write_text(json.dumps(self.config()))  # JSON is YAML
        self._start(
            lambda port, attempt: [
                binary,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / f'data{attempt}'}",
                f"--web.listen-address=127.0.0.1:{port}",
                *self.flags(),
            ]
        )
        return self

    def api(self, path: str, **params: str) -> Any:
        body = json.loads(http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=self.api_timeout))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query: the result vector (or matrix) as Prometheus returns it."""
        return self.api("query", query=promql)["result"]

    def wait_for(self, promql: str, timeout: float = 60) -> list[dict[str, Any]]:
        return wait_until(lambda: self.query(promql), timeout, f"prometheus to have {promql}")


class Pushgateway(_LoopbackServer):
    """Debian's prometheus-pushgateway, in memory only."""

    name = "pushgateway"

    def __enter__(self) -> Pushgateway:
        binary = require("prometheus-pushgateway")
        self.dir = Path(tempfile.mkdtemp(prefix="torch-otel-pgw-"))
        self._start(lambda port, _attempt: [binary, f"--web.listen-address=127.0.0.1:{port}"])
        return self

    def metrics(self) -> str:
        return http_get(f"{self.url}/metrics")


# -- A VictoriaMetrics pipeline: vmagent scrapes, VictoriaMetrics stores, vmalert evaluates, Alertmanager receives --

VM_PACKAGES = "victoria-metrics prometheus-alertmanager"  # Debian's: victoria-metrics ships vmagent and vmalert too


def _api_data(url: str, timeout: float) -> Any:
    body = json.loads(http_get(url, timeout=timeout))
    assert body["status"] == "success", body
    return body["data"]


class VictoriaMetrics(_LoopbackServer):
    """Debian's victoria-metrics (single node), with its storage in a temporary directory.

    It takes remote write on ``write_url`` and answers the Prometheus query API. :meth:`query` asks with
    ``nocache=1``: without it, VictoriaMetrics hides the last 30 s of samples (``-search.latencyOffset``).
    """

    name = "victoria-metrics"
    api_timeout: float = 5

    def __init__(self, flags: list[str] | None = None) -> None:
        self.extra_flags = flags or []

    def __enter__(self) -> VictoriaMetrics:
        binary = require("victoria-metrics", VM_PACKAGES)
        self.dir = Path(tempfile.mkdtemp(prefix="torch-otel-vm-"))
        self._start(
            lambda port, attempt: [
                binary,
                f"-storageDataPath={self.dir / f'data{attempt}'}",
                f"-httpListenAddr=127.0.0.1:{port}",
                "-retentionPeriod=1d",
                *self.extra_flags,
            ]
        )
        return self

    @property
    def write_url(self) -> str:
        return f"{self.url}/api/v1/write"

    @property
    def pid(self) -> int:
        return self._p.proc.pid

    def api(self, path: str, **params: str) -> Any:
        return _api_data(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", self.api_timeout)

    def query(self, promql: str, fresh: bool = True) -> list[dict[str, Any]]:
        """Instant query at now; ``fresh``: with the samples of the last 30 s (``nocache=1``)."""
        return self.api("query", query=promql, **({"nocache": "1"} if fresh else {}))["result"]

    def wait_for(self, promql: str, timeout: float = 60) -> list[dict[str, Any]]:
        return wait_until(lambda: self.query(promql), timeout, f"victoria-metrics to have {promql}")

    def metrics(self) -> str:
        return http_get(f"{self.url}/metrics", timeout=30)


class VMAgent(_LoopbackServer):
    """vmagent scraping with ``config`` (a Prometheus scrape config) and remote-writing to ``remote_write_url``.

    ``members`` > 1: this is member ``member`` of that many, each scraping its share of the targets
    (``-promscrape.cluster.*``), all from the same config. ``env`` fills the config's ``%{NAME}`` placeholders.
    """

    name = "vmagent"

    def __init__(
        self,
        config: Path,
        remote_write_url: str,
        member: int = 0,
        members: int = 1,
        flags: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.config, self.remote_write_url, self.member, self.members = config, remote_write_url, member, members
        self.extra_flags = flags or []
        self.env = env

    def __enter__(self) -> VMAgent:
        binary = require("vmagent", VM_PACKAGES)
        self.dir = Path(tempfile.mkdtemp(prefix=f"torch-otel-vmagent{self.member}-"))
        cluster = []
        if self.members > 1:
            cluster = [f"-promscrape.cluster.membersCount={self.members}", f"-promscrape.cluster.memberNum={self.member}"]
        self._start(
            lambda port, attempt: [
                binary,
                f"-promscrape.config={self.config}",
                f"-remoteWrite.url={self.remote_write_url}",
                f"-remoteWrite.tmpDataPath={self.dir / f'queue{attempt}'}",
                f"-httpListenAddr=127.0.0.1:{port}",
                *cluster,
                *self.extra_flags,
            ],
            None if self.env is None else {**os.environ, **self.env},
        )
        return self

    @property
    def pid(self) -> int:
        return self._p.proc.pid

    def targets(self) -> list[dict[str, Any]]:
        """The targets this member scrapes (its share), as /api/v1/targets lists them."""
        return _api_data(f"{self.url}/api/v1/targets", 30)["activeTargets"]

    def metrics(self) -> str:
        return http_get(f"{self.url}/metrics", timeout=30)


class VMAlert(_LoopbackServer):
    """vmalert evaluating ``rule_files`` (Prometheus rule files) on ``datasource_url``.

    Recording rules and the alerts' state are remote-written to ``remote_write_url``; firing alerts go
    to the Alertmanager at ``notifier_url``. /api/v1/rules and /api/v1/alerts answer as Prometheus's do.
    """

    name = "vmalert"
    api_timeout: float = 5

    def __init__(
        self,
        rule_files: list[Path],
        datasource_url: str,
        remote_write_url: str,
        notifier_url: str,
        evaluation_interval: str = "1s",
        flags: list[str] | None = None,
    ) -> None:
        self.rule_files, self.datasource_url, self.remote_write_url = rule_files, datasource_url, remote_write_url
        self.notifier_url, self.evaluation_interval = notifier_url, evaluation_interval
        self.extra_flags = flags or []

    def __enter__(self) -> VMAlert:
        binary = require("vmalert", VM_PACKAGES)
        self.dir = Path(tempfile.mkdtemp(prefix="torch-otel-vmalert-"))
        self._start(
            lambda port, _attempt: [
                binary,
                *(f"-rule={p}" for p in self.rule_files),
                f"-datasource.url={self.datasource_url}",
                f"-remoteWrite.url={self.remote_write_url}",
                f"-notifier.url={self.notifier_url}",
                f"-evaluationInterval={self.evaluation_interval}",
                f"-httpListenAddr=127.0.0.1:{port}",
                f"-external.url=http://127.0.0.1:{port}",
                *self.extra_flags,
            ]
        )
        return self

    @property
    def pid(self) -> int:
        return self._p.proc.pid

    def api(self, path: str, **params: str) -> Any:
        return _api_data(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", self.api_timeout)

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts: labels, state, activeAt."""
        return self.api("alerts")["alerts"] or []

    def metrics(self) -> str:
        return http_get(f"{self.url}/metrics", timeout=30)


class Command(_LoopbackServer):
    """Any program that answers ``/-/ready``, from a command line built for each start.

    ``argv_for(port, workdir)``: its argv listening on 127.0.0.1:``port``, its state under ``workdir`` (a fresh
    directory inside this runner's temporary one). ``env``: its environment.
    """

    def __init__(self, name: str, argv_for: Callable[[int, Path], list[str]], env: dict[str, str] | None = None) -> None:
        self.name, self.argv_for, self.env = name, argv_for, env

    def __enter__(self) -> Command:
        self.dir = Path(tempfile.mkdtemp(prefix=f"torch-otel-{self.name}-"))
        self._start(lambda port, attempt: self.argv_for(port, self.dir / f"run{attempt}"), self.env)
        return self

    @property
    def pid(self) -> int:
        return self._p.proc.pid

    def output(self) -> str:
        return self._p.output()


class Alertmanager(_LoopbackServer):
    """Debian's prometheus-alertmanager, alone (no cluster), with ``config`` (default: one receiver that sends nothing)."""

    name = "alertmanager"
    DEFAULT_CONFIG: dict[str, Any] = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}

    def __init__(self, config: Path | dict[str, Any] | None = None) -> None:
        self.config = self.DEFAULT_CONFIG if config is None else config

    def __enter__(self) -> Alertmanager:
        binary = require("prometheus-alertmanager", VM_PACKAGES)
        self.dir = Path(tempfile.mkdtemp(prefix="torch-otel-am-"))
        config = self.config
        if not isinstance(config, Path):
            config = self.dir / "alertmanager.yml"
            config.write_text(json.dumps(self.config))  # JSON is YAML
        self._start(
            lambda port, attempt: [
                binary,
                f"--config.file={config}",
                f"--storage.path={self.dir / f'data{attempt}'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ]
        )
        return self

    @property
    def pid(self) -> int:
        return self._p.proc.pid

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts it holds now (/api/v2/alerts): labels, startsAt, status."""
        return json.loads(http_get(f"{self.url}/api/v2/alerts", timeout=30))


def rotel_binary() -> str:
    try:
        import rotel
    except ImportError:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("the rotel package is not installed (pip install -e '.[test]')")
    path = Path(rotel.__file__).parent / "rotel-agent"
    if not path.exists():
        pytest.skip(f"rotel-agent is missing from {path.parent}")
    return str(path)


_ATTR = re.compile(r"^\s*-> ([^:]+): ?(\w+)\((.*)$")
_FIELD = re.compile(r"^\s+(Trace ID|Parent ID|ID|Name|Status code)\s*: ?(.*)$")


class Rotel:
    """The rotel OTLP collector (gRPC and HTTP), printing everything it receives; parsed by ``received()``."""

    def __init__(self, extra_args: list[str] | None = None, debug: bool = True, started: bool = True) -> None:
        self.extra_args = extra_args or []
        self.debug = debug  # print what arrives (tests parse it); off for benchmarks
        self.started = started  # False: ports chosen, collector down until ``start()``

    def __enter__(self) -> Rotel:
        self.dir = Path(tempfile.mkdtemp(prefix="torch-otel-rotel-"))
        self.grpc_port, self.http_port = free_port(), free_port()
        self._p: _Process | None = None
        if self.started:
            self.start()
        return self

    def start(self) -> None:
        self._p = _Process(
            [
                rotel_binary(),
                "start",
                "--otlp-grpc-endpoint",
                f"127.0.0.1:{self.grpc_port}",
                "--otlp-http-endpoint",
                f"127.0.0.1:{self.http_port}",
                "--exporter",
                "blackhole",
                *(
                    [
                        "--debug-log",
                        "traces",
                        "--debug-log",
                        "metrics",
                        "--debug-log",
                        "logs",
                        "--debug-log-verbosity",
                        "detailed",
                    ]
                    if self.debug
                    else []
                ),
                "--pid-file",
                str(self.dir / "rotel.pid"),
                "--log-file",
                str(self.dir / "rotel.log"),
                *self.extra_args,
            ],
            self.dir / f"rotel-{time.monotonic_ns()}.out",
        )
        wait_until(lambda: _connects(self.grpc_port) and _connects(self.http_port), 30, "rotel to listen")

    def stop(self) -> None:
        if self._p is not None:
            self._p.stop()

    def port(self, protocol: str) -> int:
        """The port that takes OTLP over ``protocol`` (``grpc`` or ``http/protobuf``)."""
        return self.grpc_port if protocol == "grpc" else self.http_port

    def endpoint(self, protocol: str) -> str:
        """The endpoint that takes OTLP over ``protocol``, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` names it."""
        return self.grpc_endpoint if protocol == "grpc" else self.http_endpoint

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.dir.glob("rotel-*.out")))

    def received(self) -> dict[str, list[dict[str, Any]]]:
        return parse_rotel_debug(self.text())

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def otlp_env(endpoint: str, protocol: str = "grpc") -> dict[str, str]:
    """The settings that send a bridged process's telemetry to the OTLP receiver at ``endpoint`` over ``protocol``."""
    return {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}


def _connects(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


_RESOURCE_HEADER = re.compile(r"^Resource(?:Spans?|Metrics?|Logs?) #")


def parse_rotel_debug(text: str) -> dict[str, list[dict[str, Any]]]:
    """rotel's detailed debug log -> spans, metric points and log records, each with its resource attributes.

    Values that span several lines keep their first line only.
    """
    out: dict[str, list[dict[str, Any]]] = {"spans": [], "points": [], "logs": []}
    resource: dict[str, Any] = {}
    target: dict[str, Any] | None = None  # where ``-> key: Type(value)`` lines go
    item: dict[str, Any] = {}
    metric = ""
    section = ""
    for line in text.splitlines():
        if _RESOURCE_HEADER.match(line):  # rotel prints "ResourceSpans #0", "ResourceMetrics #0" and "ResourceLog #0"
            resource, target, section = {}, None, "resource"
        elif line == "Resource attributes:":
            target = resource
        elif line.startswith("Span #"):
            item = {"resource": resource, "attrs": {}, "events": []}
            out["spans"].append(item)
            section, target = "span", None
        elif line.startswith("SpanEvent #"):
            event: dict[str, Any] = {"attrs": {}}
            item["events"].append(event)
            section, target = "event", event
        elif line.startswith("LogRecord #"):
            item = {"resource": resource, "attrs": {}}
            out["logs"].append(item)
            section, target = "log", None
        elif line.startswith("Metric #"):
            section, target = "metric", None
        elif line.startswith(("HistogramDataPoints #", "NumberDataPoints #")):
            item = {"resource": resource, "metric": metric, "attrs": {}, "exemplars": []}
            out["points"].append(item)
            section, target = "point", None
        elif line.startswith("Exemplar #"):
            section, target = "exemplar", None
        elif line in ("Attributes:", "Data point attributes:") and section in ("span", "point", "log"):
            target = item["attrs"]
        elif line.strip() == "-> Attributes::" and section == "event":
            target = item["events"][-1]["attrs"]
        elif line.startswith(("Events:", "Links:", "Exemplars:", "ScopeSpans", "ScopeMetrics", "ScopeLogs", "Instrumentation")):
            target = None
        elif section == "metric" and line.strip().startswith("-> Name:"):
            metric = line.split(":", 1)[1].strip()
        elif section == "event" and line.strip().startswith("-> Name:"):
            item["events"][-1]["name"] = line.split(":", 1)[1].strip()
        elif section == "exemplar" and line.strip().startswith("-> Trace ID:"):
            item["exemplars"].append(line.split(":", 1)[1].strip())
        elif section == "point" and line.startswith(("Count: ", "Value: ", "Sum: ")):
            k, v = line.split(": ", 1)
            item[k.lower()] = float(v)
        elif section == "log" and line.split(":", 1)[0].strip() in ("Body", "Trace ID", "Span ID", "SeverityText"):
            k, v = line.split(":", 1)
            item[k.strip().lower().replace(" ", "_")] = v.strip()
        elif section == "span" and (f := _FIELD.match(line)):
            item[f.group(1).lower().replace(" ", "_")] = f.group(2).strip()
        elif target is not None and (m := _ATTR.match(line)):
            key, _typ, value = m.groups()
            target[key] = value[:-1] if value.endswith(")") else value
    return out


def split_http_requests(buf: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """A client's HTTP/1.1 byte stream -> its complete requests as (head, body), and the incomplete rest."""
    out = []
    while b"\r\n\r\n" in buf:
        head, rest = buf.split(b"\r\n\r\n", 1)
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        size = int(length.group(1)) if length else 0
        if len(rest) < size:
            break
        out.append((head, rest[:size]))
        buf = rest[size:]
    return out, buf


class Tap:
    """A TCP relay in front of a real receiver that keeps a copy of every byte the client sent.

    With ``certfile``/``keyfile`` it terminates TLS (the receiver behind it
    speaks plain OTLP), so a test can check what reached the receiver's door:
    HTTP/1.1 request headers, or that the traffic was encrypted on the wire.

    It also injects the faults a real receiver cannot be asked for, switchable
    at any time: ``delay`` seconds before each chunk goes on (a slow
    collector), ``hold`` (requests are read and never answered: a hung one),
    and ``reject`` (each HTTP request is answered with that status and never
    reaches the receiver: an overloaded or refusing one).
    """

    def __init__(self, upstream_port: int, certfile: str | None = None, keyfile: str | None = None) -> None:
        import ssl
        import threading

        self.upstream_port = upstream_port
        self._streams: list[bytearray] = []  # one per client connection, never interleaved
        self.delay = 0.0
        self.hold = False
        self.reject: int | None = None
        self.held = 0  # chunks read and never answered while ``hold`` was on
        self.rejected = 0
        self._lock = threading.Lock()
        self._ctx = None
        if certfile:
            self._ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._ctx.load_cert_chain(certfile, keyfile)
            self._ctx.set_alpn_protocols(["h2", "http/1.1"])
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        """The endpoint a bridged process sends to, to go through the tap (plain ``http``, as the tests name it)."""
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        import threading

        while not self._stop:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        import threading

        try:
            if self._ctx is not None:
                client = self._ctx.wrap_socket(client, server_side=True)
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return

        def close(*socks: socket.socket) -> None:
            for s in socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        def downstream() -> None:
            try:
                while data := upstream.recv(65536):
                    client.sendall(data)
            except OSError:
                pass
            finally:
                close(upstream, client)

        threading.Thread(target=downstream, daemon=True).start()
        pending = b""
        mine = bytearray()
        with self._lock:
            self._streams.append(mine)
        try:
            while data := client.recv(65536):
                with self._lock:
                    mine += data
                if self.hold:
                    self.held += 1
                    continue
                if self.reject is not None:
                    pending = self._answer_rejected(client, pending + data)
                    continue
                if self.delay:
                    time.sleep(self.delay)
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            close(client, upstream)

    def _answer_rejected(self, client: socket.socket, buf: bytes) -> bytes:
        """Answer each complete HTTP/1.1 request in ``buf`` with ``self.reject``; return the incomplete rest."""
        requests, rest = split_http_requests(buf)
        for _ in requests:
            self.rejected += 1
            client.sendall(f"HTTP/1.1 {self.reject} Rejected\r\nContent-Length: 0\r\n\r\n".encode())
        return rest

    def streams(self) -> list[bytes]:
        """What each client connection sent, one entry per connection, in the order they were accepted."""
        with self._lock:
            return [bytes(b) for b in self._streams]

    @property
    def received(self) -> bytes:
        """Every connection's bytes, one connection after another (never one connection's inside another's)."""
        return b"".join(self.streams())

    def text(self) -> str:
        return self.received.decode("latin-1")

    def close(self) -> None:
        self._stop = True
        self._sock.close()


# -- The OpenTelemetry Collector and Jaeger v2, built from source by collector-config/build.sh --

ROOT = Path(__file__).resolve().parent.parent
COLLECTOR_CONFIG = ROOT / "collector-config"
BUILD_SH = COLLECTOR_CONFIG / "build.sh"
BUILD = ["bash", str(BUILD_SH)]  # how the suite runs it: in the test process's environment (tests/conftest.py's)
_LOG_LEVEL = re.compile(r"^\S+\t(warn|error|fatal|panic)\t")


def collector_binaries() -> tuple[str, str]:
    """(collector, Jaeger): ``bash collector-config/build.sh``'s two lines, building what is not built yet.

    A build that cannot run (no Go, no module proxy) fails the test on CI, and skips it elsewhere, with the
    script's one line.
    """
    global _BINARIES
    if _BINARIES is None:
        try:
            proc = subprocess.run(BUILD, capture_output=True, text=True, timeout=45 * 60, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            _BINARIES = ("", "collector-config/build.sh: did not finish within 45 minutes")
        else:
            lines = proc.stdout.split()
            if proc.returncode == 0 and len(lines) == 2:
                _BINARIES = (lines[0], lines[1])
            else:
                _BINARIES = ("", (proc.stderr.strip().splitlines() or ["collector-config/build.sh failed"])[-1])
    if not _BINARIES[0]:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(_BINARIES[1])
    return _BINARIES


_BINARIES: tuple[str, str] | None = None


def yaml_flow(value: Any) -> str:
    """A value for the collector's ``--set=a::b=VALUE`` (parsed as YAML): JSON is YAML."""
    return json.dumps(value)


class OtelCollector:
    """A collector (or Jaeger, itself a collector distribution) running ``config``, changed only by ``--set`` flags.

    Every address it listens on is on loopback with a free port, chosen once and kept across :meth:`restart`, so that
    whoever sends to it reconnects: ``listen`` names each ``--set`` key that is a listen address (a list: 127.0.0.1
    and a free port each; a dict: the address to take). The rest of ``sets`` are the test's own changes, each visible
    on the command line. ``wrap`` goes before the command (``unshare ...``). Its own metrics (what it accepted,
    refused, sampled) are on :meth:`telemetry`. Ready once its health check answers.
    """

    health_path = "/"

    def __init__(
        self,
        exe: str,
        config: Path,
        name: str,
        listen: list[str] | dict[str, str],
        health: str,
        sets: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        wrap: list[str] | None = None,
    ) -> None:
        self.exe, self.config, self.name, self.env, self.wrap = exe, config, name, env, wrap or []
        self.health_key = health
        addresses = listen if isinstance(listen, dict) else {key: "" for key in listen}
        self.addresses = {key: a or f"127.0.0.1:{free_port()}" for key, a in {health: "", **addresses}.items()}
        self.telemetry_port = free_port()
        self.sets = dict(sets or {})
        self._p: _Process | None = None
        self._kept: str | None = None
        self.starts = 0

    def argv(self) -> list[str]:
        sets: dict[str, Any] = dict(self.addresses)
        sets["service::telemetry::metrics::readers"] = [
            {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": self.telemetry_port}}}}
        ]
        sets.update(self.sets)
        flags = [f"--set={k}={v if isinstance(v, str) else yaml_flow(v)}" for k, v in sets.items()]
        return [*self.wrap, self.exe, f"--config={self.config}", *flags]

    def address(self, key_suffix: str) -> str:
        """``host:port`` of the one listen key ending in ``key_suffix`` (``grpc::endpoint``)."""
        (address,) = [a for k, a in self.addresses.items() if k.endswith(key_suffix)]
        return address

    def port(self, key_suffix: str) -> int:
        return int(self.address(key_suffix).rpartition(":")[2])

    started = True  # False: its addresses are chosen, and it is down until :meth:`start`

    def __enter__(self) -> OtelCollector:
        self.dir = Path(tempfile.mkdtemp(prefix=f"torch-otel-{self.name}-"))
        if self.started:
            self.start()
        return self

    def start(self, timeout: float = 60) -> None:
        self.starts += 1
        env = None if self.env is None else {**os.environ, **self.env}
        self._p = _Process(self.argv(), self.dir / f"{self.name}-{self.starts}.log", env)
        health = f"http://{self.addresses[self.health_key]}{self.health_path}"
        deadline = time.monotonic() + timeout
        while True:
            if self._p.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited ({self._p.proc.returncode}):\n{self._p.output()[-4000:]}")
            try:
                http_get(health, timeout=1)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name} not healthy after {timeout}s:\n{self._p.output()[-4000:]}") from None
                time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM, grace: float = 30) -> None:
        """SIGTERM (a graceful stop: it decides and sends what it holds), or ``sig``; SIGKILL after ``grace`` s."""
        if self._p is not None and self._p.proc.poll() is None:
            self._p.proc.send_signal(sig)
            try:
                self._p.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self._p.proc.kill()
                self._p.proc.wait(10)
        if self._p is not None:
            self._p.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def pid(self) -> int:
        assert self._p is not None
        return self._p.proc.pid

    def output(self) -> str:
        """Everything it logged, every start (kept after ``__exit__``)."""
        if self._kept is not None:
            return self._kept
        return "".join(p.read_text(errors="replace") for p in sorted(self.dir.glob(f"{self.name}-*.log")))

    def complaints(self) -> list[str]:
        """The lines it logged at warn level or above."""
        return [ln for ln in self.output().splitlines() if _LOG_LEVEL.match(ln)]

    def telemetry(self) -> str:
        return http_get(f"http://127.0.0.1:{self.telemetry_port}/metrics", timeout=10)

    def counter(self, name: str, **labels: str) -> float:
        """The sum of a telemetry series' samples whose labels include ``labels``."""
        total = 0.0
        for line in self.telemetry().splitlines():
            m = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
            if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
                total += float(m.group(2))
        return total

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._kept = self.output()
        shutil.rmtree(self.dir, ignore_errors=True)


OTLP_LISTEN = ["receivers::otlp::protocols::grpc::endpoint", "receivers::otlp::protocols::http::endpoint"]


def collector(
    config: str,
    name: str,
    sets: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    otlp_host: str = "127.0.0.1",
    grpc_port: int | None = None,
    wrap: list[str] | None = None,
    listen: list[str] | None = None,
    started: bool = True,
) -> OtelCollector:
    """The built collector on ``collector-config/<config>``: its health check on 127.0.0.1, its OTLP receiver on
    ``otlp_host`` (gRPC on ``grpc_port`` if given), and the other ``listen`` keys on 127.0.0.1, each on a free port.
    ``started``: False, down until its ``start()``."""
    exe = collector_binaries()[0]
    grpc, http = OTLP_LISTEN
    addresses = {grpc: f"{otlp_host}:{grpc_port or free_port()}", http: f"{otlp_host}:{free_port()}"}
    addresses.update({key: f"127.0.0.1:{free_port()}" for key in listen or []})
    made = OtelCollector(exe, COLLECTOR_CONFIG / config, name, addresses, "extensions::health_check::endpoint", sets, env, wrap)
    made.started = started
    return made


class Jaeger(OtelCollector):
    """Jaeger v2 on ``collector-config/jaeger.yaml`` (in memory), and its query API v3.

    ``receivers``: more OTLP gRPC receivers, each tagging what it receives with the span attribute
    ``test.via=<name>`` in a pipeline of its own, so that a test knows which sender every span came through.
    """

    health_path = "/status"  # healthcheckv2

    def __init__(
        self, receivers: list[str] | None = None, sets: dict[str, Any] | None = None, addresses: dict[str, str] | None = None
    ) -> None:
        exe = collector_binaries()[1]
        keys = [
            *OTLP_LISTEN,
            "extensions::jaeger_query::http::endpoint",
            "extensions::jaeger_query::grpc::endpoint",
            *(f"receivers::otlp/{r}::protocols::grpc::endpoint" for r in receivers or []),
        ]
        listen = {key: "" for key in keys} | (addresses or {})  # ``addresses``: those not to choose here
        extra: dict[str, Any] = {}
        for r in receivers or []:
            extra[f"processors::attributes/{r}::actions"] = [{"key": "test.via", "value": r, "action": "insert"}]
            extra[f"service::pipelines::traces/{r}"] = {
                "receivers": [f"otlp/{r}"],
                "processors": [f"attributes/{r}", "batch"],
                "exporters": ["jaeger_storage_exporter"],
            }
        super().__init__(
            exe,
            COLLECTOR_CONFIG / "jaeger.yaml",
            "jaeger",
            listen,
            "extensions::healthcheckv2::http::endpoint",
            {**extra, **(sets or {})},
        )

    def otlp(self, receiver: str = "") -> str:
        """``host:port`` of the OTLP gRPC receiver (``receiver``: one of the extra ones)."""
        key = f"otlp/{receiver}::protocols::grpc::endpoint" if receiver else "receivers::otlp::protocols::grpc::endpoint"
        return f"127.0.0.1:{self.port(key)}"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.port('jaeger_query::http::endpoint')}"

    def api(self, path: str, **params: str) -> Any:
        try:
            return json.loads(http_get(f"{self.query_url}/api/v3/{path}?{urllib.parse.urlencode(params)}", timeout=30))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # Jaeger's answer to a search that finds nothing
                return {}
            raise

    def services(self) -> list[str]:
        return self.api("services").get("services", [])

    def spans(self, service: str, since_ns: int, raw: bool = True, limit: int = 100000) -> list[dict[str, Any]]:
        """Every span of ``service``'s traces that started after ``since_ns``, each with its resource's attributes
        as ``resource`` (a dict). ``raw``: as stored, duplicates included (Jaeger otherwise merges them)."""
        fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
        body = self.api(
            "traces",
            **{
                "query.service_name": service,
                "query.start_time_min": time.strftime(fmt.replace(".%f", ""), time.gmtime(since_ns / 1e9 - 1)),
                "query.start_time_max": time.strftime(fmt.replace(".%f", ""), time.gmtime(time.time() + 60)),
                "query.num_traces": str(limit),
                "query.raw_traces": "true" if raw else "false",
            },
        )
        out = []
        for rs in body.get("result", {}).get("resourceSpans", []):
            resource = {a["key"]: otlp_value(a["value"]) for a in rs.get("resource", {}).get("attributes", [])}
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    out.append({**span, "resource": resource})
        return out


def otlp_value(value: dict[str, Any]) -> Any:
    """An OTLP-JSON AnyValue as Python (int64s arrive as strings)."""
    (kind, v), *_ = value.items() or [("stringValue", "")]
    if kind == "intValue":
        return int(v)
    if kind == "arrayValue":
        return [otlp_value(x) for x in v.get("values", [])]
    return v


class HostsFile:
    """A hosts file of the test's own, seen as /etc/hosts by the processes started with :attr:`wrap` only.

    ``wrap`` runs a command in a mount namespace of its own with this file bind-mounted over /etc/hosts (the machine's
    file is untouched), so that a DNS name (``name``) can resolve to several loopback addresses, and a test can change
    them while the command runs, as a Kubernetes headless service's records change. Needs root (``unshare -m``).
    """

    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name = path, name
        self.path.write_text("127.0.0.1 localhost\n")
        probe = subprocess.run([*self.wrap, "true"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        if probe.returncode != 0:
            (pytest.fail if os.environ.get("CI") else pytest.skip)(
                f"cannot give a process its own /etc/hosts (unshare -m and mount --bind, as root): {probe.stderr.strip()}"
            )

    @property
    def wrap(self) -> list[str]:
        return ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(self.path)]

    def resolve(self, addresses: list[str]) -> None:
        """``name`` resolves to these addresses from now on (rewritten in place: the bind mount keeps the inode)."""
        text = "127.0.0.1 localhost\n" + "".join(f"{a} {self.name}\n" for a in addresses)
        with self.path.open("r+") as f:
            f.seek(0)
            f.write(text)
            f.truncate()
