"""The documentation cannot go stale.

- The configuration reference matches what `scripts/config_reference.py` generates.
- Every path and module that docs/architecture.md names exists.
- Every command in a fenced code block of README.md or docs/**/*.md stays runnable: a
  `conductor-rl <sub>`, `python -m jobs.<x>` or `python benchmarks/<x>.py` line names a
  command that exists, every `--flag` is one its argparse parser accepts (the parser the
  command itself builds, captured in process), and every `key.sub=value` override names
  a real configuration key with a valid value (checked with the project's config loader
  against the line's `--config` file, `configs/local.yaml` by default). A placeholder
  value such as `<checkpoint>` or `...` is skipped on purpose.
- Every setting a written doc names in backticks (`learner.lr`, `workers.<i>.serve.gpus`) is a field of
  the configuration.
- Every relative link between markdown files resolves (file and `#anchor`), and no doc
  sends a user to `../shared/`, which a user's clone does not have.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import inspect
import io
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ARCHITECTURE = REPO / "docs" / "architecture.md"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
TOP_DIRS = ("conductor_rl", "jobs", "actors", "configs", "benchmarks", "scripts", "tests", "docs")
# `conductor_rl/plan/language.py`, `conductor_rl/data/samples/`, `configs/local.yaml`, ...
PATH_RE = re.compile(r"(?<![\w./-])(?:" + "|".join(TOP_DIRS) + r")/[\w./-]*")
# `conductor_rl.plan.language`, `conductor_rl.plan.parse_plan`, `jobs.ask`, ...
DOTTED_RE = re.compile(r"(?<![\w./-])(?:conductor_rl|jobs|actors)(?:\.[A-Za-z_]\w*)+")


def named_paths(text: str) -> set[str]:
    return {m.group().rstrip(".") for m in PATH_RE.finditer(text)}


def named_modules(text: str) -> set[str]:
    return set(DOTTED_RE.findall(text))


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


# ---------------------------------------------------------------- the configuration reference


@pytest.mark.slow
def test_configuration_reference_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "config_reference.py"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_check_fails_on_a_stale_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import config_reference
    finally:
        sys.path.remove(str(REPO / "scripts"))
    stale = tmp_path / "configuration.md"
    stale.write_text(config_reference.generate().replace("| `conductor.temperature` |", "| `conductor.temp` |"))
    monkeypatch.setattr(config_reference, "OUTPUT", tmp_path / "configuration.md")
    assert config_reference.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "out of date" in out and "conductor.temp" in out
    assert config_reference.main([]) == 0  # rewrites the (temporary) file
    assert config_reference.main(["--check"]) == 0


def test_reference_covers_every_key() -> None:
    from conductor_rl.config import Config

    text = (REPO / "docs" / "configuration.md").read_text()

    def keys(model, prefix):
        for name, field_info in model.model_fields.items():
            annotation = field_info.annotation
            inner = [a for a in (annotation, *getattr(annotation, "__args__", ())) if isinstance(a, type)]
            nested = [a for a in inner if hasattr(a, "model_fields")]
            if nested:
                sub = f"{prefix}{name}.<i>." if getattr(annotation, "__origin__", None) is list else f"{prefix}{name}."
                yield from keys(nested[0], sub)
            else:
                yield f"{prefix}{name}"

    missing = [k for k in keys(Config, "") if f"`{k}`" not in text]
    assert not missing, f"docs/configuration.md lacks {missing}"


# ---------------------------------------------------------------- docs/architecture.md


def test_architecture_names_only_existing_paths() -> None:
    text = ARCHITECTURE.read_text()
    paths = named_paths(text)
    assert len(paths) > 30, "the module map seems to be missing"
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def without_fenced_blocks(text: str) -> str:
    return re.sub(r"^(`{3,}|~{3,}).*?^\1\s*$", "", text, flags=re.S | re.M)


def test_the_docs_name_only_existing_paths() -> None:
    """As for docs/architecture.md, in every written doc outside quoted output (the generated
    reference quotes the code's own descriptions: scripts/config_reference.py keeps it current)."""
    written = [doc for doc in DOCS if doc != REPO / "docs" / "configuration.md"]
    missing = [
        f"{relative(doc)}: {p}"
        for doc in written
        for p in sorted(named_paths(without_fenced_blocks(doc.read_text())))
        if not (REPO / p).exists()
    ]
    assert not missing, "the docs name paths that do not exist:\n" + "\n".join(missing)


def test_architecture_names_only_existing_modules() -> None:
    missing = []
    for dotted in sorted(named_modules(ARCHITECTURE.read_text())):
        parts = dotted.split(".")
        # The longest prefix that is a module; the rest must be attributes of it.
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(dotted)
            break
        else:
            missing.append(dotted)
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_path_patterns() -> None:
    text = "see `conductor_rl/plan/language.py`, configs/local.yaml. And ../other/x.md and conductor_rl.plan.parse_plan"
    assert named_paths(text) == {"conductor_rl/plan/language.py", "configs/local.yaml"}
    assert named_modules(text) == {"conductor_rl.plan.parse_plan"}


# ---------------------------------------------------------------- commands in the docs

SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}
SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")"}
REDIRECTS = {">", ">>", "<", ">&", "<&", "&>", ">|"}
# `<checkpoint>`, `<path>`, `...`: a value the reader fills in. Before a line is split into words, each
# `<name>` becomes PLACEHOLDER_WORD (the shell would read its brackets as redirections).
PLACEHOLDER_IN_LINE = re.compile(r"<[A-Za-z][^<>\s]*>")
PLACEHOLDER_WORD = "__placeholder__"
PLACEHOLDER = re.compile(re.escape(PLACEHOLDER_WORD) + r"|\.\.\.")
DEFAULT_CONFIG = "configs/local.yaml"


@dataclass
class Command:
    """One documented invocation: `kind` is "cli" (conductor-rl <name>), "module"
    (python -m <name>), "script" (python <name>.py) or "app" (<module>:<attribute>)."""

    kind: str
    name: str
    args: list[str] = field(default_factory=list)


def code_blocks(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line number of the first line, language, lines) for each fenced code block."""
    fence, language, start, lines = None, "", 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if fence is None:
            opening = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if opening:
                fence, language, start, lines = opening.group(1), opening.group(2).lower(), number + 1, []
        elif stripped.startswith(fence) and not stripped[len(fence) :].strip():
            yield start, language, lines
            fence = None
        else:
            lines.append(line)


def command_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of each shell line in the fenced blocks, continuations joined."""
    for start, language, lines in code_blocks(text):
        if language not in SHELL_LANGUAGES:
            continue
        pending, first = "", start
        for offset, line in enumerate(lines):
            if not pending:
                first = start + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield first, pending + line
            pending = ""
        if pending:
            yield first, pending


def shell_words(line: str) -> list[str]:
    lexer = shlex.shlex(PLACEHOLDER_IN_LINE.sub(PLACEHOLDER_WORD, line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def segments(words: list[str]) -> Iterator[list[str]]:
    """The simple commands of a shell line, without their redirections."""
    current: list[str] = []
    skip_next = False
    for i, word in enumerate(words):
        if skip_next:
            skip_next = False
        elif word in SEPARATORS:
            if current:
                yield current
            current = []
        elif word in REDIRECTS:
            skip_next = True
        elif word.isdigit() and i + 1 < len(words) and words[i + 1] in REDIRECTS:
            pass  # the file descriptor of `2>`
        else:
            current.append(word)
    if current:
        yield current


def find_commands(line: str) -> list[Command]:
    """The project's commands a shell line runs (`ray job submit ... -- python -m jobs.train` included)."""
    try:
        words = shell_words(line)
    except ValueError as err:  # unbalanced quotes
        if re.search(r"conductor-rl|jobs\.|benchmarks/", line):
            return [Command("broken", f"cannot split the line into words: {err}")]
        return []
    found = []
    for words_of_one in segments(words):
        for i, word in enumerate(words_of_one):
            rest = words_of_one[i + 1 :]
            base = word.rsplit("/", 1)[-1]
            if base == "conductor-rl":
                if rest[:1] == ["--verbose"]:  # the one option before the subcommand (jobs/cli.py)
                    rest = rest[1:]
                found.append(Command("cli", rest[0] if rest else "", rest[1:]))
                break
            runs_a_module = re.fullmatch(r"python[\d.]*", base) and len(rest) >= 2 and rest[0] == "-m"
            if runs_a_module and re.fullmatch(r"jobs(\.\w+)+", rest[1]) and not PLACEHOLDER.search(rest[1]):
                found.append(Command("module", rest[1], rest[2:]))
                break
            if re.fullmatch(r"python[\d.]*", base) and rest and rest[0].startswith("benchmarks/"):
                found.append(Command("script", rest[0], rest[1:]))
                break
            if re.fullmatch(r"jobs\.\w+:\w+", word):
                found.append(Command("app", word, rest))
                break
    return found


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser, method: str, args: Sequence[str] | None):
        super().__init__(method)
        self.parser, self.method, self.argv = parser, method, args


PARSE_METHODS = ("parse_args", "parse_known_args", "parse_intermixed_args", "parse_known_intermixed_args")


@contextlib.contextmanager
def parsers_captured() -> Iterator[None]:
    """While active, the first parse of any ArgumentParser raises _Parsed with the parser instead."""
    originals = {name: getattr(argparse.ArgumentParser, name) for name in PARSE_METHODS}

    def capture(name: str) -> Callable:
        def parse(self, args=None, namespace=None):
            raise _Parsed(self, name, args)

        return parse

    for name in PARSE_METHODS:
        setattr(argparse.ArgumentParser, name, capture(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(argparse.ArgumentParser, name, original)


def parse_as_the_command_does(main: Callable, argv: list[str], prog: str) -> str | None:
    """Run `main` until it parses its arguments, then parse `argv` with that very parser.
    Returns argparse's complaint, or None when the arguments parse."""
    saved_argv = sys.argv
    sys.argv = [prog, *argv]  # for a main() that reads sys.argv itself
    try:
        with parsers_captured():
            try:
                main(argv) if inspect.signature(main).parameters else main()
            except _Parsed as parsed:
                got = parsed
            else:
                return f"{prog}: returned before parsing its arguments"
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                getattr(got.parser, got.method)(list(argv) if got.argv is None else list(got.argv))
            except SystemExit as exit_:
                if exit_.code:
                    return f"{prog} {shlex.join(argv)}: {err.getvalue().strip().splitlines()[-1]}"
        # argparse takes `--resum` for `--resume`; a doc spells the option out.
        known = option_strings(got.parser)
        inexact = [w.split("=")[0] for w in argv if w.startswith("--") and w != "--" and w.split("=")[0] not in known]
        return f"{prog}: options not spelled as the parser has them: {inexact}" if inexact else None
    finally:
        sys.argv = saved_argv


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings of a parser and of its subcommands' parsers."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= option_strings(sub)
    return found


def option_value(args: list[str], option: str) -> list[str]:
    values = []
    for i, word in enumerate(args):
        if word == option and i + 1 < len(args):
            values.append(args[i + 1])
        elif word.startswith(option + "="):
            values.append(word.split("=", 1)[1])
    return values


def configuration_problems(args: list[str], config_file: str | None = None) -> list[str]:
    """Load the configuration a command line names, as the command would: its `--config`
    file (configs/local.yaml without one), its `key.sub=value` overrides (bare or after
    `--set`) and its `--workers` subset. Placeholders are left out."""
    from conductor_rl.config import ConfigError, is_override, load_config
    from conductor_rl.plan.roster import RosterError, parse_worker_names, with_workers

    files = option_value(args, "--config") or ([config_file] if config_file else [])
    file = files[-1] if files else DEFAULT_CONFIG
    if PLACEHOLDER.search(file):
        file = DEFAULT_CONFIG
    path = Path(file) if Path(file).is_absolute() else REPO / file
    if not path.is_file():
        return [f"--config {file}: no such file"]
    set_values = option_value(args, "--set")
    overrides = [w for w in args if is_override(w) and w not in set_values] + set_values
    placeholders = [o for o in overrides if PLACEHOLDER.search(o.partition("=")[2])]
    try:
        config = load_config(path, [o for o in overrides if o not in placeholders])
        for names in option_value(args, "--workers"):
            if not PLACEHOLDER.search(names):
                with_workers(config, parse_worker_names(names))
    except (ConfigError, RosterError) as err:
        return [" ".join(str(err).split())]
    return [f"{o}: no such configuration key" for o in placeholders if not key_exists(config, o.partition("=")[0])]


def key_exists(config, key: str) -> bool:
    """Whether a dotted key names a setting of `config` (a key inside a free-form mapping always does)."""
    from pydantic import BaseModel

    value = config
    for part in key.split("."):
        if isinstance(value, BaseModel):
            if part not in type(value).model_fields:
                return False
            value = getattr(value, part)
        elif isinstance(value, list):
            if not part.isdigit() or int(part) >= len(value):
                return False
            value = value[int(part)]
        else:  # a mapping, or a section left unset: any key may go there
            return isinstance(value, dict) or value is None
    return True


def script_options(path: Path) -> set[str]:
    """Every option string a benchmark script (and the benchmarks/ modules it imports) adds, read from its source."""
    options: set[str] = set()
    seen: set[Path] = set()
    todo = [path]
    while todo:
        current = todo.pop()
        if current in seen or not current.is_file():
            continue
        seen.add(current)
        tree = ast.parse(current.read_text(), filename=str(current))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                options.update(
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
                )
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "benchmarks":
                todo.append(REPO / (node.module.replace(".", "/") + ".py"))
            elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                todo.append(current.parent / (node.module.replace(".", "/") + ".py"))
    return options


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(f"_docs_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command_problems(line: str, import_scripts: bool = False) -> list[str]:
    """What is wrong with the project's commands on one documented shell line ([] if nothing).

    `import_scripts`: check a benchmark's flags with the parser its main() builds (imports the
    script, and with it torch or Ray) rather than with the options its source adds."""
    problems = []
    for command in find_commands(line):
        if command.kind == "broken":
            problems.append(command.name)
            continue
        if command.kind == "app":
            module_name, attribute = command.name.split(":")
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError:
                problems.append(f"{command.name}: no module {module_name}")
                continue
            if not hasattr(module, attribute):
                problems.append(f"{command.name}: {module_name} has no {attribute}")
                continue
            configs = [w.split("=", 1)[1] for w in command.args if w.startswith("config=")]
            problems += configuration_problems(command.args, configs[-1] if configs else None)
            continue
        if command.kind == "cli":
            if not command.name or command.name.startswith("-"):
                problems.append("conductor-rl without a subcommand")
                continue
            from jobs import cli

            problem = parse_as_the_command_does(cli.main, [command.name, *command.args], "conductor-rl")
        elif command.kind == "module":
            if importlib.util.find_spec(command.name) is None:
                problems.append(f"python -m {command.name}: no such module")
                continue
            module = importlib.import_module(command.name)
            if not callable(getattr(module, "main", None)):
                problems.append(f"python -m {command.name}: the module has no main()")
                continue
            problem = parse_as_the_command_does(module.main, command.args, f"python -m {command.name}")
        else:  # a benchmark script
            path = REPO / command.name
            if not path.is_file():
                problems.append(f"python {command.name}: no such script")
                continue
            if import_scripts:
                problem = parse_as_the_command_does(load_script(path).main, command.args, command.name)
            else:
                known = script_options(path)
                unknown = [w.split("=")[0] for w in command.args if w.startswith("--") and w.split("=")[0] not in known]
                problem = f"python {command.name}: unknown options {unknown}" if unknown else None
        if problem:
            problems.append(problem)
        problems += configuration_problems(command.args)
    return problems


def documented_lines() -> Iterator[tuple[str, int, str]]:
    for doc in DOCS:
        for number, line in command_lines(doc.read_text()):
            yield relative(doc), number, line


def test_the_docs_show_commands() -> None:
    commands = [c for _, _, line in documented_lines() for c in find_commands(line)]
    kinds = {c.kind for c in commands}
    assert {"cli", "module", "script"} <= kinds, kinds
    assert len(commands) > 40, f"only {len(commands)} commands found: is the extractor broken?"


def test_every_documented_command_is_runnable() -> None:
    problems = [f"{doc}:{number}: {p}" for doc, number, line in documented_lines() for p in command_problems(line)]
    assert not problems, "commands in the docs that would not run:\n" + "\n".join(problems)


@pytest.mark.slow
def test_every_documented_benchmark_parses_with_its_own_parser() -> None:
    """As above for `python benchmarks/<x>.py` lines, with the parser the script's main() builds."""
    problems = [
        f"{doc}:{number}: {p}"
        for doc, number, line in documented_lines()
        if any(c.kind == "script" for c in find_commands(line))
        for p in command_problems(line, import_scripts=True)
    ]
    assert not problems, "benchmark commands in the docs that would not run:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "line, complaint",
    [
        (".venv/bin/conductor-rl trian", "invalid choice"),
        (".venv/bin/conductor-rl train --resum", "--resum"),
        (".venv/bin/conductor-rl train --resumex", "unrecognized arguments"),
        (".venv/bin/conductor-rl train conductor.temprature=0.5", "conductor.temprature"),
        (".venv/bin/conductor-rl train --config configs/paper.yaml train.iterations=-3", "train.iterations"),
        (".venv/bin/conductor-rl train --config configs/nope.yaml", "no such file"),
        (".venv/bin/conductor-rl ask 'What is 2+2?' --kind numbers", "invalid choice"),
        (".venv/bin/conductor-rl ask 'Q?' --workers sim-math-expert,nobody", "nobody"),
        (".venv/bin/conductor-rl evaluate --limit twenty", "invalid int value"),
        (".venv/bin/conductor-rl data mixx", "mixx"),
        ("ray job submit --working-dir . -- python -m jobs.trian --config configs/paper.yaml", "no such module"),
        ("ray job submit --working-dir . -- python -m jobs.train --config configs/paper.yaml --resum", "--resum"),
        ("bash scripts/setup.sh && .venv/bin/conductor-rl train train.nope=1   # comment", "train.nope"),
        (".venv/bin/python benchmarks/nope.py --json", "no such script"),
        (".venv/bin/python benchmarks/learning.py --jsn", "--jsn"),
        ("serve run jobs.serve:no_builder config=configs/paper.yaml", "no_builder"),
        ("conductor-rl ask 'unbalanced", "cannot split"),
        (".venv/bin/conductor-rl serve conductor.model=<checkpoint> conductor.nope=<value>", "conductor.nope"),
    ],
)
def test_the_checker_catches_a_broken_command(line: str, complaint: str) -> None:
    problems = command_problems(line)
    assert problems and complaint in " ".join(problems), problems


@pytest.mark.parametrize(
    "line",
    [
        "bash scripts/setup.sh && .venv/bin/conductor-rl train    # set up, then train",
        ".venv/bin/conductor-rl train --resume train.output_dir=runs/mine learner.lr=3e-5",
        '.venv/bin/conductor-rl ask "What is 17 * 23?" --reference 391 --kind numeric --json > answers.json',
        ".venv/bin/conductor-rl serve conductor.model=<checkpoint>/model serve.model_name=conductor",
        ".venv/bin/conductor-rl train --config <file> train.iterations=3",
        ".venv/bin/conductor-rl train --config configs/paper.yaml --set train.iterations=3 --dashboard",
        "ray job submit --address http://HEAD:8265 --working-dir . -- python -m jobs.train --config configs/paper.yaml",
        ".venv/bin/python benchmarks/learning.py --json train.max_staleness=1",
        "serve run jobs.serve:app_builder config=configs/paper.yaml conductor.model=...",
        "tensorboard --logdir runs/local/tensorboard",
    ],
)
def test_the_checker_passes_a_good_command(line: str) -> None:
    assert command_problems(line) == []


def test_command_extraction() -> None:
    text = (
        "text\n```bash\nray job submit --working-dir . \\\n    -- python -m jobs.train x.y=1\n```\n"
        "```python\nconductor-rl = 1\n```\n"
    )
    assert list(command_lines(text)) == [(3, "ray job submit --working-dir .      -- python -m jobs.train x.y=1")]
    assert find_commands("a && .venv/bin/conductor-rl ask 'Q' > out.json 2>&1 | tee log") == [
        Command("cli", "ask", ["Q"])
    ]
    assert find_commands("conductor-rl --verbose train x.y=1") == [Command("cli", "train", ["x.y=1"])]


# ---------------------------------------------------------------- links and ../shared


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for a markdown file's headings (outside code blocks)."""
    in_code = {n for start, _, lines in code_blocks(text) for n in range(start - 1, start + len(lines) + 1)}
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading or number in in_code:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    anchors.update(re.findall(r"<a (?:name|id)=\"([^\"]+)\"", text))
    return anchors


def without_code(text: str) -> str:
    return re.sub(r"`[^`\n]*`", "", without_fenced_blocks(text))


LINK_RE = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def link_problems(doc: Path, text: str) -> list[str]:
    problems = []
    for target in LINK_RE.findall(without_code(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        if not file_part:
            if anchor not in heading_anchors(text):
                problems.append(f"{target}: no heading #{anchor} here")
            continue
        file = (doc.parent / file_part).resolve()
        if not file.exists():
            problems.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {file.name}")
    return problems


def test_links_between_docs_resolve() -> None:
    problems = [f"{relative(doc)}: {p}" for doc in DOCS for p in link_problems(doc, doc.read_text())]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_checker_catches_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "guide").mkdir()
    (tmp_path / "a.md").write_text("# Title\n\n## Running on `ray`: a cluster\n")
    doc = tmp_path / "guide" / "b.md"
    good = "[a](../a.md) [b](../a.md#running-on-ray-a-cluster) [self](#here) [web](https://example.com)\n# Here\n"
    assert link_problems(doc, good) == []
    assert link_problems(doc, "[a](a.md)") == ["a.md: no such file"]
    assert link_problems(doc, "[a](../a.md#nowhere)") == ["../a.md#nowhere: no heading #nowhere in a.md"]
    assert link_problems(doc, "[a](#nowhere)") == ["#nowhere: no heading #nowhere here"]
    assert link_problems(doc, "```\n[a](nowhere.md)\n```\n") == []


def test_no_doc_sends_a_user_to_the_shared_directory() -> None:
    offenders = [relative(doc) for doc in DOCS if "../shared" in doc.read_text()]
    assert not offenders, f"a user's clone has no ../shared, but these docs mention it: {offenders}"


def test_the_readme_stays_short() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150: details go to docs/guide/)"
    assert "bash scripts/setup.sh && .venv/bin/conductor-rl train" in "\n".join(lines[2:8])
    assert "bash scripts/test.sh" in "\n".join(lines[2:8])


# ---------------------------------------------------------------- figures anyone can check

RESULTS_FILE_RE = re.compile(r"benchmarks/results/[\w./-]+\.json")
# A section whose figures were measured before benchmarks kept their results says so instead.
BEFORE_KEPT = "before results were kept"


def figure_sections(doc: Path) -> dict[str, str]:
    """docs/results.md's `## ` sections, and the README's Results section: where figures are quoted."""
    text = doc.read_text()
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    sections = {p.splitlines()[0]: p for p in parts}
    return {"Results": sections["Results"]} if doc.name == "README.md" else sections


def test_every_quoted_figure_names_its_result_file() -> None:
    """Every section that quotes figures names the benchmarks/results/ file they came from (which must
    exist: a missing one fails here and in test_the_docs_name_only_existing_paths), or says that it
    was measured before results were kept."""
    unnamed, missing = [], []
    for doc in (REPO / "README.md", REPO / "docs" / "results.md"):
        for title, body in figure_sections(doc).items():
            files = RESULTS_FILE_RE.findall(body)
            if not files and BEFORE_KEPT not in body:
                unnamed.append(f"{relative(doc)}: ## {title}")
            missing += [f"{relative(doc)}: {f}" for f in files if not (REPO / f).is_file()]
    assert not unnamed, "sections quote figures without naming their result file:\n" + "\n".join(unnamed)
    assert not missing, "named result files that do not exist:\n" + "\n".join(missing)


def test_a_kept_result_holds_what_checks_a_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from benchmarks.measure import RESULTS_DIR_ENV, keep_result

    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["benchmarks/subsets.py", "--seeds", "1"])
    kept = json.loads(keep_result({"subset_trained_unseen": 0.6}).read_text())
    assert kept["benchmark"] == "subsets" and kept["figures"] == {"subset_trained_unseen": 0.6}
    assert kept["command"] == ".venv/bin/python benchmarks/subsets.py --seeds 1"
    assert re.fullmatch(r"[0-9a-f]{40}", kept["commit"]) and isinstance(kept["uncommitted_changes"], bool)
    assert {"cpu_model", "cpus", "avx512_bf16", "amx_bf16"} <= set(kept["machine"]) and kept["finished_utc"]


# ---------------------------------------------------------------- settings named in prose

SECTIONS = ("conductor", "workers", "workflow", "generator", "learner", "train", "grader", "data", "evaluate",
            "serve", "ask", "mix", "cluster", "tracking")  # fmt: skip
# `learner.lr`, `workers.<i>.serve.gpus`, `train.choice_weighting: segment`, `grader.sandbox.require_isolation=false`
SETTING_RE = re.compile(r"`((?:" + "|".join(SECTIONS) + r")(?:\.(?:<\w+>|\d+|[A-Za-z_]\w*))+)(?:[=:][^`]*)?`")


def setting_exists(name: str) -> bool:
    """Whether `name` (dotted, `<i>` or a number for a list's item) reaches a field of the configuration."""
    import typing

    from pydantic import BaseModel

    from conductor_rl.config import Config

    def models_in(annotation) -> list[type[BaseModel]]:
        found, stack = [], [annotation]
        while stack:
            a = stack.pop()
            if isinstance(a, type) and issubclass(a, BaseModel):
                found.append(a)
            stack.extend(typing.get_args(a))
        return found

    def mapping(annotation) -> bool:
        return any(typing.get_origin(a) in (dict, typing.Mapping) for a in [annotation, *typing.get_args(annotation)])

    current: list[type[BaseModel]] = [Config]
    parts = name.split(".")
    i = 0
    while i < len(parts):
        part = parts[i]
        fields = [m.model_fields[part] for m in current if part in m.model_fields]
        if not fields:
            return False
        annotation = fields[0].annotation
        i += 1
        if i < len(parts) and (parts[i].startswith("<") or parts[i].isdigit()):
            i += 1  # an item of a list of sections (`workers.<i>`)
        if mapping(annotation):
            return True  # a free mapping (`serve.env`, `extra_body`): any key below
        current = models_in(annotation)
        if i < len(parts) and not current:
            return False
    return True


def test_the_docs_name_only_existing_settings() -> None:
    """Every `section.key` a written doc names in backticks is a setting of the configuration (the
    overrides in commands are checked by running their parser, test_every_documented_command_is_runnable)."""
    written = [doc for doc in DOCS if doc != REPO / "docs" / "configuration.md"]
    named = {
        (relative(doc), m.group(1))
        for doc in written
        for m in SETTING_RE.finditer(without_fenced_blocks(doc.read_text()))
    }
    assert len(named) > 50, "the settings pattern finds too few"
    files = (".py", ".parquet", ".yaml", ".json", ".jsonl", ".md", ".csv", ".png", ".txt")
    missing = sorted(f"{doc}: {n}" for doc, n in named if not n.endswith(files) and not setting_exists(n))
    assert not missing, "the docs name settings that do not exist:\n" + "\n".join(missing)


def test_the_setting_checker_knows_a_real_setting_from_a_made_up_one() -> None:
    assert setting_exists("learner.lr") and setting_exists("workers.<i>.serve.gpus")
    assert setting_exists("grader.sandbox.require_isolation") and setting_exists("workers.0.extra_body.top_k")
    assert not setting_exists("learner.learning_rate") and not setting_exists("serve.env")
    assert not setting_exists("train.warm_start.nonexistent")
