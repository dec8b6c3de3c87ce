"""Loom's web console: static pages and a same-origin, SigV4-signing proxy to the control plane.

``loom up`` serves it for the local stack; ``loom console --url`` for a deployed one. The
browser never holds AWS credentials: it holds a session cookie, and the console signs each
``/api/...`` call itself (DESIGN.md, "Web console").
"""
