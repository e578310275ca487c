"""The Jinja2 environment for templates/: strict (a missing value is an error), no
HTML escaping, and the systemd quoting filters."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ascendctl.paths import templates_dir
from ascendctl.render import systemd


@lru_cache(maxsize=1)
def environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["sd_exec"] = systemd.exec_line
    env.filters["sd_spec"] = systemd.escape_specifiers
    env.filters["sd_env"] = lambda pair: systemd.environment_assignment(*pair)
    env.filters["yaml_str"] = _yaml_str
    return env


def _yaml_str(value: Any) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    import json

    return json.dumps(str(value))


def render_template(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)
