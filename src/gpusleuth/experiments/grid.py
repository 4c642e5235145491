"""Sweep configurations: parse ``--param name=v1,v2``, expand the grid, and turn one configuration into
the command line and environment of a job.

A parameter reaches the job in exactly one way, decided by its name, so a user can always tell what changed:

1. ``{name}`` appears in the command → substituted there (the user's own CLI flags: ``--lr {lr}``);
2. ``name`` is a built-in knob (``experiments.knobs``) → ``GPUSLEUTH_KNOB_<NAME>``, applied by the hook;
3. otherwise → an environment variable called ``name`` (``OMP_NUM_THREADS=1,2``).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from gpusleuth.experiments.knobs import KNOBS

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class GridError(ValueError):
    """A --param that cannot be used, with the sentence to show the user."""


def parse_param(text: str) -> tuple[str, list[str]]:
    """``"name=v1,v2"`` → ("name", ["v1", "v2"])."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name or not values.strip():
        raise GridError(f"--param {text!r}: expected NAME=V1,V2,… (e.g. num_workers=0,2,4)")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not vals:
        raise GridError(f"--param {text!r}: no values")
    if len(set(vals)) != len(vals):
        raise GridError(f"--param {text!r}: a value is repeated")
    return name, vals


def expand(params: list[tuple[str, list[str]]]) -> list[dict[str, str]]:
    """The Cartesian product, first parameter varying slowest; [{}] when there are no parameters."""
    names = [n for n, _ in params]
    if len(set(names)) != len(names):
        raise GridError("a --param name is given twice")
    return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in params))]


def config_label(config: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items()) or "as is"


@dataclass
class JobSpec:
    """What one configuration runs: the argv, the extra environment, and how each parameter got there."""

    command: list[str]
    env: dict[str, str]
    routes: dict[str, str]  # name → "command" | "knob" | "env"


def route(name: str, command: list[str]) -> str:
    placeholder = "{" + name + "}"
    if any(placeholder in arg for arg in command):
        return "command"
    if name in KNOBS:
        return "knob"
    if ENV_NAME.match(name):
        return "env"
    raise GridError(f"--param {name}: not a built-in knob ({', '.join(KNOBS)}), not {placeholder} in the command, "
                    "and not a valid environment variable name")


def job_spec(config: dict[str, str], command: list[str]) -> JobSpec:
    argv = list(command)
    env: dict[str, str] = {}
    routes: dict[str, str] = {}
    for name, value in config.items():
        how = route(name, command)
        routes[name] = how
        if how == "command":
            argv = [arg.replace("{" + name + "}", value) for arg in argv]
        elif how == "knob":
            knob = KNOBS[name]
            try:
                env[knob.env] = knob.normalize(value)
            except ValueError as exc:
                raise GridError(str(exc)) from None
        else:
            env[name] = value
    return JobSpec(command=argv, env=env, routes=routes)
