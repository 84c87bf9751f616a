"""What the docs tell a user to type matches the commands, and the docs say what every skip means."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import tomllib

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
SKIP_MARKS = re.compile(r"pytest\.skip\(|\.skipif\(|importorskip\(")


def _long_options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) - {"--help"}


def test_the_replay_synopsis_names_every_option_replay_help_lists():
    helped = run_cli("replay", "--help", timeout=60).stdout
    docs = (ROOT / "docs" / "replay.md").read_text()
    synopsis = re.search(r"```text\n(torch-otel replay .*?)```", docs, re.S)
    assert synopsis is not None
    options = helped.split("options:", 1)[1]
    assert _long_options(synopsis.group(1)) == _long_options(options), synopsis.group(1)


def test_every_test_file_that_can_skip_is_in_the_testing_docs_which_the_readme_links():
    testing = (ROOT / "docs" / "testing.md").read_text()
    assert "## What a skip means" in testing
    can_skip = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py") if SKIP_MARKS.search(p.read_text()))
    assert len(can_skip) >= 5, can_skip
    missing = [f for f in can_skip if f"`{f}" not in testing]
    assert not missing, missing
    readme = (ROOT / "README.md").read_text()
    assert "(docs/testing.md#what-a-skip-means)" in readme and "(docs/testing.md)" in readme


def test_the_test_extra_installs_what_torchs_logging_helper_imports():
    """tests/test_torch_logging_suite.py uses torch's helper, which imports numpy and expecttest: the extra has both."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    names = {re.split(r"[<>=!~ ;\[]", req, maxsplit=1)[0].lower() for req in extra}
    assert {"numpy", "expecttest"} <= names, sorted(names)
    assert importlib.util.find_spec("numpy") and importlib.util.find_spec("expecttest")  # installed with it here


def test_the_instruction_guards_limit_is_the_one_the_readme_and_the_benchmarks_doc_state():
    """The README's test command tells a user past which cost the instruction guard fails; the limit moved with each cut
    of issue 53's work and the README kept an old one once."""
    from tests.test_instructions import LIMIT

    readme = (ROOT / "README.md").read_text()
    stated = re.findall(r"`tests/test_instructions\.py` fails when that cost grows past ([\d.]+) times no bridge", readme)
    assert stated == [f"{LIMIT}"], stated
    assert f"fails past {LIMIT} " in (ROOT / "docs" / "benchmarks.md").read_text()
