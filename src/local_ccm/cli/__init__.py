"""The composition root: one module per binary parses its flags, builds the adapters and hands
them to the process runtime (`local_ccm.runtime.process`).

- `cli.agent`: `local-ccm` (loop, run-once, `detect`);
- `cli.manager`: `local-ccm-controller-manager` and its table of controllers;
- `cli.lifecycle`, `cli.ipam`: `node-lifecycle-controller`, `node-ipam-controller`;
- `cli.central`: the path of the three central binaries, their typed controller table;
  `cli.common`: what all share (flags, logging, signals). The process host is `runtime.host`.

Nothing is imported here, so each binary loads only its own modules (memory budget).
"""
