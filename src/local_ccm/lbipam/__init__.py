"""The LoadBalancer address component: the `service-lb-ipam` controller of
`local-ccm-controller-manager` (`--controllers=service-lb-ipam`)."""
