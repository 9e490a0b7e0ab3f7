"""npudure_board_* series from a fake sysfs tree: units, trip points, absent sensors give no sample."""

from __future__ import annotations

from helpers.fake_board_sysfs import FakeBoardSysfs
from prometheus_client import CollectorRegistry, generate_latest

from npudure.agent.metrics import AgentMetrics
from npudure.backends.sim import SimBackend
from npudure.board.exporter import BoardCollector
from npudure.config import SimConfig


def scrape(root) -> str:
    registry = CollectorRegistry()
    registry.register(BoardCollector(root))
    return generate_latest(registry).decode()


def test_readings_in_base_units_with_trip_points(tmp_path) -> None:
    board = FakeBoardSysfs(tmp_path)
    board.set_temperature(71.5)
    board.set_cpu_mhz(1800)
    text = scrape(tmp_path)
    assert 'npudure_board_temperature_celsius{zone="soc-thermal"} 71.5' in text
    assert 'npudure_board_thermal_trip_celsius{trip="0",type="passive",zone="soc-thermal"} 85.0' in text
    assert 'npudure_board_thermal_trip_celsius{trip="1",type="critical",zone="soc-thermal"} 115.0' in text
    assert 'npudure_board_cpu_frequency_hertz{cpus="4-7",policy="policy4"} 1.8e+09' in text
    assert 'npudure_board_cpu_frequency_max_hertz{policy="policy4"} 1.8e+09' in text
    assert 'npudure_board_cpu_frequency_hardware_max_hertz{policy="policy0"} 2.256e+09' in text
    assert "npudure_board_npu_frequency_hertz 1e+09" in text


def test_a_missing_or_garbled_sensor_yields_no_sample(tmp_path) -> None:
    board = FakeBoardSysfs(tmp_path)
    (tmp_path / "class" / "thermal" / "thermal_zone0" / "temp").write_text("garbage\n")
    (tmp_path / "class" / "devfreq" / "fdab0000.npu" / "cur_freq").unlink()
    board.set_cpu_mhz(1200)
    text = scrape(tmp_path)
    assert "npudure_board_temperature_celsius{" not in text
    assert "\nnpudure_board_npu_frequency_hertz " not in text
    assert 'policy="policy0"} 1.2e+09' in text


def test_a_machine_without_sensors_exports_only_empty_families(tmp_path) -> None:
    text = scrape(tmp_path / "nothing")
    assert [line for line in text.splitlines() if not line.startswith("#")] == []


def test_an_emulated_board_exports_its_modelled_clock_beside_sysfs(tmp_path) -> None:
    FakeBoardSysfs(tmp_path)
    registry = CollectorRegistry()
    registry.register(BoardCollector(tmp_path, lambda: 1200.0))
    text = generate_latest(registry).decode()
    assert 'npudure_board_cpu_frequency_hertz{cpus="",policy="emulated"} 1.2e+09' in text
    assert 'npudure_board_cpu_frequency_hertz{cpus="4-7",policy="policy4"} 2.256e+09' in text


def test_the_sim_agent_models_its_cap_or_the_top_clock() -> None:
    backend = SimBackend(2, SimConfig())
    metrics = AgentMetrics(backend.emulation_totals, "/nonexistent", backend)
    assert 'policy="emulated"} 2.208e+09' in generate_latest(metrics.registry).decode()
    backend.set_cpu_cap(816)
    assert 'policy="emulated"} 8.16e+08' in generate_latest(metrics.registry).decode()
