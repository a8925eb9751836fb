"""Every performance figure in the documentation comes from a committed results file, and no
measured figure sits in the code's docstrings or comments.

**Documents** (README.md, benchmarks/README.md and every ``docs/**/*.md``, so that the guide can
move into a docs site unchanged): each quoted ratio (``1.50x``, ``0.86-1.14x``), each percentage
of a ceiling, a curl reference, a share or a target (``80% of the ceiling``) and each samples/s
figure must appear in the results file the text cites for it: a ``bench_x`` name (``bench_x.py``,
``results/bench_x.md``) or the name of another file of ``benchmarks/results/`` (``hang_harness.md``)
in the same paragraph, list item or table row, else in the lead paragraph of its list or the
caption paragraph of its table, else in the nearest heading above. A continuation row of a table
(first cell empty) reads the row above it. The number matches as written or as the file's own
number rounded to the digits written (``5.7x`` from ``5.73x``; ``110,000`` from ``109,872``).
Targets are not measurements and are skipped (``>= 5x``, ``the 0.85x target``, ``target of 0.8x``).
A figure that no results file holds must say so in its sentence with one of :data:`MARKERS`.

**Code** (src/shardstream): docstrings and comments give the reason, never the lab figure; the
figures belong in ``benchmarks/results/`` (a comment may name the benchmark that measures them).
:data:`MEASURED` is the pattern of what counts as a measured figure: sub-millisecond times, rates,
speed-ups and costs stated as measured. Timeouts and defaults (``10 ms``, ``default 2 ms``) do
not match it.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SRC = ROOT / "src" / "shardstream"

#: The phrases that mark a figure as deliberately not from a results file (the whole sentence).
MARKERS = ("(not measured)", "(estimate)")

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
#: ``1.5x``, ``0.86-1.14x``, ``4.2x-707x``; not ``256x256`` or ``x86``.
_RATIO = re.compile(rf"(?<![\w.,/])({_NUM})(?:x?\s*[-\u2013]\s*({_NUM}))?x(?![\w])")
_PERCENT = re.compile(rf"(?<![\w.,/])({_NUM})(?:%?\s*[-\u2013]\s*({_NUM}))?%")
_RATE = re.compile(rf"(?<![\w.,/])({_NUM})(?:\s*[-\u2013]\s*({_NUM}))?\s*samples/s\b")
_CELL_NUMBER = re.compile(rf"(?<![\w.,/%-])({_NUM})(?![\w%.]|\s*%|x)")
#: Words that make a percentage a share of a reference (a ceiling, a curl run, a target).
_SHARE = re.compile(r"ceiling|curl|share of|capacity|target", re.IGNORECASE)
#: Text right before a figure that makes it a target, not a measurement.
_TARGET_BEFORE = re.compile(
    r"(?:>=|<=|\u2265|\u2264|[<>]|\btargets?(?:\s+(?:of|is|was))?:?|\bat (?:least|most))\s*$"
)
_TARGET_AFTER = re.compile(r"^\s*targets?\b")
_CITATION = re.compile(r"\b(bench_\w+?)(?:\.md|\.py)?\b|\b([\w-]+)\.md\b")
_CODE_SPAN = re.compile(r"`[^`]*`")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*(\[`])")


# ------------------------------------------------------------------ the Markdown, as units with scopes
@dataclass
class Unit:
    """A paragraph, list item or table row, with the texts that may cite a results file for it
    (nearest first) and, for a table row, the column headers."""

    line: int
    cells: list[str]
    headers: list[str]
    scopes: list[str]


def units(text: str) -> Iterator[Unit]:
    """The paragraphs, list items and table rows of ``text`` outside code blocks."""
    blocks: list[tuple[str, int, list[str], int]] = []  # (kind, first line, lines, indent)
    fence = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fence = not fence
            blocks.append(("code", number, [], 0))
            continue
        if fence:
            continue
        if not stripped:
            blocks.append(("blank", number, [], 0))
            continue
        indent = len(line) - len(line.lstrip())
        kind = (
            "heading" if stripped.startswith("#")
            else "table" if stripped.startswith("|")
            else "item" if re.match(r"([-*+]|\d+\.)\s", stripped)
            else "text"
        )  # fmt: skip
        last = blocks[-1] if blocks else None
        if last is not None and kind == "table" and last[0] == "table":
            last[2].append(stripped)
        elif last is not None and kind == "text" and last[0] in ("paragraph", "item"):
            last[2].append(stripped)  # a continuation line
        elif (
            kind == "text" and indent >= 2 and len(blocks) >= 2 and last is not None and last[0] == "blank"
            and blocks[-2][0] == "item"
        ):  # fmt: skip
            blocks.pop()
            blocks[-1][2].append(stripped)  # an item's second paragraph
        else:
            blocks.append(("paragraph" if kind == "text" else kind, number, [stripped], indent))

    heading = ""
    previous: tuple[str, int, list[str], int] | None = None  # the last non-blank block
    lead = ""  # the paragraph that introduces the current list
    items: list[tuple[int, str]] = []  # the open list items: (indent, text)
    for kind, number, lines, indent in blocks:
        if kind == "code":
            previous = None
        if kind in ("blank", "code"):
            continue
        joined = " ".join(lines)
        if kind == "heading":
            heading, items, lead = joined, [], ""
        elif kind == "paragraph":
            items, lead = [], ""
            yield Unit(number, [joined], [], [joined, heading])
        elif kind == "item":
            if not items:
                lead = " ".join(previous[2]) if previous is not None and previous[0] == "paragraph" else ""
            items = [(i, t) for i, t in items if i < indent]
            parents = [t for _, t in reversed(items)]
            items.append((indent, joined))
            yield Unit(number, [joined], [], [joined, *parents, lead, heading])
        elif kind == "table":
            caption = (
                " ".join(previous[2]) if previous is not None and previous[0] in ("paragraph", "item") else ""
            )
            rows = [_cells(row) for row in lines]
            headers = rows[0]
            above = ""
            for offset, cells in enumerate(rows[2:], 2):
                row = " | ".join(cells)
                if cells and cells[0]:
                    above = row
                    scopes = [row, caption, heading]
                else:
                    scopes = [row, above, caption, heading]
                yield Unit(number + offset, cells, headers, scopes)
            items, lead = [], ""
        previous = (kind, number, lines, indent)


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


# ------------------------------------------------------------------ figures
@dataclass(frozen=True)
class Figure:
    text: str  # as written, for the message
    value: Decimal
    percent: bool
    start: int  # the span of ``text`` in its sentence
    end: int


def _decimal(number: str) -> Decimal:
    return Decimal(number.replace(",", ""))


def _is_target(text: str, start: int, end: int) -> bool:
    return bool(_TARGET_BEFORE.search(text[max(0, start - 24) : start]) or _TARGET_AFTER.match(text[end:]))


def _figures_of(pattern: re.Pattern[str], text: str, *, percent: bool) -> Iterator[Figure]:
    for match in pattern.finditer(text):
        if _is_target(text, match.start(), match.end()):
            continue
        for group in (1, 2):
            if match.group(group) is not None:
                yield Figure(
                    match.group(0), _decimal(match.group(group)), percent, match.start(), match.end()
                )


def _sentences(text: str) -> list[str]:
    return _SENTENCE_END.split(_CODE_SPAN.sub("`code`", text))


#: What joins a best figure to its median (the text between them, then the text after the median):
#: ``90% / 87%``, ``1.06x (0.89x)``, ``1.06x the ceiling best against best (0.89x median per
#: round)``, ``1.20x best, 1.14x median``. Not ``0.24x (0.48x with 1 MB chunks)``.
_PAIR = (
    (re.compile(r"\s*/\s*$"), re.compile("")),
    (re.compile(r"[^;()]{0,48}\(\s*$"), re.compile(r"\s*(?:\)|median)")),
    (re.compile(r"[^;()]{0,48}\(\s*median[^;()]{0,24}$"), re.compile(r"\s*\)")),
    (re.compile(r"[^;()]{0,48}\bbest\b[^;()]{0,24},\s*$"), re.compile(r"\s*median")),
)


def findings(unit: Unit) -> tuple[list[Figure], list[tuple[Figure, Figure]]]:
    """The figures of ``unit`` that need a results file (marked sentences and targets left out),
    and the pairs among them that state a best figure and its median."""
    found: list[Figure] = []
    pairs: list[tuple[Figure, Figure]] = []
    for column, cell in enumerate(unit.cells):
        header = unit.headers[column] if column < len(unit.headers) else ""
        for sentence in _sentences(cell):
            if any(marker in sentence for marker in MARKERS):
                continue
            here = [
                *_figures_of(_RATIO, sentence, percent=False),
                *_figures_of(_RATE, sentence, percent=False),
            ]
            if _SHARE.search(sentence) or re.search("share|ceiling|%", header):
                here += _figures_of(_PERCENT, sentence, percent=True)
            if "samples/s" in header:
                for match in _CELL_NUMBER.finditer(sentence):
                    if not _is_target(sentence, match.start(), match.end()):
                        number = _decimal(match.group(1))
                        here.append(Figure(match.group(0), number, False, match.start(), match.end()))
            here.sort(key=lambda f: (f.start, f.end))
            found += here
            for best, median in zip(here, here[1:], strict=False):
                between, after = sentence[best.end : median.start], sentence[median.end :]
                if (
                    best.percent == median.percent
                    and best.end <= median.start
                    and any(joint.fullmatch(between) and rest.match(after) for joint, rest in _PAIR)
                ):
                    pairs.append((best, median))
    return found, pairs


# ------------------------------------------------------------------ the results files
def cited(text: str, available: set[str]) -> list[str]:
    """The results files (stems) ``text`` names, in order."""
    found: list[str] = []
    for match in _CITATION.finditer(text):
        stem = match.group(1) or match.group(2)
        if stem in available and stem not in found:
            found.append(stem)
    return found


def _places(number: str) -> int:
    return len(number.partition(".")[2])


def _roundings(number: str) -> set[Decimal]:
    """``number`` and the roundings of it a text may quote: to fewer decimals (``5.7`` for
    ``5.73``), and integers to two or more significant digits (``110000`` for ``109872``)."""
    value = _decimal(number)
    found = {value}
    for places in range(_places(number)):
        found.add(value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))
    integer = int(value.to_integral_value(rounding=ROUND_HALF_UP))
    digits = len(str(integer))
    for zeros in range(1, digits - 1):  # keep two significant digits at least
        found.add(Decimal(integer).quantize(Decimal(1).scaleb(zeros), rounding=ROUND_HALF_UP).normalize())
    return found


class Numbers:
    """The numbers of one results file, line by line, with every rounding a text may quote."""

    def __init__(self, text: str) -> None:
        #: per line, its numbers in order: (the values it may be quoted as, is it a percentage)
        self.lines: list[list[tuple[set[Decimal], bool]]] = []
        for line in text.splitlines():
            numbers = []
            for match in re.finditer(rf"({_NUM})((?:\s*[-\u2013]\s*(?:{_NUM}))*)\s*(%?)", line):
                for number in [match.group(1), *re.findall(_NUM, match.group(2))]:
                    numbers.append((_roundings(number), bool(match.group(3))))
            self.lines.append(numbers)

    def holds(self, figure: Figure) -> bool:
        return any(
            figure.value in values and percent == figure.percent
            for line in self.lines
            for values, percent in line
        )

    def holds_pair(self, best: Figure, median: Figure) -> bool:
        """Whether ``best`` is followed by ``median`` on its line or the next two (a best figure
        and its median are written together)."""
        for number, line in enumerate(self.lines):
            firsts = [
                i
                for i, (values, percent) in enumerate(line)
                if best.value in values and percent == best.percent
            ]
            if firsts:
                rest = line[firsts[0] + 1 :] + [
                    n for later in self.lines[number + 1 : number + 3] for n in later
                ]
                if any(median.value in values and percent == median.percent for values, percent in rest):
                    return True
        return False


def _stems() -> set[str]:
    return {path.stem for path in RESULTS.glob("*.md")}


def check(text: str, results: dict[str, str]) -> list[str]:
    """One line per figure of ``text`` that its cited results file does not hold, or that
    cites none, and per best/median pair that no line of it holds together. ``results`` maps
    a results file's stem to its text."""
    numbers = {stem: Numbers(body) for stem, body in results.items()}
    problems = []
    for unit in units(text):
        found, pairs = findings(unit)
        if not found:
            continue
        stems: list[str] = []
        for scope in unit.scopes:
            stems = cited(scope, set(results))
            if stems:
                break
        files = ", ".join(f"{stem}.md" for stem in stems)
        for figure in found:
            if not stems:
                problems.append(f"line {unit.line}: {figure.text!r} cites no results file: {unit.cells}")
            elif not any(numbers[stem].holds(figure) for stem in stems):
                problems.append(f"line {unit.line}: {figure.text!r} is not in {files}: {unit.cells}")
        for best, median in pairs:
            if stems and not any(numbers[stem].holds_pair(best, median) for stem in stems):
                problems.append(
                    f"line {unit.line}: {best.text!r} with its median {median.text!r} is on no line "
                    f"of {files}: {unit.cells}"
                )
    return problems


DOCUMENTS = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").rglob("*.md")])


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_comes_from_a_results_file(document: Path) -> None:
    results = {stem: (RESULTS / f"{stem}.md").read_text() for stem in _stems()}
    problems = check(document.read_text(), results)
    assert not problems, f"{document.relative_to(ROOT)}: figures without a results file:\n" + "\n".join(
        problems
    )


# ------------------------------------------------------------------ the checker itself
RESULTS_FIXTURE = {
    "bench_a": "ratio **5.73x** best, 5.41x median; ceiling share 52% / 53%; 109,872 samples/s",
    "bench_b": "| case | x |\n|---|---|\n| objects | 0.86x |",
}


@pytest.mark.parametrize(
    "text",
    [
        "The reader is 5.73x webdataset (`bench_a`), 5.41x median; 52-53% of the ceiling.",
        "The reader reached 5.7x (5.4x median) in `benchmarks/results/bench_a.md`.",
        "Plain 110,000 samples/s and 6x against the peer (bench_a.py).",
        "The target is >= 5x and the 0.85x target is met; the target of 0.8x too (`bench_a`).",
        "A guess: 3.00x on a real network (estimate).",
        "Up to 99% of the ceiling on a real network (not measured).",
        "## Objects: `bench_b.py`\n\nObjectDataset reached 0.86x the ceiling.",
        "Results (`bench_b.md`):\n\n| what | ratio |\n|---|---|\n| objects | 0.86x |",
        "| file | case | ratio |\n|---|---|---|\n| `bench_b` | objects | 0.86x |\n| | again | 0.86x |",
        "Per case (`bench_a`):\n\n- **plain**: 5.73x\n  - nested: 5.41x",
        "Resuming at 90% of the epoch takes 3 ms (a position, not a figure).",
        "```\n1.23x 99% of the ceiling\n```",
        "| loader | samples/s | share of the ceiling |\n|---|---:|---:|\n| `bench_a` | 109,872 | 53% |",
    ],
)
def test_the_checker_accepts(text: str) -> None:
    assert check(text, RESULTS_FIXTURE) == []


@pytest.mark.parametrize(
    ("text", "figure"),
    [
        ("The reader is 5.97x webdataset (`bench_a`).", "5.97x"),
        ("The reader is 5.8x webdataset (`bench_a`).", "5.8x"),
        ("The reader is 5.73x webdataset.", "5.73x"),
        ("0.86-1.14x a fresh start (`bench_a`).", "0.86-1.14x"),
        ("It reached 98% of the curl ceiling (`bench_a`).", "98%"),
        ("It reached 52% of the ceiling (`bench_b`).", "52%"),
        ("It reached 109,000 samples/s (`bench_a`).", "109,000 samples/s"),
        ("## Objects: `bench_b.py`\n\nObjectDataset reached 0.98x the ceiling.", "0.98x"),
        ("Results (`bench_b.md`):\n\n| what | ratio |\n|---|---|\n| objects | 0.98x |", "0.98x"),
        (
            "| file | case | ratio |\n|---|---|---|\n| `bench_b` | objects | 0.86x |\n| | again | 0.77x |",
            "0.77x",
        ),
        ("Per case (`bench_a`):\n\n- **plain**: 5.73x\n  - nested: 1.20x", "1.20x"),
        ("| loader | samples/s |\n|---|---:|\n| `bench_a` | 4,124 |", "4,124"),
        ("A guess: 3.00x on a real network, an estimate.", "3.00x"),
        ("(`bench_a`) 5.73x. Then 6.1x.", "6.1x"),
    ],
)
def test_the_checker_flags(text: str, figure: str) -> None:
    problems = check(text, RESULTS_FIXTURE)
    assert problems and all(repr(figure) in problem for problem in problems), problems


def test_the_documents_are_found() -> None:
    assert ROOT / "README.md" in DOCUMENTS and ROOT / "benchmarks" / "README.md" in DOCUMENTS
    assert {"bench_s3", "bench_loader", "hang_harness"} <= _stems()


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("5.73x (5.41x) in `bench_a`.", True),
        ("5.73x / 5.41x in `bench_a`.", True),
        ("5.73x the peer best against best (5.41x median per round) in `bench_a`.", True),
        ("5.73x best, 5.41x median (`bench_a`).", True),
        ("5.73x (5.41x with another setting) in `bench_a`.", False),
        ("5.73x the peer; 5.41x the other (`bench_a`).", False),
    ],
)
def test_the_checker_pairs_a_best_figure_with_its_median(text: str, pair: bool) -> None:
    (unit,) = units(text)
    _, pairs = findings(unit)
    assert [(b.value, m.value) for b, m in pairs] == ([(Decimal("5.73"), Decimal("5.41"))] if pair else [])
    assert check(text, RESULTS_FIXTURE) == []
    swapped = {"bench_a": "5.73x here\n\n\nand 5.41x three lines below"}
    assert bool(check(text, swapped)) == pair


# ------------------------------------------------------------------ no lab figures in the code
_N = r"\d[\d,]*(?:\.\d+)?"
_R = rf"~?{_N}(?:\s*[-\u2013]\s*{_N})?"
#: A measured figure in a docstring or comment: a sub-millisecond time (``3.7 us``), a rate
#: (``5,520 samples/s``, ``900 MB/s``), a speed-up (``0.22x``, ``30x faster``), a cost in
#: milliseconds (``0.5 ms of CPU``, ``7 ms per image``, ``near 0.15 ms``), a percentage cost
#: (``8% more``, ``costs under 0.1%``) or a comparison (``0.2 s, against 1.5 s``). Timeouts,
#: defaults and sizes (``10 ms``, ``default 2 ms``, ``256MB``, ``256x256``) do not match.
MEASURED = re.compile(
    rf"(?<![\w.]){_R}\s*(?:us|µs|ns)\b"
    rf"|(?<![\w.]){_R}\s*(?:samples|objects|images|clips|GETs?|requests)/s\b"
    rf"|(?<![\w.]){_R}\s*[MG]B/s\b"
    rf"|(?<![\w.])\d+\.\d+x\b(?!\d)|(?<![\w.])\d+x\s+(?:faster|slower)\b"
    rf"|(?<![\w.]){_R}\s*ms\s+(?:of\s+(?:client\s+)?CPU|for\s+a\b|against|per\s+|a\s+(?:sample|batch|GET|image)\b)"
    rf"|\bnear\s+{_R}\s*ms\b"
    rf"|(?<![\w.]){_R}%\s+(?:more|less|faster|slower|of\s+the\s+(?:rate|decode|pull|time|wall))\b"
    rf"|\bcosts?\s+(?:about\s+|under\s+|~)?{_R}%"
    rf"|(?<![\w.]){_R}\s*(?:s|ms|MB|GB|KB|MiB)\b[^.;]{{0,30}}\bagainst\s+(?:about\s+)?{_R}\s*(?:s|ms|MB|GB|KB|MiB)\b"
)


def prose(source: str) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every docstring (module, class, function) and comment of ``source``."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                yield node.body[0].lineno, docstring
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def lab_figures(source: str) -> list[str]:
    """``line: figure`` for every measured figure in the docstrings and comments of ``source``."""
    return [
        f"{line}: {match.group(0)!r}" for line, text in prose(source) for match in MEASURED.finditer(text)
    ]


def test_no_lab_figures_in_docstrings_and_comments() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{problem}"
        for path in sorted(SRC.rglob("*.py"))
        for problem in lab_figures(path.read_text())
    ]
    assert not found, (
        "measured figures in src docstrings or comments (keep the reason, put the number in "
        "benchmarks/results/ and name the benchmark):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "text",
    [
        "# sum() over 512 bytes costs ~3.7 us in CPython",
        "# measured: 0.5 ms chunks cost 8% more CPU",
        "# 5,520-5,770 samples/s tuned against 4,600-4,940 untuned",
        "# 0.22x with 4 MB chunks",
        "# 30x faster at a million shards",
        "# about 0.5 ms of CPU across the two processes",
        "# ~7 ms per image with the encode",
        "# a signed GET stays near 0.15 ms",
        "# the clock then costs under 0.1% of the pull",
        "# a million shards in 0.2 s, against 1.5 s through braceexpand",
        "# 858 MB/s from SeaweedFS",
    ],
)
def test_a_lab_figure_is_found(text: str) -> None:
    assert len(lab_figures(f"x = 1  {text}\n")) == 1
    assert len(lab_figures(f'def f() -> None:\n    """{text[2:]}"""\n')) == 1


@pytest.mark.parametrize(
    "text",
    [
        "# a waiter polls with backoff (10 ms growing to 0.5 s, with jitter)",
        "# default 2 ms; 0 turns gathering off",
        "# at most every 50 ms",
        "# 256x256 JPEGs, shards of 256MB",
        "# within 10% of the target size",
        "# sized to about 4 ms of work",
    ],
)
def test_a_timeout_or_default_is_not_a_lab_figure(text: str) -> None:
    assert lab_figures(f"x = 1  {text}\n") == []
