"""The cores a loader may use (loader/_cores.py) over fake cgroup file systems laid out in a
temporary directory: the affinity mask, v1 and v2 quotas with their ancestors, SLURM's CPUs per
task and the node's local ranks."""

from __future__ import annotations

from pathlib import Path

from shardstream.loader._cores import Cores, cgroup_quota, parse_cpu_list, usable_cores


def _layout(root: Path, cgroup: str, files: dict[str, str] | None = None) -> Path:
    """``proc/self/cgroup`` holding ``cgroup`` and the given files (paths relative to ``root``)."""
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    for rel, text in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def _cores(root: Path, cpus: int, machine: int, env: dict[str, str] | None = None) -> Cores:
    return usable_cores(affinity=range(cpus), machine=machine, root=root, environ=env or {})


def test_without_cgroups_the_affinity_mask_bounds_and_the_loop_keeps_a_core(tmp_path: Path) -> None:
    for cpus, usable in ((1, 1), (2, 2), (3, 2), (8, 7), (64, 63)):
        cores = _cores(tmp_path, cpus, cpus)
        assert (cores.given, cores.usable) == (cpus, usable), cpus
        assert cores.quota is None and cores.limit == f"the affinity mask ({cpus} CPUs)"


def test_v2_quota_of_the_process_cgroup(tmp_path: Path) -> None:
    root = _layout(
        tmp_path, "0::/kubepods/pod1/c1\n", {"sys/fs/cgroup/kubepods/pod1/c1/cpu.max": "200000 100000"}
    )
    cores = _cores(root, 8, 8)
    assert (cores.quota, cores.given, cores.usable) == (2.0, 2, 2)
    assert cores.quota_file == "/sys/fs/cgroup/kubepods/pod1/c1/cpu.max"
    assert "cgroup CPU quota (2 CPUs" in cores.limit


def test_v2_the_smallest_quota_of_the_ancestors_applies_and_max_is_none(tmp_path: Path) -> None:
    root = _layout(
        tmp_path,
        "0::/kubepods/pod1/c1\n",
        {
            "sys/fs/cgroup/kubepods/pod1/c1/cpu.max": "max 100000",
            "sys/fs/cgroup/kubepods/pod1/cpu.max": "350000 100000",
            "sys/fs/cgroup/kubepods/cpu.max": "600000 100000",
        },
    )
    assert cgroup_quota(root) == (3.5, "/sys/fs/cgroup/kubepods/pod1/cpu.max")
    cores = _cores(root, 16, 16)
    assert (cores.given, cores.usable) == (3, 2)  # 3.5 CPUs: the half is not a core


def test_v2_only_max_everywhere_is_no_quota(tmp_path: Path) -> None:
    root = _layout(tmp_path, "0::/a/b\n", {"sys/fs/cgroup/a/b/cpu.max": "max 100000"})
    assert cgroup_quota(root) is None
    assert _cores(root, 4, 4).given == 4


def test_v1_quota_under_the_cpu_controller(tmp_path: Path) -> None:
    root = _layout(
        tmp_path,
        "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n",
        {
            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "150000",
            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "50000",
        },
    )
    cores = _cores(root, 32, 32)
    assert (cores.quota, cores.given, cores.usable) == (3.0, 3, 2)
    assert cores.quota_file == "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us"


def test_v1_minus_one_is_no_quota_and_a_parent_quota_applies(tmp_path: Path) -> None:
    root = _layout(
        tmp_path,
        "3:cpu:/batch/job7\n",
        {
            "sys/fs/cgroup/cpu/batch/job7/cpu.cfs_quota_us": "-1",
            "sys/fs/cgroup/cpu/batch/job7/cpu.cfs_period_us": "100000",
            "sys/fs/cgroup/cpu/batch/cpu.cfs_quota_us": "400000",
            "sys/fs/cgroup/cpu/batch/cpu.cfs_period_us": "100000",
        },
    )
    assert cgroup_quota(root) == (4.0, "/sys/fs/cgroup/cpu/batch/cpu.cfs_quota_us")


def test_v1_mount_rooted_at_the_container_cgroup(tmp_path: Path) -> None:
    # Without a cgroup namespace /proc/self/cgroup names the host's path, while the container's
    # mount shows its own cgroup at the mount's root: the quota is found walking up.
    root = _layout(
        tmp_path,
        "4:cpu,cpuacct:/docker/0123abcd\n",
        {
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "200000",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
        },
    )
    assert cgroup_quota(root) == (2.0, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")


def test_hybrid_hierarchy_reads_v1_and_v2_and_takes_the_smaller(tmp_path: Path) -> None:
    root = _layout(
        tmp_path,
        "4:cpu,cpuacct:/job\n0::/job\n",
        {
            "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "500000",
            "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000",
            "sys/fs/cgroup/unified/job/cpu.max": "300000 100000",
        },
    )
    assert cgroup_quota(root) == (3.0, "/sys/fs/cgroup/unified/job/cpu.max")


def test_a_quota_is_shared_by_the_local_ranks(tmp_path: Path) -> None:
    root = _layout(tmp_path, "0::/job\n", {"sys/fs/cgroup/job/cpu.max": "1600000 100000"})
    env = {"RANK": "1", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    cores = _cores(root, 64, 64, env)
    assert (cores.local_ranks, cores.given, cores.usable) == (4, 4, 3)
    assert "per local rank" in cores.limit


def test_a_node_wide_mask_is_divided_among_local_ranks(tmp_path: Path) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}
    cores = _cores(tmp_path, 16, 16, env)
    assert cores.mask_shared and (cores.given, cores.usable) == (4, 3)
    assert cores.limit == "the affinity mask (16 CPUs, 4 local ranks)"


def test_a_per_rank_mask_is_not_divided_again(tmp_path: Path) -> None:
    # srun --cpu-bind or a NUMA binding gave each rank its own 4 of the 16 CPUs.
    env = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}
    cores = usable_cores(affinity={8, 9, 10, 11}, machine=16, root=tmp_path, environ=env)
    assert not cores.mask_shared and (cores.given, cores.usable) == (4, 3)
    assert cores.limit == "this rank's affinity mask (4 of 16 CPUs)"


def test_a_mask_as_wide_as_the_container_cpuset_is_shared(tmp_path: Path) -> None:
    # docker --cpuset-cpus=0-7 on a 64-CPU machine: the mask is the container's, not a rank's.
    root = _layout(tmp_path, "0::/\n", {"sys/fs/cgroup/cpuset.cpus.effective": "0-7"})
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    cores = _cores(root, 8, 64, env)
    assert cores.offered == 8 and cores.mask_shared and cores.given == 4
    v1 = _layout(
        tmp_path / "v1", "3:cpuset:/docker/x\n", {"sys/fs/cgroup/cpuset/docker/x/cpuset.cpus": "0-3,8-11"}
    )
    assert _cores(v1, 8, 64, env).offered == 8


def test_slurm_cpus_per_task_is_a_rank_s_when_slurm_started_the_ranks(tmp_path: Path) -> None:
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "6"}
    cores = _cores(tmp_path, 32, 32, env)  # node-wide mask: 32 / 4 ranks = 8, SLURM says 6
    assert (cores.slurm_cpus_per_task, cores.given, cores.usable) == (6, 6, 5)
    assert cores.limit == "SLURM_CPUS_PER_TASK=6"


def test_slurm_cpus_per_task_is_shared_when_torchrun_started_the_ranks_in_one_task(tmp_path: Path) -> None:
    # One task of 16 CPUs, its cgroup's cpuset 32 wide (the mask is the task's, not a rank's).
    env = {"RANK": "0", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "16"}
    root = _layout(tmp_path, "0::/slurm/job1\n", {"sys/fs/cgroup/slurm/job1/cpuset.cpus.effective": "0-31"})
    cores = _cores(root, 32, 64, env)
    assert cores.mask_shared and (cores.given, cores.usable) == (2, 2)
    assert cores.limit == "SLURM_CPUS_PER_TASK=16 per local rank"


def test_slurm_without_a_launcher_step(tmp_path: Path) -> None:
    assert _cores(tmp_path, 16, 16, {"SLURM_CPUS_PER_TASK": "2"}).given == 2


def test_parse_cpu_list() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("5") == {5}
    assert parse_cpu_list("") == set() and parse_cpu_list("0-x") == set()
