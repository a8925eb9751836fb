"""A dataset is independent of the loaders that run it: after a thread-mode ``ss.Loader`` is closed
the same dataset object gives what a fresh one gives everywhere, and loaders over one dataset at
once (thread mode with thread mode, thread mode with process mode) each give exactly the batches
they give alone, and each one's state resumes exactly."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _loader_cases import keys, pipeline, write_shards

import shardstream as ss

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("reuse"))


def _fresh(urls: list[str]) -> Any:
    return pipeline("shuffled", urls)  # shard and sample shuffles, a dropping map


def _epochs(loader: Any, n: int = 2) -> list[list[list[str]]]:
    with loader:
        return [[keys(b) for b in loader] for _ in range(n)]


def _plain(ds: Any) -> Any:
    return [[s[0] for s in ds] for _ in range(2)]


def _webloader(workers: int) -> Callable[[Any], Any]:
    return lambda ds: _epochs(ss.WebLoader(ds, batch_size=4, num_workers=workers))


def _dataloader(workers: int) -> Callable[[Any], Any]:
    def run(ds: Any) -> Any:
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers)
        return [[k for b in loader for k in b[0]] for _ in range(2)]

    return run


def _loader(threads: int, workers: int) -> Callable[[Any], Any]:
    return lambda ds: _epochs(ss.Loader(ds, batch_size=4, num_threads=threads, num_workers=workers))


USES = {
    "plain iteration": _plain,
    "WebLoader, 0 workers": _webloader(0),
    "WebLoader, 2 workers": _webloader(2),
    "ss.Loader, 2 processes": _loader(1, 2),
    "torch DataLoader": _dataloader(0),
    "torch DataLoader, 2 workers": _dataloader(2),
    "ss.Loader, 2 threads": _loader(2, 0),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("use", list(USES))
def test_after_a_thread_mode_loader_the_dataset_gives_what_a_fresh_one_gives(
    urls: list[str], threads: int, use: str
) -> None:
    # Regression: the loader left its (closed) thread pool and its batch filling on the dataset,
    # and moved the dataset's epochs: every later use raised "the loader's thread pool is closed".
    used = _fresh(urls)
    with ss.Loader(used, batch_size=4, num_threads=threads) as loader:
        for _ in range(2):
            assert [keys(b) for b in loader]
    assert USES[use](used) == USES[use](_fresh(urls)), use


def _make(ds: Any, mode: str) -> ss.Loader:
    return ss.Loader(ds, batch_size=4, num_threads=2, num_workers=2 if mode == "processes" else 0)


def _interleaved(loaders: list[Any]) -> list[list[list[str]]]:
    """One epoch of each loader, a batch of one, then a batch of the other, and so on."""
    its: list[Any] = [iter(loader) for loader in loaders]
    got: list[list[list[str]]] = [[] for _ in loaders]
    while any(it is not None for it in its):
        for k, it in enumerate(its):
            if it is None:
                continue
            batch = next(it, None)
            if batch is None:
                its[k] = None
            else:
                got[k].append(keys(batch))
    return got


@pytest.mark.parametrize("modes", [("threads", "threads"), ("threads", "processes")])
def test_loaders_over_one_dataset_at_once_each_give_their_own_batches(
    urls: list[str], modes: tuple[str, str]
) -> None:
    solo = [_epochs(_make(_fresh(urls), mode)) for mode in modes]
    shared = _fresh(urls)
    loaders = [_make(shared, mode) for mode in modes]
    try:
        together = [_interleaved(loaders) for _ in range(2)]  # two epochs
    finally:
        for loader in loaders:
            loader.close()
    for k in range(2):
        assert [epoch[k] for epoch in together] == solo[k], f"loader {k} ({modes[k]})"


@pytest.mark.parametrize("modes", [("threads", "threads"), ("threads", "processes")])
def test_states_of_loaders_over_one_dataset_at_once_resume_exactly(
    urls: list[str], modes: tuple[str, str], tmp_path: Path
) -> None:
    solo = [_epochs(_make(_fresh(urls), mode), 1)[0] for mode in modes]
    shared = _fresh(urls)
    loaders = [_make(shared, mode) for mode in modes]
    its = [iter(loader) for loader in loaders]
    taken = (3, 5)
    for step in range(max(taken)):
        for k, it in enumerate(its):
            if step < taken[k]:
                next(it)
    states = [json.loads(json.dumps(loader.state_dict())) for loader in loaders]
    for loader in loaders:
        loader.close()
    for k, mode in enumerate(modes):
        with _make(shared, mode) as resumed:  # over the same dataset object, after the others
            resumed.load_state_dict(states[k])
            assert solo[k][: taken[k]] + [keys(b) for b in resumed] == solo[k], f"loader {k} ({mode})"
