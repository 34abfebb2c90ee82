package main

// Leader election (--leader-elect) uses a Lease in the controller namespace.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ayatori-system,resources=leases,verbs=get;create;update
