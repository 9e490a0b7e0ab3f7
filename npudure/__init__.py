"""NPUDure: one inference cluster from a shelf of Rockchip NPU boards."""

__version__ = "0.1.0"
