"""What the agent and the scheduler share as long-running services: process set-up (runtime),
systemd readiness and watchdog (sdnotify), the Prometheus endpoint (metrics_http)."""
