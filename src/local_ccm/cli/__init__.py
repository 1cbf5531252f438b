"""The composition root: one module per binary parses its flags, builds the adapters and hands
them to the process runtime (`local_ccm.runtime.process`).

- `cli.agent`: `local-ccm` (loop, run-once, `detect`);
- `cli.manager`: `local-ccm-controller-manager`, and the path of the two central binaries;
- `cli.lifecycle`, `cli.ipam`: `node-lifecycle-controller`, `node-ipam-controller`;
- `cli.common`: what they share.

Nothing is imported here, so each binary loads only its own modules (memory budget).
"""
