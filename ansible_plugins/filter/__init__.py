"""Filter plugins: the fleet-wide votes, lists and comparisons the roles and playbooks render.

Ansible loads each module here by path (ansible.cfg `filter_plugins`); the unit tests import them as
``ansible_plugins.filter.<module>``. A module imports no sibling: Ansible loads them one by one.
"""
