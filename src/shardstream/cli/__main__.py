"""``shardstream`` command: argument parsing and dispatch to one module per subcommand.

Subcommand modules are imported only when their command runs, so ``shardstream --help``, ``ls``,
``cat``, ``stat`` and ``write`` do not import torch (``bench`` and ``demo`` need it). The report a
command produces goes to stdout; diagnostics go through ``logging`` to stderr (``-v`` for INFO,
``-vv`` for DEBUG); both lose any credentials on the way (:mod:`._output`). Errors are printed
as one ``error:`` line and exit with status 1; a missing optional dependency, or a usage error,
exits with status 2 (and says what to install or fix).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
from collections.abc import Callable, Iterable, Sequence

from ..errors import ShardStreamError
from ._errors import UsageError
from ._output import redacting_streams

__all__ = ["build_parser", "main"]

log = logging.getLogger("shardstream.cli")

#: subcommand -> (module, adder of arguments, runner, one-line help)
_COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "bench": (
        "_bench",
        "add_arguments",
        "run",
        "measure an empty training loop over shards (samples/s, MB/s, CPU); needs torch",
    ),
    "demo": (
        "_demo",
        "add_arguments",
        "run",
        "make a synthetic dataset, stream it from disk and a local S3 server; needs torch",
    ),
    "ls": (
        "_inspect",
        "add_ls_arguments",
        "run_ls",
        "list shards (samples, bytes, extensions) or a shard's members",
    ),
    "cat": ("_inspect", "add_cat_arguments", "run_cat", "write members of a shard to stdout"),
    "stat": (
        "_inspect",
        "add_stat_arguments",
        "run_stat",
        "summarize shards and the dataset: samples, extensions, sizes",
    ),
    "verify": ("_verify", "add_arguments", "run", "read every shard and report each problem; exit 1 if any"),
    "index": ("_index", "add_arguments", "run", "write the _info.json index (counts, offsets) of a dataset"),
    "cache": ("_cache", "add_arguments", "run", "list, count or safely clean a shard cache directory"),
    "write": ("_write", "add_arguments", "run", "pack a directory of files into shards"),
    "pack": ("_pack", "add_arguments", "run", "pack an object prefix into shards of a byte size (resumable)"),
    "unpack": ("_pack", "add_unpack_arguments", "run_unpack", "write shards back as one object per field"),
}

Runner = Callable[[argparse.Namespace], int]


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser, importing only the modules of ``commands`` (default: every command).

    Every command is listed with its one-line help either way, but only those in ``commands`` get
    their own arguments, so parse a command line with a parser built for its command (see
    :func:`main`). That keeps ``shardstream --help`` and ``shardstream ls`` from importing the
    ``bench``/``demo`` modules and what they need (torch).
    """
    wanted = set(_COMMANDS) if commands is None else set(commands)
    parser = argparse.ArgumentParser(
        prog="shardstream", description="Stream and inspect WebDataset-format tar shards."
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log INFO (-v) or DEBUG (-vv) to stderr"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, adder, runner, help_text) in _COMMANDS.items():
        if name not in wanted:
            sub.add_parser(name, help=help_text, description=help_text)
            continue
        module = importlib.import_module(f"{__package__}.{module_name}")
        p = sub.add_parser(name, help=help_text, description=_description(module, name, help_text))
        getattr(module, adder)(p)
        p.set_defaults(_run=getattr(module, runner))
    return parser


def _version() -> str:
    from .. import __version__

    return __version__


def _description(module: object, name: str, help_text: str) -> str:
    """A command's ``--help`` text: the module's ``DESCRIPTIONS[name]`` or ``DESCRIPTION``, else
    its docstring's first paragraph, as plain text (no reStructuredText markup)."""
    text = getattr(module, "DESCRIPTIONS", {}).get(name) or getattr(module, "DESCRIPTION", None)
    if not text:
        text = (getattr(module, "__doc__", None) or help_text).split("\n\n")[0]
    return " ".join(text.replace("``", "").split())


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand in ``argv``: the global options take no value, so it is the first non-option."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


def _missing_dependency(exc: ImportError) -> str:
    from ..optional import TORCH_INSTALL_HINT

    name = exc.name or str(exc)
    hints = {
        "psutil": "pip install 'shardstream[cli]'",
        "torch": TORCH_INSTALL_HINT,
        "PIL": "pip install 'shardstream[image]'",
        "boto3": "pip install 'shardstream[demo]'",
        "botocore": "pip install 'shardstream[s3]'",
    }
    hint = hints.get(name.split(".")[0])
    return f"{exc}" + (f" -- install it with: {hint}" if hint and hint not in str(exc) else "")


#: How torch re-raises an error of a DataLoader worker: its message holds the worker's traceback.
_WORKER_ERROR = re.compile(r"\ACaught \w+ (in [^\n]*?)\.\nOriginal Traceback")
_QUALIFIED = re.compile(r"\A[\w.]+: ")


def _message(exc: BaseException) -> str:
    """The error's message for the one ``error:`` line. An error that torch re-raised from a
    DataLoader worker carries the worker's whole traceback in its message (dozens of lines): the
    line is then the worker's own message, and ``-vv`` logs the traceback."""
    text = str(exc)
    worker = _WORKER_ERROR.match(text)
    if worker is None:
        return text
    lines = text.rstrip().splitlines()
    # The exception's own lines follow the traceback's last indented line (a frame or its code).
    last = max((i for i, line in enumerate(lines) if line[:1].isspace()), default=0)
    own = _QUALIFIED.sub("", "\n".join(lines[last + 1 :]).strip()) or text
    return f"{own} ({worker.group(1)}; -vv logs its traceback)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status: 0 ok, 1 problems found (``verify``, ``ls``,
    ``stat``) or the command failed, 2 usage error or missing package, 130 interrupted.

    Everything written as text, argparse's messages and the log lines included, loses its
    credentials on the way (:mod:`._output`)."""
    with redacting_streams():
        return _main(sys.argv[1:] if argv is None else list(argv))


def _main(argv: list[str]) -> int:
    command = _command_of(argv)
    parser = build_parser([command] if command in _COMMANDS else [])
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s: %(message)s"
    )
    logging.getLogger("shardstream").setLevel(level)
    # azure-identity logs every credential it tried, at WARNING, when none gives a token: a dozen
    # lines before our error, which says the same in one and names the fix (-v shows them).
    logging.getLogger("azure.identity").setLevel(level if args.verbose else logging.ERROR)
    run: Runner = args._run
    try:
        return run(args)
    except ImportError as exc:
        sys.stderr.write(f"shardstream {args.command}: missing dependency: {_missing_dependency(exc)}\n")
        return 2
    except UsageError as exc:
        sys.stderr.write(f"shardstream {args.command}: usage error: {exc}\n")
        return 2
    except (ShardStreamError, FileNotFoundError, RuntimeError) as exc:
        log.debug("%s failed", args.command, exc_info=True)
        sys.stderr.write(f"shardstream {args.command}: error: {_message(exc)}\n")
        return 1
    except BrokenPipeError:  # `shardstream ls ... | head`: the reader went away, not an error
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        sys.stderr.write(f"shardstream {args.command}: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
