"""The appliance without boards: playbook syntax, ansible-lint, role argument specs against defaults,
config templates against the agent's and scheduler's own config loader, and the wheelhouse script.

Needs ansible-core and ansible-lint from the dev extras (in .venv); no root, no network.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.ansible import BIN, BOARDS_AND_SCHEDULER, ROOT, local_env, recap, render, run_local_play
from helpers.role_scripts import load_role_script

from npudure import config

ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "defaults" / "main.yml").is_file())
PLAYBOOKS = sorted((ROOT / "playbooks").glob("*.yml")) + sorted(
    p for p in (ROOT / "molecule" / "default").glob("*.yml") if p.name != "molecule.yml"
)
EXAMPLE_INVENTORY = ROOT / "inventory" / "example" / "hosts.yml"

pytestmark = pytest.mark.skipif(
    not (BIN / "ansible-playbook").exists(), reason="ansible-core is not installed (pip install -e '.[dev]')"
)


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


# ---------------------------------------------------------------- playbooks


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_playbook_syntax(playbook: Path) -> None:
    done = subprocess.run(
        [BIN / "ansible-playbook", "-i", EXAMPLE_INVENTORY, "--syntax-check", playbook],
        cwd=ROOT,
        env=local_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(not (BIN / "ansible-lint").exists(), reason="ansible-lint is not installed")
def test_ansible_lint_production_profile() -> None:
    done = subprocess.run(
        [BIN / "ansible-lint", "--nocolor", "roles/", "playbooks/"],
        cwd=ROOT,
        env=local_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Profile 'production' was required, and it passed" in output, output


# ---------------------------------------------------------------- roles


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_match_argument_specs(role: Path) -> None:
    defaults = _yaml(role / "defaults" / "main.yml")
    options = _yaml(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options), (
        f"{role.name}: only in defaults {sorted(set(defaults) - set(options))}, "
        f"only in argument_specs {sorted(set(options) - set(defaults))}"
    )
    for name, spec in options.items():
        assert name.startswith(role.name + "_"), f"{name} is not prefixed with the role name"
        assert spec.get("description"), f"{role.name}: {name} has no description"
        assert "type" in spec, f"{role.name}: {name} has no type"
        assert spec.get("default") == defaults[name], f"{role.name}: {name} default differs from defaults"
        value = defaults[name]
        if "choices" in spec and not (isinstance(value, str) and "{{" in value):
            values = value if isinstance(value, list) else [value]
            assert set(values) <= set(spec["choices"]), f"{role.name}: {name} default not in its choices"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_layout(role: Path) -> None:
    for part in ("tasks/main.yml", "meta/main.yml", "meta/argument_specs.yml", "vars/main.yml"):
        assert (role / part).is_file(), f"{role.name} lacks {part}"
    for template in (role / "templates").glob("*.j2") if (role / "templates").is_dir() else []:
        lines = template.read_text().splitlines()
        first = lines[1] if lines[0].startswith("#!") else lines[0]  # a script keeps its shebang first
        assert first == "{{ ansible_managed | comment }}", f"{template}: first line must be ansible_managed"
    # Registered temporaries are __<role>_*, computed values _<role>_*.
    for tasks in (role / "tasks").glob("*.yml"):
        for line in tasks.read_text().splitlines():
            if line.strip().startswith("register:"):
                name = line.split(":", 1)[1].strip()
                assert name.startswith(f"__{role.name}_"), f"{tasks}: register {name} is not __{role.name}_*"
    for name in _yaml(role / "vars" / "main.yml"):
        assert name.startswith(f"_{role.name}_"), f"{role.name}/vars/main.yml: {name} is not _{role.name}_*"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_variable_is_documented_once_and_renders_with_ansible_doc(role: Path) -> None:
    """The argument specs are the one place: each option has a description, and ansible-doc shows it."""
    options = _yaml(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    undocumented = [name for name, spec in options.items() if not spec.get("description")]
    assert not undocumented, f"{role.name}: no description for {undocumented}"
    done = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "role", "-r", str(ROOT / "roles"), "--json", role.name],
        capture_output=True,
        text=True,
        timeout=120,
        env=local_env(),
    )
    assert done.returncode == 0, done.stderr
    rendered = json.loads(done.stdout)[role.name]["entry_points"]["main"]["options"]
    assert set(rendered) == set(options)


def test_example_inventory_has_three_boards_and_a_scheduler() -> None:
    inventory = _yaml(EXAMPLE_INVENTORY)["all"]["children"]
    assert len(inventory["boards"]["hosts"]) == 3 and len(inventory["scheduler"]["hosts"]) == 1
    group_vars = EXAMPLE_INVENTORY.parent / "group_vars"
    for path in group_vars.glob("*.yml"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line and not line.startswith((" ", "#", "-")):
                name = line.split(":")[0]
                assert lines[i - 1].startswith("#"), f"{path.name}: {name} has no comment above it"


def test_unit_templates_come_from_systemd_folder() -> None:
    """systemd/ holds the canonical unit templates; the roles link to them rather than copy them."""
    links = {
        "npudure_agent/templates/npudure-agent.service.j2": "npudure-agent.service.j2",
        "npudure_agent/templates/10-affinity.conf.j2": "npudure-agent.service.d/10-affinity.conf.j2",
        "npudure_scheduler/templates/npudure-scheduler.service.j2": "npudure-scheduler.service.j2",
        "npudure_irq_affinity/templates/npudure-irq-affinity.service.j2": "npudure-irq-affinity.service.j2",
    }
    for link, target in links.items():
        path = ROOT / "roles" / link
        assert path.is_symlink(), f"{link} should be a link into systemd/"
        assert path.resolve() == (ROOT / "systemd" / target).resolve()
        readme = (ROOT / "systemd" / "README.md").read_text()
        assert target in readme, f"systemd/README.md does not document {target}"


def _options(role: str) -> dict:
    return _yaml(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


def test_choices_match_the_config_loader() -> None:
    """The roles' backend and policy lists are the ones the Python config loader accepts."""
    agent_vars = _yaml(ROOT / "roles/npudure_agent/vars/main.yml")
    scheduler_vars = _yaml(ROOT / "roles/npudure_scheduler/vars/main.yml")
    assert tuple(_options("npudure_agent")["npudure_agent_backend"]["choices"]) == config.BACKENDS
    assert tuple(agent_vars["_npudure_agent_backends"]) == config.BACKENDS
    assert tuple(_options("npudure_scheduler")["npudure_scheduler_policy"]["choices"]) == config.POLICIES
    assert tuple(scheduler_vars["_npudure_scheduler_policies"]) == config.POLICIES


# ---------------------------------------------------------------- templates rendered by Ansible


def test_agent_templates_render_a_config_the_agent_accepts(tmp_path: Path) -> None:
    out = render(
        tmp_path,
        "npudure_agent",
        "boards",
        ["agent.yml.j2", "npudure-agent.service.j2"],
        {"npudure_backend": "rknn", "npudure_agent_sim_cpu_cap_mhz": 1200},
    )
    agent = config.parse(config.AgentConfig, yaml.safe_load((out / "board1-agent.yml").read_text()), "board1")
    assert agent.node_name == "board1" and agent.backend == "rknn" and agent.listen == "0.0.0.0:50051"
    assert agent.sim.cpu_cap_mhz == 1200
    other = config.parse(config.AgentConfig, yaml.safe_load((out / "board2-agent.yml").read_text()), "board2")
    assert agent.sim.seed != other.sim.seed, "boards should not share a jitter seed"
    unit = (out / "board1-npudure-agent.service").read_text()
    for line in (
        "Restart=on-failure",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "DevicePolicy=closed",
        "DeviceAllow=/dev/rknpu rw",
        "DeviceAllow=char-drm rw",
        "ExecStart=/opt/npudure/venv/bin/npudure agent --config /etc/npudure/agent.yml",
        "LoadCredential=admin-token:/etc/npudure/admin-token",
    ):
        assert line in unit.splitlines(), f"{line!r} missing from the agent unit"
    assert unit.startswith("#")
    # The service reads systemd's copy of the root-only token file.
    assert agent.admin.token_file == "${CREDENTIALS_DIRECTORY}/admin-token"


def test_the_agent_config_takes_the_boards_input_size_for_a_user_model(tmp_path: Path) -> None:
    extra = {
        "npudure_backend": "onnx",
        "npudure_agent_model_src": "/models/best.onnx",
        "npudure_agent_input_size": 320,
    }
    out = render(tmp_path, "npudure_agent", "boards", ["agent.yml.j2"], extra)
    agent = config.parse(config.AgentConfig, yaml.safe_load((out / "board1-agent.yml").read_text()), "board1")
    assert agent.input_size == 320 and agent.model == "/var/lib/npudure/models/best.onnx"
    (tmp_path / "plain").mkdir()
    plain = render(
        tmp_path / "plain",
        "npudure_agent",
        "boards",
        ["agent.yml.j2"],
        {**extra, "npudure_agent_input_size": 0},
    )
    assert "input_size" not in (plain / "board1-agent.yml").read_text()  # the model's own size


def test_a_sim_board_serves_a_users_model_under_its_size_and_names(tmp_path: Path) -> None:
    """npudure model check's reading of a repository model's file (registered by the preflight) goes into
    a sim board's config, so the emulated board answers with that model's size and names."""
    read = {"path": "/m/user.onnx", "input_size": 320, "classes": 3, "names": ["cat", "dog", "plate"]}
    extra = {
        "npudure_backend": "sim",
        "npudure_models": [{"name": "yolov8n", "default": True}, {"name": "plates", "src": "/m/user.onnx"}],
        "__npudure_agent_model_check": {
            "results": [{"rc": 0, "item": {"name": "plates"}, "stdout": json.dumps(read)}]
        },
    }
    out = render(tmp_path, "npudure_agent", "boards", ["agent.yml.j2"], extra)
    agent = config.parse(config.AgentConfig, yaml.safe_load((out / "board1-agent.yml").read_text()), "board1")
    assert agent.models is not None
    plates = next(m for m in agent.models if m.name == "plates")
    assert (plates.input_size, plates.class_names) == (320, ["cat", "dog", "plate"])
    default = next(m for m in agent.models if m.name == "yolov8n")
    assert default.input_size is None and default.class_names is None


def test_scheduler_templates_render_the_boards_of_the_inventory(tmp_path: Path) -> None:
    out = render(
        tmp_path,
        "npudure_scheduler",
        "scheduler",
        ["scheduler.yml.j2", "npudure-scheduler.service.j2"],
        {"npudure_scheduler_policy": "p2c", "npudure_scheduler_thermal_limit_c": 0},
    )
    rendered = yaml.safe_load((out / "sched-scheduler.yml").read_text())
    sched = config.parse(config.SchedulerConfig, rendered, "sched-scheduler.yml")
    boards = [(b.name, b.address) for b in sched.boards]
    assert boards == [("board1", "10.0.0.11:50051"), ("board2", "board2:50051")]
    assert sched.policy == "p2c" and sched.thermal_limit_c is None
    unit = (out / "sched-npudure-scheduler.service").read_text().splitlines()
    assert "ProtectSystem=strict" in unit and "Restart=on-failure" in unit
    # The token: root's file copied as root (+) into the service's RuntimeDirectory at the start and
    # again by every reload (renamed into place), so a rotation reaches the running scheduler.
    assert "LoadCredential=admin-token:/etc/npudure/admin-token" not in unit
    assert "RuntimeDirectory=npudure-scheduler" in unit and "RuntimeDirectoryMode=0700" in unit
    copy = (
        "/usr/bin/install -m 0600 -o npudure -g npudure -T /etc/npudure/admin-token /run/npudure-scheduler/"
    )
    assert f"ExecStartPre=+{copy}admin-token" in unit
    reload = [line for line in unit if line.startswith("ExecReload=")]
    run = "/run/npudure-scheduler"
    assert reload == [
        f"ExecReload=+{copy}.admin-token.new",
        f"ExecReload=+/bin/mv -f -T {run}/.admin-token.new {run}/admin-token",
        "ExecReload=+/opt/npudure/venv/bin/npudure scheduler --config /etc/npudure/scheduler.yml --reload",
    ]
    assert sched.admin.token_file == "/run/npudure-scheduler/admin-token"


# ---------------------------------------------------------------- the wheelhouse script


def test_wheelhouse_platform_tags_cover_older_glibc() -> None:
    wh = load_role_script("npudure_wheelhouse", "build_wheelhouse")
    tags = wh.platform_tags("aarch64", "2.36")
    assert tags[0] == "manylinux_2_36_aarch64" and "manylinux_2_17_aarch64" in tags
    assert tags[-1] == "manylinux2014_aarch64" and len(tags) == 36 - 17 + 2
    with pytest.raises(ValueError, match="glibc"):
        wh.platform_tags("x86_64", "")
    assert wh.parse_target("x86_64:2.36:3.11") == ("x86_64", "2.36", "3.11")
    with pytest.raises(ValueError, match="MACHINE:GLIBC:PYTHON"):
        wh.parse_target("x86_64:3.11")


def test_wheelhouse_cache_keys(tmp_path: Path) -> None:
    wh = load_role_script("npudure_wheelhouse", "build_wheelhouse")
    project = tmp_path / "project"
    shutil.copytree(ROOT / "npudure" / "proto", project / "npudure" / "proto")
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    digest = wh.source_digest(project)
    (project / "npudure" / "proto" / "__pycache__").mkdir(exist_ok=True)
    (project / "npudure" / "proto" / "__pycache__" / "junk.pyc").write_bytes(b"x")
    assert wh.source_digest(project) == digest, "bytecode must not count as a source change"
    (project / "npudure" / "proto" / "inference.proto").write_text("changed")
    assert wh.source_digest(project) != digest
    key = wh.dependency_key(project, ["x86_64:2.36:3.11"], [], [])
    assert wh.dependency_key(project, ["x86_64:2.36:3.11"], [], []) == key
    assert wh.dependency_key(project, ["aarch64:2.36:3.11"], [], []) != key
    assert wh.dependency_key(project, ["x86_64:2.36:3.11"], ["onnx"], []) != key


def test_the_workshop_wheel_is_built_only_for_the_extras_that_bring_it(tmp_path: Path) -> None:
    wh = load_role_script("npudure_wheelhouse", "build_wheelhouse")
    assert wh.workshop_extras(ROOT) == ["bench", "controller"]
    project = tmp_path / "project"
    shutil.copytree(ROOT / "npudure" / "proto", project / "npudure" / "proto")
    (project / "workshop" / "npudure_workshop").mkdir(parents=True)
    (project / "workshop" / "npudure_workshop" / "__init__.py").write_text("")
    (project / "workshop" / "pyproject.toml").write_text("[project]\nname = 'w'\n")
    (project / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n[project.optional-dependencies]\ncontroller = ['npudure_workshop']\n"
    )
    assert wh.workshop_extras(project) == ["controller"]
    runtime, both = wh.source_digest(project), wh.source_digest(project, workshop=True)
    (project / "workshop" / "npudure_workshop" / "__init__.py").write_text("X = 1\n")
    assert wh.source_digest(project) == runtime, "a board's wheelhouse does not rebuild for the workshop"
    assert wh.source_digest(project, workshop=True) != both
    board_key = wh.dependency_key(project, ["x86_64:2.36:3.11"], ["onnx"], [])
    (project / "workshop" / "pyproject.toml").write_text("[project]\nname = 'w2'\n")
    assert wh.dependency_key(project, ["x86_64:2.36:3.11"], ["onnx"], []) == board_key
    controller_key = wh.dependency_key(project, ["x86_64:2.36:3.11"], ["controller"], [])
    (project / "workshop" / "pyproject.toml").write_text("[project]\nname = 'w3'\n")
    assert wh.dependency_key(project, ["x86_64:2.36:3.11"], ["controller"], []) != controller_key


@pytest.mark.parametrize(
    ("extras", "build"),
    [([], "build npudure wheel"), (["--extra", "controller"], "build npudure and workshop wheels")],
)
def test_wheelhouse_check_mode_builds_nothing(tmp_path: Path, extras: list[str], build: str) -> None:
    cache = tmp_path / "cache"
    done = subprocess.run(
        [
            sys.executable,
            ROOT / "roles/npudure_wheelhouse/files/build_wheelhouse.py",
            "--project",
            ROOT,
            "--cache",
            cache,
            "--target",
            "x86_64:2.36:3.11",
            *extras,
            "--check",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["changed"] is True
    assert result["actions"] == [build, "download dependencies"]
    assert result["workshop_extras"] == ["bench", "controller"] and result["workshop_wheel"] == ""
    assert not any(cache.rglob("*.whl"))


def test_agent_config_carries_the_converted_models_names_and_size(tmp_path: Path) -> None:
    """The converter's .rknn.json (read by the rknn_runtime role) puts class names and input size into
    the agent's config, where the rknn backend takes them (the .rknn itself holds neither)."""
    import base64

    record = {"names": ["forklift", "pallet"], "input_size": 320, "num_classes": 2}
    out = render(
        tmp_path,
        "npudure_agent",
        "boards",
        ["agent.yml.j2"],
        {
            "npudure_backend": "rknn",
            "__npudure_rknn_runtime_model_record": {
                "content": base64.b64encode(json.dumps(record).encode()).decode()
            },
        },
    )
    agent = config.parse(config.AgentConfig, yaml.safe_load((out / "board1-agent.yml").read_text()), "board1")
    assert agent.class_names == ["forklift", "pallet"] and agent.input_size == 320
    (tmp_path / "plain").mkdir()
    plain = render(
        tmp_path / "plain", "npudure_agent", "boards", ["agent.yml.j2"], {"npudure_backend": "sim"}
    )
    agent = config.parse(
        config.AgentConfig, yaml.safe_load((plain / "board1-agent.yml").read_text()), "board1"
    )
    assert agent.class_names is None and agent.input_size is None


def test_agent_contexts_and_core_mask_reach_the_config(tmp_path: Path) -> None:
    """npudure_agent_contexts / _core_mask: auto by default, a number and a mask as written."""
    out = render(tmp_path, "npudure_agent", "boards", ["agent.yml.j2"], {"npudure_backend": "rknn"})
    agent = config.parse(config.AgentConfig, yaml.safe_load((out / "board1-agent.yml").read_text()), "board1")
    assert (agent.contexts, agent.core_mask) == ("auto", "auto")
    (tmp_path / "set").mkdir()
    extra = {"npudure_backend": "rknn", "npudure_agent_contexts": "12", "npudure_agent_core_mask": "per_core"}
    out = render(tmp_path / "set", "npudure_agent", "boards", ["agent.yml.j2"], extra)
    agent = config.parse(config.AgentConfig, yaml.safe_load((out / "board1-agent.yml").read_text()), "board1")
    assert (agent.contexts, agent.core_mask) == (12, "per_core")


def test_the_agent_preflight_refuses_contexts_out_of_range_naming_them(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yml"
    boards = {
        "good": {"npudure_agent_contexts": 64},
        "auto": {},
        "zero": {"npudure_agent_contexts": 0},
        "many": {"npudure_agent_contexts": "many"},
        "mask": {"npudure_agent_core_mask": "core0"},
    }
    hosts.write_text(
        yaml.safe_dump(
            {"all": {"vars": {"ansible_connection": "local"}, "children": {"boards": {"hosts": boards}}}}
        )
    )
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "boards",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "ansible.builtin.include_role": {
                                "name": "npudure_agent",
                                "tasks_from": "preflight.yml",
                            }
                        }
                    ],
                }
            ]
        )
    )
    done = run_local_play(tmp_path, hosts, playbook, {"npudure_backend": "sim"})
    output = done.stdout + done.stderr
    failed = {host for host, counters in recap(output).items() if counters.get("failed")}
    assert failed == {"zero", "many", "mask"}, output
    assert "contexts 0 (1-64 or auto)" in output and "contexts many (1-64 or auto)" in output
    assert "core_mask core0 (auto, per_core, all)" in output


def test_the_scheduler_is_handed_over_first_and_restarted_only_when_that_cannot_work() -> None:
    handlers = yaml.safe_load((ROOT / "roles/npudure_scheduler/handlers/main.yml").read_text())
    by_name = {h["name"]: h for h in handlers}
    names = list(by_name)
    handover, restart = by_name["Hand over npudure-scheduler"], by_name["Restart npudure-scheduler"]
    assert names.index("Hand over npudure-scheduler") < names.index("Restart npudure-scheduler")
    # Notified together, always: the restart reads what the handover registered.
    assert handover["listen"] == restart["listen"]
    assert handover["ansible.builtin.command"]["argv"][1:] == [
        "scheduler",
        "--config",
        "{{ _npudure_scheduler_config }}",
        "--handover",
    ]
    assert "__npudure_scheduler_unit is not changed" in handover["when"]
    assert "rc not in [0, 3]" in handover["failed_when"]
    assert "__npudure_scheduler_unit is changed" in restart["when"][-1]
    assert "rc == 3" in restart["when"][-1]
    # A new admin token alone (a rotation) neither restarts nor hands over: a reload gives it to the
    # running scheduler, first, so a handover in the same run starts its successor with the new copy.
    token = by_name["Give npudure-scheduler its new admin token"]
    assert names.index("Give npudure-scheduler its new admin token") < names.index(
        "Hand over npudure-scheduler"
    )
    assert token["listen"] == "npudure scheduler token changed"
    assert token["ansible.builtin.systemd_service"]["state"] == "reloaded"
    assert "__npudure_scheduler_token is changed" in token["when"]
    assert "__npudure_scheduler_unit is not changed" in token["when"]
    assert token["listen"] not in handover["listen"]
    assert not any("__npudure_scheduler_token" in w for w in handover["when"] + restart["when"])
    reload = by_name["Reload npudure-scheduler"]
    assert any("__npudure_scheduler_token_reloaded is skipped" in w for w in reload["when"])
    tasks = yaml.safe_load((ROOT / "roles/npudure_scheduler/tasks/configure.yml").read_text())
    install = next(t for t in tasks if t["name"] == "Install the admin token")
    assert install["notify"] == "npudure scheduler token changed"
    assert (
        install["ansible.builtin.copy"]["mode"] == "0600"
        and install["ansible.builtin.copy"]["owner"] == "root"
    )
    topics = {t["notify"] for t in tasks if "notify" in t}
    for topic in topics - {"Reload npudure-scheduler", "npudure scheduler token changed"}:
        assert topic in handover["listen"], topic


def _make_admin_token(tmp_path: Path, controller: Path, on_host: Path) -> subprocess.CompletedProcess[str]:
    """npudure_common's admin_token.yml on local hosts, as site.yml's first run on a new controller."""
    hosts = tmp_path / "hosts.yml"
    # The hosts run modules with this Python (the stat of the token "on the host" is a module run).
    local = {
        **BOARDS_AND_SCHEDULER,
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
    }
    hosts.write_text(yaml.safe_dump({"all": local}))
    play = {
        "hosts": "boards",
        "gather_facts": False,
        "vars_files": [
            str(ROOT / "roles/npudure_common" / part / "main.yml") for part in ("defaults", "vars")
        ],
        "tasks": [
            {"ansible.builtin.include_tasks": str(ROOT / "roles/npudure_common/tasks/admin_token.yml")}
        ],
    }
    playbook = tmp_path / "token.yml"
    playbook.write_text(yaml.safe_dump([play]))
    extra = {
        "npudure_common_admin_token_controller": str(controller),
        "npudure_common_admin_token_host": str(on_host),
        "npudure_common_admin_token_legacy": str(tmp_path / "no-legacy-token"),
    }
    return run_local_play(tmp_path, hosts, playbook, extra)


def test_a_new_controller_makes_the_admin_token_and_refuses_when_the_hosts_hold_one(tmp_path: Path) -> None:
    # A fresh controller and fresh hosts: the token is made (no host holds one, and the refusal's
    # message, which ansible-core renders even when the assertion holds, must not fail on that).
    controller, on_host = tmp_path / "secrets" / "admin-token", tmp_path / "host-admin-token"
    first = _make_admin_token(tmp_path, controller, on_host)
    assert first.returncode == 0, first.stdout + first.stderr
    assert len(controller.read_text().strip()) == 48 and controller.stat().st_mode & 0o077 == 0
    # The controller lost it while the hosts (all local here) hold one: refused, with where it lives.
    on_host.write_text(controller.read_text())
    controller.unlink()
    second = _make_admin_token(tmp_path, controller, on_host)
    flat = " ".join((second.stdout + second.stderr).split())
    assert second.returncode != 0 and "already hold an admin token" in flat, flat[-3000:]
    # Every local host holds it here; the fix names one, by its address where it has one.
    assert re.search(rf"scp root@(10\.0\.0\.11|board2|sched):{on_host} {controller}", flat), flat[-3000:]
    assert not controller.exists()


def test_the_model_repository_reaches_each_boards_agent_and_the_scheduler(tmp_path: Path) -> None:
    """npudure_models (#47): each board's agent config lists the models placed on it, its default first;
    the scheduler's config lists them per board, so routing by model needs no first report."""
    repository = [
        {"name": "general", "src": "/models/general.onnx"},
        {"name": "plates", "src": "/models/best.onnx", "boards": ["board2"], "contexts": 4},
    ]
    extra = {"npudure_backend": "onnx", "npudure_models": repository}
    out = render(tmp_path, "npudure_agent", "boards", ["agent.yml.j2"], extra)
    one = config.parse(config.AgentConfig, yaml.safe_load((out / "board1-agent.yml").read_text()), "board1")
    two = config.parse(config.AgentConfig, yaml.safe_load((out / "board2-agent.yml").read_text()), "board2")
    assert [(m.name, m.default, m.model) for m in one.models or []] == [
        ("general", True, "/var/lib/npudure/models/general.onnx")
    ]
    assert [(m.name, m.model, m.contexts) for m in two.models or []] == [
        ("general", "/var/lib/npudure/models/general.onnx", None),
        ("plates", "/var/lib/npudure/models/plates.onnx", 4),  # its own name: two best.onnx stay apart
    ]
    assert one.model is None  # the single-model variables stand aside
    (tmp_path / "sched").mkdir()
    out = render(tmp_path / "sched", "npudure_scheduler", "scheduler", ["scheduler.yml.j2"], extra)
    sched = config.parse(
        config.SchedulerConfig, yaml.safe_load((out / "sched-scheduler.yml").read_text()), "s"
    )
    assert [(b.name, b.models) for b in sched.boards] == [
        ("board1", ["general"]),
        ("board2", ["general", "plates"]),
    ]


def test_a_sim_repository_needs_no_files_and_no_repository_changes_nothing(tmp_path: Path) -> None:
    extra = {
        "npudure_backend": "sim",
        "npudure_models": [{"name": "general"}, {"name": "plates", "boards": 1}],
    }
    out = render(tmp_path, "npudure_agent", "boards", ["agent.yml.j2"], extra)
    one = config.parse(config.AgentConfig, yaml.safe_load((out / "board1-agent.yml").read_text()), "board1")
    assert [(m.name, m.model) for m in one.models or []] == [("general", None), ("plates", None)]
    (tmp_path / "none").mkdir()
    out = render(tmp_path / "none", "npudure_agent", "boards", ["agent.yml.j2"], {"npudure_backend": "sim"})
    plain = config.parse(config.AgentConfig, yaml.safe_load((out / "board1-agent.yml").read_text()), "board1")
    assert plain.models is None


def test_the_agent_preflight_names_a_repositorys_mistakes(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yml"
    inventory = {"vars": {"ansible_connection": "local"}, "children": {"boards": {"hosts": {"board1": {}}}}}
    hosts.write_text(yaml.safe_dump({"all": inventory}))
    playbook = tmp_path / "preflight.yml"
    role = {"ansible.builtin.include_role": {"name": "npudure_agent", "tasks_from": "preflight.yml"}}
    playbook.write_text(yaml.safe_dump([{"hosts": "boards", "gather_facts": False, "tasks": [role]}]))
    typo = {"npudure_backend": "sim", "npudure_models": [{"name": "general", "boards": ["bord1"]}]}
    done = run_local_play(tmp_path, hosts, playbook, typo)
    output = done.stdout + done.stderr
    assert "npudure_models: model general: boards bord1 are not in the boards group (board1)" in output
    missing = {
        "npudure_backend": "onnx",
        "npudure_models": [{"name": "general", "src": str(tmp_path / "no.onnx")}],
    }
    done = run_local_play(tmp_path, hosts, playbook, missing)
    output = done.stdout + done.stderr
    assert f"model general: {tmp_path / 'no.onnx'} (npudure_models) is missing on the controller" in output
    assert "Traceback" not in output
