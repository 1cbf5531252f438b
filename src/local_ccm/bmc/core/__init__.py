"""The BMC component's pure half: addresses, Redfish resources and error kinds. Pure, no I/O."""
