"""The only module that reads the process environment.

Every variable shardstream understands is listed in :data:`VARIABLES` and in
``docs/environment.md``. Variables are read lazily (when a dataset is built, not at import), an
explicit argument always wins over the environment, and an unknown ``SHARDSTREAM_*`` name logs a
warning so a typo does not go unnoticed. WebDataset's ``WDS_*`` names are honoured where this
library offers the same feature, with the ``SHARDSTREAM_*`` name taking precedence, and
``${NAME}`` in a shard spec is replaced by ``WDS_NAME`` (:func:`spec_variable`), as in WebDataset.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .errors import ConfigurationError

__all__ = [
    "DEFAULT_MAX_BODY",
    "UNSET",
    "VARIABLES",
    "LauncherEnv",
    "NetworkEnv",
    "Settings",
    "StoreEnv",
    "Unset",
    "allow_obsolete",
    "check_max_body",
    "env_value",
    "gopen_rewrite",
    "launcher_env",
    "network_env",
    "parse_size",
    "read_settings",
    "spec_variable",
    "store_env",
]

log = logging.getLogger(__name__)

PREFIX: Final = "SHARDSTREAM_"

#: name -> (WebDataset alias or None, description). Kept in sync with docs/environment.md.
VARIABLES: Final[dict[str, tuple[str | None, str]]] = {
    "SHARDSTREAM_CACHE_DIR": ("WDS_CACHE", "directory of the shard cache; unset means no cache"),
    "SHARDSTREAM_CACHE_SIZE": ("WDS_CACHE_SIZE", "cache size limit in bytes (suffixes K/M/G/T allowed)"),
    "SHARDSTREAM_SEED": ("WDS_SEED", "default seed for shard and sample shuffles"),
    "SHARDSTREAM_LOCK_TIMEOUT": (None, "seconds to wait for another process's download (default 600)"),
    "SHARDSTREAM_RETRIES": (None, "attempts for a transient network fault (default 8)"),
    "SHARDSTREAM_RETRY_DEADLINE": (None, "seconds a shard may spend retrying in total (default 300)"),
    "SHARDSTREAM_LOG_LEVEL": (None, "level for the shardstream logger, e.g. DEBUG"),
    "SHARDSTREAM_ALLOW_PIPE": (None, "1: allow pipe: URLs everywhere in this process (trusted legacy code)"),
    "SHARDSTREAM_TELEMETRY": (None, "1: per-stage telemetry in every dataset and WebLoader (default 0)"),
    "SHARDSTREAM_TELEMETRY_INTERVAL": (None, "seconds between telemetry log lines; 0: none (default 60)"),
    "SHARDSTREAM_WORKER_START": (
        None,
        "how loaders start worker processes: auto (fork unless other threads run), fork, forkserver, spawn",
    ),
    "SHARDSTREAM_WORKER_TIMEOUT": (
        None,
        "seconds a loader waits for a worker's next batch, then raises with its stack; 0: forever "
        "(default 600)",
    ),
    "SHARDSTREAM_MAX_BODY": (
        None,
        "most bytes a whole-body read takes when its size is not known in advance (suffixes K/M/G; "
        "default 1G)",
    ),
    "SHARDSTREAM_TUNE_MALLOC": (
        None,
        "0: leave glibc's allocator alone in DataLoader workers too (unset: workers only, to keep decode "
        "buffers on the heap); 1: also in the process running an ss.Loader in thread mode",
    ),
}


class _Unset:
    """Sentinel type: an argument the caller did not pass (distinct from ``None``)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Final = _Unset()
#: The type of :data:`UNSET`, for annotations such as ``cache_dir: str | None | Unset = UNSET``.
Unset = _Unset


_warned: set[str] = set()


def _warn_unknown(environ: Mapping[str, str]) -> None:
    # Settings are read every epoch; warn about a given unknown name once per process.
    for name in environ:
        if name.startswith(PREFIX) and name not in VARIABLES and name not in _warned:
            _warned.add(name)
            log.warning("unknown environment variable %s ignored; known: %s", name, ", ".join(VARIABLES))


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Value of a known variable or its WebDataset alias, or ``None`` when neither is set."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not a shardstream variable")
    env = os.environ if environ is None else environ
    value = env.get(name)
    alias = VARIABLES[name][0]
    if value is None and alias is not None:
        value = env.get(alias)
    return value if value not in (None, "") else None


_SUFFIXES = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int, *, name: str = "size") -> int:
    """Parse ``"10G"``, ``"512M"``, ``"1000"`` or an int into bytes."""
    if isinstance(text, int):
        return text
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = raw[-1:] if raw[-1:] in _SUFFIXES else ""
    number = raw[: len(raw) - len(unit)] if unit else raw
    try:
        return int(float(number) * _SUFFIXES[unit])
    except ValueError:
        raise ConfigurationError(
            f"{name}={text!r} is not a size; use bytes or a suffix like 512M or 10G"
        ) from None


#: The most bytes a whole-body read (one object, a manifest, an index) takes when nothing says
#: how large it should be: far above any object a whole-body read is meant for, far below what a
#: server's false claim could make a process allocate.
DEFAULT_MAX_BODY: Final = 1 << 30


def check_max_body(value: object, *, name: str = "max_body") -> int:
    """``value`` (bytes, or a size such as ``"512M"``) as an int > 0, else ConfigurationError."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigurationError(f"{name}={value!r}: give a number of bytes > 0, or a size such as '2G'")
    size = parse_size(value, name=name)
    if size <= 0:
        raise ConfigurationError(f"{name}={value!r}: give a number of bytes > 0, or a size such as '2G'")
    return size


@dataclass(frozen=True)
class Settings:
    """Environment-derived defaults. Explicit arguments override every field."""

    cache_dir: str | None = None
    cache_size: int | None = None
    seed: int | None = None
    lock_timeout: float = 600.0
    retries: int = 8
    retry_deadline: float = 300.0
    allow_pipe: bool = False
    telemetry: bool = False
    telemetry_interval: float = 60.0
    worker_start: str = "auto"
    worker_timeout: float = 600.0
    #: Tune glibc's allocator in shardstream's worker processes (unless SHARDSTREAM_TUNE_MALLOC=0).
    tune_malloc: bool = True
    #: Also in the user's process, for ss.Loader's thread mode (only SHARDSTREAM_TUNE_MALLOC=1).
    tune_malloc_main: bool = False
    max_body: int = DEFAULT_MAX_BODY


def _number(name: str, value: str | None, kind: type[int] | type[float], default: float) -> float:
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        raise ConfigurationError(f"{name}={value!r} is not a number") from None


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _flag(name: str, value: str | None) -> bool:
    if value is None:
        return False
    text = value.strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ConfigurationError(f"{name}={value!r} is not a switch; use 1 or 0")


def read_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read the environment now and return the defaults it sets."""
    env = os.environ if environ is None else environ
    _warn_unknown(env)
    size = env_value("SHARDSTREAM_CACHE_SIZE", env)
    seed = env_value("SHARDSTREAM_SEED", env)
    level = env_value("SHARDSTREAM_LOG_LEVEL", env)
    max_body = env_value("SHARDSTREAM_MAX_BODY", env)
    if level:
        logging.getLogger("shardstream").setLevel(level.upper())
    cache_size = parse_size(size, name="SHARDSTREAM_CACHE_SIZE") if size is not None else None
    return Settings(
        cache_dir=env_value("SHARDSTREAM_CACHE_DIR", env),
        # WebDataset uses -1 for "unlimited"; normalise to None.
        cache_size=None if cache_size is not None and cache_size < 0 else cache_size,
        seed=int(_number("SHARDSTREAM_SEED", seed, int, 0)) if seed is not None else None,
        lock_timeout=_number(
            "SHARDSTREAM_LOCK_TIMEOUT", env_value("SHARDSTREAM_LOCK_TIMEOUT", env), float, 600.0
        ),
        retries=int(_number("SHARDSTREAM_RETRIES", env_value("SHARDSTREAM_RETRIES", env), int, 8)),
        retry_deadline=_number(
            "SHARDSTREAM_RETRY_DEADLINE", env_value("SHARDSTREAM_RETRY_DEADLINE", env), float, 300.0
        ),
        allow_pipe=_flag("SHARDSTREAM_ALLOW_PIPE", env_value("SHARDSTREAM_ALLOW_PIPE", env)),
        telemetry=_flag("SHARDSTREAM_TELEMETRY", env_value("SHARDSTREAM_TELEMETRY", env)),
        telemetry_interval=_number(
            "SHARDSTREAM_TELEMETRY_INTERVAL", env_value("SHARDSTREAM_TELEMETRY_INTERVAL", env), float, 60.0
        ),
        worker_start=(env_value("SHARDSTREAM_WORKER_START", env) or "auto").strip().lower(),
        worker_timeout=_number(
            "SHARDSTREAM_WORKER_TIMEOUT", env_value("SHARDSTREAM_WORKER_TIMEOUT", env), float, 600.0
        ),
        tune_malloc=_flag("SHARDSTREAM_TUNE_MALLOC", env_value("SHARDSTREAM_TUNE_MALLOC", env) or "1"),
        tune_malloc_main=_flag("SHARDSTREAM_TUNE_MALLOC", env_value("SHARDSTREAM_TUNE_MALLOC", env)),
        max_body=check_max_body(max_body, name="SHARDSTREAM_MAX_BODY") if max_body else DEFAULT_MAX_BODY,
    )


def spec_variable(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value for ``${name}`` in a shard spec: ``WDS_<name>`` (WebDataset's rule), or ``None``.

    Read when the spec is expanded (a dataset or shard list is built), never at import.
    """
    env = os.environ if environ is None else environ
    return env.get("WDS_" + name)


def allow_obsolete(environ: Mapping[str, str] | None = None) -> bool:
    """WebDataset's ``ALLOW_OBSOLETE``: a non-zero integer lets a function marked ``@obsolete``
    run instead of raising; read by ``shardstream.deprecation.obsolete`` at every call, as
    WebDataset reads it.

    Raises:
        ConfigurationError: the value is not an integer (WebDataset's ``int()`` fails there too).
    """
    env = os.environ if environ is None else environ
    value = env.get("ALLOW_OBSOLETE", "0")
    try:
        return int(value) != 0
    except ValueError:
        raise ConfigurationError(
            f"ALLOW_OBSOLETE={value!r} is not an integer; set it to 1 to let functions marked "
            "@obsolete run, or unset it"
        ) from None


def gopen_rewrite(environ: Mapping[str, str] | None = None) -> str | None:
    """WebDataset's ``GOPEN_REWRITE`` rules (``"from=to;from2=to2"``), or ``None`` when unset;
    read by ``shardstream.compat.gopen.rewrite_url`` when it is called."""
    env = os.environ if environ is None else environ
    return env.get("GOPEN_REWRITE")


@dataclass(frozen=True)
class NetworkEnv:
    """The standard network variables that curl, requests and botocore honour; ``None`` where unset.

    Attributes:
        http_proxy / https_proxy / no_proxy: ``http_proxy`` or ``HTTP_PROXY`` (lower case first,
            as curl and requests read them), ``https_proxy``/``HTTPS_PROXY``, ``no_proxy``/
            ``NO_PROXY``; ``all_proxy``/``ALL_PROXY`` stands in for a missing one of the first two.
        http_proxy_variable / https_proxy_variable: the name of the variable each proxy value came
            from, as it is spelled in the environment (``ALL_PROXY`` where that one stood in), so
            that a message about the proxy names what the user set.
        ca_bundle: ``REQUESTS_CA_BUNDLE``, else ``CURL_CA_BUNDLE`` (TLS trust for ``https://``).
        aws_ca_bundle: ``AWS_CA_BUNDLE`` (botocore's; S3 uses it first, then ``ca_bundle``).
        ``SSL_CERT_FILE``/``SSL_CERT_DIR`` are read by OpenSSL itself for the default trust store.
    """

    http_proxy: str | None = None
    https_proxy: str | None = None
    no_proxy: str | None = None
    ca_bundle: str | None = None
    aws_ca_bundle: str | None = None
    http_proxy_variable: str = "HTTP_PROXY"
    https_proxy_variable: str = "HTTPS_PROXY"


def network_env(environ: Mapping[str, str] | None = None) -> NetworkEnv:
    """Read the proxy and CA bundle variables (see :class:`NetworkEnv`), when a source is built."""
    env = os.environ if environ is None else environ

    def first(*names: str) -> tuple[str | None, str]:
        """The first set (non-empty) value of ``names`` and the name it came from."""
        for name in names:
            value = env.get(name)
            if value:
                return value, name
        return None, names[-1]

    every, every_name = first("all_proxy", "ALL_PROXY")
    http, http_name = first("http_proxy", "HTTP_PROXY")
    https, https_name = first("https_proxy", "HTTPS_PROXY")
    return NetworkEnv(
        http_proxy=http or every,
        https_proxy=https or every,
        no_proxy=first("no_proxy", "NO_PROXY")[0],
        ca_bundle=first("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")[0],
        aws_ca_bundle=first("AWS_CA_BUNDLE")[0],
        http_proxy_variable=every_name if every and not http else http_name,
        https_proxy_variable=every_name if every and not https else https_name,
    )


@dataclass(frozen=True)
class StoreEnv:
    """The variables Google's, Microsoft's and Hugging Face's own clients read, for the ``gs://``,
    ``az://`` and ``hf://`` sources; ``None`` where unset. Read when a source is built.

    Attributes:
        storage_emulator_host: ``STORAGE_EMULATOR_HOST`` (a GCS emulator: no credentials needed).
        google_application_credentials: ``GOOGLE_APPLICATION_CREDENTIALS`` (a key file).
        google_cloud_project: ``GOOGLE_CLOUD_PROJECT`` / ``GCLOUD_PROJECT``.
        azure_connection_string: ``AZURE_STORAGE_CONNECTION_STRING``.
        azure_account_name, azure_account_key: ``AZURE_STORAGE_ACCOUNT_NAME`` /
            ``AZURE_STORAGE_ACCOUNT`` and ``AZURE_STORAGE_ACCOUNT_KEY`` / ``AZURE_STORAGE_KEY``.
        azure_sas_token: ``AZURE_STORAGE_SAS_TOKEN``.
        hf_token: ``HF_TOKEN`` (or the older ``HUGGING_FACE_HUB_TOKEN``).
        hf_token_path: ``HF_TOKEN_PATH``, else ``$HF_HOME/token``, else
            ``~/.cache/huggingface/token`` (the file ``hf auth login`` writes).
        hf_endpoint: ``HF_ENDPOINT`` (a mirror or a test server), else ``https://huggingface.co``.
        hf_hub_disable_implicit_token: ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is set to a true value.
    """

    storage_emulator_host: str | None = None
    google_application_credentials: str | None = None
    google_cloud_project: str | None = None
    azure_connection_string: str | None = None
    azure_account_name: str | None = None
    azure_account_key: str | None = None
    azure_sas_token: str | None = None
    hf_token: str | None = None
    hf_token_path: str = ""
    hf_endpoint: str = "https://huggingface.co"
    hf_hub_disable_implicit_token: bool = False


def store_env(environ: Mapping[str, str] | None = None) -> StoreEnv:
    """Read the cloud store variables (see :class:`StoreEnv`), when a source is built."""
    env = os.environ if environ is None else environ

    def first(*names: str) -> str | None:
        for name in names:
            value = env.get(name)
            if value:
                return value
        return None

    hf_home = first("HF_HOME") or os.path.join(
        first("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return StoreEnv(
        storage_emulator_host=first("STORAGE_EMULATOR_HOST"),
        google_application_credentials=first("GOOGLE_APPLICATION_CREDENTIALS"),
        google_cloud_project=first("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"),
        azure_connection_string=first("AZURE_STORAGE_CONNECTION_STRING"),
        azure_account_name=first("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"),
        azure_account_key=first("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY"),
        azure_sas_token=first("AZURE_STORAGE_SAS_TOKEN"),
        hf_token=first("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"),
        hf_token_path=first("HF_TOKEN_PATH") or os.path.join(hf_home, "token"),
        hf_endpoint=(first("HF_ENDPOINT") or "https://huggingface.co").rstrip("/"),
        hf_hub_disable_implicit_token=(first("HF_HUB_DISABLE_IMPLICIT_TOKEN") or "").lower()
        in ("1", "true", "yes", "on"),
    )


@dataclass(frozen=True)
class LauncherEnv:
    """Rank variables set by a launcher (torchrun first, then SLURM); ``None`` where unset.

    ``cpus_per_task`` is SLURM's ``SLURM_CPUS_PER_TASK`` (``--cpus-per-task``), read whichever
    launcher started the ranks: the CPUs of one SLURM task, which holds one rank when SLURM
    started the ranks and all of a node's ranks when torchrun did inside the task
    (``ss.Loader``'s automatic mode shares it out accordingly, ``loader/_cores.py``).
    """

    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    local_world_size: int | None = None
    source: str = "none"
    cpus_per_task: int | None = None


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigurationError(f"environment variable {name}={value!r} is not an integer") from None


def launcher_env(environ: Mapping[str, str] | None = None) -> LauncherEnv:
    """Read torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) or SLURM's variables,
    and SLURM_CPUS_PER_TASK in either case."""
    env = os.environ if environ is None else environ
    cpus = _int(env, "SLURM_CPUS_PER_TASK")
    if "RANK" in env and "WORLD_SIZE" in env:
        return LauncherEnv(
            _int(env, "RANK"),
            _int(env, "WORLD_SIZE"),
            _int(env, "LOCAL_RANK"),
            _int(env, "LOCAL_WORLD_SIZE"),
            "torchrun",
            cpus,
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        # SLURM writes uniform layouts as "4" and compressed ones as "2(x3)" or "4(x2),2": the
        # first group is this job's first node; a non-uniform layout gives no single answer.
        per_node = env.get("SLURM_NTASKS_PER_NODE", "") or env.get("SLURM_TASKS_PER_NODE", "")
        match = re.fullmatch(r"(\d+)(?:\(x\d+\))?", per_node)
        ntasks_per_node = int(match.group(1)) if match else None
        return LauncherEnv(
            _int(env, "SLURM_PROCID"),
            _int(env, "SLURM_NTASKS"),
            _int(env, "SLURM_LOCALID"),
            ntasks_per_node,
            "slurm",
            cpus,
        )
    return LauncherEnv(cpus_per_task=cpus)
