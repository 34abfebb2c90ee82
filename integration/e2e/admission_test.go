//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestShippedAdmissionPolicies: the ValidatingAdmissionPolicies of
// deploy/admission on the real cluster. The Job and Tenant tests show they
// let the Job controller create task pods and the manager create native
// Jobs; here a namespace user (impersonated, with edit rights on its
// namespace and no right to read Secrets) is refused a pod passing for a
// Job's task, a native Job passing for Ayatori's, and an Ayatori Job
// naming a Secret it may not read.
func TestShippedAdmissionPolicies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	apply(ctx, t, `apiVersion: v1
kind: Namespace
metadata: {name: e2e-admission}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: workloads, namespace: e2e-admission}
rules:
- apiGroups: ["", batch, execution.ayatori.ddupan.top]
  resources: [pods, jobs]
  verbs: [get, list, create, update, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: mallory, namespace: e2e-admission}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: workloads}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: mallory}]
`)
	defer func() {
		_, _ = cluster.Kubectl(context.Background(), nil, "delete", "namespace", "e2e-admission", "--wait=false")
	}()
	for _, c := range []struct{ name, manifest, want string }{
		{"pod passing for a Job's task", `apiVersion: v1
kind: Pod
metadata: {name: forged, namespace: e2e-admission, labels: {batch.kubernetes.io/controller-uid: 0a1b2c3d-0000-4000-8000-000000000000}}
spec: {containers: [{name: task, image: ayatori-test/debian:bookworm}]}
`, "only the Job controller may create pods"},
		{"native Job passing for Ayatori's", `apiVersion: batch/v1
kind: Job
metadata: {name: forged, namespace: e2e-admission, labels: {execution.ayatori.ddupan.top/job-uid: 0a1b2c3d-0000-4000-8000-000000000000}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: task, image: ayatori-test/debian:bookworm}]}}}
`, "only Ayatori's manager may create batch Jobs"},
		{"Job naming a Secret its author may not read", `apiVersion: execution.ayatori.ddupan.top/v1alpha1
kind: Job
metadata: {name: deputy, namespace: e2e-admission}
spec:
  task:
    image: ayatori-test/debian:bookworm
    command: [env]
    env: [{name: STOLEN, valueFrom: {secretKeyRef: {name: someone-elses, key: password}}}]
`, "someone-elses"},
	} {
		out, err := cluster.Kubectl(ctx, []byte(c.manifest), "--as=mallory", "create", "-f", "-")
		if err == nil {
			t.Errorf("%s: admitted for a namespace user: %s", c.name, out)
			continue
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%s: refused, but not by the policy (want %q): %s", c.name, c.want, out)
		}
	}
}
