"""Run WebDataset 1.0.2's own test suite against shardstream and report the outcome.

    python tests/compat/run_webdataset_suite.py [--repo GITDIR] [--commit SHA] [--json FILE] [-- PYTEST_ARGS]

The suite (``tests/`` and ``testdata/`` of WebDataset's repository at ``--commit``, by default
0773837, version 1.0.2) is extracted into a temporary directory. None of its files is changed:
a ``conftest.py`` next to it calls ``shardstream.install_as_webdataset()``, so its
``import webdataset`` and ``from webdataset... import`` lines resolve to shardstream. Then pytest
runs it in a child process and this script prints the passed/failed/skipped counts and each
failure's reason (``--json`` writes them too).

Skipped, each with its reason: tests that reach the network (any connection to a host other than
loopback is refused inside the run), tests whose data file is not in the repository mirror
(``testdata/imagenet-000000.tgz`` and ``testdata/ixtest.tar`` are absent from it), and modules
that import a package that is not installed (``imageio``).

The failures that remain are deliberate differences; :data:`DOCUMENTED` maps each test to the
README row that explains it, and ``tests/compat/test_webdataset_suite.py`` checks that the
failures are exactly those.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("run_webdataset_suite")

DEFAULT_REPO = "/work/.mirror/webdataset+webdataset/repo"
DEFAULT_COMMIT = "0773837"

#: test node id -> the README table row (its first cell) that documents why it fails.
# The README rows (first cells) of the differences the suite meets.
PIPE = "`pipe:` URLs"
PICKLE = "pickle (`.pyd`, `.pickle`)"
ORDER = "`ResampledShards`, `SimpleShardList(seed=)` order"
EPOCH_COUNTER = "a stage's epoch counter (`detshuffle(...).epoch`)"
WRONG_INPUT = "wrong input to a helper (`url_to_cache_name(123)`)"
SECURITY = "tests/test_security.py::TestEnforceSecurity::"
DOCUMENTED: dict[str, str] = {
    "tests/test_cache.py::test_lru_cleanup": "`LRUCleanup` on files the cache did not write",
    "tests/test_cache.py::test_url_to_cache_name_non_string_input": WRONG_INPUT,
    "tests/test_compat.py::test_shuffle_seed": "`shardshuffle=N`",
    "tests/test_gopen.py::test_pipe": PIPE,
    "tests/test_pipeline.py::test_resampled_initialization": ORDER,
    "tests/test_pipeline.py::test_seed": ORDER,
    SECURITY + "test_autodecode_integration_with_security": PICKLE,
    SECURITY + "test_pickle_loads_allowed_when_security_disabled": PICKLE,
    SECURITY + "test_pipe_url_allowed_when_security_disabled": PIPE,
    "tests/test_shardlists.py::TestResampledShards::test_init": EPOCH_COUNTER,
    "tests/test_shuffles.py::test_detshuffle": EPOCH_COUNTER,
    "tests/test_writer.py::test_writer3": PICKLE,
    "tests/test_writer.py::test_writer_pipe": PIPE,
}

# The conftest placed next to the extracted suite: the import alias, the network guard, and the
# conversion of "missing data / missing package / needs network" errors into skips.
CONFTEST = textwrap.dedent(
    '''
    """Added by shardstream's run_webdataset_suite.py: run this suite against shardstream."""

    import inspect
    import json
    import os
    import socket

    import pytest

    import shardstream

    shardstream.install_as_webdataset()

    MISSING_DATA = {missing_data!r}
    RESULTS = os.environ["WDS_SUITE_RESULTS"]
    _connect = socket.socket.connect


    def _guarded_connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            raise ConnectionRefusedError(f"needs network: connection to {{address!r}} refused in this run")
        return _connect(self, address)


    socket.socket.connect = _guarded_connect
    _getaddrinfo = socket.getaddrinfo


    def _guarded_getaddrinfo(host, *args, **kw):
        if host not in (None, "127.0.0.1", "::1", "localhost", b"localhost"):
            raise socket.gaierror(socket.EAI_NONAME, f"needs network: {{host}} is not resolved in this run")
        return _getaddrinfo(host, *args, **kw)


    socket.getaddrinfo = _guarded_getaddrinfo


    def _skip_reason(text):
        for name in MISSING_DATA:
            if name in text:
                return f"test data {{name}} is not in the repository mirror"
        if "needs network:" in text or "storage.googleapis.com" in text:
            return "needs network (no connection outside loopback in this run)"
        for line in text.splitlines():
            if "ModuleNotFoundError: No module named" in line and "webdataset" not in line:
                return "needs " + line.split("No module named", 1)[1].strip() + " (not installed)"
        return None


    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        report = outcome.get_result()
        if report.failed and call.excinfo is not None:
            reason = _skip_reason(str(report.longrepr))
            if reason is not None:
                report.outcome = "skipped"
                report.longrepr = (str(item.path), item.location[1] or 0, "Skipped: " + reason)


    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(collector):
        outcome = yield
        report = outcome.get_result()
        if report.failed:
            reason = _skip_reason(str(report.longrepr))
            if reason is not None:
                report.outcome = "skipped"
                report.longrepr = (str(collector.path), 0, "Skipped: " + reason)


    # conftest.py's names for the missing data file and for remote data
    DATA_NAMES = {{"local_data": "imagenet-000000.tgz"}}
    REMOTE_NAMES = ("remote_loc", "remote_sample", "remote_shard", "remote_pattern", "storage.googleapis.com")


    def pytest_collection_modifyitems(items):
        for item in items:
            try:
                source = inspect.getsource(item.function)
            except (OSError, TypeError):
                continue
            missing = [f for f in MISSING_DATA if f in source]
            missing += [f for name, f in DATA_NAMES.items() if name in source and f in MISSING_DATA]
            if missing:
                reason = f"test data {{missing[0]}} is not in the repository mirror"
                item.add_marker(pytest.mark.skip(reason=reason))
            elif any(name in source for name in REMOTE_NAMES):
                reason = "needs network (reads WebDataset's data from storage.googleapis.com)"
                item.add_marker(pytest.mark.skip(reason=reason))


    def pytest_runtest_logreport(report):
        if report.when == "call" or report.outcome != "passed":
            _record(report.nodeid, report.outcome, report.when, report)


    def pytest_collectreport(report):
        if report.outcome != "passed":
            _record(report.nodeid, report.outcome, "collect", report)


    def _record(nodeid, outcome, when, report):
        if outcome == "skipped" and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2].removeprefix("Skipped: ")
        elif outcome == "failed":
            crash = getattr(report.longrepr, "reprcrash", None)
            reason = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1]
        else:
            reason = ""
        with open(RESULTS, "a") as f:
            record = {{"nodeid": nodeid, "outcome": outcome, "when": when, "reason": reason}}
            f.write(json.dumps(record) + "\\n")
    '''
)


def extract(repo: str, commit: str, dest: Path) -> list[str]:
    """Write ``tests/`` and ``testdata/`` of ``commit`` under ``dest``; return the missing blobs."""
    listing = subprocess.run(
        ["git", "-C", repo, "ls-tree", "-r", commit, "tests", "testdata"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    missing = []
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        sha = meta.split()[2]
        blob = subprocess.run(["git", "-C", repo, "cat-file", "blob", sha], capture_output=True)
        if blob.returncode != 0:
            missing.append(path)
            continue
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob.stdout)
    return missing


def run_suite(
    repo: str = DEFAULT_REPO, commit: str = DEFAULT_COMMIT, pytest_args: list[str] | None = None
) -> dict[str, Any]:
    """Extract and run the suite; return ``{"counts", "failures", "skipped", "missing", "seconds"}``."""
    with tempfile.TemporaryDirectory(prefix="wds-suite-") as tmp:
        root = Path(tmp)
        missing = extract(repo, commit, root)
        (root / "conftest.py").write_text(CONFTEST.format(missing_data=[Path(p).name for p in missing]))
        (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    quick\n    notorch\n")
        results = root / "results.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSTREAM_", "WDS_"))}
        # Nothing outside loopback is reachable in the run: fail such opens at once, not after retries.
        env.update(WDS_SUITE_RESULTS=str(results), SHARDSTREAM_RETRIES="1")
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            tmp,
            "--continue-on-collection-errors",
            "tests",
        ]
        started = time.monotonic()
        proc = subprocess.run(
            [*cmd, *(pytest_args or [])], cwd=tmp, env=env, capture_output=True, text=True, timeout=1800
        )
        seconds = time.monotonic() - started
        records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for rec in records:
        if rec["outcome"] == "failed":
            failures.setdefault(rec["nodeid"], rec["reason"])
        elif rec["outcome"] == "skipped":
            skipped[rec["nodeid"]] = rec["reason"]
    outcome_of: dict[str, str] = {}
    for rec in records:  # one outcome per test: a failure in any phase wins
        previous = outcome_of.get(rec["nodeid"])
        if previous != "failed":
            outcome_of[rec["nodeid"]] = rec["outcome"]
    for value in outcome_of.values():
        counts[value] = counts.get(value, 0) + 1
    return {
        "counts": counts,
        "failures": failures,
        "skipped": skipped,
        "missing": missing,
        "seconds": round(seconds, 1),
        "returncode": proc.returncode,
        "output_tail": proc.stdout[-4000:] + proc.stderr[-2000:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repo", default=DEFAULT_REPO, help="WebDataset's git directory")
    parser.add_argument("--commit", default=DEFAULT_COMMIT, help="the commit whose suite runs")
    parser.add_argument("--json", help="also write the result to this file")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run_suite(args.repo, args.commit, args.pytest_args)
    c = result["counts"]
    log.info(
        "WebDataset %s suite against shardstream: %d passed, %d failed, %d skipped (%.0f s)",
        args.commit, c["passed"], c["failed"], c["skipped"], result["seconds"],
    )  # fmt: skip
    if result["missing"]:
        log.info("not in the mirror: %s", ", ".join(result["missing"]))
    for nodeid, reason in sorted(result["failures"].items()):
        note = DOCUMENTED.get(nodeid, "NOT DOCUMENTED")
        log.info("FAILED %s: %s  [README: %s]", nodeid, reason, note)
    reasons: dict[str, int] = {}
    for reason in result["skipped"].values():
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in sorted(reasons.items()):
        log.info("SKIPPED %d: %s", n, reason)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if c["passed"] == 0 and c["failed"] == 0:
        log.info("%s", result["output_tail"])
    return 0 if set(result["failures"]) <= set(DOCUMENTED) else 1


if __name__ == "__main__":
    sys.exit(main())
