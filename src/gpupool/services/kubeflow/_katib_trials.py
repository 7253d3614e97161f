"""A Katib Experiment's ``trialTemplate`` as the job each trial runs: a gpupool job spec
whose strings hold ``${params.NAME}``.

Katib fills ``${trialParameters.NAME}`` in its ``trialSpec`` with the value of the parameter
that trial parameter refers to; gpupool fills ``${params.NAME}``, so each is rewritten to
that. A reference to the trial's own metadata (``${trialSpec.Kind}``, ``APIVersion``,
``Namespace``, ``Labels[key]``, ``Annotations[key]``) is the same for every trial and is
written in as it is; ``${trialSpec.Name}`` differs per trial and is refused (a trial reads
its number in GPUPOOL_TRIAL_ID).

The ``trialSpec`` is a ``batch/v1`` Job (its pod's one container, on one node) or a training
operator's job (PyTorchJob, TFJob, MPIJob, TrainJob), read as ``translate`` reads one into
the job it runs as; that job, less its name (each trial's job is named after the experiment
and the trial's number) and its team (the experiment's), is the trial.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpupool.errors import KubeflowNotSupported
from gpupool.services.kubeflow._assemble import Plan, assemble
from gpupool.services.kubeflow._fields import At
from gpupool.services.kubeflow._operators import mpi_job, pytorch_job, tf_job
from gpupool.services.kubeflow._pods import read_pod
from gpupool.services.kubeflow._policies import TTL, Policy, read_limits, read_metadata
from gpupool.services.kubeflow._ports import Lookups
from gpupool.services.kubeflow._trainer import Runtime, train_job

Runtimes = Mapping[tuple[str, str], Runtime]
TRIAL_PARAMETER = re.compile(r"\$\{trialParameters\.(.+?)\}")
META = re.compile(r"^\$\{trialSpec\.(.+?)\}$")
META_INDEXED = re.compile(r"^(Labels|Annotations)\[(.+)\]$")
BATCH_JOB = ("batch/v1", "Job")
OPERATOR_JOBS: Mapping[tuple[str, str], Callable[[At, Runtimes], Plan]] = {
    ("kubeflow.org/v1", "PyTorchJob"): lambda at, _runtimes: pytorch_job(at),
    ("kubeflow.org/v1", "TFJob"): lambda at, _runtimes: tf_job(at),
    ("kubeflow.org/v2beta1", "MPIJob"): lambda at, _runtimes: mpi_job(at),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): train_job,
}
TRIAL_KINDS = ", ".join(f"{v} {k}" for v, k in (BATCH_JOB, *OPERATOR_JOBS))
RETAIN = "gpupool keeps every trial's job, its record and its logs, whatever retain says"
POD_LABELS = "gpupool knows each trial's job and its first node: no pod labels pick them"
CONDITIONS = (
    "a trial succeeds when its job succeeds having reported the objective, and fails when "
    "its job fails or ends without reporting it"
)
CONFIG_MAP = (
    "gpupool reads no ConfigMaps: write the trial's job in trialTemplate.trialSpec "
    "(the ConfigMap's template, as it is)"
)
TRIAL_NAME = "each trial's job is named after the experiment and the trial's number"
TRIAL_HELD = "a trial's job starts when the experiment asks for it: it is not submitted held"


@dataclass(frozen=True)
class Trial:
    """The job each trial runs (a job spec's fields, ``${params.NAME}`` in its strings),
    the team the manifest names (None: none), and the parameters its template uses."""

    job: dict[str, Any]
    team: str | None
    used: frozenset[str]


@dataclass(frozen=True)
class Options:
    """How to read the trial: ``ignore_image`` (run on the nodes' own system), the file's
    Trainer ``runtimes``, and the experiment's namespace (for ``${trialSpec.Namespace}``)."""

    ignore_image: bool = False
    runtimes: Runtimes | None = None
    namespace: str | None = None


def read_trial(
    spec: At, names: Mapping[str, str], experiment: Policy, lookups: Lookups, options: Options
) -> Trial:
    """The trial of ``spec.trialTemplate``; ``names``: Katib's parameter names -> gpupool's;
    ``experiment``: the experiment's metadata (its queue label names the team too)."""
    template = spec.map("trialTemplate")
    if template is None:
        raise spec.invalid("trialTemplate", "the trial's template: trialSpec and trialParameters")
    _template_fields(template)
    trial, used = _filled_trial(template, names, options.namespace)
    plan = _plan(trial, options.runtimes)
    _check_primary(template, trial.value)
    plan = replace(plan, policy=replace(plan.policy, teams=experiment.teams + plan.policy.teams))
    # the fields assemble names are the manifest's own paths: given from its root
    body = assemble(plan, trial.fields.root(), lookups, options.ignore_image).model_dump(
        mode="json", exclude_unset=True
    )
    team = body.get("team")
    return Trial(_trial_job(body, trial), team, frozenset(used))


def _template_fields(template: At) -> None:
    if template.flag("retain"):
        template.fields.notice((*template.path, "retain"), RETAIN)
    template.ignore("primaryPodLabels", POD_LABELS)
    template.ignore("successCondition", CONDITIONS)
    template.ignore("failureCondition", CONDITIONS)
    template.refuse("configMap", KubeflowNotSupported, CONFIG_MAP)


# -- ${trialParameters.NAME} ------------------------------------------------------------------


def _filled_trial(
    template: At, names: Mapping[str, str], namespace: str | None
) -> tuple[At, set[str]]:
    """The trialSpec with gpupool's placeholders for Katib's, read at its own path; and the
    parameters it uses."""
    raw = template.value.get("trialSpec")
    if not isinstance(raw, dict):
        raise template.invalid("trialSpec", "the job each trial runs (a batch/v1 Job, ...)")
    replacements, used = _replacements(template, names, raw, namespace)
    filled = _filled(raw, replacements, template)
    return At(template.fields, (*template.path, "trialSpec"), filled), used


def _replacements(
    template: At, names: Mapping[str, str], trial_spec: dict[str, Any], namespace: str | None
) -> tuple[dict[str, str], set[str]]:
    """What each ``${trialParameters.NAME}`` becomes, and the parameters (gpupool's names)
    they refer to."""
    replacements: dict[str, str] = {}
    used: set[str] = set()
    written = {n for text in _strings(trial_spec) for n in TRIAL_PARAMETER.findall(text)}
    for item in template.maps("trialParameters"):
        name, reference = item.text("name"), item.text("reference")
        item.raw("description")
        if not name or not reference or "{" in name or "}" in name:
            raise item.invalid("name", "a name (no { or }) and a reference")
        if name in replacements:
            raise item.invalid("name", f"a name of its own: {name} is given twice")
        replacements[name] = _replacement(item, reference, names, trial_spec, namespace)
        used.update([names[reference]] if reference in names else [])
        if name not in written:
            item.fields.notice((*item.path, "name"), f"the trialSpec does not use {name}")
    return replacements, used


def _replacement(
    item: At, reference: str, names: Mapping[str, str], trial_spec: dict[str, Any], ns: str | None
) -> str:
    if reference in names:
        return "${params." + names[reference] + "}"
    meta = META.match(reference)
    if meta is None:
        known = ", ".join(names)
        raise item.invalid("reference", f"a parameter of spec.parameters ({known})")
    return _meta(item, meta.group(1), trial_spec, ns)


def _meta(item: At, key: str, trial_spec: dict[str, Any], namespace: str | None) -> str:
    """The trial's metadata that ``${trialSpec.KEY}`` names: the same for every trial."""
    metadata = trial_spec.get("metadata") if isinstance(trial_spec.get("metadata"), dict) else {}
    indexed = META_INDEXED.match(key)
    if indexed is not None:
        found = (metadata or {}).get(indexed.group(1).lower(), {}) or {}
        if indexed.group(2) not in found:
            raise item.invalid("reference", f"a key of the trialSpec's {indexed.group(1)}")
        return str(found[indexed.group(2)])
    static = {"Kind": "kind", "APIVersion": "apiVersion"}
    if key in static:
        return str(trial_spec.get(static[key], ""))
    if key == "Namespace":
        shown = f"its namespace as written, {namespace}" if namespace else "empty"
        item.fields.notice((*item.path, "reference"), f"gpupool has no namespaces: {shown}")
        return namespace or ""
    if key == "Name":
        raise item.error(
            "reference",
            KubeflowNotSupported,
            "${trialSpec.Name} is each trial's own: gpupool gives a trial its number in "
            "GPUPOOL_TRIAL_ID (and its parameters in GPUPOOL_PARAMS); read those instead",
        )
    raise item.invalid("reference", "a parameter, or ${trialSpec.Kind} (APIVersion, ...)")


def _filled(value: Any, replacements: Mapping[str, str], template: At) -> Any:
    """``value`` with each ``${trialParameters.NAME}`` replaced; KubeflowInvalid for one
    that no trial parameter names."""
    if isinstance(value, str):
        return TRIAL_PARAMETER.sub(lambda m: _one(m.group(1), replacements, template), value)
    if isinstance(value, dict):
        return {k: _filled(v, replacements, template) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, replacements, template) for v in value]
    return value


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict | list):
        for child in value.values() if isinstance(value, dict) else value:
            yield from _strings(child)


def _one(name: str, replacements: Mapping[str, str], template: At) -> str:
    if name not in replacements:
        raise template.invalid(
            "trialSpec", f"only ${{trialParameters.NAME}} of trialParameters: add {name} there"
        )
    return replacements[name]


# -- the trial's job --------------------------------------------------------------------------


def _plan(trial: At, runtimes: Runtimes | None) -> Plan:
    version, kind = trial.text("apiVersion"), trial.text("kind")
    if (version, kind) == BATCH_JOB:
        return _batch_job(trial)
    read = OPERATOR_JOBS.get((str(version), str(kind)))
    if read is None:
        raise trial.error(
            "kind",
            KubeflowNotSupported,
            f"a trial's job of kind {kind} ({version}) is not one gpupool runs: it takes "
            f"{TRIAL_KINDS}",
        )
    return read(trial, runtimes or {})


def _batch_job(trial: At) -> Plan:
    """A ``batch/v1`` Job: its pod's container, once, on one node."""
    policy = read_metadata(trial)
    spec = trial.map("spec")
    if spec is None:
        raise trial.invalid("spec", "the Job's spec, with its pod template")
    policy = read_limits(spec, policy)
    for key in ("completions", "parallelism"):
        count = spec.number(key)
        if count is not None and count != 1:
            raise spec.error(
                key,
                KubeflowNotSupported,
                f"a trial runs its pod once: leave {key} out (or 1)",
            )
    spec.ignore("ttlSecondsAfterFinished", TTL)
    template = spec.map("template")
    if template is None:
        raise spec.invalid("template", "the Job's pod template")
    return Plan(container=read_pod(template), nodes=1, framework=None, policy=policy)


def _check_primary(template: At, trial_spec: dict[str, Any]) -> None:
    """``primaryContainerName`` names the trial's container (the one each node runs)."""
    primary = template.text("primaryContainerName")
    names = sorted(set(_container_names(trial_spec)))
    if primary and primary not in names:
        raise template.invalid(
            "primaryContainerName", f"the name of the trial's container ({', '.join(names)})"
        )


def _container_names(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, child in value.items():
            if key == "containers" and isinstance(child, list):
                yield from (str(c.get("name")) for c in child if isinstance(c, dict))
            else:
                yield from _container_names(child)
    elif isinstance(value, list):
        for child in value:
            yield from _container_names(child)


def _trial_job(body: dict[str, Any], trial: At) -> dict[str, Any]:
    """The job's fields that a trial's template takes: not its name, team or hold."""
    if body.pop("name", None) is not None:
        trial.fields.note(f"{trial.where('metadata')}.name", TRIAL_NAME)
    if body.pop("hold", None):
        spec = trial.value.get("spec") or {}
        run = "runPolicy." if "suspend" in (spec.get("runPolicy") or {}) else ""
        trial.fields.note(f"{trial.where('spec')}.{run}suspend", TRIAL_HELD)
    body.pop("team", None)
    return body
