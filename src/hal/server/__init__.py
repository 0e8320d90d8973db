"""The control plane's services and their wiring (``control_plane.ControlPlane``): the
cluster mirror's users that are not HTTP — priority, predictions, the data plane's view,
the autoscaler, job mail, ``scontrol reconfigure``, explanations, tokens — each typed, made
in one constructor and reached by the HTTP edge through ``services.Services``.

Imports ``state``, ``scheduler``, ``predict``, ``observe``, ``cloud``, ``htc``, ``config``,
``wire`` and ``core``; never ``hal.api`` (the HTTP edge imports this package, not the other
way round), nor the node side (``agent``, ``compat``, ``client``, ``cli``).
"""
