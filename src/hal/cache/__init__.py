"""The data plane: the cache control plane and Redis-protocol cache nodes.

Owns: the cache control plane (``hal cache control-plane``, the HAL cache OpenAPI contract in
``spec/``, served at ``/openapi.yaml``), its durable store, and the cache node (``hal cache
node``) that speaks the Redis protocol and pulls misses through the cache tree. See
``README.md`` for the picture and the vocabulary.

Must not import ``hal.api``, ``hal.state`` or ``hal.scheduler``: the cache is its own plane,
and nodes reach the control plane only over HTTP. It may be *mounted* by the main server
(``hal.cache.app.CacheControlPlane``), never the other way round.
"""
