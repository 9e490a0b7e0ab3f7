"""The controller's workshop: the tools that build, convert, emulate and measure the fleet — the bench
harness (``npudure bench``), the emulated lab and ``npudure local``, the fault suite, model conversion.
Never in the serving path: the boards and the scheduler run ``npudure`` alone (docs/adr/0018-two-wings.md).

The commands stay ``npudure bench|lab|local|model|faults``: ``npudure.cli`` imports them from here by name.
"""

from pathlib import Path

# Released with the runtime it drives, at the same version (tests/unit/test_versions.py).
__version__ = "0.1.0"

# The checkout the workshop runs from (npudure_workshop/ -> the repository): the lab and the
# fault suite find playbooks/, ansible.cfg and the sources the wheelhouse is built from there.
REPO = Path(__file__).resolve().parents[2]
