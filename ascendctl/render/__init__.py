"""Renderers: every file a release needs, from the inventory, byte-identical every time.

`render_release(inv, release_id=...)` -> {node: [RenderedFile]} laid out relative to
`<deploy.root>/releases/<release_id>/`; `render_cluster(inv)` -> the nginx site and the
Prometheus files; `write_files(dir, files)` writes them atomically with their modes.
"""

from ascendctl.render.files import RenderedFile, release_dir, write_atomic, write_files
from ascendctl.render.release import render_cluster, render_release, render_warnings

__all__ = ["RenderedFile", "release_dir", "render_cluster", "render_release",
           "render_warnings", "write_atomic", "write_files"]
