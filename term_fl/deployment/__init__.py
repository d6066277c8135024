"""What term-fl runs beside Flower's Deployment Engine (SuperLink and SuperNodes in their own processes).

- :mod:`term_fl.deployment.supernode` — ``term-fl-supernode``: ``flower-supernode``
  with a fork server that has imported torch and term-fl once, so that each
  ClientApp message costs a ``fork`` instead of a fresh interpreter and
  ``import torch``;
- :mod:`term_fl.deployment.forkserver` — that fork server;
- :mod:`term_fl.deployment.shim` — the ``flwr-clientapp`` that Flower's SuperExec
  starts per message, handing the message's process over to the fork server;
- :mod:`term_fl.deployment.replies` — the ServerApp's wait for replies, polled
  every fraction of a second instead of Flower's 3 s.

docs/scaling-out.md says when and why; deploy/README.md how to deploy.
"""
