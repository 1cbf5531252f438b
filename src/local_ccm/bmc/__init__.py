"""The BMC component: reads each Node's power state from its server's baseboard management
controller over Redfish (`docs/bmc.md`).

`core/` parses what operators write and what BMCs answer (addresses, System resources,
errors), with no I/O; `redfish` is the one HTTP client of the component: one persistent
connection per BMC, one request in flight, every failure one of a few kinds
(`core.errors.ErrorKind`).
"""
