"""The layout of ``catalog/`` holds: no import cycles, and every import goes down the floors. (And of
``tests/``: no test module imports another; of ``bench/results/``: every result a document names exists.)

Read from the source with ``ast``, so every import counts: top-level ones, those inside functions
(lazy), and those under ``TYPE_CHECKING``. The floors, lowest first, are the ones the layout page
(docs/internals.md) describes; a module may import a module on a lower floor, or one in its own
folder (the ground floor's modules, ``settings/``'s included, each other). Two folders on the same floor
never import each other.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "catalog"

# Lowest first. A name is a module (catalog.errors) or a folder (catalog.database, meaning its modules).
FLOORS: list[tuple[str, ...]] = [
    (
        "catalog",
        "catalog.errors",
        "catalog.settings",
        "catalog.names",
        "catalog.locations",
        "catalog.metrics",
        "catalog.logs",
        "catalog.tracing",
    ),  # fmt: skip
    ("catalog.metadata", "catalog.auth.policy", "catalog.events"),  # pure: the ground floor only
    ("catalog.database", "catalog.storage"),
    ("catalog.planning",),  # scan planning: reads metadata and manifests through storage
    ("catalog.auth",),
    ("catalog.commit",),
    ("catalog.maintenance", "catalog.delivery"),
    ("catalog.usecases", "catalog.placement", "catalog.registration", "catalog.drops"),  # use cases
    ("catalog.api",),
    ("catalog.console",),  # the web console: pages over the service, authorised by api.guard
    ("catalog.server",),
    ("catalog.cli",),
    ("catalog.__main__",),
]
PURE = ("catalog.metadata", "catalog.auth.policy", "catalog.events")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The catalog modules ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports the module; ``from mod import name`` the module itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def floor_of(name: str) -> tuple[int, str]:
    """(floor, the floor entry that holds ``name``), the most specific entry winning."""
    best: tuple[int, str] | None = None
    for level, entries in enumerate(FLOORS):
        for entry in entries:
            if (name == entry or name.startswith(entry + ".")) and (best is None or len(entry) > len(best[1])):
                best = (level, entry)
    assert best is not None, f"{name} is on no floor: add it to FLOORS (and to the layout page)"
    return best


def folder(name: str) -> str:
    return name.rpartition(".")[0]


def test_every_module_is_on_a_floor() -> None:
    for name in modules():
        floor_of(name)


def test_no_import_cycles_lazy_imports_included() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert cycles == []


def test_imports_go_down_the_floors() -> None:
    wrong = []
    for name, targets in graph().items():
        level, _ = floor_of(name)
        for target in targets:
            target_level, _ = floor_of(target)
            if target.startswith(name + "."):
                continue  # a package's own modules
            if folder(target) == folder(name) and (folder(name) != "catalog" or target_level == level):
                continue  # a module of the same folder (on the ground floor: of the ground floor)
            if level == target_level == 0:
                continue  # the ground floor, its settings/ package included, imports itself (no cycle: above)
            if target_level >= level:
                wrong.append(f"{name} (floor {level}) imports {target} (floor {target_level})")
    assert wrong == []


def test_pure_modules_import_only_the_ground_floor() -> None:
    for name, targets in graph().items():
        if name.startswith(PURE):
            for target in targets:
                ok = floor_of(target)[0] == 0 or folder(target) == folder(name) or target.startswith(name + ".")
                assert ok, f"{name} imports {target}"


@pytest.mark.parametrize("probe", ["cycle", "upward"])
def test_the_checks_catch_what_they_guard(probe: str, tmp_path: Path) -> None:
    """The graph reader sees a lazy import and resolves relative ones (else the tests above pass vacuously)."""
    lazy = tmp_path / "m.py"
    lazy.write_text("def f():\n    from catalog.usecases import Catalog\n    from . import errors\n")
    found = imports("catalog.database.m", lazy, {"catalog.usecases", "catalog.database.errors", "catalog.errors"})
    assert found == {"catalog.usecases", "catalog.database.errors"}
    if probe == "upward":
        assert floor_of("catalog.database.entries")[0] < floor_of("catalog.usecases")[0]


# -- the store's parts (issue 42): composed, narrow, each handed only to the consumers that use it --

STORE = "catalog.database"
WHOLE_STORE = "Store"  # the set of the parts, in ``database/store.py``
MAY_HOLD_THE_WHOLE_STORE = ("catalog.database.store", "catalog.server.app")  # where it is, and build_catalog


def repositories() -> set[str]:
    """The store's parts: the classes of ``catalog/database/`` built on the one ``Database`` (their
    ``__init__`` takes ``db``), and ``Database`` itself."""
    found = {"Database"}
    for name, path in modules().items():
        if name.startswith(STORE + "."):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        init = isinstance(item, ast.FunctionDef) and item.name == "__init__"
                        if init and "db" in [a.arg for a in item.args.args]:
                            found.add(node.name)
    return found


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def mixed_repositories(path: Path, repos: set[str]) -> list[str]:
    """Classes in ``path`` that inherit from more than one repository, or that are a repository and
    inherit from another one (a part holds the ``Database`` and its collaborators, it is not them)."""
    wrong = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            bases = [_name(b) for b in node.bases if _name(b) in repos]
            if len(bases) > 1 or (bases and node.name in repos):
                wrong.append(f"{path.name}: class {node.name}({', '.join(bases)})")
    return wrong


def names_the_class(path: Path, cls: str) -> list[str]:
    """Where ``path`` names the class ``cls`` (imports it, types with it, builds it): the lines."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            named = any(a.name == cls for a in node.names)
        elif isinstance(node, ast.Constant):  # a string annotation
            named = node.value == cls
        else:
            named = isinstance(node, (ast.Name, ast.Attribute)) and _name(node) == cls
        if named:
            lines.append(node.lineno)
    return [f"{path.name}:{n}" for n in sorted(set(lines))]


def holds_the_whole_store(path: Path) -> list[str]:
    """Where ``path`` names the whole store (imports it, types with it, builds it): the lines."""
    return names_the_class(path, WHOLE_STORE)


def reaches(edges: dict[str, set[str]], source: str, target: str) -> list[str]:
    """The imports from the modules of ``source`` into those of ``target``."""
    inside = lambda name, prefix: name == prefix or name.startswith(prefix + ".")  # noqa: E731
    return sorted(f"{n} -> {t}" for n, ts in edges.items() if inside(n, source) for t in ts if inside(t, target))


def test_no_class_inherits_from_more_than_one_repository() -> None:
    repos = repositories()
    assert {"Database", "Pointers", "Entries", "GrantRows", "TaskRows", "Leases", "DroppedRows"} <= repos
    assert [w for path in modules().values() for w in mixed_repositories(path, repos)] == []


def test_no_consumer_is_given_the_whole_store() -> None:
    """Only build_catalog holds every part at once; each consumer is built with the parts it uses."""
    found = {name: holds_the_whole_store(path) for name, path in modules().items()}
    assert {n: lines for n, lines in found.items() if lines and n not in MAY_HOLD_THE_WHOLE_STORE} == {}


def test_auth_imports_nothing_of_the_store() -> None:
    """Access is typed by a Protocol of its own (``auth.grants.GrantStore``): no arrow from auth/ to database/."""
    assert reaches(graph(), "catalog.auth", STORE) == []


@pytest.mark.parametrize("probe", ["mixin", "part-over-part", "whole-store", "auth-store"])
def test_the_store_checks_catch_what_they_guard(probe: str, tmp_path: Path) -> None:
    """Each check above fails on the shape it forbids (else it would pass vacuously)."""
    m = tmp_path / "m.py"
    if probe == "mixin":
        m.write_text("from catalog.database.pointers import Pointers\nclass S(Pointers, GrantRows):\n    pass\n")
        assert mixed_repositories(m, repositories()) == ["m.py: class S(Pointers, GrantRows)"]
    elif probe == "part-over-part":
        m.write_text("class TaskRows(EventRows):\n    pass\n")
        assert mixed_repositories(m, repositories()) == ["m.py: class TaskRows(EventRows)"]
    elif probe == "whole-store":
        m.write_text("def f(store: 'Store'):\n    from catalog.database.store import Store\n    return store\n")
        assert holds_the_whole_store(m) == ["m.py:1", "m.py:2"]
    else:
        m.write_text("from catalog.database.entries import Entries\n")
        edges = {"catalog.auth.m": imports("catalog.auth.m", m, {"catalog.database.entries"})}
        assert reaches(edges, "catalog.auth", STORE) == ["catalog.auth.m -> catalog.database.entries"]


# -- settings by wing: each wing is given its own group of settings, only the wiring holds them all ---

WHOLE_SETTINGS = "Settings"  # the set of the groups, in ``settings/__init__.py``
MAY_HOLD_ALL_SETTINGS = (
    "catalog.settings",  # where it is
    "catalog.warehouse_profiles",  # a created warehouse's settings: the server's, with the warehouse's own
    "catalog.usecases",  # Catalog.__init__ hands each part its group
    "catalog.server.app",  # build_catalog, create_app
    "catalog.server.startup",  # serve's checks and summary, over every group
    "catalog.server.warehouses",  # opens each warehouse with its settings
    "catalog.cli",  # the commands read the environment and flags
)


def holds_all_settings(names: dict[str, list[str]]) -> dict[str, list[str]]:
    """Of ``{module: lines naming Settings}``, the modules outside the wiring."""
    allowed = lambda n: any(n == w or n.startswith(w + ".") for w in MAY_HOLD_ALL_SETTINGS)  # noqa: E731
    return {n: lines for n, lines in names.items() if lines and not allowed(n)}


def test_no_wing_is_given_every_setting() -> None:
    """Storage is built with ``StorageSettings``, the commit engine with ``CommitSettings``, ...:
    only the wiring names the whole ``Settings`` (docs/internals.md, *Settings by wing*)."""
    assert holds_all_settings({n: names_the_class(p, WHOLE_SETTINGS) for n, p in modules().items()}) == {}


def test_the_settings_check_catches_a_wing_given_every_setting(tmp_path: Path) -> None:
    m = tmp_path / "m.py"
    m.write_text("def f(settings: 'Settings'):\n    from catalog.settings import Settings, StorageSettings\n")
    found = {"catalog.storage.m": names_the_class(m, WHOLE_SETTINGS), "catalog.cli.m": names_the_class(m, "Settings")}
    assert holds_all_settings(found) == {"catalog.storage.m": ["m.py:1", "m.py:2"]}
    m.write_text("from catalog.settings import StorageSettings\ndef f(settings: StorageSettings): ...\n")
    assert holds_all_settings({"catalog.storage.m": names_the_class(m, WHOLE_SETTINGS)}) == {}


# -- sizes: one job per module ------------------------------------------------------------------------

MAX_LINES = 550
# Longer because their one job is (docs/internals.md): one rule of Java's would otherwise be in two places.
LONG_BY_DESIGN = ("catalog/metadata/builder.py", "catalog/metadata/schemas.py")
# Longer than they should be, each held at its size until it is split (issue 42): a ratchet, not a licence.
TO_SPLIT: dict[str, int] = {}


def too_long(sizes: dict[str, int]) -> dict[str, int]:
    """Of ``{path: lines}``, the modules over their bound: ``MAX_LINES``, or their size in ``TO_SPLIT``."""
    return {
        name: lines
        for name, lines in sizes.items()
        if name not in LONG_BY_DESIGN and lines > TO_SPLIT.get(name, MAX_LINES)
    }


def module_sizes() -> dict[str, int]:
    return {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in modules().values()}


def test_no_module_is_over_its_bound() -> None:
    assert too_long(module_sizes()) == {}


def test_a_split_module_leaves_the_ratchet() -> None:
    """A module in ``TO_SPLIT`` that came under ``MAX_LINES`` is taken off the list (it may not grow back)."""
    sizes = module_sizes()
    assert {n: sizes.get(n) for n in TO_SPLIT if sizes.get(n, 0) <= MAX_LINES} == {}


def test_the_size_check_catches_a_long_module() -> None:
    assert too_long({"catalog/x.py": MAX_LINES, "catalog/metadata/builder.py": 5000}) == {}
    assert too_long({"catalog/x.py": MAX_LINES + 1}) == {"catalog/x.py": MAX_LINES + 1}
    assert all(too_long({name: lines + 1}) for name, lines in TO_SPLIT.items())  # a ratchet: no growing back


# -- names: one module name, one concept -------------------------------------------------------------

FRONT_ENDS = ("catalog.api", "catalog.cli", "catalog.console")  # route, command and page modules name what they serve


def repeated_names(names: list[str]) -> dict[str, list[str]]:
    """Module names (the file's stem) that more than one module outside the front ends carries: a reader
    of ``maintenance/policy.py`` next to ``auth/policy.py`` cannot tell which one an import means."""
    owners: dict[str, list[str]] = {}
    for name in names:
        stem = name.rpartition(".")[2]
        if name.rpartition(".")[0] not in FRONT_ENDS and stem != "__init__":
            owners.setdefault(stem, []).append(name)
    return {stem: sorted(where) for stem, where in owners.items() if len(where) > 1}


def test_a_module_name_means_one_thing_outside_the_front_ends() -> None:
    assert repeated_names([n for n, p in modules().items() if p.name != "__init__.py"]) == {}


def test_the_name_check_catches_a_repeat() -> None:
    names = ["catalog.api.events", "catalog.cli.events", "catalog.database.events", "catalog.auth.policy"]
    assert repeated_names(names) == {}
    assert repeated_names([*names, "catalog.maintenance.policy"]) == {
        "policy": ["catalog.auth.policy", "catalog.maintenance.policy"]
    }


def classes_defined_twice(sources: dict[str, str]) -> dict[str, list[str]]:
    """Class names (module level) that more than one module of ``{module: source}`` defines: two
    ``Retention`` classes make every ``Retention`` in a traceback or a review a question."""
    owners: dict[str, list[str]] = {}
    for name, text in sources.items():
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                owners.setdefault(node.name, []).append(name)
    return {cls: sorted(where) for cls, where in owners.items() if len(where) > 1}


def test_no_class_name_is_defined_twice() -> None:
    assert classes_defined_twice({n: p.read_text() for n, p in modules().items()}) == {}


def test_the_class_check_catches_a_second_definition() -> None:
    sources = {"catalog.a": "class Retention:\n    pass\n", "catalog.b": "def f():\n    class Retention: ...\n"}
    assert classes_defined_twice(sources) == {}
    sources["catalog.c"] = "class Retention(object):\n    x = 1\n"
    assert classes_defined_twice(sources) == {"Retention": ["catalog.a", "catalog.c"]}


# --- tests: a test module imports no other test module ------------------------------------------------

TESTS = ROOT / "tests"


def imported_test_modules(path: Path) -> set[str]:
    """The ``tests/test_*.py`` modules ``path`` (a module of tests/) imports, wherever the statement
    stands: ``import tests.test_x``, ``from tests.test_x import y``, ``from tests import test_x`` and the
    relative forms."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(filter(None, ["tests", base]))  # tests/ is flat: '.' is the tests package
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if len(parts) >= 2 and parts[0] == "tests" and parts[1].startswith("test_"):
                found.add(f"tests.{parts[1]}")
    return found


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in tests/support.py and fixtures in tests/conftest.py: a test module that
    imports another runs (and collects) that module's tests' set-up too, and breaks when it moves."""
    wrong = {
        path.name: sorted(found)
        for path in sorted(TESTS.glob("test_*.py"))
        if (found := imported_test_modules(path) - {f"tests.{path.stem}"})
    }
    assert wrong == {}, f"test modules importing other test modules (move what they share to tests/support.py): {wrong}"


def test_the_test_import_check_sees_every_form(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import tests.test_a\n"
        "from tests.test_b import helper\n"
        "from tests import test_c, support\n"
        "from .test_d import x\n"
        "from . import test_e\n"
        "def f():\n    from tests.test_f import y\n"
        "from tests.support import read_all\n"
        "from tests import services\n"
    )
    expected = {f"tests.test_{c}" for c in "abcdef"}
    assert imported_test_modules(probe) == expected


# --- bench/results/: every result a document names is there --------------------------------------------

RESULTS = ROOT / "bench" / "results"
# ``bench/results/<name>`` named anywhere; not ``<rev>:bench/results/...`` (a path in an old commit,
# for git show) and not the git-ignored output folders.
RESULT_PATH = re.compile(r"(?<![:\w/])(?:bench/)?results/([A-Za-z0-9][A-Za-z0-9._/-]*)")
MD_LINK = re.compile(r"\]\(([^)\s#]+)")
IGNORED_OUTPUT = ("raw/", "tmp/")


def result_references(path: Path, text: str) -> set[str]:
    """The ``bench/results/`` paths a Markdown file names: written out (``bench/results/x.md``, or
    ``results/x.md`` in bench/'s own files), or as a relative link that lands in bench/results/."""
    found: set[str] = set()
    in_bench = path.parent == ROOT / "bench"
    for m in RESULT_PATH.finditer(text):
        if m.group(0).startswith("bench/") or in_bench:
            found.add(m.group(1).rstrip(".,;:"))
    for m in MD_LINK.finditer(text):
        target = (path.parent / m.group(1)).resolve()
        if target.is_relative_to(RESULTS) and target != RESULTS:
            found.add(target.relative_to(RESULTS).as_posix())
    return {name for name in found if not name.startswith(IGNORED_OUTPUT)}


def test_every_bench_result_a_document_names_exists() -> None:
    """bench/results/ keeps the latest run of each scenario (bench/README.md, *The results*); a run that
    is replaced or pruned must not leave a link to nothing behind. Older runs are named by their old
    name and found in git history, never as a bench/results/ path."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "-z", "*.md"], cwd=ROOT, capture_output=True, check=True).stdout
    broken = []
    for name in filter(None, tracked.decode().split("\0")):
        path = ROOT / name
        if path.is_file():
            broken += [
                f"{name}: bench/results/{ref}"
                for ref in sorted(result_references(path, path.read_text()))
                if not (RESULTS / ref).exists()
            ]
    assert broken == [], f"links to bench results that are not in the tree: {broken}"


def test_the_results_check_sees_links_and_mentions() -> None:
    doc = ROOT / "docs" / "probe.md"  # never written: only its place matters for relative links
    text = (
        "[a](../bench/results/a.md) `bench/results/b.md`. `git show HEAD^:bench/results/old.md`"
        " bench/results/raw/x.json [c](../bench/results/c.png)"
    )
    assert result_references(doc, text) == {"a.md", "b.md", "c.png"}


# Binary files the repository keeps on purpose: the benchmark charts and the docs' pictures.
KEPT_BINARIES = (".png",)


def test_no_binary_file_is_committed() -> None:
    """A wheel, an archive or a database in the tree is a mistake (a 2.9 MB wheel once sat at the
    root, referenced by nothing): every tracked file is text, but for the pictures."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    binaries = []
    for name in tracked.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file() and not name.endswith(KEPT_BINARIES) and b"\0" in path.read_bytes()[:8192]:
            binaries.append(name)
    assert binaries == [], f"binary files tracked by git: {binaries}"


# --- packaging: every folder of catalog/ ships --------------------------------------------------------


def test_every_package_is_listed_for_pip_install() -> None:
    """``pyproject.toml`` lists packages by hand: a folder left out is missing from a non-editable
    install (a container image), while the editable install the tests use still finds it."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "catalog").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set()
