"""The Loom kit: CLI, local stack, and the tooling around the engine."""
