"""Clients: `npudure status`, `npudure infer`, and the proxyless entry point (`npudure.connect`)."""
