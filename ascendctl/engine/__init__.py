"""The serving engine as part of a release: what it is (kinds/: one module per kind —
host executable, container image, offline venv — behind a router), its identity, its
place in the release sets (ascendctl/releases/), how a container is run, and the
node-side operations that make it present on every node."""
