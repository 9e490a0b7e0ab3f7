"""One place per fact (issue #48): the names and defaults that npudure/config.py, the roles' defaults,
their argument specs, their vars and the config templates share are checked against each other, both
ways (a change on either side fails here). Static and fast: YAML and the templates' text, no Ansible.

- Policy names: config.POLICIES (from the config field's type), the scheduler's registry
  (npudure.scheduler.policies.POLICIES), the scheduler role's argument spec choices and its vars.
- Backend names: config.BACKENDS (from the config field's type), the backend classes' names and
  create_backend's dispatch, `npudure local --backend`, the agent role's argument spec choices and its
  vars; the wheelhouse's known extras are pyproject.toml's extras.
- Defaults: every config field a role's template writes from a role variable has the role's default
  equal to config.py's (after the template's own conversion: ``| int``, ``| float``, ``or none``).
  (tests/appliance/test_ansible_static.py checks defaults/main.yml against argument_specs.yml.)
"""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.cli import ROOT
from pydantic import BaseModel

from npudure import config

ROLES = ROOT / "roles"
# A line of a config template that writes a role variable to a config field: its indent, the field,
# the variable, and the filters after it (`x: {{ npudure_agent_x | int }}`, `{{ (v | float or none) }}`).
FIELD_LINE = re.compile(
    r"^(?P<indent> *)(?P<key>\w+): \{\{ \(*(?P<var>npudure_\w+)"
    r"(?P<filters>(?:\s*\|\s*\w+|\)|\s+or none)*)\s*\}\}\s*$"
)
SECTION_LINE = re.compile(r"^(?P<indent> *)(?P<key>\w+):\s*$")

# Where a role's default is not config.py's on purpose, and why.
DIFFERENT_ON_PURPOSE = {
    "npudure_agent_npu_cores": "0 = not written: the agent takes the SoC's NPU core count (config.py's 2 is "
    "its fallback when the SoC is not recognised)",
    "npudure_agent_admin_identities": "the deployed scheduler (CN npudure-scheduler) sets boards' serving "
    "state over mutual TLS; a bare agent config trusts the operator's certificate alone",
    "npudure_agent_input_size": "0 = not written: the agent reads the size from the model (config.py's "
    "None); an Ansible int cannot be None",
}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _options(role: str) -> dict[str, Any]:
    return _yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


def test_policy_names_are_the_same_everywhere() -> None:
    from npudure.scheduler.policies import POLICIES as REGISTRY

    in_roles = [
        tuple(_options("npudure_scheduler")["npudure_scheduler_policy"]["choices"]),
        tuple(_yaml(ROLES / "npudure_scheduler" / "vars" / "main.yml")["_npudure_scheduler_policies"]),
    ]
    assert tuple(REGISTRY) == config.POLICIES
    assert all(names == config.POLICIES for names in in_roles), (in_roles, config.POLICIES)
    default = _yaml(ROLES / "npudure_scheduler" / "defaults" / "main.yml")["npudure_scheduler_policy"]
    assert default == config.SchedulerConfig.model_fields["policy"].default


def test_backend_names_are_the_same_everywhere() -> None:
    from npudure_workshop.lab import local

    in_roles = [
        tuple(_options("npudure_agent")["npudure_agent_backend"]["choices"]),
        tuple(_yaml(ROLES / "npudure_agent" / "vars" / "main.yml")["_npudure_agent_backends"]),
    ]
    assert all(names == config.BACKENDS for names in in_roles), (in_roles, config.BACKENDS)
    assert tuple(local.BACKENDS) == config.BACKENDS
    # Each backend class names itself (read, not imported: onnx and rknn import their runtimes).
    named = {
        match[1]
        for backend in config.BACKENDS
        for match in re.finditer(
            r'^    name = "(\w+)"$', (ROOT / "npudure" / "backends" / f"{backend}.py").read_text(), re.M
        )
    }
    assert named == set(config.BACKENDS)
    dispatched = set(
        re.findall(r'config\.backend == "(\w+)"', (ROOT / "npudure/backends/__init__.py").read_text())
    )
    assert dispatched == set(config.BACKENDS)  # create_backend builds each, and no other


def test_the_wheelhouse_knows_the_package_extras() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    known = _yaml(ROLES / "npudure_wheelhouse" / "vars" / "main.yml")["_npudure_wheelhouse_known_extras"]
    assert sorted(known) == sorted(set(extras) - {"dev"})
    needing_an_extra = {b for b in config.BACKENDS if b in extras}  # the sim needs none
    assert needing_an_extra == {"onnx", "rknn"} and needing_an_extra <= set(known)


def _template_fields(template: Path) -> dict[str, tuple[str, str]]:
    """{config path (``sim.time_scale``): (role variable, its filters)} of ``template``."""
    found: dict[str, tuple[str, str]] = {}
    sections: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    for line in template.read_text().splitlines():
        if line.lstrip().startswith(("{%", "#", "- ")) or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        sections = [(i, k) for i, k in sections if i < indent]
        if section := SECTION_LINE.match(line):
            sections.append((indent, section["key"]))
        elif field := FIELD_LINE.match(line):
            path = ".".join([*(k for _, k in sections), field["key"]])
            found[path] = (field["var"], field["filters"])
    return found


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _config_default(model: type[BaseModel], path: str) -> Any:
    *sections, name = path.split(".")
    for section in sections:
        nested = _model_of(model.model_fields[section].annotation)
        assert nested is not None, f"{path}: {section} is not a section of {model.__name__}"
        model = nested
    assert name in model.model_fields, f"{path}: {model.__name__} has no field {name}"
    return model.model_fields[name].get_default(call_default_factory=True)


def _as_the_template_writes(value: Any, filters: str) -> Any:
    if "| int" in filters:
        value = int(value)
    elif "| float" in filters:
        value = float(value)
    elif "| bool" in filters:
        value = bool(value)
    if "or none" in filters and not value:
        value = None
    return value


CASES = [
    ("npudure_agent", "agent.yml.j2", config.AgentConfig),
    ("npudure_scheduler", "scheduler.yml.j2", config.SchedulerConfig),
]


@pytest.mark.parametrize(("role", "template", "model"), CASES, ids=[c[0] for c in CASES])
def test_role_defaults_are_the_config_defaults(role: str, template: str, model: type[BaseModel]) -> None:
    defaults = _yaml(ROLES / role / "defaults" / "main.yml")
    fields = _template_fields(ROLES / role / "templates" / template)
    assert len(fields) >= 15, sorted(fields)  # the template was read, not skipped
    compared, differ = 0, []
    for path, (var, filters) in fields.items():
        value = defaults.get(var)
        if value is None or (isinstance(value, str) and "{{" in value) or var in DIFFERENT_ON_PURPOSE:
            continue  # a role-internal variable, or a default computed per host
        want = _config_default(model, path)
        got = _as_the_template_writes(value, filters)
        compared += 1
        if got != want:
            differ.append(f"{path}: config.py {want!r}, {role}/defaults {var}: {value!r}")
    assert not differ, "defaults said twice differ (change both, or name it in DIFFERENT_ON_PURPOSE):\n" + (
        "\n".join(differ)
    )
    assert compared >= 10


@pytest.mark.parametrize(("role", "template", "model"), CASES, ids=[c[0] for c in CASES])
def test_the_listen_address_is_the_config_default(role: str, template: str, model: type[BaseModel]) -> None:
    defaults = _yaml(ROLES / role / "defaults" / "main.yml")
    text = (ROLES / role / "templates" / template).read_text()
    assert f"listen: {{{{ ({role}_listen_address ~ ':' ~ {role}_listen_port) | to_json }}}}" in text
    listen = f"{defaults[f'{role}_listen_address']}:{defaults[f'{role}_listen_port']}"
    assert listen == model.model_fields["listen"].default


def test_queue_limit_is_one_fact_per_side() -> None:
    """The issue's example: queue_limit's defaults, agent and scheduler, in config.py and the roles."""
    agent = _yaml(ROLES / "npudure_agent" / "defaults" / "main.yml")["npudure_agent_queue_limit"]
    scheduler = _yaml(ROLES / "npudure_scheduler" / "defaults" / "main.yml")["npudure_scheduler_queue_limit"]
    assert agent == config.AgentConfig.model_fields["queue_limit"].default
    assert scheduler == config.SchedulerConfig.model_fields["queue_limit"].default
    assert _options("npudure_agent")["npudure_agent_queue_limit"]["default"] == agent
    assert _options("npudure_scheduler")["npudure_scheduler_queue_limit"]["default"] == scheduler
