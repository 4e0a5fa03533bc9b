"""A reviewer's corrections to a run (docs/edits.md): the edits file (format.py) and how a run applies them
(apply.py: ``streamdeid run IN --edits E.json``)."""

from .apply import EditPlan, decide_removals, owner, with_added
from .format import FORMAT, VERSION, Box, Edits, SourceInfo, check_source, load_edits, save_edits

__all__ = ["FORMAT", "VERSION", "Box", "EditPlan", "Edits", "SourceInfo", "check_source", "decide_removals",
           "load_edits", "owner", "save_edits", "with_added"]
