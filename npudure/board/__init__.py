"""What a board's own hardware tells and takes: its SoC, sensors (telemetry), CPU clocks (cpufreq), sysfs."""
