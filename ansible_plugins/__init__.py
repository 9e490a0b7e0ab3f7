"""The controller-side Ansible plugins of the roles and playbooks (ansible.cfg `filter_plugins`)."""
