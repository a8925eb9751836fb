"""The cores a loader may use: the affinity mask, the cgroup CPU quota and SLURM's CPUs per task,
shared among the node's ranks, less one for the training loop.

:func:`usable_cores` is a function of what it is given (the affinity mask, the machine's CPU count,
the launcher's variables) and of the files under ``root`` (``/proc/self/cgroup`` and the cgroup
file systems under ``/sys/fs/cgroup``), so a test lays out a fake cgroupfs in a temporary
directory; :func:`detect_cores` calls it with this process's values. The rules:

* **Affinity mask** (``os.sched_getaffinity``): the CPUs this process may run on. A mask as wide
  as what the container offers (the cpuset of this process's cgroup, else every CPU of the
  machine) is the whole node's, shared by its local ranks, so it is divided among them. A
  narrower one was set for this rank by its launcher (``srun --cpu-bind``, a NUMA binding) and is
  taken whole: dividing it again would give each rank a fraction of its own share. (A mask that
  a user narrowed with ``taskset`` before starting several ranks reads as per-rank too: give
  ``num_workers=``/``num_threads=`` there.)
* **cgroup CPU quota**: v2's ``cpu.max`` (``"200000 100000"``: 2 CPUs; ``"max 100000"``: none) or
  v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: none), of this process's cgroup and of
  every ancestor up to the mount's root: the smallest applies. A container's quota covers every
  rank started in it, so it is divided among the local ranks. A fraction of a CPU is rounded
  down: a thread more than the quota allows is throttled by the kernel in whole periods.
* **SLURM_CPUS_PER_TASK**: one task's CPUs. When SLURM started the ranks (one task each), it is
  this rank's; when torchrun started them inside one task, it is shared among them.
* **Local ranks**: torchrun's ``LOCAL_WORLD_SIZE``, or SLURM's tasks on this node
  (``config.launcher_env``); one without a launcher.

The smallest of these bounds is this rank's share (at least 1). The training loop needs a core
of its own (its Python, the optimizer step, the CUDA launches), so a loader given more than two
takes one less; with two or one it takes them all, as the hand-picked rows of
``benchmarks/bench_loader.py`` do on 2 cores (the loop thread mostly waits for batches there).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..config import launcher_env

__all__ = ["Cores", "cgroup_quota", "detect_cores", "parse_cpu_list", "usable_cores"]


@dataclass(frozen=True)
class Cores:
    """The cores a loader may use, and where the bound came from.

    Attributes:
        usable: cores for the loader's threads or processes: ``given`` less one for the training
            loop when ``given`` is above 2.
        given: this rank's share: the smallest bound below, at least 1.
        limit: which bound set ``given``, in words (for the log line).
        machine: CPUs of the machine (``os.cpu_count()``).
        affinity: CPUs in this process's affinity mask.
        offered: CPUs of this process's cgroup cpuset (else the machine's): what the mask is
            compared with to tell a shared mask from a per-rank one.
        mask_shared: the mask is as wide as ``offered``, so it is divided among the local ranks.
        quota: CPUs the cgroup quota allows (``None``: no quota), and ``quota_file`` the file that set it.
        slurm_cpus_per_task: ``SLURM_CPUS_PER_TASK`` (``None``: unset).
        local_ranks: ranks on this node sharing the node-wide bounds.
    """

    usable: int
    given: int
    limit: str
    machine: int
    affinity: int
    offered: int
    mask_shared: bool
    quota: float | None
    quota_file: str | None
    slurm_cpus_per_task: int | None
    local_ranks: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def usable_cores(
    *,
    affinity: Collection[int],
    machine: int,
    root: str | Path = "/",
    environ: Mapping[str, str] | None = None,
) -> Cores:
    """The cores a loader may use (see the module docstring for the rules).

    Args:
        affinity: the CPUs of this process's affinity mask (``os.sched_getaffinity(0)``).
        machine: the machine's CPU count (``os.cpu_count()``).
        root: where ``proc/self/cgroup`` and ``sys/fs/cgroup`` are read (``/``; a test's fake tree).
        environ: the launcher's variables (default: this process's, read by ``shardstream.config``).
    """
    launcher = launcher_env(environ)
    local = max(1, launcher.local_world_size or 1)
    mask = max(1, len(affinity))
    cpuset = _cgroup_cpuset(Path(root))
    offered = len(cpuset) if cpuset else machine
    shared = mask >= offered
    per_rank = " per local rank" if local > 1 else ""
    bounds: list[tuple[float, str]] = []
    ranks = f", {local} local ranks" if local > 1 else ""
    if shared:
        bounds.append((mask / local, f"the affinity mask ({mask} CPUs{ranks})"))
    else:
        bounds.append((mask, f"this rank's affinity mask ({mask} of {offered} CPUs)"))
    found = cgroup_quota(root)
    quota, quota_file = found if found is not None else (None, None)
    if quota is not None:
        bounds.append((quota / local, f"the cgroup CPU quota ({quota:g} CPUs in {quota_file}){per_rank}"))
    cpus = launcher.cpus_per_task
    if cpus is not None and cpus > 0:
        if launcher.source == "torchrun":  # torchrun's ranks share one SLURM task
            bounds.append((cpus / local, f"SLURM_CPUS_PER_TASK={cpus}{per_rank}"))
        else:
            bounds.append((cpus, f"SLURM_CPUS_PER_TASK={cpus}"))
    share, limit = min(bounds, key=lambda b: b[0])
    given = max(1, int(share))
    return Cores(
        usable=given - 1 if given > 2 else given,
        given=given,
        limit=limit,
        machine=machine,
        affinity=mask,
        offered=offered,
        mask_shared=shared,
        quota=quota,
        quota_file=quota_file,
        slurm_cpus_per_task=cpus,
        local_ranks=local,
    )


def detect_cores() -> Cores:
    """:func:`usable_cores` for this process."""
    machine = os.cpu_count() or 1
    try:
        affinity: Collection[int] = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # macOS, Windows: no affinity masks
        affinity = range(machine)
    return usable_cores(affinity=affinity, machine=machine)


# -- cgroups -------------------------------------------------------------------------------------
_V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
_V2_DIRS = ("", "unified")  # /sys/fs/cgroup (unified), /sys/fs/cgroup/unified (hybrid)


def _memberships(root: Path) -> list[tuple[list[str], str]]:
    """``/proc/self/cgroup``'s lines as (controllers, path): v1 ``4:cpu,cpuacct:/docker/x``,
    v2 ``0::/user.slice/x`` (no controllers named)."""
    try:
        text = (root / "proc/self/cgroup").read_text()
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            found.append((parts[1].split(",") if parts[1] else [], parts[2]))
    return found


def _chain(base: Path, path: str) -> list[Path]:
    """The cgroup directory of ``path`` under the mount ``base`` and its ancestors up to ``base``.
    Under a mount whose root is the container's own cgroup (no cgroup namespace) the path names
    directories that do not exist there: the ones that do are read."""
    parts = [p for p in path.split("/") if p and p != ".."]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_quota(root: str | Path = "/") -> tuple[float, str] | None:
    """The smallest CPU quota (in CPUs) of this process's cgroup and its ancestors, v1 and v2,
    with the file that set it; ``None`` when none is set (or there are no cgroups)."""
    root = Path(root)
    best: tuple[float, str] | None = None
    for controllers, path in _memberships(root):
        candidates: list[tuple[Path, str]] = []
        if "cpu" in controllers:
            candidates += [(root / "sys/fs/cgroup" / d, "v1") for d in _V1_CPU_DIRS]
        if not controllers:
            candidates += [(root / "sys/fs/cgroup" / d, "v2") for d in _V2_DIRS]
        for base, version in candidates:
            if not base.is_dir():
                continue
            for directory in _chain(base, path):
                quota = _quota_v2(directory) if version == "v2" else _quota_v1(directory)
                if quota is not None and (best is None or quota < best[0]):
                    where = directory / ("cpu.max" if version == "v2" else "cpu.cfs_quota_us")
                    best = (quota, "/" + str(where.relative_to(root)))
    return best


def _quota_v2(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")  # "max 100000" or "200000 100000"
    if not text:
        return None
    quota, _, period = text.partition(" ")
    try:
        return int(quota) / int(period or "100000") if quota != "max" else None
    except (ValueError, ZeroDivisionError):
        return None


def _quota_v1(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    try:
        q, p = int(quota or "-1"), int(period or "100000")
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _cgroup_cpuset(root: Path) -> set[int]:
    """The CPUs of this process's cpuset cgroup (v2 ``cpuset.cpus.effective``, v1 ``cpuset.cpus``),
    the innermost that names any; empty when there is none."""
    names: tuple[str, ...]
    for controllers, path in _memberships(root):
        if "cpuset" in controllers:
            bases, names = [root / "sys/fs/cgroup/cpuset"], ("cpuset.effective_cpus", "cpuset.cpus")
        elif not controllers:
            bases, names = [root / "sys/fs/cgroup" / d for d in _V2_DIRS], ("cpuset.cpus.effective",)
        else:
            continue
        for base in bases:
            if not base.is_dir():
                continue
            for directory in _chain(base, path):
                for name in names:
                    cpus = parse_cpu_list(_read(directory / name) or "")
                    if cpus:
                        return cpus
    return set()


def parse_cpu_list(text: str) -> set[int]:
    """``"0-3,8,10-11"`` (the kernel's CPU list format) as a set of CPU numbers; empty if malformed."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            cpus.update(range(int(first), int(last or first) + 1))
        except ValueError:
            return set()
    return cpus
