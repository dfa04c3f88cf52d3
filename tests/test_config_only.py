"""One configuration: only `delegate/config/` reads the process environment or delegate.toml
(found by scanning the package's source with `ast`, so no rename hides a read), every variable
the toolkit reads is declared once there, and the documentation's table is made from it."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

import delegate
from delegate.config import settings as config_settings
from delegate.config.settings import ENV_VARS, Settings, env_table, settings

PACKAGE = Path(delegate.__file__).resolve().parent
CONFIG_PAGE = PACKAGE.parent / "docs" / "reference" / "configuration.md"
ENV_MODULES = {"os", "posix"}  # both hand out the process environment
ENV_NAMES = {"environ", "environb", "getenv", "getenvb"}
TOML_MODULES = {"tomllib", "tomli", "toml"}
CONFIG = "delegate.toml"


def _module_aliases(tree: ast.AST) -> set[str]:
    """The names `import os`, `import os as o`, `import os.path` bind to an environment module."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in ENV_MODULES:
                    found.add(alias.asname if alias.asname and "." not in alias.name else top)
    return found


def _finding(node: ast.AST, modules: set[str]) -> str | None:
    """What `node` reads that only config/ may, or None."""
    if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES:
        if isinstance(node.value, ast.Name) and node.value.id in modules:
            return f"{node.value.id}.{node.attr}"
    elif isinstance(node, ast.ImportFrom) and node.module:
        top = node.module.split(".")[0]
        if top in ENV_MODULES and {a.name for a in node.names} & (ENV_NAMES | {"*"}):
            return f"from {node.module} import the environment"
        if top in TOML_MODULES:
            return f"from {node.module} import"
    elif isinstance(node, ast.Import):
        if any(a.name.split(".")[0] in TOML_MODULES for a in node.names):
            return "import of a TOML parser"
    elif isinstance(node, ast.Constant) and _names_the_config_file(node.value):
        return "the literal 'delegate.toml'"
    return None


def _names_the_config_file(value: object) -> bool:
    return isinstance(value, str) and (value == CONFIG or value.endswith("/" + CONFIG))


def reads(source: str) -> list[str]:
    """What `source` does that only config/ may: read the environment, parse TOML, or name
    delegate.toml. One `line: what` per finding."""
    tree = ast.parse(source)
    modules = _module_aliases(tree)
    found = []
    for node in ast.walk(tree):
        what = _finding(node, modules)
        if what:
            found.append(f"{node.lineno}: {what}")  # type: ignore[attr-defined]
    return found


def violations(package: Path) -> dict[str, list[str]]:
    """Every module of `package` outside config/ that reads what only config/ may read."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] == "config":
            continue
        found = reads(path.read_text(encoding="utf-8"))
        if found:
            out[str(relative)] = found
    return out


def test_only_config_reads_the_environment_or_delegate_toml():
    assert violations(PACKAGE) == {}


def test_the_scan_fails_on_a_read_in_a_service(tmp_path: Path):
    copy = tmp_path / "delegate"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    service = copy / "services" / "ps.py"
    source = service.read_text(encoding="utf-8")
    service.write_text(source + '\n\nLEAK = os.environ.get("DELEGATE_HOME")\n', encoding="utf-8")
    found = violations(copy)
    assert list(found) == ["services/ps.py"]
    assert found["services/ps.py"][0].endswith(": os.environ")


def test_the_scan_sees_config_reading_the_environment():
    """Config is exempt, not invisible: the same scan finds its reads."""
    source = (PACKAGE / "config" / "settings.py").read_text(encoding="utf-8")
    assert any(line.endswith("os.environ") for line in reads(source))
    tomlfile = (PACKAGE / "config" / "tomlfile.py").read_text(encoding="utf-8")
    assert reads(tomlfile)


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.getenv('HOME')",
        "import os as o\nhome = o.environ['HOME']",
        "import os.path\nos.environb",
        "from os import environ",
        "from os import getenv as g",
        "from os import *",
        "import posix\nposix.environ",
        "import tomllib",
        "from tomllib import loads",
        "path = home / 'delegate.toml'",
        "path = f'{home}' + '/delegate.toml'",
    ],
    ids=lambda s: s.replace("\n", "; "),
)
def test_each_way_of_reading_is_found(source: str):
    assert reads(source)


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.path.join('a', 'b')",
        "env = {}\nenv.get('HOME')",  # a mapping passed in is not the process environment
        "def f(environ):\n    return environ['X']",
        "'''Thresholds of delegate.toml's [heartbeat].'''",
    ],
    ids=lambda s: s.replace("\n", "; "),
)
def test_what_is_not_a_read_is_not_found(source: str):
    assert reads(source) == []


def test_the_documented_table_is_the_declaration():
    """The configuration reference holds no copy of the table: its marker is replaced by
    `env_table()` when the site is built (docs/hooks), so it cannot drift from the code."""
    from scripts.gen_docs import fill  # the docs' own generator, as the build runs it

    text = CONFIG_PAGE.read_text(encoding="utf-8")
    assert "<!-- generated: environment -->" in text and "| `DELEGATE_HOME` |" not in text
    assert env_table() in fill(text)


def test_every_variable_name_is_declared_once():
    names = [var.name for var in ENV_VARS]
    assert len(names) == len(set(names))
    constants = {
        value
        for key, value in vars(config_settings).items()
        if key.endswith("_ENV") and isinstance(value, str)
    }
    assert constants | set(config_settings.AGENT_BASE_ENV) == set(names)
    assert all(var.meaning and "\n" not in var.meaning for var in ENV_VARS)
    assert config_settings.TMUX_SOCKET_ENV != config_settings.PUBLISH_SOCKET_ENV


def test_settings_come_from_the_mapping_given():
    made = Settings.from_env(
        {
            "DELEGATE_HOME": "/srv/state",
            "DELEGATE_JOB_ID": "",  # empty counts as unset
            "DELEGATE_PUBLISH_SOCKET": "/run/p.sock",
            "COLUMNS": "0",
        }
    )
    assert made.home == "/srv/state" and made.job_id is None
    assert made.publish_socket == "/run/p.sock" and made.tmux_socket is None
    assert made.log_level == "WARNING" and made.columns is None
    assert Settings.from_env({"COLUMNS": "132"}).columns == 132
    with pytest.raises(AttributeError):
        made.home = "/elsewhere"  # type: ignore[misc]


def test_settings_are_built_once_and_again_only_for_a_new_environment(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("DELEGATE_AGENT_ID", "first")
    first = settings()
    assert settings() is first and first.agent_id == "first"
    monkeypatch.setenv("DELEGATE_AGENT_ID", "second")
    assert settings() is not first and settings().agent_id == "second"
