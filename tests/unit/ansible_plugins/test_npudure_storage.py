"""The monitoring storage filters against the renders of the Jinja they replaced (real Ansible)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_plugins.filter.npudure_storage import retention_size, storage_mount

GIB = 2**30
STORAGE = "/var/lib/prometheus/metrics2"


def test_the_longest_mount_point_holding_the_folder() -> None:
    mounts = [
        {"mount": "/", "size_available": 40 * GIB},
        {"mount": "/var/lib", "size_available": 8 * GIB},
        {"mount": "/var/lib/prom", "size_available": 1},  # a prefix of the path, not a parent
    ]
    mount = storage_mount(mounts, STORAGE)
    assert mount == {"mount": "/var/lib", "size_available": 8 * GIB}
    assert retention_size(mount, "", 0.25, 512) == "2048MB"


def test_a_mount_point_with_a_trailing_slash() -> None:
    mounts = [{"mount": "/var/", "size_available": 4 * GIB}, {"mount": STORAGE + "x", "size_available": 1}]
    mount = storage_mount(mounts, STORAGE)
    assert mount == {"mount": "/var/", "size_available": 4 * GIB}
    assert retention_size(mount, "", 0.25, 512) == "1024MB"


def test_never_below_the_minimum() -> None:
    mount = storage_mount([{"mount": "/", "size_available": 10 * 2**20}], STORAGE)
    assert retention_size(mount, "", 0.25, 512) == "512MB"


def test_no_facts_or_no_size_gives_the_minimum() -> None:
    assert storage_mount([], STORAGE) == {}
    assert retention_size({}, "", 0.25, 512) == "512MB"
    assert retention_size(storage_mount([{"mount": "/"}], STORAGE), "", 0.25, 512) == "512MB"


def test_an_explicit_size_wins() -> None:
    assert retention_size({"mount": "/", "size_available": 8 * GIB}, "3GB", 0.25, 512) == "3GB"


def test_inventory_strings_count_as_numbers() -> None:
    assert retention_size({"size_available": str(8 * GIB)}, "", "0.25", "512") == "2048MB"


def test_bad_input_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match="no 'mount' key"):
        storage_mount([{"size_available": 1}], STORAGE)
    with pytest.raises(AnsibleFilterError, match="npudure_monitoring_retention_disk_fraction 'a lot'"):
        retention_size({"size_available": 1}, "", "a lot", 512)
