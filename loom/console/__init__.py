"""Loom's web console: static pages and a same-origin, SigV4-signing proxy to the control plane.

``loom up`` serves it for the local stack; ``loom console --url`` for a deployed one. The
browser never holds AWS credentials: its tab holds a session token (sessionStorage, sent in a
header; no cookie), and the console signs each
``/api/...`` call itself (DESIGN.md, "Web console").
"""
