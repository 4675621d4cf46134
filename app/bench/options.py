"""``bench``'s options as the user gave them, checked before any run: a mistake is a one-line
usage error (exit 2) in a second, not a traceback after minutes of simulation."""

from __future__ import annotations

import inspect
import json
import math
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from agentconsole.bench.runner import ALL_AT_ONCE, arrival_rate
from agentconsole.export import check_output
from agentconsole.sample_traces.format import TraceProgram
from agentconsole.sample_traces.generator import WORKLOADS
from agentconsole.scheduler.fairness import MAX_TENANT_WEIGHT
from agentconsole.server.runtime.sim.profile import Profile, load_profile


def check_outputs(opts: dict[str, Any]) -> None:
    """Refuse an output file that could not be written before any run, not after them all,
    and one file named for both (the page would overwrite the JSON)."""
    for option, path in (("--json", opts["json_path"]), ("--html", opts["html_path"])):
        if path is not None:
            check_output(path, option)
    json_path, html_path = opts["json_path"], opts["html_path"]
    same = json_path is not None and html_path is not None
    if same and Path(json_path).resolve() == Path(html_path).resolve():
        raise click.UsageError("--json and --html name one file: the page would overwrite it")


def settle_hardware(opts: dict[str, Any]) -> None:
    """Refuse hardware options the run would ignore (``--replicas``, ``--model`` and ``--tp``
    beside ``--models``, whose pools name their own models, replicas and tp); with
    ``--profile``, take its GPU, model and tp as the run's, so the title and the JSON setup
    name what the costs are of."""
    if opts["models"] and opts["replicas"] > 1:
        where = " in --models" if defaulted("models") else ""
        raise click.UsageError(
            f"--replicas is one model's; give each model of {_models_named(opts)} its"
            f" replicas as NAME:xR{where}"
        )
    ignored = [f"--{name}" for name in ("model", "tp") if not defaulted(name)]
    if opts["models"] and ignored:
        raise click.UsageError(
            f"{' and '.join(ignored)} {'name' if len(ignored) > 1 else 'names'} one model;"
            f" {_models_named(opts)} names its own"
            " models and each one's tp (NAME:tpN): drop " + ", ".join(ignored)
        )
    profile = _profile(opts)
    if profile is not None:
        opts.update(gpu=profile.gpu, model=profile.model, tp=profile.tp)


def _profile(opts: dict[str, Any]) -> Profile | None:
    """The ``--profile`` to cost the runs with (None without one), read once here so a bad
    one is a usage error before any run; refused beside the options it would silently
    override (``--gpu/--model/--tp``) or that ignore it (``--models``, priced per model)."""
    path = opts["profile"]
    if path is None:
        return None
    overridden = [f"--{name}" for name in ("gpu", "model", "tp") if not defaulted(name)]
    if overridden:
        raise click.UsageError(
            f"--profile names the GPU, model and tp it measured; drop {', '.join(overridden)}"
        )
    if opts["models"]:
        raise click.UsageError(
            f"--profile costs one model; {_models_named(opts)} costs each of its own"
        )
    try:
        return load_profile(path)
    except KeyError as error:  # an unknown bundled name, or a field the file lacks
        reason = f"{path} has no field {error}" if path.endswith(".json") else error.args[0]
    except OSError as error:  # a missing or unreadable file
        reason = f"cannot read {path}: {error.strerror or error}"
    except (ValueError, TypeError) as error:  # not JSON, another format, an unknown field
        reason = f"{path}: {error}"
    raise click.BadParameter(str(reason), param_hint="--profile")


def _models_named(opts: dict[str, Any]) -> str:
    """The run's models as a message names them: by the option the user gave, or, when the
    workload filled them in, by that workload, so a refusal does not cite an option the user
    never typed (``command.WORKLOAD_POOLS`` fills ``--models`` in before the checks)."""
    if defaulted("models"):
        return f"the {opts['workload']} workload's pool ({opts['models']})"
    return f"--models ({opts['models']})"


def check_trace(programs: list[TraceProgram], opts: dict[str, Any]) -> None:
    """Refuse a trace with no programs, and the options that scale a trace's arrival rate
    (``--rate``, ``--sweep``, ``--loads``) on one whose programs all arrive at once."""
    if not programs:
        raise click.UsageError(f"the trace {opts['trace_path']} has no programs")
    scaling = [
        option
        for option, given in (
            ("--rate", opts["rate"] is not None),
            ("--sweep", opts["sweep"]),
            ("--loads", opts["loads"] is not None),
        )
        if given
    ]
    if scaling and math.isinf(arrival_rate(programs)):
        count = "one program" if len(programs) == 1 else f"{len(programs)} programs"
        raise click.UsageError(f"{'/'.join(scaling)}: {ALL_AT_ONCE} ({count})")


def parse_loads(text: str) -> list[float]:
    """``--loads``, checked before any run: positive, finite multiples of the peak."""
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected numbers, got {text!r}", param_hint="--loads") from None
    if not loads or not all(math.isfinite(x) and x > 0 for x in loads):
        raise click.BadParameter("loads must be positive multiples", param_hint="--loads")
    return loads


def defaulted(option: str) -> bool:
    """Whether the running command took ``option`` from its default (not from the user)."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source(option) if ctx is not None else None
    return source in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def workload_params(texts: tuple[str, ...], workload: str | None) -> tuple[tuple[str, Any], ...]:
    """``--set`` pairs, each value checked against the type ``workload`` declares for it (a
    wrong one would fail deep in the generator); an unknown workload or parameter is left to
    ``generate``, which names the choices."""
    if texts and workload is None:
        raise click.UsageError("--set changes a named workload; a --trace replays as recorded")
    params = tuple(_param(text) for text in texts)
    declared = _declared_types(workload)
    for key, value in params:
        if key in declared and not _fits(value, declared[key]):
            raise click.BadParameter(
                f"{key} takes {_type_name(declared[key])}, got {value!r}", param_hint="--set"
            )
    return params


def _declared_types(workload: str | None) -> dict[str, Any]:
    """The workload's keyword parameters and their annotated types (none for a trace)."""
    if workload not in WORKLOADS:
        return {}
    signature = inspect.signature(WORKLOADS[workload].build, eval_str=True)
    return {n: p.annotation for n, p in signature.parameters.items() if p.kind is p.KEYWORD_ONLY}


def _fits(value: Any, annotation: Any) -> bool:
    """Whether a JSON value suits a parameter's annotation: int, float (an int too), str,
    bool, ``X | None`` and sequences of those; any other annotation is left to the workload."""
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        return any(_fits(value, arm) for arm in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation in (int, float) and isinstance(value, bool):  # JSON true is no number
        return False
    if annotation is float:
        return isinstance(value, int | float)
    origin = typing.get_origin(annotation)
    if isinstance(origin, type) and issubclass(origin, Sequence) and origin is not str:
        items = typing.get_args(annotation)
        return isinstance(value, list) and (not items or all(_fits(v, items[0]) for v in value))
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def _type_name(annotation: Any) -> str:
    """``float``, ``str | None``, ``Sequence[float]``: an annotation as a user reads it."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("collections.abc.", "").replace("NoneType", "None")


def tenant_weights(texts: Sequence[str]) -> tuple[tuple[str, float], ...]:
    """``TENANT=WEIGHT`` texts as (tenant, weight) pairs, each weight above 0 and at most
    :data:`MAX_TENANT_WEIGHT` (as serve's ``limits.tenant_weights`` takes it); the last one
    given for a tenant counts."""
    weights: dict[str, float] = {}
    for text in texts:
        tenant, sep, raw = text.partition("=")
        try:
            weight = float(raw)
        except ValueError:
            weight = math.nan
        if not sep or not tenant or not 0 < weight <= MAX_TENANT_WEIGHT:  # NaN fails too
            raise click.BadParameter(
                f"expected TENANT=WEIGHT with 0 < weight <= {MAX_TENANT_WEIGHT:g}, got {text!r}",
                param_hint="--tenant-weight",
            )
        weights[tenant] = weight
    return tuple(weights.items())


def _param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint="--set")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def names_of(text: str, known: list[str], what: str) -> list[str]:
    names = known if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown {what} {', '.join(unknown) or '(none)'}; choose from {', '.join(known)}"
        )
    return names
