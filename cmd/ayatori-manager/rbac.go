package main

// Leader election (--leader-elect) uses a Lease in the controller namespace.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ayatori-system,resources=leases,verbs=get;create;update
// Its LeaderElection Events are core/v1 Events in that namespace (the
// reconcilers' Events are events.k8s.io):
// +kubebuilder:rbac:groups="",namespace=ayatori-system,resources=events,verbs=create;patch
