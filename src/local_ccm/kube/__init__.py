"""The project's small Kubernetes REST layer on the standard library.

Layers, bottom up: ``resources`` and ``request`` (pure request building and response
parsing), ``errors`` and ``backoff`` (pure), ``config`` (kubeconfig, in-cluster,
credentials), ``transport`` (the only sockets), ``client`` (verbs, retries), ``aio`` (asyncio
wrappers), ``informer`` (the one list+watch), ``nodes`` (the Node API seam), ``imds``.
Import what you need from the submodules; this package imports nothing eagerly.
"""
