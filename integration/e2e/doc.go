// Package e2e is the end-to-end suite (make e2e): Ayatori installed with
// `kubectl apply -k deploy/overlays/e2e` onto a cluster with a real node
// (integration.RealCluster: kubelet, containerd, runc, bridge CNI,
// kube-proxy, CoreDNS), every dependency running as pods, Jobs running real
// containers and an application pod using a Tenant's credentials. Its tests
// carry the build tag e2e and need root; docs/testing.md "End to end".
package e2e
